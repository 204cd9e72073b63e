"""The canary's baseline: the key that shares it only between targets that generate alike
(every generation setting read), its cost when it runs and when cached, its success rate, its
cache on disk, the pairing of patched outcomes with its own, and the incumbent overlay as
baseline (issue 17). On the tiny in-test env of canary_rig.py."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from canary_rig import BATCH, LOOK_THEN_OPEN, OPEN, SUITE, TASKS, DoorEnv, patch, runner, validator

from harness_r1.contracts import CandidateCost, HookCode, HookName, Patch
from harness_r1.harness import HarnessRuntime, NoHooks, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.models.base import SamplingConfig
from harness_r1.sandbox.canary import (
    BASE_INCUMBENT,
    BaselineCache,
    CanaryBatch,
    CanaryRunner,
    Candidate,
    EpisodeOutcome,
    Incumbent,
    InfraFailure,
    generation_identity,
)
from harness_r1.sandbox.compose import Link
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig

pytestmark = pytest.mark.usefixtures("door_env_reset")


def test_baselines_are_shared_only_by_targets_run_the_same_way() -> None:
    from harness_r1.models.base import SamplingConfig
    from harness_r1.models.openai_http import OpenAIChatPolicy

    def key(**kwargs: Any) -> str:
        lockstep = kwargs.pop("lockstep", 8)
        policy = OpenAIChatPolicy("http://127.0.0.1:9", "m", **kwargs)
        runtime = HarnessRuntime(SUITE, policy, Path("."), RunConfig(lockstep=lockstep))
        return CanaryRunner(
            runtime, lambda p, c: IsolatedHooks(p, SandboxConfig()), validator
        ).baseline_key(BATCH)

    same = key(sampling=SamplingConfig(max_new_tokens=64))
    assert key(sampling=SamplingConfig(max_new_tokens=64)) == same
    assert key(sampling=SamplingConfig(max_new_tokens=96)) != same
    assert key(sampling=SamplingConfig(max_new_tokens=64, temperature=0.7)) != same
    assert key(sampling=SamplingConfig(max_new_tokens=64), lockstep=1) != same


@dataclass(frozen=True)
class LocalModel:
    """The settings a local backend exposes (transformers_backend.TransformersPolicy)."""

    model_id: str = "m"
    version: str = "1"
    sampling: SamplingConfig = SamplingConfig(max_new_tokens=64)
    max_prompt_tokens: int = 3072
    max_batch: int = 8
    prefix_cache: object | None = None
    batched_decode: bool | None = None
    draft_tokens: int | None = None
    dtype: str | None = None


def test_generation_identity_reads_every_setting_that_changes_what_the_target_writes() -> None:
    local = LocalModel(prefix_cache=object(), batched_decode=True, draft_tokens=4, dtype="bfloat16")
    assert generation_identity(local) == {
        "sampling": {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 64},
        "max_prompt_tokens": 3072,
        "max_batch": 8,
        "prefix_cache": True,
        "batched_decode": True,
        "draft_tokens": 4,
        "dtype": "bfloat16",
    }
    assert generation_identity(ScriptedPolicy(["x"], max_batch=4)) == {
        "sampling": None,
        "max_prompt_tokens": None,
        "max_batch": 4,
        "prefix_cache": False,
        "batched_decode": None,
        "draft_tokens": None,
        "dtype": None,
    }
    # a backend without a setting reads as None (prefix reuse: off), never as an error
    assert generation_identity(object()) == {
        "sampling": None,
        "max_prompt_tokens": None,
        "max_batch": None,
        "prefix_cache": False,
        "batched_decode": None,
        "draft_tokens": None,
        "dtype": None,
    }

    def key(model: LocalModel) -> str:
        runtime = HarnessRuntime(SUITE, model, Path("."), RunConfig())  # type: ignore[arg-type]
        return CanaryRunner(runtime, lambda p, c: NoHooks(), validator).baseline_key(BATCH)

    same = key(LocalModel())
    assert key(LocalModel()) == same
    assert key(LocalModel(max_prompt_tokens=2048)) != same
    assert key(LocalModel(max_batch=4)) != same
    assert key(LocalModel(prefix_cache=object())) != same
    # the engine and the number format are part of how the target generates (issue 16)
    assert key(LocalModel(batched_decode=False)) != key(LocalModel(batched_decode=True))
    assert key(LocalModel(dtype="bfloat16")) != key(LocalModel(dtype="float32"))
    assert key(LocalModel(draft_tokens=4)) != key(LocalModel(draft_tokens=0))


def test_the_baseline_cost_is_reported_when_it_runs_and_zero_when_cached(
    dancing_canary: CanaryRunner,
) -> None:
    started = time.perf_counter()
    first = dancing_canary.evaluate(BATCH, [])
    wall = time.perf_counter() - started
    cost = first.baseline_cost
    # 8 episodes of 4 `dance` steps, 2 tokens each; timed to the millisecond
    assert (cost.episodes, cost.steps, cost.generated_tokens) == (8, 32, 64)
    assert 0 < cost.seconds <= wall + 0.0005 and cost.seconds == round(cost.seconds, 3)
    again = dancing_canary.evaluate(BATCH, [])
    assert again.baseline_cached and again.baseline_cost == CandidateCost()
    assert again.candidates == [] and again.control is None


def test_a_one_task_batch_reports_its_baseline_success_rate() -> None:
    """`open door` wins d0: the rate of a one-task batch is that task's outcome, 1.0."""
    canary = runner(ScriptedPolicy(["ACTION: open door"]))
    report = canary.evaluate(CanaryBatch("door", TASKS[:1], (0,)), [])
    assert report.baseline_success_rate == 1.0 and report.tasks == 1


