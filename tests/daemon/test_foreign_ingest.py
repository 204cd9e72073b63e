"""The real daemon (`harness-r1 run` as its own process) fed by a foreign producer.

librdkafka (through confluent-kafka, what most production agents use) produces, idempotently,
1,000 valid trajectories per codec (none, gzip, snappy, lz4, zstd) over 4 partitions, copies
of some of them, and one record of each of more than 30 malformed kinds. Then: the store holds
every unique valid trajectory once; the dead-letter topic holds every malformed record exactly
once, with its reason, source and original key/headers/timestamp; the stored positions are at
the partitions' end offsets; /metrics says lag 0 on every partition and counts the dead letters
by reason; /readyz is ready; SIGTERM ends the process within 10 s.
"""

from __future__ import annotations

import json
import random
import re
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

confluent_kafka = pytest.importorskip("confluent_kafka")

from test_durability import DaemonProcess, synthetic_trajectory, wait_for  # noqa: E402

from harness_r1.consumers.broadcast_reader import BroadcastReader  # noqa: E402
from harness_r1.consumers.broker import EmbeddedBroker  # noqa: E402
from harness_r1.consumers.kafka_client import KafkaSettings  # noqa: E402
from harness_r1.consumers.topic_setup import ensure_topics  # noqa: E402
from harness_r1.daemon.settings import Settings  # noqa: E402
from harness_r1.daemon.store import StateStore  # noqa: E402

pytestmark = pytest.mark.integration

PARTITIONS = 4
PER_CODEC = 1_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
DUPLICATES = 200
GROUP = "foreign-daemon"


def valid_values(rng: random.Random, count: int, start: int) -> list[bytes]:
    return [synthetic_trajectory(start + i, rng).to_json_bytes() for i in range(count)]


def malformed_values(rng: random.Random) -> dict[str, bytes | None]:
    """One record per malformed kind (name -> value; None is a null value)."""
    good = json.loads(synthetic_trajectory(10**6, rng).to_json_bytes())

    def variant(**changes: Any) -> bytes:
        doc = json.loads(json.dumps(good))
        doc["trajectory_id"] = f"bad-{uuid.uuid4().hex}"
        for path, value in changes.items():
            node = doc
            *parents, leaf = path.split("__")
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if value is _DELETE:
                del node[leaf]
            else:
                node[leaf] = value
        return json.dumps(doc, separators=(",", ":")).encode()

    text = variant().decode()
    huge = "x" * 300_000
    kinds: dict[str, bytes | None] = {
        "not_json": b"this is not json",
        "truncated": text[: len(text) // 2].encode(),
        "bom": b"\xef\xbb\xbf" + text.encode(),
        "trailing_garbage": text.encode() + b" }}",
        "nan_reward": re.sub(rb'("outcome":\{[^}]*"reward":)[0-9.]+', rb"\1NaN", variant()),
        "nan_step_reward": re.sub(rb'"reward":[0-9.]+', b'"reward":NaN', variant(), count=1),
        "infinity_reward": re.sub(rb'"reward":[0-9.]+', b'"reward":Infinity', variant(), count=1),
        "neg_infinity_seconds": re.sub(
            rb'"model_seconds":[0-9.]+', b'"model_seconds":-Infinity', variant()
        ),
        "reward_as_text": variant(outcome__reward="high"),
        "steps_as_text": variant(steps="many"),
        "id_as_number": variant(trajectory_id=123),
        "task_as_list": variant(task=[]),
        "unknown_schema_version": variant(schema_version="9.0"),
        "no_schema_version": variant(schema_version=_DELETE),
        "missing_outcome": variant(outcome=_DELETE),
        "unknown_field": variant(surprise=True),
        "negative_steps": variant(outcome__steps=-3),
        "null_value": None,
        "empty_value": b"",
        "binary": bytes(rng.randrange(256) for _ in range(512)),
        "gzip_bytes": b"\x1f\x8b\x08\x00" + bytes(range(64)),
        "bad_utf8": text.encode().replace(b'"agent_id":"', b'"agent_id":"\xff\xfe', 1),
        "json_array": json.dumps([good]).encode(),
        "json_string": b'"a trajectory"',
        "json_number": b"42",
        "json_null": b"null",
        "deep_array": b"[" * 100_000 + b"]" * 100_000,
        "deep_object_in_field": variant().replace(
            b'"steps":[', b'"steps":[' + b'{"a":' * 5_000 + b"1" + b"}" * 5_000 + b",", 1
        ),
        "five_megabytes": variant(task__instruction="y" * 5_000_000),
        "huge_trajectory_id": variant(trajectory_id="t" * 300),
        "huge_agent_id": variant(agent_id=huge),
        "huge_harness_version": variant(harness_version=huge),
        "huge_env": variant(task__env=huge),
        "huge_task_id": variant(task__task_id=huge),
        "huge_task_type": variant(task__task_type=huge),
        "huge_model_id": variant(target__model_id=huge),
        "nul_in_agent_id": variant(agent_id="agent\u0000x"),
        "lone_surrogate": variant().replace(b'"agent_id":"', b'"agent_id":"\\ud800', 1),
        "two_megabyte_instruction": variant(task__instruction="z" * 2_000_000),
    }
    return kinds


class _Delete:
    pass


_DELETE = _Delete()


class Produced:
    """Delivery reports of a confluent-kafka producer: (partition, offset) per record."""

    def __init__(self) -> None:
        self.acks: list[tuple[int, int]] = []
        self.errors: list[str] = []

    def __call__(self, err: Any, message: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acks.append((message.partition(), message.offset()))


def producer(bootstrap: str, codec: str) -> Any:
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "enable.idempotence": True,
            "linger.ms": 20,
            "message.max.bytes": 8_000_000,
            "log_level": 3,
        }
    )


