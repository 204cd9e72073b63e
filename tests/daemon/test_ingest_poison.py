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

import json
import random
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import text
from test_durability import synthetic_trajectory

from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka import (
    BroadcastReader,
    KafkaSettings,
    ensure_topics,
    make_producer,
    publish,
)
from harness_r1.daemon.ingest import (
    ALL_REFUSED_MIN,
    IngestConfig,
    StoreRefusedEverything,
    TrajectoryIngest,
)
from harness_r1.daemon.store import StateStore

pytestmark = pytest.mark.integration

POISON_AGENT = "agent-poison"


def refuse_poison(store: StateStore) -> None:
    """A real refusal by the database itself: a trigger (SQLite) or a CHECK (PostgreSQL)."""
    with store._write_engine.begin() as conn:
        if store._dialect == "sqlite":
            conn.execute(
                text(
                    "CREATE TRIGGER poison BEFORE INSERT ON daemon_trajectories "
                    f"WHEN NEW.agent_id = '{POISON_AGENT}' "
                    "BEGIN SELECT RAISE(ABORT, 'poison record'); END"
                )
            )
        else:
            conn.execute(
                text(
                    "ALTER TABLE daemon_trajectories ADD CONSTRAINT poison "
                    f"CHECK (agent_id <> '{POISON_AGENT}')"
                )
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

    produce(rig, trajectories(ALL_REFUSED_MIN, poison=set(range(ALL_REFUSED_MIN))))
    with pytest.raises(StoreRefusedEverything):
        drain(rig["ingest"], ALL_REFUSED_MIN)
    assert store.positions("g") == {(rig["topic"], 0): 20}
    assert store.count_pending_dead_letters() == 0 and not dead_letters(rig)


def reopen(rig: dict[str, Any]) -> None:
    """What the daemon does after a failed poll: a new reader from the stored positions."""
    rig["ingest"].close()
    rig["ingest"] = TrajectoryIngest(
        rig["kafka"], rig["ingest"].config, rig["store"], rig["ingest"].outbox._send
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
    ingestion goes on meanwhile and the letters are published once it is back."""
    produce(rig, [b"bad-1", b"bad-2"])
    with EmbeddedBroker() as dlq_broker:
        kafka = KafkaSettings(
            bootstrap=dlq_broker.bootstrap, request_timeout_ms=1_000, send_timeout_s=1.0
        )
        ensure_topics(kafka, [rig["dlq"]], 1)
        producer = make_producer(kafka)

        def send(topic: str, value: bytes, key: bytes | None, headers: Any, ts: int) -> None:
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
        dlq_broker.start()
        ensure_topics(kafka, [rig["dlq"]], 1)  # in-memory storage: the topic is new again
        sent: dict[str, int] = {}
        for _ in range(20):
            later = ingest.poll_once(200)
            for code, count in later.dead_letters_sent.items():
                sent[code] = sent.get(code, 0) + count
            if later.dead_letters_pending == 0 and sent:
                break
        assert sent == {"not_json": 2}
        with BroadcastReader(kafka, [rig["dlq"]]) as reader:
            letters: list[Any] = []
            for _ in range(10):
                letters.extend(reader.poll(300))
        assert [r.value for r in letters] == [b"bad-1", b"bad-2"]
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
