"""The daemon's durable state: trajectories, consumer positions, failure batches and results.

Why a database: the daemon's promise is "a trajectory is persisted exactly once, and nothing is
lost across a crash". That needs the trajectory rows, the failure buffer and the Kafka positions
to move in ONE transaction (`StateStore.ingest`): on restart the reader resumes from the
positions stored here, so a crash between "persist" and "commit to Kafka" neither loses nor
duplicates a record. The same holds for batches: a batch is claimed under a lease, so a worker
that dies leaves it to be re-claimed when the lease runs out, and several workers (threads or
processes, on PostgreSQL several hosts) never process the same batch at once.

The tables live in the same database as the overlay registry (SQLite by default, PostgreSQL in
larger deployments), so they hang off their own `StoreBase` and carry a `daemon_` prefix; only
portable column types are used (JSON is stored as Text, payloads as LargeBinary).

Schema changes go through numbered migrations (`MIGRATIONS`), applied in order when a
`StateStore` opens a database with a lower version, inside a write transaction that re-reads
the version first: two processes starting at once on a fresh database serialise there and only
the first migrates (on PostgreSQL a transaction-scoped advisory lock does the serialising, since
concurrent `CREATE TABLE`s would otherwise collide). A database with a HIGHER version than this
code knows is refused: old code must not write into a schema it does not understand.

SQLite specifics, as in the registry: WAL, `busy_timeout`, foreign keys on, and write
transactions that start with `BEGIN IMMEDIATE` so a read-then-write cannot lose a race half-way.
On PostgreSQL the same reads take row locks (`SELECT ... FOR UPDATE`); claiming and sealing use
`SKIP LOCKED` so concurrent workers take different rows instead of queueing on one.
"""

from __future__ import annotations

import builtins
import fcntl
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    case,
    delete,
    exists,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from harness_r1.consumers.packets import is_failure
from harness_r1.contracts import Trajectory
from harness_r1.daemon.deadletter import DeadLetter, ReasonCode
from harness_r1.deploy.sqlbase import (
    DEFAULT_BUSY_TIMEOUT_MS,
    SqlDatabase,
    UtcDateTime,
)

# Key of the PostgreSQL advisory lock that serialises migrations ("hr1store" as an int).
_PG_MIGRATION_LOCK = int.from_bytes(b"hr1store", "big") >> 1
# Rows per multi-row statement: far below SQLite's and PostgreSQL's bound-parameter limits.
_CHUNK = 500

PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
_OPEN_STATES = (PENDING, RUNNING)
_FINISHED_STATES = (DONE, FAILED)

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


@dataclass(frozen=True)
class IngestResult:
    """What one `ingest` did: stored rows, copies already stored (or repeated within the call),
    and new failed trajectories put into a failure buffer."""

    new: int
    duplicates: int
    failures: int
    #: New rows by (env, outcome), outcome "success" or "failure" (`is_failure`).
    by_env: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def plus(self, other: IngestResult) -> IngestResult:
        by_env = dict(self.by_env)
        for key, count in other.by_env.items():
            by_env[key] = by_env.get(key, 0) + count
        return IngestResult(
            self.new + other.new,
            self.duplicates + other.duplicates,
            self.failures + other.failures,
            by_env,
        )


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
    trajectory: Trajectory, payload: bytes, *, topic: str, partition: int, offset: int
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
    )


# --- schema (current) -----------------------------------------------------------------------


class StoreBase(DeclarativeBase):
    """Metadata of the store's tables only, so it can share a database with the overlay
    registry without either creating or dropping the other's tables.

    These models describe the schema at `SCHEMA_VERSION`; the tables themselves are created by
    `MIGRATIONS`, never by `create_all` (a test checks that the two agree).
    """


class _VersionRow(StoreBase):
    """One row per applied migration: the current version is the highest, the rest is audit."""

    __tablename__ = "daemon_schema_version"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    description: Mapped[str] = mapped_column(Text)
    applied_at: Mapped[datetime] = mapped_column(UtcDateTime())


_VERSION_TABLE: Table = StoreBase.metadata.tables["daemon_schema_version"]


