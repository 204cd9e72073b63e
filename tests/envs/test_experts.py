"""The envs' demonstrators (EnvSuite.expert) solve training tasks on the real envs, through the
harness runtime, and refuse held-out splits."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_r1.envs import get_suite
from harness_r1.trainer.target_experts import HeldOutTask, demonstrate

DATA_ROOT = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"
pytestmark = pytest.mark.skipif(not DATA_ROOT.is_dir(), reason="benchmark data not present")


@pytest.mark.parametrize(
    ("env", "count", "least"),
    [("webshop", 8, 8), ("dbbench", 12, 9), ("alfworld", 1, 1)],
)
def test_the_expert_solves_training_tasks_on_the_real_env(env: str, count: int, least: int):
    suite = get_suite(env)
    assert suite.expert is not None
    split = suite.expert.training_splits[0]
    tasks = suite.load_tasks(DATA_ROOT, split)[:count]
    demos = demonstrate(suite, DATA_ROOT, tasks, history_turns=6)
    assert demos.successes >= least
    # every action the env ran is the expert's reply as the prompter read it: no hook, no force
    for trajectory in demos.trajectories:
        assert trajectory.origins.forced == 0 and trajectory.origins.model == len(trajectory.steps)
    assert {r.trajectory_id for r in demos.records} == {t.trajectory_id for t in demos.trajectories}


def test_the_webshop_expert_chooses_the_goals_options_before_buying():
    suite = get_suite("webshop")
    with_options = [
        t for t in suite.load_tasks(DATA_ROOT, "fixed_train") if t.payload["goal_options"]
    ]
    demos = demonstrate(suite, DATA_ROOT, with_options[:2], history_turns=6)
    for task, trajectory in zip(with_options[:2], demos.trajectories, strict=True):
        actions = [s.action for s in trajectory.steps]
        assert actions[-1] == "click[buy now]"
        assert len(actions) == 3 + len(task.payload["goal_options"])
        assert trajectory.outcome.success


@pytest.mark.parametrize(
    ("env", "held_out"),
    [("alfworld", "valid_seen"), ("dbbench", "dev"), ("webshop", "fixed_heldout")],
)
def test_an_expert_refuses_a_held_out_split_before_playing(env: str, held_out: str):
    suite = get_suite(env)
    train = suite.load_tasks(DATA_ROOT, suite.expert.training_splits[0])[:1]
    tasks = train + suite.load_tasks(DATA_ROOT, held_out)[:1]
    with pytest.raises(HeldOutTask, match=held_out):
        demonstrate(suite, DATA_ROOT, tasks, history_turns=6)
