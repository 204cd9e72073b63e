"""Shared pieces of the daemon tests: failed trajectories from real WebShop episodes, a
scripted frozen target (a TEST DOUBLE for the model, named as such: its output is junk, like
SmolLM2's usually is), and an engineer stand-in that proposes the hand-written reference
patch plus broken ones (a TEST DOUBLE for the engineer model)."""

from __future__ import annotations

import json
from pathlib import Path

from harness_r1.contracts import FailurePacket, Trajectory
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import HarnessRuntime, HookSet, NoHooks, RunConfig
from harness_r1.harness.episode import EpisodeSpec
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.tasks import spread
from harness_r1.sandbox.canary import CanaryRunner
from harness_r1.sandbox.executor import IsolatedHooks, SandboxConfig
from harness_r1.sandbox.patchfile import reference_patches
from harness_r1.trainer.engineer import EngineerSample

ENV, SPLIT = "webshop", "fixed"
JUNK = "Thought: buy. Action: nothing"
MAX_STEPS = 8


def data_root() -> Path:
    return Settings().data_root()


def runtime(agent_id: str = "agent") -> HarnessRuntime:
    config = RunConfig(agent_id=agent_id, max_steps=MAX_STEPS, lockstep=8)
    return HarnessRuntime(get_suite(ENV), ScriptedPolicy([JUNK]), data_root(), config)


def failed_trajectories(n: int, offset: int = 0) -> list[Trajectory]:
    """n real WebShop episodes of the junk target under the base harness (all fail)."""
    tasks = spread(get_suite(ENV).load_tasks(data_root(), SPLIT), n, offset)
    run = runtime()
    try:
        return run.run([EpisodeSpec(task=t, seed=i, hooks=NoHooks()) for i, t in enumerate(tasks)])
    finally:
        run.close()


def canary_for(env: str) -> CanaryRunner:
    from harness_r1.sandbox.intake import static_validator

    def hooks(patch, cid: str) -> HookSet:  # type: ignore[no-untyped-def]
        return IsolatedHooks(patch, SandboxConfig(call_budget_s=2.0), overlay_id=cid)

    return CanaryRunner(runtime("canary"), hooks, static_validator())


class ReferenceEngineer:
    """TEST DOUBLE for the engineer model: proposal 0 is the reference patch, then a patch
    that fails the static checks, then unparseable text; in the engineer's output format."""

    name = "reference-double"

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]:
        patch = next(iter(reference_patches(packet.env).values()))
        good = f"<think>use the reference</think><patch>{patch.model_dump_json()}</patch>"
        bad = json.loads(patch.model_dump_json())
        bad["hooks"][0]["code"] = "import os\ndef hook(ctx, state):\n    return None\n"
        texts = [good, f"<patch>{json.dumps(bad)}</patch>", "I would add a hook."]
        return [EngineerSample(text=texts[i % len(texts)], tokens_exact=False) for i in range(k)]


def ingest_settings(tmp_path: Path, bootstrap: str, **kafka: object) -> Settings:
    """Settings of a daemon that only ingests (no batch is ever sealed) on fresh topics and a
    fresh SQLite store; `kafka` adds to the kafka group."""
    import uuid

    run = uuid.uuid4().hex[:8]
    return Settings(
        cache=tmp_path / "cache",
        state_url=f"sqlite:///{tmp_path / 'state.db'}",
        kafka_bootstrap=bootstrap,
        trajectory_topic=f"traj-{run}",
        release_topic=f"rel-{run}",
        control_topic=f"ctl-{run}",
        kafka={"dead_letter_topic": f"dlq-{run}", "events_topic": f"events-{run}", **kafka},
        loop={"batch_size": 1_000_000, "batch_window_s": 1e9},
        metrics={"port": 0},
    )
