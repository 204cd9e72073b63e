"""One list of hook-fault kinds: every place that names one names a HookFaultKind."""

from __future__ import annotations

import re
from pathlib import Path

import harness_r1.sandbox.worker_main as worker_main
from harness_r1.contracts import HookFault, HookFaultKind
from harness_r1.sandbox.worker_faults import FAULT_COUNTERS
from harness_r1.trainer.coldstart_rules import HOOK_FAULT_EVENTS, VIOLATION_EVENTS


def test_every_fault_the_worker_sends_is_a_kind() -> None:
    """The worker speaks plain strings (it must not import pydantic): hold them to the list."""
    source = Path(worker_main.__file__).read_text()
    sent = set(re.findall(r'"fault": "(\w+)"', source))
    assert sent and sent <= set(HookFaultKind)


def test_the_executor_counts_every_kind_the_sandbox_can_end_with() -> None:
    """Two kinds are the runtime's, not the sandbox's: it took the model's action after too
    many vetoes, or it stopped calling hooks once the episode's hook time was spent."""
    runtime_only = {HookFaultKind.VETO_LIMIT, HookFaultKind.OVER_BUDGET}
    assert set(FAULT_COUNTERS) == set(HookFaultKind) - runtime_only


def test_the_cold_start_judges_by_kinds_and_the_contract_lists_them() -> None:
    assert set(VIOLATION_EVENTS) | set(HOOK_FAULT_EVENTS) <= set(HookFaultKind)
    description = HookFault.model_fields["reason"].description or ""
    assert all(kind.value in description for kind in HookFaultKind)
