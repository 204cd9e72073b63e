"""ALFWorld's demonstrator: the TextWorld planner's next command on `train` games.

Why the planner: it is ALFWorld's own expert (`policy_commands`, re-planned after every step),
so a demonstration is a shortest plan from the game's PDDL, not something this project wrote.
The reply is the bare `ACTION:` line the prompter reads (no thought: a 135M model's thoughts
add decode time, not decisions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.alfworld.env import AlfWorldEnv
from harness_r1.envs.base import Env


class _PlanFollower:
    def __init__(self, env: AlfWorldEnv) -> None:
        self.env = env

    def reply(self, observation: str, info: dict[str, Any]) -> str | None:
        plan = self.env.expert_plan
        return f"ACTION: {plan[0]}" if plan else None


class AlfWorldExpert:
    training_splits: tuple[str, ...] = ("train",)

    def make_env(self, data_root: Path) -> Env:
        return AlfWorldEnv(data_root, expert_plan=True)

    def episode(self, task: TaskSpec, env: Env) -> _PlanFollower:
        if not isinstance(env, AlfWorldEnv) or not env.expert_plan_enabled:
            raise TypeError("the ALFWorld expert needs AlfWorldEnv(expert_plan=True)")
        return _PlanFollower(env)
