"""Failures the canary cannot replay, on the real broker and a real daemon: a record naming a
task the benchmark data lacks (`task-2`, where DBBench's ids look like `dev-002`) is stored and
counted as unreplayable, with its reason in the log, and never enters a batch (it once failed
its batch three times within a second); a failure of a real task enters its buffer as before.
`harness-r1 publish --dry-run` warns about the same line."""

from __future__ import annotations

import io
import logging
import uuid
from pathlib import Path

import pytest
from daemon_rig import ingest_settings
from test_durability import produce, wait_for
from test_stop_during_canary import failed_sql
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.daemon.logs import configure_logging
from harness_r1.daemon.wiring import build_daemon
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration


def _value(built, name: str, **labels: str) -> float:  # type: ignore[no-untyped-def]
    return built.registry.get_sample_value(name, labels) or 0.0


def test_a_failure_of_an_unknown_task_is_stored_counted_and_kept_out_of_batches(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    settings = ingest_settings(tmp_path, kafka_broker.bootstrap)
    ensure_topics(
        KafkaSettings(bootstrap=kafka_broker.bootstrap), [settings.trajectory_topic], partitions=2
    )
    buffer = io.StringIO()
    handler = configure_logging("json", "info", buffer)
    built = build_daemon(settings, proposer=TemplateWriter(), key=uuid.uuid4().hex)
    built.daemon.start()
    try:
        unknown, known = failed_sql("task-2", 0), failed_sql("dev-002", 1)
        produce(kafka_broker.bootstrap, settings.trajectory_topic, [unknown, known])
        store = built.daemon.store
        wait_for(lambda: store.trajectory_count() >= 2, 60, "both records stored")
        assert store.has_trajectory(unknown.trajectory_id)
        assert sum(b.size for b in store.open_buffers()) == 1  # only dev-002's failure
        name = "harness_r1_unreplayable_failures_total"
        assert _value(built, name, env="dbbench") == 1.0
        log = buffer.getvalue()
        assert "failure_unreplayable" in log and "task 'task-2' is not in dbbench/dev" in log
        assert "dev-000" in log  # the ids the split does hold
    finally:
        built.daemon.stop()
        built.close()
        logging.getLogger().removeHandler(handler)


def test_publish_warns_about_a_failure_it_cannot_replay(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [failed_sql("task-2", 0), failed_sql("dev-002", 1)]
    path.write_bytes(b"\n".join(t.to_json_bytes() for t in lines) + b"\n")
    result = CliRunner().invoke(app, ["publish", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output  # valid records: a warning, not a refusal
    assert f"{path}:1: warning: task 'task-2' is not in dbbench/dev" in result.output
    assert "harness-r1 data tasks dbbench dev" in result.output
    assert f"{path}:2:" not in result.output


def test_an_env_whose_data_cannot_be_read_lets_failures_through(tmp_path: Path) -> None:
    """A data root holding DBBench only: a WebShop failure cannot be checked, so it is let
    through (as before the check), and nothing raises into the ingest loop."""
    from harness_r1.daemon.replayable import ReplayableTasks
    from harness_r1.daemon.tasks import TaskIndex

    root = tmp_path / "data"
    (root / "dbbench").mkdir(parents=True)
    replay = ReplayableTasks(TaskIndex(root))
    assert replay.why_not("webshop", "fixed_heldout", "fixed_41") is None
    assert replay.why_not("nope", "dev", "x") is not None  # an env it never replays
