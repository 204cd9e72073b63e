"""IsolatedHooks: the HookSet that runs a patch's hooks in a warm, isolated worker process.

The runtime (or the canary) holds one IsolatedHooks per overlay. Each call is one JSON line to
the worker and one back, under a wall-clock deadline polled on the pipe; the call never raises
and never blocks past its budget. Whatever goes wrong (timeout, crash, EOF, malformed or
oversized response) kills the worker's whole process group, is counted in `events`, and the call
has no effect: the state handed in comes back unchanged. A fresh worker is started lazily on
the next call (with the hooks loaded again).

Static checks first: the constructor runs the static checks on the patch and, if they reject
it, never starts a worker (every call: fault `invalid`). Only `from_sources` (tests and
diagnostics of the worker itself) skips them, explicitly.

Fail closed: the worker reports which isolation layers it applied (see `isolation`). If any
required layer is missing and `SandboxConfig.allow_unisolated` is False, the worker is killed,
`isolated` is False, a loud log line says why, and every call returns `unisolated_refused`.

Why one module: the parent's side of the worker pipe is one state machine (start,
call, fault accounting, recycle, close) around one process; its parts share the lock and the
worker handle.
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
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from harness_r1.contracts import HookCode, HookFaultKind, HookName, Patch
from harness_r1.harness import HookCall
from harness_r1.sandbox.isolation import IsolationReport, IsolationSettings
from harness_r1.sandbox.metrics import SandboxMetrics

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

# Faults a call can end with, and the counter in `events` each one increments.
FAULT_COUNTERS: dict[str, str] = {
    HookFaultKind.RAISED: "raised",
    HookFaultKind.TIMEOUT: "timeouts",
    HookFaultKind.CRASHED: "crashes",
    HookFaultKind.JUNK: "junk",
    HookFaultKind.OVERSIZED: "oversized",
    HookFaultKind.MEMORY: "memory",
    HookFaultKind.VIOLATION: "violations",  # plus "violations.<kind>"
    HookFaultKind.INVALID: "invalid",
    HookFaultKind.UNISOLATED_REFUSED: "refused",
    HookFaultKind.CLOSED: "closed",
    HookFaultKind.DISABLED: "disabled",
}
FAULTS = tuple(FAULT_COUNTERS)
# the faults a call of the patch itself causes that end the worker (a restart for the next
# call), by the words of the reason; crashes are not among them: a worker killed from outside
# (the OOM killer, an operator) or one that cannot start says nothing about the patch
_KILLING = {"timeout": "timeouts", "memory fault": "memory"}


@dataclass(frozen=True)
class SandboxConfig:
    """How hook workers are isolated and budgeted."""

    call_budget_s: float = 0.5  # wall clock per call, round trip included (load-tolerant)
    start_budget_s: float = 10.0  # interpreter start + isolation + hello
    load_budget_s: float = 2.0  # compiling the hooks
    memory_mb: int = 512  # RLIMIT_AS
    worker_rss_mb: int = 128  # peak RSS past which a warm worker is recycled (a fresh one: ~20)
    cpu_seconds: int = 2  # CPU per call (soft RLIMIT_CPU, re-armed each call): backstop
    worker_cpu_seconds: int = 300  # CPU over a worker's life (hard RLIMIT_CPU); recycled before
    nofile: int = 16
    max_response_bytes: int = 256 * 1024
    max_request_bytes: int = 1024 * 1024
    recursion_limit: int = 300
    uid: int = 65534  # the worker drops to this uid/gid when started as root
    gid: int = 65534
    min_landlock_abi: int = 1
    # started as non-root the worker cannot take a uid of its own: the uid layer fails (every
    # patch refused) unless this accepts that it shares the daemon's uid (Landlock's read denial
    # then is what keeps it out of the daemon's /proc files); said in a metric and a log line
    accept_shared_uid: bool = False
    allow_unisolated: bool = False  # development only: run even if a layer is missing
    python: str = sys.executable
    restart_backoff_s: float = 0.5  # after a failed start, doubling up to 30 s
    # per-overlay budget: after this many calls that cost the worker (timeouts, memory
    # faults) the hook set stops calling the patch (every later call ends `disabled` at
    # once), so one slow candidate cannot hold up the lockstep episodes of the others with a
    # kill and a restart per call; 0 = never
    max_worker_kills: int = 3
    enable_probe: bool = False  # tests/diagnostics: the worker answers `probe` requests
    fail_layer: str = ""  # tests only: make the worker report this layer as failed


class _Fault(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail[:500]


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


def _new_events() -> dict[str, int]:
    names = ["calls", "ok", "starts", "restarts", "start_failures", "recycles", "load_errors"]
    # "disabled" appears once the per-overlay budget is spent (most hook sets never see it)
    counters = [c for c in FAULT_COUNTERS.values() if c != "disabled"]
    return dict.fromkeys([*names, "unisolated_workers", *counters], 0)


class IsolatedHooks:
    """HookSet over an isolated warm worker. Thread-safe (one lock); `call` never raises."""

    def __init__(
        self,
        patch: Patch,
        config: SandboxConfig | None = None,
        *,
        overlay_id: str | None = None,
        start: bool = True,
        static_checks: bool = True,
        metrics: SandboxMetrics | None = None,
    ) -> None:
        self.overlay_id = overlay_id or f"patch-{patch.sha256()[:16]}"
        self.metrics = metrics
        self.static_rejection: str | None = None
        if not patch.runnable:  # replace/remove mean something only composed (sandbox.compose)
            self.static_rejection = (
                "not_composed: a patch with 'replace' or 'remove' entries runs only composed "
                "onto an incumbent"
            )
            start = False
        elif static_checks:
            from harness_r1.sandbox.intake import check

            self.static_rejection = check(patch)
            if self.static_rejection is not None:
                start = False
        self.config = config or SandboxConfig()
        self._sources = {str(h.hook): h.code for h in patch.hooks}
        self._hooks = {HookName(h.hook) for h in patch.hooks}
        self.events: dict[str, int] = _new_events()
        self.load_errors: dict[str, str] = {}
        self.report: IsolationReport | None = None
        self.last_start_s: float | None = None
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._refused: str | None = None
        self.disabled_reason: str | None = None  # set once the per-overlay budget is spent
        self._closed = False
        self._retry_at = 0.0
        self._backoff = 0.0
        if start:
            with self._lock, contextlib.suppress(_Fault):
                self._ensure_worker()

    @classmethod
    def from_sources(
        cls,
        hooks: Mapping[HookName | str, str],
        config: SandboxConfig | None = None,
        *,
        env: str = "any",
        overlay_id: str | None = None,
        start: bool = True,
        static_checks: bool = False,
    ) -> IsolatedHooks:
        """Raw hook sources, by default WITHOUT the static checks: for tests and diagnostics of
        the worker's own containment. Production code builds IsolatedHooks from a Patch."""
        codes = [HookCode(hook=HookName(name), code=code) for name, code in hooks.items()]
        patch = Patch(env=env, hooks=codes)
        return cls(patch, config, overlay_id=overlay_id, start=start, static_checks=static_checks)

    # --- the HookSet protocol -------------------------------------------------------------

    @property
    def isolated(self) -> bool:
        """True when the current (or last) worker reported every isolation layer in force."""
        return self._refused is None and self.report is not None and self.report.isolated

    @property
    def worker_pid(self) -> int | None:
        worker = self._worker
        return worker.pid if worker is not None else None

    def has(self, hook: HookName) -> bool:
        try:
            return HookName(hook) in self._hooks
        except ValueError:
            return False

    def call(self, hook: HookName, ctx: dict[str, Any], state: dict[str, Any]) -> HookCall:
        started = time.perf_counter()
        with self._lock:
            self.events["calls"] += 1
            if self.static_rejection is not None:
                self.events["invalid"] += 1
                detail = f"rejected by the static checks: {self.static_rejection}"
                return HookCall(state=state, fault=HookFaultKind.INVALID, detail=detail)
            if self.disabled_reason is not None:
                self._count_fault(HookFaultKind.DISABLED, _Fault("disabled", ""))
                return HookCall(
                    state=state, fault=HookFaultKind.DISABLED, detail=self.disabled_reason
                )
            try:
                value, new_state = self._call_locked(str(hook), ctx, state)
            except _Fault as fault:
                self._count_fault(fault.kind, fault)
                self._disable_if_over_budget()
                return HookCall(
                    state=state,
                    fault=fault.kind,
                    detail=fault.detail,
                    seconds=time.perf_counter() - started,
                )
            self.events["ok"] += 1
            return HookCall(value=value, state=new_state, seconds=time.perf_counter() - started)

    def probe(self, port: int = 0) -> dict[str, Any]:
        """Run the worker's self-test of its isolation (needs `enable_probe`); test use."""
        with self._lock:
            try:
                worker = self._ensure_worker()
                response = self._request(worker, {"op": "probe", "port": port}, 10.0)
            except _Fault as fault:
                raise RuntimeError(f"probe failed: {fault}") from None
            result = response.get("probe")
            if not isinstance(result, dict):
                raise RuntimeError(f"probe failed: {response}")
            return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._discard_worker()

    def __enter__(self) -> IsolatedHooks:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._closed = True
            self._discard_worker()
        except Exception:  # noqa: BLE001, S110 - nothing may escape a finaliser
            pass

    # --- internals ------------------------------------------------------------------------

    def _call_locked(
        self, hook: str, ctx: dict[str, Any], state: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        if self._closed:
            raise _Fault(HookFaultKind.CLOSED, "this hook set is closed")
        if hook not in self._sources:
            raise _Fault(HookFaultKind.INVALID, f"the patch has no {hook} hook")
        if self._refused is not None:
            raise _Fault(HookFaultKind.UNISOLATED_REFUSED, self._refused)
        worker = self._ensure_worker()
        if hook in self.load_errors:
            raise _Fault(HookFaultKind.INVALID, self.load_errors[hook])
        request = {"op": "call", "hook": hook, "ctx": ctx, "state": state}
        response = self._request(worker, request, self.config.call_budget_s)
        if "fault" in response:
            kind = str(response["fault"])
            if kind == HookFaultKind.MEMORY or self._grown(response):
                # a MemoryError leaves a heap nobody should trust with the next call
                self.events["recycles"] += 1
                self._discard_worker()
            if kind == HookFaultKind.VIOLATION:
                key = f"violations.{response.get('kind', 'unknown')}"
                self.events[key] = self.events.get(key, 0) + 1
            raise _Fault(
                kind if kind in FAULTS else HookFaultKind.JUNK, str(response.get("detail", ""))
            )
        new_state = response.get("state")
        if "value" not in response or not isinstance(new_state, dict):
            self._discard_worker()
            raise _Fault(HookFaultKind.JUNK, "malformed response from the worker")
        cpu = response.get("cpu")
        recycle_at = self.config.worker_cpu_seconds - 2 * self.config.cpu_seconds - 1
        if (isinstance(cpu, int | float) and cpu > recycle_at) or self._grown(response):
            self.events["recycles"] += 1
            self._discard_worker()  # planned: the next call starts a fresh worker
        return response["value"], new_state

    def _grown(self, response: dict[str, Any]) -> bool:
        """The worker's RSS is past `worker_rss_mb` after the call: what a hook keeps alive
        between calls (or leaks) must not accumulate in a warm worker."""
        rss = response.get("rss_mb")
        return isinstance(rss, int | float) and rss > self.config.worker_rss_mb

    def _disable_if_over_budget(self) -> None:
        """Every timeout or memory fault costs a worker kill and a restart; past
        `max_worker_kills` of them the patch is not called again (a patch that kills its worker
        on every call would otherwise restart it on every call, at the pace of the episodes)."""
        limit = self.config.max_worker_kills
        kills = {name: self.events.get(counter, 0) for name, counter in _KILLING.items()}
        total = sum(kills.values())
        if limit and total >= limit and self.disabled_reason is None:
            said = ", ".join(f"{n} {name}{'' if n == 1 else 's'}" for name, n in kills.items() if n)
            self.disabled_reason = (
                f"disabled after {said} (budget {self.config.call_budget_s:g} s "
                f"and {self.config.memory_mb} MB a call): make each hook call fast and small, "
                "with bounded loops and no backtracking regex"
            )
            self._discard_worker()
            log.info("sandbox.overlay_disabled", overlay=self.overlay_id, kills=kills)

    def _count_fault(self, kind: str, fault: _Fault) -> None:
        counter = FAULT_COUNTERS.get(kind, kind)
        self.events[counter] = self.events.get(counter, 0) + 1
        if self.metrics is not None:
            self.metrics.event(counter)
        log.debug("sandbox.hook_fault", overlay=self.overlay_id, fault=kind, detail=fault.detail)

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


def isolated_hooks_factory(
    config: SandboxConfig | None = None, metrics: SandboxMetrics | None = None
) -> Callable[[Patch, str], IsolatedHooks]:
    """The canary's hook-set factory: each candidate's patch in its own isolated worker, the
    candidate id as the overlay id stamped on its trajectories; `metrics` counts their events."""
    sandbox = config or SandboxConfig()

    def factory(patch: Patch, candidate_id: str) -> IsolatedHooks:
        return IsolatedHooks(patch, sandbox, overlay_id=candidate_id, metrics=metrics)

    return factory
