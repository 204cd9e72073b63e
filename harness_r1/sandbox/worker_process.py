"""The parent's side of one hook worker process: starting it (the bootstrap command line, the
hello with its isolation report, loading the hooks), one JSON request and its answer under a
deadline, and killing it.

The worker is started as `python -I -S -B -W ignore -c BOOTSTRAP ARGS` (see `worker_main.py`)
with an empty environment, in a process group of its own. Whatever goes wrong in an exchange
(timeout, crash, EOF, malformed or oversized response) kills that whole group and raises a
`_Fault` for the caller to count; a failed start backs off before the next try. Fail closed:
if the hello reports a required isolation layer missing and `allow_unisolated` is False, the
worker is killed and every later call is refused (`unisolated_refused`).

Why a module of its own: the process and its pipes are one state machine (spawn, handshake,
request, kill) around one child and its descriptors, apart from what a hook call means to the
HookSet (`executor.py`: static rejection, fault accounting, the per-overlay budget). It is the
base class of `IsolatedHooks`, not an object of its own, because both halves share the hook
set's one lock, its worker handle and its counters.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from harness_r1.contracts import HookFaultKind
from harness_r1.sandbox.isolation import IsolationReport, IsolationSettings
from harness_r1.sandbox.metrics import SandboxMetrics
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.sandbox.worker_faults import FAULTS, _Fault

log = structlog.get_logger(__name__)

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_SANDBOX_DIR = Path(__file__).resolve().parent
_STDERR_TAIL = 4096

_BOOTSTRAP = """\
import sys, json, types
boot = json.loads(sys.argv[1])
sys.path[0:0] = boot["path"]
for name, path in boot["packages"]:
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
from harness_r1.sandbox.worker_main import main
main(boot["config"])
"""


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    fd_in: int  # we write requests here
    fd_out: int  # we read responses here
    fd_err: int
    poll_out: select.poll
    poll_in: select.poll
    buffer: bytearray = field(default_factory=bytearray)
    stderr_tail: bytearray = field(default_factory=bytearray)
    report: IsolationReport | None = None
    next_id: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _worker_sys_path() -> list[str]:
    paths = [str(_PROJECT_ROOT)]
    spec = importlib.util.find_spec("pyseccomp")
    if spec is not None and spec.origin:
        paths.append(str(Path(spec.origin).parent))
    return paths


class _WorkerProcess:
    """One warm worker process behind a HookSet; the caller holds the lock. Its state is set by
    the subclass (`IsolatedHooks.__init__`) before any worker starts."""

    config: SandboxConfig
    overlay_id: str
    metrics: SandboxMetrics | None
    events: dict[str, int]
    load_errors: dict[str, str]
    report: IsolationReport | None
    last_start_s: float | None
    _sources: dict[str, str]
    _worker: _Worker | None
    _refused: str | None
    _closed: bool
    _retry_at: float
    _backoff: float

    def _request(self, worker: _Worker, body: dict[str, Any], budget: float) -> dict[str, Any]:
        """One request/response under a deadline; any protocol failure kills the worker."""
        worker.next_id += 1
        request_id = worker.next_id
        try:
            line = json.dumps({"id": request_id, **body}, allow_nan=False).encode("ascii")
        except (TypeError, ValueError, RecursionError) as err:
            raise _Fault(HookFaultKind.JUNK, f"ctx/state are not JSON-able: {err}") from err
        data = line + b"\n"  # the worker's limit counts the newline too
        if len(data) > self.config.max_request_bytes:
            raise _Fault(
                HookFaultKind.JUNK,
                f"request is {len(data)} bytes; the limit is {self.config.max_request_bytes}",
            )
        deadline = time.monotonic() + budget
        try:
            self._write(worker, data, deadline)
            answer = self._read_line(worker, deadline)
            try:
                response = json.loads(answer, parse_constant=_reject_constant)
            except (ValueError, RecursionError) as err:
                raise _Fault(HookFaultKind.JUNK, f"malformed response: {err}") from err
            if not isinstance(response, dict) or response.get("id") != request_id:
                raise _Fault(HookFaultKind.JUNK, "response does not answer the request")
        except _Fault as fault:
            self._discard_worker()
            raise self._explain(worker, fault) from None
        self._drain_stderr(worker)
        return response

    def _write(self, worker: _Worker, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Fault(HookFaultKind.TIMEOUT, "the worker did not take the request in time")
            if not worker.poll_in.poll(math.ceil(remaining * 1000)):
                continue
            try:
                view = view[os.write(worker.fd_in, view) :]
            except BlockingIOError:
                continue
            except OSError as err:  # EPIPE: the worker is gone
                raise _Fault(HookFaultKind.CRASHED, f"writing to the worker: {err}") from err

    def _read_line(self, worker: _Worker, deadline: float) -> bytes:
        cap = self.config.max_response_bytes + 4096
        buffer = worker.buffer
        while True:
            newline = buffer.find(b"\n")
            if newline >= 0:
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                return line
            if len(buffer) > cap:
                raise _Fault(HookFaultKind.OVERSIZED, f"response exceeds {cap} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Fault(HookFaultKind.TIMEOUT, "no response within the budget")
            if not worker.poll_out.poll(math.ceil(remaining * 1000)):
                continue
            try:
                chunk = os.read(worker.fd_out, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                raise _Fault(HookFaultKind.CRASHED, "the worker closed its pipe")
            buffer += chunk

    def _explain(self, worker: _Worker, fault: _Fault) -> _Fault:
        """Refine a crash by how the (now reaped) worker ended."""
        code = worker.proc.returncode
        if fault.kind != HookFaultKind.CRASHED or code is None:
            return fault
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            if -code == signal.SIGXCPU:
                return _Fault(HookFaultKind.TIMEOUT, "the worker hit its CPU limit (SIGXCPU)")
            detail = f"killed by {name}"
        else:
            detail = f"exited with status {code}"
        tail = bytes(worker.stderr_tail[-300:]).decode("utf-8", "replace").strip()
        return _Fault(
            HookFaultKind.CRASHED,
            f"{fault.detail}; {detail}" + (f"; stderr: {tail}" if tail else ""),
        )

    def _drain_stderr(self, worker: _Worker) -> None:
        for _ in range(16):
            try:
                chunk = os.read(worker.fd_err, 1 << 16)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                return
            worker.stderr_tail += chunk
            del worker.stderr_tail[:-_STDERR_TAIL]

    def _ensure_worker(self) -> _Worker:
        if self._closed:
            raise _Fault(HookFaultKind.CLOSED, "this hook set is closed")
        if self._refused is not None:
            raise _Fault(HookFaultKind.UNISOLATED_REFUSED, self._refused)
        if self._worker is not None:
            return self._worker
        if time.monotonic() < self._retry_at:
            raise _Fault(HookFaultKind.CRASHED, "the worker is unavailable (restart backoff)")
        try:
            worker = self._start_worker()
        except _Fault as fault:
            self.events["start_failures"] += 1
            self._backoff = min(30.0, max(self.config.restart_backoff_s, self._backoff * 2))
            self._retry_at = time.monotonic() + self._backoff
            log.error(
                "sandbox.worker_start_failed",
                overlay=self.overlay_id,
                detail=fault.detail,
                retry_in_s=self._backoff,
            )
            raise
        self._backoff = 0.0
        return worker

    # Why this size: starting a worker is one sequence (spawn, handshake, load, isolation report)
    # whose steps share the half-started process's cleanup
    def _start_worker(self) -> _Worker:
        cfg = self.config
        isolation = IsolationSettings(
            memory_mb=cfg.memory_mb,
            cpu_seconds=cfg.cpu_seconds,
            worker_cpu_seconds=cfg.worker_cpu_seconds,
            nofile=cfg.nofile,
            uid=cfg.uid,
            gid=cfg.gid,
            min_landlock_abi=cfg.min_landlock_abi,
            accept_shared_uid=cfg.accept_shared_uid,
            fail_layer=cfg.fail_layer,
        )
        boot = {
            "path": _worker_sys_path(),
            "packages": [
                ["harness_r1", str(_SANDBOX_DIR.parent)],
                ["harness_r1.sandbox", str(_SANDBOX_DIR)],
            ],
            "config": {
                "isolation": asdict(isolation),
                "allow_unisolated": cfg.allow_unisolated,
                "max_response_bytes": cfg.max_response_bytes,
                "max_request_bytes": cfg.max_request_bytes,
                "recursion_limit": cfg.recursion_limit,
                "cpu_seconds": cfg.cpu_seconds,
                "enable_probe": cfg.enable_probe,
            },
        }
        argv = [cfg.python, "-I", "-S", "-B", "-W", "ignore", "-c", _BOOTSTRAP, json.dumps(boot)]
        started = time.perf_counter()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={},
                cwd="/",
                close_fds=True,
                start_new_session=True,
                bufsize=0,
            )
        except OSError as err:
            raise _Fault(HookFaultKind.CRASHED, f"could not start the worker: {err}") from err
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        fds = (proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno())
        for fd in fds:
            os.set_blocking(fd, False)
        poll_in, poll_out = select.poll(), select.poll()
        poll_in.register(fds[0], select.POLLOUT)
        poll_out.register(fds[1], select.POLLIN)
        worker = _Worker(proc, fds[0], fds[1], fds[2], poll_out=poll_out, poll_in=poll_in)
        self._worker = worker
        self.events["starts"] += 1
        if self.events["starts"] > 1:
            self.events["restarts"] += 1
        try:
            hello = self._read_hello(worker)
        except _Fault as fault:
            self._discard_worker()
            raise self._explain(worker, fault) from None
        self.last_start_s = time.perf_counter() - started
        report = IsolationReport.from_dict(hello.get("report") or {})
        worker.report = self.report = report
        if self.metrics is not None:
            self.metrics.isolated.set(1 if report.isolated else 0)
            self.metrics.shared_uid.set(1 if report.shared_uid and report.isolated else 0)
            self.metrics.event("starts")
        if report.shared_uid and report.isolated:
            _say_shared_uid_once(report.uid)
        if not report.isolated:
            failed = "; ".join(f"{k}: {v}" for k, v in report.failed.items())
            if not cfg.allow_unisolated:
                self._refused = f"isolation incomplete ({failed}); untrusted hooks refused"
                log.error(
                    "sandbox.unisolated_refused",
                    overlay=self.overlay_id,
                    failed=report.failed,
                    hint="fix the host, or pass allow_unisolated=True for development only",
                )
                self._discard_worker()
                raise _Fault(HookFaultKind.UNISOLATED_REFUSED, self._refused)
            self.events["unisolated_workers"] += 1
            log.warning(
                "sandbox.RUNNING_UNISOLATED",
                overlay=self.overlay_id,
                failed=report.failed,
                note="allow_unisolated=True: model-written code runs without full isolation",
            )
        try:  # a load that fails before it reaches the worker must not leave it running
            response = self._request(
                worker, {"op": "load", "hooks": self._sources}, cfg.load_budget_s
            )
        except _Fault:
            self._discard_worker()
            raise
        errors = response.get("errors")
        if "fault" in response or not isinstance(errors, dict):
            self._discard_worker()
            kind = str(response.get("fault", "junk"))
            raise _Fault(
                kind if kind in FAULTS else HookFaultKind.JUNK, str(response.get("detail", ""))
            )
        self.load_errors = {str(k): str(v) for k, v in errors.items()}
        if self.load_errors:
            self.events["load_errors"] = len(self.load_errors)
        return worker

    def _read_hello(self, worker: _Worker) -> dict[str, Any]:
        line = self._read_line(worker, time.monotonic() + self.config.start_budget_s)
        try:
            hello = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as err:
            raise _Fault(HookFaultKind.JUNK, f"malformed hello: {err}") from err
        if not isinstance(hello, dict) or hello.get("hello") is not True:
            raise _Fault(HookFaultKind.JUNK, "the worker did not say hello")
        return hello

    def _discard_worker(self) -> None:
        """Kill the worker's whole process group, reap it, close our pipe ends."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)  # before wait(): the pgid cannot be reused
        try:
            worker.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            log.error("sandbox.worker_not_reaped", pid=worker.pid)
        self._drain_stderr(worker)
        for stream in (worker.proc.stdin, worker.proc.stdout, worker.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


_shared_uid_said = threading.Event()


def _say_shared_uid_once(uid: int) -> None:
    """One warning per process, not per worker start: an agent restarts workers all day."""
    if not _shared_uid_said.is_set():
        _shared_uid_said.set()
        log.warning(
            "sandbox.shared_uid_accepted",
            uid=uid,
            note="hook workers run with this process's uid (accept_shared_uid): Landlock's "
            "read denial is the barrier to this process's /proc files; run as root for a "
            "uid of their own",
        )
