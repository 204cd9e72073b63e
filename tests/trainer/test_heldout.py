"""Held-out scoring of an engineer version: every proposal is counted once (valid, rejected by
reason, or evaluated with its real canary delta), and the summary's fractions follow.

The engineer here is a test double returning fixed texts (the real SmolLM2 engineer is
exercised in test_engineer.py); the target is a scripted stand-in for the model on the real
WebShop env, and the valid patch runs in the real isolated worker."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from harness_r1.contracts import HookCode, Patch, Trajectory
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.tasks import spread
from harness_r1.models.base import ChatMessage
from harness_r1.sandbox.canary import BaselineCache, CanaryBatch, CanaryRunner, InfraFailure
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.gate import GateConfig
from harness_r1.sandbox.intake import static_validator
from harness_r1.sandbox.patchfile import reference_patches
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.trainer.coldstart_sources import (
    SourceConfig,
    TaskIndex,
    sources_from_trajectories,
    tasks_and_seeds,
)
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.heldout import (
    HeldOutConfig,
    HeldOutGate,
    PacketScore,
    evaluate_engineer,
)

pytestmark = pytest.mark.integration
JUNK = "Thought: buy. Action: nothing"  # scripted stand-in for the target model


class FixedEngineer:
    """Test double: answers every prompt with the same texts, in order."""

    model_id = "fixed-engineer"

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.calls: list[tuple[int, int]] = []

    def propose(
        self,
        messages: Sequence[ChatMessage],
        k: int,
        *,
        temperature: float = 1.0,
        seed: int = 0,
        max_new_tokens: int = 512,
    ) -> list[EngineerSample]:
        self.calls.append((k, seed))
        return [EngineerSample(text=t, completion_tokens=10) for t in self.texts[:k]]


def _runtime(root: Path) -> HarnessRuntime:
    return HarnessRuntime(
        get_suite("webshop"), ScriptedPolicy([JUNK]), root, RunConfig(max_steps=8, lockstep=8)
    )


def _scripted_runs(root: Path, n: int) -> list[Trajectory]:
    """n WebShop episodes of the scripted stand-in (all failures), on the base harness."""
    run = _runtime(root)
    tasks = spread(get_suite("webshop").load_tasks(root, "fixed"), n)
    try:
        return run.run([EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)])
    finally:
        run.close()


def test_proposals_are_scored_by_validity_and_canary_delta(tmp_path: Path) -> None:
    root = Settings().data_root()
    run = _runtime(root)
    tasks = spread(get_suite("webshop").load_tasks(root, "fixed"), 8)
    trajectories = run.run(
        [EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)]
    )
    sources = sources_from_trajectories(trajectories, TaskIndex("webshop", root))
    assert len(sources) == 1
    shopper = reference_patches("webshop")["webshop_shopper"]
    importing = Patch(
        env="webshop",
        hooks=[
            HookCode(hook="pre_action", code="import os\ndef hook(ctx, state):\n    return None\n")
        ],
    )
    engineer = FixedEngineer(
        [
            f"<think>choose options</think><patch>{shopper.model_dump_json()}</patch>",
            "I would add a hook.",  # no patch: a parse rejection
            f"<patch>{importing.model_dump_json()}</patch>",  # static rejection
            f"<patch>{shopper.model_dump_json()}</patch>",
        ]
    )
    runner = CanaryRunner(
        run,
        lambda patch, cid: IsolatedHooks(patch, SandboxConfig(), overlay_id=cid),
        static_validator(),
        cache=BaselineCache(tmp_path / "baselines"),
    )
    try:
        report = evaluate_engineer(
            sources, engineer, lambda _env: runner, HeldOutConfig(k=4, seed=5)
        )
    finally:
        run.close()
    summary = report.summary()
    assert engineer.calls == [(4, 5)]  # seed + packet index
    assert summary["proposals"] == 4 and summary["valid"] == 2
    assert summary["valid_fraction"] == 0.5
    assert summary["evaluated"] == 2
    assert sum(summary["rejected"].values()) == 2
    assert any(key.startswith("parse:") for key in summary["rejected"])
    assert any(key.startswith("static:") for key in summary["rejected"])
    [score] = report.packets
    assert score.deltas[0] == score.deltas[1] > 0  # the shopper helps on these failures
    assert summary["mean_delta"] == pytest.approx(score.deltas[0])
    # invalid proposals enter the mean reward at the configured 0.0
    assert summary["mean_reward"] == pytest.approx(score.deltas[0] / 2)
    assert summary["improved_fraction"] == 0.5
    # the two valid proposals are one patch (the think text aside): its episodes run once
    assert summary["canary_episodes"] == len(sources[0].tasks)
    assert list((tmp_path / "baselines").glob("*.json"))  # shared across versions on disk
    assert [s["rejected"] for s in score.samples][1:3] == [
        "parse:no_patch_block",
        "static:top_level_statement",  # the import sits outside the hook function
    ]
    assert score.samples[0]["valid"] and score.samples[0]["text"].startswith("<think>")
    # who decided: the shopper forces its clicks, and wins some goals with no model at all
    assert len(score.forced_shares) == len(score.patch_alone) == 2
    assert score.samples[0]["forced_share"] == score.forced_shares[0] > 0
    assert score.samples[0]["patch_alone"] == score.patch_alone[0]
    assert summary["mean_forced_share"] == pytest.approx(score.forced_shares[0])
    assert summary["mean_patch_alone"] == pytest.approx(score.patch_alone[0])
    assert PacketScore.from_dict(score.to_dict()).forced_shares == score.forced_shares


class FailingCanary:
    """Test double: a canary whose baseline keeps failing (infrastructure)."""

    def evaluate(self, batch: object, candidates: Sequence[object]) -> object:
        raise InfraFailure("baseline of batch x: episodes kept failing")


def test_an_infrastructure_failure_is_no_reward_and_the_evaluation_goes_on() -> None:
    root = Settings().data_root()
    trajectories = _scripted_runs(root, 8)
    config = SourceConfig(batch_size=4)
    sources = sources_from_trajectories(trajectories, TaskIndex("webshop", root), config)
    assert len(sources) == 2
    shopper = reference_patches("webshop")["webshop_shopper"]
    engineer = FixedEngineer([f"<patch>{shopper.model_dump_json()}</patch>", "no patch"])
    report = evaluate_engineer(
        sources,
        engineer,
        lambda _env: FailingCanary(),
        HeldOutConfig(k=2),  # type: ignore[arg-type,return-value]
    )
    summary = report.summary()
    assert summary["packets"] == 2 and summary["proposals"] == 4
    assert summary["infra_errors"] == 2 and summary["evaluated"] == 0
    assert summary["mean_delta"] is None
    assert summary["mean_reward"] == 0.0  # only the two invalid proposals have a reward
    assert summary["improved_fraction"] == 0.0


class NoEpisodes:
    """Test double: a canary that fails the test if any episode is asked of it."""

    def evaluate(self, batch: object, candidates: Sequence[object], incumbent: object) -> object:
        raise AssertionError("validity only must run no episode")


def test_validity_only_refuses_what_the_canary_would_and_runs_no_episode() -> None:
    root = Settings().data_root()
    sources = sources_from_trajectories(_scripted_runs(root, 4), TaskIndex("webshop", root))
    shopper = reference_patches("webshop")["webshop_shopper"]
    # `replace` needs an incumbent hook to replace: on the base harness the composition refuses
    replacing = Patch(
        env="webshop",
        hooks=[
            HookCode(
                hook="pre_action",
                mode="replace",
                code="def hook(ctx, state):\n    return None\n",
            )
        ],
    )
    engineer = FixedEngineer(
        [
            f"<patch>{shopper.model_dump_json()}</patch>",
            "I would add a hook.",
            f"<patch>{replacing.model_dump_json()}</patch>",
        ]
    )
    report = evaluate_engineer(
        sources,
        engineer,
        lambda _env: NoEpisodes(),  # type: ignore[arg-type,return-value]
        HeldOutConfig(k=3, canary=False),
    )
    summary = report.summary()
    assert summary["proposals"] == 3 and summary["valid"] == 1
    assert summary["evaluated"] == 0 and summary["mean_delta"] is None
    assert summary["rejected"] == {
        "canary:composition_nothing_to_replace": 1,
        "parse:no_patch_block": 1,
    }
    assert summary["canary_episodes"] == 0 and summary["baseline_episodes"] == 0
    # a resumed evaluation keeps finished scores only of these very packets, in their order
    stale = PacketScore(packet_id="another-packet", tasks=4)
    no_episodes = lambda _env: NoEpisodes()  # type: ignore[arg-type,return-value]  # noqa: E731
    with pytest.raises(ValueError, match="not the first packets"):
        evaluate_engineer(sources, engineer, no_episodes, HeldOutConfig(canary=False), done=[stale])
    resumed = evaluate_engineer(
        sources, engineer, no_episodes, HeldOutConfig(canary=False), done=report.packets
    )
    assert resumed.packets == report.packets
    assert len(engineer.calls) == 1  # nothing left to score: nothing proposed again


def test_the_gate_promotes_a_gain_without_guard_regression_and_keeps_its_patch(
    tmp_path: Path,
) -> None:
    """Packets of 4 from 8 runs: each packet's guard is the other packet's 4 tasks. The shopper
    gains on the batch and on the guard (promoted, its patch kept); a hook that does nothing
    has delta 0 (rejected, no guard run for it); with a guard minimum of 5 the shopper is
    inconclusive, not promoted: its guard holds the other packet's 4 tasks only, though it ran
    on the whole pool of 8. The guard runs once per patch over the pool: the first packet pays
    the pool's baseline and the shopper's 8 episodes, the second reads its guard back."""
    root = Settings().data_root()
    run = _runtime(root)
    tasks = spread(get_suite("webshop").load_tasks(root, "fixed"), 8)
    trajectories = run.run(
        [
            EpisodeSpec(task=t, seed=i, hooks=NoHooks(), trajectory_id=f"run-{i:02d}")
            for i, t in enumerate(tasks)
        ]
    )
    index = TaskIndex("webshop", root)
    sources = sources_from_trajectories(trajectories, index, SourceConfig(batch_size=4))
    assert len(sources) == 2
    pool = CanaryBatch("webshop", *tasks_and_seeds(trajectories, index))
    shopper = reference_patches("webshop")["webshop_shopper"]
    idle = Patch(
        env="webshop",
        hooks=[HookCode(hook="pre_action", code="def hook(ctx, state):\n    return None\n")],
    )
    engineer = FixedEngineer(
        [f"<patch>{shopper.model_dump_json()}</patch>", f"<patch>{idle.model_dump_json()}</patch>"]
    )
    runner = CanaryRunner(
        run,
        lambda patch, cid: IsolatedHooks(patch, SandboxConfig(), overlay_id=cid),
        static_validator(),
        cache=BaselineCache(tmp_path / "baselines"),
    )
    small = GateConfig(min_batch_tasks=4, min_guard_tasks=4)
    strict = GateConfig(min_batch_tasks=4, min_guard_tasks=5)
    try:
        gated = evaluate_engineer(
            sources,
            engineer,
            lambda _env: runner,
            HeldOutConfig(k=2),
            gate=HeldOutGate(pool, small),
        )
        too_small = evaluate_engineer(
            sources[:1],
            engineer,
            lambda _env: runner,
            HeldOutConfig(k=2),
            gate=HeldOutGate(pool, strict),
        )
    finally:
        run.close()
    summary = gated.summary()
    assert summary["gated"] and summary["evaluated"] == 4
    assert summary["verdicts"] == {"promote": 2, "reject": 2}
    assert summary["promoted"] == 2 and summary["promoted_fraction"] == 0.5
    for packet in gated.packets:
        shopper_sample, idle_sample = packet.samples
        assert shopper_sample["verdict"] == "promote" and shopper_sample["delta"] > 0
        assert Patch.model_validate(shopper_sample["patch"]).hooks == shopper.hooks
        assert idle_sample["verdict"] == "reject" and "patch" not in idle_sample
    # the first packet's guard ran the pool (8 tasks) for its baseline and the shopper; the
    # second packet's shopper proposal is the same patch: read back, no episode
    assert [p.guard_episodes for p in gated.packets] == [8 + 8, 0]
    assert too_small.summary()["verdicts"] == {"inconclusive": 1, "reject": 1}
    assert too_small.summary()["promoted"] == 0
