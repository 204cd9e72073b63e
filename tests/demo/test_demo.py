"""`harness-r1 demo`'s choreography end to end (embedded broker, a fleet of deployed agents
with overlay clients, the daemon, staged releases, the live guard, two rounds, an operator
rollback through the CLI in its own process), with the two models replaced by the named test
doubles of tests/daemon/daemon_rig.py; `make demo` runs it on SmolLM2 and the template
teacher."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_rig import JUNK, MAX_STEPS, StagedEngineer, canary_with_progress, data_root
from rich.console import Console

from harness_r1.demo import DemoOptions, DemoParts, run_demo
from harness_r1.demo.summary import levels
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.harness.policies import ScriptedPolicy

pytestmark = pytest.mark.integration


def test_two_rounds_build_on_each_other_and_the_operator_rolls_back(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    options = DemoOptions(
        agents=4,
        episodes_per_agent=3,
        rounds=2,
        max_steps=MAX_STEPS,
        k=2,
        guard_tasks=4,
        # the live guard here judges a +25% gain (25% -> 50% in round 2) with cohorts of one to
        # three agents: room to decide, whatever agents the overlay ids hash into the cohort
        guard_phases=12,
        promote_probability=0.8,
        out=tmp_path / "run",
        # the staged engineer's overlays force their wins (the junk stand-in wins nothing):
        # the default profile lets them through, on all 60 goals as before the deployed agent
        profile="default",
        split="fixed",
    )
    parts = DemoParts(
        policy=ScriptedPolicy([JUNK]), canary_for=canary_with_progress, proposer=StagedEngineer()
    )
    result = run_demo(options, data_root(), tmp_path / "cache", console, parts)
    text = console.export_text()
    one, two = result.rounds
    # round 1: base -> a promoted overlay the live guard took to every agent
    assert one.incumbent == "base" and one.promoted is not None, text
    assert one.guard is not None and one.guard.state == "active", text
    assert one.guard.propagation_s is not None
    # round 2: its failures ran on round 1's overlay, and its winner is composed on top
    assert two.incumbent == one.promoted
    assert {t.harness_version for t in two.fleet} == {one.promoted}
    winner = next(r for r in two.candidates if r.overlay_id)
    assert winner.delta_success is not None and winner.delta_success > 0, text
    assert two.guard is not None and two.guard.state == "active", text
    registry = OverlayRegistry(f"sqlite:///{tmp_path / 'run' / 'state.db'}")
    chain = [overlay for overlay, _ in registry.chain(two.promoted or "")]
    assert chain == [one.promoted, two.promoted]  # round 1's hooks kept, round 2's on top
    # success per stage: base < after round 1 < after round 2 on the same tasks
    stages = levels(result)
    assert [s.harness for s in stages] == ["base", one.promoted, two.promoted]
    assert stages[0].successes < stages[1].successes < stages[2].successes, text
    # the operator's rollback to round 1's overlay, obeyed by every agent
    rollback = result.rollback
    assert rollback is not None and rollback.returncode == 0, text
    assert rollback.to == one.promoted and rollback.propagation_s is not None
    assert set(rollback.agents_on.values()) == {one.promoted}
    assert registry.get(one.promoted or "").state.value == "active"
    assert registry.get(two.promoted or "").state.value == "rolled_back"
    # what the operator reads: the win rate from /metrics, the report and the plot
    assert "webshop" in result.win_rate and result.win_rate["webshop"] > 0
    assert result.report_html is not None and result.report_html.is_file()
    assert result.plot_png is not None and result.plot_png.stat().st_size > 1000
    assert "Wilson" in result.report_html.read_text()
    assert "fleet success" in text and "operator rollback" in text
    # who decided: forced share per phase (the junk-writing stand-in decides nothing that
    # wins, so the staged engineer's forcing overlays hold the wins) and per candidate
    assert stages[0].forced_share == 0.0 and stages[2].forced_share is not None
    assert stages[2].forced_share > 0, text
    assert all(c.candidate_id in one.attribution for c in one.candidates)
    page = result.report_html.read_text()
    assert "forced share" in page and "patch alone" in page
    assert "forced share" in text and "patch alone" in text
