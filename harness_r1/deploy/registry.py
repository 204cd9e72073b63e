"""The overlay registry: every patch the daemon has released or considered, and its history.

Why a database and not files: the daemon, the CLI (`overlay list/show/diff`, `rollback --to`,
`pin`) and the live guard all read and move the same overlays, possibly from different processes
at the same time. A state change must be atomic with its audit event, and activating an overlay
must retire the target's previous one in the same transaction, or two processes could each leave
an "active" overlay behind. The database also enforces that last rule itself (a partial unique
index: at most one active overlay per target).

The tables live in the same database as the daemon's state store (SQLite by default, PostgreSQL
in larger deployments), so they hang off their own `RegistryBase` and carry an `overlay_` prefix;
only portable column types are used (JSON is stored as Text).

SQLite specifics, set on every new connection: WAL (readers do not block the writer),
`busy_timeout` (a second writer waits instead of failing at once), foreign keys on. Write
transactions start with `BEGIN IMMEDIATE`: they take the write lock up front, so a transaction
that reads a state and then writes it cannot lose a race to another process half-way (a
deferred transaction would fail with SQLITE_BUSY on its first write, which busy_timeout cannot
retry). On PostgreSQL the same reads take row locks (`SELECT ... FOR UPDATE`).

Races between writers (the daemon's control follower, an operator's CLI, the live guard):
several registry calls that must hold together (roll X back AND activate Y; record a command
only if no newer one was recorded) run in one `transaction()`; moves that another writer may
already have made use `transition_if`, which answers None instead of raising. The `overlay_marks`
table holds high-water marks per (target, stream), advanced atomically by `advance_mark`: the
control follower's mirror of an agent's seq high-water mark, and the highest control seq whose
effect the registry holds (see `deploy/publisher.py` `record_control`).

Why one module: the overlay registry's state machine and its audit trail are
written in the same transactions; apart, a transition could land without its event.
"""

from __future__ import annotations

import builtins
import difflib
import hashlib
import json
import threading
import uuid
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    select,
    text,
)
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from harness_r1.contracts import HookName, Patch
from harness_r1.deploy.sqlbase import (
    DEFAULT_BUSY_TIMEOUT_MS,
    SqlDatabase,
    UtcDateTime,
)

DEFAULT_URL = "sqlite:///harness_r1.db"
#: A chain walk longer than this is a cycle or a corrupt row (composition budgets bound real
#: chains far below it).
MAX_CHAIN = 1000


class OverlayState(StrEnum):
    """Where an overlay is in its life: proposed, under canary, serving, or out of service."""

    CANDIDATE = "candidate"
    CANARY = "canary"
    ACTIVE = "active"
    RETIRED = "retired"
    ROLLED_BACK = "rolled_back"


#: Allowed moves. retired/rolled_back -> active exists for an operator's `rollback --to` or
#: `pin`, which may bring back an older overlay; nothing ever returns to candidate or canary.
TRANSITIONS: dict[OverlayState, frozenset[OverlayState]] = {
    OverlayState.CANDIDATE: frozenset({OverlayState.CANARY, OverlayState.RETIRED}),
    OverlayState.CANARY: frozenset(
        {OverlayState.ACTIVE, OverlayState.ROLLED_BACK, OverlayState.RETIRED}
    ),
    OverlayState.ACTIVE: frozenset({OverlayState.RETIRED, OverlayState.ROLLED_BACK}),
    OverlayState.RETIRED: frozenset({OverlayState.ACTIVE}),
    OverlayState.ROLLED_BACK: frozenset({OverlayState.ACTIVE}),
}


class RegistryError(Exception):
    """Base of the registry's own errors."""


class UnknownOverlay(RegistryError, LookupError):
    """No overlay with that id in this registry."""


class InvalidTransition(RegistryError, ValueError):
    """A state change the lifecycle does not allow."""


def check_transition(current: OverlayState, to_state: OverlayState) -> None:
    """Raise `InvalidTransition` unless `current -> to_state` is an allowed move."""
    allowed = TRANSITIONS[current]
    if to_state not in allowed:
        names = ", ".join(sorted(str(s) for s in allowed))
        raise InvalidTransition(
            f"cannot move an overlay from {current} to {to_state}; from {current} it may go to: "
            f"{names}"
        )


