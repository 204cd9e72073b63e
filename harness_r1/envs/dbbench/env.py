"""DBBenchEnv: AgentBench's DBBench as a text env over an in-memory SQLite table.

Action format (what the prompter's `extract_action` produces, and what a hook may force):
- `sql: <statement>`  runs the first SQL statement (MySQL dialect, translated; see sqltext).
  The observation is the raw result the way AgentBench shows MySQL's: `str(cursor.fetchall())`,
  e.g. `[('Vienna',)]`, `[]` for no rows and for statements without a result set, or
  `Error: <message>` when the statement fails. Nothing ends the episode but an answer.
- `answer: <items>`   gives the final answer and ends the episode. `<items>` is a JSON list
  (`["ANSWER1", "ANSWER2"]`), a Python literal (raw rows `[('a',)]` are accepted), or plain text
  taken as one item. For INSERT/UPDATE/DELETE tasks the content does not matter: the table
  itself is scored.
Anything else is an invalid action: an explanatory observation, `invalid_action=True`, the
episode goes on (AgentBench ends it as a failure; here the harness's step limit does that, so
hooks can see and repair format errors).

`info` on every reset/step: admissible_actions (None: free-form SQL), success, invalid_action,
sql_error (str | None), empty_result (a query returned no rows), result_truncated (the result was
cut), rows_affected (rows an INSERT/UPDATE/DELETE changed: 0 flags a WHERE that matched nothing;
MySQL's raw response shows `[]` either way), and on termination `answer` (parsed items) and,
for modification tasks, `table_hash`.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import INFO_ADMISSIBLE, INFO_INVALID, INFO_SUCCESS, EnvError, StepResult
from harness_r1.envs.dbbench.database import Limits, TableSpec, TaskDatabase
from harness_r1.envs.dbbench.scoring import (
    answers_match,
    hashes_match,
    is_modification,
    parse_answer,
)
from harness_r1.envs.dbbench.tasks import ENV_NAME

SQL_PREFIX = "sql:"
ANSWER_PREFIX = "answer:"
INVALID_OBSERVATION = (
    "Invalid action. Use `sql: <one SQL statement>` to run SQL, or "
    '`answer: ["ANSWER1", "ANSWER2", ...]` to commit the final answer.'
)


def parse_action(action: str) -> tuple[str, str] | None:
    """`sql: ...` -> ("sql", text); `answer: ...` -> ("answer", text); else None."""
    head, sep, rest = action.strip().partition(":")
    kind = head.strip().lower()
    if not sep or kind not in ("sql", "answer"):
        return None
    return kind, rest.strip()


def _info(**extra: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        INFO_ADMISSIBLE: None,
        INFO_SUCCESS: False,
        INFO_INVALID: False,
        "sql_error": None,
        "empty_result": False,
        "result_truncated": False,
        "rows_affected": None,
    }
    info.update(extra)
    return info


class DBBenchEnv:
    """One episode at a time; each reset builds a fresh database from the task's table."""

    name = ENV_NAME

    def __init__(self, limits: Limits | None = None) -> None:
        self._limits = limits or Limits()
        self._db: TaskDatabase | None = None
        self._task: TaskSpec | None = None
        self._done = False

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Seed is accepted and unused: a DBBench episode is deterministic."""
        if task.env != self.name:
            raise EnvError(f"task {task.task_id} is for env {task.env!r}, not {self.name!r}")
        payload = task.payload
        try:
            table = TableSpec.from_payload(payload.get("table"))
        except ValueError as err:
            raise EnvError(f"task {task.task_id}: {err}") from err
        if is_modification(task.task_type):
            if not isinstance(payload.get("answer_md5"), str):
                raise EnvError(f"task {task.task_id}: a {task.task_type} task needs answer_md5")
        elif not isinstance(payload.get("label"), list):
            raise EnvError(f"task {task.task_id}: a {task.task_type} task needs a label list")
        self.close()
        try:
            self._db = TaskDatabase(table, self._limits)
        except sqlite3.Error as err:
            raise EnvError(f"task {task.task_id}: cannot build its table: {err}") from err
        self._task = task
        self._done = False
        description = payload.get("description")
        extra = payload.get("add_description")
        if isinstance(description, str) and isinstance(extra, str):
            observation = f"{description}\n{extra}".strip()  # AgentBench's first user turn
        else:
            observation = task.instruction
        return observation, _info()

    def step(self, action: str) -> StepResult:
        if self._db is None or self._task is None:
            raise EnvError("step() before reset() (or after close())")
        if self._done:
            raise EnvError("the episode has terminated; call reset() first")
        parsed = parse_action(action) if isinstance(action, str) else None
        if parsed is None or (parsed[0] == "sql" and not parsed[1]):
            return StepResult(INVALID_OBSERVATION, 0.0, False, False, _info(invalid_action=True))
        kind, body = parsed
        if kind == "sql":
            result = self._db.execute(body)
            info = _info(
                sql_error=result.error,
                empty_result=result.empty,
                result_truncated=result.truncated,
                rows_affected=result.rowcount,
            )
            return StepResult(result.observation, 0.0, False, False, info)
        return self._finish(body)

    def _finish(self, body: str) -> StepResult:
        assert self._db is not None and self._task is not None
        self._done = True
        answer = parse_answer(body)
        payload = self._task.payload
        extra: dict[str, Any] = {"answer": answer}
        if is_modification(self._task.task_type):
            table_hash = self._db.table_hash()
            success = hashes_match(table_hash, str(payload["answer_md5"]))
            extra["table_hash"] = table_hash
        else:
            success = answers_match(answer, [str(x) for x in payload["label"]])
        observation = "Answer committed: " + ("correct." if success else "incorrect.")
        info = _info(success=success, **extra)
        return StepResult(observation, 1.0 if success else 0.0, True, False, info)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
        self._db = None
