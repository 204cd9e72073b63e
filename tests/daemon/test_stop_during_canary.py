"""SIGTERM while a real canary runs: `harness-r1 run` as its own process on the real broker,
the deployed agent as its target and a real DBBench canary under way.

What an operator's stop must give (issue "Day-one operations", item 1): exit code 0 within the
drain timeout (no SIGABRT from a thread left in a model call), the batch back to `pending` at
once with its lease released and the attempt not counted, so the restarted daemon (or a
standby) takes it within seconds instead of after the lease expires.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from test_durability import DaemonProcess, produce, wait_for

from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.kafka_client import KafkaSettings
from harness_r1.consumers.topic_setup import ensure_topics
from harness_r1.contracts import Outcome, TargetRef, TaskRef, Termination, Timings, Trajectory
from harness_r1.contracts.trajectory import Step
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.store import StateStore

pytestmark = pytest.mark.integration

DRAIN_S = 20.0  # the config's drain timeout; systemd's TimeoutStopSec is 45 s over 30 s
FAILED_TASKS = ("dev-000", "dev-001")


def failed_sql(task_id: str, i: int) -> Trajectory:
    """A deployed agent's failed DBBench episode on a real dev task (the canary replays it)."""
    now = datetime.now(UTC)
    step = Step(
        index=0,
        observation="Error: no such table: student",
        raw_output="Action: Operation\n```sql\nSELECT * FROM student\n```",
        action="SELECT * FROM student",
        feedback="Error: no such table: student",
    )
    return Trajectory(
        trajectory_id=f"stop-{task_id}-{uuid.uuid4().hex[:8]}",
        agent_id=f"agent-{i}",
        target=TargetRef(model_id="SmolLM2-135M-Instruct-agent", version="1"),
        harness_version="base",
        task=TaskRef(
            env="dbbench",
            split="dev",
            task_id=task_id,
            task_type="other",
            instruction="How many students are there?",
            seed=i,
        ),
        steps=[step],
        outcome=Outcome(success=False, reward=0.0, termination=Termination.FAILURE, steps=1),
        timings=Timings(started_at=now, finished_at=now),
    )


def write_config(tmp_path: Path, bootstrap: str, topic: str, run: str) -> Path:
    settings = Settings()
    config = {
        "data": str(settings.data_root()),
        "cache": str(settings.cache),  # the model cache the other tests fill
        "state_url": f"sqlite:///{tmp_path / 'state.db'}",
        "kafka_bootstrap": bootstrap,
        "trajectory_topic": topic,
        "release_topic": f"rel-{run}",
        "control_topic": f"ctl-{run}",
        "kafka": {
            "group_id": f"stop-{run}",
            "dead_letter_topic": f"dlq-{run}",
            "events_topic": f"events-{run}",
            "poll_timeout_ms": 200,
        },
        "loop": {
            "batch_size": len(FAILED_TASKS),
            "k": 2,
            "guard_limit": 0,
            "max_steps": 10,
            "engineer_backend": "template",
            "target_policy": "smollm2-agent",
            "drain_timeout_s": DRAIN_S,
        },
        "scheduler": {"flush_interval_s": 1},
        "metrics": {"port": 0, "log_level": "info"},
    }
    path = tmp_path / "daemon.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_sigterm_during_a_canary_exits_0_and_hands_the_batch_back(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"stop-{run}"
    ensure_topics(KafkaSettings(bootstrap=kafka_broker.bootstrap), [topic], partitions=2)
    config = write_config(tmp_path, kafka_broker.bootstrap, topic, run)
    log = tmp_path / "daemon.log"
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    daemon = DaemonProcess(config, log)
    try:
        daemon.wait_started(120)
        produce(
            kafka_broker.bootstrap, topic, [failed_sql(t, i) for i, t in enumerate(FAILED_TASKS)]
        )
        # the model loads, the engineer proposes, then the canary's first episodes start
        wait_for(lambda: b"canary_planned" in log.read_bytes(), 300, "the canary to start")
        assert store.running_batches() == 1, daemon.tail()
        stopped_at = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        try:
            code = daemon.process.wait(timeout=DRAIN_S + 15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit within {DRAIN_S + 15} s of SIGTERM:\n{daemon.tail()}")
        took = time.monotonic() - stopped_at
        tail = daemon.tail(6000)
        assert code == 0, tail
        assert "terminate called" not in tail
        assert took <= DRAIN_S + 5, f"{took:.1f} s\n{tail}"
        assert "batch_handed_back" in tail, tail
        # back to pending now, not after a 600 s lease; its attempt not used up
        assert store.running_batches() == 0 and store.pending_batches() == 1
        [batch_id] = store.batch_ids("pending")
        batch = store.claim_batch("standby-w0", 60, max_attempts=3)
        assert batch is not None and batch.batch_id == batch_id
        assert batch.attempts == 1, batch
        # the model loaded and the canary ran, and still every line of the JSON log is JSON
        # (no progress bars, no transformers advisories)
        lines = [x for x in log.read_text().splitlines() if x.strip()]
        assert [x for x in lines if not x.startswith("{")] == []
        print(f"\nSIGTERM mid-canary: exit 0 after {took:.1f} s; batch {batch_id[:12]} pending")
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        store.close()
