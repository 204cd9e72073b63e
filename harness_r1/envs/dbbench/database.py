"""One task's database: an in-memory SQLite copy of the task table, guarded, MySQL-flavoured.

Why in-memory SQLite instead of AgentBench's MySQL container: a reset must be cheap, hermetic
and identical on every machine (the canary re-runs the same tasks thousands of times), and a
patch or a model must not reach anything outside the episode. The table is created the way
AgentBench creates it (every column TEXT, values inserted as strings), with MySQL's default
collation emulated (see mysqlfuncs) and MySQL-isms translated (see sqltext).

Guards against runaway SQL: a VM-step budget and a wall-clock deadline per statement (progress
handler), caps on value length and SQL length, no ATTACH (so no VACUUM INTO a file either), no
PRAGMA from the agent, and a cap on the rows and characters shown in the observation.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness_r1.envs.dbbench import mysqlfuncs
from harness_r1.envs.dbbench.sqltext import (
    SqlTextError,
    statement_words,
    to_sqlite,
    unquote_identifier,
)

#: MySQL's default group_concat_max_len: GROUP_CONCAT output is cut to this many bytes.
GROUP_CONCAT_MAX_LEN = 1024
TRUNCATED = "[TRUNCATED]"


def quote_identifier(name: str) -> str:
    """SQLite identifier quoting that survives spaces, quotes and any other character."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class TableSpec:
    """The task table as AgentBench builds it: a name, column names, rows of strings."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str | None, ...], ...]

    @classmethod
    def from_payload(cls, table: Any) -> TableSpec:
        """Build from the data's `table` field; ValueError says what is wrong."""
        if not isinstance(table, dict):
            raise ValueError("table must be an object")
        name = table.get("table_name")
        info = table.get("table_info")
        if not isinstance(name, str) or not name:
            raise ValueError("table.table_name must be a non-empty string")
        if not isinstance(info, dict):
            raise ValueError("table.table_info must be an object")
        columns = info.get("columns")
        rows = info.get("rows")
        if not isinstance(columns, list) or not columns:
            raise ValueError("table.table_info.columns must be a non-empty list")
        names: list[str] = []
        for column in columns:
            if not isinstance(column, dict) or not isinstance(column.get("name"), str):
                raise ValueError("every column needs a string `name`")
            names.append(column["name"])
        if not isinstance(rows, list):
            raise ValueError("table.table_info.rows must be a list")
        cells: list[tuple[str | None, ...]] = []
        for number, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != len(names):
                raise ValueError(f"row {number} must be a list of {len(names)} values")
            # AgentBench inserts every value as a string (str(col)) into TEXT columns.
            cells.append(tuple(None if v is None else str(v) for v in row))
        return cls(name=name, columns=tuple(names), rows=tuple(cells))


@dataclass(frozen=True)
class Limits:
    """Per-statement guards and observation caps (AgentBench cuts at 800 characters)."""

    max_vm_steps: int = 20_000_000
    max_seconds: float = 5.0
    max_rows: int = 50
    max_chars: int = 2000
    max_value_bytes: int = 10_000_000
    max_sql_chars: int = 100_000
    max_pages: int = 16_384


@dataclass(frozen=True)
class QueryResult:
    """What one statement did: the raw observation plus flags for `info`."""

    observation: str
    rows: list[tuple[Any, ...]] | None
    error: str | None
    empty: bool
    truncated: bool
    rowcount: int | None = None


def mysql_table_hash(rows: Sequence[Sequence[Any]]) -> str:
    """AgentBench's table hash, as MySQL prints it: `[('<md5>',)]`.

    md5(group_concat(rowhash ORDER BY rowhash)) with rowhash = substring(md5(concat_ws(',',
    cols...)), 1, 5). CONCAT_WS skips NULLs; GROUP_CONCAT joins with ',' and is cut to
    group_concat_max_len (1024) bytes; an empty table gives NULL, printed as `[(None,)]`.
    """
    hashes = sorted(
        hashlib.md5((mysqlfuncs.concat_ws(",", *row) or "").encode("utf-8")).hexdigest()[:5]
        for row in rows
    )
    if not hashes:
        return "[(None,)]"
    joined = ",".join(hashes).encode("utf-8")[:GROUP_CONCAT_MAX_LEN]
    return f"[('{hashlib.md5(joined).hexdigest()}',)]"


def format_rows(rows: list[tuple[Any, ...]], more: bool, limits: Limits) -> tuple[str, bool]:
    """MySQL-connector style `str(cursor.fetchall())`, capped in rows and characters."""
    text = str(rows)
    truncated = more
    if len(text) > limits.max_chars:
        text = text[: limits.max_chars]
        truncated = True
    if more:
        text += f" {TRUNCATED} (only the first {limits.max_rows} rows are shown)"
    elif truncated:
        text += f" {TRUNCATED}"
    return text, truncated