def test_baselines_persist_on_disk_one_file_per_batch(tmp_path: Path) -> None:
    """A restarted runner finds the baseline its predecessor wrote (nothing re-run), and a
    second batch gets its own file in the same directory."""
    directory = tmp_path / "cache" / "baselines"  # parents created on first use
    policy = ScriptedPolicy(["ACTION: open door"])

    def fresh() -> CanaryRunner:
        runtime = HarnessRuntime(SUITE, policy, Path("."), RunConfig())
        return CanaryRunner(
            runtime, lambda p, c: NoHooks(), validator, None, BaselineCache(directory)
        )

    first = fresh()
    key = first.baseline_key(BATCH)
    outcomes, cached = first.baseline(BATCH)
    assert not cached and DoorEnv.resets == 8
    assert sorted(p.name for p in directory.iterdir()) == [f"{key}.json"]
    assert json.loads((directory / f"{key}.json").read_text())[0] == {
        "task_id": "d0",
        "seed": 0,
        "success": True,
        "reward": 1.0,
        "tokens": 3,  # ACTION: open door
        "seconds": outcomes[0].seconds,
        "steps": 1,
        "faults": {},
        "effects": {},
        "origins": {"model": 1, "rewritten": 0, "forced": 0, "vetoed_then_model": 0},
    }
    restarted = fresh()
    for _ in range(2):  # from disk, then from memory
        assert restarted.baseline(BATCH) == (outcomes, True)
    assert DoorEnv.resets == 8
    one = CanaryBatch("door", TASKS[:1], (0,))
    assert restarted.baseline(one)[1] is False and DoorEnv.resets == 9
    names = sorted(p.name for p in directory.iterdir())
    assert names == sorted([f"{key}.json", f"{restarted.baseline_key(one)}.json"])


def test_pairing_of_outcomes_from_other_tasks_is_refused() -> None:
    from harness_r1.sandbox.canary import EpisodeOutcome, InfraFailure, _check_pairing

    def outcome(task_id: str, seed: int) -> EpisodeOutcome:
        return EpisodeOutcome(task_id, seed, False, 0.0, 0, 0.0)

    base = [outcome("d0", 0), outcome("d1", 1)]
    _check_pairing(base, [outcome("d0", 0), outcome("d1", 1)])
    with pytest.raises(InfraFailure, match="pairing"):
        _check_pairing(base, [outcome("d1", 1), outcome("d0", 0)])
    with pytest.raises(InfraFailure, match="pairing"):
        _check_pairing(base, [outcome("d0", 5), outcome("d1", 1)])


