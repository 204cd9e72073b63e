"""What the overlay registry and the daemon's state store share about their database.

One SQLAlchemy URL serves both (SQLite by default, PostgreSQL for several daemon workers), so
they agree on how a connection is set up: SQLite in WAL mode with a busy timeout and write
transactions that begin IMMEDIATE (a read-then-write cannot lose a race to another process),
timestamps stored in UTC and read back tz-aware, and short sessions per method.
"""

from __future__ import annotations

import fcntl
import hashlib
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Engine, TypeDecorator, create_engine, event, text
from sqlalchemy.engine import Connection, Dialect, make_url
from sqlalchemy.orm import Session
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

SUPPORTED_DIALECTS = ("sqlite", "postgresql")
DEFAULT_BUSY_TIMEOUT_MS = 30_000
#: Execution option naming the BEGIN mode of a SQLite transaction (see configure_sqlite).
SQLITE_BEGIN = "harness_r1_sqlite_begin"


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps stored in UTC and always read back tz-aware.

    SQLite keeps no offset (it would return naive datetimes), PostgreSQL returns the session's
    zone: both are normalised to UTC here so records compare and serialise the same everywhere.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("the database takes tz-aware datetimes only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise ValueError(f"expected a datetime from the database, got {value!r}")
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _locked(err: BaseException) -> bool:
    return isinstance(err, sqlite3.OperationalError) and "locked" in str(err)


def _enable_wal(cursor: Any, budget_s: float) -> None:
    """`PRAGMA journal_mode = WAL`, retried while the file is locked: switching a new database
    to WAL can answer "database is locked" at once, without the busy handler, when several
    processes open it for the first time together (seen ~4 in 60 four-way first starts)."""
    for attempt in Retrying(
        retry=retry_if_exception(_locked),
        stop=stop_after_delay(max(budget_s, 0.1)),
        wait=wait_exponential(multiplier=0.005, max=0.2),
        reraise=True,
    ):
        with attempt:
            cursor.execute("PRAGMA journal_mode = WAL")


def configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    """WAL, busy_timeout and foreign keys per connection; SQLAlchemy, not the sqlite3 module,
    emits BEGIN (the module's legacy mode never begins a transaction before a SELECT, so a
    read-then-write would not be isolated), with the mode the engine's options ask for."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            _enable_wal(cursor, busy_timeout_ms / 1000)
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


class SqlDatabase:
    """Engine setup, the URL check and short read/write sessions; subclasses add tables."""

    what = "the database"  # for error messages: "the overlay registry", ...
    error: type[Exception] = ValueError

    def __init__(self, url: str, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> None:
        parsed = make_url(url)
        self._dialect = parsed.get_backend_name()
        if self._dialect not in SUPPORTED_DIALECTS:
            raise self.error(
                f"{self.what} supports {' and '.join(SUPPORTED_DIALECTS)} URLs; "
                f"got {parsed.render_as_string(hide_password=True)!r}"
            )
        self._engine = create_engine(parsed)
        if self._dialect == "sqlite":
            configure_sqlite(self._engine, busy_timeout_ms)
        self._write_engine = self._engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})
        self._memory_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The database URL with any password hidden: safe for logs and error messages."""
        return self._engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self._engine.dispose()

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._write_engine, expire_on_commit=False) as session, session.begin():
            yield session

    @contextmanager
    def held(self, name: str) -> Iterator[None]:
        """Wait for, and hold, a lock named `name` shared by every process on this database,
        without holding any database lock meanwhile (other writers go on)."""
        with self.named_lock(name, wait=True):
            yield

    @contextmanager
    def named_lock(self, name: str, *, wait: bool) -> Iterator[bool]:
        """A lock shared by every process on this database, waited for (`wait`) or only tried
        (yields False when another process holds it): a PostgreSQL session advisory lock on a
        connection of its own; on SQLite an flock on a file beside the database (SQLite is one
        host); in memory, a lock of this object."""
        if self._dialect == "postgresql":
            key = int(hashlib.sha256(name.encode()).hexdigest()[:15], 16)
            call = "pg_advisory_lock" if wait else "pg_try_advisory_lock"
            with self._engine.connect() as conn:
                got = conn.execute(text(f"SELECT {call}(:k)"), {"k": key}).scalar()
                held = True if wait else bool(got)
                conn.commit()
                try:
                    yield held
                finally:
                    if held:
                        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                        conn.commit()
            return
        database = self._engine.url.database
        if not database or database == ":memory:":
            acquired = self._memory_lock.acquire(blocking=wait)
            try:
                yield acquired
            finally:
                if acquired:
                    self._memory_lock.release()
            return
        safe = "".join(c if c.isalnum() else "_" for c in name)
        with open(f"{database}.{safe}.lock", "a+b") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self._engine) as session, session.begin():
            yield session
