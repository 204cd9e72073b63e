"""TextWorld's challenge games as a harness-r1 env: the suite an entry point hands over.

Everything harness-r1 needs is this one `EnvSuite`; the package declares it in its
pyproject.toml under the entry-point group `harness_r1.envs`, and harness-r1 finds it there.
Importing this package does not import TextWorld: games are generated on first use.
"""

from __future__ import annotations

from harness_r1.envs import EnvSuite
from harness_r1_textworld.catalog import (
    DEFAULT_MAX_STEPS,
    ENV_NAME,
    SPLITS,
    data_files,
    load_tasks,
)
from harness_r1_textworld.env import TextWorldChallengeEnv
from harness_r1_textworld.prompter import ChallengePrompter

SUITE = EnvSuite(
    name=ENV_NAME,
    splits=SPLITS,
    default_max_steps=DEFAULT_MAX_STEPS,
    make_env=TextWorldChallengeEnv,
    load_tasks=load_tasks,
    prompter=ChallengePrompter(),
    data_files=data_files,
)

__all__ = ["SUITE", "ChallengePrompter", "TextWorldChallengeEnv", "load_tasks"]
