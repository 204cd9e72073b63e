"""Operators' CLIs and the daemon's control follower racing on one registry, with a fleet.

What was seen: the daemon logged `control_follow_error InvalidTransition` and skipped the rest
of its poll; `overlay rollback` exited 1 with a traceback after it had published. Here 50
rollback/pin commands go out from five threads, each through its own Publisher with its own
registry connection and producer (five operators' CLIs), with random delays around the send
(before the publisher fence they made seqs reach the broker out of order; now they must not) and
the follower often records a command before its CLI does. The daemon's ControlFollower follows
the topic and a fleet of real OverlayClients obeys it, all on the real broker and the real
database (SQLite, and PostgreSQL when one answers).

"registry == fleet", precisely: once every agent has accepted the newest command (its control
high-water mark is the highest seq published) and the follower has read every command,
1. every agent runs the same overlay, and it is the registry's active overlay of the pool
   ("base" when the registry has none active);
2. that overlay is the destination named by the highest-seq command: every command here names
   its destination (pin ID, rollback --to ID/base), every agent accepts the highest seq
   whenever it arrives, and the registry applies commands only in increasing seq order;
3. the follower refused exactly the commands each agent refused (same partition, same order,
   same rules), and the registry's marks stand at the highest seq.
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from deploy_rig import TaggedHooks, make_patch
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

import harness_r1.deploy.publisher as publisher_module
from harness_r1.cli.app import app
from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.contracts import ControlCommand, ControlKind, Patch
from harness_r1.daemon.control import FOLLOWED_STREAM, ControlFollower
from harness_r1.deploy.client import ClientConfig, OverlayClient
from harness_r1.deploy.control_effect import APPLIED_STREAM
from harness_r1.deploy.publisher import Publisher, PublisherConfig
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.registry_records import OverlayState
from harness_r1.deploy.signing import Keyring, Signer

pytestmark = pytest.mark.integration

POOL = "pool-a"
OVERLAYS = 4
PUBLISHERS = 5
PER_PUBLISHER = 10
AGENTS = 6
PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database: a SQLite file, or a new PostgreSQL database of its own (so nothing
    else running on the server can drop the tables under the test)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    pytest.importorskip("psycopg")
    server = create_engine(
        PG_SERVER, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 2}
    )
    name = f"race_{uuid.uuid4().hex[:10]}"
    try:
        with server.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    except Exception as err:  # any failure means "no usable server here"
        server.dispose()
        pytest.skip(f"no PostgreSQL answering at {PG_SERVER}: {type(err).__name__}: {err}")
    try:
        yield PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with server.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        server.dispose()


def cheap_hooks(patch: Patch, overlay_id: str) -> TaggedHooks:
    return TaggedHooks(overlay_id)  # no sandbox worker per swap: 2 cores, hundreds of swaps


def test_fifty_commands_racing_cli_and_daemon_leave_registry_equal_to_fleet(
    kafka_broker: EmbeddedBroker, db_url: str, tmp_path: Path
) -> None:
    kafka = KafkaSettings(bootstrap=kafka_broker.bootstrap)
    run = uuid.uuid4().hex[:8]
    topics = PublisherConfig(release_topic=f"rel-{run}", control_topic=f"ctl-{run}")
    ensure_topics(kafka, [topics.release_topic, topics.control_topic], partitions=2)
    signer = Signer("ops-1", Ed25519PrivateKey.generate())
    keyring = Keyring.of([signer])
    registry = OverlayRegistry(db_url)
    producers = [make_producer(kafka) for _ in range(PUBLISHERS + 1)]

    def sender(index: int, rng: random.Random | None = None):  # type: ignore[no-untyped-def]
        def send(topic: str, value: bytes, key: bytes | None) -> None:
            if rng is not None:
                time.sleep(rng.uniform(0, 0.015))  # seq taken: the fence keeps others waiting
            publish(producers[index], topic, value, key=key, timeout_s=10)
            if rng is None:
                return
            if index == 0:  # this CLI always records after the daemon has followed the command
                seq = seq_of(value)
                wait_for(lambda: daemon_registry.mark(POOL, FOLLOWED_STREAM) >= seq, f"seq {seq}")
            else:
                time.sleep(rng.uniform(0, 0.06))  # the daemon may record it before the CLI

        return send

    # the pool: four overlays released in turn (every agent holds every envelope), the last
    # one active
    overlays = [registry.add(make_patch(f"o{i}"), POOL).overlay_id for i in range(OVERLAYS)]
    setup = Publisher(registry, signer, sender(PUBLISHERS), topics)
    for overlay_id in overlays:
        setup.release(overlay_id, actor="ops", reason="setup")

    fleet_topics = [topics.release_topic, topics.control_topic]
    fleet = [
        OverlayClient(
            ClientConfig(
                agent_id=f"agent-{i}",
                target=POOL,
                state_dir=tmp_path / f"agent-{i}",
                release_topic=topics.release_topic,
                control_topic=topics.control_topic,
            ),
            keyring,
            cheap_hooks,
            source_factory=lambda positions: BroadcastReader(kafka, fleet_topics, positions),
        )
        for i in range(AGENTS)
    ]
    for client in fleet:
        client.start(interval_ms=50)
    wait_for(lambda: all(c.active_overlay_id == overlays[-1] for c in fleet), "the releases")

    # the daemon's side: its own registry connection, looping like Daemon._control_loop
    daemon_registry = OverlayRegistry(db_url)
    reports: list[tuple[str, str]] = []
    follower = ControlFollower(
        BroadcastReader(kafka, [topics.control_topic]),
        keyring,
        daemon_registry,
        lambda command, result: reports.append((command, result)),
    )
    escaped: list[BaseException] = []
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            try:
                follower.poll_once(timeout_ms=50)
            except Exception as err:  # noqa: BLE001 - collected: the test asserts none
                escaped.append(err)

    follow_thread = threading.Thread(target=follow, name="follower")
    follow_thread.start()

    # five operators at once
    sent: list[tuple[int, str, str, int]] = []  # (seq, destination, recording result, CLI)
    lock = threading.Lock()
    start = threading.Barrier(PUBLISHERS)

    def operator(index: int) -> None:
        rng = random.Random(index)
        own = OverlayRegistry(db_url)
        publisher = Publisher(own, signer, sender(index, rng), topics)
        try:
            start.wait()
            for _ in range(PER_PUBLISHER):
                time.sleep(rng.uniform(0, 0.08))  # an operator's pace: the follower keeps up
                dest = rng.choice([*overlays, "base"])
                if rng.random() < 0.5:
                    command = publisher.control(
                        ControlKind.PIN, POOL, actor=f"op{index}", reason="race", overlay_id=dest
                    )
                else:
                    revoke = rng.choice([o for o in overlays if o != dest])
                    command = publisher.control(
                        ControlKind.ROLLBACK,
                        POOL,
                        actor=f"op{index}",
                        reason="race",
                        overlay_id=dest,
                        revoke_overlay_id=revoke,
                    )
                with lock:
                    sent.append((command.seq, dest, str(publisher.last_recorded), index))
        except BaseException as err:  # noqa: BLE001 - collected: the test asserts none
            escaped.append(err)
        finally:
            own.close()

    operators = [threading.Thread(target=operator, args=(i,)) for i in range(PUBLISHERS)]
    for thread in operators:
        thread.start()
    for thread in operators:
        thread.join(timeout=60)
    assert not escaped, escaped
    total = PUBLISHERS * PER_PUBLISHER
    assert sorted(seq for seq, *_ in sent) == list(range(1, total + 1))
    top_seq, decisive, *_ = max(sent)

    wait_for(
        lambda: follower.seen >= total and all(c.state.control_hwm == top_seq for c in fleet),
        "every agent on the newest command, the follower through every command",
    )
    stop.set()
    follow_thread.join(timeout=10)
    for client in fleet:
        client.close()
    follower.reader.close()
    for producer in producers:
        producer.close(timeout=5)

    # nothing escaped anywhere
    assert not escaped, escaped
    assert not any(result == "error" for _, result in reports), reports
    assert all("error" not in c.rejections for c in fleet), [c.rejections for c in fleet]
    assert {recorded for _, _, recorded, _ in sent} <= {
        "reconciled",
        "already_applied",
        "superseded",
    }
    # the CLI that always came second found its commands recorded (or overtaken), no crash
    assert {recorded for _, _, recorded, cli in sent if cli == 0} <= {
        "already_applied",
        "superseded",
    }

    # registry == fleet (the module docstring says exactly what that means)
    with OverlayRegistry(db_url) as fresh:
        record = fresh.active(POOL)
        in_registry = "base" if record is None else record.overlay_id
        assert {c.active_overlay_id for c in fleet} == {in_registry} == {decisive}
        assert fresh.mark(POOL, FOLLOWED_STREAM) == fresh.mark(POOL, APPLIED_STREAM) == top_seq
    replays = {c.rejections.get("replay", 0) for c in fleet}
    results = Counter(result for _, result in reports)
    assert replays == {results["rejected_replay"]}
    assert set(results) <= {"reconciled", "already_applied", "superseded", "rejected_replay"}
    # the publisher fence: every command reached the broker in seq order, so neither an agent
    # nor the follower ever saw one as a replay; the recording race (the CLIs against the
    # follower) did happen: the CLI that always records second found its commands applied
    assert results["rejected_replay"] == 0 and replays == {0}
    assert any(recorded == "already_applied" for _, _, recorded, cli in sent if cli == 0)
    first = Counter(
        event.evidence.get("recorded_by")
        for overlay_id in [*overlays]
        for event in registry.events(overlay_id)
        if "recorded_by" in event.evidence
    )
    recorded_by_cli = Counter(recorded for _, _, recorded, _ in sent)
    print(f"follower: {dict(results)}; CLIs: {dict(recorded_by_cli)}; events by: {dict(first)}")

    registry.close()
    daemon_registry.close()


def seq_of(envelope: bytes) -> int:
    """The seq inside a signed envelope (the test's own bytes: no verification needed)."""
    payload = json.loads(base64.b64decode(json.loads(envelope)["payload_b64"]))
    return int(payload["seq"])


def wait_for(condition, what: str, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not reached in {timeout_s}s: {what}")


def test_a_published_cli_command_exits_0_and_the_daemon_records_it(
    kafka_broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`overlay rollback` publishes, then cannot write the registry (locked past every retry):
    it still exits 0 (the agents obey the command; reporting failure would invite a second,
    different command), says so, and the daemon's follower records it from the topic."""
    runner = CliRunner()
    keys = tmp_path / "keys"
    assert runner.invoke(app, ["keys", "generate", "ops-1", "--dir", str(keys)]).exit_code == 0
    run = uuid.uuid4().hex[:8]
    env = {
        "HARNESS_R1_CACHE": str(tmp_path / "cache"),
        "HARNESS_R1_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
        "HARNESS_R1_SIGNING_KEY": str(keys / "ops-1.key"),
        "HARNESS_R1_RELEASE_TOPIC": f"rel-{run}",
        "HARNESS_R1_CONTROL_TOPIC": f"ctl-{run}",
        "USER": "alice",
    }
    (tmp_path / "cache").mkdir()
    registry = OverlayRegistry(f"sqlite:///{tmp_path / 'cache' / 'state.db'}")
    a, b = (registry.add(make_patch(tag), POOL).overlay_id for tag in ("a", "b"))
    for overlay_id in (a, b):
        result = runner.invoke(app, ["overlay", "release", overlay_id], env=env)
        assert result.exit_code == 0, result.output

    def locked(*_args: object, **_kw: object) -> str:
        raise OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked"))

    monkeypatch.setattr(publisher_module, "record_control", locked)
    result = runner.invoke(app, ["overlay", "rollback", "--target", POOL, "--to", a], env=env)
    assert result.exit_code == 0, result.output
    assert "note: published seq 1" in result.output
    assert registry.get(b).state is OverlayState.ACTIVE  # not recorded by the CLI
    monkeypatch.undo()

    follower = ControlFollower(
        BroadcastReader(
            KafkaSettings(bootstrap=kafka_broker.bootstrap), [env["HARNESS_R1_CONTROL_TOPIC"]]
        ),
        Keyring.from_directory(keys),
        registry,
    )
    wait_for(lambda: bool(follower.poll_once(timeout_ms=100)), "the follower reads the rollback")
    assert registry.get(b).state is OverlayState.ROLLED_BACK
    assert registry.get(a).state is OverlayState.ACTIVE
    assert registry.events(a)[-1].actor == "alice"
    follower.reader.close()
    registry.close()


def test_publishers_in_several_processes_send_in_seq_order(db_url: str) -> None:
    """The publisher fence (issue 18): five publishers, each with its own registry connection
    (as separate processes have), publish controls to one pool at once through a send that
    takes a random while; the topic receives them in seq order, with no gap, because a seq is
    taken and sent under the pool's publish lock."""
    OverlayRegistry(db_url).close()  # the tables exist before the publishers race
    sent: list[int] = []
    lock = threading.Lock()

    def send(topic: str, value: bytes, key: bytes | None) -> None:
        time.sleep(random.uniform(0.0, 0.02))  # the broker's acknowledgement, of varying speed
        with lock:
            sent.append(seq_of(value))

    registries = [OverlayRegistry(db_url) for _ in range(PUBLISHERS)]
    publishers = [
        Publisher(registry, Signer("k", Ed25519PrivateKey.generate()), send, PublisherConfig())
        for registry in registries
    ]

    def publish_all(publisher: Publisher) -> None:
        for _ in range(PER_PUBLISHER):
            publisher.control(ControlKind.PAUSE, POOL, actor="ops", reason="fence")

    threads = [threading.Thread(target=publish_all, args=(p,)) for p in publishers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for registry in registries:
        registry.close()
    assert sent == list(range(1, PUBLISHERS * PER_PUBLISHER + 1))


def test_a_pools_hold_follows_pause_pin_and_resume(db_url: str) -> None:
    """The hold `overlay list/show` report, recorded by `record_control` (the CLI's and the
    daemon's follower's shared path) on either database."""
    from harness_r1.deploy.control_effect import record_control

    registry = OverlayRegistry(db_url)
    now = datetime.now(UTC)

    def command(kind: ControlKind, seq: int, overlay_id: str | None = None) -> ControlCommand:
        return ControlCommand(
            command=kind,
            command_id=f"c{seq}",
            target=POOL,
            seq=seq,
            key_id="k",
            issued_at=now,
            expires_at=now + timedelta(hours=1),
            overlay_id=overlay_id,
            actor="alice",
            reason="INC-9",
        )

    try:
        assert registry.hold(POOL) is None
        record_control(registry, command(ControlKind.PAUSE, 1), recorder="publisher")
        held = registry.hold(POOL)
        assert held is not None and (held.kind, held.actor, held.seq) == ("paused", "alice", 1)
        record_control(registry, command(ControlKind.PIN, 2, "base"), recorder="publisher")
        held = registry.hold(POOL)
        assert held is not None and (held.kind, held.overlay_id) == ("pinned", "base")
        assert "pinned to base" in held.describe()
        record_control(registry, command(ControlKind.RESUME, 3), recorder="control_follower")
        assert registry.hold(POOL) is None
    finally:
        registry.close()