class _TrajectoryRow(StoreBase):
    __tablename__ = "daemon_trajectories"

    trajectory_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    env: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(200))
    harness_version: Mapped[str] = mapped_column(String(128))
    agent_id: Mapped[str] = mapped_column(String(255))
    task_id: Mapped[str] = mapped_column(String(255))
    task_type: Mapped[str] = mapped_column(String(100))
    success: Mapped[bool] = mapped_column(Boolean)
    reward: Mapped[float] = mapped_column(Float)
    failed: Mapped[bool] = mapped_column(Boolean)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    kafka_topic: Mapped[str] = mapped_column(String(255))
    kafka_partition: Mapped[int] = mapped_column(Integer)
    kafka_offset: Mapped[int] = mapped_column(BigInteger)
    consumed_at: Mapped[datetime] = mapped_column(UtcDateTime())


class _BufferRow(StoreBase):
    """A failed trajectory waiting to be sealed into a batch; row_id orders "oldest first"."""

    __tablename__ = "daemon_failure_buffer"

    row_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    trajectory_id: Mapped[str] = mapped_column(
        String(255), ForeignKey("daemon_trajectories.trajectory_id"), unique=True
    )
    env: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(200))
    harness_version: Mapped[str] = mapped_column(String(128))
    buffered_at: Mapped[datetime] = mapped_column(UtcDateTime())


class _BatchRow(StoreBase):
    __tablename__ = "daemon_batches"

    row_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    batch_id: Mapped[str] = mapped_column(String(32), unique=True)
    env: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(200))
    harness_version: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16))
    worker: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    attempts: Mapped[int] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class _BatchItemRow(StoreBase):
    """A batch's members. No foreign key to the trajectory: a finished batch keeps its history
    after retention has dropped the payloads."""

    __tablename__ = "daemon_batch_items"

    batch_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("daemon_batches.batch_id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    trajectory_id: Mapped[str] = mapped_column(String(255))


class _PositionRow(StoreBase):
    """Next offset to read per (consumer group, topic, partition): the source of truth."""

    __tablename__ = "daemon_positions"

    consumer_group: Mapped[str] = mapped_column(String(255), primary_key=True)
    kafka_topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    kafka_partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    next_offset: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class _DeadLetterRow(StoreBase):
    """The dead-letter outbox: written with the positions that move past the record, marked
    published once the dead-letter topic acknowledged it (see `harness_r1.daemon.deadletter`).
    Published rows stay until retention, so a record read again (a reader restarted from an
    older position) finds its dead letter there and is not published a second time."""

    __tablename__ = "daemon_dead_letters"
    __table_args__ = (
        Index(
            "daemon_dead_letters_source",
            "consumer_group",
            "kafka_topic",
            "kafka_partition",
            "kafka_offset",
            unique=True,
        ),
    )

    row_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    consumer_group: Mapped[str] = mapped_column(String(255))
    kafka_topic: Mapped[str] = mapped_column(String(255))
    kafka_partition: Mapped[int] = mapped_column(Integer)
    kafka_offset: Mapped[int] = mapped_column(BigInteger)
    timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    record_key: Mapped[bytes | None] = mapped_column(LargeBinary)
    headers_json: Mapped[str] = mapped_column(Text)
    value: Mapped[bytes] = mapped_column(LargeBinary)
    original_size: Mapped[int] = mapped_column(BigInteger)
    reason_code: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    published_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class _IngestLeaseRow(StoreBase):
    """The ingest lease of a consumer group (see IngestLease)."""

    __tablename__ = "daemon_ingest_leases"

    lease_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())


class _PacketRow(StoreBase):
    __tablename__ = "daemon_packets"

    packet_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(32), ForeignKey("daemon_batches.batch_id"))
    packet_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class _CanaryReportRow(StoreBase):
    """The latest canary report of a batch (a re-run after a crash replaces it)."""

    __tablename__ = "daemon_canary_reports"

    batch_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("daemon_batches.batch_id"), primary_key=True
    )
    packet_id: Mapped[str] = mapped_column(String(128))
    report_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class _CandidateRowModel(StoreBase):
    __tablename__ = "daemon_canary_candidates"

    batch_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("daemon_canary_reports.batch_id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    candidate_id: Mapped[str] = mapped_column(String(128))
    completion: Mapped[str] = mapped_column(Text)
    patch_json: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(32))
    reward: Mapped[float | None] = mapped_column(Float)
    delta_success: Mapped[float | None] = mapped_column(Float)
    gate_verdict: Mapped[str | None] = mapped_column(String(64))
    overlay_id: Mapped[str | None] = mapped_column(String(32))


