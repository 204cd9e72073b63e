"""Trajectories in: Kafka -> validated -> deduplicated -> durable, then offsets committed.

The commit steps, in order (quix-streams' lesson: the offset moves only after every side
effect is durable):
  1. publish dead letters left in the outbox by earlier polls (a broker that was away);
  2. poll a batch of records (bounded wait);
  3. parse each record; one that is not a storable Trajectory of a known major version
     becomes a dead letter with its reason (`harness_r1.daemon.deadletter`);
  4. ONE store transaction: insert the new trajectories (dedup by trajectory_id), buffer the
     new failures, put the dead letters into the outbox, and move this group's positions past
     every record of the batch;
  5. publish the new dead letters from the outbox (each deleted once acknowledged);
  6. commit the same positions to Kafka (for lag tools; the store is the source of truth, so
     a commit that fails or a crash before it loses nothing and duplicates nothing).

Every record thus ends in exactly one place. When step 4 fails on the data (a record the
store refuses that validation let through), the batch is split in halves until the records
the store refuses stand alone; they become `unstorable` dead letters and the rest is stored:
one record never fails its batch. Only infrastructure errors (the database unreachable or
locked) fail the poll, and then nothing moved: the daemon re-reads the batch from the stored
positions. On restart the reader resumes from the store's positions too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc

from harness_r1.consumers import BroadcastReader, KafkaSettings, Record, is_failure
from harness_r1.contracts import Trajectory, UnsupportedSchemaVersion
from harness_r1.daemon.deadletter import (
    DEFAULT_MAX_VALUE_BYTES,
    DeadLetter,
    DeadLetterOutbox,
    DeadLetterSend,
    DrainReport,
    ReasonCode,
    dead_letter,
)
from harness_r1.daemon.store import (
    IngestItem,
    IngestLease,
    IngestResult,
    StateStore,
    ingest_item,
)

log = structlog.get_logger(__name__)

#: A batch of at least this many records that the store refuses one by one, every one, is
#: taken for a store problem (a constraint an operator added, say), not poison: fail the poll
#: rather than dead-letter a whole stream. Smaller all-poison batches are dead-lettered.
ALL_REFUSED_MIN = 16


class StoreRefusedEverything(RuntimeError):
    """Every record of a big batch was refused one by one (see ALL_REFUSED_MIN). Fails the
    poll, like an infrastructure error; nothing moves."""


def is_data_error(err: BaseException) -> bool:
    """Whether a store transaction failed on some record's data (a constraint, a value the
    column or the driver refuses) rather than on the database or our code: only then is the
    batch split to find the record. Anything else (connection, lock, permission, a bug) fails
    the poll and nothing moves, so a broken store never dead-letters good records."""
    if isinstance(err, sa_exc.DataError | sa_exc.IntegrityError):
        return True
    # A value the driver could not bind (an encoding error, say): no DBAPI error behind it.
    if isinstance(err, sa_exc.StatementError) and not isinstance(err, sa_exc.DBAPIError):
        return isinstance(err.orig, ValueError | TypeError | UnicodeError | OverflowError)
    return False


@dataclass(frozen=True)
class IngestConfig:
    topic: str
    group: str
    dead_letter_topic: str
    commit_timeout_ms: int = 5_000
    poll_timeout_ms: int = 200
    max_poll_records: int = 500  # records per store transaction at most
    max_record_bytes: int = 1024 * 1024  # a bigger trajectory is dead-lettered as too_large
    max_dead_letter_bytes: int = DEFAULT_MAX_VALUE_BYTES
    #: A partition whose log the broker reset under the stored position (topic recreated,
    #: data lost or restored) is held, not read again from some offset silently: the daemon
    #: applies its policy (DaemonConfig.on_log_reset). False: kafka-python's reset to the start.
    hold_when_reset: bool = True


@dataclass(frozen=True)
class PollReport:
    records: int
    result: IngestResult
    dead_lettered: int  # records of this poll that became dead letters
    committed: bool
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)  # by reason code
    dead_letters_sent: dict[str, int] = field(default_factory=dict)  # published, by code
    dead_letters_pending: int = 0  # in the outbox after this poll (publish failed)
    dead_letter_error: str | None = None


class Unreadable(ValueError):
    """A record that is not a Trajectory we can store; `code` and `detail` say why."""

    def __init__(self, code: ReasonCode, detail: str) -> None:
        super().__init__(f"{code.value}: {detail}")
        self.code = code
        self.detail = detail

    @property
    def reason(self) -> str:
        return f"{self.code.value}: {self.detail}"


def parse_trajectory(value: bytes, max_bytes: int | None = None) -> Trajectory:
    """The Trajectory in `value`, or Unreadable with a reason code. Never raises anything
    else: a record that breaks the parser itself (a recursion bomb, say) is unreadable too."""
    if not value:
        raise Unreadable(ReasonCode.EMPTY, "null or empty value")
    if max_bytes is not None and len(value) > max_bytes:
        raise Unreadable(
            ReasonCode.TOO_LARGE, f"{len(value)} bytes, a trajectory may have {max_bytes}"
        )
    try:
        trajectory: Trajectory = Trajectory.from_json_bytes(value)
    except ValidationError as err:
        first = err.errors()[0]
        if first.get("type") == "json_invalid":
            raise Unreadable(ReasonCode.NOT_JSON, str(first.get("msg", ""))) from err
        versions = [e for e in err.errors() if e.get("loc") == ("schema_version",)]
        if versions:
            raise Unreadable(
                ReasonCode.UNSUPPORTED_VERSION, str(versions[0].get("msg", ""))
            ) from err
        raise Unreadable(ReasonCode.INVALID, f"{first.get('msg', '')} at {_loc(err)}") from err
    except UnsupportedSchemaVersion as err:
        raise Unreadable(ReasonCode.UNSUPPORTED_VERSION, str(err)) from err
    except (ValueError, UnicodeDecodeError) as err:
        raise Unreadable(ReasonCode.NOT_JSON, str(err)) from err
    except (RecursionError, MemoryError) as err:
        raise Unreadable(ReasonCode.INVALID, f"{type(err).__name__} while parsing") from err
    if "schema_version" not in trajectory.model_fields_set:
        # The model defaults it for messages we build; a record from outside must say which
        # version it is written in (DESIGN: every message carries schema_version).
        raise Unreadable(ReasonCode.UNSUPPORTED_VERSION, "no schema_version in the record")
    check_storable(trajectory)
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


def check_storable(trajectory: Trajectory) -> None:
    """A valid Trajectory the store cannot hold (an id over its column size; a NUL, which
    PostgreSQL text refuses; a lone surrogate, which no database encodes) is unstorable,
    found here before the transaction rather than by it."""
    values = {
        "trajectory_id": trajectory.trajectory_id,
        "agent_id": trajectory.agent_id,
        "harness_version": trajectory.harness_version,
        "task.env": trajectory.task.env,
        "task.task_id": trajectory.task.task_id,
        "task.task_type": trajectory.task.task_type,
        "target": f"{trajectory.target.model_id}@{trajectory.target.version}",
    }
    for name, value in values.items():
        if len(value) > STORED_LIMITS[name]:
            raise Unreadable(
                ReasonCode.UNSTORABLE, f"{name} is over {STORED_LIMITS[name]} characters"
            )
        if "\x00" in value:
            raise Unreadable(ReasonCode.UNSTORABLE, f"{name} has a NUL character")
        try:
            if not value.isascii():
                value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise Unreadable(ReasonCode.UNSTORABLE, f"{name} is not encodable: {err}") from err


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
        dead_letter_send: DeadLetterSend,
        owns: Callable[[str, int], bool] | None = None,
        lease: IngestLease | None = None,
        replay_check: Callable[[str, str, str], str | None] | None = None,
    ) -> None:
        """lease: the group's ingest lease, checked in every store transaction (None: no
        other daemon can ingest as this group, as in tests and benchmarks). replay_check:
        (env, split, task_id) -> why the canary cannot replay a failure of that task, or None
        (`daemon/replayable.py`); such failures are stored but kept out of batches."""
        self.config = config
        self.replay_check = replay_check
        self.store = store
        self.lease = lease
        self.outbox = DeadLetterOutbox(
            store, dead_letter_send, config.dead_letter_topic, config.group
        )
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
            hold_when_reset=config.hold_when_reset,
        )
        self.last_commit_at: float | None = None

    def poll_once(self, timeout_ms: int | None = None) -> PollReport:
        """Steps 1-6 for one batch. Raises only when the store itself fails (the daemon
        retries then; nothing was committed, so the batch is read again)."""
        earlier = self._drain()
        records = self.reader.poll(
            self.config.poll_timeout_ms if timeout_ms is None else timeout_ms
        )
        if not records:
            return PollReport(
                0,
                IngestResult(0, 0, 0),
                0,
                False,
                dead_letters_sent=earlier.sent,
                dead_letters_pending=earlier.pending,
                dead_letter_error=earlier.error,
            )
        items: list[IngestItem] = []
        letters: list[DeadLetter] = []
        for record in records:
            try:
                trajectory = parse_trajectory(record.value, self.config.max_record_bytes)
            except Unreadable as err:
                letters.append(self._letter(record, err.code, err.detail))
                continue
            items.append(
                ingest_item(
                    trajectory,
                    record.value,
                    topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                    replayable=self._replayable(trajectory, record),
                )
            )
        result, refused = self._store(items, letters, records)
        letters.extend(refused)
        if letters:
            self.outbox.written()
        if earlier.error is None:
            now = self._drain()
        else:
            # A drain that failed just now (the broker away) is not tried twice in one poll:
            # each try may wait the whole send timeout, and a stop request waits for the poll.
            # The letters of this poll wait in the outbox too: count them.
            pending = self.store.count_pending_dead_letters() if letters else earlier.pending
            now = DrainReport({}, pending, None)
        committed = self.reader.commit(self.config.commit_timeout_ms)
        if committed:
            self.last_commit_at = time.time()
        reasons: dict[str, int] = {}
        for letter in letters:
            reasons[letter.reason_code.value] = reasons.get(letter.reason_code.value, 0) + 1
        sent = dict(earlier.sent)
        for code, count in now.sent.items():
            sent[code] = sent.get(code, 0) + count
        return PollReport(
            len(records),
            result,
            len(letters),
            committed,
            dead_letter_reasons=reasons,
            dead_letters_sent=sent,
            dead_letters_pending=now.pending,
            dead_letter_error=now.error or earlier.error,
        )

    def _drain(self) -> DrainReport:
        """Publish waiting dead letters, only while this process holds the group's lease: a
        daemon that lost it must not publish what the new holder publishes too."""
        lease = self.lease
        if lease is not None and self.outbox.maybe_pending:
            holds = self.store.holds_ingest_lease(lease)
            if not holds:
                return DrainReport({}, 0, None)
        return self.outbox.drain()

    def _letter(self, record: Record, code: ReasonCode, detail: str) -> DeadLetter:
        return dead_letter(
            record,
            self.config.group,
            code,
            detail,
            max_value_bytes=self.config.max_dead_letter_bytes,
        )

    def _replayable(self, trajectory: Trajectory, record: Record) -> bool:
        if self.replay_check is None or not is_failure(trajectory):
            return True
        task = trajectory.task
        why = self.replay_check(task.env, task.split, task.task_id)
        if why is None:
            return True
        log.warning(
            "failure_unreplayable",
            trajectory_id=trajectory.trajectory_id,
            reason=why,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
        )
        return False

    def _store(
        self,
        items: list[IngestItem],
        letters: list[DeadLetter],
        records: Sequence[Record],
    ) -> tuple[IngestResult, list[DeadLetter]]:
        """Step 4; on a data error, isolate the records the store refuses (see the module
        docstring) and store the rest. Returns the result and the refused records' letters."""
        group = self.config.group
        positions = next_positions(records)
        try:
            return self.store.ingest(items, group, positions, letters, self.lease), []
        except Exception as err:
            if not is_data_error(err):
                raise
            log.warning("ingest_batch_refused_isolating", error=_short(err), records=len(items))
        stored, refused = self._isolate(items)
        if len(refused) == len(items) >= ALL_REFUSED_MIN:
            raise StoreRefusedEverything(
                f"the store refused each of {len(items)} records alone ({refused[0][1]}): "
                "a store problem, not poison records; nothing was moved"
            )
        by_source = {(r.topic, r.partition, r.offset): r for r in records}
        refused_letters = [
            self._letter(
                by_source[(item.topic, item.partition, item.offset)],
                ReasonCode.UNSTORABLE,
                f"the store refused it: {error}",
            )
            for item, error in refused
        ]
        self.store.ingest([], group, positions, [*letters, *refused_letters], self.lease)
        return stored, refused_letters

    def _isolate(
        self, items: Sequence[IngestItem]
    ) -> tuple[IngestResult, list[tuple[IngestItem, str]]]:
        """Store what the store accepts, halving until each refused record stands alone
        (log2(n) transactions per poison record). Positions do not move here: the caller
        moves them once everything is stored or outboxed."""
        if not items:
            return IngestResult(0, 0, 0), []
        try:
            return self.store.ingest(items, self.config.group, {}, (), self.lease), []
        except Exception as err:
            if not is_data_error(err):
                raise
            if len(items) == 1:
                return IngestResult(0, 0, 0), [(items[0], _short(err))]
        middle = len(items) // 2
        left, left_refused = self._isolate(items[:middle])
        right, right_refused = self._isolate(items[middle:])
        return left.plus(right), left_refused + right_refused

    def close(self) -> None:
        self.reader.close()


def _short(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:300]


def next_positions(records: Sequence[Record]) -> dict[tuple[str, int], int]:
    """Next offset per partition: one past the highest offset read in this batch."""
    out: dict[tuple[str, int], int] = {}
    for record in records:
        key = (record.topic, record.partition)
        out[key] = max(out.get(key, 0), record.offset + 1)
    return out
