"""`harness-r1 deadletter list|redrive` against the real broker, in the flow an operator
follows: records dead-lettered as too_large, the limit raised, the records re-driven from the
dead-letter topic and stored; a truncated one refused; a re-driven copy deduplicated."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest
import yaml
from test_durability import synthetic_trajectory
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.daemon.ingest import IngestConfig, TrajectoryIngest
from harness_r1.daemon.settings import load_settings
from harness_r1.daemon.store import StateStore

pytestmark = pytest.mark.integration
runner = CliRunner()


def test_list_then_redrive_after_the_limit_is_raised(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    run = uuid.uuid4().hex[:8]
    config = tmp_path / "daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka_bootstrap": kafka_broker.bootstrap,
                "trajectory_topic": f"traj-{run}",
                "state_url": f"sqlite:///{tmp_path / 'state.db'}",
                "kafka": {"dead_letter_topic": f"dlq-{run}", "group_id": "g"},
            }
        )
    )
    settings = load_settings(config)
    kafka = settings.kafka_client()
    ensure_topics(kafka, [settings.trajectory_topic, settings.kafka.dead_letter_topic], 1)
    producer = make_producer(kafka)
    rng = random.Random(5)
    sized = [synthetic_trajectory(i, rng).to_json_bytes() for i in range(100)]
    big = [v for v in sized if len(v) > 1_200][:4]
    assert len(big) == 4
    big, huge = big[:3], big[3]
    for value in big:
        publish(producer, settings.trajectory_topic, value, key=b"k", headers=[("h", b"1")])
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")

    def send(topic: str, value: bytes, key: bytes | None, headers: object, ts: int) -> None:
        publish(producer, topic, value, key=key, headers=headers, timestamp_ms=ts)  # type: ignore[arg-type]

    def ingest_all(max_bytes: int, dead_max: int, expected: int) -> None:
        config_ = IngestConfig(
            topic=settings.trajectory_topic,
            group="g",
            dead_letter_topic=settings.kafka.dead_letter_topic,
            max_record_bytes=max_bytes,
            max_dead_letter_bytes=dead_max,
        )
        ingest = TrajectoryIngest(kafka, config_, store, send)
        seen = 0
        for _ in range(30):
            seen += ingest.poll_once(300).records
            if seen >= expected:
                break
        ingest.close()

    # too small a limit: all three dead-lettered, whole (their copies fit)
    ingest_all(max_bytes=1_024, dead_max=100_000, expected=3)
    assert store.trajectory_count() == 0
    listed = runner.invoke(app, ["deadletter", "list", "--config", str(config), "--json"])
    assert listed.exit_code == 0, listed.output
    views = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [v["reason_code"] for v in views] == ["too_large"] * 3
    assert not any(v["truncated"] for v in views)

    table = runner.invoke(app, ["deadletter", "list", "--config", str(config)])
    assert table.exit_code == 0 and "3 dead letters" in table.stdout
    # the store's outbox and the topic agree, and the command says so
    said = " ".join(table.stdout.split())
    assert "the store's outbox holds 3 for group g: 0 pending" in said, said
    assert "0 published but no longer on the topic" in said and "topic holds 0 the outbox" in said
    assert views[0]["dead_letter_id"] in table.stdout  # whole ids, even when piped

    # one more, dead-lettered with a cut copy: it cannot be re-driven
    publish(producer, settings.trajectory_topic, huge)
    ingest_all(max_bytes=1_024, dead_max=512, expected=1)
    views = [
        json.loads(line)
        for line in runner.invoke(
            app, ["deadletter", "list", "--config", str(config), "--json"]
        ).stdout.splitlines()
    ]
    assert [v["truncated"] for v in views] == [False, False, False, True]

    redriven = runner.invoke(
        app, ["deadletter", "redrive", "--reason", "too_large", "--config", str(config)]
    )
    assert redriven.exit_code == 0, redriven.output
    assert redriven.stdout.count("re-drove ") == 3
    assert "truncated" in redriven.stderr

    with BroadcastReader(kafka, [settings.trajectory_topic]) as reader:
        again = [r for _ in range(6) for r in reader.poll(300)][4:]  # after the 4 originals
    assert [r.value for r in again] == big
    for record in again:
        headers = dict(record.headers)
        assert record.key == b"k" and headers["h"] == b"1"  # the original key and headers
        assert headers["redriven_from"].decode().startswith("g/")
    ingest_all(max_bytes=1_000_000, dead_max=100_000, expected=3)  # the limit raised
    assert store.trajectory_count() == 3
    again = runner.invoke(
        app, ["deadletter", "redrive", views[0]["dead_letter_id"], "--config", str(config)]
    )
    assert again.exit_code == 0, again.output
    ingest_all(max_bytes=1_000_000, dead_max=100_000, expected=1)
    assert store.trajectory_count() == 3  # a second re-drive is deduplicated
    missing = runner.invoke(app, ["deadletter", "redrive", "nope", "--config", str(config)])
    assert missing.exit_code == 1 and "not on the dead-letter topic" in missing.stderr
    producer.close(timeout=2)
    store.close()
