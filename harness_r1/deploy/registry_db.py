"""The overlay registry's database: its tables, and one write transaction shared by calls.

SQLite specifics, set on every new connection: WAL (readers do not block the writer),
`busy_timeout` (a second writer waits instead of failing at once), foreign keys on. Write
transactions start with `BEGIN IMMEDIATE`: they take the write lock up front, so a transaction
that reads a state and then writes it cannot lose a race to another process half-way (a
deferred transaction would fail with SQLITE_BUSY on its first write, which busy_timeout cannot
retry). On PostgreSQL the same reads take row locks (`SELECT ... FOR UPDATE`).

Several registry calls that must hold together (roll X back AND activate Y; record a command
only if no newer one was recorded) run in one `transaction()`: every `_write` and `_read` of
this thread inside the block joins it.

Why a module of its own: whether a call runs in a transaction of its own or joins the open one
is decided the same way for overlays, sequence numbers, marks and holds; the operations build on
it without each knowing how transactions are joined.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from harness_r1.deploy.registry_records import RegistryError
from harness_r1.deploy.registry_schema import RegistryBase
from harness_r1.deploy.sqlbase import DEFAULT_BUSY_TIMEOUT_MS, SqlDatabase

DEFAULT_URL = "sqlite:///harness_r1.db"


class RegistryDatabase(SqlDatabase):
    """The registry's tables on one database, and the transaction its calls may share.

    Safe to use from several threads and several processes on the same database; every call
    runs in its own short transaction unless it runs inside `transaction()`.
    """

    what = "the overlay registry"
    error = RegistryError

    def __init__(
        self, url: str = DEFAULT_URL, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    ) -> None:
        super().__init__(url, busy_timeout_ms=busy_timeout_ms)
        self._tx = threading.local()  # the session of this thread's open transaction()
        # Inside a write transaction so two processes creating the tables at once serialise.
        with self._write_engine.begin() as conn:
            RegistryBase.metadata.create_all(conn)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Run every registry call of this thread inside the block in ONE write transaction
        (all or nothing; SQLite takes its write lock up front, PostgreSQL keeps the row locks
        to the end). Why: a control command's effect is several moves (roll X back, activate
        Y, advance the mark) and another process must never see, or interleave with, half of
        it. Nested blocks join the outer one. Other threads are not affected."""
        if getattr(self._tx, "session", None) is not None:
            yield
            return
        with super()._write() as session:
            self._tx.session = session
            try:
                yield
            finally:
                self._tx.session = None

    @contextmanager
    def _write(self) -> Iterator[Session]:
        session: Session | None = getattr(self._tx, "session", None)
        if session is not None:
            yield session
            return
        with super()._write() as fresh:
            yield fresh

    @contextmanager
    def _read(self) -> Iterator[Session]:
        """Inside a transaction() reads use its session: they see its own uncommitted moves."""
        session: Session | None = getattr(self._tx, "session", None)
        if session is not None:
            session.flush()
            yield session
            return
        with super()._read() as fresh:
            yield fresh
