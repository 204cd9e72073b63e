"""`harness-r1 ingest skip`: a signed, audited order that moves the daemon's ingest forward.

Real broker, real daemon (in process) following the control topic with the operator's key:
the skip moves the stored position forward and ingest re-reads from there (the records passed
over are not stored); it is on the events topic with who and why; the same signed bytes
replayed are refused; a later skip to a lower offset never moves the position back; a skip
signed by an unknown key is refused."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from test_durability import synthetic_trajectory, wait_for
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.daemon.settings import Settings, load_settings
from harness_r1.daemon.store import IngestLease
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.deploy.publisher import Publisher, PublisherConfig
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.signing import Signer, generate_keypair
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration
runner = CliRunner()


@pytest.fixture
def config(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Path:
    run = uuid.uuid4().hex[:8]
    private, _ = generate_keypair(tmp_path / "keys", "ops-1")
    path = tmp_path / "daemon.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "cache": str(tmp_path / "cache"),
                "state_url": f"sqlite:///{tmp_path / 'state.db'}",
                "kafka_bootstrap": kafka_broker.bootstrap,
                "trajectory_topic": f"traj-{run}",
                "release_topic": f"rel-{run}",
                "control_topic": f"ctl-{run}",
                "signing_key": str(private),
                "keys_dir": str(tmp_path / "keys"),
                "kafka": {"dead_letter_topic": f"dlq-{run}", "events_topic": f"events-{run}"},
                "loop": {"batch_size": 1_000_000, "batch_window_s": 1e9},
                "metrics": {"port": 0},
            }
        )
    )
    return path


@pytest.fixture
def daemon(config: Path) -> Iterator[Built]:
    built = build_daemon(load_settings(config), proposer=TemplateWriter(), key=uuid.uuid4().hex)
    built.health.start()
    built.daemon.start()
    yield built
    built.daemon.stop()
    built.health.stop()
    built.close()


def skip(config: Path, offset: int) -> str:
    result = runner.invoke(
        app,
        [
            "ingest",
            "skip",
            "--partition",
            "0",
            "--offset",
            str(offset),
            "--config",
            str(config),
            "--reason",
            "undecodable batch",
            "--actor",
            "alice",
        ],
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def control_results(built: Built, command: str = "skip_offset") -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{built.health.port}/metrics", timeout=5).text
    out = {}
    for line in text.splitlines():
        if line.startswith(f'harness_r1_control_commands_seen_total{{command="{command}"'):
            result = line.split('result="')[1].split('"')[0]
            out[result] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_signed_skip_moves_ingest_forward_once_and_is_on_record(
    config: Path, daemon: Built, tmp_path: Path
) -> None:
    settings: Settings = load_settings(config)
    store = daemon.daemon.store
    group, topic = settings.kafka.group_id, settings.trajectory_topic
    # Another daemon of the group holds the ingest lease: this one is a standby, and its
    # control follower is the one that reads the skip (the ingesting daemon must obey it).
    other = IngestLease(f"ingest:{group}:{topic}", "another-daemon", ttl_s=600)
    store.release_ingest_lease(daemon.daemon.lease)  # type: ignore[arg-type]
    assert store.acquire_ingest_lease(other)
    wait_for(lambda: daemon.daemon.ready()[1].startswith("standby"), 30, "a standby")
    producer = make_producer(settings.kafka_client())
    rng = random.Random(2)
    for i in range(8):
        value = synthetic_trajectory(i, rng).to_json_bytes()
        publish(producer, topic, value, partition=0)

    past_end = runner.invoke(
        app,
        [
            "ingest",
            "skip",
            "--partition",
            "0",
            "--offset",
            "9",
            "--config",
            str(config),
            "--reason",
            "typo",
        ],
    )
    assert past_end.exit_code == 2 and "ends at offset 8" in past_end.output
    assert "seq 1" in skip(config, 5)
    wait_for(lambda: store.positions(group).get((topic, 0)) == 5, 30, "the skip applied")
    wait_for(lambda: control_results(daemon).get("reconciled") == 1.0, 10, "counted")
    store.release_ingest_lease(other)  # the other daemon stops: this one takes over
    wait_for(lambda: store.positions(group).get((topic, 0)) == 8, 30, "ingest after the skip")
    assert store.trajectory_count() == 3  # offsets 5, 6, 7; 0-4 were skipped on purpose

    with BroadcastReader(settings.kafka_client(), [settings.control_topic]) as reader:
        commands = [r for _ in range(5) for r in reader.poll(300)]
    assert len(commands) == 1
    publish(producer, settings.control_topic, commands[0].value)  # the same bytes again
    wait_for(lambda: control_results(daemon).get("rejected_replay") == 1.0, 30, "replay refused")

    assert "seq 2" in skip(config, 2)  # a new order to go back: never applied
    wait_for(lambda: control_results(daemon).get("already_applied") == 1.0, 30, "not backwards")
    assert store.positions(group).get((topic, 0)) == 8

    publisher = Publisher(
        OverlayRegistry(settings.registry_url()),
        Signer.from_file(settings.require_signing_key()),
        lambda t, v, k: publish(producer, t, v, key=k) and None,
        PublisherConfig(release_topic=settings.release_topic, control_topic=settings.control_topic),
    )
    publisher.skip_offset(group, topic, 0, 50, actor="mallory", reason="past the end, signed")
    publisher.skip_offset(group, "other-topic", 0, 1, actor="mallory", reason="not ours")
    wait_for(lambda: control_results(daemon).get("out_of_range") == 2.0, 30, "out of range")
    assert store.positions(group).get((topic, 0)) == 8

    foreign, _ = generate_keypair(tmp_path / "other", "ops-1")  # same key id, other key
    forged = config.with_name("forged.yaml")
    forged.write_text(
        config.read_text().replace(str(tmp_path / "keys" / "ops-1.key"), str(foreign))
    )
    assert "seq 5" in skip(forged, 8)
    wait_for(
        # a forged command's bytes cannot be trusted, not even its kind: counted as "unknown"
        lambda: control_results(daemon, "unknown").get("rejected_bad_signature") == 1.0,
        30,
        "forgery refused",
    )
    assert store.positions(group).get((topic, 0)) == 8

    with BroadcastReader(settings.kafka_client(), [settings.kafka.events_topic]) as reader:
        events = [json.loads(r.value) for _ in range(5) for r in reader.poll(300)]
    skipped = [e for e in events if e.get("event") == "ingest_offset_skipped"]
    assert len(skipped) == 1
    expected = {
        "group": group,
        "partition": 0,
        "from_offset": 0,
        "to_offset": 5,
        "records_skipped": 5,
        "actor": "alice",
        "reason": "undecodable batch",
        "key_id": "ops-1",
    }
    assert {k: skipped[0][k] for k in expected} == expected
    producer.close(timeout=2)
