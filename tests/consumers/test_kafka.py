"""Kafka helpers against a real Kafka-protocol broker (embedded tansu): publish/poll, resumable
positions, every partition read without a consumer group, topic setup, broker restarts and a
broker that goes away under a reader."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker, free_port, metadata_probe
from harness_r1.consumers.kafka_client import KafkaSettings, KafkaUnavailableError
from harness_r1.consumers.producer import PublishError, make_producer, publish
from harness_r1.consumers.records import Record, parse_positions
from harness_r1.consumers.topic_setup import ensure_topics

pytestmark = pytest.mark.integration


def _topic(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:10]}"


def _poll_until(reader: BroadcastReader, count: int, timeout_s: float = 10.0) -> list[Record]:
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += reader.poll(timeout_ms=100)
    return records


@pytest.fixture
def settings(kafka_broker: EmbeddedBroker) -> KafkaSettings:
    return KafkaSettings(kafka_broker.bootstrap, request_timeout_ms=3_000, send_timeout_s=5.0)


@pytest.fixture
def producer(settings: KafkaSettings) -> Iterator[object]:
    producer = make_producer(settings)
    yield producer
    producer.close(timeout=2)


def test_settings_validation_says_how_to_fix() -> None:
    with pytest.raises(ValueError, match="host:port"):
        KafkaSettings("localhost")
    with pytest.raises(ValueError, match="empty"):
        KafkaSettings(" , ")
    with pytest.raises(ValueError, match="must be above fetch_max_wait_ms"):
        KafkaSettings("127.0.0.1:9092", request_timeout_ms=100, fetch_max_wait_ms=100)
    with pytest.raises(ValueError, match="send_timeout_s"):
        KafkaSettings("127.0.0.1:9092", request_timeout_ms=10_000, send_timeout_s=1.0)
    with pytest.raises(ValueError, match="poll_timeout_ms"):
        KafkaSettings("127.0.0.1:9092", poll_timeout_ms=-1)
    assert KafkaSettings("a:1, b:2").bootstrap_servers == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="topic:partition"):
        parse_positions({"nopartition": 1}, ["x"])
    with pytest.raises(ValueError, match=">= 0"):
        parse_positions({"x:0": -1}, ["x"])


def test_round_trip_with_keys_and_headers(settings: KafkaSettings, producer: object) -> None:
    topic = _topic("rt")
    ensure_topics(settings, [topic])
    sent = [
        publish(producer, topic, b"one", key=b"k1", headers=[("trace", b"abc"), ("n", b"1")]),
        publish(producer, topic, b"two"),
        publish(producer, topic, b"", key=b"k3", headers=[("empty", b"")]),
    ]
    assert sent == [(0, 0), (0, 1), (0, 2)]
    with BroadcastReader(settings, [topic]) as reader:
        records = _poll_until(reader, 3)
        assert [(r.offset, r.key, r.value) for r in records] == [
            (0, b"k1", b"one"),
            (1, None, b"two"),
            (2, b"k3", b""),
        ]
        assert records[0].headers == (("trace", b"abc"), ("n", b"1"))
        assert records[1].headers == ()
        assert records[2].headers == (("empty", b""),)
        assert all(r.topic == topic and r.partition == 0 for r in records)
        assert all(r.timestamp_ms > 1_600_000_000_000 for r in records)
        assert reader.positions() == {f"{topic}:0": 3}
        assert reader.connected and reader.last_error is None
        assert reader.poll(timeout_ms=100) == []


def test_positions_resume_exactly_after_the_last_returned_record(
    settings: KafkaSettings, producer: object
) -> None:
    topic = _topic("resume")
    ensure_topics(settings, [topic], partitions=2)
    for i in range(3):
        publish(producer, topic, f"a{i}".encode(), partition=0)
    publish(producer, topic, b"b0", partition=1)
    with BroadcastReader(settings, [topic]) as reader:
        assert reader.positions() == {}  # nothing returned yet: absent means from the beginning
        first = _poll_until(reader, 4)
        saved = reader.positions()
    assert sorted(r.value for r in first) == [b"a0", b"a1", b"a2", b"b0"]
    assert saved == {f"{topic}:0": 3, f"{topic}:1": 1}

    publish(producer, topic, b"a3", partition=0)
    publish(producer, topic, b"a4", partition=0)
    publish(producer, topic, b"b1", partition=1)
    with BroadcastReader(settings, [topic], saved) as reader:
        second = _poll_until(reader, 3)
        assert reader.poll(timeout_ms=300) == []  # nothing repeated
        assert reader.positions() == {f"{topic}:0": 5, f"{topic}:1": 2}
    assert [(r.partition, r.offset, r.value) for r in second if r.partition == 0] == [
        (0, 3, b"a3"),
        (0, 4, b"a4"),
    ]
    assert [(r.partition, r.offset, r.value) for r in second if r.partition == 1] == [(1, 1, b"b1")]

    # A partition missing from the positions starts at the beginning; other topics' entries are
    # ignored and not carried over.
    partial = {f"{topic}:0": 4, "another-topic:0": 9}
    with BroadcastReader(settings, [topic], partial) as reader:
        third = _poll_until(reader, 3)
        assert reader.positions() == {f"{topic}:0": 5, f"{topic}:1": 2}
    assert [(r.partition, r.value) for r in third if r.partition == 0] == [(0, b"a4")]
    assert [r.value for r in third if r.partition == 1] == [b"b0", b"b1"]


def test_reader_sees_every_partition_in_offset_order(
    settings: KafkaSettings, producer: object
) -> None:
    topic = _topic("parts")
    ensure_topics(settings, [topic], partitions=3)
    for i in range(12):
        publish(producer, topic, f"m{i}".encode(), partition=i % 3)
    with BroadcastReader(settings, [topic]) as reader:
        assert reader.assigned == (f"{topic}:0", f"{topic}:1", f"{topic}:2")
        records = _poll_until(reader, 12)
    assert len(records) == 12
    for part in range(3):
        mine = [r for r in records if r.partition == part]
        assert [r.offset for r in mine] == [0, 1, 2, 3]
        assert [r.value for r in mine] == [f"m{i}".encode() for i in range(part, 12, 3)]


def test_topic_created_after_the_reader_is_picked_up(
    settings: KafkaSettings, producer: object
) -> None:
    # What tansu allows of "partitions appear later": a topic that does not exist yet.
    early, late = _topic("early"), _topic("late")
    ensure_topics(settings, [early])
    with BroadcastReader(settings, [early, late], metadata_interval_s=0.2) as reader:
        assert reader.assigned == (f"{early}:0",)
        assert reader.poll(timeout_ms=50) == []
        ensure_topics(settings, [late], partitions=2)
        publish(producer, late, b"x0", partition=0)
        publish(producer, late, b"x1", partition=1)
        records = _poll_until(reader, 2)
        assert sorted((r.topic, r.partition, r.value) for r in records) == [
            (late, 0, b"x0"),
            (late, 1, b"x1"),
        ]
        assert set(reader.assigned) == {f"{early}:0", f"{late}:0", f"{late}:1"}


def test_ensure_topics_is_idempotent(settings: KafkaSettings) -> None:
    first, second = _topic("idem1"), _topic("idem2")
    ensure_topics(settings, [first], partitions=2)
    ensure_topics(settings, [first], partitions=2)
    ensure_topics(settings, [first, second, first], partitions=3)  # existing one left as it is
    with BroadcastReader(settings, [first, second]) as reader:
        assert reader.assigned == (
            f"{first}:0",
            f"{first}:1",
            f"{second}:0",
            f"{second}:1",
            f"{second}:2",
        )
    with pytest.raises(ValueError, match="invalid topic name"):
        ensure_topics(settings, ["has space"])
    with pytest.raises(ValueError, match="partitions"):
        ensure_topics(settings, [first], partitions=0)
    with pytest.raises(TypeError):
        ensure_topics(settings, first)


def test_publish_errors_are_clear(settings: KafkaSettings, producer: object) -> None:
    topic = _topic("err")
    ensure_topics(settings, [topic])
    with pytest.raises(PublishError, match="partition"):
        publish(producer, topic, b"x", partition=5)
    with pytest.raises(TypeError, match="bytes"):
        publish(producer, topic, "text")  # type: ignore[arg-type]


def test_embedded_broker_stop_and_start() -> None:
    with EmbeddedBroker() as broker:
        port = broker.port
        assert broker.running and broker.bootstrap == f"127.0.0.1:{port}"
        assert metadata_probe("127.0.0.1", port)
        log_dir = broker.log_path.parent
        broker.stop()
        assert not broker.running and not metadata_probe("127.0.0.1", port, timeout_s=0.5)
        broker.stop()  # idempotent
        broker.start()
        assert broker.running and broker.port == port
        settings = KafkaSettings(broker.bootstrap, request_timeout_ms=3_000, send_timeout_s=5.0)
        ensure_topics(settings, ["after-restart"])
        assert "tansu broker" in broker.log_tail()
    assert not broker.running and not log_dir.exists()


def test_reader_survives_a_stopped_broker() -> None:
    with EmbeddedBroker() as broker:
        settings = KafkaSettings(
            broker.bootstrap, request_timeout_ms=1_500, poll_timeout_ms=100, send_timeout_s=2.0
        )
        topic = _topic("away")
        ensure_topics(settings, [topic])
        producer = make_producer(settings)
        try:
            publish(producer, topic, b"before")
            with BroadcastReader(settings, [topic], metadata_interval_s=0.5) as reader:
                assert [r.value for r in _poll_until(reader, 1)] == [b"before"]
                broker.stop()
                deadline = time.monotonic() + 10
                while reader.last_error is None and time.monotonic() < deadline:
                    started = time.monotonic()
                    assert reader.poll() == []
                    # request timeout (the metadata check) + poll timeout + slack
                    assert time.monotonic() - started < 1.5 + 0.1 + 1.0
                assert reader.last_error is not None and not reader.connected
                assert reader.positions() == {f"{topic}:0": 1}

                # Back again (in-memory storage: empty, so the topic is made anew).
                broker.start()
                ensure_topics(settings, [topic])
                publish(producer, topic, b"after-1")
                publish(producer, topic, b"after-2")
                values: list[bytes] = []
                deadline = time.monotonic() + 15
                while b"after-2" not in values and time.monotonic() < deadline:
                    values += [r.value for r in reader.poll()]
                assert b"after-2" in values
                assert reader.connected and reader.last_error is None
        finally:
            producer.close(timeout=2)


def test_reader_without_broker_does_not_raise_or_leak_threads() -> None:
    settings = KafkaSettings(f"127.0.0.1:{free_port()}", request_timeout_ms=600, send_timeout_s=1)
    before = threading.active_count()
    started = time.monotonic()
    reader = BroadcastReader(settings, ["nowhere"], metadata_interval_s=0.1)
    try:
        assert reader.last_error is not None and not reader.connected
        assert reader.poll(timeout_ms=50) == []
        assert reader.poll(timeout_ms=50) == []
        assert reader.positions() == {}
    finally:
        reader.close()
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    assert threading.active_count() <= before
    with pytest.raises(RuntimeError, match="closed"):
        reader.poll()
    with pytest.raises(KafkaUnavailableError, match="cannot reach Kafka at 127.0.0.1"):
        make_producer(settings)


def test_every_codec_kafka_python_reads_is_installed() -> None:
    """A producer may compress with any of them (librdkafka's `compression.type`); one batch
    kafka-python cannot decode stops its reader (UnsupportedCodecError on every poll). The
    foreign-producer daemon test reads each of them end to end."""
    from kafka import codec

    assert codec.has_gzip() and codec.has_snappy() and codec.has_lz4() and codec.has_zstd()
    data = b"trajectory " * 100
    assert codec.snappy_decode(codec.snappy_encode(data)) == data
    assert codec.lz4_decode(codec.lz4_encode(data)) == data
    assert codec.zstd_decode(codec.zstd_encode(data)) == data
