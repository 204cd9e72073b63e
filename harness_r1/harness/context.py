"""The read-only snapshot a hook receives (`ctx`), built from the episode's running counters.

Why counters: hooks run in a sandbox with a tight budget; precomputed signals (streaks of
repeated or invalid actions) let a short hook act on a loop without scanning history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs import INFO_ADMISSIBLE, INFO_INVALID

HISTORY_IN_CTX = 8
MAX_ADMISSIBLE_IN_CTX = 200
MAX_TEXT_IN_CTX = 2000
NOTHING_HAPPENS = "Nothing happens."


def _short(text: str) -> str:
    return text if len(text) <= MAX_TEXT_IN_CTX else text[:MAX_TEXT_IN_CTX] + " ...[cut]"


def plain_info(info: dict[str, Any]) -> dict[str, Any]:
    """The JSON-primitive part of an env's info dict (lists of admissible actions go elsewhere)."""
    return {
        k: v
        for k, v in info.items()
        if k != INFO_ADMISSIBLE and (v is None or isinstance(v, bool | int | float | str))
    }


@dataclass
class Counters:
    repeated_action_streak: int = 0
    invalid_streak: int = 0
    nothing_happens_streak: int = 0
    invalid_actions: int = 0
    vetoes: int = 0
    hook_faults: int = 0
    model_calls: int = 0

    def after_step(
        self, action: str, previous: str | None, feedback: str, info: dict[str, Any]
    ) -> None:
        self.repeated_action_streak = self.repeated_action_streak + 1 if action == previous else 0
        invalid = bool(info.get(INFO_INVALID))
        self.invalid_actions += int(invalid)
        self.invalid_streak = self.invalid_streak + 1 if invalid else 0
        nothing = feedback.strip() == NOTHING_HAPPENS
        self.nothing_happens_streak = self.nothing_happens_streak + 1 if nothing else 0


@dataclass
class EpisodeView:
    """What the runtime knows of one episode that hooks may see."""

    task: TaskSpec
    max_steps: int
    step: int = 0
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    last_action: str | None = None
    history: list[dict[str, str]] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)

    def record(self, action: str, feedback: str, info: dict[str, Any]) -> None:
        self.counters.after_step(action, self.last_action, feedback, info)
        self.history.append({"action": action, "observation": _short(feedback)})
        del self.history[:-HISTORY_IN_CTX]
        self.last_action = action
        self.observation = feedback
        self.info = info

    def ctx(self, **extra: Any) -> dict[str, Any]:
        admissible = self.info.get(INFO_ADMISSIBLE)
        base: dict[str, Any] = {
            "env": self.task.env,
            "task": {"instruction": self.task.instruction, "task_type": self.task.task_type},
            "step": self.step,
            "max_steps": self.max_steps,
            "remaining_steps": self.max_steps - self.step,
            "observation": _short(self.observation),
            "admissible_actions": list(admissible[:MAX_ADMISSIBLE_IN_CTX]) if admissible else None,
            "last_action": self.last_action,
            "history": [dict(h) for h in self.history],
            "counters": vars(self.counters).copy(),
            "info": plain_info(self.info),
        }
        base.update(extra)
        return base
