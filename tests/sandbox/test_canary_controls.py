"""The canary's control runs and the gate's attribution limits on them: the control run
measures pairing noise, the patch-alone control runs an overlay under the null policy (a
forcing patch wins there, advice does not), the advisory profile rejects a solver and promotes
advice, refuses a candidate whose control did not run, and the guard run has no patch-alone
control. On the tiny in-test env of canary_rig.py."""

from __future__ import annotations

import pytest
from canary_rig import BATCH, OPEN, TASKS, DoorEnv, patch, runner

from harness_r1.contracts import HookName
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.sandbox.canary import CanaryBatch, Candidate

pytestmark = pytest.mark.usefixtures("door_env_reset")


def test_control_run_measures_pairing_noise() -> None:
    canary = runner(ScriptedPolicy(["ACTION: dance"]), control=True)
    report = canary.evaluate(BATCH, [Candidate("open", OPEN)])
    assert [c.candidate_id for c in report.candidates] == ["open"]
    assert report.control is not None and report.control.delta_success == 0.0
    assert report.control.patch_sha256 is None and report.control.cost.episodes == 8


ADVICE = patch(
    "def hook(ctx, state):\n    return 'The door opens with: open door'\n", HookName.PRE_DECISION
)


def test_patch_alone_control_runs_the_overlay_under_the_null_policy() -> None:
    """A forcing patch wins without the model (the harness alone); advice wins nothing there,
    however much it helps a model that reads it."""
    reader = ScriptedPolicy(
        lambda messages: "ACTION: open door" if "open door" in messages[-1]["content"] else "x"
    )
    canary = runner(reader, patch_alone=True)
    report = canary.evaluate(BATCH, [Candidate("open", OPEN), Candidate("advice", ADVICE)])
    by_id = {c.candidate_id: c for c in report.candidates}
    forced, advice = by_id["open"], by_id["advice"]
    assert forced.patch_alone is not None and advice.patch_alone is not None
    assert (forced.patch_alone.successes, forced.patch_alone.tasks) == (4, 8)  # even tasks
    assert forced.patch_alone.origins.forced == 8 and forced.forced_share == 1.0
    assert advice.delta_success == pytest.approx(0.5)  # the model read the note and acted
    assert advice.patch_alone.successes == 0 and advice.patch_alone_success == 0.0
    assert advice.forced_share == 0.0 and advice.origins.model == advice.origins.steps == 8
    assert report.baseline_origins.model == report.baseline_origins.steps > 0


def test_the_advisory_profile_rejects_a_solver_with_its_figures_and_promotes_advice() -> None:
    """The gate's attribution limits on a real canary run (the scripted policy is the stand-in
    for a model that acts on what it reads): the forcing patch is rejected with its forced
    share, or its patch-alone success, and the limit in the reason, its reward is the refusal's;
    the note that the model acts on is promoted and keeps its delta as reward."""
    from harness_r1.sandbox.gate import ADVISORY_LIMITS, GateConfig
    from harness_r1.sandbox.gated import run_gated
    from harness_r1.trainer.shaping import InvalidRewardShape

    reader = ScriptedPolicy(
        lambda messages: "ACTION: open door" if "open door" in messages[-1]["content"] else "x"
    )
    canary = runner(reader, patch_alone=True)
    candidates = [Candidate("open", OPEN), Candidate("advice", ADVICE)]
    advisory = GateConfig(min_batch_tasks=1, min_guard_tasks=0, **ADVISORY_LIMITS)
    gated = run_gated(canary, BATCH, None, candidates, advisory)
    solver, advice = gated.decisions["open"], gated.decisions["advice"]
    assert solver.verdict == "reject" and not solver.promote
    assert "forced 1.00 of the steps (8 of 8)" in solver.reasons[0]
    assert "the limit is 0.10 (gate.max_forced_share)" in solver.reasons[0]
    assert advice.promote and advice.verdict == "promote"

    alone_only = GateConfig(min_batch_tasks=1, min_guard_tasks=0, max_patch_alone_success=0.0)
    gated = run_gated(canary, BATCH, None, candidates, alone_only)
    reason = gated.decisions["open"].reasons[0]
    assert "the harness alone solved 4 of 8 tasks (0.50) under the null policy" in reason
    assert "(gate.max_patch_alone_success)" in reason and gated.decisions["advice"].promote

    by_id = {r.candidate_id: r for r in gated.report.candidates}
    shape = InvalidRewardShape(-0.25, attribution=advisory)
    assert shape.of_result(by_id["open"]) == -0.25  # not its +0.5 delta
    assert shape.of_result(by_id["advice"]) == pytest.approx(0.5)
    assert InvalidRewardShape(-0.25).of_result(by_id["open"]) == pytest.approx(0.5)  # default


def test_the_advisory_gate_refuses_a_candidate_whose_control_did_not_run() -> None:
    canary = runner(ScriptedPolicy(["x"]), patch_alone=False)
    from harness_r1.sandbox.gate import ADVISORY_LIMITS, GateConfig
    from harness_r1.sandbox.gated import run_gated

    advisory = GateConfig(min_batch_tasks=1, min_guard_tasks=0, **ADVISORY_LIMITS)
    gated = run_gated(canary, BATCH, None, [Candidate("advice", ADVICE)], advisory)
    assert "patch-alone control did not run" in gated.decisions["advice"].reasons[0]


def test_the_guard_run_has_no_patch_alone_control() -> None:
    """The control answers for the batch; the guard set asks only about regressions, so the
    gate's guard run spends no episodes on it."""
    from harness_r1.sandbox.gate import GateConfig
    from harness_r1.sandbox.gated import run_gated

    canary = runner(ScriptedPolicy(["x"]), patch_alone=True)
    guard_batch = CanaryBatch("door", TASKS[:4], (100, 101, 102, 103))
    gate = GateConfig(min_batch_tasks=1, min_guard_tasks=0)
    gated = run_gated(canary, BATCH, guard_batch, [Candidate("advice", ADVICE)], gate)
    assert gated.report.candidates[0].patch_alone is not None
    assert gated.guard is not None and gated.guard.candidates[0].patch_alone is None
    # batch: baseline, candidate, its control (8 each); guard: baseline, candidate (4 each)
    assert DoorEnv.resets == 3 * 8 + 2 * 4