class _GroupRowModel(StoreBase):
    __tablename__ = "daemon_groups"

    row_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String(128), unique=True)
    packet_id: Mapped[str] = mapped_column(String(128))
    prompt: Mapped[str] = mapped_column(Text)
    completions_json: Mapped[str] = mapped_column(Text)
    rewards_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    trained_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    engineer_version: Mapped[str | None] = mapped_column(String(128))


# --- migrations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Migration:
    """One schema step. `apply` runs inside the caller's write transaction."""

    version: int
    description: str
    apply: Callable[[Connection], None]


def _tz() -> DateTime:
    return DateTime(timezone=True)


def _v1_tables(metadata: MetaData) -> None:
    """The version-1 schema, frozen here as Core tables.

    Deliberately not the ORM models: those follow the newest schema, and a migration that
    created "whatever the models say today" would make every later step (an added column, an
    index) collide with what step 1 already created on a fresh database.
    """
    Table(
        "daemon_trajectories",
        metadata,
        Column("trajectory_id", String(255), primary_key=True),
        Column("env", String(64), nullable=False),
        Column("target", String(200), nullable=False),
        Column("harness_version", String(128), nullable=False),
        Column("agent_id", String(255), nullable=False),
        Column("task_id", String(255), nullable=False),
        Column("task_type", String(100), nullable=False),
        Column("success", Boolean, nullable=False),
        Column("reward", Float, nullable=False),
        Column("failed", Boolean, nullable=False),
        Column("payload", LargeBinary, nullable=False),
        Column("kafka_topic", String(255), nullable=False),
        Column("kafka_partition", Integer, nullable=False),
        Column("kafka_offset", BigInteger, nullable=False),
        Column("consumed_at", _tz(), nullable=False),
        Index("daemon_trajectories_consumed_at", "consumed_at"),
    )
    Table(
        "daemon_failure_buffer",
        metadata,
        Column("row_id", Integer, primary_key=True, autoincrement=True),
        Column(
            "trajectory_id",
            String(255),
            ForeignKey("daemon_trajectories.trajectory_id"),
            nullable=False,
            unique=True,
        ),
        Column("env", String(64), nullable=False),
        Column("target", String(200), nullable=False),
        Column("harness_version", String(128), nullable=False),
        Column("buffered_at", _tz(), nullable=False),
        Index("daemon_failure_buffer_key", "env", "target", "harness_version", "row_id"),
    )
    Table(
        "daemon_batches",
        metadata,
        Column("row_id", Integer, primary_key=True, autoincrement=True),
        Column("batch_id", String(32), nullable=False, unique=True),
        Column("env", String(64), nullable=False),
        Column("target", String(200), nullable=False),
        Column("harness_version", String(128), nullable=False),
        Column("state", String(16), nullable=False),
        Column("worker", String(200)),
        Column("lease_expires_at", _tz()),
        Column("attempts", Integer, nullable=False),
        Column("detail", Text, nullable=False),
        Column("created_at", _tz(), nullable=False),
        Column("updated_at", _tz(), nullable=False),
        Column("finished_at", _tz()),
        Index("daemon_batches_state", "state", "row_id"),
    )
    Table(
        "daemon_batch_items",
        metadata,
        Column("batch_id", String(32), ForeignKey("daemon_batches.batch_id"), primary_key=True),
        Column("position", Integer, primary_key=True, autoincrement=False),
        Column("trajectory_id", String(255), nullable=False),
        Index("daemon_batch_items_trajectory", "trajectory_id"),
    )
    Table(
        "daemon_positions",
        metadata,
        Column("consumer_group", String(255), primary_key=True),
        Column("kafka_topic", String(255), primary_key=True),
        Column("kafka_partition", Integer, primary_key=True, autoincrement=False),
        Column("next_offset", BigInteger, nullable=False),
        Column("updated_at", _tz(), nullable=False),
    )
    Table(
        "daemon_packets",
        metadata,
        Column("packet_id", String(128), primary_key=True),
        Column(
            "batch_id",
            String(32),
            ForeignKey("daemon_batches.batch_id"),
            nullable=False,
            index=True,
        ),
        Column("packet_json", Text, nullable=False),
        Column("created_at", _tz(), nullable=False),
    )
    Table(
        "daemon_canary_reports",
        metadata,
        Column("batch_id", String(32), ForeignKey("daemon_batches.batch_id"), primary_key=True),
        Column("packet_id", String(128), nullable=False),
        Column("report_json", Text, nullable=False),
        Column("created_at", _tz(), nullable=False),
    )
    Table(
        "daemon_canary_candidates",
        metadata,
        Column(
            "batch_id",
            String(32),
            ForeignKey("daemon_canary_reports.batch_id"),
            primary_key=True,
        ),
        Column("position", Integer, primary_key=True, autoincrement=False),
        Column("candidate_id", String(128), nullable=False),
        Column("completion", Text, nullable=False),
        Column("patch_json", Text),
        Column("status", String(32), nullable=False),
        Column("reward", Float),
        Column("delta_success", Float),
        Column("gate_verdict", String(64)),
        Column("overlay_id", String(32)),
    )
    Table(
        "daemon_groups",
        metadata,
        Column("row_id", Integer, primary_key=True, autoincrement=True),
        Column("group_id", String(128), nullable=False, unique=True),
        Column("packet_id", String(128), nullable=False),
        Column("prompt", Text, nullable=False),
        Column("completions_json", Text, nullable=False),
        Column("rewards_json", Text, nullable=False),
        Column("created_at", _tz(), nullable=False),
        Column("trained_at", _tz()),
        Column("engineer_version", String(128)),
        Index("daemon_groups_trained", "trained_at", "row_id"),
    )


