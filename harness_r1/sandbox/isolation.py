"""Process isolation layers, applied inside the hook worker before it runs any hook code.

Each layer is a function that either returns a short description of what it did or raises
`LayerError` saying why it could not. `apply_all` runs them in a fixed order and collects an
`IsolationReport`; the worker refuses untrusted code unless every required layer is in force
(or the parent explicitly allowed unisolated execution, development only).

Order and why:
1. session     new session / process group, so the parent can kill everything with killpg
2. environment scrub os.environ (the parent already starts the worker with a minimal env)
3. fds         close every inherited descriptor except the protocol pipes and stderr
4. cwd         chdir into a fresh empty directory, then remove it (nothing can be created there)
5. rlimits     address space, CPU, open files, file size 0, no core, no processes, no memlock
6. uid         drop to an unprivileged uid/gid (65534) when started as root; setgroups([]) first;
               started as another user: failed, unless accept_shared_uid says to keep that uid
7. nnp         prctl(PR_SET_NO_NEW_PRIVS): no privilege gain through exec, required by Landlock
8. landlock    deny every filesystem write and exec (reads stay allowed); ABI>=4: deny TCP
               bind/connect; ABI>=6: scope signals and abstract unix sockets to the worker
9. seccomp     default allow; EPERM for sockets, exec, fork/clone, ptrace, signals to other
               processes, privilege and namespace changes, mounts, kernel-facing interfaces

This module runs in the worker with `python -I -S`: standard library and ctypes only (pyseccomp
is imported lazily, from the path the parent hands the worker). Linux only.

Why one module: the worker's OS containment layers (rlimits, namespaces, seccomp,
the probe that proves them) are applied in one order at one point of the worker's start; apart,
that order would be implicit.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

LAYERS = (
    "session",
    "environment",
    "fds",
    "cwd",
    "rlimits",
    "uid",
    "nnp",
    "landlock",
    "seccomp",
)

# Landlock syscalls use the unified numbers on every architecture Linux added them to
# (x86_64, aarch64, arm, riscv64, ppc64le, s390x, ...): 444, 445, 446.
_LANDLOCK_NR: dict[str, tuple[int, int, int]] = {
    "x86_64": (444, 445, 446),
    "amd64": (444, 445, 446),
    "aarch64": (444, 445, 446),
    "arm64": (444, 445, 446),
    "armv7l": (444, 445, 446),
    "riscv64": (444, 445, 446),
    "ppc64le": (444, 445, 446),
    "s390x": (444, 445, 446),
}
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0

# Filesystem rights: all of them are handled and none is granted (no rule is added), so after
# the layer goes up the worker can open no path at all, for reading or anything else; what it
# needs (its modules, the kept /proc/self/statm) it has opened or imported before.
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6

_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_NO_NEW_PRIVS = 39

# Denied with EPERM by the seccomp layer. Names unknown to libseccomp or absent on this
# architecture are skipped and listed in the report; the ones in _SECCOMP_CORE must apply.
SECCOMP_DENY: tuple[str, ...] = (
    # network
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    # programs and processes
    "execve",
    "execveat",
    "fork",
    "vfork",
    "clone",
    "clone3",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    "setsid",
    "setpgid",
    # privileges
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setfsuid",
    "setfsgid",
    "setgroups",
    "capset",
    "personality",
    # namespaces, mounts, kernel interfaces
    "unshare",
    "setns",
    "chroot",
    "pivot_root",
    "mount",
    "umount2",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "mknod",
    "mknodat",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "sethostname",
    "setdomainname",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "fanotify_init",
    "iopl",
    "ioperm",
    "modify_ldt",
    "uselib",
    "vhangup",
)
# Signals: allowed only when the target is the worker itself (abort() uses tgkill on self).
SECCOMP_SELF_ONLY: tuple[str, ...] = (
    "kill",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
)
_SECCOMP_CORE = frozenset(
    {"socket", "socketpair", "connect", "bind", "execve", "execveat", "clone", "ptrace", "kill"}
)


class LayerError(RuntimeError):
    """A layer could not be applied; the message says why."""


@dataclass
class LayerResult:
    name: str
    ok: bool
    detail: str
    required: bool = True


@dataclass
class IsolationReport:
    """What was applied in the worker, what failed and why. JSON-able through `to_dict`."""

    layers: list[LayerResult] = field(default_factory=list)
    uid: int = -1
    gid: int = -1
    landlock_abi: int = 0
    shared_uid: bool = False  # started as non-root: the worker has its parent's uid

    @property
    def isolated(self) -> bool:
        """Every required layer is in force."""
        names = {layer.name for layer in self.layers if layer.ok or not layer.required}
        return bool(self.layers) and all(name in names for name in LAYERS)

    @property
    def applied(self) -> list[str]:
        return [layer.name for layer in self.layers if layer.ok]

    @property
    def failed(self) -> dict[str, str]:
        return {layer.name: layer.detail for layer in self.layers if not layer.ok}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["isolated"] = self.isolated
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IsolationReport:
        layers = [
            LayerResult(
                name=str(item.get("name", "?")),
                ok=bool(item.get("ok", False)),
                detail=str(item.get("detail", ""))[:500],
                required=bool(item.get("required", True)),
            )
            for item in data.get("layers", [])
            if isinstance(item, dict)
        ]
        return cls(
            layers=layers,
            uid=int(data.get("uid", -1)),
            gid=int(data.get("gid", -1)),
            landlock_abi=int(data.get("landlock_abi", 0)),
            shared_uid=bool(data.get("shared_uid", False)),
        )


@dataclass(frozen=True)
class IsolationSettings:
    memory_mb: int = 512
    cpu_seconds: int = 2  # initial soft RLIMIT_CPU; the worker re-arms it before each call
    worker_cpu_seconds: int = 300  # hard RLIMIT_CPU: the worker's lifetime CPU budget
    nofile: int = 16
    nproc: int = 0
    uid: int = 65534
    gid: int = 65534
    min_landlock_abi: int = 1
    accept_shared_uid: bool = False  # not root: run with the parent's uid (see drop_privileges)
    fail_layer: str = ""  # testing only: pretend this layer failed (proves fail-closed paths)


# --- the layers --------------------------------------------------------------------------


def new_session() -> str:
    pid = os.getpid()
    if os.getsid(0) == pid and os.getpgrp() == pid:
        return f"already session and group leader (pid {pid})"
    try:
        os.setsid()
    except OSError as err:
        raise LayerError(f"setsid failed: {err}") from err
    return f"new session {os.getsid(0)}"


def scrub_environment() -> str:
    names = sorted(os.environ)
    os.environ.clear()
    if os.environ:
        raise LayerError("environment still has entries after clear()")
    return f"cleared {len(names)} variable(s)" + (f": {', '.join(names)}" if names else "")


def close_fds(keep: Iterable[int]) -> str:
    kept = sorted({fd for fd in keep if fd >= 0})
    for name in os.listdir("/proc/self/fd"):
        if name.isdigit() and int(name) not in kept:
            try:
                os.close(int(name))
            except OSError:
                continue  # listdir's own descriptor
    leaked = []
    for name in os.listdir("/proc/self/fd"):
        if name.isdigit() and int(name) not in kept:
            try:
                os.fstat(int(name))
            except OSError:
                continue  # listdir's own descriptor, closed by now
            leaked.append(int(name))
    if leaked:
        raise LayerError(f"descriptors still open: {sorted(leaked)}")
    return f"kept fds {kept}"


def enter_empty_dir() -> str:
    path = f"/tmp/hr1-hook-{os.getpid()}-{os.urandom(6).hex()}"
    try:
        os.mkdir(path, 0o700)
    except OSError as err:
        raise LayerError(f"could not create {path}: {err}") from err
    os.chdir(path)
    os.rmdir(path)  # cwd is now an unlinked, empty directory: nothing can be created in it
    if os.listdir("."):
        raise LayerError("working directory is not empty")
    return f"cwd is an empty, unlinked directory (was {path})"


def set_rlimits(settings: IsolationSettings) -> str:
    memory = settings.memory_mb * 1024 * 1024
    limits = {
        "AS": (resource.RLIMIT_AS, memory, memory),
        "CPU": (resource.RLIMIT_CPU, settings.cpu_seconds, settings.worker_cpu_seconds),
        "NOFILE": (resource.RLIMIT_NOFILE, settings.nofile, settings.nofile),
        "FSIZE": (resource.RLIMIT_FSIZE, 0, 0),
        "CORE": (resource.RLIMIT_CORE, 0, 0),
        "NPROC": (resource.RLIMIT_NPROC, settings.nproc, settings.nproc),
        "MEMLOCK": (resource.RLIMIT_MEMLOCK, 0, 0),
    }
    done = []
    for name, (which, soft, hard) in limits.items():
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError) as err:
            raise LayerError(f"RLIMIT_{name}={soft}/{hard}: {err}") from err
        done.append(f"{name}={soft}/{hard}")
    return " ".join(done)


def drop_privileges(uid: int, gid: int, accept_shared_uid: bool = False) -> str:
    """Become `uid`/`gid` when started as root. Started as another user the worker keeps the
    uid of the process that started it, and with it the right to read that process's /proc
    files (environ: where API keys live) were any other layer to fail: a failed layer unless
    the operator accepted it (`accept_shared_uid`), with Landlock's read denial the barrier."""
    if os.geteuid() != 0 and os.getuid() != 0:
        if accept_shared_uid:
            return (
                f"not root: shares uid {os.getuid()} with its parent, accepted by setting "
                "(accept_shared_uid); Landlock's read denial keeps the parent's /proc closed"
            )
        raise LayerError(
            f"not root: the worker would share uid {os.getuid()} with the process that started "
            "it; start that process as root (the worker drops to an unprivileged uid) or set "
            "sandbox accept_shared_uid to accept a shared uid"
        )
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as err:
        raise LayerError(f"could not drop to {uid}:{gid}: {err}") from err
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise LayerError("credentials did not change as asked")
    try:
        os.setuid(0)
    except PermissionError:
        return f"dropped to uid {uid} gid {gid}, no supplementary groups"
    raise LayerError("could regain uid 0 after dropping privileges")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def set_no_new_privs() -> str:
    libc = _libc()
    prctl = libc.prctl
    prctl.restype = ctypes.c_int
    args = (ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), *args) != 0:
        raise LayerError(f"PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
    if prctl(ctypes.c_int(_PR_GET_NO_NEW_PRIVS), ctypes.c_ulong(0), *args) != 1:
        raise LayerError("PR_GET_NO_NEW_PRIVS does not read back 1")
    return "no_new_privs=1"


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; raises LayerError when Landlock is unusable."""
    numbers = _LANDLOCK_NR.get(os.uname().machine.lower())
    if numbers is None:
        raise LayerError(f"no Landlock syscall numbers known for {os.uname().machine}")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(
        ctypes.c_long(numbers[0]),
        ctypes.c_void_p(None),
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    if abi < 0:
        code = ctypes.get_errno()
        raise LayerError(f"Landlock unavailable: {errno.errorcode.get(code, code)}")
    return int(abi)


def apply_landlock(min_abi: int = 1) -> tuple[str, int]:
    """Deny every filesystem access (reads, writes, exec; and TCP bind/connect, signals out)
    for good: a hook past the language filter reads neither the project, nor the host's files,
    nor `/proc/<daemon>/environ`."""
    abi = landlock_abi()
    if abi < min_abi:
        raise LayerError(f"Landlock ABI {abi} < required {min_abi}")
    fs = (
        _FS_EXECUTE
        | _FS_WRITE_FILE
        | _FS_READ_FILE
        | _FS_READ_DIR
        | _FS_REMOVE_DIR
        | _FS_REMOVE_FILE
        | _FS_MAKE_CHAR
        | _FS_MAKE_DIR
        | _FS_MAKE_REG
        | _FS_MAKE_SOCK
        | _FS_MAKE_FIFO
        | _FS_MAKE_BLOCK
        | _FS_MAKE_SYM
    )
    if abi >= 2:
        fs |= _FS_REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if abi >= 5:
        fs |= _FS_IOCTL_DEV
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(fs, net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    create, _add_rule, restrict = _LANDLOCK_NR[os.uname().machine.lower()]
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(
        ctypes.c_long(create), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if fd < 0:
        raise LayerError(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        # No rules are added: every handled right is denied everywhere.
        rc = libc.syscall(ctypes.c_long(restrict), ctypes.c_int(fd), ctypes.c_uint32(0))
        if rc != 0:
            raise LayerError(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    parts = ["fs reads+writes+exec denied"]
    if net:
        parts.append("tcp bind/connect denied")
    if scoped:
        parts.append("signals/abstract unix scoped")
    return f"ABI {abi}: " + ", ".join(parts), abi


def apply_seccomp(deny: Iterable[str] = SECCOMP_DENY) -> str:
    """Load the seccomp filter (default allow, EPERM for the listed syscalls)."""
    try:
        import pyseccomp as sc
    except Exception as err:  # noqa: BLE001 - missing package or missing libseccomp
        raise LayerError(f"pyseccomp unavailable: {type(err).__name__}: {err}") from err
    filt = sc.SyscallFilter(sc.ALLOW)
    filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)  # foreign-ABI syscalls kill the worker
    eperm = sc.ERRNO(errno.EPERM)
    pid = os.getpid()
    denied: list[str] = []
    skipped: list[str] = []

    def add(name: str, *args: Any) -> None:
        number = sc.resolve_syscall(sc.Arch.NATIVE, name)
        if number < 0:
            skipped.append(name)  # unknown to libseccomp, or not on this architecture
            return
        try:
            filt.add_rule(eperm, number, *args)
        except OSError as err:
            skipped.append(f"{name} ({err.strerror})")
            return
        denied.append(name)

    for name in deny:
        add(name)
    for name in SECCOMP_SELF_ONLY:
        add(name, sc.Arg(0, sc.NE, pid))
    missing = sorted(_SECCOMP_CORE - set(denied))
    if missing:
        raise LayerError(f"core syscalls could not be filtered: {', '.join(missing)}")
    try:
        filt.load()
    except OSError as err:
        raise LayerError(f"seccomp_load: {err}") from err
    detail = f"EPERM for {len(denied)} syscalls (signals only to self)"
    if skipped:
        detail += f"; not on this arch: {', '.join(skipped)}"
    return detail


# --- all together ------------------------------------------------------------------------


def apply_all(settings: IsolationSettings, keep_fds: Iterable[int]) -> IsolationReport:
    """Apply every layer in order; a failing layer is recorded and the next one still tried."""
    report = IsolationReport(shared_uid=os.geteuid() != 0 and os.getuid() != 0)
    keep = tuple(keep_fds)

    def landlock() -> str:
        detail, report.landlock_abi = apply_landlock(settings.min_landlock_abi)
        return detail

    steps: list[tuple[str, Callable[[], str]]] = [
        ("session", new_session),
        ("environment", scrub_environment),
        ("fds", lambda: close_fds(keep)),
        ("cwd", enter_empty_dir),
        ("rlimits", lambda: set_rlimits(settings)),
        ("uid", lambda: drop_privileges(settings.uid, settings.gid, settings.accept_shared_uid)),
        ("nnp", set_no_new_privs),
        ("landlock", landlock),
        ("seccomp", apply_seccomp),
    ]
    for name, step in steps:
        try:
            if name == settings.fail_layer:
                raise LayerError("forced failure (IsolationSettings.fail_layer, testing only)")
            report.layers.append(LayerResult(name, True, step()))
        except LayerError as err:
            report.layers.append(LayerResult(name, False, str(err)[:500]))
        except Exception as err:  # noqa: BLE001 - a layer must never take the report down
            report.layers.append(LayerResult(name, False, f"{type(err).__name__}: {err}"[:500]))
    report.uid, report.gid = os.getuid(), os.getgid()
    return report
