"""DBBench task files -> TaskSpec, with errors that name the file, the line and the field.

Why strict: a row with a broken table or a missing gold answer would otherwise surface mid-run
as an `error` episode (or, worse, as a silent failure the engineer then tries to "fix").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.data import DataError, require_keys
from harness_r1.envs.dbbench.database import TableSpec
from harness_r1.envs.dbbench.scoring import is_modification

ENV_NAME = "dbbench"
DATA_DIR = "dbbench"
#: split -> file under `<data root>/dbbench/`
SPLIT_FILES: dict[str, str] = {"dev": "dev.jsonl", "standard": "standard_even.jsonl"}
SPLITS: tuple[str, ...] = tuple(SPLIT_FILES)
#: AgentBench gives DBBench a small round limit.
DEFAULT_MAX_STEPS = 15
REQUIRED_FIELDS = ("description", "add_description", "table", "type", "label")


def split_path(root: Path, split: str) -> Path:
    if split not in SPLIT_FILES:
        raise ValueError(f"unknown dbbench split {split!r}; known: {', '.join(SPLITS)}")
    return root / DATA_DIR / SPLIT_FILES[split]


def data_files(root: Path) -> dict[str, Sequence[Path]]:
    """The files each split needs, for `harness-r1 data status`."""
    return {split: [split_path(root, split)] for split in SPLITS}


def _read_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line."""
    if not path.is_file():
        raise DataError(path, "file is missing (run `harness-r1 data status` / `data fetch`)")
    rows: list[tuple[int, Any]] = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as err:
                    raise DataError(path, f"line {number} is not valid JSON: {err.msg}") from err
    except UnicodeDecodeError as err:
        raise DataError(path, f"not valid UTF-8: {err.reason}") from err
    return rows


def _task(path: Path, split: str, index: int, width: int, number: int, row: Any) -> TaskSpec:
    where = f"line {number}"
    if not isinstance(row, dict):
        raise DataError(path, f"{where} is not a JSON object")
    require_keys(path, where, row, REQUIRED_FIELDS)
    for key in ("description", "add_description"):
        if not isinstance(row[key], str):
            raise DataError(path, f"{where}: field {key} must be a string")
    types = row["type"]
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise DataError(path, f"{where}: field type must be a non-empty list of strings")
    try:
        TableSpec.from_payload(row["table"])
    except ValueError as err:
        raise DataError(path, f"{where}: field table is malformed: {err}") from err
    label = row["label"]
    if not isinstance(label, list):
        raise DataError(path, f"{where}: field label must be a list")
    task_type = types[0]
    answer_md5 = row.get("answer_md5")
    if is_modification(task_type):
        require_keys(path, where, row, ("answer_md5",))
        if not isinstance(answer_md5, str):
            raise DataError(path, f"{where}: field answer_md5 must be a string")
    sql = row.get("sql")
    if sql is not None and not (isinstance(sql, dict) and isinstance(sql.get("query"), str)):
        raise DataError(path, f"{where}: field sql must be an object with a string query")
    return TaskSpec(
        env=ENV_NAME,
        split=split,
        task_id=f"{split}-{index:0{width}d}",
        task_type=task_type,
        instruction=f"{row['description']} {row['add_description']}".strip(),
        max_steps=DEFAULT_MAX_STEPS,
        payload={
            "description": row["description"],
            "add_description": row["add_description"],
            "table": row["table"],
            "label": label,
            "sql": sql,
            "answer_md5": answer_md5,
            "type": types,
        },
    )


def load_tasks(root: Path, split: str) -> list[TaskSpec]:
    """All tasks of a split, ids `<split>-<row index>` zero-padded (`dev-007`)."""
    path = split_path(root, split)
    rows = _read_lines(path)
    width = max(3, len(str(len(rows) - 1)))
    return [
        _task(path, split, index, width, number, row) for index, (number, row) in enumerate(rows)
    ]