def _migrate_v1(conn: Connection) -> None:
    metadata = MetaData()
    _v1_tables(metadata)
    # checkfirst=False: tables already there without a version row mean something else owns
    # them; fail loudly rather than adopt them.
    Table(
        "daemon_ingest_leases",
        metadata,
        Column("lease_name", String(255), primary_key=True),
        Column("holder", String(200), nullable=False),
        Column("expires_at", _tz(), nullable=False),
    )
    metadata.create_all(conn, checkfirst=False)


def _migrate_v2(conn: Connection) -> None:
    """The live guard asks, every few seconds, for episodes and successes of two harness
    versions since a release time; without this index that is a scan of every stored
    trajectory, which grows with all traffic ever consumed."""
    conn.execute(
        text(
            "CREATE INDEX daemon_trajectories_guard "
            "ON daemon_trajectories (harness_version, consumed_at)"
        )
    )


def _migrate_v3(conn: Connection) -> None:
    """The dead-letter outbox: a dead letter becomes durable in the same transaction as the
    positions that pass its record, so it is published once however often a batch is
    retried (it used to be published before the transaction, again on every retry)."""
    metadata = MetaData()
    Table(
        "daemon_dead_letters",
        metadata,
        Column("row_id", Integer, primary_key=True, autoincrement=True),
        Column("consumer_group", String(255), nullable=False),
        Column("kafka_topic", String(255), nullable=False),
        Column("kafka_partition", Integer, nullable=False),
        Column("kafka_offset", BigInteger, nullable=False),
        Column("timestamp_ms", BigInteger, nullable=False),
        Column("record_key", LargeBinary),
        Column("headers_json", Text, nullable=False),
        Column("value", LargeBinary, nullable=False),
        Column("original_size", BigInteger, nullable=False),
        Column("reason_code", String(32), nullable=False),
        Column("detail", Text, nullable=False),
        Column("created_at", _tz(), nullable=False),
        Column("published_at", _tz()),
        Index(
            "daemon_dead_letters_source",
            "consumer_group",
            "kafka_topic",
            "kafka_partition",
            "kafka_offset",
            unique=True,
        ),
    )
    metadata.create_all(conn, checkfirst=False)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "trajectories, positions, failure buffer, batches, results, groups", _migrate_v1),
    Migration(
        2, "index trajectories(harness_version, consumed_at) for the live guard", _migrate_v2
    ),
    Migration(3, "the dead-letter outbox; ingest leases", _migrate_v3),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def _check_migrations(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise StoreError(f"migrations must be numbered 1, 2, 3, ... in order; got {versions}")


def current_version(conn: Connection) -> int:
    """The schema version recorded in the database (0: none yet). Needs the version table."""
    version = conn.execute(select(func.max(_VersionRow.version))).scalar_one_or_none()
    return int(version or 0)


def upgrade(conn: Connection, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the schema up to the last of `migrations`; return the version reached.

    Runs in the caller's transaction, which must be a write transaction that excludes other
    migrators (`StateStore` takes one); the version is read inside it, so a process that waited
    for another one's migration finds nothing left to do. A version above the last known step
    raises `SchemaTooNew` before anything is written.
    """
    _check_migrations(migrations)
    _VERSION_TABLE.create(conn, checkfirst=True)
    version = current_version(conn)
    known = migrations[-1].version if migrations else 0
    if version > known:
        raise SchemaTooNew(
            f"the daemon state in this database is at schema version {version}, but this "
            f"harness_r1 knows versions up to {known}; upgrade harness_r1 (or point it at "
            "another database) instead of running old code on a newer schema"
        )
    for step in migrations:
        if step.version <= version:
            continue
        step.apply(conn)
        conn.execute(
            _VERSION_TABLE.insert().values(
                version=step.version, description=step.description, applied_at=_now()
            )
        )
        version = step.version
    return version


# --- helpers --------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name} must be a tz-aware datetime (UTC), got {value!r}")
    return value.astimezone(UTC)


def _chunks(values: Sequence[_T], size: int = _CHUNK) -> Iterator[Sequence[_T]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _new_batch_id() -> str:
    return f"b-{uuid.uuid4().hex[:12]}"


def _lease(lease_s: float) -> timedelta:
    if not lease_s > 0 or not math.isfinite(lease_s):
        raise ValueError(f"a lease must last a positive, finite number of seconds, got {lease_s}")
    return timedelta(seconds=lease_s)


def _key(row: _BatchRow | _BufferRow) -> BatchKey:
    return BatchKey(row.env, row.target, row.harness_version)


def _dump_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as err:
        raise StoreError(f"{what} must be JSON-serialisable (finite numbers): {err}") from err


def _to_group(row: _GroupRowModel) -> GroupRow:
    return GroupRow(
        group_id=row.group_id,
        packet_id=row.packet_id,
        prompt=row.prompt,
        completions=tuple(json.loads(row.completions_json)),
        rewards=tuple(json.loads(row.rewards_json)),
        created_at=row.created_at,
    )


def _to_candidate(row: _CandidateRowModel) -> CandidateRow:
    return CandidateRow(
        candidate_id=row.candidate_id,
        completion=row.completion,
        patch_json=row.patch_json,
        status=row.status,
        reward=row.reward,
        delta_success=row.delta_success,
        gate_verdict=row.gate_verdict,
        overlay_id=row.overlay_id,
    )


def _to_dead_letter(row: _DeadLetterRow) -> DeadLetter:
    return DeadLetter(
        group=row.consumer_group,
        topic=row.kafka_topic,
        partition=row.kafka_partition,
        offset=int(row.kafka_offset),
        timestamp_ms=int(row.timestamp_ms),
        key=row.record_key,
        headers=DeadLetter.headers_from_json(row.headers_json),
        value=bytes(row.value),
        original_size=int(row.original_size),
        reason_code=ReasonCode(row.reason_code),
        detail=row.detail,
    )


def _trajectory_values(item: IngestItem, now: datetime) -> dict[str, Any]:
    return {
        "trajectory_id": item.trajectory_id,
        "env": item.env,
        "target": item.target,
        "harness_version": item.harness_version,
        "agent_id": item.agent_id,
        "task_id": item.task_id,
        "task_type": item.task_type,
        "success": item.success,
        "reward": float(item.reward),
        "failed": item.failed,
        "payload": bytes(item.payload),
        "kafka_topic": item.topic,
        "kafka_partition": item.partition,
        "kafka_offset": item.offset,
        "consumed_at": now,
    }


# --- the store ------------------------------------------------------------------------------


class StateStore(SqlDatabase):
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
        per daemon (live guard, GRPO update, retention), run only when they get it.
        PostgreSQL: a session advisory lock; SQLite: an flock on a file beside the database."""
        if self._dialect == "postgresql":
            key = int(hashlib.sha256(name.encode()).hexdigest()[:15], 16)
            with self._engine.connect() as conn:
                held = bool(
                    conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
                )
                try:
                    yield held
                finally:
                    if held:
                        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            return
        database = self._engine.url.database
        if not database or database == ":memory:":
            yield True  # one process only
            return
        safe = "".join(c if c.isalnum() else "_" for c in name)
        with open(f"{database}.{safe}.lock", "a+b") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def schema_version(self) -> int:
        with self._engine.connect() as conn:
            return current_version(conn)

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @staticmethod
    def _rowcount(session: Session, statement: Any) -> int:
        """Rows a bulk UPDATE/DELETE touched (through the Core connection, which reports it)."""
        return int(session.connection().execute(statement).rowcount)

    # -- ingest --

    def ingest(
        self,
        items: Sequence[IngestItem],
        group: str,
        positions: Mapping[tuple[str, int], int],
        dead_letters: Sequence[DeadLetter] = (),
        lease: IngestLease | None = None,
    ) -> IngestResult:
        """Store new trajectories, buffer the new failures, move `group`'s positions: together.

        One write transaction, so a crash leaves either all of it or none of it: on restart the
        reader resumes from the positions stored here and re-reads exactly what was not stored.
        Dedup is by trajectory_id (`ON CONFLICT DO NOTHING`, so two daemons ingesting the same
        record at once cannot fail each other either); a copy repeated within `items` counts as
        a duplicate. Only a newly stored failure enters a buffer: a redelivered one is already
        there, or already batched. `dead_letters` enter the outbox in the same transaction
        (once per source record: a repeated one is ignored).
        """
        unique: dict[str, IngestItem] = {}
        for item in items:
            unique.setdefault(item.trajectory_id, item)
        now = _now()
        with self._write() as session:
            if lease is not None:
                self._renew_lease(session, lease, now, must_hold=True)
            inserted = self._insert_trajectories(session, list(unique.values()), now)
            failed = [
                item for item in unique.values() if item.failed and item.trajectory_id in inserted
            ]
            if failed:
                session.connection().execute(
                    self._insert(StoreBase.metadata.tables[_BufferRow.__tablename__]),
                    [
                        {
                            "trajectory_id": item.trajectory_id,
                            "env": item.env,
                            "target": item.target,
                            "harness_version": item.harness_version,
                            "buffered_at": now,
                        }
                        for item in failed
                    ],
                )
            self._insert_dead_letters(session, dead_letters, now)
            self._upsert_positions(session, group, positions, now)
        by_env: dict[tuple[str, str], int] = {}
        for item in unique.values():
            if item.trajectory_id in inserted:
                key = (item.env, "failure" if item.failed else "success")
                by_env[key] = by_env.get(key, 0) + 1
        return IngestResult(
            new=len(inserted),
            duplicates=len(items) - len(inserted),
            failures=len(failed),
            by_env=by_env,
        )

    def _insert_trajectories(
        self, session: Session, items: Sequence[IngestItem], now: datetime
    ) -> set[str]:
        """Insert what is new, return the ids actually inserted. One statement with the rows
        as parameters: SQLAlchemy compiles it once and batches it ("insertmanyvalues"), instead
        of compiling a fresh multi-row VALUES per chunk (85% of ingest time, profiled)."""
        if not items:
            return set()
        table = StoreBase.metadata.tables[_TrajectoryRow.__tablename__]
        statement = (
            self._insert(table)
            .on_conflict_do_nothing(index_elements=["trajectory_id"])
            .returning(table.c.trajectory_id)
        )
        rows = [_trajectory_values(item, now) for item in items]
        # Core, not the ORM's bulk path: the same SQL with a third of the Python overhead.
        return set(session.connection().execute(statement, rows).scalars())

    def _upsert_positions(
        self,
        session: Session,
        group: str,
        positions: Mapping[tuple[str, int], int],
        now: datetime,
    ) -> None:
        """Insert or advance positions; a lower offset than the stored one is ignored, so a
        late or replayed caller can never move a group backwards (and re-read old records)."""
        if not positions:
            return
        if not group:
            raise StoreError("positions need a consumer group name")
        rows = []
        for (topic, partition), offset in sorted(positions.items()):
            if partition < 0 or offset < 0:
                raise StoreError(f"bad position {topic}:{partition} -> {offset}")
            rows.append(
                {
                    "consumer_group": group,
                    "kafka_topic": topic,
                    "kafka_partition": partition,
                    "next_offset": offset,
                    "updated_at": now,
                }
            )
        statement = self._insert(_PositionRow).values(rows)
        statement = statement.on_conflict_do_update(
            index_elements=["consumer_group", "kafka_topic", "kafka_partition"],
            set_={
                "next_offset": case(
                    (
                        statement.excluded.next_offset > _PositionRow.next_offset,
                        statement.excluded.next_offset,
                    ),
                    else_=_PositionRow.next_offset,
                ),
                "updated_at": statement.excluded.updated_at,
            },
        )
        session.execute(statement)

    # -- ingest leases --

    def _renew_lease(
        self, session: Session, lease: IngestLease, now: datetime, *, must_hold: bool
    ) -> bool:
        """Take or extend the lease if it is free, expired or ours; with must_hold, only
        extend it (never take it over) and raise IngestLeaseLost when it is not ours."""
        table = StoreBase.metadata.tables[_IngestLeaseRow.__tablename__]
        expires = now + _lease(lease.ttl_s)
        if must_hold:
            moved = self._rowcount(
                session,
                update(_IngestLeaseRow)
                .where(
                    _IngestLeaseRow.lease_name == lease.name,
                    _IngestLeaseRow.holder == lease.holder,
                    _IngestLeaseRow.expires_at >= now,
                )
                .values(expires_at=expires),
            )
            if moved != 1:
                raise IngestLeaseLost(
                    f"{lease.holder} no longer holds the ingest lease {lease.name!r}"
                )
            return True
        statement = self._insert(table).values(
            lease_name=lease.name, holder=lease.holder, expires_at=expires
        )
        upsert = statement.on_conflict_do_update(
            index_elements=["lease_name"],
            set_={"holder": statement.excluded.holder, "expires_at": statement.excluded.expires_at},
            where=or_(table.c.holder == lease.holder, table.c.expires_at < now),
        ).returning(table.c.holder)
        return session.connection().execute(upsert).scalar_one_or_none() == lease.holder

    def acquire_ingest_lease(self, lease: IngestLease) -> bool:
        """Take the lease if it is free or expired, or extend it if it is ours already."""
        with self._write() as session:
            return self._renew_lease(session, lease, _now(), must_hold=False)

    def holds_ingest_lease(self, lease: IngestLease) -> bool:
        query = select(func.count()).where(
            _IngestLeaseRow.lease_name == lease.name,
            _IngestLeaseRow.holder == lease.holder,
            _IngestLeaseRow.expires_at >= _now(),
        )
        with self._read() as session:
            return bool(session.execute(query).scalar_one())

    def release_ingest_lease(self, lease: IngestLease) -> None:
        """Give the lease up (a clean stop): a standby takes over at once, not after ttl_s."""
        with self._write() as session:
            session.execute(
                delete(_IngestLeaseRow).where(
                    _IngestLeaseRow.lease_name == lease.name,
                    _IngestLeaseRow.holder == lease.holder,
                )
            )

    def _insert_dead_letters(
        self, session: Session, letters: Sequence[DeadLetter], now: datetime
    ) -> None:
        if not letters:
            return
        table = StoreBase.metadata.tables[_DeadLetterRow.__tablename__]
        statement = self._insert(table).on_conflict_do_nothing(
            index_elements=["consumer_group", "kafka_topic", "kafka_partition", "kafka_offset"]
        )
        rows = [
            {
                "consumer_group": letter.group,
                "kafka_topic": letter.topic,
                "kafka_partition": letter.partition,
                "kafka_offset": letter.offset,
                "timestamp_ms": letter.timestamp_ms,
                "record_key": letter.key,
                "headers_json": letter.headers_json(),
                "value": letter.value,
                "original_size": letter.original_size,
                "reason_code": letter.reason_code.value,
                "detail": letter.detail,
                "created_at": now,
            }
            for letter in letters
        ]
        session.connection().execute(statement, rows)

    def pending_dead_letters(
        self, group: str, limit: int = 1_000
    ) -> builtins.list[tuple[int, DeadLetter]]:
        """`group`'s dead letters not yet acknowledged by the topic, oldest first."""
        query = (
            select(_DeadLetterRow)
            .where(_DeadLetterRow.consumer_group == group, _DeadLetterRow.published_at.is_(None))
            .order_by(_DeadLetterRow.row_id)
            .limit(limit)
        )
        with self._read() as session:
            return [(row.row_id, _to_dead_letter(row)) for row in session.scalars(query)]

    def mark_dead_letters_published(self, row_ids: Sequence[int]) -> int:
        """Dead letters the topic acknowledged (kept, as published, until retention)."""
        marked = 0
        now = _now()
        with self._write() as session:
            for chunk in _chunks(list(row_ids)):
                marked += self._rowcount(
                    session,
                    update(_DeadLetterRow)
                    .where(_DeadLetterRow.row_id.in_(chunk))
                    .values(published_at=now),
                )
        return marked

    def count_pending_dead_letters(self) -> int:
        query = select(func.count()).where(_DeadLetterRow.published_at.is_(None))
        with self._read() as session:
            return int(session.execute(query).scalar_one())

    def advance_positions(self, group: str, positions: Mapping[tuple[str, int], int]) -> None:
        """Move positions without storing anything (records that went to the dead-letter
        topic); forward only, like `ingest`."""
        with self._write() as session:
            self._upsert_positions(session, group, positions, _now())

    def positions(self, group: str) -> dict[tuple[str, int], int]:
        """Next offset to read per (topic, partition) for `group`."""
        query = select(
            _PositionRow.kafka_topic, _PositionRow.kafka_partition, _PositionRow.next_offset
        ).where(_PositionRow.consumer_group == group)
        with self._read() as session:
            return {(t, p): int(o) for t, p, o in session.execute(query)}

    # -- trajectories --

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

    def _batch_row(self, session: Session, batch_id: str, *, lock: bool = False) -> _BatchRow:
        query = select(_BatchRow).where(_BatchRow.batch_id == batch_id)
        if lock:
            query = query.with_for_update()
        row = session.scalars(query).one_or_none()
        if row is None:
            raise UnknownBatch(f"no batch {batch_id!r} in the state store at {self.url}")
        return row

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
        state: Literal["done", "failed"],
        detail: str = "",
    ) -> None:
        """Record the end of `worker`'s run of the batch; `LeaseLost` if another worker took it
        over (or it ended otherwise) meanwhile, so a late, superseded run cannot overwrite the
        outcome of the one that now owns the batch."""
        if state not in _FINISHED_STATES:
            raise ValueError(f"a batch finishes as 'done' or 'failed', not {state!r}")
        now = _now()
        with self._write() as session:
            row = self._batch_row(session, batch_id, lock=True)
            if not self._holds(row, worker):
                raise LeaseLost(
                    f"worker {worker!r} no longer holds batch {batch_id} "
                    f"(state {row.state}, held by {row.worker!r}); not marking it {state}"
                )
            self._finish(row, state, detail, now)

    def release_batch(self, batch_id: str, worker: str) -> bool:
        """Hand a held batch back to pending (graceful shutdown, or a retry after a failed
        attempt). The attempt still counts. False, and nothing changes, if `worker` no longer
        holds it: on the way out that is not worth an error."""
        now = _now()
        with self._write() as session:
            row = self._batch_row(session, batch_id, lock=True)
            if not self._holds(row, worker):
                return False
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

    # -- results --

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
