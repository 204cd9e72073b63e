"""Engineer training: SFT (versioned, resumable) and GRPO (online with the canary as reward,
replay of stored groups through TRL's rollout_func).

Test doubles, named as such: `RecordingRunner` stands in for a CanaryRunner (records what it
was asked, answers fixed deltas); `StaticResolver` maps packet ids to it; `LossSpy` is a
GRPOTrainer subclass that records the batches reaching the loss. The tests marked integration
train the real SmolLM2-135M (the converted local checkpoint) with LoRA, on tiny data: a few
steps, prompts of a few dozen tokens, completions of at most 16 tokens.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness_r1.contracts import (
    CanaryReport,
    CandidateCost,
    CandidateResult,
    HookCode,
    HookName,
    Patch,
    TargetRef,
    TaskSpec,
)
from harness_r1.sandbox.canary import CanaryBatch, Candidate
from harness_r1.sandbox.parse import render_completion
from harness_r1.trainer.canary_reward import (
    CanaryReward,
    MappingResolver,
    describe_reward,
    env_means,
    reward_counts,
)
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.errors import TrainingError, TrainingPaused
from harness_r1.trainer.grpo import (
    GrpoSettings,
    group_advantages,
    train_grpo_online,
    train_grpo_replay,
)
from harness_r1.trainer.replay import (
    ReplayGroup,
    ReplayRollout,
    load_replay_groups,
    replay_key,
    save_replay_groups,
)
from harness_r1.trainer.runs import RESUME_FILES, RUN_RECORD, carry_checkpoint
from harness_r1.trainer.sft import SftSettings, train_sft
from harness_r1.trainer.versions import list_versions, publish_version, read_metadata

# -- advantages -----------------------------------------------------------------------------


def test_group_advantages_match_a_hand_computed_group() -> None:
    # rewards 2, 0, 0, 0: mean = 2/4 = 0.5; deviations 1.5, -0.5, -0.5, -0.5;
    # sum of squares = 2.25 + 3 * 0.25 = 3; Bessel: variance = 3 / (4 - 1) = 1, std = 1;
    # advantage = deviation / (std + 1e-4) = 1.5 / 1.0001 and -0.5 / 1.0001.
    advantages = group_advantages([2.0, 0.0, 0.0, 0.0])
    assert advantages == pytest.approx([1.5 / 1.0001, -0.5 / 1.0001, -0.5 / 1.0001, -0.5 / 1.0001])
    assert sum(advantages) == pytest.approx(0.0, abs=1e-12)
    # Unscaled ("none", Dr. GRPO): the deviations themselves.
    assert group_advantages([2.0, 0.0, 0.0, 0.0], scale_rewards="none") == pytest.approx(
        [1.5, -0.5, -0.5, -0.5]
    )


def test_group_advantages_unscored_and_degenerate_groups() -> None:
    # None (infrastructure failure) is out of mean and std and gets 0: same as the group above.
    assert group_advantages([2.0, None, 0.0, 0.0, 0.0]) == pytest.approx(
        [1.5 / 1.0001, 0.0, -0.5 / 1.0001, -0.5 / 1.0001, -0.5 / 1.0001]
    )
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]  # no spread, no signal
    assert group_advantages([1.0, None]) == [0.0, 0.0]  # one scored: std undefined -> 0
    assert group_advantages([None, None]) == [0.0, 0.0]


def test_micro_batches_must_divide_the_step() -> None:
    with pytest.raises(ValueError, match="micro_batch must divide"):
        GrpoSettings(num_generations=4, micro_batch=3)
    assert GrpoSettings(num_generations=4, groups_per_step=2, micro_batch=2).batch_size == 8


def test_settings_refuse_a_single_iteration_and_bad_groups() -> None:
    with pytest.raises(ValueError, match="num_iterations must be >= 2.*ratio is exactly 1"):
        GrpoSettings(num_iterations=1)
    with pytest.raises(ValueError, match="num_generations must be >= 2"):
        GrpoSettings(num_generations=1)
    with pytest.raises(ValueError, match="epsilon"):
        GrpoSettings(epsilon=0.3, epsilon_high=0.2)
    settings = GrpoSettings()
    assert (settings.loss_type, settings.epsilon, settings.epsilon_high, settings.beta) == (
        "dapo",
        0.2,
        0.28,
        0.0,
    )


# -- the canary reward ----------------------------------------------------------------------


class RecordingRunner:
    """Test double of a CanaryRunner: records each evaluate call; answers `deltas` by candidate
    order, `None` meaning an infrastructure failure for that candidate."""

    def __init__(
        self, deltas: Sequence[float | None], events: Sequence[dict[str, int]] = ()
    ) -> None:
        self.deltas = list(deltas)
        self.events = list(events)
        self.calls: list[list[Candidate]] = []

    def evaluate(self, batch: CanaryBatch, candidates: Sequence[Candidate]) -> CanaryReport:
        self.calls.append(list(candidates))
        results = []
        for i, (candidate, delta) in enumerate(zip(candidates, self.deltas, strict=False)):
            status = "infra_error" if delta is None else "evaluated"
            results.append(
                CandidateResult(
                    candidate_id=candidate.candidate_id,
                    patch_sha256=None,
                    status=status,
                    delta_success=delta,
                    sandbox_events=self.events[i] if i < len(self.events) else {},
                    reward=delta,
                )
            )
        return CanaryReport(
            batch_id=batch.batch_id,
            env=batch.env,
            target=TargetRef(model_id="double"),
            tasks=len(batch.tasks),
            baseline_cached=True,
            baseline_success_rate=0.0,
            baseline_cost=CandidateCost(),
            candidates=results,
        )


def _batch(env: str = "alfworld") -> CanaryBatch:
    task = TaskSpec(env=env, split="train", task_id="t1", task_type="pick", instruction="go")
    return CanaryBatch(env=env, tasks=(task,), seeds=(0,))


class StaticResolver(MappingResolver):
    """Test double: counts resolutions."""

    def __init__(self, runner: RecordingRunner) -> None:
        super().__init__({"p1": (_batch(), runner)})
        self.resolved: list[str] = []

    def resolve(self, packet_id: str) -> Any:
        self.resolved.append(packet_id)
        return super().resolve(packet_id)


VALID_COMPLETION = render_completion(
    Patch(
        env="alfworld",
        description="Break loops.",
        hooks=[
            HookCode(
                hook=HookName.POST_FEEDBACK,
                code="def hook(ctx, state):\n    return 'Try something else.'\n",
            )
        ],
    ),
    think="It loops.",
)


def test_an_invalid_patch_gets_the_configured_reward_without_running_anything() -> None:
    runner = RecordingRunner([0.25])
    resolver = StaticResolver(runner)
    reward = CanaryReward(resolver, invalid_reward=-0.5)
    completions = [
        [{"role": "assistant", "content": "I would add a hint."}],  # no patch block
        [
            {
                "role": "assistant",
                "content": '<patch>{"description": "x", "hooks": [{"hook": '
                '"pre_action", "code": "import os\\ndef hook(ctx, state):\\n    return None"}]}'
                "</patch>",
            }
        ],  # static rejection: an import
    ]
    rewards = reward(["p", "p"], completions, packet_id=["p1", "p1"], env=["alfworld"] * 2)
    assert rewards == [-0.5, -0.5]
    assert runner.calls == [] and resolver.resolved == []  # invalid: never resolved, never run
    assert reward.counts == Counter({"invalid:parse": 1, "invalid:static": 1})

    # Mixed with a valid patch: only the valid one goes to the runner, in one call.
    rewards = reward(
        ["p", "p"],
        [completions[0], [{"role": "assistant", "content": VALID_COMPLETION}]],
        packet_id=["p1", "p1"],
        env=["alfworld", "alfworld"],
    )
    assert rewards == [-0.5, 0.25]
    assert len(runner.calls) == 1 and [c.candidate_id for c in runner.calls[0]] == ["c1"]


def test_each_call_logs_its_valid_fraction_and_its_mean_reward_per_env() -> None:
    """A GRPO run over several envs' packets: the curve must tell which env a group drew."""
    logged: list[tuple[str, float]] = []
    reward = CanaryReward(StaticResolver(RecordingRunner([0.5])), invalid_reward=-0.5)
    completions = [
        [{"role": "assistant", "content": "no patch"}],
        [{"role": "assistant", "content": VALID_COMPLETION}],
    ]
    rewards = reward(
        ["p", "p"],
        completions,
        packet_id=["p1", "p1"],
        env=["alfworld", "alfworld"],
        log_metric=lambda key, value: logged.append((key, value)),
    )
    assert rewards == [-0.5, 0.5]
    assert logged == [("canary/valid_fraction", 0.5), ("canary/reward_alfworld", 0.0)]
    assert env_means(["a", "b", "a"], [1.0, None, 0.0]) == {"a": 0.5}


