"""The daemon's scheduled jobs live in the state database and keep their schedule across a
restart (a 24 h retention job is not pushed back by every restart)."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from daemon_rig import canary_for

from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.daemon.proposers import TemplateProposer
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.wiring import build_daemon

pytestmark = pytest.mark.integration


def next_runs(db: Path) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, next_run_time FROM daemon_scheduler_jobs").fetchall()
    return {str(job): float(at) for job, at in rows}


def test_jobs_survive_a_restart_with_their_schedule(
    tmp_path: Path, kafka_broker: EmbeddedBroker
) -> None:
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        cache=tmp_path / "cache",
        state_url=f"sqlite:///{tmp_path / 'state.db'}",
        kafka_bootstrap=kafka_broker.bootstrap,
        trajectory_topic=f"traj-{run}",
        kafka={"dead_letter_topic": f"dlq-{run}", "events_topic": f"ev-{run}"},
        metrics={"port": 0},
    )
    key = f"sched-{run}"
    built = build_daemon(settings, proposer=TemplateProposer(), canary_for=canary_for, key=key)
    built.daemon.start()
    first = next_runs(tmp_path / "state.db")
    built.daemon.stop()
    built.close()
    assert set(first) == {
        f"{key}:{name}" for name in ("flush", "guard", "grpo", "retention", "announce")
    }
    time.sleep(1.5)
    again = build_daemon(settings, proposer=TemplateProposer(), canary_for=canary_for, key=key)
    again.daemon.start()
    second = next_runs(tmp_path / "state.db")
    again.daemon.stop()
    again.close()
    assert second[f"{key}:retention"] == pytest.approx(first[f"{key}:retention"], abs=0.01)
