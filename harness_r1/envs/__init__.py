"""Environments: one protocol, task registries by split, data loading.

Each benchmark is a subpackage exposing `SUITE: EnvSuite`; `get_suite(name)` imports it on
demand so that listing envs does not import TextWorld or build catalogues.
"""

from __future__ import annotations

import importlib

from harness_r1.envs.base import Env, EnvError, EnvSuite, StepResult, TaskPrompter
from harness_r1.envs.data import DataError

ENV_NAMES: tuple[str, ...] = ("alfworld", "dbbench", "webshop")


def get_suite(name: str) -> EnvSuite:
    if name not in ENV_NAMES:
        raise KeyError(f"unknown env {name!r}; known: {', '.join(ENV_NAMES)}")
    module = importlib.import_module(f"harness_r1.envs.{name}")
    suite: EnvSuite = module.SUITE
    return suite


__all__ = [
    "ENV_NAMES",
    "DataError",
    "Env",
    "EnvError",
    "EnvSuite",
    "StepResult",
    "TaskPrompter",
    "get_suite",
]
