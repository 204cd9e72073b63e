"""ALFWorld: household tasks as real TextWorld games (alfworld 0.4.x), played offline.

- `tasks`: the catalogue (one TaskSpec per game file), read without starting TextWorld.
- `env`: `AlfWorldEnv`, one episode at a time over one reusable TextWorld engine.
- `prompter`: AgentBench's ALFWorld prompt with a worked example per task type (`examples`).

Importing this package does not import TextWorld; the engine is imported on the first reset.
"""

from __future__ import annotations

from harness_r1.envs.alfworld.env import AlfWorldEnv, GameFileError
from harness_r1.envs.alfworld.expert import AlfWorldExpert
from harness_r1.envs.alfworld.prompter import AlfWorldPrompter, extract_action
from harness_r1.envs.alfworld.tasks import (
    DEFAULT_MAX_STEPS,
    ENV_NAME,
    SPLITS,
    TASK_TYPES,
    data_files,
    load_tasks,
)
from harness_r1.envs.alfworld.translation_cache import clear_translations
from harness_r1.envs.base import EnvSuite

SUITE = EnvSuite(
    name=ENV_NAME,
    splits=SPLITS,
    default_max_steps=DEFAULT_MAX_STEPS,
    make_env=AlfWorldEnv,
    load_tasks=load_tasks,
    prompter=AlfWorldPrompter(),
    data_files=data_files,
    expert=AlfWorldExpert(),
)

__all__ = [
    "clear_translations",
    "SUITE",
    "TASK_TYPES",
    "AlfWorldEnv",
    "AlfWorldPrompter",
    "GameFileError",
    "extract_action",
    "load_tasks",
]
