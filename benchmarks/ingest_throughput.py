"""Trajectory ingest throughput and memory, against the embedded broker (tansu, in memory).

Throughput, both measured in the same run on the same topic of T ~5.3 KB trajectory messages:
  (a) baseline: a bare kafka-python consume loop (KafkaConsumer, assign() over every partition
      from the beginning, json.loads of each value) until T messages: what Kafka and JSON
      cost anyway;
  (b) the daemon's ingest: TrajectoryIngest.poll_once in a loop into a fresh SQLite
      StateStore until T are stored (parse + validate, one store transaction per poll with
      dedup, failure buffers and positions, then the offset commit).
Memory: the ingest alone, in a fresh process (so the benchmark's own producer and message
templates do not count), over M messages; its RSS after 10k and after M stored.

    .venv/bin/python benchmarks/ingest_throughput.py --messages 20000 --memory-messages 100000
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import resource
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from harness_r1.consumers import EmbeddedBroker, KafkaSettings, ensure_topics
from harness_r1.contracts import Outcome, Step, TargetRef, TaskRef, Termination, Timings, Trajectory
from harness_r1.daemon import IngestConfig, TrajectoryIngest
from harness_r1.daemon.store import StateStore

TARGET_BYTES = 5300
TEMPLATES = 32
GROUP = "bench-ingest"
RSS_MARK = 10_000


# --- messages -------------------------------------------------------------------------------


def template(i: int) -> dict[str, Any]:
    """A valid dbbench trajectory as JSON-ready data, padded to about TARGET_BYTES."""
    now = datetime.now(UTC)
    success = i % 5 >= 2  # 40% failures
    steps = [
        Step(
            index=s,
            observation=f"Table t{i % 7} has columns id, name, price, stock. ",
            raw_output=f"Thought: I should inspect row {s}.\nAction: Operation\n"
            f"```sql\nSELECT * FROM t{i % 7} WHERE id = {s};\n```",
            action=f"SELECT * FROM t{i % 7} WHERE id = {s}",
            feedback="[(1, 'widget', 2.5, 10), (2, 'gadget', 3.0, 4)]",
        )
        for s in range(6)
    ]
    trajectory = Trajectory(
        trajectory_id="template",
        agent_id=f"agent-{i % 4}",
        target=TargetRef(model_id="smollm2-135m", version="1"),
        harness_version="base",
        task=TaskRef(
            env="dbbench",
            split="dev",
            task_id=f"task-{i}",
            task_type="SELECT",
            instruction="How many products cost more than 2 and are in stock?",
            seed=i,
        ),
        steps=steps,
        outcome=Outcome(
            success=success,
            reward=1.0 if success else 0.0,
            termination=Termination.SUCCESS if success else Termination.FAILURE,
            steps=len(steps),
        ),
        timings=Timings(started_at=now, finished_at=now),
    )
    data = trajectory.model_dump(mode="json")
    pad = TARGET_BYTES - len(json.dumps(data).encode()) - 36  # 36: the uuid id to come
    per_step = max(0, pad) // len(steps)
    for step in data["steps"]:
        step["observation"] += "row " * (per_step // 4)
    return data


def messages(count: int, run: str) -> Iterator[bytes]:
    """`count` distinct, valid trajectory messages (unique trajectory_id each)."""
    templates = [template(i) for i in range(TEMPLATES)]
    Trajectory.model_validate(templates[0])  # still valid after padding
    for i in range(count):
        data = copy.copy(templates[i % TEMPLATES])
        data["trajectory_id"] = f"{run}-{i:08d}-{uuid.uuid4().hex[:8]}"
        yield json.dumps(data).encode()


def fill(bootstrap: str, topic: str, count: int, partitions: int, run: str) -> tuple[float, int]:
    """Produce `count` messages round-robin over the partitions; (seconds, mean bytes)."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=20,
        batch_size=512 * 1024,
        max_request_size=8 * 1024 * 1024,
        enable_idempotence=False,
    )
    started = time.perf_counter()
    total = 0
    for i, value in enumerate(messages(count, run)):
        total += len(value)
        producer.send(topic, value=value, partition=i % partitions)
    producer.flush(timeout=300)
    producer.close(timeout=10)
    return time.perf_counter() - started, total // max(1, count)


# --- (a) bare consume -----------------------------------------------------------------------