def _state(value: OverlayState | str) -> OverlayState:
    try:
        return OverlayState(value)
    except ValueError as err:
        known = ", ".join(str(s) for s in OverlayState)
        raise InvalidTransition(f"unknown overlay state {value!r}; known: {known}") from err


@dataclass(frozen=True)
class OverlayRecord:
    """One overlay as stored: the patch (parsed back into the contract) and where it stands."""

    overlay_id: str
    target: str
    env: str
    patch: Patch
    patch_sha256: str
    state: OverlayState
    packet_id: str | None
    group_id: str | None
    parent_overlay_id: str | None
    evidence: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class OverlayLink:
    """One link of an overlay chain: the patch an overlay added onto its parent (what its
    engineer wrote) and, per hook, the links whose code runs in the composed overlay."""

    overlay_id: str
    patch: Patch
    contributors: dict[str, builtins.list[int]]  # per hook: 1-based positions in the chain


@dataclass(frozen=True)
class OverlayEvent:
    """One audit line. `from_state` is None for the creation; equal to `to_state` for an action
    that changed nothing (a pin, a note)."""

    overlay_id: str
    from_state: OverlayState | None
    to_state: OverlayState
    actor: str
    reason: str
    at: datetime
    evidence: dict[str, Any]


@dataclass(frozen=True)
class PoolHold:
    """A target's hold as its agents keep it (`deploy/client.py`): `paused` (the current
    overlay stays, new releases wait) or `pinned` (the pinned overlay, `base` for none, stays),
    until `overlay resume`. Recorded from the control commands, so `overlay list/show` can say
    why a release stays parked."""

    target: str
    kind: str  # paused | pinned
    overlay_id: str | None  # pinned: the overlay held (base: none)
    actor: str
    reason: str
    seq: int
    at: datetime

    def describe(self) -> str:
        what = "paused" if self.kind == "paused" else f"pinned to {self.overlay_id or 'base'}"
        return (
            f"pool {self.target} is {what} since {self.at:%Y-%m-%d %H:%M:%S} UTC by "
            f"{self.actor} (control seq {self.seq}): new releases wait on agents until "
            "`overlay resume`"
        )


# --- schema ---------------------------------------------------------------------------------


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


# --- the registry ---------------------------------------------------------------------------