def test_graded_invalid_reward_ranks_a_group_that_is_all_invalid_or_faulting() -> None:
    """With graded=True a group with no valid patch still has unequal rewards (so GRPO gets an
    advantage), and a patch whose hooks fault ranks below one that runs clean."""
    runner = RecordingRunner([0.0, 0.0], events=[{"raised": 2}, {"restarts": 1}])
    reward = CanaryReward(StaticResolver(runner), invalid_reward=-0.4, graded=True)
    completions = [
        "I would add a hint.",  # no patch block
        '<patch>{"description": "x", "hooks": [</patch>',  # JSON does not decode
        '<patch>{"description": "x", "hooks": [{"hook": "pre_action", "code": '
        '"import os\ndef hook(ctx, state):\n    return None"}]}</patch>',  # static: an import
        VALID_COMPLETION,  # evaluated, hooks raised
        VALID_COMPLETION,  # evaluated, only a worker restart
    ]
    n = len(completions)
    rewards = reward(["p"] * n, completions, packet_id=["p1"] * n, env=["alfworld"] * n)
    assert rewards == pytest.approx([-0.4, -0.3, -0.1, -0.05, 0.0])
    assert reward_counts(reward) == {
        "evaluated": 2,
        "invalid:parse": 2,
        "invalid:static": 1,
    }

    def odd(prompts: Any, completions: Any, **kw: Any) -> list[float]:
        return [0.0]

    odd.counts = 3  # type: ignore[attr-defined]  # not a mapping: no tallies, no crash
    assert reward_counts(odd) == {} and describe_reward(odd) == {"name": "odd"}
    assert describe_reward(reward) == {
        "name": "canary_reward",
        "metric": "delta_success",
        "invalid_reward": -0.4,
        "graded": True,
    }
    flat = CanaryReward(StaticResolver(RecordingRunner([0.0, 0.0])), invalid_reward=-0.4)
    assert flat(["p"] * n, completions, packet_id=["p1"] * n, env=["alfworld"] * n) == [
        -0.4,
        -0.4,
        -0.4,
        0.0,
        0.0,
    ]


