"""`harness-r1 demo`'s choreography end to end (embedded broker, a fleet of deployed agents
with overlay clients, the daemon, a staged release, the live guard), with the two models
replaced by the named test doubles of daemon_rig.py; `make demo` runs it on SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_rig import JUNK, ReferenceEngineer, canary_for, data_root
from rich.console import Console

from harness_r1.daemon.demo import DemoOptions, DemoParts, run_demo
from harness_r1.harness.policies import ScriptedPolicy

pytestmark = pytest.mark.integration


def test_demo_runs_the_whole_loop(tmp_path: Path) -> None:
    console = Console(record=True, width=160)
    options = DemoOptions(
        agents=4, episodes_per_agent=3, max_steps=8, k=2, guard_tasks=8, guard_wait_s=10
    )
    parts = DemoParts(
        policy=ScriptedPolicy([JUNK]), canary_for=canary_for, proposer=ReferenceEngineer()
    )
    result = run_demo(options, data_root(), tmp_path / "cache", console, parts)
    text = console.export_text()
    assert len(result.before) == 12 and not any(t.outcome.success for t in result.before)
    assert result.overlay_id is not None, text
    assert result.overlay_state in ("canary", "active", "rolled_back")
    assert {t.harness_version for t in result.after} >= {result.overlay_id}
    assert "demo summary" in text and "promoted by the gate" in text
