"""The store's tables (ORM models of the current schema) and the numbered migrations that
create them.

The migrations are frozen Core tables, not the models: a migration that created "whatever the
models say today" would make every later step collide with what step 1 already created."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from harness_r1.deploy import UtcDateTime

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
