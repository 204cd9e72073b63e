"""The overlay registry's tables: SQLAlchemy rows, and their conversion to and from records.

The tables live in the same database as the daemon's state store (SQLite by default, PostgreSQL
in larger deployments), so they hang off their own `RegistryBase` and carry an `overlay_`
prefix; only portable column types are used (JSON is stored as Text).

Why a module of its own: the storage layout (tables, indexes, how patches and evidence are
serialised, and checked on the way back) is shared by every registry module that reads or
writes rows, and changes apart from the operations on them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from harness_r1.contracts import Patch
from harness_r1.deploy.registry_records import (
    OverlayEvent,
    OverlayRecord,
    OverlayState,
    RegistryError,
)
from harness_r1.deploy.sqlbase import UtcDateTime


class RegistryBase(DeclarativeBase):
    """Metadata of the registry's tables only, so it can share a database with the daemon's
    state store without either creating or dropping the other's tables."""


class _OverlayRow(RegistryBase):
    __tablename__ = "overlay_overlays"
    __table_args__ = (
        # The invariant activation maintains, also enforced by the database itself.
        Index(
            "overlay_one_active_per_target",
            "target",
            unique=True,
            sqlite_where=text("state = 'active'"),
            postgresql_where=text("state = 'active'"),
        ),
    )

    # A surrogate key gives a stable insertion order ("newest first") even within one clock tick.
    row_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    overlay_id: Mapped[str] = mapped_column(String(32), unique=True)
    target: Mapped[str] = mapped_column(String(200), index=True)
    env: Mapped[str] = mapped_column(String(100))
    patch_json: Mapped[str] = mapped_column(Text)
    patch_sha256: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), index=True)
    packet_id: Mapped[str | None] = mapped_column(String(128))
    group_id: Mapped[str | None] = mapped_column(String(128))
    parent_overlay_id: Mapped[str | None] = mapped_column(
        String(32), ForeignKey("overlay_overlays.overlay_id")
    )
    evidence_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class _EventRow(RegistryBase):
    __tablename__ = "overlay_events"

    event_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    overlay_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("overlay_overlays.overlay_id"), index=True
    )
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    evidence_json: Mapped[str] = mapped_column(Text)


class _LinkRow(RegistryBase):
    """An overlay's own link. The overlay's patch is its parent's composed with this link
    (`sandbox/compose.py`); an overlay without a row is a root: its patch is its whole chain
    (every overlay from before composition, and hand-added ones). Its own table, so databases
    created before it gain it by `create_all`, without a migration of the overlays table."""

    __tablename__ = "overlay_links"

    overlay_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("overlay_overlays.overlay_id"), primary_key=True
    )
    link_json: Mapped[str] = mapped_column(Text)
    contributors_json: Mapped[str] = mapped_column(Text)


class _SequenceRow(RegistryBase):
    """Release/control sequence numbers: clients reject seq <= their high-water mark, so a
    number must never be handed out twice, whichever process asks."""

    __tablename__ = "overlay_sequences"

    target: Mapped[str] = mapped_column(String(200), primary_key=True)
    stream: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


class _MarkRow(RegistryBase):
    """High-water marks per (target, stream): the highest seq seen or applied. Why durable and
    in the registry's database: a restarted daemon must not accept again a control command it
    (or the fleet) already refused as old, and the mark must move in the same transaction as
    the registry change it guards."""

    __tablename__ = "overlay_marks"

    target: Mapped[str] = mapped_column(String(200), primary_key=True)
    stream: Mapped[str] = mapped_column(String(100), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class _HoldRow(RegistryBase):
    """A target's current hold (pause or pin), one row while it lasts: agents keep it in their
    own state; the registry records it so operators can see it (created by `create_all` in a
    database made before it)."""

    __tablename__ = "overlay_holds"

    target: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))
    overlay_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    actor: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(Text)
    seq: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(UtcDateTime())


# --- helpers --------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _dump_evidence(evidence: Mapping[str, Any] | None) -> str:
    """Evidence must be JSON; refuse it at write time rather than store something unreadable."""
    try:
        return json.dumps(dict(evidence or {}), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise RegistryError(f"evidence must be JSON-serialisable: {err}") from err


def _load_evidence(raw: str) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise RegistryError(f"stored evidence is not a JSON object: {raw[:80]!r}")
    return value


def _to_record(row: _OverlayRow) -> OverlayRecord:
    # Check the stored bytes, not a re-serialisation: a minor schema addition must not make
    # every old overlay look tampered with, but an edited row must never be signed and released.
    stored = hashlib.sha256(row.patch_json.encode("utf-8")).hexdigest()
    if stored != row.patch_sha256:
        raise RegistryError(
            f"overlay {row.overlay_id}: stored patch hashes to {stored}, "
            f"registry says {row.patch_sha256}; refusing to use it"
        )
    return OverlayRecord(
        overlay_id=row.overlay_id,
        target=row.target,
        env=row.env,
        patch=Patch.model_validate_json(row.patch_json),
        patch_sha256=row.patch_sha256,
        state=OverlayState(row.state),
        packet_id=row.packet_id,
        group_id=row.group_id,
        parent_overlay_id=row.parent_overlay_id,
        evidence=_load_evidence(row.evidence_json),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _to_event(row: _EventRow) -> OverlayEvent:
    return OverlayEvent(
        overlay_id=row.overlay_id,
        from_state=None if row.from_state is None else OverlayState(row.from_state),
        to_state=OverlayState(row.to_state),
        actor=row.actor,
        reason=row.reason,
        at=row.at,
        evidence=_load_evidence(row.evidence_json),
    )


def _event_row(
    overlay_id: str,
    from_state: OverlayState | None,
    to_state: OverlayState,
    *,
    actor: str,
    reason: str,
    at: datetime,
    evidence: Mapping[str, Any] | None,
) -> _EventRow:
    if not actor:
        raise RegistryError("every registry event needs an actor (operator name, daemon, ...)")
    return _EventRow(
        overlay_id=overlay_id,
        from_state=None if from_state is None else str(from_state),
        to_state=str(to_state),
        actor=actor,
        reason=reason,
        at=at,
        evidence_json=_dump_evidence(evidence),
    )


def _merge_evidence(row: _OverlayRow, evidence: Mapping[str, Any]) -> None:
    """Shallow-merge `evidence` into the overlay's own (later keys win)."""
    row.evidence_json = _dump_evidence(_load_evidence(row.evidence_json) | dict(evidence))
