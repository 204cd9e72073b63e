"""Real SmolLM2-135M episodes on each real env (short). Marked integration: they load the model."""

from __future__ import annotations

from typing import Any

import pytest

from harness_r1.contracts import HookName, Termination, Trajectory
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, InProcessHooks, NoHooks, RunConfig
from harness_r1.models.base import SamplingConfig
from harness_r1.models.transformers_backend import TransformersPolicy

pytestmark = pytest.mark.integration

FIRST_SPLIT = {"alfworld": "valid_seen", "dbbench": "dev", "webshop": "fixed"}


@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    return TransformersPolicy.embedded(sampling=SamplingConfig(max_new_tokens=32), max_batch=2)


def _run(
    policy: TransformersPolicy, env: str, hooks: Any, max_steps: int, n: int = 1
) -> list[Trajectory]:
    root = Settings().data_root()
    suite = get_suite(env)
    tasks = suite.load_tasks(root, FIRST_SPLIT[env])[:n]
    runtime = HarnessRuntime(suite, policy, root, RunConfig(max_steps=max_steps, agent_id="it"))
    try:
        return runtime.run([EpisodeSpec(task=t, seed=7, hooks=hooks) for t in tasks])
    finally:
        runtime.close()


@pytest.mark.parametrize("env", sorted(FIRST_SPLIT))
def test_real_episode_on_each_env(policy: TransformersPolicy, env: str) -> None:
    first, second = _run(policy, env, NoHooks(), max_steps=2, n=2)
    for trajectory in (first, second):
        assert trajectory.target.model_id == "SmolLM2-135M-Instruct"
        assert 1 <= trajectory.outcome.steps <= 2
        assert trajectory.outcome.termination != Termination.ERROR, trajectory.outcome.error
        assert all(step.raw_output for step in trajectory.steps)
        assert trajectory.timings.generated_tokens > 0
        assert Trajectory.from_json_bytes(trajectory.to_json_bytes()) == trajectory
    # greedy decoding in the same lockstep batch reproduces the episode exactly
    [again] = _run(policy, env, NoHooks(), max_steps=2, n=2)[:1]
    assert [s.raw_output for s in again.steps] == [s.raw_output for s in first.steps]


def test_force_hook_wins_a_real_alfworld_game_whatever_the_model_says(
    policy: TransformersPolicy,
) -> None:
    """A pre_action hook that forces the game's own walkthrough turns SmolLM2's output into a win:
    hooks really drive the real env, and every forced step is on the trajectory."""
    root = Settings().data_root()
    task = get_suite("alfworld").load_tasks(root, "valid_seen")[0]
    walkthrough = list(task.payload["walkthrough"])

    def follow(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "force", "text": walkthrough[ctx["step"]]}

    hooks = InProcessHooks("ov-walkthrough", {HookName.PRE_ACTION: follow})
    suite = get_suite("alfworld")
    runtime = HarnessRuntime(suite, policy, root, RunConfig(max_steps=len(walkthrough) + 2))
    try:
        [trajectory] = runtime.run([EpisodeSpec(task=task, seed=0, hooks=hooks)])
    finally:
        runtime.close()
    assert trajectory.outcome.success and trajectory.outcome.termination == Termination.SUCCESS
    assert [s.action for s in trajectory.steps] == walkthrough
    assert all(s.effects[0].kind == "force" for s in trajectory.steps)
    assert trajectory.harness_version == "ov-walkthrough"


def test_converted_tokenizer_ends_turns_like_the_model(policy: TransformersPolicy) -> None:
    """The GGUF tokenizer says eos is <|im_start|>; the conversion makes it <|im_end|> (what the
    model's generation config and chat template end a turn with), and generation still stops
    at either (a model opening a new turn has finished its answer)."""
    tokenizer = policy.tokenizer
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token is not None
    assert tokenizer.eos_token_id == policy.model.generation_config.eos_token_id
    stops = set(policy._stop_ids.tolist())  # noqa: SLF001
    assert {tokenizer.convert_tokens_to_ids("<|im_start|>"), tokenizer.eos_token_id} <= stops