def test_infrastructure_failures_give_no_reward() -> None:
    runner = RecordingRunner([None])
    reward = CanaryReward(StaticResolver(runner))
    assert reward(["p"], [VALID_COMPLETION], packet_id=["p1"], env=["alfworld"]) == [None]

    class Broken(RecordingRunner):
        def evaluate(self, batch: CanaryBatch, candidates: Sequence[Candidate]) -> CanaryReport:
            raise RuntimeError("env server down")

    reward = CanaryReward(StaticResolver(Broken([])))
    assert reward(["p"], [VALID_COMPLETION], packet_id=["p1"], env=["alfworld"]) == [None]
    with pytest.raises(LookupError):  # a packet nobody can resolve is wiring, not a reward
        reward(["p"], [VALID_COMPLETION], packet_id=["nope"], env=["alfworld"])


# -- replay groups --------------------------------------------------------------------------


def test_replay_rollout_serves_the_stored_ids_in_group_order(tmp_path: Path) -> None:
    a = ReplayGroup("a", (1, 2), ((5, 6, 2), (7, 2)), (1.0, 0.0), packet_id="p1")
    b = ReplayGroup("b", (3,), ((8,), (9, 9)), (None, 0.5))
    rollout = ReplayRollout([a, b])
    out = rollout([replay_key("b"), replay_key("b"), replay_key("a"), replay_key("a")])
    assert out["prompt_ids"] == [[3], [3], [1, 2], [1, 2]]
    assert out["completion_ids"] == [[8], [9, 9], [5, 6, 2], [7, 2]]
    assert out["replay_reward"] == [None, 0.5, 1.0, 0.0]
    assert out["logprobs"] is None
    path = tmp_path / "groups.jsonl"
    save_replay_groups(path, [a, b])
    assert load_replay_groups(path) == [a, b]


