"""AgentBench's DBBench success rule, as pure functions (the env and the gold replay share them).

SELECT-style tasks (counting, comparison, ranking, aggregation-*, other): the final answer is a
list compared with `label`. One item each: numbers within 0.01, otherwise string equality.
Otherwise: set semantics (order and duplicates ignored) where numeric items match within 0.01.
Deviations from AgentBench's classic scorer, each lenient and deliberate:
- items are compared after stripping surrounding whitespace (AgentBench kept the blank after
  `Final Answer:` on unparsable answers, failing `Final Answer: Giza`);
- `1,174` reads as the number 1174 (AgentBench's newer result processor strips thousands
  separators too);
- an answer of no items or only null-like items (`None`, `null`, empty) equals a label of that
  kind; the data spells "no such row" as `["none"]`, while MySQL prints `[]` or `[(None,)]`.
INSERT/UPDATE/DELETE tasks: the table hash after the episode must equal `answer_md5`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from typing import Any

MODIFICATION_TYPES = frozenset({"INSERT", "UPDATE", "DELETE"})
FLOAT_TOLERANCE = 0.01
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_GROUPED = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_NULLISH = frozenset({"", "none", "null"})
_MD5 = re.compile(r"[0-9a-f]{32}")


def is_modification(task_type: str) -> bool:
    return task_type in MODIFICATION_TYPES


def _flatten(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [item for element in value for item in _flatten(element)]
    if value is None:
        return ["None"]
    return [value if isinstance(value, str) else str(value)]


def parse_answer(text: str) -> list[str]:
    """`answer:` payload -> list of items: a JSON list, a Python literal (raw MySQL rows such
    as `[('a',), ('b',)]`), or else the whole text as one item (AgentBench: `ans = [ans]`)."""
    stripped = text.strip()
    if not stripped:
        return []
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return _flatten(value)
    return [stripped]


def rows_to_answer(rows: Sequence[Sequence[Any]]) -> list[str]:
    """Result rows as the answer a perfect agent would give (all values, row by row)."""
    return _flatten([list(row) for row in rows])


def to_number(item: str) -> float | None:
    """The number an item spells (`7`, `2.50`, `1,174`), or None."""
    text = item.strip()
    if _NUMBER.fullmatch(text):
        return float(text)
    if _GROUPED.fullmatch(text):
        return float(text.replace(",", ""))
    return None


def _same(a: str, b: str) -> bool:
    x, y = to_number(a), to_number(b)
    if x is not None and y is not None:
        return abs(x - y) <= FLOAT_TOLERANCE
    return a.strip() == b.strip()


def _nullish(items: Sequence[str]) -> bool:
    return all(item.strip().lower() in _NULLISH for item in items)


def answers_match(answer: Sequence[str], label: Sequence[str]) -> bool:
    """AgentBench's SELECT rule (see the module docstring)."""
    answer = [str(a) for a in answer]
    label = [str(b) for b in label]
    if _nullish(answer) and _nullish(label):
        return True
    if len(answer) == 1 and len(label) == 1:
        return _same(answer[0], label[0])
    return all(any(_same(a, b) for b in label) for a in answer) and all(
        any(_same(a, b) for a in answer) for b in label
    )


def hash_value(printed: str | None) -> str | None:
    """The md5 inside MySQL's printed hash (`[('<md5>',)]`), or None (NULL / unreadable)."""
    if printed is None:
        return None
    match = _MD5.search(printed)
    return match.group() if match else None


def hashes_match(computed: str | None, expected: str) -> bool:
    """Compare by the md5 inside; an expected NULL hash (empty table) matches only NULL."""
    want = hash_value(expected)
    if want is None:
        return computed is not None and computed.strip() == expected.strip()
    return hash_value(computed) == want
