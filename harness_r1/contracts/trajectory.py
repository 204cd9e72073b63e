"""Trajectory: one episode of a deployed (or canary) agent, as published to Kafka."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Self

from pydantic import Field, model_validator

from harness_r1.contracts.attribution import ActionOrigin, OriginCounts, infer_origin
from harness_r1.contracts.base import Contract, Message
from harness_r1.contracts.faults import HookFaultKind
from harness_r1.contracts.hooks import EffectKind, HookName
from harness_r1.contracts.task import TaskRef

BASE_HARNESS = "base"

#: 1.1 added each step's `origin` and the trajectory's `origins` counts (who decided each
#: action); a 1.0 record is still read: both are inferred from what its steps recorded.
TRAJECTORY_SCHEMA_VERSION = "1.1"


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
    origin: ActionOrigin = Field(
        default=ActionOrigin.MODEL,  # never used: absent, it is inferred (the validator below)
        description="Who decided the action: model | rewritten | forced | vetoed_then_model "
        "(contracts/attribution.py). Inferred from effects and model_calls when absent "
        "(records of schema 1.0).",
    )

    @model_validator(mode="before")
    @classmethod
    def _origin_of_old_records(cls, data: Any) -> Any:
        if isinstance(data, dict) and "origin" not in data:
            effects = [
                e.model_dump() if isinstance(e, HookEffect) else e for e in data.get("effects", [])
            ]
            calls = data.get("model_calls", 1)
            data = {**data, "origin": infer_origin(effects, calls if isinstance(calls, int) else 1)}
        return data


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
    schema_version: str = TRAJECTORY_SCHEMA_VERSION
    steps: list[Step]
    origins: OriginCounts = Field(
        default_factory=OriginCounts,
        description="The steps counted by origin (model_share and forced_share are computed "
        "from it). Must agree with the steps; computed from them when absent.",
    )
    outcome: Outcome
    timings: Timings

    @model_validator(mode="after")
    def _origins_match_steps(self) -> Self:
        counted = OriginCounts.of(step.origin for step in self.steps)
        if "origins" not in self.model_fields_set:
            object.__setattr__(self, "origins", counted)
        elif self.origins != counted:
            raise ValueError(
                f"origins {self.origins.model_dump()} do not match the steps' origins "
                f"{counted.model_dump()}"
            )
        return self

    @property
    def env(self) -> str:
        return self.task.env
