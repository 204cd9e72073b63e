"""What the loop produced (packets, canary reports and candidates, GRPO groups) and retention."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import (
    delete,
    func,
    select,
    update,
)

from harness_r1.contracts import CanaryReport
from harness_r1.daemon.store.core import (
    StoreCore,
)
from harness_r1.daemon.store.records import (
    _FINISHED_STATES,
    _OPEN_STATES,
    CandidateRow,
    GroupRow,
    StoreError,
    _now,
)
from harness_r1.daemon.store.rows import (
    _aware,
    _chunks,
    _dump_json,
    _to_candidate,
    _to_group,
)
from harness_r1.daemon.store.schema import (
    _BatchItemRow,
    _BatchRow,
    _BufferRow,
    _CanaryReportRow,
    _CandidateRowModel,
    _DeadLetterRow,
    _GroupRowModel,
    _PacketRow,
    _TrajectoryRow,
)


class ResultsMixin(StoreCore):
    """What the loop produced (packets, canary reports and candidates, GRPO groups), and
    retention."""

    def save_packet(self, batch_id: str, packet_id: str, packet_json: str) -> None:
        """Keep the batch's failure packet. Idempotent: the extractor is deterministic, so a
        re-run of the batch saves the same packet again. Packets are content-addressed (ids
        masked), so another batch with failures that read the same gives the same packet: it
        is kept once, under the first batch (nothing reads it back per batch; results and
        groups carry their own batch). A different packet under the same id is refused
        (something changed that should not have)."""
        with self._write() as session:
            existing = session.get(_PacketRow, packet_id, with_for_update=True)
            if existing is not None:
                if existing.packet_json == packet_json:
                    return
                raise StoreError(
                    f"packet {packet_id} is already stored with other content "
                    f"(batch {existing.batch_id})"
                )
            self._batch_row(session, batch_id)
            session.add(
                _PacketRow(
                    packet_id=packet_id,
                    batch_id=batch_id,
                    packet_json=packet_json,
                    created_at=_now(),
                )
            )

    def save_canary(
        self,
        batch_id: str,
        packet_id: str,
        report_json: str,
        candidates: Sequence[CandidateRow],
    ) -> None:
        """Keep the batch's canary report and its candidates, replacing an earlier run's (a
        batch re-claimed after a crash is canaried again; the last complete run stands)."""
        ids = [c.candidate_id for c in candidates]
        if len(set(ids)) != len(ids):
            raise StoreError(f"candidate ids repeat within batch {batch_id}: {ids}")
        with self._write() as session:
            self._batch_row(session, batch_id, lock=True)
            session.execute(
                delete(_CandidateRowModel).where(_CandidateRowModel.batch_id == batch_id)
            )
            session.execute(delete(_CanaryReportRow).where(_CanaryReportRow.batch_id == batch_id))
            session.add(
                _CanaryReportRow(
                    batch_id=batch_id,
                    packet_id=packet_id,
                    report_json=report_json,
                    created_at=_now(),
                )
            )
            session.flush()
            session.add_all(
                _CandidateRowModel(
                    batch_id=batch_id,
                    position=i,
                    candidate_id=c.candidate_id,
                    completion=c.completion,
                    patch_json=c.patch_json,
                    status=c.status,
                    reward=c.reward,
                    delta_success=c.delta_success,
                    gate_verdict=c.gate_verdict,
                    overlay_id=c.overlay_id,
                )
                for i, c in enumerate(candidates)
            )

    def canary_results(self, batch_id: str) -> list[CandidateRow]:
        """The batch's candidates in the order they were saved ([] before a canary ran)."""
        query = (
            select(_CandidateRowModel)
            .where(_CandidateRowModel.batch_id == batch_id)
            .order_by(_CandidateRowModel.position)
        )
        with self._read() as session:
            return [_to_candidate(row) for row in session.scalars(query)]

    def canary_report(self, batch_id: str) -> CanaryReport | None:
        """The batch's stored canary report (the batch run's), or None before a canary ran."""
        query = select(_CanaryReportRow.report_json).where(_CanaryReportRow.batch_id == batch_id)
        with self._read() as session:
            text = session.execute(query).scalar_one_or_none()
        if text is None:
            return None
        return CanaryReport.model_validate(json.loads(text)["batch"])

    def count_canary_results(self) -> int:
        """Candidate rows over all batches (one per canaried engineer candidate)."""
        query = select(func.count()).select_from(_CandidateRowModel)
        with self._read() as session:
            return int(session.execute(query).scalar_one())

    # -- GRPO groups --

    def save_group(
        self,
        group_id: str,
        packet_id: str,
        prompt: str,
        completions: Sequence[str],
        rewards: Sequence[float | None],
    ) -> bool:
        """Keep one GRPO group for the engineer's next update; True if it was new. Idempotent
        on `group_id`: a re-run batch does not enter the training data twice (the first
        stored group stands)."""
        if len(completions) != len(rewards):
            raise StoreError(
                f"group {group_id}: {len(completions)} completions but {len(rewards)} rewards"
            )
        statement = (
            self._insert(_GroupRowModel)
            .values(
                group_id=group_id,
                packet_id=packet_id,
                prompt=prompt,
                completions_json=_dump_json(list(completions), "completions"),
                rewards_json=_dump_json(
                    [None if r is None else float(r) for r in rewards], "rewards"
                ),
                created_at=_now(),
                trained_at=None,
                engineer_version=None,
            )
            .on_conflict_do_nothing(index_elements=["group_id"])
            .returning(_GroupRowModel.group_id)
        )
        with self._write() as session:
            return session.scalars(statement).first() is not None

    def untrained_groups(self, limit: int | None = None) -> list[GroupRow]:
        """Groups not yet used by an engineer update, oldest first."""
        query = (
            select(_GroupRowModel)
            .where(_GroupRowModel.trained_at.is_(None))
            .order_by(_GroupRowModel.row_id)
        )
        if limit is not None:
            query = query.limit(limit)
        with self._read() as session:
            return [_to_group(row) for row in session.scalars(query)]

    def mark_trained(self, group_ids: Iterable[str], engineer_version: str) -> int:
        """Record that `engineer_version` was trained on these groups; returns how many were
        newly marked (a group already trained keeps its first version)."""
        ids = sorted(set(group_ids))
        now = _now()
        marked = 0
        with self._write() as session:
            for chunk in _chunks(ids):
                marked += self._rowcount(
                    session,
                    update(_GroupRowModel)
                    .where(_GroupRowModel.group_id.in_(chunk), _GroupRowModel.trained_at.is_(None))
                    .values(trained_at=now, engineer_version=engineer_version),
                )
        return marked

    def count_groups(self, trained: bool | None = None) -> int:
        query = select(func.count()).select_from(_GroupRowModel)
        if trained is True:
            query = query.where(_GroupRowModel.trained_at.is_not(None))
        elif trained is False:
            query = query.where(_GroupRowModel.trained_at.is_(None))
        with self._read() as session:
            return int(session.execute(query).scalar_one())

    # -- retention --

    def purge(self, older_than: datetime) -> dict[str, int]:
        """Drop what the loop no longer needs, older than `older_than`; counts by table.

        Goes: trajectories consumed before the cutoff that are neither buffered nor members of
        a pending/running batch (their payloads are the bulk of the database), and batches
        finished before the cutoff with their members, packet and canary results, unless an
        untrained GRPO group still comes from their packet. Never touched: positions (losing
        one would re-read a partition from its start), groups, and anything still open.
        """
        cutoff = _aware(older_than, "older_than")
        untrained_from_packet = (
            select(_PacketRow.packet_id)
            .join(_GroupRowModel, _GroupRowModel.packet_id == _PacketRow.packet_id)
            .where(_PacketRow.batch_id == _BatchRow.batch_id, _GroupRowModel.trained_at.is_(None))
        )
        old_batches = select(_BatchRow.batch_id).where(
            _BatchRow.state.in_(_FINISHED_STATES),
            _BatchRow.finished_at < cutoff,
            ~untrained_from_packet.exists(),
        )
        open_members = (
            select(_BatchItemRow.trajectory_id)
            .join(_BatchRow, _BatchRow.batch_id == _BatchItemRow.batch_id)
            .where(_BatchRow.state.in_(_OPEN_STATES))
        )
        counts = {
            name: 0
            for name in (
                "daemon_dead_letters",
                "daemon_canary_candidates",
                "daemon_canary_reports",
                "daemon_packets",
                "daemon_batch_items",
                "daemon_batches",
                "daemon_trajectories",
            )
        }
        with self._write() as session:
            batch_ids = list(session.scalars(old_batches))
            for chunk in _chunks(batch_ids):
                # Children before parents: the foreign keys are enforced on both databases.
                for model in (
                    _CandidateRowModel,
                    _CanaryReportRow,
                    _PacketRow,
                    _BatchItemRow,
                    _BatchRow,
                ):
                    counts[model.__tablename__] += self._rowcount(
                        session, delete(model).where(model.batch_id.in_(chunk))
                    )
            counts["daemon_dead_letters"] = self._rowcount(
                session,
                delete(_DeadLetterRow).where(_DeadLetterRow.published_at < cutoff),
            )
            counts["daemon_trajectories"] = self._rowcount(
                session,
                delete(_TrajectoryRow).where(
                    _TrajectoryRow.consumed_at < cutoff,
                    _TrajectoryRow.trajectory_id.not_in(select(_BufferRow.trajectory_id)),
                    _TrajectoryRow.trajectory_id.not_in(open_members),
                ),
            )
        return counts
