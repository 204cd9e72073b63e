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
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.wiring import build_daemon
from harness_r1.trainer.writers import TemplateWriter

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
    built = build_daemon(settings, proposer=TemplateWriter(), canary_for=canary_for, key=key)
    built.daemon.start()
    first = next_runs(tmp_path / "state.db")
    built.daemon.stop()
    built.close()
    assert set(first) == {
        f"{key}:{name}" for name in ("flush", "guard", "grpo", "retention", "announce", "engineer")
    }
    time.sleep(1.5)
    again = build_daemon(settings, proposer=TemplateWriter(), canary_for=canary_for, key=key)
    again.daemon.start()
    second = next_runs(tmp_path / "state.db")
    again.daemon.stop()
    again.close()
    assert second[f"{key}:retention"] == pytest.approx(first[f"{key}:retention"], abs=0.01)


def test_two_daemons_starting_at_once_on_a_new_database_both_start(tmp_path: Path) -> None:
    """apscheduler creates its job table at start (check, then create); two daemons starting
    together on a fresh database raced there and one died ("table daemon_scheduler_jobs
    already exists", seen in the SIGKILL standby test). 20 fresh databases, two stores each
    started at the same instant from two threads: every start succeeds."""
    import threading

    from apscheduler.schedulers.background import BackgroundScheduler

    from harness_r1.daemon.scheduler import _resilient_jobstore

    for n in range(20):
        url = f"sqlite:///{tmp_path / f'jobs-{n}.db'}"
        stores = [_resilient_jobstore(url) for _ in range(2)]
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def start(store: object, barrier: threading.Barrier, errors: list[BaseException]) -> None:
            barrier.wait()
            try:
                store.start(BackgroundScheduler(), "default")  # type: ignore[attr-defined]
            except BaseException as err:  # noqa: BLE001 - collected for the assertion
                errors.append(err)

        threads = [threading.Thread(target=start, args=(s, barrier, errors)) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors, errors
        for store in stores:
            store.shutdown()
