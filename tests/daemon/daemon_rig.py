"""Shared pieces of the daemon tests: failed trajectories from real WebShop episodes, a
scripted frozen target (a TEST DOUBLE for the model, named as such: its output is junk, like
SmolLM2's usually is), and an engineer stand-in that proposes the hand-written reference
patch plus broken ones (a TEST DOUBLE for the engineer model)."""

from __future__ import annotations

import json
from pathlib import Path

from harness_r1.contracts import FailurePacket, HookCode, HookName, Patch, Trajectory
from harness_r1.daemon.settings import Settings
from harness_r1.envs import get_suite
from harness_r1.harness import HarnessRuntime, HookSet, NoHooks, RunConfig
from harness_r1.harness.episode import EpisodeSpec
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.tasks import spread
from harness_r1.sandbox.canary import CanaryRunner
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.patchfile import reference_patches
from harness_r1.sandbox.sandbox_config import SandboxConfig
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


def canary_with_progress(env: str, progress: object) -> CanaryRunner:
    """`canary_for` reporting its episodes to `progress` (the demo's `DemoParts.canary_for`)."""
    from harness_r1.sandbox.intake import static_validator

    def hooks(patch, cid: str) -> HookSet:  # type: ignore[no-untyped-def]
        return IsolatedHooks(patch, SandboxConfig(call_budget_s=2.0), overlay_id=cid)

    return CanaryRunner(
        runtime("canary"),
        hooks,
        static_validator(),
        progress=progress,  # type: ignore[arg-type]
    )


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


def _shopper_hook(name: str) -> str:
    patch = reference_patches("webshop")["webshop_shopper"]
    return next(h.code for h in patch.hooks if h.hook == name)


#: Round 1 of the staged engineer: the reference shopper without its option clicks (it buys
#: as soon as a product page is open).
BUY_AT_ONCE = _shopper_hook("pre_action").replace("        if wanted:\n", "        if False:\n")
#: Round 2: only the option clicks, on a product page, before the incumbent's buy.
PICK_OPTIONS = """def option_score(option, text):
    words = re.findall(r"[a-z0-9]+", option.lower())
    if not words:
        return 0.0
    return sum(1 for w in words if w in text) / len(words)

def hook(ctx, state):
    actions = ctx["admissible_actions"] or []
    if "click[buy now]" not in actions:
        return None
    text = ctx["task"]["instruction"].lower()
    clicked = state.setdefault("clicked", [])
    nav = ["click[back to search]", "click[< prev]", "click[next >]", "click[description]",
           "click[features]", "click[reviews]", "click[buy now]"]
    options = [a for a in actions if a not in nav and a not in clicked]
    scored = sorted([(option_score(a[6:-1], text), a) for a in options])
    wanted = [a for s, a in scored if s >= 0.6]
    if wanted:
        clicked.append(wanted[0])
        return {"effect": "force", "text": wanted[0]}
    return None
"""


def staged_patch(round_two: bool) -> Patch:
    """Round 1's patch (search, open, buy) or round 2's (pick the options first): the second
    helps only on top of the first (on the base harness the junk target never opens a
    product page)."""
    if round_two:
        hooks = [HookCode(hook=HookName.PRE_ACTION, code=PICK_OPTIONS)]
        return Patch(env=ENV, description="pick the options the instruction names", hooks=hooks)
    hooks = [
        HookCode(hook=HookName.EPISODE_START, code=_shopper_hook("episode_start")),
        HookCode(hook=HookName.PRE_ACTION, code=BUY_AT_ONCE),
    ]
    return Patch(env=ENV, description="search, open the best match, buy", hooks=hooks)


class StagedEngineer:
    """TEST DOUBLE for the engineer model over two rounds: with no live overlay in the packet it
    proposes round 1's patch, on top of one it proposes round 2's; then a patch that fails the
    static checks and unparseable text, in the engineer's output format."""

    name = "staged-double"

    def samples(self, packet: FailurePacket, k: int, seed: int) -> list[EngineerSample]:
        patch = staged_patch(round_two=bool(packet.incumbent))
        good = f"<think>stage</think><patch>{patch.model_dump_json()}</patch>"
        bad = json.loads(patch.model_dump_json())
        bad["hooks"][0]["code"] = "import os\ndef hook(ctx, state):\n    return None\n"
        texts = [good, f"<patch>{json.dumps(bad)}</patch>", "I would add a hook."]
        return [EngineerSample(text=texts[i % len(texts)], tokens_exact=False) for i in range(k)]
