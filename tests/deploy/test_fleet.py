"""Deploy end to end on the real broker (embedded tansu): signed messages over Kafka, a fleet
of agent-side clients each reading every partition itself, hooks in the isolated sandbox,
episodes on the real environments, and the live guard acting on live trajectories."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from deploy_rig import make_patch, signed_release
from prometheus_client import CollectorRegistry

from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.contracts import (
    ControlCommand,
    ControlKind,
    HookCode,
    HookName,
    Patch,
    Trajectory,
)
from harness_r1.daemon.settings import Settings
from harness_r1.deploy.agent import DeployedAgent
from harness_r1.deploy.client import ClientConfig, ClientMetrics, OverlayClient
from harness_r1.deploy.guard import GuardConfig, LiveGuard, Verdict
from harness_r1.deploy.guard_loop import GuardLoop
from harness_r1.deploy.publisher import DeployMetrics, Publisher, PublisherConfig
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.registry_records import OverlayState
from harness_r1.deploy.signing import Keyring, Signer, seal
from harness_r1.envs import get_suite
from harness_r1.harness import HarnessRuntime, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.tasks import spread
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.patchfile import reference_patches
from harness_r1.sandbox.sandbox_config import SandboxConfig

pytestmark = pytest.mark.integration


@dataclass
class Deployment:
    kafka: KafkaSettings
    topics: PublisherConfig
    signer: Signer
    registry: OverlayRegistry
    publisher: Publisher
    metrics: DeployMetrics
    tmp: Path

    def client(
        self,
        agent_id: str,
        target: str = "pool-a",
        metrics: ClientMetrics | None = None,
        hooks_factory=None,  # type: ignore[no-untyped-def]
    ) -> OverlayClient:
        config = ClientConfig(
            agent_id=agent_id,
            target=target,
            state_dir=self.tmp / "agents" / agent_id,
            release_topic=self.topics.release_topic,
            control_topic=self.topics.control_topic,
        )
        topics = [self.topics.release_topic, self.topics.control_topic]
        return OverlayClient(
            config,
            Keyring.of([self.signer]),
            hooks_factory or sandboxed,
            source_factory=lambda positions: BroadcastReader(self.kafka, topics, positions),
            metrics=metrics,
        )


def sandboxed(patch: Patch, overlay_id: str) -> IsolatedHooks:
    """What production uses: the isolated worker, started on the first hook call."""
    return IsolatedHooks(
        patch, SandboxConfig(call_budget_s=2.0), overlay_id=overlay_id, start=False
    )


@pytest.fixture
def deployment(kafka_broker: EmbeddedBroker, tmp_path: Path) -> Iterator[Deployment]:
    kafka = KafkaSettings(bootstrap=kafka_broker.bootstrap)
    run = uuid.uuid4().hex[:8]
    topics = PublisherConfig(release_topic=f"releases-{run}", control_topic=f"control-{run}")
    ensure_topics(kafka, [topics.release_topic, topics.control_topic], partitions=2)
    producer = make_producer(kafka)
    signer = Signer("ops-1", Ed25519PrivateKey.generate())
    registry = OverlayRegistry(f"sqlite:///{tmp_path / 'state.db'}")
    metrics = DeployMetrics(CollectorRegistry())

    def send(topic: str, value: bytes, key: bytes | None) -> None:
        publish(producer, topic, value, key=key, timeout_s=10)

    publisher = Publisher(registry, signer, send, topics, metrics)
    yield Deployment(kafka, topics, signer, registry, publisher, metrics, tmp_path)
    producer.close(timeout=5)
    registry.close()


def sync_until(clients: list[OverlayClient], done, timeout_s: float = 20.0) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        for client in clients:
            client.sync(timeout_ms=20)
        if all(done(c) for c in clients):
            return time.perf_counter() - started
    raise AssertionError(f"not reached in {timeout_s}s: {[c.active_overlay_id for c in clients]}")


def test_rollback_reaches_a_fleet_of_20(deployment: Deployment) -> None:
    clients = [deployment.client(f"agent-{i:02d}") for i in range(20)]
    a = deployment.registry.add(make_patch("a"), "pool-a").overlay_id
    b = deployment.registry.add(make_patch("b"), "pool-a", parent_overlay_id=a).overlay_id
    deployment.publisher.release(a, actor="ops", reason="first")
    sync_until(clients, lambda c: c.active_overlay_id == a)
    deployment.publisher.release(b, actor="ops", reason="second")
    sync_until(clients, lambda c: c.active_overlay_id == b)
    deployment.publisher.control(ControlKind.ROLLBACK, "pool-a", actor="ops", reason="hurts")
    seconds = sync_until(clients, lambda c: c.active_overlay_id == a)
    assert seconds < 20
    assert deployment.registry.get(b).state is OverlayState.ROLLED_BACK
    assert deployment.registry.get(a).state is OverlayState.ACTIVE
    for client in clients:
        client.close()


def test_rollback_to_a_middle_link_restores_its_exact_composition(
    deployment: Deployment,
) -> None:
    """Three links composed one onto the other; the fleet runs the newest, then an operator
    rolls back to the middle one: every agent runs exactly its stored composition (the first
    two links' hooks), signed as it was measured, and none of the third's."""
    from harness_r1.sandbox.compose import Link, compose_chain

    served: dict[str, str] = {}

    def recording(patch: Patch, overlay_id: str) -> IsolatedHooks:
        served[overlay_id] = patch.sha256()
        return sandboxed(patch, overlay_id)

    registry = deployment.registry
    chain: list[Link] = []
    ids = []
    for tag in ("a", "b", "c"):
        link = make_patch(tag)
        composition = compose_chain([*chain, Link(f"link-{tag}", link)])
        record = registry.add(
            composition.patch,
            "pool-a",
            parent_overlay_id=ids[-1] if ids else None,
            link=link,
            contributors=composition.describe(),
        )
        chain.append(Link(record.overlay_id, link))
        ids.append(record.overlay_id)
    clients = [deployment.client(f"agent-{i}", hooks_factory=recording) for i in range(3)]
    for overlay_id in ids:
        deployment.publisher.release(overlay_id, actor="ops", reason="round")
        sync_until(clients, lambda c, o=overlay_id: c.active_overlay_id == o)
    a, b, c = ids
    deployment.publisher.control(
        ControlKind.ROLLBACK, "pool-a", actor="ops", reason="c hurts", overlay_id=b
    )
    sync_until(clients, lambda client: client.active_overlay_id == b)
    middle = registry.get(b).patch
    assert served[b] == middle.sha256()
    code = middle.code_for(HookName.PRE_DECISION)
    assert code is not None and "'a'" in code and "'b'" in code and "'c'" not in code
    assert registry.get(b).state is OverlayState.ACTIVE
    assert [oid for oid, _ in registry.chain(b)] == [a, b]
    for client in clients:
        client.close()


def test_attacks_over_the_broker_change_nothing_and_are_counted(deployment: Deployment) -> None:
    metrics = ClientMetrics(CollectorRegistry())
    client = deployment.client("agent-x", metrics=metrics)
    good = deployment.registry.add(make_patch("good"), "pool-a").overlay_id
    deployment.publisher.release(good, actor="ops", reason="r")
    deployment.publisher.control(ControlKind.PAUSE, "pool-a", actor="ops", reason="r")
    sync_until([client], lambda c: c.state.control_hwm == 1)
    before = (client.active_overlay_id, client.state.model_dump_json(exclude={"positions"}))

    evil = deployment.registry.add(make_patch("evil"), "pool-a").overlay_id
    other = deployment.registry.add(make_patch("other"), "pool-b").overlay_id
    forger = Signer("ops-1", Ed25519PrivateKey.generate())
    stranger = Signer("intruder", Ed25519PrivateKey.generate())
    now = datetime.now(UTC)

    def release(signer: Signer, overlay_id: str, seq: int, **kw: object) -> bytes:
        return signed_release(deployment.registry, signer, overlay_id, seq, **kw)

    def command(signer: Signer, seq: int, **kw: object) -> bytes:
        fields: dict[str, object] = {
            "command": ControlKind.RESUME,
            "command_id": uuid.uuid4().hex,
            "target": "pool-a",
            "seq": seq,
            "key_id": signer.key_id,
            "issued_at": now,
            "expires_at": now + timedelta(minutes=5),
            "actor": "mallory",
        }
        fields.update(kw)
        return seal(ControlCommand.model_validate(fields), signer).to_json_bytes()

    genuine = json.loads(release(deployment.signer, evil, 40))
    raw = base64.b64decode(genuine["payload_b64"]).replace(b"'evil'", b"'EVIL'")
    genuine["payload_b64"] = base64.b64encode(raw).decode()
    old = now - timedelta(hours=2)
    releases = [
        release(forger, evil, 41),  # forged signature
        release(stranger, evil, 42),  # unknown key
        release(deployment.signer, other, 43),  # wrong target
        json.dumps(genuine).encode(),  # tampered patch bytes
        release(deployment.signer, evil, 1),  # replayed seq
        release(deployment.signer, evil, 44, issued_at=old, expires_at=old + timedelta(hours=1)),
    ]
    commands = [
        command(forger, 41),
        command(stranger, 42),
        command(deployment.signer, 43, target="pool-b"),
        command(deployment.signer, 1),  # replayed seq
        command(deployment.signer, 44, issued_at=old, expires_at=old + timedelta(hours=1)),
    ]
    producer = make_producer(deployment.kafka)
    for data in releases:
        publish(producer, deployment.topics.release_topic, data, timeout_s=10)
    for data in commands:
        publish(producer, deployment.topics.control_topic, data, timeout_s=10)
    producer.close(timeout=5)
    total = len(releases) + len(commands)
    sync_until([client], lambda c: sum(c.rejections.values()) >= total)
    after = (client.active_overlay_id, client.state.model_dump_json(exclude={"positions"}))
    assert after == before
    assert client.rejections == {
        "bad_signature": 3,
        "unknown_key": 2,
        "wrong_target": 2,
        "replay": 2,
        "expired": 2,
    }
    counted = sum(
        s.value for m in metrics.rejections.collect() for s in m.samples if "_total" in s.name
    )
    assert counted == total
    client.close()


# -- episodes: swaps at episode boundaries only ----------------------------------------------


def tagged_patch(tag: str) -> Patch:
    code = f"def hook(ctx, state):\n    return 'overlay {tag}'\n"
    return Patch(
        env="dbbench", description=tag, hooks=[HookCode(hook=HookName.PRE_DECISION, code=code)]
    )


def test_no_episode_runs_under_two_overlays(deployment: Deployment) -> None:
    """Releases keep arriving while a deployed agent runs real DBBench episodes with its hooks
    in the sandbox: every step of an episode shows the note of the overlay stamped on it."""
    root = Settings().data_root()
    suite = get_suite("dbbench")
    tasks = spread(suite.load_tasks(root, "dev"), 12)
    runtime = HarnessRuntime(
        suite, ScriptedPolicy(["The answer is 12"]), root, RunConfig(max_steps=4, lockstep=1)
    )
    client = deployment.client("agent-e")
    client.start(interval_ms=10)
    agent = DeployedAgent(runtime, client)
    overlays = {}
    for i in range(6):
        record = deployment.registry.add(tagged_patch(f"t{i}"), "pool-a")
        overlays[record.overlay_id] = f"overlay t{i}"
    stop = threading.Event()

    def release_all() -> None:
        for overlay_id in overlays:
            if stop.wait(0.15):
                return
            deployment.publisher.release(overlay_id, actor="ops", reason="churn")

    releaser = threading.Thread(target=release_all)
    releaser.start()
    trajectories: list[Trajectory] = []
    try:
        episode = 0
        after_last = 0
        while after_last < len(tasks) and episode < 2000:  # run on until all releases landed
            trajectories.extend(agent.run([(tasks[episode % len(tasks)], episode)]))
            episode += 1
            if not releaser.is_alive():
                after_last += 1
    finally:
        stop.set()
        releaser.join()
        client.close()
        runtime.close()
    versions = {t.harness_version for t in trajectories}
    assert len(versions) >= 3, versions  # the swaps really happened mid-run
    for t in trajectories:
        notes = {e.text for s in t.steps for e in s.effects if e.hook is HookName.PRE_DECISION}
        expected = set() if t.harness_version == "base" else {overlays[t.harness_version]}
        assert notes == expected, (t.harness_version, notes)
        assert not any(s.faults for s in t.steps)


# -- the live guard on real ALFWorld games ---------------------------------------------------

JUNK = "THOUGHT: I think. ACTION: think"
HARMFUL = """def hook(ctx, state):
    return {'effect': 'rewrite', 'text': 'look'}
"""


def run_fleet_under_guard(
    deployment: Deployment, control: str | None, new: str, agents: int = 16
) -> tuple[GuardLoop, list[OverlayClient]]:
    """Agents run real games, one episode at a time, alternating between the two cohorts;
    their trajectories go to the trajectory topic; the guard reads them from there."""
    root = Settings().data_root()
    suite = get_suite("alfworld")
    tasks = spread(suite.load_tasks(root, "valid_seen"), 40)
    traj_topic = f"trajectories-{uuid.uuid4().hex[:8]}"
    ensure_topics(deployment.kafka, [traj_topic])
    producer = make_producer(deployment.kafka)
    clients = [deployment.client(f"agent-{i:02d}") for i in range(agents)]
    if control is not None:
        deployment.publisher.release(control, actor="ops", reason="baseline")
    seq = deployment.publisher.release(new, fraction=0.5, actor="daemon", reason="gate").seq
    sync_until(clients, lambda c: c.state.release_hwm == seq)
    control_id = control or "base"
    cohorts = [[c for c in clients if c.active_overlay_id == arm] for arm in (new, control_id)]
    assert all(cohorts), "both cohorts must hold agents"
    guard = LiveGuard(new, control_id, GuardConfig(min_episodes=6, max_episodes=30))
    reader = BroadcastReader(deployment.kafka, [traj_topic])
    loop = GuardLoop(guard, deployment.publisher, "pool-a", reader)
    agents: dict[str, DeployedAgent] = {}
    published = 0

    def sink(trajectory: Trajectory) -> None:
        nonlocal published
        publish(producer, traj_topic, trajectory.to_json_bytes(), timeout_s=10)
        published += 1

    try:
        for round_ in range(guard.config.max_episodes):
            for members in cohorts:
                client = members[round_ % len(members)]
                name = client.config.agent_id
                if name not in agents:
                    config = RunConfig(agent_id=name, max_steps=30)
                    runtime = HarnessRuntime(suite, ScriptedPolicy([JUNK]), root, config)
                    agents[name] = DeployedAgent(runtime, client, sink)
                agents[name].run([(tasks[round_], round_)])
            deadline = time.perf_counter() + 10
            while len(guard._seen) < published and time.perf_counter() < deadline:  # noqa: SLF001
                loop.poll(timeout_ms=50)
            if loop.done:
                break
    finally:
        for agent in agents.values():
            agent.runtime.close()
        producer.close(timeout=5)
        reader.close()
    return loop, clients


def test_live_guard_promotes_an_overlay_that_raises_success(deployment: Deployment) -> None:
    explorer = reference_patches("alfworld")["alfworld_explorer"]
    new = deployment.registry.add(explorer, "pool-a").overlay_id
    loop, clients = run_fleet_under_guard(deployment, None, new)
    print("live guard:", loop.decision.summary() if loop.decision else None)
    assert loop.decision is not None and loop.decision.verdict is Verdict.PROMOTE, loop.decision
    sync_until(clients, lambda c: c.active_overlay_id == new)
    assert deployment.registry.get(new).state is OverlayState.ACTIVE
    assert deployment.metrics.promotions.labels(actor="live_guard")._value.get() == 1  # noqa: SLF001
    for client in clients:
        client.close()


def test_live_guard_rolls_back_an_overlay_that_lowers_success(deployment: Deployment) -> None:
    explorer = reference_patches("alfworld")["alfworld_explorer"]
    control = deployment.registry.add(explorer, "pool-a").overlay_id
    harmful = Patch(
        env="alfworld",
        description="rewrites every action to look",
        hooks=[HookCode(hook=HookName.PRE_ACTION, code=HARMFUL)],
    )
    new = deployment.registry.add(harmful, "pool-a", parent_overlay_id=control).overlay_id
    loop, clients = run_fleet_under_guard(deployment, control, new)
    print("live guard:", loop.decision.summary() if loop.decision else None)
    decision = loop.decision
    assert decision is not None and decision.verdict is Verdict.ROLLBACK, decision
    assert decision.reason == "live_guard"
    sync_until(clients, lambda c: c.active_overlay_id == control)
    assert deployment.registry.get(new).state is OverlayState.ROLLED_BACK
    assert deployment.registry.events(new)[-1].actor == "live_guard"
    assert deployment.metrics.rollbacks.labels(reason="live_guard")._value.get() == 1  # noqa: SLF001
    for client in clients:
        client.close()