class OverlayRegistry(SqlDatabase):
    """Overlays, their lifecycle and audit trail, and per-target sequence counters.

    Safe to use from several threads and several processes on the same database; every method
    runs in its own short transaction.
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

    def __enter__(self) -> OverlayRegistry:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

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

    def _row(self, session: Session, overlay_id: str, *, lock: bool = False) -> _OverlayRow:
        query = select(_OverlayRow).where(_OverlayRow.overlay_id == overlay_id)
        if lock:
            # populate_existing: inside a transaction() the row may already sit in the session
            # from an earlier read; the locked read must refresh it (PostgreSQL: another
            # transaction may have committed a change in between).
            query = query.with_for_update().execution_options(populate_existing=True)
        row = session.scalars(query).one_or_none()
        if row is None:
            raise UnknownOverlay(f"no overlay {overlay_id!r} in the registry at {self.url}")
        return row

    # -- overlays --

    def add(
        self,
        patch: Patch,
        target: str,
        *,
        packet_id: str | None = None,
        group_id: str | None = None,
        parent_overlay_id: str | None = None,
        evidence: Mapping[str, Any] | None = None,
        actor: str = "daemon",
        link: Patch | None = None,
        contributors: Mapping[str, Collection[int]] | None = None,
    ) -> OverlayRecord:
        """Store a new candidate overlay for `target` and record its creation. `link` (with
        the composition's `contributors`) when `patch` is `link` composed onto the parent's
        chain; without it the overlay is a root."""
        if not target:
            raise RegistryError("an overlay needs a target (the agent pool it is for)")
        patch_json = patch.to_json_bytes().decode("utf-8")
        now = _now()
        overlay_id = f"ov-{uuid.uuid4().hex[:12]}"
        with self._write() as session:
            if parent_overlay_id is not None:
                self._row(session, parent_overlay_id)
            row = _OverlayRow(
                overlay_id=overlay_id,
                target=target,
                env=patch.env,
                patch_json=patch_json,
                patch_sha256=hashlib.sha256(patch_json.encode("utf-8")).hexdigest(),
                state=str(OverlayState.CANDIDATE),
                packet_id=packet_id,
                group_id=group_id,
                parent_overlay_id=parent_overlay_id,
                evidence_json=_dump_evidence(evidence),
                created_at=now,
                updated_at=now,
            )
            session.add(row)
            session.flush()  # the event's foreign key needs the overlay row first
            if link is not None:
                session.add(
                    _LinkRow(
                        overlay_id=overlay_id,
                        link_json=link.to_json_bytes().decode("utf-8"),
                        contributors_json=json.dumps(
                            {str(k): list(v) for k, v in (contributors or {}).items()}
                        ),
                    )
                )
            session.add(
                _event_row(
                    overlay_id,
                    None,
                    OverlayState.CANDIDATE,
                    actor=actor,
                    reason="created",
                    at=now,
                    evidence=evidence,
                )
            )
            return _to_record(row)

    def get(self, overlay_id: str) -> OverlayRecord:
        with self._read() as session:
            return _to_record(self._row(session, overlay_id))

    def list(
        self, target: str | None = None, state: OverlayState | str | None = None
    ) -> builtins.list[OverlayRecord]:
        """Overlays, newest first, optionally of one target and/or in one state."""
        query = select(_OverlayRow)
        if target is not None:
            query = query.where(_OverlayRow.target == target)
        if state is not None:
            query = query.where(_OverlayRow.state == str(_state(state)))
        query = query.order_by(_OverlayRow.created_at.desc(), _OverlayRow.row_id.desc())
        with self._read() as session:
            return [_to_record(row) for row in session.scalars(query)]

    def link(self, overlay_id: str) -> OverlayLink | None:
        """The overlay's own link, None for a root."""
        with self._read() as session:
            self._row(session, overlay_id)
            row = session.get(_LinkRow, overlay_id)
            if row is None:
                return None
            return OverlayLink(
                overlay_id,
                Patch.model_validate_json(row.link_json),
                json.loads(row.contributors_json),
            )

    def chain(self, overlay_id: str) -> builtins.list[tuple[str, Patch]]:
        """(overlay id, link patch) from the root to `overlay_id`: what composes to its patch.
        A root contributes its whole patch. One read transaction for the whole walk."""
        chain: builtins.list[tuple[str, Patch]] = []
        with self._read() as session:
            row = self._row(session, overlay_id)
            while True:
                link = session.get(_LinkRow, row.overlay_id)
                if link is None:
                    chain.append((row.overlay_id, _to_record(row).patch))
                    break
                chain.append((row.overlay_id, Patch.model_validate_json(link.link_json)))
                if row.parent_overlay_id is None:
                    break
                if len(chain) > MAX_CHAIN:
                    raise RegistryError(f"overlay {overlay_id}: chain longer than {MAX_CHAIN}")
                row = self._row(session, row.parent_overlay_id)
        return chain[::-1]

    def active(self, target: str) -> OverlayRecord | None:
        """The overlay serving `target` now, or None when it runs the base harness."""
        query = select(_OverlayRow).where(
            _OverlayRow.target == target, _OverlayRow.state == str(OverlayState.ACTIVE)
        )
        with self._read() as session:
            row = session.scalars(query).one_or_none()
            return None if row is None else _to_record(row)

    def transition(
        self,
        overlay_id: str,
        to_state: OverlayState | str,
        *,
        actor: str,
        reason: str,
        evidence: Mapping[str, Any] | None = None,
    ) -> OverlayRecord:
        """Move an overlay to `to_state`, validated, with its event, in one transaction.

        Activating retires the target's previous active overlay in the same transaction (its
        event names the same actor and the overlay that superseded it). `evidence` is kept on
        the event and shallow-merged into the overlay's evidence (later keys win).
        """
        target_state = _state(to_state)
        with self._write() as session:
            row = self._row(session, overlay_id, lock=True)
            check_transition(OverlayState(row.state), target_state)
            return self._move(session, row, target_state, actor, reason, evidence)

    def transition_if(
        self,
        overlay_id: str,
        to_state: OverlayState | str,
        *,
        expect: Collection[OverlayState] | None = None,
        actor: str,
        reason: str,
        evidence: Mapping[str, Any] | None = None,
    ) -> OverlayRecord | None:
        """`transition`, unless another writer got there first: None (nothing written) when the
        overlay is already in `to_state`, is not in one of the `expect`ed states, or may not
        move to `to_state` from where it is now. Decided under the row lock, in one transaction.

        Why: the daemon's control follower and an operator's CLI record the same command, the
        live guard and an operator act on the same overlay; whoever is second must find the
        work done, not crash with InvalidTransition (once after a command had been published).
        Unknown ids still raise UnknownOverlay: that is a caller's mistake, not a race."""
        target_state = _state(to_state)
        with self._write() as session:
            row = self._row(session, overlay_id, lock=True)
            current = OverlayState(row.state)
            if current is target_state or target_state not in TRANSITIONS[current]:
                return None
            if expect is not None and current not in expect:
                return None
            return self._move(session, row, target_state, actor, reason, evidence)

    def _move(
        self,
        session: Session,
        row: _OverlayRow,
        target_state: OverlayState,
        actor: str,
        reason: str,
        evidence: Mapping[str, Any] | None,
    ) -> OverlayRecord:
        """The checked move itself (the caller holds the row lock)."""
        now = _now()
        current = OverlayState(row.state)
        if target_state is OverlayState.ACTIVE:
            self._retire_active(session, row, actor=actor, reason=reason, at=now)
        row.state = str(target_state)
        row.updated_at = now
        if evidence:
            _merge_evidence(row, evidence)
        session.add(
            _event_row(
                row.overlay_id,
                current,
                target_state,
                actor=actor,
                reason=reason,
                at=now,
                evidence=evidence,
            )
        )
        return _to_record(row)

    def _retire_active(
        self, session: Session, incoming: _OverlayRow, *, actor: str, reason: str, at: datetime
    ) -> None:
        query = (
            select(_OverlayRow)
            .where(
                _OverlayRow.target == incoming.target,
                _OverlayRow.state == str(OverlayState.ACTIVE),
                _OverlayRow.overlay_id != incoming.overlay_id,
            )
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        for previous in session.scalars(query):
            previous.state = str(OverlayState.RETIRED)
            previous.updated_at = at
            session.add(
                _event_row(
                    previous.overlay_id,
                    OverlayState.ACTIVE,
                    OverlayState.RETIRED,
                    actor=actor,
                    reason=f"superseded by {incoming.overlay_id}: {reason}",
                    at=at,
                    evidence={"superseded_by": incoming.overlay_id},
                )
            )
        # Flush now: the one-active-per-target index must see the old overlay retired before
        # the new one becomes active (the ORM could otherwise order the two UPDATEs either way).
        session.flush()

    def superseded(self, overlay_id: str) -> str | None:
        """The overlay OVERLAY_ID superseded the last time it became active (the one that was
        active before it), or None. What an agent rolls back to when OVERLAY_ID is taken back
        without `--to` (its history: the overlay it ran before)."""
        needle = json.dumps({"superseded_by": overlay_id})[1:-1]  # '"superseded_by": "ov-.."'
        query = (
            select(_EventRow)
            .where(
                _EventRow.from_state == str(OverlayState.ACTIVE),
                _EventRow.to_state == str(OverlayState.RETIRED),
                _EventRow.evidence_json.contains(needle, autoescape=True),
            )
            .order_by(_EventRow.event_id.desc())
        )
        with self._read() as session:
            for row in session.scalars(query):
                if _load_evidence(row.evidence_json).get("superseded_by") == overlay_id:
                    return row.overlay_id
        return None

    # -- audit --

    def events(self, overlay_id: str) -> builtins.list[OverlayEvent]:
        """The overlay's audit trail, oldest first."""
        query = (
            select(_EventRow)
            .where(_EventRow.overlay_id == overlay_id)
            .order_by(_EventRow.event_id.asc())
        )
        with self._read() as session:
            self._row(session, overlay_id)
            return [_to_event(row) for row in session.scalars(query)]

    def record_event(
        self,
        overlay_id: str,
        *,
        actor: str,
        reason: str,
        evidence: Mapping[str, Any] | None = None,
        merge_evidence: bool = False,
    ) -> OverlayEvent:
        """Log an action that changes no state (a pin, an operator's note): from == to.
        `merge_evidence` also merges `evidence` into the overlay's own (a canary widened to a
        new fraction: what re-announcements must publish)."""
        now = _now()
        with self._write() as session:
            overlay = self._row(session, overlay_id, lock=True)
            current = OverlayState(overlay.state)
            if merge_evidence and evidence:
                _merge_evidence(overlay, evidence)
                overlay.updated_at = now
            row = _event_row(
                overlay_id, current, current, actor=actor, reason=reason, at=now, evidence=evidence
            )
            session.add(row)
            session.flush()
            return _to_event(row)

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


# --- views ----------------------------------------------------------------------------------


def diff_overlays(a: OverlayRecord, b: OverlayRecord) -> str:
    """Unified diff of two overlays' hook sources, hook by hook ("" when they are the same).

    A hook present on one side only is diffed against nothing, so it shows as wholly added or
    removed.
    """
    lines: builtins.list[str] = [f"# overlay {a.overlay_id} -> {b.overlay_id}"]
    changed = False
    for hook in HookName:
        before, after = a.patch.code_for(hook), b.patch.code_for(hook)
        if before == after:
            continue
        changed = True
        lines.extend(
            difflib.unified_diff(
                (before or "").splitlines(),
                (after or "").splitlines(),
                fromfile=f"{a.overlay_id}/{hook}" + ("" if before is not None else " (absent)"),
                tofile=f"{b.overlay_id}/{hook}" + ("" if after is not None else " (absent)"),
                lineterm="",
            )
        )
    return "\n".join(lines) + "\n" if changed else ""


def _event_view(ev: OverlayEvent) -> dict[str, Any]:
    return {
        "at": ev.at.isoformat(),
        "from_state": None if ev.from_state is None else str(ev.from_state),
        "to_state": str(ev.to_state),
        "actor": ev.actor,
        "reason": ev.reason,
        "evidence": ev.evidence,
    }


def render_record(
    record: OverlayRecord,
    events: builtins.list[OverlayEvent] | None = None,
    link: OverlayLink | None = None,
    chain: builtins.list[str] | None = None,
) -> dict[str, Any]:
    """A JSON-ready view of one overlay and its history, for `overlay show`: the composed
    hooks the fleet runs, which link contributed each, and its own link."""
    ids = chain or [record.overlay_id]
    positions = (
        link.contributors
        if link is not None
        else {str(h.hook): [len(ids)] for h in record.patch.hooks}
    )
    composition: dict[str, Any] = {
        "chain": ids,
        "contributors": {
            hook: [ids[p - 1] if 0 < p <= len(ids) else f"#{p}" for p in found]
            for hook, found in positions.items()
        },
        "link": None if link is None else link.patch.model_dump(mode="json"),
    }
    return {
        "overlay_id": record.overlay_id,
        "target": record.target,
        "env": record.env,
        "state": str(record.state),
        "patch_sha256": record.patch_sha256,
        "packet_id": record.packet_id,
        "group_id": record.group_id,
        "parent_overlay_id": record.parent_overlay_id,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
        "evidence": record.evidence,
        "patch": record.patch.model_dump(mode="json"),
        "composition": composition,
        "events": [_event_view(ev) for ev in events or []],
    }


def _merge_evidence(row: _OverlayRow, evidence: Mapping[str, Any]) -> None:
    """Shallow-merge `evidence` into the overlay's own (later keys win)."""
    row.evidence_json = _dump_evidence(_load_evidence(row.evidence_json) | dict(evidence))
