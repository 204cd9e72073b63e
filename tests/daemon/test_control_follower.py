"""The daemon's control follower against the real broker: it accepts exactly what agents accept.

An operator once replayed an old, validly signed rollback after a newer pin: the daemon moved
the pinned overlay active -> rolled_back while every agent ignored the stale seq, and the
registry no longer said what the fleet ran. Here every command goes over a real Kafka topic
(embedded tansu), is read by the follower (its own BroadcastReader) and, record by record, by
a real agent-side OverlayClient; the follower's verdicts must match the agent's, and the
registry must name the overlay the agent runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.exc import OperationalError

import harness_r1.daemon.control as control_module
from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.consumers.records import Record
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.contracts import ControlCommand, ControlKind, HookCode, HookName, Patch
from harness_r1.daemon.control import COMMANDS, FOLLOWED_STREAM, RESULTS, ControlFollower
from harness_r1.deploy.client import ClientConfig, OverlayClient
from harness_r1.deploy.control_effect import APPLIED_STREAM
from harness_r1.deploy.publisher import Publisher, PublisherConfig
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.registry_records import OverlayState
from harness_r1.deploy.signing import Keyring, Signer, seal
from harness_r1.harness.hooks import HookSet, NoHooks

pytestmark = pytest.mark.integration

POOL = "pool-a"


def patch(tag: str) -> Patch:
    code = f"def hook(ctx, state):\n    return {{'note': {tag!r}}}\n"
    return Patch(
        env="dbbench", description=tag, hooks=[HookCode(hook=HookName.PRE_DECISION, code=code)]
    )


def no_hooks(_patch: Patch, _overlay_id: str) -> HookSet:
    return NoHooks()  # which overlay runs is what matters here, not its hooks


@dataclass
class Bench:
    """A broker topic pair, a registry file, the ops key, one agent fed record by record, and
    what the follower reported, in order."""

    kafka: KafkaSettings
    topics: PublisherConfig
    db_url: str
    signer: Signer
    registry: OverlayRegistry
    agent: OverlayClient
    producer: Any  # a KafkaProducer
    reports: list[tuple[str, str]] = field(default_factory=list)
    saved: list[dict[tuple[str, int], int]] = field(default_factory=list)
    agent_reader: BroadcastReader | None = None

    def follower(self, registry: OverlayRegistry | None = None, **kw: object) -> ControlFollower:
        reader = BroadcastReader(self.kafka, [self.topics.control_topic])
        return ControlFollower(
            reader,
            Keyring.of([self.signer]),
            registry or self.registry,
            lambda command, result: self.reports.append((command, result)),
            self.saved.append,
            **kw,  # type: ignore[arg-type]
        )

    def command(
        self,
        seq: int,
        kind: ControlKind,
        *,
        signer: Signer | None = None,
        age: timedelta = timedelta(0),
        **fields: object,
    ) -> bytes:
        """The exact bytes of a signed command, as another operator's machine would send it
        (nothing recorded in this registry). AGE moves its validity window into the past."""
        signer = signer or self.signer
        issued = datetime.now(UTC) - age
        payload = ControlCommand(
            command=kind,
            command_id=uuid.uuid4().hex,
            target=str(fields.pop("target", POOL)),
            seq=seq,
            key_id=signer.key_id,
            issued_at=issued,
            expires_at=issued + timedelta(minutes=30),
            actor="bob",
            reason=f"test {kind.value} {seq}",
            **fields,  # type: ignore[arg-type]
        )
        return seal(payload, signer).to_json_bytes()

    def send(self, *values: bytes) -> None:
        for value in values:
            publish(
                self.producer, self.topics.control_topic, value, key=POOL.encode(), timeout_s=10
            )

    def agent_takes(self, count: int) -> list[bool]:
        """The agent's verdict on the next COUNT control records, in topic order."""
        if self.agent_reader is None:
            self.agent_reader = BroadcastReader(self.kafka, [self.topics.control_topic])
        records = read(self.agent_reader, count)
        return [self.agent.handle(r.topic, r.value) for r in records]

    def active(self, registry: OverlayRegistry | None = None) -> str:
        record = (registry or self.registry).active(POOL)
        return "base" if record is None else record.overlay_id


def read(reader: BroadcastReader, count: int, timeout_polls: int = 100) -> list[Record]:
    records: list[Record] = []
    for _ in range(timeout_polls):
        records += reader.poll(100)
        if len(records) >= count:
            break
    assert len(records) == count, f"read {len(records)} of {count} records"
    return records


def follow(follower: ControlFollower, bench: Bench, count: int) -> list[str]:
    """Poll until the follower has handled COUNT more records; their results, in order."""
    start = len(bench.reports)
    for _ in range(100):
        follower.poll_once(timeout_ms=100)
        if len(bench.reports) - start >= count:
            break
    results = [result for _, result in bench.reports[start:]]
    assert len(results) == count, results
    return results


