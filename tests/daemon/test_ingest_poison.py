"""One record can never stop ingestion, and a dead letter is published once per record.

On the real broker and a real SQLite store: a record that validation passes but the store
refuses (made real with a trigger that aborts its insert) is isolated and dead-lettered while
the rest of its batch is stored; a store that is down (its write lock held by another
connection) fails the poll without moving anything, and the retried batch publishes each dead
letter once (it used to publish them again on every retry: 29 malformed records became 134
dead letters); a broker that is away keeps dead letters in the outbox until it is back.
"""

from __future__ import annotations

import random
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
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
from harness_r1.daemon.ingest import IngestConfig, TrajectoryIngest
from harness_r1.daemon.store import StateStore

pytestmark = pytest.mark.integration

POISON_AGENT = "agent-poison"


@pytest.fixture
def rig(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Iterator[dict[str, Any]]:
    run = uuid.uuid4().hex[:8]
    kafka = KafkaSettings(
        bootstrap=kafka_broker.bootstrap, request_timeout_ms=3_000, send_timeout_s=3.0
    )
    topic, dlq = f"traj-{run}", f"dlq-{run}"
    ensure_topics(kafka, [topic, dlq], 1)
    db = tmp_path / "state.db"
    store = StateStore(f"sqlite:///{db}", busy_timeout_ms=200)
    with store._write_engine.begin() as conn:  # a real refusal by the database itself
        conn.execute(
            text(
                "CREATE TRIGGER poison BEFORE INSERT ON daemon_trajectories "
                f"WHEN NEW.agent_id = '{POISON_AGENT}' "
                "BEGIN SELECT RAISE(ABORT, 'poison record'); END"
            )
        )
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
        "db": db,
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


def test_a_record_the_store_refuses_is_isolated_and_dead_lettered(rig: dict[str, Any]) -> None:
    values = trajectories(40, poison={3, 17, 18, 39})
    produce(rig, values + [b"{broken"])
    assert drain(rig["ingest"], 41) == 41
    store: StateStore = rig["store"]
    assert store.trajectory_count() == 36
    assert store.positions("g") == {(rig["topic"], 0): 41}
    dead = dead_letters(rig)
    assert sorted(int(dict(r.headers)["source_offset"]) for r in dead) == [3, 17, 18, 39, 40]
    reasons = {int(dict(r.headers)["source_offset"]): dict(r.headers)["reason"] for r in dead}
    assert reasons[17].startswith(b"unstorable: the store refused it: IntegrityError")
    assert reasons[40].startswith(b"not_json")
    assert store.count_pending_dead_letters() == 0


def test_a_store_that_is_down_retries_the_batch_and_dead_letters_once(
    rig: dict[str, Any],
) -> None:
    values = trajectories(20, poison={5})
    malformed = [b"not json %d" % i for i in range(29)]
    produce(rig, values + malformed)
    blocker = sqlite3.connect(rig["db"], timeout=0.1)
    blocker.execute("BEGIN IMMEDIATE")  # the store's write lock, held elsewhere
    try:
        for _ in range(5):
            with pytest.raises(Exception, match="locked"):
                rig["ingest"].poll_once(1_000)
            rig["ingest"].close()  # as the daemon does: reopen from the stored positions
            rig["ingest"] = TrajectoryIngest(
                rig["kafka"], rig["ingest"].config, rig["store"], rig["ingest"].outbox._send
            )
    finally:
        blocker.rollback()
        blocker.close()
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
