"""Two daemons with the same consumer group on one state store: one ingests, one stands by.

Why this and not a Kafka consumer group: see `Daemon._ingest_loop`. What an operator needs is
that two daemons configured alike never read the same partition twice (each malformed record
used to be dead-lettered once per daemon) and that a second one takes over when the first
goes away. Real broker, real SQLite store, two in-process daemons.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_rig import ingest_settings
from test_durability import synthetic_trajectory, wait_for

from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.store import StateStore
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Settings:
    return ingest_settings(tmp_path, kafka_broker.bootstrap)


@pytest.fixture
def pair(settings: Settings) -> Iterator[list[Built]]:
    built = [
        build_daemon(settings, proposer=TemplateWriter(), key=uuid.uuid4().hex) for _ in range(2)
    ]
    for b in built:
        b.daemon.start()
    yield built
    for b in built:
        b.daemon.stop()
        b.close()


def produce(settings: Settings, start: int, valid: int, malformed: int) -> None:
    assert settings.kafka_bootstrap
    producer = make_producer(KafkaSettings(bootstrap=settings.kafka_bootstrap))
    rng = random.Random(start)
    for i in range(valid):
        value = synthetic_trajectory(start + i, rng).to_json_bytes()
        publish(producer, settings.trajectory_topic, value, timeout_s=10)
    for i in range(malformed):
        publish(producer, settings.trajectory_topic, b"broken %d" % (start + i), timeout_s=10)
    producer.close(timeout=5)


def dead_letter_ids(settings: Settings) -> list[bytes]:
    assert settings.kafka_bootstrap
    kafka = KafkaSettings(bootstrap=settings.kafka_bootstrap)
    with BroadcastReader(kafka, [settings.kafka.dead_letter_topic]) as reader:
        records = [r for _ in range(8) for r in reader.poll(300)]
    return [dict(r.headers)["dead_letter_id"] for r in records]


def dead_letter_count(settings: Settings) -> int:
    assert settings.kafka_bootstrap
    kafka = KafkaSettings(bootstrap=settings.kafka_bootstrap)
    with BroadcastReader(kafka, [settings.kafka.dead_letter_topic]) as reader:
        return sum(len(reader.poll(300)) for _ in range(8))


def test_one_daemon_ingests_the_other_stands_by_then_takes_over(
    settings: Settings, pair: list[Built]
) -> None:
    first, second = pair
    produce(settings, 0, valid=60, malformed=5)
    store = first.daemon.store
    wait_for(lambda: store.trajectory_count() == 60, 30, "ingest by one of the two")
    wait_for(lambda: store.count_pending_dead_letters() == 0, 30, "dead letters out")
    states = sorted(b.daemon.ready()[1].split(":")[0] for b in pair)
    assert states == ["ready", "standby"], states
    assert dead_letter_count(settings) == 5  # not once per daemon

    active = first if first.daemon.ready()[1] == "ready" else second
    standby = second if active is first else first
    active.daemon.stop()
    produce(settings, 1_000, valid=30, malformed=2)
    wait_for(lambda: store.trajectory_count() == 90, 30, "the standby to take over")
    assert standby.daemon.ready() == (True, "ready")
    wait_for(lambda: store.count_pending_dead_letters() == 0, 30, "dead letters out")
    assert dead_letter_count(settings) == 7


def test_a_killed_daemon_is_replaced_and_nothing_is_lost_or_doubled(
    settings: Settings, tmp_path: Path
) -> None:
    """Two `harness-r1 run` processes on one config: SIGKILL the ingesting one, then send more;
    the standby takes over once the lease runs out (15 s), and in the end every valid record
    is stored once and every malformed one dead-lettered once."""
    import signal

    import httpx
    import yaml
    from test_durability import DaemonProcess

    config = tmp_path / "daemon.yaml"
    doc = json.loads(settings.model_dump_json())
    doc["metrics"]["log_level"] = "warning"
    config.write_text(yaml.safe_dump({k: v for k, v in doc.items() if v is not None}))
    procs = [DaemonProcess(config, tmp_path / f"daemon-{i}.log") for i in range(2)]
    try:
        for proc in procs:
            proc.wait_started()
        produce(settings, 0, valid=200, malformed=5)
        store = StateStore(settings.registry_url())
        wait_for(lambda: store.trajectory_count() >= 50, 60, "ingest under way")

        def ready_text(proc: DaemonProcess) -> str:
            port = int(re.findall(rb'"url": "http://[^:]+:(\d+)"', proc.log.read_bytes())[0])
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).text

        active = next(p for p in procs if not ready_text(p).startswith("standby"))
        standby = next(p for p in procs if p is not active)
        active.process.send_signal(signal.SIGKILL)
        active.process.wait(timeout=10)
        produce(settings, 10_000, valid=100, malformed=3)
        wait_for(lambda: store.trajectory_count() == 300, 90, "the standby to take over")
        wait_for(lambda: store.count_pending_dead_letters() == 0, 30, "dead letters out")
        assert ready_text(standby).startswith("ready")
        ids = dead_letter_ids(settings)
        assert len(set(ids)) == 8  # every malformed record dead-lettered
        # ... once, but for the one window the outbox documents: SIGKILL between the broker's
        # ack of a letter and its mark publishes that letter again, with the same id
        assert len(ids) - len(set(ids)) <= 1, ids
        store.close()
    finally:
        for proc in procs:
            if proc.process.poll() is None:
                proc.process.send_signal(signal.SIGTERM)
                proc.process.wait(timeout=30)
