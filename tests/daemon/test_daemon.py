"""The daemon end to end on the real broker (embedded tansu): trajectories produced to Kafka ->
ingest -> failure batch -> packet -> proposals -> sandbox + canary on real WebShop episodes ->
gate -> registry -> signed release on the release topic; plus dedup, the dead-letter topic and
the health endpoints."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from daemon_rig import ReferenceEngineer, canary_for, failed_trajectories

from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.deploy.signing import Keyring, generate_keypair, open_envelope

pytestmark = pytest.mark.integration


def wait_for(check: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def settings(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Settings:
    run = uuid.uuid4().hex[:8]
    private, _ = generate_keypair(tmp_path / "keys", "daemon-1")
    return Settings(
        cache=tmp_path / "cache",
        state_url=f"sqlite:///{tmp_path / 'state.db'}",
        kafka_bootstrap=kafka_broker.bootstrap,
        trajectory_topic=f"traj-{run}",
        release_topic=f"rel-{run}",
        control_topic=f"ctl-{run}",
        signing_key=private,
        kafka={"dead_letter_topic": f"dlq-{run}", "events_topic": f"events-{run}"},
        loop={"batch_size": 12, "k": 3, "guard_limit": 20, "release_target": "shop"},
        scheduler={"flush_interval_s": 0.5, "guard_interval_s": 1.0},
        metrics={"port": 0},
    )


@pytest.fixture
def daemon(settings: Settings) -> Iterator[Built]:
    built = build_daemon(
        settings, proposer=ReferenceEngineer(), canary_for=canary_for, key=uuid.uuid4().hex
    )
    built.health.start()
    built.daemon.start()
    yield built
    built.daemon.stop()
    built.health.stop()
    built.close()


def kafka(settings: Settings) -> KafkaSettings:
    assert settings.kafka_bootstrap
    return KafkaSettings(bootstrap=settings.kafka_bootstrap)


def test_trajectories_to_stored_canary_result_and_signed_release(
    settings: Settings, daemon: Built, tmp_path: Path
) -> None:
    producer = make_producer(kafka(settings))
    trajectories = failed_trajectories(12)
    for t in trajectories:
        publish(producer, settings.trajectory_topic, t.to_json_bytes(), timeout_s=10)
    for t in trajectories[:3]:  # redelivered: must change nothing
        publish(producer, settings.trajectory_topic, t.to_json_bytes(), timeout_s=10)
    producer.close(timeout=5)
    store = daemon.daemon.store
    wait_for(lambda: store.trajectory_count() == 12, 30, "ingest")
    wait_for(lambda: store.count_canary_results() == 3, 120, "a canary result")
    with BroadcastReader(kafka(settings), [settings.release_topic]) as reader:
        records = []
        wait_for(lambda: bool(records.extend(reader.poll(200)) or records), 30, "a release")
    keyring = Keyring.from_directory(tmp_path / "keys")
    release = open_envelope(records[0].value, keyring)
    assert release.kind == "overlay_release" and release.target == "shop"
    assert release.rollout_fraction == settings.loop.rollout_fraction
    assert store.trajectory_count() == 12
    metrics = httpx.get(f"http://127.0.0.1:{daemon.health.port}/metrics").text
    assert "harness_r1_trajectories_duplicate_total 3.0" in metrics
    assert 'harness_r1_gate_decisions_total{verdict="promote"} 1.0' in metrics
    assert httpx.get(f"http://127.0.0.1:{daemon.health.port}/readyz").status_code == 200


def test_malformed_messages_go_to_the_dead_letter_topic(settings: Settings, daemon: Built) -> None:
    producer = make_producer(kafka(settings))
    good = failed_trajectories(1)[0]
    bad = good.model_dump(mode="json")
    bad["schema_version"] = "7.0"
    import json

    publish(producer, settings.trajectory_topic, b"{not json", timeout_s=10)
    publish(producer, settings.trajectory_topic, json.dumps(bad).encode(), timeout_s=10)
    publish(producer, settings.trajectory_topic, good.to_json_bytes(), timeout_s=10)
    producer.close(timeout=5)
    store = daemon.daemon.store
    wait_for(lambda: store.trajectory_count() == 1, 30, "the good record after the bad ones")
    with BroadcastReader(kafka(settings), [settings.kafka.dead_letter_topic]) as reader:
        dead: list = []
        wait_for(lambda: bool(dead.extend(reader.poll(200))) or len(dead) >= 2, 30, "dlq")
    reasons = [dict(r.headers)["reason"].decode() for r in dead]
    assert reasons[0].startswith("not_json") or reasons[0].startswith("invalid")
    assert reasons[1].startswith("unsupported_version"), reasons
    assert {dict(r.headers)["source_offset"] for r in dead} == {b"0", b"1"}
    positions = store.positions(settings.kafka.group_id)
    assert sum(positions.values()) == 3  # the partition moved past all three


def test_registry_follows_a_rollback_published_elsewhere(
    settings: Settings, daemon: Built, tmp_path: Path
) -> None:
    """A signed rollback from another machine reaches the daemon's registry via the topic."""
    from datetime import UTC, datetime, timedelta

    from daemon_rig import ENV

    from harness_r1.contracts import ControlCommand, ControlKind
    from harness_r1.deploy.registry_records import OverlayState
    from harness_r1.deploy.signing import Signer, seal
    from harness_r1.sandbox.patchfile import reference_patches

    registry = daemon.daemon.loop.registry
    patch = next(iter(reference_patches(ENV).values()))
    overlay = registry.add(patch, "shop").overlay_id
    registry.transition(overlay, OverlayState.CANARY, actor="daemon", reason="test")
    assert settings.signing_key is not None
    signer = Signer.from_file(settings.signing_key)
    now = datetime.now(UTC)
    command = ControlCommand(
        command=ControlKind.ROLLBACK,
        command_id="elsewhere-1",
        target="shop",
        seq=1,
        key_id=signer.key_id,
        issued_at=now,
        expires_at=now + timedelta(minutes=5),
        revoke_overlay_id=overlay,
        actor="bob",
        reason="pager went off",
    )
    forged = command.model_copy(update={"revoke_overlay_id": "ov-000000000000"})
    producer = make_producer(kafka(settings))
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    intruder = Signer(signer.key_id, Ed25519PrivateKey.generate())
    publish(producer, settings.control_topic, seal(forged, intruder).to_json_bytes(), timeout_s=10)
    publish(producer, settings.control_topic, seal(command, signer).to_json_bytes(), timeout_s=10)
    producer.close(timeout=5)
    wait_for(lambda: registry.get(overlay).state is OverlayState.ROLLED_BACK, 30, "reconcile")
    assert registry.events(overlay)[-1].actor == "bob"
    metrics = httpx.get(f"http://127.0.0.1:{daemon.health.port}/metrics").text
    assert 'command="unknown",result="rejected_bad_signature"} 1.0' in metrics
    assert 'command="rollback",result="reconciled"} 1.0' in metrics


def test_a_failed_store_transaction_rereads_its_batch(settings: Settings, daemon: Built) -> None:
    """The store fails once (e.g. the database is briefly away): the batch it held is read
    again from the stored positions, so nothing is skipped."""
    store = daemon.daemon.store
    real = store.ingest
    failures = []

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not failures:
            failures.append(1)
            raise ConnectionError("database briefly away")
        return real(*args, **kwargs)

    store.ingest = flaky  # type: ignore[method-assign]
    producer = make_producer(kafka(settings))
    trajectories = failed_trajectories(6, offset=4)
    for t in trajectories:
        publish(producer, settings.trajectory_topic, t.to_json_bytes(), timeout_s=10)
    producer.close(timeout=5)
    wait_for(lambda: store.trajectory_count() == 6, 60, "all six after the failure")
    assert failures == [1]