@pytest.fixture
def bench(kafka_broker: EmbeddedBroker, tmp_path: Path) -> Iterator[Bench]:
    kafka = KafkaSettings(bootstrap=kafka_broker.bootstrap)
    run = uuid.uuid4().hex[:8]
    topics = PublisherConfig(release_topic=f"rel-{run}", control_topic=f"ctl-{run}")
    ensure_topics(kafka, [topics.release_topic, topics.control_topic], partitions=2)
    db_url = f"sqlite:///{tmp_path / 'state.db'}"
    signer = Signer("ops-1", Ed25519PrivateKey.generate())
    registry = OverlayRegistry(db_url)
    config = ClientConfig(
        agent_id="agent-0",
        target=POOL,
        state_dir=tmp_path / "agent",
        release_topic=topics.release_topic,
        control_topic=topics.control_topic,
    )
    agent = OverlayClient(config, Keyring.of([signer]), no_hooks)
    producer = make_producer(kafka)
    yield Bench(kafka, topics, db_url, signer, registry, agent, producer)
    producer.close(timeout=5)
    registry.close()


def released_pair(bench: Bench) -> tuple[str, str]:
    """Overlays A and B released in that order through the real publisher (so the agent holds
    both envelopes): B active, A retired, in the registry and on the agent."""
    releases: list[tuple[str, bytes]] = []
    publisher = Publisher(
        bench.registry,
        bench.signer,
        lambda topic, value, key: releases.append((topic, value)),
        bench.topics,
    )
    a = bench.registry.add(patch("a"), POOL).overlay_id
    b = bench.registry.add(patch("b"), POOL).overlay_id
    publisher.release(a, actor="ops", reason="first")
    publisher.release(b, actor="ops", reason="second")
    for topic, value in releases:
        assert bench.agent.handle(topic, value)
    assert bench.agent.active_overlay_id == b == bench.active()
    return a, b


def test_follower_refuses_replays_reorders_and_expired_commands_as_agents_do(
    bench: Bench,
) -> None:
    a, b = released_pair(bench)
    follower = bench.follower()
    stranger = Signer("intruder", Ed25519PrivateKey.generate())
    forger = Signer("ops-1", Ed25519PrivateKey.generate())  # a known key id, the wrong key
    hour = timedelta(hours=1)

    rollback_1 = bench.command(1, ControlKind.ROLLBACK, revoke_overlay_id=b, overlay_id=a)
    steps: list[tuple[str, list[bytes], list[str], str]] = [
        # (what, records in topic order, follower results, overlay in force afterwards)
        ("a rollback to A", [rollback_1], ["reconciled"], a),
        ("a newer pin of B", [bench.command(2, ControlKind.PIN, overlay_id=b)], ["reconciled"], b),
        ("the old rollback replayed, byte for byte", [rollback_1], ["rejected_replay"], b),
        (
            "seq 4 then seq 3: the older one arrives late",
            [
                bench.command(4, ControlKind.PIN, overlay_id=a),
                bench.command(3, ControlKind.ROLLBACK, revoke_overlay_id=a, overlay_id=b),
            ],
            ["reconciled", "rejected_replay"],
            a,
        ),
        (
            "an expired pin and an expired pause, new seqs",
            [
                bench.command(5, ControlKind.PIN, overlay_id=b, age=hour),
                bench.command(6, ControlKind.PAUSE, age=hour),
            ],
            ["rejected_expired", "rejected_expired"],
            a,
        ),
        (
            "an expired rollback with a new seq is still applied (agents do)",
            [bench.command(7, ControlKind.ROLLBACK, revoke_overlay_id=a, overlay_id=b, age=hour)],
            ["reconciled"],
            b,
        ),
        (
            "an unknown key and a forged signature",
            [
                bench.command(8, ControlKind.PIN, overlay_id=a, signer=stranger),
                bench.command(9, ControlKind.PIN, overlay_id=a, signer=forger),
            ],
            ["rejected_unknown_key", "rejected_bad_signature"],
            b,
        ),
    ]
    for what, records, expected, overlay in steps:
        bench.send(*records)
        results = follow(follower, bench, len(records))
        agent_verdicts = bench.agent_takes(len(records))
        assert results == expected, what
        # the same verdict as the agent, record by record
        assert [not r.startswith("rejected_") for r in results] == agent_verdicts, what
        assert bench.active() == bench.agent.active_overlay_id == overlay, what

    assert bench.registry.get(a).state is OverlayState.ROLLED_BACK
    assert bench.registry.mark(POOL, FOLLOWED_STREAM) == bench.agent.state.control_hwm == 7
    assert bench.registry.mark(POOL, APPLIED_STREAM) == 7
    assert bench.reports[3:7] == [
        ("pin", "reconciled"),
        ("rollback", "rejected_replay"),
        ("pin", "rejected_expired"),  # its signature held: the command is named
        ("pause", "rejected_expired"),
    ]
    assert bench.reports[-2][0] == "unknown"  # untrusted bytes: not even the command name
    assert {c for c, _ in bench.reports} <= set(COMMANDS)  # the documented, bounded labels
    assert {r for _, r in bench.reports} <= set(RESULTS)
    events = bench.registry.events(b)
    assert events[-1].actor == "bob" and "seen on the control topic, seq 7" in events[-1].reason
    follower.reader.close()


