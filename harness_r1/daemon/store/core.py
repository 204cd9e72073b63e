"""The store's engine, migration on open, named locks and schema version: what every part of it
stands on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    select,
    text,
)
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.orm import Session

from harness_r1.daemon.store.migrations import (
    current_version,
    upgrade,
)
from harness_r1.daemon.store.records import (
    _PG_MIGRATION_LOCK,
    StoreError,
    UnknownBatch,
)
from harness_r1.daemon.store.schema import (
    _BatchRow,
)
from harness_r1.deploy import DEFAULT_BUSY_TIMEOUT_MS, SqlDatabase


class StoreCore(SqlDatabase):
    """The daemon's durable state. Safe to use from several threads and several processes on
    the same database; every method runs in its own short transaction."""

    what = "the daemon state store"
    error = StoreError

    def __init__(self, url: str, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> None:
        super().__init__(url, busy_timeout_ms=busy_timeout_ms)
        self._insert = sqlite_dialect.insert if self._dialect == "sqlite" else pg_dialect.insert
        try:
            self._migrate()
        except BaseException:
            self._engine.dispose()
            raise

    def _migrate(self) -> None:
        with self._write_engine.begin() as conn:
            if self._dialect == "postgresql":
                # Held to the end of this transaction: a second process waits here, then finds
                # the version already current.
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                )
            upgrade(conn)

    @contextmanager
    def exclusive(self, name: str) -> Iterator[bool]:
        """Try to hold a named lock shared by every daemon on this database (no waiting):
        yields True when this process holds it. Jobs that must run once per database, not once
        per daemon (live guard, GRPO update, retention), run only when they get it."""
        with self.named_lock(name, wait=False) as held:
            yield held

    def schema_version(self) -> int:
        with self._engine.connect() as conn:
            return current_version(conn)

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @staticmethod
    def _rowcount(session: Session, statement: Any) -> int:
        """Rows a bulk UPDATE/DELETE touched (through the Core connection, which reports it)."""
        return int(session.connection().execute(statement).rowcount)

    def _batch_row(self, session: Session, batch_id: str, *, lock: bool = False) -> _BatchRow:
        query = select(_BatchRow).where(_BatchRow.batch_id == batch_id)
        if lock:
            query = query.with_for_update()
        row = session.scalars(query).one_or_none()
        if row is None:
            raise UnknownBatch(f"no batch {batch_id!r} in the state store at {self.url}")
        return row
