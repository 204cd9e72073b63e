"""The hook worker: a warm child process that runs model-written hooks behind isolation layers.

Started by `harness_r1.sandbox.worker_process` as `python -I -S -B -W ignore -c BOOTSTRAP
ARGS`: the bootstrap puts the project and pyseccomp's directory on sys.path and registers bare
package modules for `harness_r1` and `harness_r1.sandbox` (their __init__ files are not run),
then calls `main`. Only the standard library, this module, `isolation`, `hooklib` and pyseccomp
are imported, all before the isolation layers go up (after the uid drop the interpreter's own
files may be unreadable).

Protocol: newline-delimited JSON on two private pipe descriptors (the originals of fd 0 and 1,
which then point at /dev/null so nothing a hook reaches can write into the protocol). Nothing is
ever unpickled. First line out: a hello with the isolation report. Then one response per request:

  {"id", "op": "load", "hooks": {name: source}}   -> {"id", "loaded": [...], "errors": {...}}
  {"id", "op": "call", "hook", "ctx", "state"}     -> {"id", "value", "state", "cpu"}
                                                   or {"id", "fault", "detail", "cpu"}
  {"id", "op": "ping"}                             -> {"id", "pong": true, "cpu"}
  {"id", "op": "probe", "port"}                    -> {"id", "probe": {...}} (probe-enabled only)

Each hook source is compiled once at load; every call executes the module code in a fresh copy
of `hooklib.hook_globals()` (the whitelisted builtins, `re`, `math`, `similarity`, `closest`:
the same tables the static checks enforce) and then calls `hook(ctx, state)`, so nothing a hook
keeps in module globals survives into the next call or episode. No tracing: the parent's
wall-clock deadline (it kills the process group) and RLIMIT_CPU bound a call.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import resource
import sys
import types
from collections.abc import Callable
from typing import Any, BinaryIO

from harness_r1.sandbox import hooklib
from harness_r1.sandbox.isolation import IsolationReport, IsolationSettings, apply_all

_ONLY_AST = 0x400  # ast.PyCF_ONLY_AST, without importing ast
_DETAIL_CHARS = 300


def _short(err: BaseException) -> str:
    try:
        text = f"{type(err).__name__}: {err}"
    except Exception:  # noqa: BLE001 - str() of an exception must not take the worker down
        text = type(err).__name__
    return text[:_DETAIL_CHARS]


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


#: /proc/self/statm, opened before the isolation layers go up and kept open (the layers may
#: deny opening it later). Not ru_maxrss: Linux carries the parent's peak over fork and exec,
#: so a worker of a large daemon would report the daemon's size.
_statm_fd: int | None = None
#: /proc/self/status, kept open for the probe only (tests read the layers' state through it)
_status_fd: int | None = None
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _open_statm() -> int | None:
    global _statm_fd
    try:
        _statm_fd = os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        _statm_fd = None
    return _statm_fd


def _rss_mb() -> int | None:
    """The worker's resident size now: the host recycles a worker that has grown past its
    threshold, whatever the hook kept alive. None when it cannot be read."""
    if _statm_fd is None:
        return None
    try:
        resident_pages = int(os.pread(_statm_fd, 128, 0).split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident_pages * _PAGE_SIZE // (1024 * 1024)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Worker:
    def __init__(self, config: dict[str, Any], report: IsolationReport) -> None:
        self.config = config
        self.report = report
        self.permitted = report.isolated or bool(config.get("allow_unisolated"))
        self.max_response = int(config.get("max_response_bytes", 256 * 1024))
        self.cpu_per_call = int(config.get("cpu_seconds", 2))
        self.code: dict[str, types.CodeType] = {}

    # --- requests ------------------------------------------------------------------------

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "ping":
            return {"pong": True, "cpu": _cpu_seconds()}
        if op == "probe" and self.config.get("enable_probe"):
            return {"probe": probe(int(request.get("port") or 0))}
        if not self.permitted:
            return {"fault": "unisolated_refused", "detail": self._refusal()}
        if op == "load":
            return self.load(request.get("hooks") or {})
        if op == "call":
            return self.call(str(request.get("hook")), request.get("ctx"), request.get("state"))
        return {"fault": "junk", "detail": f"unknown op {op!r}"}

    def _refusal(self) -> str:
        failed = "; ".join(f"{k}: {v}" for k, v in self.report.failed.items())
        return f"isolation incomplete ({failed}); untrusted code refused"[:_DETAIL_CHARS]

    def load(self, hooks: dict[str, Any]) -> dict[str, Any]:
        self.code = {}
        errors: dict[str, str] = {}
        for name, source in hooks.items():
            try:
                if not isinstance(source, str):
                    raise TypeError("hook source must be a string")
                tree = compile(source, f"<hook {name}>", "exec", _ONLY_AST, dont_inherit=True)
                defines = [
                    getattr(node, "name", None)
                    for node in tree.body
                    if type(node).__name__ == "FunctionDef"
                ]
                if "hook" not in defines:
                    raise ValueError("no top-level `def hook(ctx, state)`")
                self.code[str(name)] = compile(tree, f"<hook {name}>", "exec", dont_inherit=True)
            except SyntaxError as err:
                errors[str(name)] = f"SyntaxError: {err.msg} (line {err.lineno})"[:_DETAIL_CHARS]
            except BaseException as err:  # noqa: BLE001 - MemoryError, RecursionError, ...
                errors[str(name)] = _short(err)
        return {"loaded": sorted(self.code), "errors": errors}

    def _arm_cpu_limit(self) -> float:
        """Soft RLIMIT_CPU = CPU used so far + the per-call allowance (SIGXCPU past it)."""
        used = _cpu_seconds()
        try:
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            soft = int(used) + self.cpu_per_call + 1
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        except (OSError, ValueError):
            pass  # unisolated development mode: no CPU limit to re-arm
        return used

    def call(self, hook: str, ctx: Any, state: Any) -> dict[str, Any]:
        code = self.code.get(hook)
        if code is None:
            return {"fault": "invalid", "detail": f"hook {hook!r} is not loaded"}
        if not isinstance(state, dict) or not isinstance(ctx, dict):
            return {"fault": "junk", "detail": "ctx and state must be objects"}
        self._arm_cpu_limit()
        re.purge()  # what the worker's own start compiled is no one's business either
        # Fresh globals per call (new namespaces, new helper functions, new builtins dict):
        # nothing a hook keeps or tampers with at module level outlives the call.
        namespace = hooklib.hook_globals()
        try:
            exec(code, namespace)
            function = namespace.get("hook")
            if not isinstance(function, types.FunctionType):
                return {"fault": "invalid", "detail": "`hook` is not a function"}
            value = function(ctx, state)
        except MemoryError:
            return {"fault": "memory", "detail": "MemoryError (address-space limit)"}
        except RecursionError as err:
            return {"fault": "raised", "detail": _short(err)}
        except OSError as err:
            # A hook that reaches the operating system got past the language-level filter.
            return {"fault": "violation", "kind": "os_error", "detail": _short(err)}
        except BaseException as err:  # noqa: BLE001 - whatever a hook raises is its fault
            return {"fault": "raised", "detail": _short(err)}
        finally:
            namespace.clear()
            # the real `re` module's pattern cache outlives a call: a channel between calls
            # (and between a candidate's episodes) and a way to grow the worker; emptied
            re.purge()
        return {"value": value, "state": state}

    # --- output --------------------------------------------------------------------------

    def encode(self, request_id: Any, response: dict[str, Any]) -> bytes:
        response = {
            "id": request_id,
            **response,
            "cpu": round(_cpu_seconds(), 4),
            "rss_mb": _rss_mb(),
        }
        try:
            data = json.dumps(response, allow_nan=False, separators=(",", ":"))
        except MemoryError:
            response = {"id": request_id, "fault": "memory", "detail": "MemoryError in encoding"}
            data = json.dumps(response)
        except (TypeError, ValueError, RecursionError, OverflowError) as err:
            response = {"id": request_id, "fault": "junk", "detail": _short(err)}
            data = json.dumps(response)
        # `<function f at 0x7f3a...>`: an address tells a hook's author where the worker's
        # heap is; nothing the host keeps needs it
        data = _ADDRESS.sub(" at 0x?>", data)
        if len(data) > self.max_response:
            detail = f"response is {len(data)} bytes; the limit is {self.max_response}"
            data = json.dumps({"id": request_id, "fault": "oversized", "detail": detail})
        return data.encode("ascii") + b"\n"


# Why this size: the isolation probe tries each containment layer in turn and reports all of them
def probe(port: int) -> dict[str, Any]:
    """Attempt what a hostile hook would, from inside the isolated worker; report each outcome.

    Test and diagnostic only (the worker answers it when started with enable_probe).
    """
    out: dict[str, Any] = {}

    def attempt(name: str, action: Callable[[], Any]) -> None:
        try:
            out[name] = {"ok": True, "result": repr(action())[:200]}
        except BaseException as err:  # noqa: BLE001 - report whatever happened
            out[name] = {
                "ok": False,
                "error": type(err).__name__,
                "errno": getattr(err, "errno", None),
                "detail": str(err)[:200],
            }

    def write_tmp() -> int:
        path = f"/tmp/hr1-probe-{os.getpid()}"
        with open(path, "w") as handle:
            written = handle.write("x")
        os.unlink(path)
        return written

    def connect() -> str:
        socket = sys.modules["socket"]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(("127.0.0.1", port))
            return str(conn.getpeername())

    def fork() -> int:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return pid

    def thread() -> str:
        threading = sys.modules["threading"]
        worker = threading.Thread(target=lambda: None)
        worker.start()
        worker.join()
        return "started"

    def huge() -> int:
        return len(bytearray(1 << 30))

    attempt("write_tmp", write_tmp)
    attempt("write_cwd", lambda: open("probe.txt", "w").close())
    attempt("mkdir_tmp", lambda: os.mkdir(f"/tmp/hr1-probe-dir-{os.getpid()}"))
    attempt("socket", lambda: sys.modules["socket"].socket().close())
    attempt("connect", connect)
    attempt("fork", fork)
    attempt("thread", thread)
    attempt("exec", lambda: os.execv("/bin/true", ["true"]))
    attempt("alloc_1g", huge)
    attempt("kill_parent", lambda: os.kill(os.getppid(), 0))
    attempt("kill_init", lambda: os.kill(1, 0))
    attempt("kill_self", lambda: os.kill(os.getpid(), 0))
    attempt("setsid", os.setsid)
    attempt("setuid_root", lambda: os.setuid(0))

    def read_passwd() -> int:
        with open("/etc/passwd") as handle:
            return len(handle.read())

    def read(path: str) -> int:
        with open(path, "rb") as handle:
            return len(handle.read())

    attempt("read_passwd", read_passwd)
    attempt("listdir_cwd", lambda: os.listdir("."))
    attempt("read_parent_environ", lambda: read(f"/proc/{os.getppid()}/environ"))
    attempt("read_parent_cmdline", lambda: read(f"/proc/{os.getppid()}/cmdline"))
    attempt("read_own_environ", lambda: read("/proc/self/environ"))
    attempt("listdir_root", lambda: os.listdir("/"))
    out["uid"] = os.getuid()
    out["euid"] = os.geteuid()
    out["gid"] = os.getgid()
    out["groups"] = os.getgroups()
    out["environ"] = dict(os.environ)
    out["pid"] = os.getpid()
    out["sid"] = os.getsid(0)
    out["pgid"] = os.getpgrp()
    out["fds"] = [fd for fd in range(256) if _is_open(fd)]  # no /proc/self/fd: reads denied
    out["rlimits"] = {
        name: list(resource.getrlimit(getattr(resource, f"RLIMIT_{name}")))
        for name in ("AS", "CPU", "NOFILE", "FSIZE", "CORE", "NPROC")
    }
    wanted = ("NoNewPrivs", "Seccomp", "Seccomp_filters", "Uid", "Gid", "Threads")
    status = os.pread(_status_fd, 65536, 0).decode() if _status_fd is not None else ""
    out["status"] = {
        key: value.strip()
        for key, _, value in (line.partition(":") for line in status.splitlines())
        if key in wanted
    }
    return out


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _claim_protocol_fds() -> tuple[int, int]:
    """Move the protocol pipes off fds 0/1 and point those at /dev/null."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    sys.stdin = None
    sys.stdout = None
    return proto_in, proto_out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _import_pyseccomp() -> None:
    """Import pyseccomp without its two `ldconfig -p` subprocesses (about 10 ms of start-up).

    pyseccomp resolves libc and libseccomp with ctypes.util.find_library at import; the usual
    sonames are tried first and find_library is only the fallback.
    """
    import ctypes
    import ctypes.util

    original = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        soname = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}.get(name)
        if soname is not None:
            try:
                ctypes.CDLL(soname)
                return soname
            except OSError:
                pass
        return original(name)

    ctypes.util.find_library = find_library
    try:
        importlib.import_module("pyseccomp")
    except Exception:  # noqa: BLE001, S110 - the seccomp layer reports it: fail closed
        pass
    finally:
        ctypes.util.find_library = original


