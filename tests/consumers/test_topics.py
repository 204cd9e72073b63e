"""Topic provisioning against the real (embedded) broker, and `harness-r1 topics create|
describe` in the order an operator runs them: plan, create, create again (nothing changes),
describe; a topic that exists with the wrong shape is reported and fails the command."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.consumers.topics import (
    TopicSpec,
    TopicState,
    create_topics,
    describe_topics,
    differences,
)
from harness_r1.daemon.settings import Settings, load_settings
from harness_r1.daemon.topics import recommended_topics

runner = CliRunner()


def _config(tmp_path: Path, bootstrap: str) -> tuple[Path, Settings]:
    run = uuid.uuid4().hex[:8]
    path = tmp_path / "daemon.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "kafka_bootstrap": bootstrap,
                "trajectory_topic": f"traj-{run}",
                "release_topic": f"rel-{run}",
                "control_topic": f"ctl-{run}",
                "kafka": {"dead_letter_topic": f"dlq-{run}", "events_topic": f"ev-{run}"},
            }
        )
    )
    return path, load_settings(path)


def test_recommendations_follow_the_settings() -> None:
    settings = Settings(kafka={"max_record_bytes": 4096})
    specs = {spec.name: spec for spec in recommended_topics(settings, replication_factor=3)}
    trajectories = specs[settings.trajectory_topic]
    assert trajectories.partitions == 6
    # an oversized trajectory must reach the daemon (dead-lettered with its reason)
    assert trajectories.configs["max.message.bytes"] == "8192"
    for name in (settings.release_topic, settings.control_topic):
        assert specs[name].partitions == 1 and specs[name].configs["retention.ms"] == "-1"
    assert all(spec.configs["min.insync.replicas"] == "2" for spec in specs.values())
    assert all(spec.replication_factor == 3 for spec in specs.values())
    default = recommended_topics(settings)
    assert all("min.insync.replicas" not in spec.configs for spec in default)
    with pytest.raises(ValueError, match="trajectory_partitions"):
        recommended_topics(settings, trajectory_partitions=0)


def test_differences_in_an_operators_words() -> None:
    spec = TopicSpec("t", 1, 3, {"retention.ms": "-1"})
    assert differences(spec, TopicState("t", exists=False)) == [
        "missing: run `harness-r1 topics create`"
    ]
    state = TopicState("t", True, partitions=4, replication_factor=1, configs={"retention.ms": "5"})
    assert differences(spec, state) == [
        "4 partitions: must be 1 (one order for every reader)",
        "replication 1, recommended 3",
        "retention.ms=5, recommended -1",
    ]
    # what the broker does not report is not a difference
    assert differences(spec, TopicState("t", True, 1, 3, {})) == []


@pytest.mark.integration
def test_create_then_describe_on_the_broker(tmp_path: Path, kafka_broker: EmbeddedBroker) -> None:
    _, settings = _config(tmp_path, kafka_broker.bootstrap)
    kafka = settings.kafka_client()
    specs = recommended_topics(settings, trajectory_partitions=3)
    names = [spec.name for spec in specs]
    assert [s.exists for s in describe_topics(kafka, names)] == [False] * 5
    assert create_topics(kafka, specs) == dict.fromkeys(names, "created")
    assert create_topics(kafka, specs) == dict.fromkeys(names, "exists")  # idempotent
    states = {state.name: state for state in describe_topics(kafka, names)}
    assert states[settings.trajectory_topic].partitions == 3
    assert all(states[name].partitions == 1 for name in names[1:])
    assert all(state.replication_factor == 1 for state in states.values())
    assert all(differences(spec, states[spec.name]) == [] for spec in specs)


@pytest.mark.integration
def test_the_cli_plans_creates_and_describes(tmp_path: Path, kafka_broker: EmbeddedBroker) -> None:
    config, settings = _config(tmp_path, kafka_broker.bootstrap)
    args = ["--config", str(config)]
    plan = runner.invoke(app, ["topics", "create", *args, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    planned = [json.loads(line) for line in plan.output.splitlines()]
    assert [row["topic"] for row in planned][0] == settings.trajectory_topic
    described = runner.invoke(app, ["topics", "describe", *args, "--json"])
    assert described.exit_code == 1  # nothing created yet: the plan created nothing

    created = runner.invoke(app, ["topics", "create", *args, "--trajectory-partitions", "2"])
    assert created.exit_code == 0, created.output
    assert f"{settings.trajectory_topic}: created" in created.output
    again = runner.invoke(app, ["topics", "create", *args, "--trajectory-partitions", "2"])
    assert again.exit_code == 0 and f"{settings.control_topic}: exists" in again.output

    described = runner.invoke(
        app, ["topics", "describe", *args, "--json", "--trajectory-partitions", "2"]
    )
    assert described.exit_code == 0, described.output
    rows = {row["topic"]: row for row in map(json.loads, described.output.splitlines())}
    assert rows[settings.trajectory_topic]["partitions"] == 2
    assert all(row["differences"] == [] for row in rows.values())
    table = runner.invoke(app, ["topics", "describe", *args])
    assert table.exit_code == 0 and "recommended 6" in table.output  # the default asks for 6


@pytest.mark.integration
def test_a_control_topic_with_several_partitions_fails_create(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    """Seq order of control commands needs one partition: a topic created otherwise (by
    hand, or auto-created by a broker) is reported, and the command fails."""
    config, settings = _config(tmp_path, kafka_broker.bootstrap)
    ensure_topics(settings.kafka_client(), [settings.control_topic], partitions=3)
    result = runner.invoke(app, ["topics", "create", "--config", str(config)])
    assert result.exit_code == 1
    assert "3 partitions: must be 1" in result.output
