"""Loading WebShop's fixed goals (goals_fixed_0_59.json, as published by ExpeL).

Why strict checks: the file is the only ground truth the reconstructed catalogue and the reward
stand on; a half-read goal would silently mis-score episodes. Every problem raises DataError
naming the file and the goal.

Each row: {"session_idx": "fixed_<n>", "task": "<instruction>, and price lower than X dollars
\\n[Search]\\n", "key": {"asin", "name", "query", "goal_options": [...]}}. The instruction is
the task text without the trailing "[Search]"; the price bound is parsed from WebShop's own
price clause, and a goal without one gets WebShop's no-bound value (1,000,000).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_r1.envs.data import DataError, read_json, require_keys
from harness_r1.envs.webshop.model import NO_PRICE_BOUND

GOALS_FILE = Path("webshop") / "goals_fixed_0_59.json"
HUMAN_GOALS_FILE = Path("webshop") / "human_goals.json"
GOAL_QUERY_MAP_FILE = Path("webshop") / "goal_query_map.json"

_SESSION_RE = re.compile(r"^fixed_(\d+)$")
_SEARCH_SUFFIX_RE = re.compile(r"\s*\[Search\]\s*$")
PRICE_CLAUSE_RE = re.compile(r",?\s*and price lower than (\d+(?:\.\d+)?) dollars\s*$")


@dataclass(frozen=True)
class GoalRecord:
    """One row of the goals file, checked and parsed (attributes come from the catalogue)."""

    session_idx: str
    index: int
    instruction: str
    price_upper: float
    asin: str
    name: str
    query: str
    goal_options: tuple[str, ...]

    @property
    def body(self) -> str:
        """The instruction without its price clause."""
        return PRICE_CLAUSE_RE.sub("", self.instruction).strip()


def instruction_of(task_text: str) -> str:
    """The task text without the trailing "[Search]" marker and surrounding whitespace."""
    return _SEARCH_SUFFIX_RE.sub("", task_text).strip()


def price_upper_of(instruction: str) -> float:
    match = PRICE_CLAUSE_RE.search(instruction)
    return float(match.group(1)) if match else NO_PRICE_BOUND


def _str_field(path: Path, where: str, row: dict[str, Any], key: str) -> str:
    value = row[key]
    if not isinstance(value, str) or not value.strip():
        raise DataError(path, f"{where}: field {key!r} must be a non-empty string")
    return value


def parse_goal(path: Path, position: int, row: Any) -> GoalRecord:
    where = f"goal #{position}"
    if not isinstance(row, dict):
        raise DataError(path, f"{where} is not an object")
    require_keys(path, where, row, ("session_idx", "task", "key"))
    session_idx = _str_field(path, where, row, "session_idx")
    match = _SESSION_RE.match(session_idx)
    if match is None:
        raise DataError(path, f"{where}: session_idx {session_idx!r} is not of the form fixed_<n>")
    where = f"goal {session_idx}"
    task_text = _str_field(path, where, row, "task")
    key = row["key"]
    if not isinstance(key, dict):
        raise DataError(path, f"{where}: field 'key' must be an object")
    require_keys(path, f"{where} key", key, ("asin", "name", "query", "goal_options"))
    options = key["goal_options"]
    if not isinstance(options, list) or not all(isinstance(o, str) and o for o in options):
        raise DataError(path, f"{where}: key.goal_options must be a list of non-empty strings")
    instruction = instruction_of(task_text)
    if not instruction:
        raise DataError(path, f"{where}: task text is empty")
    return GoalRecord(
        session_idx=session_idx,
        index=int(match.group(1)),
        instruction=instruction,
        price_upper=price_upper_of(instruction),
        asin=_str_field(path, f"{where} key", key, "asin").strip().upper(),
        name=_str_field(path, f"{where} key", key, "name").strip(),
        query=_str_field(path, f"{where} key", key, "query").lower().strip(),
        goal_options=tuple(o.strip().lower() for o in options),
    )


def load_goal_records(data_root: Path) -> list[GoalRecord]:
    """All goals of the fixed split, in session order; DataError on any problem."""
    path = data_root / GOALS_FILE
    rows = read_json(path)
    if not isinstance(rows, list) or not rows:
        raise DataError(path, "expected a non-empty JSON list of goals")
    goals = [parse_goal(path, position, row) for position, row in enumerate(rows)]
    for what, values in (
        ("session_idx", [g.session_idx for g in goals]),
        ("target asin", [g.asin for g in goals]),
    ):
        duplicates = sorted({v for v in values if values.count(v) > 1})
        if duplicates:
            raise DataError(path, f"duplicate {what} {', '.join(map(repr, duplicates))}")
    return sorted(goals, key=lambda g: g.index)
