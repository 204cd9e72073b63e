"""TaskSpec: one task of one environment, addressable by (env, split, task_id)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from harness_r1.contracts.base import Message

ENV_NAME_PATTERN = r"^[a-z][a-z0-9_]{1,31}$"


class TaskSpec(Message):
    """A task as the harness and the canary see it.

    `payload` carries what the environment needs to rebuild the task (a game file path, a
    table, a goal); it is env-specific and never shown to hooks verbatim.
    """

    env: str = Field(pattern=ENV_NAME_PATTERN)
    split: str
    task_id: str
    task_type: str = Field(description="Task family, e.g. pick_and_place_simple or INSERT.")
    instruction: str
    max_steps: int = Field(default=30, ge=1, le=500)
    payload: dict[str, Any] = Field(default_factory=dict)


class TaskRef(Message):
    """The part of a TaskSpec a trajectory carries, plus the seed it ran with."""

    env: str = Field(pattern=ENV_NAME_PATTERN)
    split: str
    task_id: str
    task_type: str
    instruction: str
    seed: int

    @classmethod
    def of(cls, task: TaskSpec, seed: int) -> TaskRef:
        return cls(
            env=task.env,
            split=task.split,
            task_id=task.task_id,
            task_type=task.task_type,
            instruction=task.instruction,
            seed=seed,
        )
