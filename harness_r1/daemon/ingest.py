"""Trajectories in: Kafka -> validated -> deduplicated -> durable, then offsets committed.

The commit steps, in order (quix-streams' lesson: the offset moves only after every side
effect is durable):
  1. poll a batch of records (bounded wait);
  2. parse each record; one that is not a Trajectory of a known major version goes to the
     dead-letter topic with its reason and source (the publish waits for the broker's ack);
  3. ONE store transaction: insert the new trajectories (dedup by trajectory_id), buffer the
     new failures, and move this group's positions past every record of the batch;
  4. commit the same positions to Kafka (for lag tools; the store is the source of truth, so
     a commit that fails or a crash before it loses nothing and duplicates nothing).
On restart the reader resumes from the store's positions. A crash between 2 and 3 can put a
record on the dead-letter topic twice; never a trajectory in the store twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog
from pydantic import ValidationError

from harness_r1.consumers.kafka import BroadcastReader, KafkaSettings, Record
from harness_r1.contracts import Trajectory
from harness_r1.contracts.base import UnsupportedSchemaVersion
from harness_r1.daemon.store import IngestResult, StateStore, ingest_item

log = structlog.get_logger(__name__)

#: (topic, value, headers) -> None; raises when the broker did not acknowledge.
DeadLetterSend = Callable[[str, bytes, Sequence[tuple[str, bytes]]], None]
MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class IngestConfig:
    topic: str
    group: str
    dead_letter_topic: str
    commit_timeout_ms: int = 5_000
    poll_timeout_ms: int = 200
    max_poll_records: int = 500  # records per store transaction at most


@dataclass(frozen=True)
class PollReport:
    records: int
    result: IngestResult
    dead_lettered: int
    committed: bool


class Unreadable(ValueError):
    """A record that is not a Trajectory we can read; `reason` goes into the DLQ header."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_trajectory(value: bytes) -> Trajectory:
    try:
        trajectory: Trajectory = Trajectory.from_json_bytes(value)
    except ValidationError as err:
        versions = [e for e in err.errors() if e.get("loc") == ("schema_version",)]
        if versions:
            raise Unreadable(f"unsupported_version: {versions[0].get('msg', '')}") from err
        raise Unreadable(f"invalid: {err.errors()[0].get('msg', '')} at {_loc(err)}") from err
    except UnsupportedSchemaVersion as err:
        raise Unreadable(f"unsupported_version: {err}") from err
    except (ValueError, UnicodeDecodeError) as err:
        raise Unreadable(f"not_json: {err}") from err
    _check_storable(trajectory)
    return trajectory


#: Fields the store indexes, with the column sizes it gives them (store.py).
STORED_LIMITS = {
    "trajectory_id": 255,
    "agent_id": 255,
    "harness_version": 128,
    "task.env": 64,
    "task.task_id": 255,
    "task.task_type": 100,
    "target": 200,
}


def _check_storable(trajectory: Trajectory) -> None:
    """A valid Trajectory the store cannot hold (an id over its column size, a NUL character,
    which PostgreSQL text refuses) must go to the dead-letter topic, not fail the store
    transaction of its whole batch again and again (a poison record)."""
    values = {
        "trajectory_id": trajectory.trajectory_id,
        "agent_id": trajectory.agent_id,
        "harness_version": trajectory.harness_version,
        "task.env": trajectory.task.env,
        "task.task_id": trajectory.task.task_id,
        "task.task_type": trajectory.task.task_type,
        "target": f"{trajectory.target.model_id}@{trajectory.target.version}",
    }
    for field, value in values.items():
        if len(value) > STORED_LIMITS[field] or "\x00" in value:
            raise Unreadable(
                f"unstorable: {field} is over {STORED_LIMITS[field]} characters or has a NUL"
            )


def _loc(err: ValidationError) -> str:
    loc = err.errors()[0].get("loc", ())
    return ".".join(str(part) for part in loc) or "<root>"


class TrajectoryIngest:
    """One reader of the trajectory topic (all partitions, or the ones `owns` says)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        config: IngestConfig,
        store: StateStore,
        dead_letter: DeadLetterSend,
        owns: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self._dead_letter = dead_letter
        positions = {
            f"{topic}:{partition}": offset
            for (topic, partition), offset in store.positions(config.group).items()
        }
        self.reader = BroadcastReader(
            kafka,
            [config.topic],
            positions,
            commit_group=config.group,
            owns=owns,
            max_poll_records=config.max_poll_records,
        )
        self.last_commit_at: float | None = None

    def poll_once(self, timeout_ms: int | None = None) -> PollReport:
        """Steps 1-4 for one batch. Raises only when the store itself fails (the daemon
        retries then; nothing was committed, so the batch is read again)."""
        records = self.reader.poll(
            self.config.poll_timeout_ms if timeout_ms is None else timeout_ms
        )
        if not records:
            return PollReport(0, IngestResult(0, 0, 0), 0, False)
        items, dead = [], 0
        for record in records:
            try:
                trajectory = parse_trajectory(record.value)
            except Unreadable as err:
                self._send_dead_letter(record, err.reason)
                dead += 1
                continue
            items.append(
                ingest_item(
                    trajectory,
                    record.value,
                    topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                )
            )
        result = self.store.ingest(items, self.config.group, next_positions(records))
        committed = self.reader.commit(self.config.commit_timeout_ms)
        if committed:
            self.last_commit_at = time.time()
        return PollReport(len(records), result, dead, committed)

    def _send_dead_letter(self, record: Record, reason: str) -> None:
        headers = [
            ("reason", reason[:MAX_REASON_CHARS].encode("utf-8", "replace")),
            ("source_topic", record.topic.encode()),
            ("source_partition", str(record.partition).encode()),
            ("source_offset", str(record.offset).encode()),
        ]
        self._dead_letter(self.config.dead_letter_topic, record.value, headers)
        log.warning(
            "trajectory_dead_lettered",
            reason=reason[:200],
            partition=record.partition,
            offset=record.offset,
        )

    def close(self) -> None:
        self.reader.close()


def next_positions(records: Sequence[Record]) -> dict[tuple[str, int], int]:
    """Next offset per partition: one past the highest offset read in this batch."""
    out: dict[tuple[str, int], int] = {}
    for record in records:
        key = (record.topic, record.partition)
        out[key] = max(out.get(key, 0), record.offset + 1)
    return out
