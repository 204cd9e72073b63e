"""DBBench (AgentBench) on SQLite: answer questions about, or modify, one table with SQL.

Splits: `dev` (dbbench/dev.jsonl, 60 tasks) and `standard` (dbbench/standard_even.jsonl, 150
tasks) under the data root. Actions: `sql: <statement>` and `answer: <items>` (see env.py).
Success follows AgentBench: answers against `label` for queries, the table hash against
`answer_md5` for INSERT/UPDATE/DELETE (see scoring.py).
"""

from __future__ import annotations

from pathlib import Path

from harness_r1.envs.base import Env, EnvSuite
from harness_r1.envs.dbbench.env import DBBenchEnv, parse_action
from harness_r1.envs.dbbench.expert import DBBenchExpert
from harness_r1.envs.dbbench.prompter import DBBenchPrompter
from harness_r1.envs.dbbench.tasks import (
    DEFAULT_MAX_STEPS,
    ENV_NAME,
    SPLITS,
    data_files,
    load_tasks,
)


def make_env(root: Path) -> Env:
    """The data root is not needed: every task carries its own table."""
    return DBBenchEnv()


SUITE = EnvSuite(
    name=ENV_NAME,
    splits=SPLITS,
    default_max_steps=DEFAULT_MAX_STEPS,
    make_env=make_env,
    load_tasks=load_tasks,
    prompter=DBBenchPrompter(),
    data_files=data_files,
    expert=DBBenchExpert(),
)

__all__ = ["SUITE", "DBBenchEnv", "DBBenchPrompter", "load_tasks", "parse_action"]
