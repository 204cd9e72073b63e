"""Release and rollback propagation on loopback: published -> active in every client of a fleet.

A fleet of agent-side clients (each its own Kafka consumer over every partition, a background
sync thread, real Ed25519 verification, the real embedded broker) receives N releases one
after the other, then N rollbacks. For each message: the time from just before publishing to
the moment the last client runs the new overlay. Baseline measured in the same run: the same
fleet shape with bare readers (the same BroadcastReader polling loop, no verification, no
state), so the ratio shows what the client's own work adds to what Kafka costs anyway.

    .venv/bin/python benchmarks/deploy_latency.py --clients 20 --releases 50
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness_r1.consumers import (
    BroadcastReader,
    EmbeddedBroker,
    KafkaSettings,
    ensure_topics,
    make_producer,
    publish,
)
from harness_r1.contracts import ControlKind, HookCode, HookName, Patch
from harness_r1.deploy import (
    ClientConfig,
    Keyring,
    OverlayClient,
    OverlayRegistry,
    Publisher,
    PublisherConfig,
    Signer,
)
from harness_r1.harness import HookCall

POLL_MS = 50


class _NullHooks:
    """The benchmark measures delivery, not hook workers: a HookSet that does nothing."""

    def __init__(self, overlay_id: str) -> None:
        self.overlay_id = overlay_id

    def has(self, hook: HookName) -> bool:
        return False

    def call(self, hook: HookName, ctx: dict, state: dict) -> HookCall:  # type: ignore[type-arg]
        return HookCall(state=state)


def patch(i: int) -> Patch:
    code = f"def hook(ctx, state):\n    return 'v{i}'\n"
    return Patch(
        env="dbbench", description=f"v{i}", hooks=[HookCode(hook=HookName.PRE_DECISION, code=code)]
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def wait_all(predicate, timeout_s: float = 30.0) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    while not predicate():
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError("fleet did not converge")
        time.sleep(0.0005)
    return time.perf_counter() - started


def bare_baseline(kafka: KafkaSettings, clients: int, messages: int) -> list[float]:
    """Same fleet shape, bare readers: the time until every reader has seen message i."""
    topic = f"bare-{time.time_ns()}"
    ensure_topics(kafka, [topic], partitions=2)
    seen = [0] * clients
    stop = threading.Event()

    def reader(index: int) -> None:
        with BroadcastReader(kafka, [topic]) as source:
            while not stop.is_set():
                seen[index] += len(source.poll(POLL_MS))

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    producer = make_producer(kafka)
    time.sleep(1.0)
    latencies = []
    for i in range(messages):
        started = time.perf_counter()
        publish(producer, topic, b"x" * 2000, key=b"pool-a", timeout_s=10)
        wait_all(lambda i=i: all(s >= i + 1 for s in seen))
        latencies.append(time.perf_counter() - started)
    stop.set()
    for t in threads:
        t.join()
    producer.close(timeout=5)
    return latencies


def fleet_run(
    kafka: KafkaSettings, clients: int, releases: int, tmp: Path
) -> dict[str, list[float]]:
    suffix = time.time_ns()
    topics = PublisherConfig(release_topic=f"rel-{suffix}", control_topic=f"ctl-{suffix}")
    ensure_topics(kafka, [topics.release_topic, topics.control_topic], partitions=2)
    signer = Signer("bench", Ed25519PrivateKey.generate())
    registry = OverlayRegistry(f"sqlite:///{tmp / 'state.db'}")
    producer = make_producer(kafka)
    publisher = Publisher(
        registry,
        signer,
        lambda topic, value, key: publish(producer, topic, value, key=key, timeout_s=10) and None,
        topics,
    )
    fleet = []
    for i in range(clients):
        config = ClientConfig(
            agent_id=f"agent-{i:02d}",
            target="pool-a",
            state_dir=tmp / f"agent-{i:02d}",
            release_topic=topics.release_topic,
            control_topic=topics.control_topic,
        )
        reader_topics = [topics.release_topic, topics.control_topic]
        client = OverlayClient(
            config,
            Keyring.of([signer]),
            lambda p, overlay_id: _NullHooks(overlay_id),
            source_factory=lambda positions, t=reader_topics: BroadcastReader(kafka, t, positions),
        )
        client.start(interval_ms=POLL_MS)
        fleet.append(client)
    time.sleep(1.0)
    # release v(i), then take it back: each rollback returns the fleet to the stable overlay
    stable = registry.add(patch(0), "pool-a").overlay_id
    publisher.release(stable, actor="bench", reason="stable")
    wait_all(lambda: all(c.active_overlay_id == stable for c in fleet))
    release_s, rollback_s = [], []
    for i in range(1, releases + 1):
        overlay_id = registry.add(patch(i), "pool-a").overlay_id
        started = time.perf_counter()
        publisher.release(overlay_id, actor="bench", reason="latency")
        wait_all(lambda o=overlay_id: all(c.active_overlay_id == o for c in fleet))
        release_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        publisher.control(ControlKind.ROLLBACK, "pool-a", actor="bench", reason="latency")
        wait_all(lambda: all(c.active_overlay_id == stable for c in fleet))
        rollback_s.append(time.perf_counter() - started)
    for client in fleet:
        client.close()
    producer.close(timeout=5)
    registry.close()
    return {"release": release_s, "rollback": rollback_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--releases", type=int, default=50)
    args = parser.parse_args()
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        kafka = KafkaSettings(bootstrap=broker.bootstrap)
        base = bare_baseline(kafka, args.clients, args.releases)
        runs = fleet_run(kafka, args.clients, args.releases, Path(tmp))
    base_p50 = statistics.median(base)
    print(f"fleet of {args.clients} clients, {args.releases} messages each, loopback tansu")
    print("| what | n | p50 ms | p99 ms | max ms | p50 vs bare readers |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = [("bare readers (baseline)", base), *runs.items()]
    for name, values in rows:
        print(
            f"| {name} | {len(values)} | {1000 * statistics.median(values):.1f} "
            f"| {1000 * pct(values, 0.99):.1f} | {1000 * max(values):.1f} "
            f"| x{statistics.median(values) / base_p50:.2f} |"
        )


if __name__ == "__main__":
    main()