class TaskDatabase:
    """An in-memory SQLite database holding one task's table; one statement at a time."""

    def __init__(self, table: TableSpec, limits: Limits | None = None) -> None:
        self.table = table
        self.limits = limits or Limits()
        self._internal = False
        self._steps = 0
        self._deadline = 0.0
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        mysqlfuncs.install(self._conn)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.limits.max_value_bytes)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, self.limits.max_sql_chars)
        self._conn.set_authorizer(self._authorize)
        self._conn.set_progress_handler(self._progress, 1000)
        self._build()

    # -- guards ---------------------------------------------------------------------------
    def _authorize(self, action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and not self._internal:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def _progress(self) -> int:
        self._steps += 1000
        if self._steps > self.limits.max_vm_steps or time.monotonic() > self._deadline:
            return 1
        return 0

    def _arm(self) -> None:
        self._steps = 0
        self._deadline = time.monotonic() + self.limits.max_seconds

    def _run_internal(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._internal = True
        self._arm()
        try:
            return self._conn.execute(sql, params).fetchall()
        finally:
            self._internal = False

    # -- setup ----------------------------------------------------------------------------
    def _build(self) -> None:
        table = self.table
        columns = ", ".join(
            f"{quote_identifier(c)} TEXT COLLATE {mysqlfuncs.COLLATION}" for c in table.columns
        )
        name = quote_identifier(table.name)
        self._run_internal(f"PRAGMA max_page_count = {self.limits.max_pages}")
        self._run_internal(f"CREATE TABLE {name} ({columns})")
        placeholders = ", ".join("?" for _ in table.columns)
        self._internal = True
        self._arm()
        try:
            self._conn.executemany(f"INSERT INTO {name} VALUES ({placeholders})", table.rows)
        finally:
            self._internal = False

    # -- statements -----------------------------------------------------------------------
    def execute(self, sql: str) -> QueryResult:
        """Run the first statement of `sql`; errors come back as the observation, never raised."""
        special = self._special(sql)
        if special is not None:
            return special
        try:
            statement = to_sqlite(sql)
        except SqlTextError as err:
            return self._error(str(err))
        self._arm()
        cursor: sqlite3.Cursor | None = None
        try:
            cursor = self._conn.execute(statement)
            if cursor.description is None:
                changed = cursor.rowcount if cursor.rowcount >= 0 else None
                return QueryResult("[]", [], None, empty=False, truncated=False, rowcount=changed)
            fetched = cursor.fetchmany(self.limits.max_rows + 1)
        except sqlite3.OperationalError as err:
            if str(err) == "interrupted":
                return self._error(
                    "query aborted: it exceeded the execution budget "
                    f"({self.limits.max_vm_steps} steps or {self.limits.max_seconds:g} s)"
                )
            return self._error(str(err))
        except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError) as err:
            return self._error(str(err))
        finally:
            if cursor is not None:
                cursor.close()
        return self._rows(fetched)

    def _rows(self, fetched: list[tuple[Any, ...]]) -> QueryResult:
        more = len(fetched) > self.limits.max_rows
        rows = fetched[: self.limits.max_rows]
        text, truncated = format_rows(rows, more, self.limits)
        return QueryResult(text, rows, None, empty=not rows, truncated=truncated)

    @staticmethod
    def _error(message: str) -> QueryResult:
        return QueryResult(f"Error: {message}", None, message, empty=False, truncated=False)

    def _special(self, sql: str) -> QueryResult | None:
        """MySQL statements with no SQLite equivalent: SHOW TABLES, DESCRIBE/SHOW COLUMNS, USE."""
        words = statement_words(sql)
        if not words:
            return None
        low = [w.lower() for w in words]
        if low[0] == "show" and low[1:] in (["tables"], ["full", "tables"]):
            return self._rows(
                self._run_internal(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%' ORDER BY name"
                )
            )
        if low[0] in ("describe", "desc", "explain") and len(words) == 2:
            return self._describe(unquote_identifier(words[1]))
        rest = low[2:] if low[1:2] == ["full"] else low[1:]
        if (
            low[0] == "show"
            and len(rest) == 3
            and rest[0] in ("columns", "fields")
            and rest[1] in ("from", "in")
        ):
            return self._describe(unquote_identifier(words[-1]))
        if low[0] == "use" and len(words) == 2:
            return QueryResult("[]", [], None, empty=False, truncated=False)
        return None

    def _describe(self, table: str) -> QueryResult:
        info = self._run_internal("SELECT * FROM pragma_table_info(?)", (table,))
        if not info:
            return self._error(f"Table '{table}' doesn't exist")
        rows = [
            (name, (ctype or "").lower(), "NO" if notnull else "YES", "PRI" if pk else "", dflt, "")
            for _, name, ctype, notnull, dflt, pk in info
        ]
        return self._rows(rows)

    # -- scoring --------------------------------------------------------------------------
    def table_hash(self) -> str | None:
        """The task table's AgentBench hash, or None when the table cannot be read any more."""
        columns = ", ".join(quote_identifier(c) for c in self.table.columns)
        try:
            rows = self._run_internal(f"SELECT {columns} FROM {quote_identifier(self.table.name)}")
        except sqlite3.Error:
            return None
        return mysql_table_hash(rows)

    def close(self) -> None:
        self._conn.close()
