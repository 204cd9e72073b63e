"""Environments: one protocol, task registries by split, data loading.

Each built-in benchmark is a subpackage exposing `SUITE: EnvSuite`; an installed package adds
an env through the entry-point group `harness_r1.envs` (registry.py). `get_suite(name)` imports
a suite on demand, so that listing envs does not import TextWorld or build catalogues.

Modules:
- base.py: The environment protocol (Gymnasium's spirit, text in and out) and how tasks are
  prompted
- conformance.py: check_env: the contract every environment must pass (Gymnasium's check_env,
  for text envs)
- data.py: Where benchmark data lives, and the error a user sees when a file is missing or
  malformed
- fetch.py: Get the official benchmark files and lay them out as the data root expects
  (`harness-r1 data fetch ENV`)
- registry.py: Which environments exist: the three built in, and every suite an installed
  package adds
- alfworld/: ALFWorld: household tasks as real TextWorld games (alfworld 0.4.x), played offline
- dbbench/: DBBench (AgentBench) on SQLite: answer questions about, or modify, one table with
  SQL
- webshop/: WebShop (Yao et al
"""

from __future__ import annotations

from harness_r1.envs.base import (
    INFO_ADMISSIBLE,
    INFO_INVALID,
    INFO_SUCCESS,
    Env,
    EnvError,
    EnvSuite,
    Expert,
    ExpertEpisode,
    StepResult,
    TaskPrompter,
)
from harness_r1.envs.conformance import ConformanceError, check_env, check_suite
from harness_r1.envs.data import DataError, default_data_root
from harness_r1.envs.fetch import FetchError, fetch_env_data
from harness_r1.envs.registry import (
    BUILTIN_ENVS,
    ENTRY_POINT_GROUP,
    env_names,
    get_suite,
    plugin_entry_points,
)

#: the built-in envs (plugins: `env_names()`)
ENV_NAMES: tuple[str, ...] = BUILTIN_ENVS


__all__ = [
    "ConformanceError",
    "check_env",
    "check_suite",
    "plugin_entry_points",
    "BUILTIN_ENVS",
    "ENTRY_POINT_GROUP",
    "env_names",
    "DataError",
    "ENV_NAMES",
    "Env",
    "EnvError",
    "EnvSuite",
    "Expert",
    "ExpertEpisode",
    "FetchError",
    "INFO_ADMISSIBLE",
    "INFO_INVALID",
    "INFO_SUCCESS",
    "StepResult",
    "TaskPrompter",
    "default_data_root",
    "fetch_env_data",
    "get_suite",
]
