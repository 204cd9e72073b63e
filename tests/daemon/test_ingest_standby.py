"""Two daemons with the same consumer group on one state store: one ingests, one stands by.

Why this and not a Kafka consumer group: see `Daemon._ingest_loop`. What an operator needs is
that two daemons configured alike never read the same partition twice (each malformed record
used to be dead-lettered once per daemon) and that a second one takes over when the first
goes away. Real broker, real SQLite store, two in-process daemons.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_durability import synthetic_trajectory, wait_for

from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka import BroadcastReader, KafkaSettings, make_producer, publish
from harness_r1.daemon.proposers import TemplateProposer
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.wiring import Built, build_daemon

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Settings:
    run = uuid.uuid4().hex[:8]
    return Settings(
        cache=tmp_path / "cache",
        state_url=f"sqlite:///{tmp_path / 'state.db'}",
        kafka_bootstrap=kafka_broker.bootstrap,
        trajectory_topic=f"traj-{run}",
        release_topic=f"rel-{run}",
        control_topic=f"ctl-{run}",
        kafka={"dead_letter_topic": f"dlq-{run}", "events_topic": f"events-{run}"},
        loop={"batch_size": 1_000_000, "batch_window_s": 1e9},
        metrics={"port": 0},
    )


@pytest.fixture
def pair(settings: Settings) -> Iterator[list[Built]]:
    built = [
        build_daemon(settings, proposer=TemplateProposer(), key=uuid.uuid4().hex)
        for _ in range(2)
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
    assert states == ["ok", "standby"], states
    assert dead_letter_count(settings) == 5  # not once per daemon

    active = first if first.daemon.ready()[1] == "ok" else second
    standby = second if active is first else first
    active.daemon.stop()
    produce(settings, 1_000, valid=30, malformed=2)
    wait_for(lambda: store.trajectory_count() == 90, 30, "the standby to take over")
    assert standby.daemon.ready() == (True, "ok")
    wait_for(lambda: store.count_pending_dead_letters() == 0, 30, "dead letters out")
    assert dead_letter_count(settings) == 7
