"""The producer contract (docs/agents.md) kept by an agent that does not embed our client: the
Node.js example (examples/node-producer, KafkaJS) against the embedded broker and the real
daemon (`build_daemon`, ingest only).

1. The same JSON Lines file produced by our Python client (as the demo fleet's agents do) to
   one daemon and by producer.js (gzip) to another: both daemons store the same rows (ids,
   indexed fields, payload bytes, partition and offset), buffer the same failures and count
   the same stored and duplicate trajectories.
2. Bad records from Node each become one dead letter with its reason code (read on the topic
   and with `harness-r1 deadletter list`), the good one beside them is stored; with
   `--schema` producer.js refuses the file itself and sends nothing; the record producer.js
   builds when given no file is stored.

The npm packages are installed by `npm ci` from the example's package-lock.json into pytest's
cache folder (outside the git tree), once per lock file; the test skips only where node or npm
are missing or the install fails for want of a network.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from test_durability import synthetic_trajectory, wait_for
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.consumers.records import Record
from harness_r1.daemon.settings import Settings, load_settings
from harness_r1.daemon.store import StateStore
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-producer"
SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "trajectory.schema.json"
NODE, NPM = shutil.which("node"), shutil.which("npm")
#: npm's words for "the registry could not be reached" (a failed install for any other
#: reason, a lock file out of date say, fails the test).
OFFLINE = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network")
runner = CliRunner()


@pytest.fixture(scope="module")
def node_modules(request: pytest.FixtureRequest) -> Path:
    """The example's packages, installed once per lock file into pytest's cache folder."""
    if NODE is None or NPM is None:
        pytest.skip("node and npm are not installed (Debian packages nodejs and npm)")
    manifest = (EXAMPLE / "package.json").read_bytes() + (
        EXAMPLE / "package-lock.json"
    ).read_bytes()
    digest = hashlib.sha256(manifest).hexdigest()[:16]
    build = request.config.cache.mkdir("node-producer") / digest
    if (build / "node_modules" / "kafkajs" / "package.json").is_file():
        return build / "node_modules"
    staging = build.with_name(f"{digest}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(EXAMPLE / name, staging / name)
    done = subprocess.run(
        [NPM, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--ignore-scripts"],
        cwd=staging,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        output = done.stdout + done.stderr
        if OFFLINE.search(output):
            pytest.skip(f"npm ci could not reach the registry: {output.strip()[-300:]}")
        raise AssertionError(f"npm ci failed:\n{output}")
    try:
        staging.rename(build)
    except OSError:  # another process installed it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    return build / "node_modules"


def node_produce(
    node_modules: Path, bootstrap: str, topic: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """producer.js, run in place with the cached packages."""
    assert NODE is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_R1_")}
    env["NODE_PATH"] = str(node_modules)
    return subprocess.run(
        [NODE, str(EXAMPLE / "producer.js"), "--bootstrap", bootstrap, "--topic", topic, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def daemon_config(folder: Path, bootstrap: str) -> Path:
    """An ingest-only daemon on fresh topics and a fresh SQLite store (no batch is sealed)."""
    run = uuid.uuid4().hex[:8]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "daemon.yaml"
    config = {
        "cache": str(folder / "cache"),
        "state_url": f"sqlite:///{folder / 'state.db'}",
        "kafka_bootstrap": bootstrap,
        "trajectory_topic": f"traj-{run}",
        "release_topic": f"rel-{run}",
        "control_topic": f"ctl-{run}",
        "kafka": {"dead_letter_topic": f"dlq-{run}", "events_topic": f"events-{run}"},
        "loop": {"batch_size": 1_000_000, "batch_window_s": 1e9},
        "metrics": {"port": 0},
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


class Daemon:
    """One daemon started from a settings file; stopped by `close`."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.settings: Settings = load_settings(config)
        self.built: Built = build_daemon(
            self.settings, proposer=TemplateWriter(), key=uuid.uuid4().hex
        )
        self.built.health.start()
        self.built.daemon.start()

    @property
    def store(self) -> StateStore:
        return self.built.daemon.store

    @property
    def topic(self) -> str:
        return self.settings.trajectory_topic

    def wait_read(self, records: int) -> None:
        """Until the stored positions are past `records` records and no letter waits."""
        group = self.settings.kafka.group_id

        def read() -> bool:
            return sum(self.store.positions(group).values()) >= records

        wait_for(read, 60, f"the daemon to read {records} records")
        wait_for(lambda: self.store.count_pending_dead_letters() == 0, 30, "the outbox")

    def metrics(self, *names: str) -> list[str]:
        text = httpx.get(f"http://127.0.0.1:{self.built.health.port}/metrics", timeout=5).text
        return sorted(line for line in text.splitlines() if line.startswith(names))

    def close(self) -> None:
        self.built.daemon.stop()
        self.built.health.stop()
        self.built.close()


@pytest.fixture
def daemons(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    try:
        for name in ("python", "node"):
            started.append(Daemon(daemon_config(tmp_path / name, kafka_broker.bootstrap)))
        yield started
    finally:
        for daemon in started:
            daemon.close()


def stored_rows(store: StateStore) -> dict[str, Any]:
    """Every stored trajectory row and buffered failure, as comparable values."""
    from sqlalchemy import create_engine, text

    engine = create_engine(store.url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT trajectory_id, env, target, harness_version, agent_id, task_id, "
                    "task_type, success, reward, failed, payload, kafka_partition, kafka_offset "
                    "FROM daemon_trajectories ORDER BY trajectory_id"
                )
            ).all()
            buffered = conn.execute(
                text(
                    "SELECT trajectory_id, env, target, harness_version "
                    "FROM daemon_failure_buffer ORDER BY trajectory_id"
                )
            ).all()
    finally:
        engine.dispose()
    return {"trajectories": [tuple(r) for r in rows], "failures": [tuple(r) for r in buffered]}


