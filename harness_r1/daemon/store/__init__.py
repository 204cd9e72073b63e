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

from harness_r1.daemon.store.core import (
    StoreCore,
)
from harness_r1.daemon.store.ingest import IngestMixin
from harness_r1.daemon.store.migrations import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
    current_version,
    upgrade,
)
from harness_r1.daemon.store.queue import BatchQueueMixin
from harness_r1.daemon.store.records import (
    DONE,
    FAILED,
    PENDING,
    RUNNING,
    Batch,
    BatchKey,
    BufferInfo,
    CandidateRow,
    GroupRow,
    IngestItem,
    IngestLease,
    IngestLeaseLost,
    IngestResult,
    LeaseLost,
    SchemaTooNew,
    StoreError,
    UnknownBatch,
    UnknownTrajectory,
    ingest_item,
    target_string,
)
from harness_r1.daemon.store.results import ResultsMixin
from harness_r1.daemon.store.schema import (
    StoreBase,
)


class StateStore(IngestMixin, BatchQueueMixin, ResultsMixin, StoreCore):
    """The daemon's durable state. Safe to use from several threads and several processes on
    the same database; every method runs in its own short transaction. Its parts, by job:
    `core` (engine, migrations on open, locks), `ingest` (ingest, positions, dead-letter
    outbox, ingest lease), `queue` (trajectories, failure batches), `results` (packets, canary
    results, GRPO groups, retention)."""

    def __enter__(self) -> StateStore:
        return self


__all__ = [
    "DONE",
    "FAILED",
    "MIGRATIONS",
    "PENDING",
    "RUNNING",
    "SCHEMA_VERSION",
    "Batch",
    "BatchKey",
    "BufferInfo",
    "CandidateRow",
    "GroupRow",
    "IngestItem",
    "IngestLease",
    "IngestLeaseLost",
    "IngestResult",
    "LeaseLost",
    "Migration",
    "SchemaTooNew",
    "StateStore",
    "StoreBase",
    "StoreError",
    "UnknownBatch",
    "UnknownTrajectory",
    "current_version",
    "ingest_item",
    "target_string",
    "upgrade",
]
