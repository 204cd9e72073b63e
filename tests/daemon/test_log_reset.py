"""A topic recreated under a running daemon (the in-memory broker restarted: every topic gone,
then created again, as after a broker that lost its data, a topic deleted and recreated, or a
restore from backup), on the real broker and a real daemon.

The daemon's stored positions (3 per partition) then point into a new log whose first 3 records
are new: once they were silently skipped (lag 0, nothing stored, nothing logged). Now:
- `/readyz` says that ingest of each partition is stopped and why, with
  `harness_r1_ingest_partition_held` 1 (kafka.on_log_reset: stop), and nothing is read under
  the stale positions;
- the operator's signed `harness-r1 ingest reset --partition P --to earliest` reads each
  partition again from its start: every record published after the recreation is stored, once;
- under kafka.on_log_reset: earliest the daemon does that by itself;
- the control follower, whose position in the recreated control topic is past the new log's
  end, reads the new log from its start: a `resume` published after the reset is followed.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from daemon_rig import ingest_settings
from test_durability import produce, synthetic_trajectory, wait_for
from typer.testing import CliRunner

from harness_r1.cli.app import app
from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.daemon.service import Daemon
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.demo.run import write_config
from harness_r1.deploy.signing import generate_keypair
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration
BEFORE, AFTER = 6, 6  # records before and after the recreation (3 and 3 per partition)
HALF = BEFORE + AFTER // 2  # once partition 0 alone was read again


def _topics(settings: Settings) -> list[str]:
    return [settings.trajectory_topic, settings.control_topic, settings.release_topic]


def _records(n: int, start: int) -> list:  # type: ignore[type-arg]
    import random

    rng = random.Random(start)
    return [synthetic_trajectory(start + i, rng) for i in range(n)]


def _cli(config: Path, *args: str) -> str:
    done = CliRunner().invoke(app, ["--config", str(config), *args])
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("policy", ["stop", "earliest"])
def test_a_recreated_topic_loses_no_record(tmp_path: Path, policy: str) -> None:
    broker = EmbeddedBroker()
    built: Built | None = None
    try:
        private, _ = generate_keypair(tmp_path / "keys", "ops")
        settings = ingest_settings(tmp_path, broker.bootstrap, on_log_reset=policy).model_copy(
            update={"signing_key": private}
        )
        kafka = KafkaSettings(bootstrap=broker.bootstrap)
        ensure_topics(kafka, [settings.trajectory_topic], partitions=2)
        built = build_daemon(settings, proposer=TemplateWriter(), key=uuid.uuid4().hex)
        built.daemon.start()
        daemon, store = built.daemon, built.daemon.store
        config = write_config(settings, tmp_path / "daemon.yaml")
        sample = built.registry.get_sample_value

        def followed(command: str) -> float:
            labels = {"command": command, "actor": "operator"}
            return sample("harness_r1_control_commands_followed_total", labels) or 0.0

        _cli(config, "overlay", "pause", "--target", "pool-z")  # a control position of 1
        wait_for(lambda: followed("pause") == 1.0, 60, "the daemon to follow the pause")
        before = _records(BEFORE, 0)
        produce(broker.bootstrap, settings.trajectory_topic, before)
        wait_for(lambda: store.trajectory_count() == BEFORE, 60, "the first records stored")
        assert daemon.ready() == (True, "ready")

        broker.stop()
        broker.start()  # in memory: every topic is gone (tansu recreates one a client asks for)
        ensure_topics(kafka, [settings.trajectory_topic], partitions=2)
        ensure_topics(kafka, _topics(settings)[1:])
        if policy == "stop":
            wait_for(lambda: "stopped" in daemon.ready()[1], 60, "ingest held")
        # the control follower checks its position against the control log every few seconds:
        # commands published before that check would be read from the stale position on (the
        # documented window); an operator acts after it
        time.sleep(Daemon.CONTROL_LOG_CHECK_S + 1)
        after = _records(AFTER, 1000)
        produce(broker.bootstrap, settings.trajectory_topic, after)

        if policy == "stop":
            ok, reason = daemon.ready()
            assert not ok and "ingest reset --partition 0" in reason, reason
            held = "harness_r1_ingest_partition_held"
            labels = {"topic": settings.trajectory_topic, "partition": "0"}
            assert sample(held, labels) == 1.0
            assert store.trajectory_count() == BEFORE  # held: nothing read under a stale position
            for partition in (0, 1):
                output = _cli(
                    config, "ingest", "reset", "--partition", str(partition), "--to",
                    "earliest", "--reason", "topic recreated",
                )  # fmt: skip
                assert "from offset 0 (earliest)" in output
                if partition == 0:  # the reopen that reads partition 0 keeps 1 held
                    wait_for(lambda: store.trajectory_count() == HALF, 60, "partition 0 read")
                    time.sleep(2)  # a stale position on partition 1 would read on meanwhile
                    assert store.trajectory_count() == HALF
                    assert f"{settings.trajectory_topic}:1 stopped" in daemon.ready()[1]

        # the control topic was reset too: a command published now sits at offset 0 of its new
        # log, below the follower's position 1; the follower reads the new log from its start
        _cli(config, "overlay", "resume", "--target", "pool-z")
        wait_for(lambda: followed("resume") == 1.0, 60, "the daemon to follow the resume")
        wait_for(lambda: store.trajectory_count() == BEFORE + AFTER, 60, "every new record stored")
        assert all(store.has_trajectory(t.trajectory_id) for t in after)
        wait_for(lambda: daemon.ready()[0], 30, "ready again")
        if policy == "stop":
            assert built.registry.get_sample_value(held, labels) == 0.0
    finally:
        if built is not None:
            built.daemon.stop()
            built.close()
        broker.close()
