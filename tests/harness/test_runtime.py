"""The episode loop and the hook effects, on a tiny in-test env with exact expectations.

The env here is a test double for the rule-following part of a real env (door game): the real
envs get their own tests and a real-model episode in tests/integration.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness_r1.contracts import (
    ActionOrigin,
    EffectKind,
    HookName,
    OriginCounts,
    TaskSpec,
    Termination,
    Trajectory,
)
from harness_r1.envs.base import EnvError, EnvSuite, StepResult
from harness_r1.harness import (
    EpisodeSpec,
    HarnessRuntime,
    InProcessHooks,
    NoHooks,
    RunCancelled,
    RunConfig,
)
from harness_r1.harness.policies import ScriptedPolicy


class DoorEnv:
    """`open door` wins; `smash door` loses; anything else: 'Nothing happens.'"""

    name = "door"

    def __init__(self) -> None:
        self.done = False
        self.actions: list[str] = []

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.done = False
        return "You are in a room with a door.", self._info()

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {"admissible_actions": ["open door", "look", "smash door"], **extra}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EnvError("episode is over")
        self.actions.append(action)
        if action == "open door":
            self.done = True
            return StepResult(
                "The door opens. You win.", 1.0, True, False, self._info(success=True)
            )
        if action == "smash door":
            self.done = True
            return StepResult("You broke it.", 0.0, True, False, self._info(success=False))
        if action == "look":
            return StepResult(
                "You see a door.", 0.0, False, False, self._info(invalid_action=False)
            )
        return StepResult("Nothing happens.", 0.0, False, False, self._info(invalid_action=True))

    def close(self) -> None:
        pass


class DoorPrompter:
    def system_prompt(self, task: TaskSpec) -> str:
        return "Open the door. Answer with ACTION: <command>."

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        return observation

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        return observation

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        return raw_output.split("ACTION:")[-1].strip().lower()


TASK = TaskSpec(
    env="door", split="test", task_id="d1", task_type="door", instruction="open it", max_steps=5
)


def _runtime(policy: ScriptedPolicy, envs: list[DoorEnv], **config: Any) -> HarnessRuntime:
    suite = EnvSuite(
        name="door",
        splits=("test",),
        default_max_steps=5,
        make_env=lambda root: DoorEnv(),
        load_tasks=lambda root, split: [TASK],
        prompter=DoorPrompter(),
        data_files=lambda root: {},
    )

    def factory() -> DoorEnv:
        envs.append(DoorEnv())
        return envs[-1]

    return HarnessRuntime(suite, policy, Path("."), RunConfig(**config), env_factory=factory)


def _run(policy: ScriptedPolicy, hooks: Any = None, **config: Any) -> Any:
    envs: list[DoorEnv] = []
    runtime = _runtime(policy, envs, **config)
    [trajectory] = runtime.run([EpisodeSpec(task=TASK, seed=1, hooks=hooks or NoHooks())])
    return trajectory, envs[0]


def test_base_harness_runs_to_step_limit_when_model_babbles() -> None:
    trajectory, env = _run(ScriptedPolicy(["ACTION: dance"]))
    assert trajectory.outcome.termination == Termination.STEP_LIMIT
    assert trajectory.outcome.steps == 5 and not trajectory.outcome.success
    assert env.actions == ["dance"] * 5
    assert trajectory.harness_version == "base"


def test_rewrite_changes_the_executed_action_and_is_recorded() -> None:
    def snap(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        if ctx["proposed_action"] not in ctx["admissible_actions"]:
            return {"effect": "rewrite", "text": "open door"}
        return None

    hooks = InProcessHooks("ov-rewrite", {HookName.PRE_ACTION: snap})
    trajectory, env = _run(ScriptedPolicy(["ACTION: dance"]), hooks)
    assert trajectory.outcome.success and trajectory.outcome.termination == Termination.SUCCESS
    assert env.actions == ["open door"]
    [step] = trajectory.steps
    assert step.raw_output == "ACTION: dance" and step.action == "open door"
    assert [(e.hook, e.kind, e.text) for e in step.effects] == [
        (HookName.PRE_ACTION, EffectKind.REWRITE, "open door")
    ]
    assert trajectory.harness_version == "ov-rewrite"


def test_veto_asks_the_model_again_with_the_reason() -> None:
    seen: list[str] = []

    def respond(messages: Any) -> str:
        seen.append(messages[-1]["content"])
        return (
            "ACTION: open door"
            if "not allowed" in messages[-1]["content"]
            else "ACTION: smash door"
        )

    def no_smash(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        if ctx["proposed_action"] == "smash door":
            return {"effect": "veto", "text": "smashing is not allowed"}
        return {"effect": "allow"}

    hooks = InProcessHooks("ov-veto", {HookName.PRE_ACTION: no_smash})
    trajectory, env = _run(ScriptedPolicy(respond), hooks)
    assert env.actions == ["open door"] and trajectory.outcome.success
    [step] = trajectory.steps
    assert step.model_calls == 2
    assert [e.kind for e in step.effects] == [EffectKind.VETO]
    assert seen[-1] == "[harness] smashing is not allowed"


def test_veto_is_bounded_then_the_proposal_goes_through() -> None:
    def always_veto(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "veto", "text": "no"}

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: always_veto})
    trajectory, env = _run(ScriptedPolicy(["ACTION: smash door"]), hooks, max_vetoes_per_step=2)
    [step] = trajectory.steps
    assert step.model_calls == 3 and env.actions == ["smash door"]
    assert [f.reason for f in step.faults] == ["veto_limit"]


def test_force_from_pre_action_and_post_feedback() -> None:
    def post(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        if ctx["feedback"] == "Nothing happens.":
            return {"effect": "force", "action": "look"}
        if ctx["action"] == "look":
            return {"effect": "force", "action": "open door"}
        return None

    hooks = InProcessHooks("ov-force", {HookName.POST_FEEDBACK: post})
    policy = ScriptedPolicy(["ACTION: dance"])
    trajectory, env = _run(policy, hooks)
    assert env.actions == ["dance", "look", "open door"]
    assert trajectory.outcome.success
    assert [s.model_calls for s in trajectory.steps] == [1, 0, 0]
    assert trajectory.steps[1].effects[0].kind == EffectKind.FORCE


def test_raising_and_junk_hooks_have_no_effect_and_are_recorded() -> None:
    def boom(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        raise ZeroDivisionError("bad patch")

    def junk(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "teleport", "text": "win"}

    hooks = InProcessHooks("ov-bad", {HookName.PRE_ACTION: boom, HookName.POST_FEEDBACK: junk})
    trajectory, env = _run(ScriptedPolicy(["ACTION: look", "ACTION: open door"]), hooks)
    assert env.actions == ["look", "open door"] and trajectory.outcome.success
    first = trajectory.steps[0]
    assert [(f.hook, f.reason) for f in first.faults] == [
        (HookName.PRE_ACTION, "raised"),
        (HookName.POST_FEEDBACK, "junk"),
    ]
    assert "ZeroDivisionError" in first.faults[0].detail
    assert first.effects == []


def test_effect_not_allowed_for_the_hook_is_junk() -> None:
    def wrong(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "hint", "text": "x"}  # hint is post_feedback's, not pre_action's

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: wrong})
    trajectory, env = _run(ScriptedPolicy(["ACTION: open door"]), hooks)
    assert env.actions == ["open door"]
    assert trajectory.steps[0].faults[0].reason == "junk"
    assert "may not request" in trajectory.steps[0].faults[0].detail


def test_episode_start_skills_reach_the_system_prompt_and_state_is_shared() -> None:
    systems: list[str] = []

    def respond(messages: Any) -> str:
        systems.append(messages[0]["content"])
        return "ACTION: look"

    def start(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"skills": ["doors open with 'open door'"], "state": {"looks": 0}}

    def post(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        state["looks"] += 1
        if state["looks"] >= 2:
            return {"effect": "force", "action": "open door"}
        return None

    hooks = InProcessHooks("ov", {HookName.EPISODE_START: start, HookName.POST_FEEDBACK: post})
    trajectory, env = _run(ScriptedPolicy(respond), hooks)
    assert "doors open with 'open door'" in systems[0]
    assert env.actions == ["look", "look", "open door"]
    assert [e.kind for e in trajectory.episode_start_effects] == [
        EffectKind.STATE,
        EffectKind.SKILLS,
    ]


def test_pre_decision_note_is_shown_for_that_step_only() -> None:
    prompts: list[str] = []

    def respond(messages: Any) -> str:
        prompts.append(messages[-1]["content"])
        return "ACTION: look"

    def note(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return "try opening" if ctx["step"] == 0 else None

    hooks = InProcessHooks("ov", {HookName.PRE_DECISION: note})
    trajectory, _ = _run(ScriptedPolicy(respond), hooks, max_steps=2)
    assert prompts[0].endswith("[harness] try opening")
    assert "try opening" not in prompts[1]
    assert trajectory.steps[0].effects[0].kind == EffectKind.MESSAGE


def test_recover_drops_history() -> None:
    lengths: list[int] = []
    last_user: list[str] = []

    def respond(messages: Any) -> str:
        lengths.append(len(messages))
        last_user.append(messages[-1]["content"])
        return "ACTION: dance"

    def recover(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        if ctx["counters"]["nothing_happens_streak"] >= 2:
            return {"effect": "recover", "text": "start over: look first"}
        return None

    hooks = InProcessHooks("ov", {HookName.POST_FEEDBACK: recover})
    _run(ScriptedPolicy(respond), hooks, max_steps=4)
    # step 1 sees 2 exchanges; after the second 'Nothing happens.' the history restarts
    assert lengths == [2, 4, 4, 4]
    assert "start over: look first" not in last_user[1]
    assert last_user[2].endswith("[harness] start over: look first")


def test_mutating_ctx_or_failing_state_does_not_leak() -> None:
    def evil(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        ctx["admissible_actions"].clear()
        state["x"] = object()  # not JSON-able: the call is junk, state unchanged
        return None

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: evil})
    trajectory, env = _run(ScriptedPolicy(["ACTION: open door"]), hooks)
    assert trajectory.outcome.success
    assert trajectory.steps[0].faults[0].reason == "junk"


def test_lockstep_batches_generation_across_episodes() -> None:
    policy = ScriptedPolicy(["ACTION: look", "ACTION: open door"])
    envs: list[DoorEnv] = []
    runtime = _runtime(policy, envs, lockstep=4)
    specs = [EpisodeSpec(task=TASK, seed=i, hooks=NoHooks()) for i in range(8)]
    trajectories = runtime.run(specs)
    assert [t.trajectory_id for t in trajectories] == [s.trajectory_id for s in specs]
    assert all(t.outcome.success for t in trajectories)
    assert policy.calls == 4  # 2 lockstep groups x 2 steps, one batched call each
    assert len(envs) == 4  # env slots are reused across groups


@pytest.mark.parametrize(
    "bad", [42, ["open door"], {"effect": "rewrite"}, {"effect": "force", "text": ""}]
)
def test_junk_shapes_for_pre_action(bad: Any) -> None:
    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: lambda ctx, state: bad})
    trajectory, env = _run(ScriptedPolicy(["ACTION: open door"]), hooks)
    assert env.actions == ["open door"]
    assert trajectory.steps[0].faults[0].reason == "junk"


def test_a_finished_slot_takes_the_next_episode_at_once() -> None:
    def open_at(step: int) -> InProcessHooks:
        def hook(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
            return {"effect": "force", "text": "open door"} if ctx["step"] == step else None

        return InProcessHooks(f"open-at-{step}", {HookName.PRE_ACTION: hook})

    policy = ScriptedPolicy(["ACTION: look"])
    envs: list[DoorEnv] = []
    runtime = _runtime(policy, envs, lockstep=2)
    done: list[str] = []
    specs = [EpisodeSpec(task=TASK, seed=i, hooks=open_at(s)) for i, s in enumerate([0, 2, 0])]
    trajectories = runtime.run(specs, on_done=lambda t: done.append(t.harness_version))
    assert [t.outcome.steps for t in trajectories] == [1, 3, 1]
    assert all(t.outcome.success for t in trajectories)
    # rounds: (A, B) -> A ends, C joins: (B, C) -> C ends: (B) -> 3 batched calls, not 4
    assert policy.calls == 3 and len(envs) == 2
    assert done == ["open-at-0", "open-at-0", "open-at-2"]


def test_a_slow_patch_spends_the_episodes_hook_budget_then_runs_without_hooks() -> None:
    """Each call under any per-call budget, but together past the episode's hook time: the
    calls stop, one `over_budget` fault says so, and the episode finishes on the base
    harness (the rest of the lockstep batch is not held up by the slow patch)."""
    calls: list[str] = []

    def slow(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        calls.append(ctx["proposed_action"])
        time.sleep(0.05)
        return {"effect": "allow"}

    hooks = InProcessHooks("ov-slow", {HookName.PRE_ACTION: slow})
    trajectory, env = _run(ScriptedPolicy(["ACTION: look"]), hooks, hook_budget_s=0.12)
    assert trajectory.outcome.steps == 5 and env.actions == ["look"] * 5
    assert len(calls) == 3  # 0.05 + 0.05 + 0.05 >= 0.12: the fourth call is not made
    faults = [f for step in trajectory.steps for f in step.faults]
    assert [(f.hook, f.reason) for f in faults] == [(HookName.PRE_ACTION, "over_budget")]
    assert "0.12 s budget" in faults[0].detail


def test_without_a_hook_budget_every_call_is_made() -> None:
    calls: list[int] = []

    def slow(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        calls.append(1)
        time.sleep(0.02)
        return None

    hooks = InProcessHooks("ov-slow", {HookName.PRE_ACTION: slow})
    trajectory, _ = _run(ScriptedPolicy(["ACTION: look"]), hooks, hook_budget_s=None)
    assert len(calls) == 5 and not [f for s in trajectory.steps for f in s.faults]


def test_every_model_call_is_recorded_with_what_the_model_read_and_wrote() -> None:
    from harness_r1.harness.runtime import GenerationRecord

    read: list[list[dict[str, str]]] = []

    def respond(messages: Any) -> str:
        read.append([dict(m) for m in messages])
        if "not allowed" in messages[-1]["content"]:
            return "ACTION: open door"
        return "ACTION: look" if len(messages) < 3 else "ACTION: smash door"

    def no_smash(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        if ctx["proposed_action"] == "smash door":
            return {"effect": "veto", "text": "smashing is not allowed"}
        return None

    records: list[GenerationRecord] = []
    envs: list[DoorEnv] = []
    runtime = _runtime(ScriptedPolicy(respond), envs)
    runtime.on_generation = records.append
    hooks = InProcessHooks("ov-veto", {HookName.PRE_ACTION: no_smash})
    [trajectory] = runtime.run([EpisodeSpec(task=TASK, seed=1, hooks=hooks)])

    assert envs[0].actions == ["look", "open door"] and trajectory.outcome.success
    assert [(r.step, r.output) for r in records] == [
        (0, "ACTION: look"),
        (1, "ACTION: smash door"),
        (1, "ACTION: open door"),  # the veto's second call: the one the step took
    ]
    assert [r.messages for r in records] == read
    assert {r.trajectory_id for r in records} == {trajectory.trajectory_id}
    assert [s.raw_output for s in trajectory.steps] == ["ACTION: look", "ACTION: open door"]


# -- who decided each action (contracts/attribution.py) ----------------------------------------


def _origins(trajectory: Trajectory) -> list[ActionOrigin]:
    return [step.origin for step in trajectory.steps]


def test_a_plain_model_step_is_the_models() -> None:
    trajectory, _ = _run(ScriptedPolicy(["ACTION: look", "ACTION: open door"]))
    assert _origins(trajectory) == ["model", "model"]
    assert trajectory.origins == OriginCounts(model=2)
    assert trajectory.origins.model_share == 1.0 and trajectory.origins.forced_share == 0.0


def test_a_rewrite_of_the_proposal_is_rewritten_and_a_rewrite_to_itself_is_the_models() -> None:
    def snap(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "rewrite", "text": ctx["proposed_action"].replace("dance", "look")}

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: snap})
    trajectory, env = _run(ScriptedPolicy(["ACTION: dance", "ACTION: open door"]), hooks)
    assert env.actions == ["look", "open door"]
    assert _origins(trajectory) == ["rewritten", "model"]
    assert [len(s.effects) for s in trajectory.steps] == [1, 0]  # no-op rewrite: no effect
    assert trajectory.origins == OriginCounts(model=1, rewritten=1)
    assert trajectory.origins.model_share == 0.5 and trajectory.origins.forced_share == 0.0


def test_forces_from_pre_action_and_post_feedback_are_forced() -> None:
    def pre(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "force", "text": "look"} if ctx["step"] == 0 else None

    def post(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "force", "text": "open door"} if ctx["action"] == "look" else None

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: pre, HookName.POST_FEEDBACK: post})
    trajectory, env = _run(ScriptedPolicy(["ACTION: smash door"]), hooks)
    assert env.actions == ["look", "open door"] and trajectory.outcome.success
    assert _origins(trajectory) == ["forced", "forced"]
    assert trajectory.origins.forced_share == 1.0 and trajectory.origins.model_share == 0.0


def test_a_veto_then_the_models_own_proposal_is_vetoed_then_model() -> None:
    def no_smash(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        if ctx["proposed_action"] == "smash door":
            return {"effect": "veto", "text": "not allowed"}
        return None

    def respond(messages: Any) -> str:
        return (
            "ACTION: open door"
            if "not allowed" in messages[-1]["content"]
            else "ACTION: smash door"
        )

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: no_smash})
    trajectory, _ = _run(ScriptedPolicy(respond), hooks)
    assert _origins(trajectory) == ["vetoed_then_model"]
    assert trajectory.origins.model_share == 1.0  # the model still chose


def test_a_veto_limit_reached_lets_the_models_proposal_through_as_vetoed_then_model() -> None:
    def always(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "veto", "text": "no"}

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: always})
    trajectory, _ = _run(ScriptedPolicy(["ACTION: smash door"]), hooks, max_vetoes_per_step=1)
    assert _origins(trajectory) == ["vetoed_then_model"]


def test_a_veto_then_a_rewrite_is_rewritten() -> None:
    def hook(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        if ctx["proposed_action"] == "smash door":
            return {"effect": "veto", "text": "not allowed"}
        return {"effect": "rewrite", "text": "open door"}

    def respond(messages: Any) -> str:
        return "ACTION: dance" if "not allowed" in messages[-1]["content"] else "ACTION: smash door"

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: hook})
    trajectory, _ = _run(ScriptedPolicy(respond), hooks)
    assert _origins(trajectory) == ["rewritten"]


def _as_schema_1_0(trajectory: Trajectory) -> dict[str, Any]:
    """What a producer of schema 1.0 wrote: no origin on steps, no origins counts."""
    data = json.loads(trajectory.to_json_bytes())
    data["schema_version"] = "1.0"
    del data["origins"]
    for step in data["steps"]:
        del step["origin"]
    return data


def test_old_records_are_read_with_origins_inferred_as_the_runtime_records_them() -> None:
    """Each effect kind, run by the runtime, then stripped to schema 1.0 and read again: the
    inferred origins are the ones the runtime recorded."""

    def hook(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        step = ctx["step"]
        if step == 0:
            return {"effect": "rewrite", "text": "look"}
        if step == 1 and ctx["proposed_action"] != "look":
            return {"effect": "veto", "text": "not allowed"}
        return None

    def post(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"effect": "force", "text": "look"} if ctx["step"] == 2 else None

    def respond(messages: Any) -> str:
        return "ACTION: look" if "not allowed" in messages[-1]["content"] else "ACTION: dance"

    hooks = InProcessHooks("ov", {HookName.PRE_ACTION: hook, HookName.POST_FEEDBACK: post})
    trajectory, _ = _run(ScriptedPolicy(respond), hooks)
    assert [str(o) for o in _origins(trajectory)][:4] == [
        "rewritten",
        "vetoed_then_model",
        "forced",  # post_feedback after the second step forced the third
        "model",
    ]
    old = Trajectory.model_validate(_as_schema_1_0(trajectory))
    assert old.schema_version == "1.0"
    assert _origins(old) == _origins(trajectory) and old.origins == trajectory.origins
    assert trajectory.schema_version == "1.1"


def test_counts_that_contradict_the_steps_are_refused() -> None:
    trajectory, _ = _run(ScriptedPolicy(["ACTION: open door"]))
    data = json.loads(trajectory.to_json_bytes())
    data["origins"] = {"model": 0, "rewritten": 0, "forced": 1, "vetoed_then_model": 0}
    with pytest.raises(ValueError, match="do not match the steps"):
        Trajectory.model_validate(data)


def test_shares_of_no_steps_are_zero_and_counts_add_up() -> None:
    assert OriginCounts().forced_share == 0.0 and OriginCounts().model_share == 0.0
    total = OriginCounts.total([OriginCounts(model=3, forced=1), OriginCounts(rewritten=2)])
    assert total == OriginCounts(model=3, forced=1, rewritten=2) and total.steps == 6
    assert total.forced_share == pytest.approx(1 / 6) and total.model_share == 0.5


def test_a_cancelled_run_stops_at_its_next_decision_round() -> None:
    """The daemon's stop sets `cancel` from another thread mid-run: the run raises
    RunCancelled before the next model call instead of playing the rest of its episodes."""
    cancel = threading.Event()

    def respond(messages: Any) -> str:
        cancel.set()  # as if SIGTERM arrived during this model call
        return "ACTION: look"

    policy = ScriptedPolicy(respond)
    runtime = _runtime(policy, [], lockstep=2)
    runtime.cancel = cancel
    done: list[str] = []
    specs = [EpisodeSpec(task=TASK, seed=i, hooks=NoHooks()) for i in range(4)]
    with pytest.raises(RunCancelled, match="4 episodes left"):
        runtime.run(specs, on_done=lambda t: done.append(t.trajectory_id))
    assert policy.calls == 1 and done == []  # no second round, no half-played episode out
    # the patch-alone control's runtime stops with it
    assert runtime.with_policy(ScriptedPolicy(["ACTION: look"])).cancel is cancel


def test_an_uncancelled_run_plays_to_the_end() -> None:
    runtime = _runtime(ScriptedPolicy(["ACTION: open door"]), [], lockstep=2)
    runtime.cancel = threading.Event()
    trajectories = runtime.run([EpisodeSpec(task=TASK, seed=i, hooks=NoHooks()) for i in range(3)])
    assert all(t.outcome.success for t in trajectories)
