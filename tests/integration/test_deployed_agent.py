"""The deployed agent (`smollm2-agent`: SmolLM2-135M with its shipped adapter, merged) on a real
env: it wins, by itself, a held-out task it is measured to win (BENCHMARKS.md, "The deployed
agent", from `benchmarks/deployed_agent.sh`), where the base model does not."""

from __future__ import annotations

import pytest

from harness_r1.contracts import ActionOrigin, Trajectory
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig
from harness_r1.harness.policies.factory import PolicySpec, build_policy

pytestmark = pytest.mark.integration

#: DBBench dev-045: "Set the LGA value to Armadale for the primary school named Byford Primary
#: School ...", an UPDATE the agent writes correctly and then commits (won in the vanilla run)
WON = ("dbbench", "dev", "dev-045")


def _episode(kind: str) -> Trajectory:
    env, split, task_id = WON
    root = Settings().data_root()
    suite = get_suite(env)
    [task] = [t for t in suite.load_tasks(root, split) if t.task_id == task_id]
    policy = build_policy(PolicySpec(kind=kind, max_batch=1))
    runtime = HarnessRuntime(suite, policy, root, RunConfig(agent_id="it", max_steps=4))
    try:
        [trajectory] = runtime.run([EpisodeSpec(task=task, seed=45, hooks=NoHooks())])
    finally:
        runtime.close()
    return trajectory


def test_the_deployed_agent_wins_a_held_out_task_by_itself() -> None:
    trajectory = _episode("smollm2-agent")
    assert trajectory.target.model_id == "SmolLM2-135M-Instruct-agent"
    assert trajectory.outcome.success, [s.action for s in trajectory.steps]
    # the model decided every step: no hook ran (forced share 0)
    assert all(s.origin == ActionOrigin.MODEL for s in trajectory.steps)
    assert trajectory.steps[0].action.startswith("sql: UPDATE")


def test_the_base_model_does_not_win_it() -> None:
    trajectory = _episode("smollm2")
    assert trajectory.target.model_id == "SmolLM2-135M-Instruct"
    assert not trajectory.outcome.success
