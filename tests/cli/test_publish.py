"""`harness-r1 publish FILE.jsonl`: lines checked by the daemon's own parser (numbered as an
editor numbers them), all or nothing unless --skip-invalid, --dry-run sends nothing; on the
real broker, what it sends is what our agents send and the daemon's ingest stores it. Also:
the example record of docs/agents.md passes the command and the JSON Schema."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.cli.publish import Line, check_lines, read_lines
from harness_r1.consumers.broadcast_reader import BroadcastReader
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.records import Record
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.contracts import Outcome, TargetRef, TaskRef, Termination, Timings, Trajectory
from harness_r1.contracts.trajectory import Step
from harness_r1.daemon.ingest import IngestConfig, TrajectoryIngest
from harness_r1.daemon.settings import Settings, load_settings
from harness_r1.daemon.store import StateStore

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
LIMIT = 1024 * 1024


def trajectory(i: int, success: bool = False) -> Trajectory:
    now = datetime(2024, 6, 1, 12, 0, i % 60, tzinfo=UTC)
    steps = [Step(index=0, observation="Tisch t0: id, name, preis", raw_output="x", action="y")]
    return Trajectory(
        trajectory_id=f"pub-{i}-{uuid.uuid4().hex[:8]}",
        agent_id=f"agent-{i % 3}",
        target=TargetRef(model_id="smollm2-135m"),
        harness_version="base",
        task=TaskRef(
            env="dbbench",
            split="dev",
            task_id=f"task-{i}",
            task_type="SELECT",
            instruction="Wie viele Zeilen kosten über 2 €?",
            seed=i,
        ),
        steps=steps,
        outcome=Outcome(
            success=success,
            reward=1.0 if success else 0.0,
            termination=Termination.SUCCESS if success else Termination.FAILURE,
            steps=1,
        ),
        timings=Timings(started_at=now, finished_at=now),
    )


def variant(t: Trajectory, **changes: object) -> bytes:
    doc = json.loads(t.to_json_bytes())
    for path, value in changes.items():
        node = doc
        *parents, leaf = path.split("__")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return json.dumps(doc).encode()


# --- reading and checking, no broker -------------------------------------------------------


def test_lines_are_numbered_as_an_editor_numbers_them(tmp_path: Path) -> None:
    a, b = trajectory(1).to_json_bytes(), trajectory(2).to_json_bytes()
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"\n" + a + b"\r\n  \n" + b)  # blank, CRLF, blank, no final newline
    assert read_lines(path) == [Line(2, a), Line(4, b)]


def test_each_line_gets_the_reason_the_daemon_would_dead_letter_it_with() -> None:
    good = trajectory(1)
    lines = [
        Line(1, good.to_json_bytes()),
        Line(2, b"{not json"),
        Line(3, variant(trajectory(3), schema_version="2.0")),
        Line(4, variant(trajectory(4), outcome__steps=-3)),
        Line(5, variant(trajectory(5), agent_id="a" * 300)),
        Line(6, variant(trajectory(6), task__instruction="z" * 3_000)),
        Line(7, good.to_json_bytes()),
    ]
    checked = check_lines(lines, max_bytes=2048)
    codes = {line.number: reason.split(":")[0] for line, reason in checked.invalid}
    assert codes == {
        2: "not_json",
        3: "unsupported_version",
        4: "invalid",
        5: "unstorable",
        6: "too_large",
    }
    assert "outcome.steps" in dict((ln.number, r) for ln, r in checked.invalid)[4]
    assert [(line.number, tid) for line, tid in checked.valid] == [
        (1, good.trajectory_id),
        (7, good.trajectory_id),
    ]
    assert checked.repeats == [(7, 1)]


def test_the_documented_example_passes_publish_and_the_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    text = (REPO / "docs" / "agents.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, re.DOTALL)
    assert len(blocks) == 1
    example = json.loads(blocks[0])
    path = tmp_path / "example.jsonl"
    path.write_text(json.dumps(example) + "\n", encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"cache": str(tmp_path / "cache")}))
    result = runner.invoke(app, ["publish", str(path), "--dry-run", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "1 valid, 0 invalid: nothing sent (--dry-run)" in result.stdout
    schema = json.loads((REPO / "docs" / "schemas" / "trajectory.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    assert list(validator.iter_errors(example)) == []
    example["outcome"]["steps"] = -1
    assert list(validator.iter_errors(example)), "the schema check can fail"


# --- on the real broker ---------------------------------------------------------------------


def broker_config(tmp_path: Path, bootstrap: str, **kafka: object) -> tuple[Path, Settings]:
    run = uuid.uuid4().hex[:8]
    path = tmp_path / "daemon.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "cache": str(tmp_path / "cache"),
                "state_url": f"sqlite:///{tmp_path / 'state.db'}",
                "kafka_bootstrap": bootstrap,
                "trajectory_topic": f"traj-{run}",
                "kafka": {"dead_letter_topic": f"dlq-{run}", **kafka},
            }
        )
    )
    settings = load_settings(path)
    ensure_topics(settings.kafka_client(), [settings.trajectory_topic], 1)
    return path, settings


def on_topic(settings: Settings, expected: int) -> list[Record]:
    """Everything on the trajectory topic: polls until `expected` records came, then once
    more, so a record beyond them shows too."""
    records: list[Record] = []
    with BroadcastReader(settings.kafka_client(), [settings.trajectory_topic]) as reader:
        for _ in range(20):
            records.extend(reader.poll(250))
            if len(records) >= expected:
                break
        records.extend(reader.poll(500))
    return records


def ingest(settings: Settings, tmp_path: Path, expected: int) -> StateStore:
    """The daemon's ingest over the topic until it has read `expected` records."""
    store = StateStore(settings.registry_url())
    config = IngestConfig(
        topic=settings.trajectory_topic,
        group="publish-test",
        dead_letter_topic=settings.kafka.dead_letter_topic,
        max_record_bytes=settings.kafka.max_record_bytes,
    )

    def no_dead_letters(*args: object) -> None:
        raise AssertionError(f"nothing published here should be dead-lettered: {args[:1]}")

    reader = TrajectoryIngest(settings.kafka_client(), config, store, no_dead_letters)
    try:
        seen = 0
        for _ in range(40):
            seen += reader.poll_once(250).records
            if seen >= expected:
                break
        assert seen == expected
    finally:
        reader.close()
    return store