def test_pairing_of_outcomes_of_another_length_is_refused() -> None:
    def outcome(task_id: str, seed: int) -> EpisodeOutcome:
        return EpisodeOutcome(task_id, seed, False, 0.0, 0, 0.0)

    from harness_r1.sandbox.canary import _check_pairing

    base = [outcome("d0", 0), outcome("d1", 1)]
    with pytest.raises(ValueError, match="zip"):
        _check_pairing(base, base[:1])
    with pytest.raises(
        InfraFailure,
        match="^canary pairing: baseline and patched outcomes are not the same tasks$",
    ):
        _check_pairing(base, base[::-1])


# -- the incumbent as baseline (issue 17) ---------------------------------------------------


LOOK_FIRST = patch(
    "def hook(ctx, state):\n"
    "    if ctx['step'] == 0:\n"
    "        return {'effect': 'force', 'text': 'look'}\n"
    "    return None\n"
)


def test_a_patch_that_helps_only_on_top_of_the_incumbent_scores_against_the_incumbent() -> None:
    incumbent = Incumbent.of_chain("ov-open", [Link("ov-open", OPEN)])
    canary = runner(ScriptedPolicy(["ACTION: dance"]), control=True)
    alone = canary.evaluate(BATCH, [Candidate("look", LOOK_FIRST)])
    assert alone.incumbent_overlay_id == "base"
    assert alone.candidates[0].delta_success == 0.0  # looking alone never opens the door
    report = canary.evaluate(
        BATCH, [Candidate("look", LOOK_FIRST), Candidate("again", OPEN)], incumbent
    )
    assert report.incumbent_overlay_id == "ov-open"
    assert report.baseline_success_rate == pytest.approx(0.5) and not report.baseline_cached
    look, again = report.candidates
    # on top of "always open" (a newer force wins at step 0), every task is won: +0.5
    assert look.delta_success == pytest.approx(0.5) and look.reward == pytest.approx(0.5)
    assert look.patch_sha256 == LOOK_FIRST.sha256()
    assert look.composed_sha256 == incumbent.with_link("look", LOOK_FIRST).sha256()
    assert again.delta_success == 0.0  # a repeat of the incumbent adds nothing
    assert report.control is not None and report.control.delta_success == 0.0


def test_baselines_are_keyed_by_the_incumbent(dancing_canary: CanaryRunner) -> None:
    on_open = Incumbent.of_chain("ov-open", [Link("ov-open", OPEN)])
    on_look = Incumbent.of_chain("ov-look", [Link("ov-look", LOOK_THEN_OPEN)])
    keys = {dancing_canary.baseline_key(BATCH, i) for i in (BASE_INCUMBENT, on_open, on_look)}
    assert len(keys) == 3
    assert dancing_canary.baseline(BATCH, on_open)[0] != dancing_canary.baseline(BATCH, on_look)[0]
    assert dancing_canary.baseline(BATCH, on_open)[1]  # the second ask is the cached one


def test_a_candidate_that_cannot_compose_onto_the_incumbent_is_invalid_with_the_reason() -> None:
    removal = Patch(env="door", hooks=[HookCode(hook=HookName.POST_FEEDBACK, mode="remove")])
    incumbent = Incumbent.of_chain("ov-open", [Link("ov-open", OPEN)])
    canary = runner(ScriptedPolicy(["ACTION: dance"]), invalid_reward=-0.5)
    [result] = canary.evaluate(BATCH, [Candidate("rm", removal)], incumbent).candidates
    assert result.status == "invalid" and result.reward == -0.5
    assert result.invalid_reason is not None
    assert result.invalid_reason.startswith("composition_nothing_to_remove: post_feedback")
