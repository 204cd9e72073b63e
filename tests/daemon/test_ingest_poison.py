"""One record can never stop ingestion, and a dead letter is published once per record.

On the real broker and a real store (SQLite, and the local PostgreSQL where one answers): a
record that validation passes but the store refuses (a trigger or a CHECK constraint) is
isolated and dead-lettered while the rest of its batch is stored; a reason holding a NUL is
stored (PostgreSQL once refused it and wedged the partition); a store that is broken (a table
renamed away) fails the poll without moving or dead-lettering anything, and the retried batch
publishes each dead letter once (it used to publish them again on every retry: 29 malformed
records became 134 dead letters); a broker that is away keeps dead letters in the outbox until
it is back.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import structlog
from sqlalchemy import text
from test_durability import synthetic_trajectory

from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.consumers.records import Record
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.contracts import Trajectory
from harness_r1.daemon.deadletter import ReasonCode, dead_letter
from harness_r1.daemon.ingest import (
    ALL_REFUSED_MIN,
    IngestConfig,
    PollReport,
    StoreRefusedEverything,
    TrajectoryIngest,
)
from harness_r1.daemon.store import IngestLease, IngestLeaseLost, IngestResult, StateStore

pytestmark = pytest.mark.integration

POISON_AGENT = "agent-poison"
POISON_AGENT_B = "agent-poison-b"  # refused by a second constraint, with its own message


def refuse_poison(store: StateStore) -> None:
    """A real refusal by the database itself: a trigger (SQLite) or a CHECK (PostgreSQL)."""
    with store._write_engine.begin() as conn:
        if store._dialect == "sqlite":
            for name, agent in (("poison", POISON_AGENT), ("poison_b", POISON_AGENT_B)):
                conn.execute(
                    text(
                        f"CREATE TRIGGER {name} BEFORE INSERT ON daemon_trajectories "
                        f"WHEN NEW.agent_id = '{agent}' "
                        f"BEGIN SELECT RAISE(ABORT, '{name} record'); END"
                    )
                )
        else:
            for name, agent in (("poison", POISON_AGENT), ("poison_b", POISON_AGENT_B)):
                conn.execute(
                    text(
                        f"ALTER TABLE daemon_trajectories ADD CONSTRAINT {name} "
                        f"CHECK (agent_id <> '{agent}')"
                    )
                )


def refusal(store: StateStore, name: str = "poison") -> str:
    """The first line of the error the store gives for a record `refuse_poison` refuses."""
    if store._dialect == "sqlite":
        return f"IntegrityError: (sqlite3.IntegrityError) {name} record"
    return (
        "IntegrityError: (psycopg.errors.CheckViolation) new row for relation "
        f'"daemon_trajectories" violates check constraint "{name}"'
    )


@pytest.fixture
def rig(db_url: str, kafka_broker: EmbeddedBroker) -> Iterator[dict[str, Any]]:
    run = uuid.uuid4().hex[:8]
    kafka = KafkaSettings(
        bootstrap=kafka_broker.bootstrap, request_timeout_ms=3_000, send_timeout_s=3.0
    )
    topic, dlq = f"traj-{run}", f"dlq-{run}"
    ensure_topics(kafka, [topic, dlq], 1)
    store = StateStore(db_url, busy_timeout_ms=200)
    refuse_poison(store)
    producer = make_producer(kafka)
    sent: list[tuple[str, bytes, Sequence[tuple[str, bytes]], int]] = []

    def send(topic_: str, value: bytes, key: bytes | None, headers: Any, ts: int) -> None:
        publish(producer, topic_, value, key=key, headers=headers, timestamp_ms=ts, timeout_s=3)
        sent.append((topic_, value, headers, ts))

    config = IngestConfig(topic=topic, group="g", dead_letter_topic=dlq, max_poll_records=50)
    ingest = TrajectoryIngest(kafka, config, store, send)
    yield {
        "kafka": kafka,
        "topic": topic,
        "dlq": dlq,
        "db_url": db_url,
        "store": store,
        "producer": producer,
        "ingest": ingest,
        "sent": sent,
    }
    ingest.close()
    producer.close(timeout=2)
    store.close()


def produce(rig: dict[str, Any], values: Sequence[bytes]) -> None:
    for value in values:
        publish(rig["producer"], rig["topic"], value, timeout_s=5)


def trajectories(n: int, poison: set[int]) -> list[bytes]:
    rng = random.Random(3)
    out = []
    for i in range(n):
        t = synthetic_trajectory(i, rng)
        if i in poison:
            t = t.model_copy(update={"agent_id": POISON_AGENT})
        out.append(t.to_json_bytes())
    return out


def trajectory_of(agent_id: str) -> bytes:
    t = synthetic_trajectory(99, random.Random(99))
    return t.model_copy(update={"agent_id": agent_id}).to_json_bytes()


def drain(ingest: TrajectoryIngest, expected: int) -> int:
    records = 0
    for _ in range(50):
        records += ingest.poll_once(300).records
        if records >= expected:
            break
    return records


def dead_letters(rig: dict[str, Any]) -> list[Any]:
    with BroadcastReader(rig["kafka"], [rig["dlq"]]) as reader:
        out: list[Any] = []
        for _ in range(10):
            out.extend(reader.poll(300))
        return out


def nul_key_record() -> bytes:
    """Valid but for an extra key holding a NUL: pydantic quotes the key in its message, so
    the dead letter's reason carries the NUL (PostgreSQL text refuses it: this record once
    wedged its partition there)."""
    doc = json.loads(trajectories(1, poison=set())[0])
    doc["\u0000x"] = 1
    return json.dumps(doc).encode()


def test_a_record_the_store_refuses_is_isolated_and_dead_lettered(rig: dict[str, Any]) -> None:
    values = trajectories(40, poison={3, 17, 18, 39})
    produce(rig, values + [b"{broken", nul_key_record()])
    assert drain(rig["ingest"], 42) == 42
    store: StateStore = rig["store"]
    assert store.trajectory_count() == 36
    assert store.positions("g") == {(rig["topic"], 0): 42}
    dead = dead_letters(rig)
    assert sorted(int(dict(r.headers)["source_offset"]) for r in dead) == [3, 17, 18, 39, 40, 41]
    reasons = {int(dict(r.headers)["source_offset"]): dict(r.headers)["reason"] for r in dead}
    assert reasons[17].startswith(b"unstorable: the store refused it: IntegrityError")
    assert reasons[40].startswith(b"not_json")
    assert reasons[41].startswith(b"invalid: Extra inputs") and b"\\x00x" in reasons[41]
    assert store.count_pending_dead_letters() == 0


def test_a_broken_store_dead_letters_nothing(rig: dict[str, Any]) -> None:
    """A store error that is not about a record's data (here the table is gone: an operator's
    migration gone wrong) fails the poll and moves nothing; and a big batch whose every record
    the store refuses alone is taken for a store problem too, not for poison."""
    store: StateStore = rig["store"]
    produce(rig, trajectories(20, poison=set()))
    with store._write_engine.begin() as conn:
        conn.execute(text("ALTER TABLE daemon_trajectories RENAME TO daemon_t_moved"))
    try:
        with pytest.raises(Exception, match="daemon_trajectories"):
            drain(rig["ingest"], 20)
    finally:
        with store._write_engine.begin() as conn:
            conn.execute(text("ALTER TABLE daemon_t_moved RENAME TO daemon_trajectories"))
    assert store.positions("g") == {} and store.count_pending_dead_letters() == 0
    reopen(rig)
    assert drain(rig["ingest"], 20) == 20 and store.trajectory_count() == 20

    refused = trajectories(ALL_REFUSED_MIN, poison=set(range(ALL_REFUSED_MIN)))
    refused[0] = trajectory_of(POISON_AGENT_B)  # the message quotes the first refusal
    produce(rig, refused)
    with pytest.raises(StoreRefusedEverything) as caught:
        drain(rig["ingest"], ALL_REFUSED_MIN)
    assert str(caught.value) == (
        f"the store refused each of {ALL_REFUSED_MIN} records alone "
        f"({refusal(store, 'poison_b')}): a store problem, not poison records; nothing was moved"
    )
    assert store.positions("g") == {(rig["topic"], 0): 20}
    assert store.count_pending_dead_letters() == 0 and not dead_letters(rig)


def reopen(rig: dict[str, Any], lease: IngestLease | None = None, **config: Any) -> None:
    """What the daemon does after a failed poll: a new reader from the stored positions (with
    `config` changed, and the ingest lease `lease` when given)."""
    rig["ingest"].close()
    rig["ingest"] = TrajectoryIngest(
        rig["kafka"],
        dataclasses.replace(rig["ingest"].config, **config),
        rig["store"],
        rig["ingest"].outbox._send,
        lease=lease,
    )


def test_a_store_that_fails_retries_the_batch_and_dead_letters_once(
    rig: dict[str, Any],
) -> None:
    values = trajectories(20, poison={5})
    malformed = [b"not json %d" % i for i in range(29)]
    produce(rig, values + malformed)
    store: StateStore = rig["store"]
    with store._write_engine.begin() as conn:  # the store broken under the ingest
        conn.execute(text("ALTER TABLE daemon_failure_buffer RENAME TO daemon_b_moved"))
    try:
        for _ in range(5):
            with pytest.raises(Exception, match="daemon_failure_buffer"):
                rig["ingest"].poll_once(1_000)
            reopen(rig)  # as the daemon does: a new reader from the stored positions
    finally:
        with store._write_engine.begin() as conn:
            conn.execute(text("ALTER TABLE daemon_b_moved RENAME TO daemon_failure_buffer"))
    assert drain(rig["ingest"], 49) == 49
    assert rig["store"].trajectory_count() == 19
    dead = dead_letters(rig)
    assert len(dead) == 30, "29 malformed + 1 refused, each once despite 5 failed attempts"
    assert len({dict(r.headers)["dead_letter_id"] for r in dead}) == 30


def test_dead_letters_wait_in_the_outbox_while_the_broker_is_away(
    rig: dict[str, Any],
) -> None:
    """The dead-letter topic lives on a second real broker here, stopped and started again:
    ingestion goes on meanwhile, each poll tries the broker once (a try may wait the whole send
    timeout), the reports count the letters waiting, and they are published once it is back."""
    produce(rig, [b"bad-1", b"bad-2"])
    with EmbeddedBroker() as dlq_broker:
        kafka = KafkaSettings(
            bootstrap=dlq_broker.bootstrap, request_timeout_ms=1_000, send_timeout_s=1.0
        )
        ensure_topics(kafka, [rig["dlq"]], 1)
        producer = make_producer(kafka)
        tries: list[bytes] = []

        def send(topic: str, value: bytes, key: bytes | None, headers: Any, ts: int) -> None:
            tries.append(value)
            publish(
                producer, topic, value, key=key, headers=headers, timestamp_ms=ts, timeout_s=1.0
            )

        rig["ingest"].close()
        ingest = TrajectoryIngest(rig["kafka"], rig["ingest"].config, rig["store"], send)
        rig["ingest"] = ingest
        dlq_broker.stop()
        report = ingest.poll_once(1_000)
        while report.records < 2:
            report = ingest.poll_once(1_000)
        assert report.dead_lettered == 2 and report.dead_letters_pending == 2
        assert report.dead_letter_error is not None
        assert rig["store"].positions("g") == {(rig["topic"], 0): 2}  # ingestion went on
        unacknowledged = f"PublishError: publishing to '{rig['dlq']}' was not acknowledged"

        def failed(report: PollReport) -> PollReport:
            """The report less its publish error (which quotes timings), once checked."""
            assert (report.dead_letter_error or "").startswith(unacknowledged), report
            return dataclasses.replace(report, dead_letter_error=None)

        del tries[:]
        assert failed(ingest.poll_once(300)) == PollReport(
            0, IngestResult(0, 0, 0), 0, False, dead_letters_pending=2
        )
        assert tries == [b"bad-1"]
        produce(rig, [b"bad-3"])
        for _ in range(10):
            del tries[:]
            report = ingest.poll_once(1_000)
            assert tries == [b"bad-1"], "one try per poll, the oldest letter first"
            if report.records:
                break
        assert failed(report) == PollReport(
            1, IngestResult(0, 0, 0), 1, True, {"not_json": 1}, dead_letters_pending=3
        )
        dlq_broker.start()
        ensure_topics(kafka, [rig["dlq"]], 1)  # in-memory storage: the topic is new again
        produce(rig, [b"bad-4"])  # its letter and the waiting ones may go out in one poll
        sent: dict[str, int] = {}
        for _ in range(20):
            later = ingest.poll_once(200)
            for code, count in later.dead_letters_sent.items():
                sent[code] = sent.get(code, 0) + count
            if later.dead_letters_pending == 0 and sum(sent.values()) == 4:
                break
        assert sent == {"not_json": 4}
        with BroadcastReader(kafka, [rig["dlq"]]) as reader:
            letters: list[Any] = []
            for _ in range(10):
                letters.extend(reader.poll(300))
        assert [r.value for r in letters] == [b"bad-1", b"bad-2", b"bad-3", b"bad-4"]
        producer.close(timeout=1)


class RecordingReader:
    """TEST DOUBLE around the ingest's real BroadcastReader: every call goes through to it;
    each `commit` is recorded as (the positions it commits, those the store held then)."""

    def __init__(self, reader: BroadcastReader, store: StateStore, group: str) -> None:
        self.reader, self.store, self.group = reader, store, group
        self.commits: list[tuple[dict[str, int], dict[str, int]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reader, name)

    def commit(self, timeout_ms: int | None = None) -> bool:
        stored = {f"{t}:{p}": offset for (t, p), offset in self.store.positions(self.group).items()}
        self.commits.append((self.reader.positions(), stored))
        return self.reader.commit(timeout_ms)


def test_the_kafka_offset_is_committed_only_after_the_store_transaction(
    rig: dict[str, Any],
) -> None:
    """The store is the source of truth: when its transaction raises, Kafka's commit is not
    called (the batch is read again from the stored positions); when it succeeds, the commit
    comes after it, so the store already holds the positions being committed."""
    store: StateStore = rig["store"]
    produce(rig, trajectories(5, poison=set()))
    recorder = RecordingReader(rig["ingest"].reader, store, "g")
    rig["ingest"].reader = recorder
    with store._write_engine.begin() as conn:
        conn.execute(text("ALTER TABLE daemon_trajectories RENAME TO daemon_t_moved"))
    try:
        with pytest.raises(Exception, match="daemon_trajectories"):
            drain(rig["ingest"], 5)
    finally:
        with store._write_engine.begin() as conn:
            conn.execute(text("ALTER TABLE daemon_t_moved RENAME TO daemon_trajectories"))
    assert recorder.commits == [], "Kafka committed a batch the store did not take"
    assert store.positions("g") == {} and store.trajectory_count() == 0

    reopen(rig)  # as the daemon does after a failed poll
    recorder = RecordingReader(rig["ingest"].reader, store, "g")
    rig["ingest"].reader = recorder
    assert drain(rig["ingest"], 5) == 5  # the same records, read again
    assert store.trajectory_count() == 5
    assert recorder.commits, "a stored batch is committed to Kafka too"
    for committing, stored in recorder.commits:
        assert committing == stored, "Kafka committed positions the store did not hold yet"
    assert recorder.commits[-1][0] == {f"{rig['topic']}:0": 5}


def sent_letters(rig: dict[str, Any]) -> list[tuple[int, str, bytes, str]]:
    """(source offset, reason, value, truncated) of each dead letter published, by offset."""
    out = []
    for topic, value, headers, _ in rig["sent"]:
        assert topic == rig["dlq"]
        h = dict(headers)
        out.append((int(h["source_offset"]), h["reason"].decode(), value, h["truncated"].decode()))
    return sorted(out)


def wait(rig: dict[str, Any], offset: int) -> None:
    """A not_json dead letter of `offset` put into the outbox, unpublished."""
    record = Record(rig["topic"], 0, offset, None, b"earlier", (), 1)
    rig["store"].ingest([], "g", {}, [dead_letter(record, "g", ReasonCode.NOT_JSON, "earlier")])


def test_a_poll_reports_what_became_of_each_record(rig: dict[str, Any]) -> None:
    """One batch with every fate: stored, duplicate, empty, not JSON, refused by the store, too
    large. The report, the dead letters (cut to max_dead_letter_bytes), the stored positions
    and the isolation's log event all say so; the next poll reads nothing, and neither does a
    restarted reader (it resumes from the stored positions)."""
    reopen(rig, max_record_bytes=10_000, max_dead_letter_bytes=8)
    store: StateStore = rig["store"]
    v0, v1, poison, v3 = trajectories(4, poison={2})  # v0 is a failure, v1 and v3 successes
    produce(rig, [v0, b"", v1, b"{broken", poison, v0, b"x" * 10_001, v3, b"[1"])
    wait(rig, 100)  # a letter an earlier poll left in the outbox (its broker was away)
    assert rig["ingest"].last_commit_at is None
    started = time.time()
    with structlog.testing.capture_logs() as logs:
        report = rig["ingest"].poll_once(2_000)
    reasons = {"empty": 1, "not_json": 2, "unstorable": 1, "too_large": 1}
    by_env = {("dbbench", "failure"): 1, ("dbbench", "success"): 2}
    stored_steps = sum(len(Trajectory.from_json_bytes(v).steps) for v in (v0, v1, v3))
    steps = {("dbbench", "model"): stored_steps}  # the scripted agents ran no hooks
    assert report == PollReport(
        records=9,
        result=IngestResult(new=3, duplicates=1, failures=1, by_env=by_env, steps_by_origin=steps),
        dead_lettered=5,
        committed=True,
        dead_letter_reasons=reasons,
        dead_letters_sent={**reasons, "not_json": 3},  # the earlier letter went out too
        dead_letters_pending=0,
        dead_letter_error=None,
    )
    assert sent_letters(rig) == [
        (1, "empty: null or empty value", b"", "0"),
        (3, "not_json: Invalid JSON: key must be a string at line 1 column 2", b"{broken", "0"),
        (4, f"unstorable: the store refused it: {refusal(store)}", poison[:8], "1"),
        (6, "too_large: 10001 bytes, a trajectory may have 10000", b"x" * 8, "1"),
        (8, "not_json: Invalid JSON: EOF while parsing a list at line 1 column 2", b"[1", "0"),
        (100, "not_json: earlier", b"earlier", "0"),
    ]
    assert [e for e in logs if e["event"] == "ingest_batch_refused_isolating"] == [
        {
            "event": "ingest_batch_refused_isolating",
            "error": refusal(store),
            "records": 5,
            "log_level": "warning",
        }
    ]
    assert store.positions("g") == {(rig["topic"], 0): 9} and store.trajectory_count() == 3
    assert rig["ingest"].last_commit_at is not None
    assert started <= rig["ingest"].last_commit_at <= time.time()

    assert rig["ingest"].poll_once(300) == PollReport(0, IngestResult(0, 0, 0), 0, False)
    wait(rig, 101)
    reopen(rig)
    assert rig["ingest"].poll_once(300) == PollReport(
        0, IngestResult(0, 0, 0), 0, False, dead_letters_sent={"not_json": 1}
    )
    produce(rig, [trajectory_of("agent-later")])
    assert drain(rig["ingest"], 1) == 1, "a restarted reader resumes from the stored positions"
    assert store.positions("g") == {(rig["topic"], 0): 10} and store.trajectory_count() == 4


def test_a_poll_waits_as_long_as_asked_else_as_configured(rig: dict[str, Any]) -> None:
    """The daemon's stop request waits for the poll: its wait is the one asked for, or the
    configured one (here longer than the Kafka settings' default)."""
    reopen(rig, poll_timeout_ms=1_500)
    assert rig["ingest"].reader._settings.poll_timeout_ms < 1_000
    rig["ingest"].poll_once(100)  # the first poll may connect
    started = time.monotonic()
    assert rig["ingest"].poll_once().records == 0
    assert time.monotonic() - started >= 1.4
    started = time.monotonic()
    assert rig["ingest"].poll_once(100).records == 0
    assert time.monotonic() - started < 1.0


OURS = IngestLease("ingest:g", "this-daemon", ttl_s=600)
THEIRS = IngestLease("ingest:g", "another-daemon", ttl_s=600)


def test_a_daemon_without_the_ingest_lease_neither_stores_nor_publishes(
    rig: dict[str, Any],
) -> None:
    """Another daemon holds the group's lease: this one publishes none of the waiting dead
    letters (the holder does) and its store transaction is refused; once it holds the lease it
    publishes them and ingests."""
    store: StateStore = rig["store"]
    waiting = dead_letter(
        Record(rig["topic"], 0, 0, None, b"bad", (), 1), "g", ReasonCode.NOT_JSON, "bad"
    )
    store.ingest([], "g", {}, [waiting])  # left in the outbox by an earlier holder
    assert store.acquire_ingest_lease(THEIRS)
    reopen(rig, lease=OURS)
    assert rig["ingest"].poll_once(100) == PollReport(0, IngestResult(0, 0, 0), 0, False)
    assert rig["sent"] == []
    produce(rig, trajectories(2, poison=set()))
    with pytest.raises(IngestLeaseLost):
        drain(rig["ingest"], 2)
    assert store.trajectory_count() == 0 and store.positions("g") == {} and rig["sent"] == []

    store.release_ingest_lease(THEIRS)
    assert store.acquire_ingest_lease(OURS)
    reopen(rig, lease=OURS)
    sent: dict[str, int] = {}
    records = 0
    for _ in range(20):
        report = rig["ingest"].poll_once(300)
        records += report.records
        for code, count in report.dead_letters_sent.items():
            sent[code] = sent.get(code, 0) + count
        if records >= 2:
            break
    assert (records, sent, report.dead_letters_pending) == (2, {"not_json": 1}, 0)
    assert sent_letters(rig) == [(0, "not_json: bad", b"bad", "0")]
    assert store.trajectory_count() == 2


def test_a_poison_record_next_to_a_good_one_is_isolated(rig: dict[str, Any]) -> None:
    good, poison = trajectories(2, poison={1})
    produce(rig, [good, poison])
    assert drain(rig["ingest"], 2) == 2
    store: StateStore = rig["store"]
    assert store.trajectory_count() == 1 and store.positions("g") == {(rig["topic"], 0): 2}
    assert sent_letters(rig) == [
        (1, f"unstorable: the store refused it: {refusal(store)}", poison, "0")
    ]


class LeaseThief:
    """TEST DOUBLE around the ingest's real StateStore: every call goes through to it; just
    before the `steal_at`-th ingest transaction another daemon takes the group's lease (as
    after a pause of this one longer than the lease's ttl)."""

    def __init__(self, store: StateStore, steal_at: int) -> None:
        self.store, self.steal_at, self.calls = store, steal_at, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def ingest(self, *args: Any, **kwargs: Any) -> IngestResult:
        self.calls += 1
        if self.calls == self.steal_at:
            self.store.release_ingest_lease(OURS)
            assert self.store.acquire_ingest_lease(THEIRS)
        return self.store.ingest(*args, **kwargs)


@pytest.mark.parametrize(("steal_at", "stored"), [(2, 0), (5, 1)])
def test_a_lease_lost_while_isolating_a_poison_record_stops_the_poll(
    rig: dict[str, Any], steal_at: int, stored: int
) -> None:
    """[good, poison]: transaction 1 (the batch) is refused, 2 (the batch again) too, 3 stores
    the good record, 4 refuses the poison, 5 moves the positions and outboxes its letter. Every
    one of them checks the lease: lost before 2, nothing is stored; lost before 5, the good
    record is (a redelivery is a duplicate) but no position moves and no letter is written."""
    store: StateStore = rig["store"]
    assert store.acquire_ingest_lease(OURS)
    reopen(rig, lease=OURS)
    thief = LeaseThief(store, steal_at)
    rig["ingest"].store = thief
    produce(rig, trajectories(2, poison={1}))
    with pytest.raises(IngestLeaseLost):
        drain(rig["ingest"], 2)
    assert thief.calls == steal_at
    assert store.trajectory_count() == stored
    assert store.positions("g") == {} and store.count_pending_dead_letters() == 0


def test_a_reader_takes_only_its_partitions_and_at_most_max_poll_records_a_poll(
    rig: dict[str, Any],
) -> None:
    """How daemon workers split a topic (`owns`), and the bound on one store transaction."""
    topic = f"{rig['topic']}-split"
    ensure_topics(rig["kafka"], [topic], 2)
    for i in range(6):
        publish(rig["producer"], topic, b"bad-%d" % i, partition=i % 2, timeout_s=5)
    config = dataclasses.replace(rig["ingest"].config, topic=topic, max_poll_records=2)
    ingest = TrajectoryIngest(
        rig["kafka"], config, rig["store"], rig["ingest"].outbox._send, owns=lambda t, p: p == 1
    )
    try:
        polled = [ingest.poll_once(300).records for _ in range(10)]
    finally:
        ingest.close()
    assert sum(polled) == 3 and max(polled) <= 2
    assert rig["store"].positions("g") == {(topic, 1): 3}