def test_a_restarted_follower_accepts_nothing_old(bench: Bench) -> None:
    """A new follower object on a new registry connection, reading the topic from the start
    (its positions lost): every old command is refused and the registry does not move; a new
    command is still followed."""
    a, b = released_pair(bench)
    first = bench.follower()
    bench.send(
        bench.command(1, ControlKind.ROLLBACK, revoke_overlay_id=b, overlay_id=a),
        bench.command(2, ControlKind.PIN, overlay_id=b),
        bench.command(3, ControlKind.PAUSE),
    )
    assert follow(first, bench, 3) == ["reconciled", "reconciled", "noted"]
    first.reader.close()
    events_before = len(bench.registry.events(b))

    with OverlayRegistry(bench.db_url) as registry:
        again = bench.follower(registry)
        assert follow(again, bench, 3) == ["rejected_replay"] * 3
        assert bench.active(registry) == b and registry.get(a).state is OverlayState.RETIRED
        assert len(registry.events(b)) == events_before
        bench.send(bench.command(4, ControlKind.PIN, overlay_id=a))
        assert follow(again, bench, 1) == ["reconciled"]
        assert bench.active(registry) == a
        again.reader.close()
    assert bench.saved and all(bench.saved)  # positions were handed over after each batch


def test_one_failing_record_never_costs_the_rest_of_the_poll(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug on one record is counted as `error` and the rest of the batch is applied; a
    database error stops the batch at that record, the records before it are saved, and the
    next poll retries from it (nothing lost, nothing applied twice)."""
    a, b = released_pair(bench)
    real = control_module.record_control
    trouble: dict[int, BaseException] = {
        2: RuntimeError("a bug"),
        4: OperationalError("UPDATE", {}, Exception("database is locked")),
    }

    def flaky(registry: OverlayRegistry, command: ControlCommand, *, recorder: str) -> str:
        err = trouble.pop(command.seq, None)
        if err is not None:
            raise err
        return real(registry, command, recorder=recorder)

    monkeypatch.setattr(control_module, "record_control", flaky)
    bench.send(
        bench.command(1, ControlKind.PAUSE),
        bench.command(2, ControlKind.PIN, overlay_id=a),
        bench.command(3, ControlKind.RESUME),
        bench.command(4, ControlKind.PIN, overlay_id=a),
        bench.command(5, ControlKind.RESUME),
    )
    follower = bench.follower()
    raised = 0
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            try:
                follower.poll_once(timeout_ms=100)
            except OperationalError:
                raised += 1
                assert len(bench.reports) == 3  # 1-3 done; 4 failed on the database, kept
            if len(bench.reports) == 5:
                break
    assert raised == 1
    assert [result for _, result in bench.reports] == [
        "noted",
        "error",
        "noted",
        "reconciled",
        "noted",
    ]
    assert bench.active() == a
    failed = [e for e in logs if e["event"] == "control_command_failed"]
    assert failed and failed[0]["offset"] == 1 and "partition" in failed[0]
    assert sum(len(p) for p in bench.saved) >= 2  # saved before the failure and after
    follower.reader.close()


def test_two_daemons_on_one_database_keep_marks_of_their_own(bench: Bench) -> None:
    """Two daemons sharing a registry each follow the topic: with marks of their own the
    second finds each command applied (not a replay), and a real replay is refused by both."""
    a, b = released_pair(bench)
    first = bench.follower(mark_stream="control:daemon-1")
    second = bench.follower(mark_stream="control:daemon-2")
    pin = bench.command(1, ControlKind.PIN, overlay_id=a)
    bench.send(pin)
    assert follow(first, bench, 1) == ["reconciled"]
    assert follow(second, bench, 1) == ["already_applied"]
    bench.send(pin)  # the same bytes again
    assert follow(first, bench, 1) == ["rejected_replay"]
    assert follow(second, bench, 1) == ["rejected_replay"]
    assert bench.active() == a
    first.reader.close()
    second.reader.close()
