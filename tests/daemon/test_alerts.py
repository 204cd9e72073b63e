"""A real Prometheus server, loaded with ops/prometheus/rules.yml, scrapes a running daemon
whose ingest is stuck with records waiting (the SQLite store's write lock is held by another
connection, as by an operator's long transaction): the ingest-stalled and not-ready alerts go
pending, read back through Prometheus' HTTP API. Their `for:` durations (10 and 5 minutes) are
too long for a test, so a second copy of the rules, identical but for `for: 1s` and a
`variant="short_for"` label, is loaded beside them: its alerts must go firing. When the lock is
released ingest catches up and both clear. The daemon is real, the broker is real (tansu),
Prometheus is Debian's; without the `prometheus` binary this test skips, saying so.

Takes about a minute: the store's 30 s busy timeout passes before ingest reports it stuck.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from daemon_rig import ingest_settings
from test_durability import synthetic_trajectory, wait_for

from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.consumers.producer import make_producer, publish
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration
RULES = Path(__file__).resolve().parents[2] / "ops" / "prometheus" / "rules.yml"
RECORDS = 50
WATCHED = ("HarnessR1IngestStalled", "HarnessR1NotReady")


def _short_for_copy(path: Path) -> None:
    """The rules with every `for:` at 1 s and a label telling the copies apart."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        group["name"] += "-short-for"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
            rule.setdefault("labels", {})["variant"] = "short_for"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))


@pytest.fixture
def settings(tmp_path: Path, kafka_broker: EmbeddedBroker) -> Settings:
    return ingest_settings(tmp_path, kafka_broker.bootstrap, stuck_after_s=2.0, backoff_max_s=1.0)


@pytest.fixture
def daemon(settings: Settings) -> Iterator[Built]:
    built = build_daemon(settings, proposer=TemplateWriter(), key=uuid.uuid4().hex)
    built.health.start()
    built.daemon.start()
    yield built
    built.daemon.stop()
    built.health.stop()
    built.close()


@pytest.fixture
def prometheus(daemon: Built, tmp_path: Path, start_prometheus: Callable[[str], str]) -> str:
    shutil.copy(RULES, tmp_path / "rules.yml")
    _short_for_copy(tmp_path / "rules_short_for.yml")
    return start_prometheus(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files: [rules.yml, rules_short_for.yml]\n"
        "scrape_configs:\n  - job_name: harness-r1\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{daemon.health.port}']\n"
    )


def _scraped(api: str) -> bool:
    try:
        body = httpx.get(f"{api}/api/v1/query", params={"query": "up == 1"}, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return False  # not listening yet
    return bool(body.get("data", {}).get("result"))


def _alerts(api: str) -> dict[tuple[str, str], str]:
    """(alert name, variant) -> state, for the alerts watched here."""
    try:
        body = httpx.get(f"{api}/api/v1/alerts", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return {}
    found: dict[tuple[str, str], str] = {}
    for alert in body.get("data", {}).get("alerts", []):
        labels: dict[str, Any] = alert["labels"]
        if labels["alertname"] in WATCHED:
            found[(labels["alertname"], labels.get("variant", "as_shipped"))] = alert["state"]
    return found


def _stalled_summary(api: str) -> str:
    alerts = httpx.get(f"{api}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return " | ".join(
        a["annotations"]["summary"]
        for a in alerts
        if a["labels"]["alertname"] == "HarnessR1IngestStalled"
    )


def test_stuck_ingest_raises_the_alerts_in_a_real_prometheus(
    settings: Settings, daemon: Built, prometheus: str, tmp_path: Path
) -> None:
    wait_for(lambda: daemon.daemon.ready()[0], 30, "the daemon to be ready")
    wait_for(lambda: _scraped(prometheus), 60, "Prometheus to scrape the daemon")
    assert _alerts(prometheus) == {}  # a healthy daemon raises none of them
    blocker = sqlite3.connect(tmp_path / "state.db", timeout=30)
    blocker.execute("BEGIN IMMEDIATE")  # the store's write lock, held from now on
    try:
        producer = make_producer(settings.kafka_client())
        rng = random.Random(3)
        for i in range(RECORDS):
            publish(
                producer, settings.trajectory_topic, synthetic_trajectory(i, rng).to_json_bytes()
            )
        producer.close(timeout=5)
        expected = {
            ("HarnessR1IngestStalled", "as_shipped"): "pending",
            ("HarnessR1NotReady", "as_shipped"): "pending",
            ("HarnessR1IngestStalled", "short_for"): "firing",
            ("HarnessR1NotReady", "short_for"): "firing",
        }
        wait_for(lambda: _alerts(prometheus) == expected, 120, f"alerts {expected}")
        # The summary counts every record published: a first fetch may have come while the
        # producer was still at work, and the next lag reading follows the next failed try.
        waiting = f"stalled with {RECORDS} records waiting"
        wait_for(lambda: waiting in _stalled_summary(prometheus), 90, waiting)
    finally:
        blocker.rollback()
        blocker.close()
    wait_for(lambda: daemon.daemon.store.trajectory_count() == RECORDS, 60, "ingest to resume")
    wait_for(lambda: _alerts(prometheus) == {}, 60, "the alerts to clear")
