"""One episode's mutable state and the hook calls around it (no model, no batching here).

Split from the loop in runtime.py so each part stays small: this file knows how a hook's
result becomes an effect or a fault; runtime.py knows how episodes advance together.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness_r1.contracts import (
    ActionOrigin,
    EffectKind,
    HookEffect,
    HookFault,
    HookFaultKind,
    HookName,
    Outcome,
    Step,
    TaskSpec,
    Termination,
)
from harness_r1.envs import Env
from harness_r1.harness.context import EpisodeView
from harness_r1.harness.effects import (
    Effect,
    JunkResult,
    StartEffects,
    check_state,
    parse_start_effects,
    parse_step_effect,
    printable,
)
from harness_r1.harness.hooks import HookSet
from harness_r1.models import ChatMessage


@dataclass(frozen=True)
class EpisodeSpec:
    """An episode to run: which task, which seed, under which overlay."""

    task: TaskSpec
    seed: int
    hooks: HookSet
    trajectory_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class PendingStep:
    """A step being decided: transient context, proposals, effects so far."""

    observation: str
    note: str | None = None  # pre_decision message, shown with this step's observation only
    retry_turns: list[ChatMessage] = field(default_factory=list)  # vetoed proposals + reasons
    raw_output: str = ""
    proposed: str = ""
    action: str | None = None
    origin: ActionOrigin = ActionOrigin.MODEL  # who decided `action` (contracts/attribution.py)
    model_calls: int = 0
    vetoes: int = 0
    effects: list[HookEffect] = field(default_factory=list)
    faults: list[HookFault] = field(default_factory=list)


@dataclass
class Episode:
    spec: EpisodeSpec
    env: Env
    view: EpisodeView
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    state: dict[str, Any] = field(default_factory=dict)
    messages: list[ChatMessage] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    start_effects: list[HookEffect] = field(default_factory=list)
    start_faults: list[HookFault] = field(default_factory=list)
    pending: PendingStep | None = None
    forced_next: str | None = None
    outcome: Outcome | None = None
    total_reward: float = 0.0
    model_seconds: float = 0.0
    env_seconds: float = 0.0
    hook_seconds: float = 0.0
    hook_budget_s: float | None = None  # RunConfig.hook_budget_s
    generated_tokens: int = 0
    _budget_fault_recorded: bool = False

    @property
    def active(self) -> bool:
        return self.outcome is None

    def finish(self, success: bool, termination: Termination, error: str | None = None) -> None:
        self.finished_at = datetime.now(UTC)
        self.outcome = Outcome(
            success=success,
            reward=self.total_reward,
            termination=termination,
            steps=len(self.steps),
            error=error,
        )

    # -- hook calls: every failure mode becomes a fault, never an exception ------------------
    # The state a hook returns is committed only when its value is a valid effect too: a call
    # that is junk in any way has no effect at all.

    def _call(
        self, hook: HookName, ctx: dict[str, Any], faults: list[HookFault]
    ) -> tuple[Any, dict[str, Any]] | None:
        if self._over_budget(hook, faults):
            return None
        result = self.spec.hooks.call(hook, ctx, self.state)
        self.hook_seconds += result.seconds
        if result.fault is not None:
            self._fault(hook, result.fault, result.detail, faults)
            return None
        try:
            return result.value, check_state(result.state)
        except JunkResult as err:
            self._fault(hook, "junk", f"state: {err}", faults)
            return None

    def _over_budget(self, hook: HookName, faults: list[HookFault]) -> bool:
        """The episode's hook time is spent: no more calls, one fault saying so (the first
        call refused), the rest of the episode runs as on the base harness."""
        budget = self.hook_budget_s
        if budget is None or self.hook_seconds < budget:
            return False
        if not self._budget_fault_recorded:
            self._budget_fault_recorded = True
            self._fault(
                hook,
                HookFaultKind.OVER_BUDGET,
                f"the hooks took {self.hook_seconds:.2f} s of this episode's {budget:g} s "
                "budget; the rest of the episode ran without them",
                faults,
            )
        return True

    def episode_start(self) -> StartEffects:
        if not self.spec.hooks.has(HookName.EPISODE_START):
            return StartEffects()
        called = self._call(HookName.EPISODE_START, self.view.ctx(), self.start_faults)
        if called is None:
            return StartEffects()
        value, state = called
        try:
            effects = parse_start_effects(value)
        except JunkResult as err:
            self._fault(HookName.EPISODE_START, "junk", str(err), self.start_faults)
            return StartEffects()
        self.state = effects.state if effects.state is not None else state
        if effects.state is not None:
            self.start_effects.append(
                HookEffect(hook=HookName.EPISODE_START, kind=EffectKind.STATE)
            )
        for skill in effects.skills:
            self.start_effects.append(
                HookEffect(hook=HookName.EPISODE_START, kind=EffectKind.SKILLS, text=skill)
            )
        return effects

    def step_hook(self, hook: HookName, faults: list[HookFault], **extra: Any) -> Effect | None:
        if not self.spec.hooks.has(hook):
            return None
        called = self._call(hook, self.view.ctx(**extra), faults)
        if called is None:
            return None
        value, state = called
        try:
            effect = parse_step_effect(hook, value)
        except JunkResult as err:
            self._fault(hook, HookFaultKind.JUNK, str(err), faults)
            return None
        self.state = state
        return effect

    def _fault(self, hook: HookName, reason: str, detail: str, faults: list[HookFault]) -> None:
        faults.append(HookFault(hook=hook, reason=reason, detail=printable(detail)))
        self.view.counters.hook_faults += 1