def test_node_records_are_stored_exactly_like_our_clients(
    tmp_path: Path, kafka_broker: EmbeddedBroker, node_modules: Path, daemons: list[Daemon]
) -> None:
    ours, theirs = daemons
    rng = random.Random(19)
    trajectories = [synthetic_trajectory(i, rng) for i in range(30)]
    # a non-ASCII instruction: UTF-8 bytes must arrive as they were written
    trajectories[0] = trajectories[0].model_copy(
        update={"task": trajectories[0].task.model_copy(update={"instruction": "über 2 € ✓"})}
    )
    lines = [t.to_json_bytes() for t in trajectories]
    lines += [lines[3], lines[7], lines[3]]  # redelivered copies
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    producer = make_producer(ours.settings.kafka_client())
    try:
        for value in lines:  # as the demo fleet's agents send a trajectory
            publish(producer, ours.topic, value)
    finally:
        producer.close(timeout=5)
    done = node_produce(
        node_modules, kafka_broker.bootstrap, theirs.topic, "--compression", "gzip", str(path)
    )
    assert done.returncode == 0, done.stderr
    sent = [json.loads(line) for line in done.stdout.splitlines()]
    assert [s["line"] for s in sent] == list(range(1, len(lines) + 1))
    assert [s["trajectory_id"] for s in sent[:30]] == [t.trajectory_id for t in trajectories]

    for daemon in daemons:
        daemon.wait_read(len(lines))
    assert ours.store.trajectory_count() == theirs.store.trajectory_count() == 30
    expected = stored_rows(ours.store)
    assert len(expected["failures"]) == sum(1 for t in trajectories if t.outcome.reward < 1)
    assert stored_rows(theirs.store) == expected
    assert theirs.store.load_trajectory_payloads([trajectories[0].trajectory_id]) == [lines[0]]
    counted = ("harness_r1_trajectories_consumed_total", "harness_r1_trajectories_duplicate_total")
    assert theirs.metrics(*counted) == ours.metrics(*counted)
    assert "harness_r1_trajectories_duplicate_total 3.0" in theirs.metrics(*counted)


def dead_letters(settings: Settings, expected: int) -> list[Record]:
    records: list[Record] = []
    with BroadcastReader(settings.kafka_client(), [settings.kafka.dead_letter_topic]) as reader:
        deadline = time.monotonic() + 30
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(reader.poll(250))
        records.extend(reader.poll(500))
    return records


def test_bad_records_from_node_are_dead_lettered_with_their_reason(
    tmp_path: Path, kafka_broker: EmbeddedBroker, node_modules: Path
) -> None:
    daemon = Daemon(daemon_config(tmp_path / "node", kafka_broker.bootstrap))
    try:
        rng = random.Random(5)
        good = synthetic_trajectory(0, rng)
        doc = json.loads(good.to_json_bytes())

        def changed(**fields: Any) -> bytes:
            bad = json.loads(json.dumps(doc))
            bad["trajectory_id"] = f"bad-{uuid.uuid4().hex[:8]}"
            for path, value in fields.items():
                *parents, leaf = path.split("__")
                node = bad
                for part in parents:
                    node = node[part]
                node[leaf] = value
            return json.dumps(bad).encode()

        lines = [
            changed(schema_version="2.0"),
            changed(outcome__steps=-3),
            good.to_json_bytes(),
            changed(agent_id="a" * 300),
        ]
        path = tmp_path / "bad.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        expected = {1: "unsupported_version", 2: "invalid", 4: "unstorable"}

        refused = node_produce(
            node_modules, kafka_broker.bootstrap, daemon.topic, "--schema", str(SCHEMA), str(path)
        )
        assert refused.returncode == 1, refused.stderr
        assert "line 2: invalid: /outcome/steps must be >= 0" in refused.stderr
        assert "nothing sent" in refused.stderr and refused.stdout == ""

        done = node_produce(node_modules, kafka_broker.bootstrap, daemon.topic, str(path))
        assert done.returncode == 0, done.stderr
        sent = {s["line"]: s for s in map(json.loads, done.stdout.splitlines())}
        daemon.wait_read(len(lines))
        assert daemon.store.trajectory_count() == 1 and daemon.store.has_trajectory(
            good.trajectory_id
        )

        letters = dead_letters(daemon.settings, len(expected))
        assert len(letters) == len(expected), "each bad record dead-lettered once"
        by_offset = {int(dict(r.headers)["source_offset"]): r for r in letters}
        for line, code in expected.items():
            letter = by_offset[sent[line]["offset"]]
            headers = dict(letter.headers)
            assert headers["reason_code"].decode() == code
            assert headers["reason"].decode().startswith(f"{code}: ")
            assert headers["source_topic"].decode() == daemon.topic
            assert letter.value == lines[line - 1] and letter.key is None
        listed = runner.invoke(
            app, ["deadletter", "list", "--json", "--config", str(daemon.config)]
        )
        assert listed.exit_code == 0, listed.output
        views = [json.loads(line) for line in listed.stdout.splitlines()]
        assert sorted(v["reason_code"] for v in views) == sorted(expected.values())

        built = node_produce(node_modules, kafka_broker.bootstrap, daemon.topic)
        assert built.returncode == 0, built.stderr
        (example,) = [json.loads(line) for line in built.stdout.splitlines()]
        wait_for(
            lambda: daemon.store.has_trajectory(example["trajectory_id"]),
            30,
            "the example record producer.js builds to be stored",
        )
    finally:
        daemon.close()
