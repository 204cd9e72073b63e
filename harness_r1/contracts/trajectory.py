"""Trajectory: one episode of a deployed (or canary) agent, as published to Kafka."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from harness_r1.contracts.base import Contract, Message
from harness_r1.contracts.faults import HookFaultKind
from harness_r1.contracts.hooks import EffectKind, HookName
from harness_r1.contracts.task import TaskRef

BASE_HARNESS = "base"


class Termination(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    STEP_LIMIT = "step_limit"
    ERROR = "error"


class TargetRef(Contract):
    """The frozen model an agent runs: identity plus version (weights/quantisation)."""

    model_id: str
    version: str = "1"


class HookEffect(Contract):
    """An effect a hook applied on this step (only applied effects are recorded here)."""

    hook: HookName
    kind: EffectKind
    text: str = Field(default="", description="Action, message or hint text of the effect.")


class HookFault(Contract):
    """A hook call that had no effect: it raised, timed out, or returned junk."""

    hook: HookName
    reason: str = Field(description="What ended the call: " + " | ".join(HookFaultKind) + ".")
    detail: str = ""


class Step(Contract):
    index: int = Field(ge=0)
    observation: str = Field(description="What the model was shown before deciding.")
    raw_output: str = Field(description="The model's last raw output for this step ('' if forced).")
    action: str = Field(description="The action sent to the environment.")
    feedback: str = Field(default="", description="The environment's answer to the action.")
    reward: float = 0.0
    effects: list[HookEffect] = Field(default_factory=list)
    faults: list[HookFault] = Field(default_factory=list)
    model_calls: int = Field(default=1, ge=0, description="Generations used (vetoes add calls).")


class Outcome(Contract):
    success: bool
    reward: float
    termination: Termination
    steps: int = Field(ge=0)
    error: str | None = None


class Timings(Contract):
    started_at: datetime
    finished_at: datetime
    model_seconds: float = 0.0
    env_seconds: float = 0.0
    hook_seconds: float = 0.0
    generated_tokens: int = 0


class Trajectory(Message):
    trajectory_id: str = Field(min_length=1, description="Dedup key, unique per episode.")
    agent_id: str
    target: TargetRef
    harness_version: str = Field(description="Overlay id in force, or 'base'.")
    task: TaskRef
    episode_start_effects: list[HookEffect] = Field(default_factory=list)
    episode_start_faults: list[HookFault] = Field(default_factory=list)
    steps: list[Step]
    outcome: Outcome
    timings: Timings

    @property
    def env(self) -> str:
        return self.task.env