def main(config: dict[str, Any]) -> None:
    # Everything the worker will need is imported now, while the interpreter's files are still
    # readable (after the uid drop the standard library may not be: /root is 0700 here).
    _import_pyseccomp()
    if config.get("enable_probe"):
        importlib.import_module("socket")
        importlib.import_module("threading")
    proto_in, proto_out = _claim_protocol_fds()
    statm = _open_statm()
    if config.get("enable_probe"):
        global _status_fd
        _status_fd = os.open("/proc/self/status", os.O_RDONLY)
    settings = IsolationSettings(**config.get("isolation", {}))
    extra = [fd for fd in (statm, _status_fd) if fd is not None]
    kept = (0, 1, 2, proto_in, proto_out, *extra)
    report = apply_all(settings, keep_fds=kept)
    worker = Worker(config, report)
    sys.setrecursionlimit(int(config.get("recursion_limit", 300)))
    hello = {
        "hello": True,
        "pid": os.getpid(),
        "isolated": report.isolated,
        "permitted": worker.permitted,
        "report": report.to_dict(),
    }
    _write_all(proto_out, json.dumps(hello).encode("ascii") + b"\n")
    max_request = int(config.get("max_request_bytes", 1 << 20))
    with open(proto_in, "rb", buffering=1 << 16, closefd=False) as reader:
        serve(worker, reader, proto_out, max_request)


def serve(worker: Worker, reader: BinaryIO, proto_out: int, max_request: int) -> None:
    while True:
        line = reader.readline(max_request + 1)
        if not line:
            return  # the parent closed the pipe (or died): leave quietly
        if len(line) > max_request or not line.endswith(b"\n"):
            os._exit(3)  # cannot resynchronise on a partial request
        request_id: Any = None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            response = worker.handle(request)
        except MemoryError:
            response = {"fault": "memory", "detail": "MemoryError"}
        except BaseException as err:  # noqa: BLE001 - the worker itself must keep serving
            response = {"fault": "junk", "detail": f"bad request: {_short(err)}"}
        _write_all(proto_out, worker.encode(request_id, response))