def write_config(tmp_path: Path, bootstrap: str, run: str) -> Path:
    config = {
        "cache": str(tmp_path / "cache"),
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "kafka_bootstrap": bootstrap,
        "trajectory_topic": f"traj-{run}",
        "release_topic": f"rel-{run}",
        "control_topic": f"ctl-{run}",
        "kafka": {
            "group_id": GROUP,
            "dead_letter_topic": f"dlq-{run}",
            "events_topic": f"events-{run}",
            "poll_timeout_ms": 200,
        },
        "loop": {"batch_size": 1_000_000, "batch_window_s": 1e9, "engineer_backend": "template"},
        "metrics": {"port": 0, "log_level": "info"},
    }
    path = tmp_path / "daemon.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def metrics_port(process: DaemonProcess) -> int:
    match = re.search(rb'"url": "http://[^:]+:(\d+)"', process.log.read_bytes())
    assert match, process.tail()
    return int(match.group(1))


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def read_all(bootstrap: str, topic: str, expected: int, timeout_s: float) -> list[Any]:
    records: list[Any] = []
    with BroadcastReader(KafkaSettings(bootstrap=bootstrap), [topic]) as reader:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(records) < expected:
            records.extend(reader.poll(300))
        records.extend(reader.poll(1_000))  # anything beyond the expected count
    return records


