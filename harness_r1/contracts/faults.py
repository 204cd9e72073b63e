"""The one list of ways a hook call can end without an effect. The isolated executor counts
them, the runtime records them on trajectories (`HookFault.reason`), the canary and the cold
start judge patches by them. The worker process speaks the same names on its pipe as plain
strings (it must not import pydantic); tests/contracts/test_faults.py holds it to this list."""

from __future__ import annotations

from enum import StrEnum


class HookFaultKind(StrEnum):
    RAISED = "raised"  # the hook raised an exception
    TIMEOUT = "timeout"  # a call ran past its wall-clock budget (worker killed)
    CRASHED = "crashed"  # the worker process died during a call
    JUNK = "junk"  # not an allowed effect, a state that is not JSON, a malformed response
    OVERSIZED = "oversized"  # a response over the size limit
    MEMORY = "memory"  # a call hit the worker's memory limit
    VIOLATION = "violation"  # the worker's runtime guard stopped a forbidden operation
    INVALID = "invalid"  # the patch's hooks could not be loaded
    UNISOLATED_REFUSED = "unisolated_refused"  # isolation missing: patches are not run
    CLOSED = "closed"  # the hook set was closed (an overlay swapped out)
    VETO_LIMIT = "veto_limit"  # the runtime took the model's action after too many vetoes
    DISABLED = "disabled"  # the hook set stopped calling a patch that kept timing out
    OVER_BUDGET = "over_budget"  # the episode's hook time was spent: the rest ran without hooks
