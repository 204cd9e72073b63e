"""The environment protocol (Gymnasium's spirit, text in and out) and how tasks are prompted.

Why a separate TaskPrompter: the env is the world (state, rules, reward); the prompter is how a
chat model is told about it and how its free text becomes an action. The harness runtime owns
the conversation; envs never see model output, only actions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness_r1.contracts import TaskSpec

#: Keys of `info` every env fills on reset and step (extra keys are env-specific).
INFO_ADMISSIBLE = "admissible_actions"  # list[str] | None: None when the env has no such list
INFO_SUCCESS = "success"  # bool: the task is solved (meaningful once terminated)
INFO_INVALID = "invalid_action"  # bool: the action was not understood / not possible


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


class EnvError(RuntimeError):
    """The environment cannot go on (broken data, engine failure): the episode ends as `error`."""


@runtime_checkable
class Env(Protocol):
    """One episode at a time. `reset` starts a task; `step` plays one action.

    `terminated` means the task ended (won, lost, answered, bought); `truncated` means the env
    itself cut the episode. Step limits are the harness runtime's business, not the env's.
    Stepping after termination raises EnvError.
    """

    name: str

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


class TaskPrompter(Protocol):
    """How a chat model is told about a task and how its free text becomes an action."""

    def system_prompt(self, task: TaskSpec) -> str:
        """Instructions (AgentBench style), including a worked example of the task type."""
        ...

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        """The first user turn: the task, the initial observation and (where the env has them)
        the admissible actions from the reset info."""
        ...

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        """A later user turn: the environment's answer to the previous action."""
        ...

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        """Map free model output to one env action. Never raises: junk maps to junk."""
        ...


class ExpertEpisode(Protocol):
    """One demonstration in progress (it may keep state: which options it already chose)."""

    def reply(self, observation: str, info: dict[str, Any]) -> str | None:
        """What a competent agent writes now, in the form the env's prompter reads (the
        completion the deployed target is trained on); None when it has nothing to say (the
        demonstration is dropped)."""
        ...


class Expert(Protocol):
    """An env's demonstrator from its own ground truth (a planner's plan, gold SQL, a goal's
    product and options), used only on `training_splits`: the deployed target learns from it
    (trainer/target_experts.py), the harness never sees it."""

    training_splits: tuple[str, ...]

    def make_env(self, data_root: Path) -> Env:
        """The env as the expert needs it (ALFWorld's asks TextWorld for the planner's plan)."""
        ...

    def episode(self, task: TaskSpec, env: Env) -> ExpertEpisode: ...


@dataclass(frozen=True)
class EnvSuite:
    """Everything the rest of the system needs to know about one benchmark."""

    name: str
    splits: tuple[str, ...]
    default_max_steps: int
    make_env: Callable[[Path], Env]
    load_tasks: Callable[[Path, str], list[TaskSpec]]
    prompter: TaskPrompter
    #: Files (relative to the data root) that must exist, for `harness-r1 data status`.
    data_files: Callable[[Path], dict[str, Sequence[Path]]]
    #: The demonstrator the deployed target is trained from (None: the env has none).
    expert: Expert | None = None
