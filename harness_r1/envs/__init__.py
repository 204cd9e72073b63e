"""Environments: one protocol, task registries by split, data loading.

Each benchmark is a subpackage exposing `SUITE: EnvSuite`; `get_suite(name)` imports it on
demand so that listing envs does not import TextWorld or build catalogues.

Modules:
- base.py: The environment protocol (Gymnasium's spirit, text in and out) and how tasks are
  prompted
- conformance.py: check_env: the contract every environment must pass (Gymnasium's check_env,
  for text envs)
- data.py: Where benchmark data lives, and the error a user sees when a file is missing or
  malformed
- fetch.py: Get the official benchmark files and lay them out as the data root expects
  (`harness-r1 data fetch ENV`)
- alfworld/: ALFWorld: household tasks as real TextWorld games (alfworld 0.4.x), played offline
- dbbench/: DBBench (AgentBench) on SQLite: answer questions about, or modify, one table with
  SQL
- webshop/: WebShop (Yao et al
"""

from __future__ import annotations

import importlib

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
from harness_r1.envs.data import DataError, default_data_root
from harness_r1.envs.fetch import FetchError, fetch_env_data

ENV_NAMES: tuple[str, ...] = ("alfworld", "dbbench", "webshop")


def get_suite(name: str) -> EnvSuite:
    if name not in ENV_NAMES:
        raise KeyError(f"unknown env {name!r}; known: {', '.join(ENV_NAMES)}")
    module = importlib.import_module(f"harness_r1.envs.{name}")
    suite: EnvSuite = module.SUITE
    return suite


__all__ = [
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
