"""Self-Refine, the paper's prompt-level baseline: a failed episode is critiqued by the target
itself and replayed (same task, same seed) with the critique as a skill; over an incumbent the
critique joins the incumbent's own skills and keeps its state. The env is test_runtime's door
game (a test double of a real env's rules); the policy is scripted: it opens the door only
once its system prompt carries the critique, so the retry can succeed only through it."""

from __future__ import annotations

from typing import Any

from test_runtime import TASK, DoorEnv, _runtime

from harness_r1.contracts import HookName, TaskSpec
from harness_r1.harness import InProcessHooks
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.refine import CRITIQUE_SYSTEM, WithSkills, critique_request, self_refine

CRITIQUE = "It kept looking. Open the door."


def respond(messages: Any) -> str:
    system = messages[0]["content"]
    if system == CRITIQUE_SYSTEM:
        assert "action: look" in messages[1]["content"]  # the critic saw the failed episode
        return CRITIQUE
    return "ACTION: open door" if CRITIQUE in system else "ACTION: look"


def test_a_failure_is_critiqued_and_the_retry_uses_the_critique() -> None:
    envs: list[DoorEnv] = []
    policy = ScriptedPolicy(respond)
    runtime = _runtime(policy, envs)
    result = self_refine(runtime.run, policy, [(TASK, 7)])
    [first], [final] = result.first, result.final
    assert not first.outcome.success and final.outcome.success
    assert final.task.seed == 7 and final.harness_version == "self-refine"
    assert result.critiques == {("d1", 7): CRITIQUE} and result.retried == 1
    assert [e.text for e in final.episode_start_effects if e.text] == [CRITIQUE]


def test_a_first_success_is_not_replayed() -> None:
    envs: list[DoorEnv] = []
    policy = ScriptedPolicy(["ACTION: open door"])
    result = self_refine(_runtime(policy, envs).run, policy, [(TASK, 1)])
    assert result.retried == 0 and result.final == result.first and result.final[0].outcome.success
    assert len(envs) == 1 and envs[0].actions == ["open door"]


def test_over_an_incumbent_the_critique_joins_its_skills_and_state() -> None:
    def start(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        return {"skills": ["Doors open."], "state": {"plan": 1}}

    def pre(ctx: dict[str, Any], state: dict[str, Any]) -> Any:
        assert state == {"plan": 1}  # the incumbent's state survives the merge
        return None

    incumbent = InProcessHooks("ov-1", {HookName.EPISODE_START: start, HookName.PRE_ACTION: pre})
    merged = WithSkills(incumbent, ["critique"], overlay_id="self-refine")
    call = merged.call(HookName.EPISODE_START, {}, {})
    assert call.value == {"skills": ["Doors open.", "critique"], "state": {"plan": 1}}
    assert merged.has(HookName.PRE_ACTION) and not merged.has(HookName.POST_FEEDBACK)
    envs: list[DoorEnv] = []
    policy = ScriptedPolicy(respond)
    result = self_refine(_runtime(policy, envs).run, policy, [(TASK, 3)], lambda: incumbent)
    skills = [e.text for e in result.final[0].episode_start_effects if e.text]
    assert skills == ["Doors open.", CRITIQUE] and result.final[0].outcome.success
    alone = WithSkills(InProcessHooks("none", {}), ["c"], overlay_id="x")
    assert alone.call(HookName.EPISODE_START, {}, {}).value == {"skills": ["c"]}


def test_the_critic_sees_the_task_and_the_last_steps_only() -> None:
    envs: list[DoorEnv] = []
    [trajectory] = self_refine(
        _runtime(ScriptedPolicy(respond), envs).run, ScriptedPolicy(respond), [(TASK, 0)]
    ).first
    long_task = TaskSpec(**{**TASK.model_dump(), "instruction": "x " * 1000})
    request = critique_request(long_task, trajectory)
    text = request.messages[1]["content"]
    assert text.startswith("Task: x x") and len(text) < 3000
    assert text.count("action: look") == len(trajectory.steps[-6:])
