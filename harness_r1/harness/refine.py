"""Self-Refine, the prompt-level baseline the Harness-R1 paper compares against: the target
reads its own failed episode, says what went wrong and what to do differently, and plays the
same task (same seed) again with that critique in its system prompt.

Nothing here is written by an engineer: the critique is the target's own text, carried by a
trusted in-process `episode_start` hook as a skill. Over an incumbent overlay the critique is
added to whatever skills the incumbent's own `episode_start` gives (`WithSkills`), so
"incumbent + Self-Refine" is compared with "incumbent + the engineer's patch" on equal terms.
A task that succeeded at the first attempt is not played again; Self-Refine's success rate is
therefore over at most two attempts per task, which favours it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness_r1.contracts import HookName, TaskSpec, Trajectory
from harness_r1.harness.effects import MAX_SKILLS, MAX_SKILLS_CHARS
from harness_r1.harness.episode import EpisodeSpec
from harness_r1.harness.hooks import HookCall, HookSet, NoHooks
from harness_r1.models import GenerationRequest, Policy

CRITIQUE_SYSTEM = (
    "You review an agent's failed attempt at a task. In at most three short sentences, say "
    "what went wrong and what the agent should do differently next time. Be concrete."
)
#: the last steps of the failed episode shown to the critic, and the characters of each text
CRITIQUE_STEPS = 6
CRITIQUE_CHARS = 200
#: the longest critique kept as a skill (the target writes ~100 tokens; a skill may hold more)
CRITIQUE_MAX_CHARS = 600


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def critique_request(task: TaskSpec, failed: Trajectory, seed: int = 0) -> GenerationRequest:
    """The critic's prompt: the task and the failed episode's last steps."""
    lines = [f"Task: {_cut(task.instruction, 2 * CRITIQUE_CHARS)}", "The agent's attempt:"]
    for step in failed.steps[-CRITIQUE_STEPS:]:
        lines.append(f"step {step.index}: action: {_cut(step.action, CRITIQUE_CHARS)}")
        lines.append(f"  result: {_cut(step.feedback, CRITIQUE_CHARS)}")
    lines.append(f"It failed ({failed.outcome.termination}). What should it do differently?")
    messages = [
        {"role": "system", "content": CRITIQUE_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]
    return GenerationRequest(messages=messages, seed=seed)


def critiques(policy: Policy, pairs: Sequence[tuple[TaskSpec, Trajectory]]) -> list[str]:
    """One critique per failed episode, generated together, cut to what a skill may hold."""
    if not pairs:
        return []
    requests = [critique_request(task, failed, failed.task.seed) for task, failed in pairs]
    answers = policy.generate(requests)
    return [
        _cut(answer.text, CRITIQUE_MAX_CHARS) or "Try a different approach." for answer in answers
    ]


class WithSkills:
    """`inner`'s hooks, with `skills` added to what its episode_start gives (or given alone
    when it has none): how a critique joins an incumbent overlay."""

    def __init__(self, inner: HookSet, skills: Sequence[str], overlay_id: str) -> None:
        self.inner = inner
        self.skills = list(skills)
        self.overlay_id = overlay_id

    def has(self, hook: HookName) -> bool:
        return hook == HookName.EPISODE_START or self.inner.has(hook)

    def call(self, hook: HookName, ctx: dict[str, Any], state: dict[str, Any]) -> HookCall:
        if hook != HookName.EPISODE_START:
            return self.inner.call(hook, ctx, state)
        if not self.inner.has(hook):
            return HookCall(value={"skills": self.skills}, state=state)
        result = self.inner.call(hook, ctx, state)
        if result.fault is not None:
            return HookCall(value={"skills": self.skills}, state=state, seconds=result.seconds)
        return HookCall(
            value=_merged(result.value, self.skills), state=result.state, seconds=result.seconds
        )


def _merged(value: Any, skills: list[str]) -> Any:
    """An episode_start value with `skills` added: a plain string is one skill; a dict keeps
    its state and gains the skills; None becomes the skills alone."""
    if value is None:
        return {"skills": skills}
    if isinstance(value, str):
        return _merged({"skills": [value]}, skills)
    if isinstance(value, dict):
        own = value.get("skills")
        own_list = [own] if isinstance(own, str) else list(own) if isinstance(own, list) else []
        # the incumbent's own skills first; the critique only where the limits leave room, so
        # adding it never turns the incumbent's start effects into junk
        room = MAX_SKILLS_CHARS - sum(len(x) for x in own_list if isinstance(x, str))
        extra = [x for x in skills if len(x) <= room][: max(0, MAX_SKILLS - len(own_list))]
        return {**value, "skills": [*own_list, *extra]}
    return value  # junk stays junk: the runtime records it as the incumbent's fault


@dataclass(frozen=True)
class RefineResult:
    """The first attempts and, per (task, seed), the trajectory that counts (the retry where
    the first attempt failed); `critiques` by (task id, seed)."""

    first: list[Trajectory]
    final: list[Trajectory]
    critiques: dict[tuple[str, int], str]

    @property
    def retried(self) -> int:
        return len(self.critiques)


def self_refine(
    run: Callable[[list[EpisodeSpec]], list[Trajectory]],
    policy: Policy,
    tasks: Sequence[tuple[TaskSpec, int]],
    hooks_for: Callable[[], HookSet] = NoHooks,
) -> RefineResult:
    """Play each (task, seed) under `hooks_for()` (the incumbent), then replay every failure
    with the target's critique of it added as a skill. `run` is `HarnessRuntime.run`."""
    first = run([EpisodeSpec(task=t, seed=s, hooks=hooks_for()) for t, s in tasks])
    by_key = {(t.task_id, s): t for t, s in tasks}
    failed = [(by_key[_key(tr)], tr) for tr in first if not tr.outcome.success]
    texts = critiques(policy, failed)
    retries = [
        EpisodeSpec(
            task=task,
            seed=trajectory.task.seed,
            hooks=WithSkills(hooks_for(), [text], overlay_id="self-refine"),
        )
        for (task, trajectory), text in zip(failed, texts, strict=True)
    ]
    again = {_key(tr): tr for tr in run(retries)} if retries else {}
    final = [again.get(_key(tr), tr) for tr in first]
    return RefineResult(
        first=first,
        final=final,
        critiques={_key(tr): text for (_, tr), text in zip(failed, texts, strict=True)},
    )


def _key(trajectory: Trajectory) -> tuple[str, int]:
    return trajectory.task.task_id, trajectory.task.seed
