"""The daemon's metrics as Prometheus itself sees them: `promtool check metrics` finds nothing
to fix in a scrape, and a real Prometheus server scraping the running daemon stores every
series an alert would use (dead letters by reason, lag by partition, process_*), at zero from
the start. The binaries come from Debian's `prometheus` package (.ci/run installs it); without
them these tests skip, saying so."""

from __future__ import annotations

import random
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from daemon_rig import ingest_settings
from test_durability import synthetic_trajectory, wait_for

from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.contracts import ActionOrigin, Trajectory
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration

PROMTOOL = shutil.which("promtool")


def half_forced() -> Trajectory:
    """A stored trajectory whose first half of the steps a hook forced (4 steps: 2 forced)."""
    base = synthetic_trajectory(0, random.Random(4))
    steps = [
        step.model_copy(
            update={"origin": ActionOrigin.FORCED if i < 2 else ActionOrigin.MODEL, "index": i}
        )
        for i, step in enumerate((base.steps * 4)[:4])
    ]
    outcome = base.outcome.model_copy(update={"steps": 4})
    return Trajectory.model_validate(
        {**base.model_dump(exclude={"origins"}), "steps": steps, "outcome": outcome}
    )


@pytest.fixture
def daemon(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Iterator[Built]:
    settings = ingest_settings(tmp_path, kafka_broker.bootstrap)
    run = uuid.uuid4().hex[:8]
    built = build_daemon(settings, proposer=TemplateWriter(), key=run)
    built.health.start()
    built.daemon.start()
    producer = make_producer(settings.kafka_client())
    for value in (b"not json", b"[]", b""):
        publish(producer, settings.trajectory_topic, value)
    publish(producer, settings.trajectory_topic, half_forced().to_json_bytes())
    producer.close(timeout=2)
    yield built
    built.daemon.stop()
    built.health.stop()
    built.close()


def scrape(built: Built) -> str:
    return httpx.get(f"http://127.0.0.1:{built.health.port}/metrics", timeout=5).text


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_promtool_finds_nothing_to_fix(daemon: Built) -> None:
    wait_for(lambda: 'reason="not_json"} 1.0' in scrape(daemon), 30, "a dead letter counted")
    text = scrape(daemon)
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == ""
    bad = subprocess.run(  # the check can fail: a counter without its _total suffix
        [PROMTOOL, "check", "metrics"],
        input="# HELP x_count a counter\n# TYPE x_count counter\nx_count 1\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode != 0


def test_a_real_prometheus_scrapes_the_daemon(
    daemon: Built, start_prometheus: Callable[[str], str]
) -> None:
    wait_for(lambda: 'reason="empty"} 1.0' in scrape(daemon), 30, "dead letters counted")
    url = start_prometheus(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: harness-r1\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{daemon.health.port}']\n"
    )
    api = f"{url}/api/v1/query"

    def query(expr: str) -> list[dict[str, object]]:
        try:
            body = httpx.get(api, params={"query": expr}, timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return []
        return list(body.get("data", {}).get("result", []))

    wait_for(lambda: bool(query("up == 1")), 60, "Prometheus to scrape the daemon")
    wait_for(lambda: bool(query("sum(harness_r1_dead_lettered_total) == 3")), 30, "dead letters")
    reasons = {
        str(row["metric"]["reason"]): float(row["value"][1])  # type: ignore[index]
        for row in query("harness_r1_dead_lettered_total")
    }
    assert reasons["not_json"] == 1 and reasons["invalid"] == 1 and reasons["empty"] == 1
    assert reasons["too_large"] == 0  # known reasons exist at zero
    assert query("harness_r1_consumer_lag == 0")
    assert query("process_resident_memory_bytes > 0")
    assert query('harness_r1_patch_win_rate{env="alfworld"}')  # before any candidate
    # who decided the stored steps: half of them forced
    wait_for(
        lambda: bool(query('harness_r1_forced_action_share{env="dbbench"} == 0.5')),
        30,
        "the forced share of the stored trajectory's steps",
    )
    assert query('harness_r1_action_steps_total{env="dbbench", origin="forced"} == 2')
