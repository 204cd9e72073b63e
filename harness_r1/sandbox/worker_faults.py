"""The faults a call to a hook worker can end with: the counter in `events` each one increments,
and `_Fault`, the exception that carries one in the parent.

A `_Fault` never leaves the hook set: `IsolatedHooks.call` counts it and returns it as the
call's `fault` and `detail`.

Why a module of its own: the worker process (`worker_process.py`) raises these faults and maps
an unknown kind from the worker to junk, and the HookSet (`executor.py`) counts them; both read
the one table, which sits below both.
"""

from __future__ import annotations

from harness_r1.contracts import HookFaultKind

__all__ = ["FAULTS", "FAULT_COUNTERS"]

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


class _Fault(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail[:500]
