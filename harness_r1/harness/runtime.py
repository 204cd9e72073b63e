"""The episode loop: ONE code path for deployed agents and for the canary.

Episodes run in lockstep so the model answers all of them in one batched call per decision
round. Per step, for every active episode:
  1. pre_decision hook -> a note added to the model's context for this step only;
  2. model proposes (batched) -> prompter maps text to an action;
  3. pre_action hook -> allow | rewrite | veto (ask again, bounded) | force;
  4. env.step(action);
  5. post_feedback hook -> hint | force (next action) | recover (restart the context).
A hook fault is recorded on the step and the episode goes on; an env failure ends only its
own episode (termination `error`); a model backend failure is infrastructure and propagates.
A run can be cancelled from another thread (`cancel`, a threading.Event): it stops at the next
decision round with `RunCancelled`, so a daemon stopping mid-canary is out within one model
call instead of waiting for the whole batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness_r1.contracts import (
    ActionOrigin,
    EffectKind,
    HookEffect,
    HookFault,
    HookFaultKind,
    HookName,
    Step,
    TargetRef,
    TaskRef,
    Termination,
    Timings,
    Trajectory,
)
from harness_r1.envs import INFO_SUCCESS, Env, EnvSuite
from harness_r1.harness.context import EpisodeView
from harness_r1.harness.episode import Episode, EpisodeSpec, PendingStep
from harness_r1.models import ChatMessage, GenerationRequest, Policy

HARNESS_PREFIX = "[harness] "


class RunCancelled(RuntimeError):
    """`HarnessRuntime.run` stopped because its `cancel` event was set: the episodes under way
    are dropped (none is delivered half-played)."""


@dataclass(frozen=True)
class GenerationRecord:
    """One model call of an episode: what the target read and what it wrote (before the
    prompter and pre_action saw it). Recorded on request (`HarnessRuntime(on_generation=)`) to
    train the target on its own successful episodes (coevolution: trainer/target_sft.py);
    trajectories do not carry prompts, which the runtime rebuilds each step."""

    trajectory_id: str
    step: int
    messages: list[ChatMessage]
    output: str


@dataclass(frozen=True)
class RunConfig:
    """How episodes are run; read from settings at the entry point and passed down."""

    agent_id: str = "local"
    max_steps: int | None = None  # None: the task's own max_steps
    max_vetoes_per_step: int = 2
    history_turns: int = 6  # model sees system + first turn + the last N exchanges
    lockstep: int | None = None  # episodes advanced together; None: the policy's max_batch
    # wall time an episode's hook calls may take in all; past it the rest of the episode runs
    # without hooks (one `over_budget` fault): a patch slow on every call (each under the
    # per-call budget) cannot stretch an episode, nor the lockstep batch it shares; None = no cap
    hook_budget_s: float | None = 5.0

    def __post_init__(self) -> None:
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(
                f"max_steps must be >= 1 (or None for the task's own), got {self.max_steps}"
            )
        if self.max_vetoes_per_step < 0 or self.history_turns < 0:
            raise ValueError("max_vetoes_per_step and history_turns must be >= 0")
        if self.lockstep is not None and self.lockstep < 1:
            raise ValueError(f"lockstep must be >= 1, got {self.lockstep}")
        if self.hook_budget_s is not None and self.hook_budget_s <= 0:
            raise ValueError(f"hook_budget_s must be > 0 (or None), got {self.hook_budget_s}")


class HarnessRuntime:
    """Runs episodes of one env with one frozen policy; each episode under its own HookSet."""

    def __init__(
        self,
        suite: EnvSuite,
        policy: Policy,
        data_root: Path,
        config: RunConfig | None = None,
        env_factory: Callable[[], Env] | None = None,
        on_generation: Callable[[GenerationRecord], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.suite = suite
        self.policy = policy
        self.config = config or RunConfig()
        self.on_generation = on_generation
        self.cancel = cancel
        self._env_factory = env_factory or (lambda: suite.make_env(data_root))
        self._envs: list[Env] = []

    # -- public ------------------------------------------------------------------------------

    def with_policy(self, policy: Policy) -> HarnessRuntime:
        """The same runtime (suite, config, env pool) deciding with another policy: the
        canary's patch-alone control runs its episodes on the envs the target's runs use.
        Not for concurrent use with this one (they share envs)."""
        other = HarnessRuntime(
            self.suite, policy, Path(), self.config, env_factory=self._env_factory,
            cancel=self.cancel,
        )  # fmt: skip
        other._envs = self._envs
        return other

    def run(
        self,
        specs: Sequence[EpisodeSpec],
        on_done: Callable[[Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Run all episodes, up to `lockstep` at a time: a slot whose episode ends takes the
        next spec at once, so the batch stays full. Trajectories come back in input order;
        `on_done` sees each as it ends. Raises RunCancelled once `cancel` is set (checked
        before each decision round)."""
        width = max(1, self.config.lockstep or self.policy.max_batch)
        queue = list(enumerate(specs))
        queue.reverse()
        results: dict[int, Trajectory] = {}
        slots: list[tuple[int, Episode] | None] = [None] * min(width, len(specs))
        while queue or any(slots):
            if self.cancel is not None and self.cancel.is_set():
                raise RunCancelled(f"cancelled with {len(specs) - len(results)} episodes left")
            for slot, held in enumerate(slots):
                while held is None and queue:
                    index, spec = queue.pop()
                    episode = self._start(spec, self._env(slot))
                    held = (index, episode)
                    if not episode.active:  # failed at reset: done already
                        self._deliver(results, index, episode, on_done)
                        held = None
                slots[slot] = held
            active = [held[1] for held in slots if held is not None]
            if not active:
                continue
            self._decide(active)
            for ep in active:
                self._act(ep)
            for slot, held in enumerate(slots):
                if held is not None and not held[1].active:
                    self._deliver(results, held[0], held[1], on_done)
                    slots[slot] = None
        return [results[i] for i in range(len(specs))]

    def _deliver(
        self,
        results: dict[int, Trajectory],
        index: int,
        episode: Episode,
        on_done: Callable[[Trajectory], None] | None,
    ) -> None:
        results[index] = self._trajectory(episode)
        if on_done is not None:
            on_done(results[index])

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs.clear()

    # -- the loop ----------------------------------------------------------------------------

    def _env(self, slot: int) -> Env:
        while len(self._envs) <= slot:
            self._envs.append(self._env_factory())
        return self._envs[slot]

    def _start(self, spec: EpisodeSpec, env: Env) -> Episode:
        max_steps = self.config.max_steps or spec.task.max_steps
        ep = Episode(
            spec=spec,
            env=env,
            view=EpisodeView(task=spec.task, max_steps=max_steps),
            hook_budget_s=self.config.hook_budget_s,
        )
        started = time.perf_counter()
        try:
            observation, info = env.reset(spec.task, seed=spec.seed)
        except Exception as err:  # noqa: BLE001 - EnvError or an env bug: this episode only
            ep.finish(False, Termination.ERROR, f"reset failed: {type(err).__name__}: {err}")
            return ep
        finally:
            ep.env_seconds += time.perf_counter() - started
        ep.view.observation, ep.view.info = observation, info
        start = ep.episode_start()
        prompter = self.suite.prompter
        system = prompter.system_prompt(spec.task)
        if start.skills:
            system += "\n\nSkills and hints for this task:\n" + "\n".join(
                f"- {s}" for s in start.skills
            )
        ep.messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompter.first_message(spec.task, observation, info)},
        ]
        return ep

    def _request_messages(self, ep: Episode, pending: PendingStep) -> list[ChatMessage]:
        head, rest = ep.messages[:2], ep.messages[2:]
        keep = rest[-2 * self.config.history_turns :] if self.config.history_turns > 0 else []
        messages = [dict(m) for m in head + keep]
        if pending.note:
            messages[-1]["content"] += "\n\n" + HARNESS_PREFIX + pending.note
        return messages + pending.retry_turns

    def _decide(self, episodes: Sequence[Episode]) -> None:
        for ep in episodes:
            ep.pending = self._open_step(ep)
        while True:
            waiting = [
                ep for ep in episodes if ep.pending is not None and ep.pending.action is None
            ]
            if not waiting:
                return
            requests = [self._request(ep, ep.pending) for ep in waiting if ep.pending is not None]
            started = time.perf_counter()
            generations = self.policy.generate(requests)
            share = (time.perf_counter() - started) / len(waiting)
            for ep, request, generation in zip(waiting, requests, generations, strict=True):
                ep.model_seconds += share
                ep.generated_tokens += generation.tokens
                if self.on_generation is not None:
                    self.on_generation(
                        GenerationRecord(
                            ep.spec.trajectory_id,
                            ep.view.step,
                            [dict(m) for m in request.messages],
                            generation.text,
                        )
                    )
                self._review(ep, generation.text)

    def _request(self, ep: Episode, pending: PendingStep) -> GenerationRequest:
        seed = ep.spec.seed * 100_003 + ep.view.step * 31 + pending.model_calls
        return GenerationRequest(self._request_messages(ep, pending), seed=seed)

    def _open_step(self, ep: Episode) -> PendingStep:
        pending = PendingStep(observation=ep.view.observation)
        if ep.forced_next is not None:
            # forced by the previous step's post_feedback (recorded there); no model call
            pending.action, ep.forced_next = ep.forced_next, None
            pending.origin = ActionOrigin.FORCED
            return pending
        effect = ep.step_hook(HookName.PRE_DECISION, pending.faults)
        if effect is not None:
            pending.effects.append(
                HookEffect(hook=HookName.PRE_DECISION, kind=effect.kind, text=effect.text)
            )
            pending.note = effect.text
        return pending

    def _review(self, ep: Episode, raw_output: str) -> None:
        """pre_action on the model's proposal: allow, rewrite, veto (ask again) or force."""
        pending = ep.pending
        assert pending is not None
        pending.model_calls += 1
        ep.view.counters.model_calls += 1
        pending.raw_output = raw_output
        try:
            pending.proposed = self.suite.prompter.extract_action(raw_output, ep.view.info)
        except Exception:  # noqa: BLE001 - a prompter bug must not end the whole group
            pending.proposed = raw_output.strip()
        effect = ep.step_hook(
            HookName.PRE_ACTION,
            pending.faults,
            proposed_action=pending.proposed,
            raw_output=raw_output,
        )
        no_op_rewrite = (
            effect is not None
            and effect.kind == EffectKind.REWRITE
            and effect.text == pending.proposed
        )
        if effect is None or effect.kind == EffectKind.ALLOW or no_op_rewrite:
            # a rewrite to the proposal itself changes nothing: the model's action, no effect
            self._take_proposal(pending)
            return
        if effect.kind != EffectKind.VETO:
            pending.effects.append(
                HookEffect(hook=HookName.PRE_ACTION, kind=effect.kind, text=effect.text)
            )
            pending.action = effect.text
            pending.origin = (
                ActionOrigin.REWRITTEN if effect.kind == EffectKind.REWRITE else ActionOrigin.FORCED
            )
            return
        ep.view.counters.vetoes += 1
        if pending.vetoes >= self.config.max_vetoes_per_step:
            pending.faults.append(
                HookFault(
                    hook=HookName.PRE_ACTION,
                    reason=HookFaultKind.VETO_LIMIT,
                    detail="took the proposal",
                )
            )
            self._take_proposal(pending)
            return
        pending.vetoes += 1
        pending.effects.append(
            HookEffect(hook=HookName.PRE_ACTION, kind=effect.kind, text=effect.text)
        )
        pending.retry_turns += [
            {"role": "assistant", "content": raw_output},
            {"role": "user", "content": HARNESS_PREFIX + effect.text},
        ]

    @staticmethod
    def _take_proposal(pending: PendingStep) -> None:
        pending.action = pending.proposed
        pending.origin = ActionOrigin.VETOED_THEN_MODEL if pending.vetoes else ActionOrigin.MODEL

    def _act(self, ep: Episode) -> None:
        pending = ep.pending
        assert pending is not None and pending.action is not None
        action = pending.action
        started = time.perf_counter()
        try:
            result = ep.env.step(action)
        except Exception as err:  # noqa: BLE001 - EnvError or an env bug: this episode only
            ep.env_seconds += time.perf_counter() - started
            self._record(ep, pending, action, f"environment error: {err}", 0.0)
            ep.finish(False, Termination.ERROR, str(err))
            return
        ep.env_seconds += time.perf_counter() - started
        ep.total_reward += float(result.reward)
        shown = self.suite.prompter.feedback_message(result.observation, result.info)
        if action != pending.proposed and pending.raw_output:
            shown = f"{HARNESS_PREFIX}executed: {action}\n{shown}"
        ep.view.step += 1
        ep.view.record(action, result.observation, result.info)
        if not result.terminated and not result.truncated and ep.view.step < ep.view.max_steps:
            shown = self._post_feedback(ep, pending, action, result.observation, shown)
        self._record(ep, pending, action, result.observation, float(result.reward))
        ep.messages += [
            {"role": "assistant", "content": pending.raw_output or action},
            {"role": "user", "content": shown},
        ]
        if result.terminated:
            success = bool(result.info.get(INFO_SUCCESS))
            ep.finish(success, Termination.SUCCESS if success else Termination.FAILURE)
        elif result.truncated or ep.view.step >= ep.view.max_steps:
            ep.finish(False, Termination.STEP_LIMIT)

    def _post_feedback(
        self, ep: Episode, pending: PendingStep, action: str, feedback: str, shown: str
    ) -> str:
        effect = ep.step_hook(
            HookName.POST_FEEDBACK, pending.faults, action=action, feedback=feedback
        )
        if effect is None:
            return shown
        pending.effects.append(
            HookEffect(hook=HookName.POST_FEEDBACK, kind=effect.kind, text=effect.text)
        )
        if effect.kind == EffectKind.HINT:
            return f"{shown}\n{HARNESS_PREFIX}{effect.text}"
        if effect.kind == EffectKind.FORCE:
            ep.forced_next = effect.text
            return shown
        # RECOVER: drop the history; the model restarts from the task plus the message.
        del ep.messages[2:]
        return f"{shown}\n{HARNESS_PREFIX}{effect.text}"

    def _record(
        self, ep: Episode, pending: PendingStep, action: str, feedback: str, reward: float
    ) -> None:
        ep.steps.append(
            Step(
                index=len(ep.steps),
                observation=pending.observation,
                raw_output=pending.raw_output,
                action=action,
                feedback=feedback,
                reward=reward,
                effects=pending.effects,
                faults=pending.faults,
                model_calls=pending.model_calls,
                origin=pending.origin,
            )
        )
        ep.pending = None

    def _trajectory(self, ep: Episode) -> Trajectory:
        assert ep.outcome is not None
        return Trajectory(
            trajectory_id=ep.spec.trajectory_id,
            agent_id=self.config.agent_id,
            target=TargetRef(model_id=self.policy.model_id, version=self.policy.version),
            harness_version=ep.spec.hooks.overlay_id,
            task=TaskRef.of(ep.spec.task, ep.spec.seed),
            episode_start_effects=ep.start_effects,
            episode_start_faults=ep.start_faults,
            steps=ep.steps,
            outcome=ep.outcome,
            timings=Timings(
                started_at=ep.started_at,
                finished_at=ep.finished_at or datetime.now(UTC),
                model_seconds=round(ep.model_seconds, 6),
                env_seconds=round(ep.env_seconds, 6),
                hook_seconds=round(ep.hook_seconds, 6),
                generated_tokens=ep.generated_tokens,
            ),
        )
