"""The overlay registry: every patch the daemon has released or considered, and its history.

Why a database and not files: the daemon, the CLI (`overlay list/show/diff`, `rollback --to`,
`pin`) and the live guard all read and move the same overlays, possibly from different processes
at the same time. A state change must be atomic with its audit event, and activating an overlay
must retire the target's previous one in the same transaction, or two processes could each leave
an "active" overlay behind. The database also enforces that last rule itself (a partial unique
index: at most one active overlay per target).

Races between writers (the daemon's control follower, an operator's CLI, the live guard):
several registry calls that must hold together run in one `transaction()`
(`registry_db.py`); moves that another writer may already have made use `transition_if`, which
answers None instead of raising.

The registry's other parts: `registry_records.py` (states, records, errors),
`registry_schema.py` (tables), `registry_db.py` (connections and the shared transaction),
`registry_targets.py` (sequence numbers, marks, holds), `overlay_views.py` (diffs and the
`overlay show` view). `OverlayRegistry` here adds the overlays themselves: their lineage,
lifecycle moves and audit trail.

Why one module: the overlay registry's state machine and its audit trail are
written in the same transactions; apart, a transition could land without its event.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import uuid
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from harness_r1.contracts import Patch
from harness_r1.deploy.registry_records import (
    TRANSITIONS,
    OverlayEvent,
    OverlayLink,
    OverlayRecord,
    OverlayState,
    RegistryError,
    UnknownOverlay,
    _state,
    check_transition,
)
from harness_r1.deploy.registry_schema import (
    _dump_evidence,
    _event_row,
    _EventRow,
    _LinkRow,
    _load_evidence,
    _merge_evidence,
    _now,
    _OverlayRow,
    _to_event,
    _to_record,
)
from harness_r1.deploy.registry_targets import TargetLedger

#: A chain walk longer than this is a cycle or a corrupt row (composition budgets bound real
#: chains far below it).
MAX_CHAIN = 1000


class OverlayRegistry(TargetLedger):
    """Overlays, their lifecycle and audit trail, and per-target sequence counters.

    Safe to use from several threads and several processes on the same database; every method
    runs in its own short transaction.
    """

    def __enter__(self) -> OverlayRegistry:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

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
