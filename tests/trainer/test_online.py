"""Online GRPO's resolver: cold-start packet rows -> the packet's own canary batch, and the
reward of a sampled completion is its canary delta on exactly those tasks and seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_r1.consumers.packets import build_packet
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import EpisodeSpec, HarnessRuntime, NoHooks, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.tasks import spread
from harness_r1.sandbox.canary import CanaryRunner
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.intake import static_validator
from harness_r1.sandbox.patchfile import reference_patches
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.trainer.canary_reward import CanaryReward, canary_rows
from harness_r1.trainer.online import load_packet_rows, packets_and_resolver

pytestmark = pytest.mark.integration
JUNK = "Thought: buy. Action: nothing"  # a scripted stand-in for the model (a test double)


def runtime() -> HarnessRuntime:
    root = Settings().data_root()
    return HarnessRuntime(
        get_suite("webshop"), ScriptedPolicy([JUNK]), root, RunConfig(max_steps=8, lockstep=8)
    )


def test_packet_rows_resolve_to_their_own_batch_and_reward_the_delta(tmp_path: Path) -> None:
    root = Settings().data_root()
    tasks = spread(get_suite("webshop").load_tasks(root, "fixed"), 8)
    run = runtime()
    trajectories = run.run(
        [EpisodeSpec(task=t, seed=100 + i, hooks=NoHooks()) for i, t in enumerate(tasks)]
    )
    run.close()
    packet = build_packet(trajectories)
    row = {
        "packet_id": packet.packet_id,
        "env": "webshop",
        "task_ids": [t.task.task_id for t in trajectories],
        "splits": [t.task.split for t in trajectories],
        "seeds": [t.task.seed for t in trajectories],
        "packet": packet.model_dump(mode="json"),
    }
    path = tmp_path / "packets.jsonl"
    path.write_text(json.dumps(row) + "\n")

    def runner_for(env: str) -> CanaryRunner:
        return CanaryRunner(
            runtime(),
            lambda patch, cid: IsolatedHooks(patch, SandboxConfig(), overlay_id=cid),
            static_validator(),
        )

    packets, resolver = packets_and_resolver(load_packet_rows(path), root, runner_for)
    batch, _ = resolver.resolve(packet.packet_id)
    assert [t.task_id for t in batch.tasks] == row["task_ids"] and list(batch.seeds) == row["seeds"]
    [dataset_row] = canary_rows(packets)
    patch = reference_patches("webshop")["webshop_shopper"]
    good = f"<patch>{patch.model_dump_json()}</patch>"
    rewards = CanaryReward(resolver)(
        [dataset_row["prompt"]] * 2,
        [good, "no patch here"],
        packet_id=[packet.packet_id] * 2,
        env=["webshop"] * 2,
    )
    assert rewards[1] == 0.0  # invalid -> the configured reward
    assert rewards[0] is not None and rewards[0] > 0  # the shopper helps on these failures
    with pytest.raises(LookupError):
        resolver.resolve("no-such-packet")


def test_a_bad_packet_row_is_named(tmp_path: Path) -> None:
    path = tmp_path / "packets.jsonl"
    path.write_text('{"packet_id": "p"}\n')
    with pytest.raises(ValueError, match="packets.jsonl:1: not a packet row"):
        load_packet_rows(path)