def bare_consume(bootstrap: str, topic: str, count: int) -> float:
    """Seconds for a bare kafka-python loop to read and json.loads `count` messages."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,  # as the daemon's reader (KafkaSettings.fetch_max_wait_ms)
        max_poll_records=500,  # as the daemon's reader
    )
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    seen = 0
    started = time.perf_counter()
    while seen < count:
        for batch in consumer.poll(timeout_ms=1000).values():
            for message in batch:
                json.loads(message.value)
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


# --- (b) the daemon's ingest ----------------------------------------------------------------


def _no_dead_letters(
    topic: str, value: bytes, key: bytes | None, headers: Sequence[tuple[str, bytes]], ts: int
) -> None:
    raise RuntimeError("the benchmark's messages are all valid; nothing may be dead-lettered")


def open_ingest(bootstrap: str, topic: str, db: Path) -> tuple[TrajectoryIngest, StateStore]:
    store = StateStore(f"sqlite:///{db}")
    ingest = TrajectoryIngest(
        KafkaSettings(bootstrap=bootstrap),
        IngestConfig(topic=topic, group=GROUP, dead_letter_topic=f"{topic}.dlq"),
        store,
        _no_dead_letters,
    )
    return ingest, store


def ingest_until(
    ingest: TrajectoryIngest, count: int, marks: Sequence[int] = ()
) -> tuple[float, dict[int, tuple[float, float]]]:
    """Poll until `count` are stored; (seconds, {mark: (rss MiB, seconds) at that mark})."""
    stored = 0
    pending = sorted(marks)
    at: dict[int, tuple[float, float]] = {}
    started = time.perf_counter()
    while stored < count:
        stored += ingest.poll_once(timeout_ms=1000).result.new
        while pending and stored >= pending[0]:
            at[pending.pop(0)] = (rss_mib(), time.perf_counter() - started)
    return time.perf_counter() - started, at


def rss_mib() -> float:
    """This process's resident set size now (VmRSS), in MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory_child(bootstrap: str, topic: str, db: str, count: int, out: Any) -> None:
    """Runs in a fresh process: the ingest alone, RSS after RSS_MARK and after `count`."""
    before = rss_mib()
    ingest, store = open_ingest(bootstrap, topic, Path(db))
    opened = rss_mib()
    elapsed, at = ingest_until(ingest, count, [m for m in (RSS_MARK, count) if m <= count])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stored = store.trajectory_count()
    ingest.close()
    store.close()
    out.put(
        {
            "before": before,
            "opened": opened,
            "at": at,
            "peak": peak,
            "elapsed": elapsed,
            "stored": stored,
        }
    )


# --- main -----------------------------------------------------------------------------------


def crc_implementation() -> str:
    import crc32c  # noqa: F401 - the point is that this import works
    from kafka.record import util

    impl = util._crc32c
    return f"{impl.__module__}.{getattr(impl, '__name__', type(impl).__name__)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="T, the throughput topic")
    parser.add_argument(
        "--memory-messages", type=int, default=100_000, help="M, the memory run (0: skip it)"
    )
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()

    print(f"kafka-python CRC32C: {crc_implementation()} (import crc32c: ok)")
    run = uuid.uuid4().hex[:8]
    rows: list[tuple[str, str]] = []
    with EmbeddedBroker(startup_timeout_s=30) as broker, tempfile.TemporaryDirectory() as tmp:
        kafka = KafkaSettings(bootstrap=broker.bootstrap)
        topic = f"bench-ingest-{run}"
        ensure_topics(kafka, [topic], partitions=args.partitions)
        seconds, size = fill(broker.bootstrap, topic, args.messages, args.partitions, run)
        print(f"filled {topic}: {args.messages} messages of {size} B in {seconds:.1f} s")

        bare_s = bare_consume(broker.bootstrap, topic, args.messages)
        bare_rate = args.messages / bare_s
        print(f"(a) bare consume + json.loads: {bare_s:.2f} s, {bare_rate:,.0f} msg/s")

        ingest, store = open_ingest(broker.bootstrap, topic, Path(tmp) / "throughput.db")
        ingest_s, _ = ingest_until(ingest, args.messages)
        assert store.trajectory_count() == args.messages
        ingest.close()
        store.close()
        ingest_rate = args.messages / ingest_s
        print(f"(b) TrajectoryIngest -> SQLite:  {ingest_s:.2f} s, {ingest_rate:,.0f} msg/s")
        rows += [
            (
                f"(a) bare kafka-python consume + json.loads, {size} B msgs",
                f"{bare_rate:,.0f} msg/s",
            ),
            ("(b) TrajectoryIngest.poll_once -> SQLite StateStore", f"{ingest_rate:,.0f} msg/s"),
            ("ratio (b)/(a)", f"{ingest_rate / bare_rate:.2f}"),
        ]

        if args.memory_messages:
            count = args.memory_messages
            mem_topic = f"bench-memory-{run}"
            ensure_topics(kafka, [mem_topic], partitions=args.partitions)
            seconds, _ = fill(broker.bootstrap, mem_topic, count, args.partitions, run + "m")
            print(f"filled {mem_topic}: {count} messages in {seconds:.1f} s")
            context = multiprocessing.get_context("spawn")
            queue = context.Queue()
            child = context.Process(
                target=memory_child,
                args=(broker.bootstrap, mem_topic, str(Path(tmp) / "memory.db"), count, queue),
            )
            child.start()
            result = queue.get(timeout=3600)
            child.join(timeout=60)
            at = result["at"]
            print(
                f"memory run: {result['stored']} stored in {result['elapsed']:.1f} s "
                f"({count / result['elapsed']:,.0f} msg/s); RSS {result['before']:.0f} MiB "
                f"after imports, {result['opened']:.0f} MiB with reader and store open"
            )
            rows += [
                (
                    f"ingest process RSS after {RSS_MARK:,} stored",
                    f"{at.get(RSS_MARK, (0.0,))[0]:.0f} MiB",
                ),
                (f"ingest process RSS after {count:,} stored", f"{at[count][0]:.0f} MiB"),
                ("ingest process peak RSS (ru_maxrss)", f"{result['peak']:.0f} MiB"),
                (f"ingest rate over {count:,}", f"{count / result['elapsed']:,.0f} msg/s"),
            ]

    print()
    print("| measure | value |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
