"""The reference patches, run through the real canary path (static checks, isolated worker,
real envs) with a scripted stand-in for the model (its output is junk, like SmolLM2's usually
is): each must raise success on real tasks. Their deltas on SmolLM2 itself are in BENCHMARKS.md."""

from __future__ import annotations

import pytest

from harness_r1.contracts import CanaryReport, Patch
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.tasks import spread
from harness_r1.sandbox.canary import CanaryBatch, Candidate
from harness_r1.sandbox.canary_factory import build_canary_runner
from harness_r1.sandbox.patchfile import reference_patches
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.trainer.teacher import TeacherConfig, TemplateChoice, TemplateTeacher
from harness_r1.trainer.templates import templates_for

pytestmark = pytest.mark.integration

CASES = [
    # env, split, tasks, step limit, scripted junk output, minimum patched successes
    ("alfworld", "valid_seen", 6, 30, "THOUGHT: I think. ACTION: think", 4),
    ("dbbench", "dev", 20, 4, "The answer is 12", 1),
    ("webshop", "fixed", 10, 8, "Thought: buy. Action: nothing", 2),
]


def canary_on_real_tasks(
    env: str, split: str, n: int, steps: int, junk: str, candidate: Candidate
) -> CanaryReport:
    """One candidate through the real canary path on n tasks of the split, seeds 0..n-1."""
    root = Settings().data_root()
    suite = get_suite(env)
    tasks = spread(suite.load_tasks(root, split), n)
    canary = build_canary_runner(
        suite,
        ScriptedPolicy([junk]),
        root,
        RunConfig(max_steps=steps),
        sandbox=SandboxConfig(call_budget_s=2.0),
    )
    try:
        return canary.evaluate(CanaryBatch(env, tuple(tasks), tuple(range(n))), [candidate])
    finally:
        canary.runtime.close()


@pytest.mark.parametrize(("env", "split", "n", "steps", "junk", "minimum"), CASES)
def test_reference_patch_raises_success(
    env: str, split: str, n: int, steps: int, junk: str, minimum: int
) -> None:
    [(name, patch)] = reference_patches(env).items()
    report = canary_on_real_tasks(env, split, n, steps, junk, Candidate(name, patch))
    [result] = report.candidates
    assert result.status == "evaluated", result.invalid_reason
    patched = sum(p.patched_success for p in result.pairs)
    assert report.baseline_success_rate == 0.0
    assert patched >= minimum, (patched, result.sandbox_events)
    assert result.delta_success is not None and result.delta_success > 0
    assert "timeouts" not in result.sandbox_events and "raised" not in result.sandbox_events
    # a solver: it wins tasks with no model at all (the patch-alone control, null policy)
    assert result.patch_alone is not None and result.patch_alone.successes > 0
    # by the forces of a few steps: DBBench's lookup forces one step of ~4 (9% of them) and that
    # step is the answer, so forced share alone would pass it as advice; the control does not
    assert result.forced_share is not None and result.forced_share > 0


def advisory_patch(env: str) -> Patch:
    """Every advisory template of the env's library that composes with the ones before it,
    at its default parameters: the most advice the teacher can give in one patch."""
    teacher = TemplateTeacher(TeacherConfig(advisory=True))
    chosen: list[TemplateChoice] = []
    for template in templates_for(env):
        if template.role != "advisory":
            continue
        trial = [*chosen, TemplateChoice.of(template.name)]
        try:
            teacher.render_patch(env, trial)
        except ValueError:
            continue
        chosen = trial
    assert len(chosen) >= 3, [c.name for c in chosen]
    return teacher.render_patch(env, chosen)


@pytest.mark.parametrize(("env", "split", "n", "steps", "junk", "minimum"), CASES[1:])
def test_advisory_templates_win_nothing_without_the_model(
    env: str, split: str, n: int, steps: int, junk: str, minimum: int
) -> None:
    """The null-policy control on real tasks: the advisory templates together (skills, notes,
    hints, vetoes, snapping the model's own proposal, recovery) solve nothing alone."""
    del minimum
    advice = Candidate("advice", advisory_patch(env))
    report = canary_on_real_tasks(env, split, n, steps, junk, advice)
    [result] = report.candidates
    assert result.status == "evaluated", result.invalid_reason
    assert result.patch_alone is not None and result.patch_alone.tasks == n
    assert result.patch_alone.successes == 0 and result.patch_alone.origins.forced == 0
