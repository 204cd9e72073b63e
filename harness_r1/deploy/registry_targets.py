"""Per-target bookkeeping of the overlay registry: sequence numbers, high-water marks, holds.

Keyed by target (the agent pool) and stream, not by overlay: the release/control seq counters
the publisher numbers its messages with; the `overlay_marks` table of high-water marks per
(target, stream), advanced atomically by `advance_mark` (the control follower's mirror of an
agent's seq high-water mark, and the highest control seq whose effect the registry holds, see
`deploy/control_effect.py` `record_control`); and a pool's pause or pin as its agents keep it.

Why a module of its own: none of it moves an overlay through its lifecycle; each is one atomic
statement or row of its own on the registry's database, beside the overlays, not among them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect

from harness_r1.deploy.registry_db import RegistryDatabase
from harness_r1.deploy.registry_records import PoolHold
from harness_r1.deploy.registry_schema import (
    RegistryBase,
    _HoldRow,
    _MarkRow,
    _now,
    _SequenceRow,
)


class TargetLedger(RegistryDatabase):
    """Per-target sequence counters, high-water marks and holds (pause, pin)."""

    # -- holds --

    def set_hold(
        self, target: str, kind: str, *, overlay_id: str | None, actor: str, reason: str, seq: int
    ) -> None:
        """Record TARGET as paused or pinned (replacing an earlier hold)."""
        if kind not in ("paused", "pinned"):
            raise ValueError(f"a hold is paused or pinned, not {kind!r}")
        with self._write() as session:
            row = session.get(_HoldRow, target)
            if row is None:
                row = _HoldRow(target=target)
                session.add(row)
            row.kind, row.overlay_id, row.actor = kind, overlay_id, actor
            row.reason, row.seq, row.at = reason, seq, _now()

    def clear_hold(self, target: str) -> bool:
        """TARGET resumed: True when it had a hold."""
        with self._write() as session:
            row = session.get(_HoldRow, target)
            if row is None:
                return False
            session.delete(row)
            return True

    def hold(self, target: str) -> PoolHold | None:
        with self._read() as session:
            row = session.get(_HoldRow, target)
            if row is None:
                return None
            return PoolHold(
                row.target, row.kind, row.overlay_id, row.actor, row.reason, row.seq, row.at
            )

    # -- sequence numbers --

    def next_seq(self, target: str, stream: str) -> int:
        """The next number of `stream` (e.g. "release", "control") for `target`: 1, 2, 3, ...

        One statement, `INSERT ... ON CONFLICT DO UPDATE SET value = value + 1 RETURNING value`,
        inside a write transaction: the database hands each number out once, whichever process
        or registry object asks (SQLite serialises writers; PostgreSQL locks the row).
        """
        statement = (
            self._insert(_SequenceRow)
            .values(target=target, stream=stream, value=1)
            .on_conflict_do_update(
                index_elements=["target", "stream"], set_={"value": _SequenceRow.value + 1}
            )
            .returning(_SequenceRow.value)
        )
        with self._write() as session:
            return int(session.execute(statement).scalar_one())

    # -- high-water marks --

    def advance_mark(self, target: str, stream: str, seq: int) -> bool:
        """Raise the (target, stream) mark to SEQ if SEQ is above it; True when it moved.

        One statement, `INSERT ... ON CONFLICT DO UPDATE ... WHERE excluded.seq > seq
        RETURNING seq`: it answers a row only when it wrote one, so two processes asking at
        once cannot both be told yes for the same or an older seq (SQLite serialises writers,
        PostgreSQL locks the row to the end of the transaction)."""
        statement = advance_statement(self._dialect, target, stream, seq, _now())
        with self._write() as session:
            return session.execute(statement).scalar_one_or_none() is not None

    def mark(self, target: str, stream: str) -> int:
        """The (target, stream) high-water mark; 0 when nothing was recorded yet."""
        query = select(_MarkRow.seq).where(_MarkRow.target == target, _MarkRow.stream == stream)
        with self._read() as session:
            return int(session.scalars(query).one_or_none() or 0)

    def _insert(self, table: type[RegistryBase]) -> Any:
        return _dialect_insert(self._dialect, table)


def _dialect_insert(dialect: str, table: type[RegistryBase]) -> Any:
    """The dialect's INSERT (both have ON CONFLICT ... RETURNING)."""
    insert = sqlite_dialect.insert if dialect == "sqlite" else pg_dialect.insert
    return insert(table)


def advance_statement(dialect: str, target: str, stream: str, seq: int, at: datetime) -> Any:
    """`advance_mark`'s one statement (module level so a test can render it for PostgreSQL)."""
    insert = _dialect_insert(dialect, _MarkRow).values(
        target=target, stream=stream, seq=seq, updated_at=at
    )
    return insert.on_conflict_do_update(
        index_elements=["target", "stream"],
        set_={"seq": insert.excluded.seq, "updated_at": insert.excluded.updated_at},
        where=_MarkRow.seq < insert.excluded.seq,
    ).returning(_MarkRow.seq)
