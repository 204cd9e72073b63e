"""Stored trajectories and the failure-batch queue: buffers sealed into batches, claimed
under leases by canary workers, finished or released."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from sqlalchemy import (
    case,
    delete,
    exists,
    func,
    or_,
    select,
)

from harness_r1.contracts import OriginCounts, Trajectory
from harness_r1.daemon.store.core import (
    StoreCore,
)
from harness_r1.daemon.store.records import (
    _FINISHED_STATES,
    FAILED,
    PENDING,
    RUNNING,
    Batch,
    BatchKey,
    BufferInfo,
    LeaseLost,
    StoreError,
    UnknownTrajectory,
    _now,
)
from harness_r1.daemon.store.rows import (
    _aware,
    _chunks,
    _key,
    _lease,
    _new_batch_id,
)
from harness_r1.daemon.store.schema import (
    _BatchItemRow,
    _BatchRow,
    _BufferRow,
    _TrajectoryRow,
)


class BatchQueueMixin(StoreCore):
    """Stored trajectories and the failure-batch queue: buffers sealed into batches, claimed
    under leases by canary workers, finished or released."""

    def trajectory_count(self, env: str | None = None) -> int:
        query = select(func.count()).select_from(_TrajectoryRow)
        if env is not None:
            query = query.where(_TrajectoryRow.env == env)
        with self._read() as session:
            return int(session.execute(query).scalar_one())

    def agent_ids(self, limit: int = 10_000) -> list[str]:
        """The distinct agents whose trajectories are retained (the fleet this daemon serves, as
        far as it knows it), sorted; at most `limit`."""
        query = (
            select(_TrajectoryRow.agent_id)
            .distinct()
            .order_by(_TrajectoryRow.agent_id)
            .limit(limit)
        )
        with self._read() as session:
            return [str(a) for a in session.execute(query).scalars()]

    def has_trajectory(self, trajectory_id: str) -> bool:
        query = select(exists().where(_TrajectoryRow.trajectory_id == trajectory_id))
        with self._read() as session:
            return bool(session.execute(query).scalar_one())

    def load_trajectory_payloads(self, ids: Sequence[str]) -> list[bytes]:
        """The stored bytes of `ids`, in that order; `UnknownTrajectory` if any is missing (a
        batch's members are kept until it finishes, so a gap is a bug, not a normal case)."""
        wanted = list(ids)
        found: dict[str, bytes] = {}
        with self._read() as session:
            for chunk in _chunks(sorted(set(wanted))):
                query = select(_TrajectoryRow.trajectory_id, _TrajectoryRow.payload).where(
                    _TrajectoryRow.trajectory_id.in_(chunk)
                )
                found.update((tid, bytes(payload)) for tid, payload in session.execute(query))
        missing = [tid for tid in wanted if tid not in found]
        if missing:
            raise UnknownTrajectory(
                f"{len(missing)} trajectories not in the store at {self.url}: {missing[:5]}"
            )
        return [found[tid] for tid in wanted]

    def success_counts(
        self,
        harness_versions: Sequence[str],
        since: datetime | None = None,
        *,
        env: str | None = None,
        target: str | None = None,
    ) -> dict[str, tuple[int, int]]:
        """(episodes, successes) per harness version consumed at or after `since`, (0, 0) for
        a version without episodes: the live guard's overlay-vs-control numbers. `env` and
        `target` narrow the count (a "base" control otherwise spans every pool)."""
        versions = list(dict.fromkeys(harness_versions))
        counts = {version: (0, 0) for version in versions}
        if not versions:
            return counts
        query = (
            select(
                _TrajectoryRow.harness_version,
                func.count(),
                func.sum(case((_TrajectoryRow.success, 1), else_=0)),
            )
            .where(_TrajectoryRow.harness_version.in_(versions))
            .group_by(_TrajectoryRow.harness_version)
        )
        if since is not None:
            query = query.where(_TrajectoryRow.consumed_at >= _aware(since, "since"))
        if env is not None:
            query = query.where(_TrajectoryRow.env == env)
        if target is not None:
            query = query.where(_TrajectoryRow.target == target)
        with self._read() as session:
            for version, episodes, successes in session.execute(query):
                counts[version] = (int(episodes), int(successes or 0))
        return counts

    def origin_counts(
        self, harness_versions: Sequence[str], since: datetime | None = None
    ) -> dict[str, OriginCounts]:
        """Steps by who decided the action, per harness version consumed at or after `since`:
        the live guard's arms' forced share. Read from the stored payloads (no column holds
        it), so it is asked once per guard verdict, not on every look."""
        versions = list(dict.fromkeys(harness_versions))
        counts = {version: OriginCounts() for version in versions}
        if not versions:
            return counts
        query = select(_TrajectoryRow.harness_version, _TrajectoryRow.payload).where(
            _TrajectoryRow.harness_version.in_(versions)
        )
        if since is not None:
            query = query.where(_TrajectoryRow.consumed_at >= _aware(since, "since"))
        with self._read() as session:
            for version, payload in session.execute(query):
                origins = Trajectory.from_json_bytes(payload).origins
                counts[version] = counts[version] + origins
        return counts

    # -- failure batches --

    def open_buffers(self) -> list[BufferInfo]:
        """Every non-empty failure buffer, oldest first."""
        oldest = func.min(_BufferRow.buffered_at)
        query = (
            select(
                _BufferRow.env,
                _BufferRow.target,
                _BufferRow.harness_version,
                func.count(),
                oldest,
            )
            .group_by(_BufferRow.env, _BufferRow.target, _BufferRow.harness_version)
            .order_by(oldest, _BufferRow.env, _BufferRow.target, _BufferRow.harness_version)
        )
        with self._read() as session:
            return [
                BufferInfo(BatchKey(env, target, hv), int(size), at)
                for env, target, hv, size, at in session.execute(query)
            ]

    def seal_batch(self, key: BatchKey, limit: int) -> str | None:
        """Move up to `limit` buffered failures of `key` (oldest first) into a new pending
        batch, in one transaction; the batch id, or None when the buffer was empty."""
        if limit < 1:
            raise ValueError(f"a batch holds at least one trajectory; limit={limit}")
        now = _now()
        query = (
            select(_BufferRow)
            .where(
                _BufferRow.env == key.env,
                _BufferRow.target == key.target,
                _BufferRow.harness_version == key.harness_version,
            )
            .order_by(_BufferRow.row_id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        with self._write() as session:
            rows = list(session.scalars(query))
            if not rows:
                return None
            batch_id = _new_batch_id()
            session.add(
                _BatchRow(
                    batch_id=batch_id,
                    env=key.env,
                    target=key.target,
                    harness_version=key.harness_version,
                    state=PENDING,
                    worker=None,
                    lease_expires_at=None,
                    attempts=0,
                    detail="",
                    created_at=now,
                    updated_at=now,
                    finished_at=None,
                )
            )
            session.flush()  # the items' foreign key needs the batch row first
            session.add_all(
                _BatchItemRow(batch_id=batch_id, position=i, trajectory_id=row.trajectory_id)
                for i, row in enumerate(rows)
            )
            for chunk in _chunks([row.row_id for row in rows]):
                session.execute(delete(_BufferRow).where(_BufferRow.row_id.in_(chunk)))
            return batch_id

    def claim_batch(
        self, worker: str, lease_s: float, *, max_attempts: int | None = None
    ) -> Batch | None:
        """Take the oldest pending batch, or a running one whose lease expired (its worker
        died), for `worker` until now + `lease_s`; None when there is none.

        On PostgreSQL the candidate row is read `FOR UPDATE SKIP LOCKED`, so workers claiming at
        once each get a different batch instead of waiting on the same row; on SQLite the
        `BEGIN IMMEDIATE` write lock serialises them. With `max_attempts`, a batch already
        claimed that many times (a crash loop: each claim died without finishing) is marked
        failed instead of being handed out again.
        """
        if not worker:
            raise StoreError("a claim needs a worker name")
        lease = _lease(lease_s)
        now = _now()
        query = (
            select(_BatchRow)
            .where(
                or_(
                    _BatchRow.state == PENDING,
                    (_BatchRow.state == RUNNING) & (_BatchRow.lease_expires_at < now),
                )
            )
            .order_by(_BatchRow.row_id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        with self._write() as session:
            while True:
                row = session.scalars(query).one_or_none()
                if row is None:
                    return None
                if max_attempts is not None and row.attempts >= max_attempts:
                    self._finish(row, FAILED, f"gave up after {row.attempts} attempts", now)
                    session.flush()
                    continue
                row.state = RUNNING
                row.worker = worker
                row.lease_expires_at = now + lease
                row.attempts += 1
                row.updated_at = now
                ids = session.scalars(
                    select(_BatchItemRow.trajectory_id)
                    .where(_BatchItemRow.batch_id == row.batch_id)
                    .order_by(_BatchItemRow.position)
                )
                return Batch(row.batch_id, _key(row), tuple(ids), row.attempts, row.created_at)

    @staticmethod
    def _finish(row: _BatchRow, state: str, detail: str, now: datetime) -> None:
        row.state = state
        row.detail = detail
        row.worker = None
        row.lease_expires_at = None
        row.updated_at = now
        row.finished_at = now

    @staticmethod
    def _holds(row: _BatchRow, worker: str) -> bool:
        # An expired lease nobody re-claimed is still held: the work done under it is valid.
        return row.state == RUNNING and row.worker == worker

    def renew_lease(self, batch_id: str, worker: str, lease_s: float) -> bool:
        """Extend `worker`'s lease to now + `lease_s`; False if it no longer holds the batch."""
        lease = _lease(lease_s)
        now = _now()
        with self._write() as session:
            row = self._batch_row(session, batch_id, lock=True)
            if not self._holds(row, worker):
                return False
            row.lease_expires_at = now + lease
            row.updated_at = now
            return True

    def finish_batch(
        self,
        batch_id: str,
        worker: str,
        state: Literal["done", "failed", "stale"],
        detail: str = "",
    ) -> None:
        """Record the end of `worker`'s run of the batch; `LeaseLost` if another worker took it
        over (or it ended otherwise) meanwhile, so a late, superseded run cannot overwrite the
        outcome of the one that now owns the batch."""
        if state not in _FINISHED_STATES:
            raise ValueError(f"a batch finishes as 'done', 'failed' or 'stale', not {state!r}")
        now = _now()
        with self._write() as session:
            row = self._batch_row(session, batch_id, lock=True)
            if not self._holds(row, worker):
                raise LeaseLost(
                    f"worker {worker!r} no longer holds batch {batch_id} "
                    f"(state {row.state}, held by {row.worker!r}); not marking it {state}"
                )
            self._finish(row, state, detail, now)

    def release_batch(self, batch_id: str, worker: str, *, count_attempt: bool = True) -> bool:
        """Hand a held batch back to pending: a retry after a failed attempt (the attempt
        counts), or a daemon's stop (`count_attempt=False`: stopping is not the batch's fault,
        so a restart does not use up its attempts). False, and nothing changes, if `worker` no
        longer holds it: on the way out that is not worth an error."""
        now = _now()
        with self._write() as session:
            row = self._batch_row(session, batch_id, lock=True)
            if not self._holds(row, worker):
                return False
            if not count_attempt:
                row.attempts = max(0, row.attempts - 1)
            row.state = PENDING
            row.worker = None
            row.lease_expires_at = None
            row.updated_at = now
            return True

    def batch_state(self, batch_id: str) -> str:
        """pending | running | done | failed (for status views and tests)."""
        with self._read() as session:
            return self._batch_row(session, batch_id).state

    def batch_ids(self, state: str | None = None) -> builtins.list[str]:
        """Batch ids, oldest first, optionally of one state (status views, the demo)."""
        query = select(_BatchRow.batch_id).order_by(_BatchRow.row_id)
        if state is not None:
            query = query.where(_BatchRow.state == state)
        with self._read() as session:
            return [str(r) for r in session.execute(query).scalars()]

    def _count_batches(self, state: str) -> int:
        query = select(func.count()).select_from(_BatchRow).where(_BatchRow.state == state)
        with self._read() as session:
            return int(session.execute(query).scalar_one())

    def pending_batches(self) -> int:
        return self._count_batches(PENDING)

    def running_batches(self) -> int:
        return self._count_batches(RUNNING)
