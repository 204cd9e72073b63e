"""While ingest fails, lag says how far behind it is and /readyz names the stuck partition.

The failure is real: the SQLite store's write lock is held by another connection (an operator's
long transaction, a backup), so every ingest transaction times out (after the store's 30 s busy
timeout: this test takes about a minute). Lag used to read 0 with
1,000 records stuck (it was only updated after a poll that worked)."""

from __future__ import annotations

import random
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from daemon_rig import ingest_settings
from test_durability import synthetic_trajectory, wait_for

from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration
RECORDS = 300


@pytest.fixture
def settings(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Settings:
    return ingest_settings(tmp_path, kafka_broker.bootstrap, stuck_after_s=2.0, backoff_max_s=1.0)


@pytest.fixture
def daemon(settings: Settings) -> Iterator[Built]:
    built = build_daemon(settings, proposer=TemplateWriter(), key=uuid.uuid4().hex)
    built.health.start()
    yield built
    built.daemon.stop()
    built.health.stop()
    built.close()


def test_lag_and_readiness_while_the_store_refuses_writes(
    settings: Settings, daemon: Built, tmp_path: Path
) -> None:
    daemon.daemon.start()
    wait_for(lambda: daemon.daemon.ready()[0], 30, "the daemon to be ready")
    blocker = sqlite3.connect(tmp_path / "state.db", timeout=30)
    blocker.execute("BEGIN IMMEDIATE")  # the store's write lock, held from now on
    try:
        producer = make_producer(settings.kafka_client())
        rng = random.Random(1)
        for i in range(RECORDS):
            value = synthetic_trajectory(i, rng).to_json_bytes()
            publish(producer, settings.trajectory_topic, value, partition=0)
        producer.close(timeout=5)
        url = f"http://127.0.0.1:{daemon.health.port}"
        lag = f'harness_r1_consumer_lag{{partition="0",topic="{settings.trajectory_topic}"}}'

        def lag_is(value: float) -> bool:
            return f"{lag} {value}" in httpx.get(f"{url}/metrics", timeout=5).text

        wait_for(lambda: lag_is(float(RECORDS)), 60, "lag to show the stuck records")
        wait_for(lambda: httpx.get(f"{url}/readyz").status_code == 503, 60, "not ready")
        reason = httpx.get(f"{url}/readyz").text
        assert f"partition {settings.trajectory_topic}:0 stuck at offset 0" in reason, reason
        assert f"{RECORDS} records behind" in reason and "locked" in reason, reason
        errors = 'harness_r1_store_errors_total{op="ingest"}'
        assert f"{errors} 0.0" not in httpx.get(f"{url}/metrics").text
    finally:
        blocker.rollback()
        blocker.close()
    wait_for(lambda: daemon.daemon.store.trajectory_count() == RECORDS, 60, "ingest to resume")
    wait_for(lambda: lag_is(0.0), 30, "lag 0")
    wait_for(lambda: httpx.get(f"{url}/readyz").status_code == 200, 30, "ready again")