def test_replay_groups_need_exact_ids() -> None:
    sample = EngineerSample(text="x", completion_ids=[4, 2], prompt_ids=[1])
    group = ReplayGroup.from_samples("g", [sample, sample], [0.0, 1.0])
    assert group.prompt_ids == (1,) and group.completion_ids == ((4, 2), (4, 2))
    with pytest.raises(ValueError, match="re-tokenise"):
        ReplayGroup.from_samples("g", [sample, EngineerSample(text="y", prompt_ids=[1])], [0, 1])
    with pytest.raises(ValueError, match="rewards"):
        ReplayGroup("g", (1,), ((2,), (3,)), (1.0,))


def test_published_versions_are_numbered_and_never_overwritten(tmp_path: Path) -> None:
    def write(text: str) -> Any:
        return lambda directory: (directory / "adapter.txt").write_text(text)

    first = publish_version(tmp_path, write("one"), {"kind": "test"})
    second = publish_version(tmp_path, write("two"), {"kind": "test", "parent_version": "v0001"})
    assert (first.version, second.version) == ("v0001", "v0002")
    assert (first.version_dir / "adapter.txt").read_text() == "one"
    assert read_metadata(second.version_dir)["parent_version"] == "v0001"
    assert [p.name for p in list_versions(tmp_path)] == ["v0001", "v0002"]
    assert not [p for p in (tmp_path / "engineer").iterdir() if p.name.startswith(".")]


# -- the real tiny model --------------------------------------------------------------------


