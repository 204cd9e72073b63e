"""DBBench's demonstrator: the gold SQL, then the answer (split `standard` only).

A SELECT-style task runs `sql.query` and answers with the values of the result it reads (the
observation parsed as the env parses an answer), so what the model learns is to copy what it
was shown; the episode only becomes a demonstration if that answer scores as the label. An
INSERT/UPDATE/DELETE task runs the gold statement (its label) and answers `["none"]`, as the
prompt's examples do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import Env
from harness_r1.envs.dbbench.env import DBBenchEnv
from harness_r1.envs.dbbench.scoring import is_modification, parse_answer


def operation_reply(sql: str) -> str:
    return f"Action: Operation\n```sql\n{' '.join(sql.split())}\n```"


def answer_reply(answer: list[str]) -> str:
    return f"Action: Answer\nFinal Answer: {json.dumps(answer)}"


class _GoldEpisode:
    def __init__(self, task: TaskSpec) -> None:
        payload = task.payload
        modification = is_modification(task.task_type)
        label = payload["label"]
        sql = str(label[0]) if modification and label else (payload.get("sql") or {}).get("query")
        self.sql = sql
        self.modification = modification
        self.turn = 0

    def reply(self, observation: str, info: dict[str, Any]) -> str | None:
        self.turn += 1
        if self.turn == 1 and self.sql:
            return operation_reply(self.sql)
        if self.turn == 2:
            return answer_reply(["none"] if self.modification else parse_answer(observation))
        return None


class DBBenchExpert:
    training_splits: tuple[str, ...] = ("standard",)

    def make_env(self, data_root: Path) -> Env:
        return DBBenchEnv()  # every task carries its own table

    def episode(self, task: TaskSpec, env: Env) -> _GoldEpisode:
        return _GoldEpisode(task)
