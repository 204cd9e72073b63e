"""MySQL behaviour that SQLite lacks, registered on a connection as collations and functions.

Why: AgentBench's tables live in MySQL 8 with its default collation utf8mb4_0900_ai_ci, so
`Method = 'decision'` matches 'Decision' and `'Montreal' = 'Montréal'` holds; LIKE follows the
same collation and uses a backslash as its default escape character. The gold SQL (and models)
rely on this, and a few replayed gold UPDATEs only reproduce the expected table hash with it.
Also registered: the small set of MySQL functions SQLite does not have under that name
(CONCAT, CONCAT_WS, MD5, IF, LEFT, RIGHT, LOCATE, CHAR_LENGTH, LCASE, UCASE, REGEXP).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import unicodedata
from collections.abc import Callable
from functools import lru_cache
from typing import Any

#: Column collation name used in CREATE TABLE (MySQL's default: accent- and case-insensitive).
COLLATION = "MYSQL_AI_CI"


@lru_cache(maxsize=4096)
def fold(text: str) -> str:
    """The comparison key of utf8mb4_0900_ai_ci, approximated: no accents, case-folded."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def collate(left: str, right: str) -> int:
    """A total order consistent with `fold` (ties broken by nothing: equal keys are equal)."""
    a, b = fold(left), fold(right)
    return (a > b) - (a < b)


@lru_cache(maxsize=1024)
def _like_regex(pattern: str, escape: str) -> re.Pattern[str]:
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            parts.append(re.escape(fold(pattern[i + 1])))
            i += 2
            continue
        if ch == "%":
            parts.append(".*")
        elif ch == "_":
            parts.append(".")
        else:
            parts.append(re.escape(fold(ch)))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


def mysql_like(pattern: object, value: object, escape: object = "\\") -> int | None:
    """`value LIKE pattern [ESCAPE escape]` under the ai_ci collation (NULL in, NULL out)."""
    if pattern is None or value is None or escape is None:
        return None
    regex = _like_regex(str(pattern), str(escape)[:1])
    return int(regex.fullmatch(fold(_text(value))) is not None)


def _text(value: object) -> str:
    """MySQL's string form of a value: integral floats from arithmetic print without '.0'."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def concat(*args: object) -> str | None:
    if any(a is None for a in args):
        return None
    return "".join(_text(a) for a in args)


def concat_ws(separator: object, *args: object) -> str | None:
    """MySQL CONCAT_WS: NULL separator gives NULL; NULL arguments are skipped."""
    if separator is None:
        return None
    return _text(separator).join(_text(a) for a in args if a is not None)


def md5(value: object) -> str | None:
    if value is None:
        return None
    return hashlib.md5(_text(value).encode("utf-8")).hexdigest()


def mysql_if(condition: object, then: object, otherwise: object) -> object:
    truthy = condition is not None and condition not in (0, 0.0, "", "0")
    return then if truthy else otherwise


def left(value: object, length: object) -> str | None:
    if value is None or length is None:
        return None
    return _text(value)[: max(int(float(str(length))), 0)]


def right(value: object, length: object) -> str | None:
    if value is None or length is None:
        return None
    count = max(int(float(str(length))), 0)
    text = _text(value)
    return text[len(text) - count :] if count else ""


def locate(needle: object, haystack: object, start: object = 1) -> int | None:
    if needle is None or haystack is None or start is None:
        return None
    begin = max(int(float(str(start))) - 1, 0)
    return fold(_text(haystack)).find(fold(_text(needle)), begin) + 1


def regexp(pattern: object, value: object) -> int | None:
    """`value REGEXP pattern`: case-insensitive like MySQL's ci collations."""
    if pattern is None or value is None:
        return None
    try:
        return int(re.search(str(pattern), _text(value), re.IGNORECASE) is not None)
    except re.error as err:
        raise ValueError(f"invalid regular expression: {err}") from err


def install(connection: sqlite3.Connection) -> None:
    """Register the collation and functions on a fresh connection."""
    connection.create_collation(COLLATION, collate)
    functions: list[tuple[str, int, Callable[..., Any]]] = [
        ("like", 2, mysql_like),
        ("like", 3, mysql_like),
        ("concat", -1, concat),
        ("concat_ws", -1, concat_ws),
        ("md5", 1, md5),
        ("if", 3, mysql_if),
        ("left", 2, left),
        ("right", 2, right),
        ("locate", 2, locate),
        ("locate", 3, locate),
        ("char_length", 1, lambda v: None if v is None else len(_text(v))),
        ("lcase", 1, lambda v: None if v is None else _text(v).lower()),
        ("ucase", 1, lambda v: None if v is None else _text(v).upper()),
        ("regexp", 2, regexp),
    ]
    for name, arity, function in functions:
        connection.create_function(name, arity, function, deterministic=True)
