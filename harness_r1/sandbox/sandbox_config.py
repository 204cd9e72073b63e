"""SandboxConfig: how hook workers are isolated and budgeted (limits, uids, time budgets, and the
development and test switches).

Why a module of its own: the daemon's settings, the canary's assembly and every test that
starts a worker build one, and both the worker process (`worker_process.py`) and the HookSet
over it (`executor.py`) read it; it sits below both and imports nothing of ours.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["SandboxConfig"]


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