@pytest.mark.integration
def test_a_valid_file_is_sent_as_our_agents_send_and_stored(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    config, settings = broker_config(tmp_path, kafka_broker.bootstrap)
    trajectories = [trajectory(i, success=i % 3 == 0) for i in range(6)]
    lines = [t.to_json_bytes() for t in trajectories] + [trajectories[0].to_json_bytes()]
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    result = runner.invoke(app, ["--config", str(config), "publish", str(path)])
    assert result.exit_code == 0, result.output
    assert f"7 valid, 0 invalid: 7 sent to {settings.trajectory_topic}" in result.stdout
    assert f"{path}:7: same trajectory_id as line 1" in result.stderr

    records = on_topic(settings, len(lines))
    assert [r.value for r in records] == lines  # the file's bytes, in its order
    assert all(r.key is None and r.headers == () for r in records)  # like the fleet's sink
    store = ingest(settings, tmp_path, len(lines))
    try:
        assert store.trajectory_count() == 6
        ids = [t.trajectory_id for t in trajectories]
        assert store.load_trajectory_payloads(ids) == lines[:6]
        assert sum(b.size for b in store.open_buffers()) == 4  # the failures, buffered
    finally:
        store.close()


@pytest.mark.integration
def test_an_invalid_line_is_named_and_nothing_is_sent_unless_skip_invalid(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    config, settings = broker_config(tmp_path, kafka_broker.bootstrap, max_record_bytes=2048)
    good = [trajectory(i).to_json_bytes() for i in range(3)]
    bad_version = variant(trajectory(10), schema_version="9.0")
    too_big = variant(trajectory(11), task__instruction="y" * 3_000)
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join([good[0], bad_version, good[1], b"", too_big, good[2]]) + b"\n")

    refused = runner.invoke(app, ["publish", str(path), "--config", str(config)])
    assert refused.exit_code == 1, refused.output
    assert f"{path}:2: unsupported_version: " in refused.stderr
    assert f"{path}:5: too_large: " in refused.stderr  # the daemon's limit, from the settings
    assert "3 valid, 2 invalid: nothing sent" in refused.stdout

    assert on_topic(settings, 0) == [], "one invalid line: nothing sent"

    skipped = runner.invoke(app, ["publish", str(path), "--skip-invalid", "--config", str(config)])
    assert skipped.exit_code == 1, skipped.output
    assert f"3 valid, 2 invalid: 3 sent to {settings.trajectory_topic}" in skipped.stdout
    assert [r.value for r in on_topic(settings, 3)] == good


def good_file(tmp_path: Path, lines: list[bytes]) -> Path:
    path = tmp_path / "good.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.mark.integration
def test_dry_run_checks_and_sends_nothing(tmp_path: Path, kafka_broker: EmbeddedBroker) -> None:
    config, settings = broker_config(tmp_path, kafka_broker.bootstrap)
    path = good_file(tmp_path, [trajectory(i).to_json_bytes() for i in range(3)])
    result = runner.invoke(app, ["publish", str(path), "--dry-run", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "3 valid, 0 invalid: nothing sent (--dry-run)" in result.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"[]\n")
    result = runner.invoke(app, ["publish", str(bad), "--dry-run", "--config", str(config)])
    assert result.exit_code == 1 and f"{bad}:1: invalid: " in result.stderr
    assert on_topic(settings, 0) == []