def test_foreign_producer_every_codec_and_every_malformed_kind(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    run = uuid.uuid4().hex[:8]
    bootstrap = kafka_broker.bootstrap
    config = write_config(tmp_path, bootstrap, run)
    settings = Settings.from_file(config)
    topic = settings.trajectory_topic
    ensure_topics(KafkaSettings(bootstrap=bootstrap), [topic], PARTITIONS)
    process = DaemonProcess(config, tmp_path / "daemon.log")
    try:
        process.wait_started()
        rng = random.Random(7)
        produced = Produced()
        valid: list[bytes] = []
        for n, codec in enumerate(CODECS):
            values = valid_values(rng, PER_CODEC, n * PER_CODEC)
            valid.extend(values)
            out = producer(bootstrap, codec)
            for i, value in enumerate(values):
                out.produce(topic, value, partition=i % PARTITIONS, on_delivery=produced)
                out.poll(0)
            assert out.flush(60) == 0
        copies = rng.sample(valid, DUPLICATES)
        out = producer(bootstrap, "lz4")
        for i, value in enumerate(copies):
            out.produce(topic, value, partition=(i + 1) % PARTITIONS, on_delivery=produced)
        bad = malformed_values(rng)
        bad_acks: dict[str, Produced] = {}
        for i, (kind, value) in enumerate(bad.items()):
            bad_acks[kind] = Produced()
            out.produce(
                topic,
                value,
                key=f"key-{kind}".encode(),
                headers=[("origin", kind.encode()), ("trace", b"\x00\x01")],
                timestamp=1_700_000_000_000 + i,
                partition=i % PARTITIONS,
                on_delivery=bad_acks[kind],
            )
        assert out.flush(60) == 0
        assert not produced.errors and all(not p.errors for p in bad_acks.values())
        assert len(bad) >= 30

        ends: dict[int, int] = {}
        for partition, offset in produced.acks + [p.acks[0] for p in bad_acks.values()]:
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        store = StateStore(settings.registry_url())
        try:

            def caught_up() -> bool:
                positions = store.positions(GROUP)
                return all(positions.get((topic, p), 0) >= end for p, end in ends.items())

            wait_for(caught_up, 120, "the daemon to reach every partition's end")
            assert store.trajectory_count() == len(set(valid)) == len(CODECS) * PER_CODEC
            positions = store.positions(GROUP)
            assert {p: positions[(topic, p)] for p in ends} == ends
            wait_for(lambda: store.count_pending_dead_letters() == 0, 30, "the outbox to drain")
        finally:
            store.close()

        dead = read_all(bootstrap, settings.kafka.dead_letter_topic, len(bad), 60)
        by_kind = Counter(dict(r.headers)["original.origin"].decode() for r in dead)
        assert by_kind == Counter(bad.keys()), "each malformed record dead-lettered once"
        ids = [dict(r.headers)["dead_letter_id"] for r in dead]
        assert len(set(ids)) == len(ids)
        for record in dead:
            headers = dict(record.headers)
            kind = headers["original.origin"].decode()
            partition, offset = bad_acks[kind].acks[0]
            assert headers["source_topic"] == topic.encode()
            assert (int(headers["source_partition"]), int(headers["source_offset"])) == (
                partition,
                offset,
            )
            assert record.key == f"key-{kind}".encode()
            assert headers["original.trace"] == b"\x00\x01"
            assert record.timestamp_ms == int(headers["source_timestamp_ms"])
            assert headers["reason"].decode().startswith(headers["reason_code"].decode())
            original = bad[kind] or b""
            assert int(headers["original_size"]) == len(original)
            assert record.value == original[: len(record.value)]
            assert headers["truncated"] == (b"1" if len(record.value) < len(original) else b"0")
        reasons = {
            dict(r.headers)["original.origin"].decode(): dict(r.headers)["reason_code"].decode()
            for r in dead
        }
        assert reasons["five_megabytes"] == "too_large"
        assert reasons["unknown_schema_version"] == "unsupported_version"
        assert reasons["null_value"] == reasons["empty_value"] == "empty"
        assert reasons["nan_reward"] == reasons["infinity_reward"] == "invalid"
        assert reasons["huge_agent_id"] == "unstorable"

        port = metrics_port(process)
        url = f"http://127.0.0.1:{port}"

        def lag_zero() -> bool:
            text = httpx.get(f"{url}/metrics", timeout=5).text
            lags = [
                sample(text, "harness_r1_consumer_lag", topic=topic, partition=str(p))
                for p in range(PARTITIONS)
            ]
            return lags == [0.0] * PARTITIONS

        wait_for(lag_zero, 30, "lag 0 on every partition")
        text = httpx.get(f"{url}/metrics", timeout=5).text
        dead_total = sum(
            sample(text, "harness_r1_dead_lettered_total", reason=code) or 0.0
            for code in set(reasons.values())
        )
        assert dead_total == len(bad)
        assert sample(text, "harness_r1_trajectories_duplicate_total") == DUPLICATES
        assert sample(text, "process_cpu_seconds_total") is not None
        ready = httpx.get(f"{url}/readyz", timeout=5)
        assert (ready.status_code, ready.text) == (200, "ready\n"), ready.text

        raw = [x for x in process.log.read_text().splitlines() if x.strip()]
        assert [x for x in raw if x[:1] != "{"] == [], "every line of the JSON log is JSON"
        lines = [json.loads(x) for x in raw]
        chatter = [x for x in lines if str(x.get("logger", "")).startswith("kafka")]
        assert all(x["level"] != "info" for x in chatter), "kafka-python INFO lines are quiet"
    finally:
        began = time.monotonic()
        if process.process.poll() is None:
            process.process.send_signal(signal.SIGTERM)
            try:
                process.process.wait(timeout=30)
            finally:
                process.kill()
        stopped_in = time.monotonic() - began
    assert process.process.returncode == 0, process.tail()
    assert stopped_in < 10, f"SIGTERM took {stopped_in:.1f} s"