def _lora_snapshot(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def _snapshots() -> tuple[Any, list[dict[str, Any]]]:
    from transformers import TrainerCallback

    taken: list[dict[str, Any]] = []

    class Snapshots(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            taken.append(_lora_snapshot(kw["model"]))

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            taken.append(_lora_snapshot(kw["model"]))

    return Snapshots(), taken


def _changed(before: dict[str, Any], after: dict[str, Any]) -> int:
    import torch

    assert before and before.keys() == after.keys()
    return sum(not torch.equal(before[n], after[n]) for n in before)


# One torch thread: on 2 cores shared with other jobs, 2 threads ran a step ~10x slower.
TINY = {"threads": 1, "save_steps": 1, "logging_steps": 1}


@pytest.fixture(autouse=True)
def _restore_torch_threads() -> Any:
    """Training sets torch's (process-wide) thread count; put it back for the other tests."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.integration
@pytest.mark.parametrize("micro_batch", [None, 1], ids=["whole-step", "micro-batch-1"])
def test_a_grpo_step_on_the_tiny_model_changes_the_lora_weights(
    tmp_path: Path, micro_batch: int | None
) -> None:
    settings = GrpoSettings(
        output_root=tmp_path,
        num_generations=4,
        num_iterations=2,
        micro_batch=micro_batch,  # 1: four accumulated passes per optimizer step
        max_steps=2,  # one generated batch, optimised twice (the second step clips)
        max_completion_length=16,
        learning_rate=1e-3,
        **TINY,
    )
    rows = [
        {
            "prompt": [{"role": "user", "content": "Write a patch that stops loops."}],
            "packet_id": "p1",
            "env": "alfworld",
        }
    ]
    seen: list[list[list[int]]] = []

    def spread(prompts: Any, completions: Any, completion_ids: Any, **kw: Any) -> list[float]:
        seen.append(completion_ids)
        return [float(i) for i in range(len(completions))]  # a spread: nonzero advantages

    snapshots, taken = _snapshots()
    result = train_grpo_online(rows, spread, settings=settings, callbacks=[snapshots])
    assert len(seen) == 1 and len(seen[0]) == 4  # one group of K=4 sampled completions
    assert all(0 < len(ids) <= 16 for ids in seen[0])
    assert _changed(*taken) > 0
    metadata = read_metadata(result.version_dir)
    assert result.version == "v0001" and metadata["steps"] == 2
    assert metadata["groups_used"] == 1 and metadata["mean_reward"] == pytest.approx(1.5)
    assert metadata["settings"]["loss_type"] == "dapo" and metadata["tokens_per_s"] > 0
    assert metadata["reward"] == {"name": "spread"} and metadata["reward_counts"] == {}
    assert (result.version_dir / "adapter_model.safetensors").is_file()


def _adapter(version: Path) -> dict[str, list[float]]:
    from safetensors.torch import load_file

    return {
        k: v.flatten().tolist() for k, v in load_file(version / "adapter_model.safetensors").items()
    }


@pytest.mark.integration
def test_a_grpo_run_paused_by_its_time_budget_continues_on_another_host(tmp_path: Path) -> None:
    """The time budget saves a checkpoint at the end of the first generation cycle and
    publishes nothing; a run elsewhere (another output root: no run directory of its own)
    continues from that checkpoint to max_steps, on a fresh generation."""
    common = {
        "num_generations": 4,
        "num_iterations": 2,
        "max_steps": 4,
        "max_completion_length": 8,
        "learning_rate": 1e-3,
        **TINY,
        "save_steps": 100,  # no step saves by itself: the checkpoint is the budget's
    }
    rows = [{"prompt": [{"role": "user", "content": "Patch it."}], "packet_id": "p1"}]
    seen: list[int] = []

    def spread(prompts: Any, completions: Any, **kw: Any) -> list[float]:
        seen.append(len(completions))
        return [float(i) for i in range(len(completions))]

    here = GrpoSettings(output_root=tmp_path / "here", stop_after_s=1e-3, **common)
    with pytest.raises(TrainingPaused) as paused:
        train_grpo_online(rows, spread, settings=here)
    assert paused.value.step == 2 and Path(paused.value.checkpoint).name == "checkpoint-2"
    assert list_versions(tmp_path / "here") == [] and seen == [4]
    carried = carry_checkpoint(Path(paused.value.checkpoint), tmp_path / "carried")
    assert sorted(p.name for p in carried.iterdir()) == sorted([*RESUME_FILES, RUN_RECORD])
    there = GrpoSettings(output_root=tmp_path / "there", **common)
    result = train_grpo_online(rows, spread, settings=there, resume_from=carried)
    metadata = read_metadata(result.version_dir)
    assert (metadata["steps"], metadata["steps_this_run"]) == (4, 2)
    assert metadata["resumed_from"] == "carried" and seen == [4, 4]
    # the metadata covers both invocations: two generated groups, not only the last one
    assert (metadata["groups_used"], metadata["generation_rounds"]) == (2, 2)
    assert metadata["recorded_since_step"] == 0 and metadata["packets"] == {"p1": 2}
    assert metadata["mean_reward"] == pytest.approx(1.5)
    # the same run without a pause: the same weights (optimizer, schedule and RNG carried)
    whole = train_grpo_online(
        rows, spread, settings=GrpoSettings(output_root=tmp_path / "whole", **common)
    )
    assert _adapter(result.version_dir) == _adapter(whole.version_dir)


def test_a_run_record_survives_a_resume_and_an_old_checkpoint_says_where_it_starts(
    tmp_path: Path,
) -> None:
    from harness_r1.trainer.grpo import _Recorder

    def halves(prompts: Any, completions: Any, **kw: Any) -> list[float | None]:
        return [0.5, None][: len(completions)]

    first = _Recorder(halves, k=2)
    first(["p", "p"], ["a", "b"], packet_id=["x", "x"])
    checkpoint = tmp_path / "checkpoint-4"
    checkpoint.mkdir()
    first.save(checkpoint)
    later = _Recorder(halves, k=2)
    later.resume(checkpoint)
    later(["p", "p"], ["a", "b"], packet_id=["y", "y"])
    assert later.metadata() == {
        "groups_used": 2,
        "mean_reward": 0.5,
        "rewards_none": 2,
        "generation_rounds": 2,
        "recorded_since_step": 0,
    }
    assert later.packets == {"x": 1, "y": 1}
    # a checkpoint saved before records were kept: counts start at its step, and say so
    (checkpoint / RUN_RECORD).unlink()
    (checkpoint / "trainer_state.json").write_text('{"global_step": 4}')
    old = _Recorder(halves, k=2)
    old.resume(checkpoint)
    assert old.metadata()["recorded_since_step"] == 4 and old.groups == 0
    # a torn record (a kill mid-write elsewhere) is taken as none, not a failed resume
    (checkpoint / RUN_RECORD).write_text('{"since_step": 0, "rewa')
    torn = _Recorder(halves, k=2)
    torn.resume(checkpoint)
    assert torn.metadata()["recorded_since_step"] == 4 and torn.groups == 0


@pytest.mark.integration
def test_replayed_groups_reach_the_loss_with_their_sampled_token_ids(tmp_path: Path) -> None:
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from harness_r1.trainer.model_io import resolve_base

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_base("smollm2")))

    def prompt_ids(text: str) -> list[int]:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])

    def pieces(*parts: str) -> tuple[int, ...]:
        # Token by token as a sampler may emit them: "pat" + "ch" is not how the tokenizer
        # would encode "patch", so re-tokenising the text would not give these ids back.
        ids = [i for part in parts for i in tokenizer(part, add_special_tokens=False)["input_ids"]]
        return (*ids, 2)  # <|im_end|>

    groups = [
        ReplayGroup(
            "g-a",
            tuple(prompt_ids("Packet A: the agent loops.")),
            (pieces("<think>loop</think>", "<pat", "ch>{}"), pieces("no patch")),
            (1.0, 0.0),
            packet_id="pa",
        ),
        ReplayGroup(
            "g-b",
            tuple(prompt_ids("Packet B: invalid actions.")),
            (pieces("<think>snap</think>"), pieces("<pat", "ch>", '{"hooks": []}')),
            (0.25, None),  # one infrastructure failure: no signal in this group
            packet_id="pb",
        ),
    ]
    sampled = groups[0].completion_ids[0][:-1]
    retokenised = tokenizer(tokenizer.decode(sampled), add_special_tokens=False)["input_ids"]
    assert tuple(retokenised) != sampled  # the test would not notice re-tokenising otherwise

    reached: list[tuple[tuple[int, ...], tuple[int, ...], float]] = []

    class LossSpy(GRPOTrainer):  # type: ignore[misc]
        """Records every (prompt ids, completion ids, advantage) the loss is computed on."""

        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kw: Any) -> Any:
            for row in range(inputs["completion_ids"].size(0)):
                p = inputs["prompt_ids"][row][inputs["prompt_mask"][row].bool()].tolist()
                c = inputs["completion_ids"][row][inputs["completion_mask"][row].bool()].tolist()
                reached.append((tuple(p), tuple(c), float(inputs["advantages"][row])))
            return super().compute_loss(model, inputs, *args, **kw)

    settings = GrpoSettings(
        output_root=tmp_path,
        num_generations=2,
        groups_per_step=2,
        num_iterations=2,
        max_steps=0,  # one pass: 2 groups // 2 per step * 2 iterations = 2 steps
        learning_rate=1e-3,
        **TINY,
    )
    snapshots, taken = _snapshots()
    result = train_grpo_replay(
        groups, settings=settings, callbacks=[snapshots], trainer_cls=LossSpy
    )

    stored = {
        (g.prompt_ids, ids): adv
        for g in groups
        for ids, adv in zip(g.completion_ids, group_advantages(g.rewards), strict=True)
    }
    # Every stored completion reached the loss once per iteration, with exactly its ids, and
    # with TRL's advantage equal to the hand-mirrored normalisation.
    assert Counter((p, c) for p, c, _ in reached) == Counter({key: 2 for key in stored})
    for p, c, advantage in reached:
        assert advantage == pytest.approx(stored[(p, c)], abs=1e-5)
    assert stored[(groups[0].prompt_ids, groups[0].completion_ids[0])] == pytest.approx(
        0.5 / (math.sqrt(0.5) + 1e-4)
    )
    assert _changed(*taken) > 0
    metadata = read_metadata(result.version_dir)
    assert metadata["mode"] == "replay" and metadata["group_ids"] == ["g-a", "g-b"]
    assert metadata["groups_used"] == 2 and metadata["steps"] == 2
    assert metadata["mean_reward"] == pytest.approx((1.0 + 0.0 + 0.25) / 3)
    assert metadata["rewards_none"] == 1
    # The second iteration on the same batch moved the ratio away from 1: the clip acted.
    assert metadata["last_log"]["clip_ratio/region_mean"] > 0


def _sft_rows(path: Path) -> Path:
    rows = [
        {
            "prompt": [
                {"role": "system", "content": "You write harness patches."},
                {"role": "user", "content": f"Packet {i}: the agent repeats itself."},
            ],
            "completion": [
                {"role": "assistant", "content": f"<think>loop {i}</think>" + VALID_COMPLETION}
            ],
            "metadata": {"packet_id": f"p{i}", "template": "loop"},
        }
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.integration
def test_sft_publishes_a_new_version_each_run(tmp_path: Path) -> None:
    data = _sft_rows(tmp_path / "coldstart.jsonl")
    settings = SftSettings(
        output_root=tmp_path / "out", max_steps=2, batch_size=2, max_length=256, **TINY
    )
    snapshots, taken = _snapshots()
    first = train_sft(data, settings=settings, callbacks=[snapshots])
    assert first.version == "v0001" and _changed(*taken) > 0
    metadata = read_metadata(first.version_dir)
    assert metadata["steps"] == 2 and metadata["dataset"]["rows"] == 4
    assert len(metadata["dataset"]["sha256"]) == 64 and metadata["parent_version"] is None
    assert metadata["base_model"]["fingerprint"] and metadata["libraries"]["trl"] == "1.16.0"
    assert metadata["train_loss"] > 0 and metadata["tokens_per_s"] > 0
    assert (first.version_dir / "adapter_config.json").is_file()
    before = (first.version_dir / "adapter_model.safetensors").read_bytes()

    second = train_sft(data, settings=settings)
    assert second.version == "v0002"
    assert (first.version_dir / "adapter_model.safetensors").read_bytes() == before
    assert read_metadata(first.version_dir)["version"] == "v0001"
    assert [p.name for p in list_versions(tmp_path / "out")] == ["v0001", "v0002"]


@pytest.mark.integration
def test_sft_resumes_from_the_last_checkpoint(tmp_path: Path) -> None:
    data = _sft_rows(tmp_path / "coldstart.jsonl")
    root = tmp_path / "out"
    common = {"output_root": root, "batch_size": 2, "max_length": 256, **TINY}
    first = train_sft(data, settings=SftSettings(max_steps=1, **common))
    assert read_metadata(first.version_dir)["steps"] == 1
    resumed = train_sft(data, settings=SftSettings(max_steps=2, **common))
    metadata = read_metadata(resumed.version_dir)
    assert metadata["resumed_from"] == "checkpoint-1"
    assert metadata["run_dir"] == read_metadata(first.version_dir)["run_dir"]
    assert (metadata["steps"], metadata["steps_this_run"]) == (2, 1)
    assert resumed.version == "v0002"


@pytest.mark.integration
def test_sft_keeps_every_checkpoint_as_an_adapter_when_asked(tmp_path: Path) -> None:
    """save_total_limit=None: a checkpoint per save step, each one a peft adapter directory
    (what `engineer evaluate --adapter` loads for the SFT curve)."""
    data = _sft_rows(tmp_path / "coldstart.jsonl")
    settings = SftSettings(
        output_root=tmp_path / "out",
        max_steps=3,
        batch_size=2,
        max_length=256,
        save_total_limit=None,
        **TINY,  # save_steps=1
    )
    result = train_sft(data, settings=settings)
    run_dir = Path(read_metadata(result.version_dir)["run_dir"])
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    weights = [(run_dir / c / "adapter_model.safetensors").read_bytes() for c in checkpoints]
    assert all((run_dir / c / "adapter_config.json").is_file() for c in checkpoints)
    assert len(set(weights)) == 3  # each step moved the adapter


@pytest.mark.integration
def test_sft_refuses_rows_that_would_lose_their_completion(tmp_path: Path) -> None:
    data = _sft_rows(tmp_path / "coldstart.jsonl")
    settings = SftSettings(output_root=tmp_path / "out", max_steps=1, max_length=32, **TINY)
    with pytest.raises(TrainingError, match="4 of 4 rows are longer than max_length=32"):
        train_sft(data, settings=settings)
    assert list_versions(tmp_path / "out") == []  # nothing published


def test_under_attribution_limits_a_solver_earns_the_refusals_reward() -> None:
    """gate.profile advisory reaches the offline reward too: a valid patch that wins alone (or
    whose patch-alone control did not run) is rewarded as refused, advice keeps its delta; the
    reward's description names the limits (a version trained under them is another run)."""
    from harness_r1.contracts import PatchAlone
    from harness_r1.sandbox.gate import ADVISORY_LIMITS, GateConfig

    class AloneRunner(RecordingRunner):
        def __init__(self, alone: PatchAlone | None) -> None:
            super().__init__([0.25])
            self.alone = alone

        def evaluate(self, batch: CanaryBatch, candidates: Sequence[Candidate]) -> CanaryReport:
            report = super().evaluate(batch, candidates)
            results = [r.model_copy(update={"patch_alone": self.alone}) for r in report.candidates]
            return report.model_copy(update={"candidates": results})

    advisory = GateConfig(**ADVISORY_LIMITS)
    completion = [[{"role": "assistant", "content": VALID_COMPLETION}]]
    for alone, expected in [
        (PatchAlone(tasks=1, successes=1), -0.5),  # the harness solved the task alone
        (None, -0.5),  # no control: no evidence that the model decided
        (PatchAlone(tasks=1, successes=0), 0.25),  # advice: its delta
    ]:
        reward = CanaryReward(
            StaticResolver(AloneRunner(alone)), invalid_reward=-0.5, attribution=advisory
        )
        assert reward(["p"], completion, packet_id=["p1"], env=["alfworld"]) == [expected]
    assert reward.describe()["attribution"] == {
        "max_forced_share": 0.1,
        "max_patch_alone_success": 0.0,
    }
    assert "attribution" not in CanaryReward(StaticResolver(AloneRunner(None))).describe()
