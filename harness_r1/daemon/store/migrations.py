"""The numbered schema migrations of the store, applied in order when a StateStore opens a
database with a lower version. Frozen Core tables, not the ORM models in `schema`: a migration
that created "whatever the models say today" would make every later step collide with what
step 1 already created."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    func,
    select,
    text,
)

from harness_r1.daemon.store.records import (
    SchemaTooNew,
    StoreError,
    _now,
)
from harness_r1.daemon.store.schema import (
    _VERSION_TABLE,
    _VersionRow,
)

# --- schema (current) -----------------------------------------------------------------------


# --- migrations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Migration:
    """One schema step. `apply` runs inside the caller's write transaction."""

    version: int
    description: str
    apply: Callable[[Connection], None]


def _tz() -> DateTime:
    return DateTime(timezone=True)


# Why this size: the frozen DDL of schema version 1: later versions migrate from it, so it is
# never edited
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
