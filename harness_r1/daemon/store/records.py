"""The store's plain records, states and errors: what its callers pass in and get back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from harness_r1.consumers import is_failure
from harness_r1.contracts import Trajectory

# Key of the PostgreSQL advisory lock that serialises migrations ("hr1store" as an int).
_PG_MIGRATION_LOCK = int.from_bytes(b"hr1store", "big") >> 1
# Rows per multi-row statement: far below SQLite's and PostgreSQL's bound-parameter limits.
_CHUNK = 500

PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
# recorded under a harness that is no longer (or not yet) the pool's incumbent (daemon.loop)
STALE = "stale"
_OPEN_STATES = (PENDING, RUNNING)
_FINISHED_STATES = (DONE, FAILED, STALE)

_T = TypeVar("_T")


class StoreError(Exception):
    """Base of the state store's own errors."""


class SchemaTooNew(StoreError):
    """The database was migrated by newer code than this; refuse to touch it."""


class UnknownBatch(StoreError, LookupError):
    """No batch with that id in this store."""


class UnknownTrajectory(StoreError, LookupError):
    """A trajectory asked for is not (or no longer) stored."""


class LeaseLost(StoreError):
    """The worker no longer holds the batch (its lease expired and another worker took it, or
    the batch was finished or released meanwhile): its result must not be recorded."""


class IngestLeaseLost(StoreError):
    """This process no longer holds the ingest lease of its consumer group (it expired and
    another daemon took it): its transaction was rolled back, and it must stop ingesting."""


@dataclass(frozen=True)
class IngestLease:
    """Who may ingest as a consumer group: checked and renewed inside every ingest
    transaction, so a daemon that lost it (a pause longer than ttl_s, a partition from the
    database) can never store, move positions or outbox a dead letter afterwards."""

    name: str
    holder: str
    ttl_s: float = 15.0


def _now() -> datetime:
    return datetime.now(UTC)


# --- records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestItem:
    """One trajectory as the consumer hands it over: the fields the store queries on, the exact
    bytes received (re-parsed later, never re-serialised), and where it came from in Kafka."""

    trajectory_id: str
    env: str
    target: str  # "model_id@version"
    harness_version: str
    agent_id: str
    task_id: str
    task_type: str
    success: bool
    reward: float
    failed: bool
    payload: bytes
    topic: str
    partition: int
    offset: int
    #: The trajectory's steps by who decided the action (OriginCounts, as a dict): metrics only.
    origins: Mapping[str, int] = field(default_factory=dict)
    #: A failure the canary cannot replay (its task is not in the daemon's data): stored, and
    #: counted, but kept out of the failure buffers (daemon/replayable.py).
    replayable: bool = True


@dataclass(frozen=True)
class IngestResult:
    """What one `ingest` did: stored rows, copies already stored (or repeated within the call),
    and new failed trajectories put into a failure buffer."""

    new: int
    duplicates: int
    failures: int
    #: New rows by (env, outcome), outcome "success" or "failure" (`is_failure`).
    by_env: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: The new rows' steps by (env, origin): who decided their actions (contracts.attribution).
    steps_by_origin: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: New failures stored but kept out of the buffers (not replayable), by env.
    unreplayable: Mapping[str, int] = field(default_factory=dict)

    def plus(self, other: IngestResult) -> IngestResult:
        unreplayable = dict(self.unreplayable)
        for env, count in other.unreplayable.items():
            unreplayable[env] = unreplayable.get(env, 0) + count
        return IngestResult(
            self.new + other.new,
            self.duplicates + other.duplicates,
            self.failures + other.failures,
            _summed(self.by_env, other.by_env),
            _summed(self.steps_by_origin, other.steps_by_origin),
            unreplayable,
        )


def _summed(
    a: Mapping[tuple[str, str], int], b: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], int]:
    out = dict(a)
    for key, count in b.items():
        out[key] = out.get(key, 0) + count
    return out


@dataclass(frozen=True)
class BatchKey:
    """What failures are batched by: one packet describes one env, target and harness."""

    env: str
    target: str
    harness_version: str


@dataclass(frozen=True)
class BufferInfo:
    """One non-empty failure buffer: enough to decide whether to seal it (size or age)."""

    key: BatchKey
    size: int
    oldest_at: datetime


@dataclass(frozen=True)
class Batch:
    """A claimed batch. `attempts` counts claims, this one included (a crash-looping batch
    shows it)."""

    batch_id: str
    key: BatchKey
    trajectory_ids: tuple[str, ...]
    attempts: int
    created_at: datetime


@dataclass(frozen=True)
class CandidateRow:
    """One engineer candidate of a canary run and how it fared."""

    candidate_id: str
    completion: str
    patch_json: str | None
    status: str
    reward: float | None
    delta_success: float | None
    gate_verdict: str | None
    overlay_id: str | None


@dataclass(frozen=True)
class GroupRow:
    """One GRPO group (K completions of one prompt with their rewards) awaiting training."""

    group_id: str
    packet_id: str
    prompt: str
    completions: tuple[str, ...]
    rewards: tuple[float | None, ...]
    created_at: datetime


def target_string(trajectory: Trajectory) -> str:
    """The store's (and the batch key's) spelling of a target: "model_id@version"."""
    return f"{trajectory.target.model_id}@{trajectory.target.version}"


def ingest_item(
    trajectory: Trajectory,
    payload: bytes,
    *,
    topic: str,
    partition: int,
    offset: int,
    replayable: bool = True,
) -> IngestItem:
    """An `IngestItem` from a parsed trajectory and the bytes it was parsed from."""
    return IngestItem(
        trajectory_id=trajectory.trajectory_id,
        env=trajectory.env,
        target=target_string(trajectory),
        harness_version=trajectory.harness_version,
        agent_id=trajectory.agent_id,
        task_id=trajectory.task.task_id,
        task_type=trajectory.task.task_type,
        success=trajectory.outcome.success,
        reward=trajectory.outcome.reward,
        failed=is_failure(trajectory),
        payload=payload,
        topic=topic,
        partition=partition,
        offset=offset,
        origins=trajectory.origins.model_dump(),
        replayable=replayable,
    )
