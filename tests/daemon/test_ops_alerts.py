"""Alerts an operator relies on, in a real Prometheus loaded with ops/prometheus/rules.yml
(and a copy with every `for:` at 1 s, as in test_alerts.py) scraping a real daemon:

1. the broker gone for longer than the rules' windows (the copy's rate window is 30 s, the
   outage 75 s): HarnessR1BrokerUnreachable and HarnessR1BrokerErrors fire and stay firing for
   the whole outage (not only at its start),
   while kafka-python's repeated warnings reach the log once each with a count; both clear
   once the broker is back;
2. an operator's `harness-r1 overlay rollback`, published by another process (the CLI): the
   daemon follows it on the control topic and counts it by actor, and
   HarnessR1OverlayRolledBack fires with `actor="operator"`.

Without the `prometheus` binary these skip, saying so.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from daemon_rig import ingest_settings
from test_alerts import _short_for_copy
from test_durability import HARNESS_R1, wait_for

from harness_r1.consumers.broker import EmbeddedBroker
from harness_r1.daemon.logs import configure_logging
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.wiring import Built, build_daemon
from harness_r1.demo.run import write_config
from harness_r1.deploy.signing import generate_keypair
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration
RULES = Path(__file__).resolve().parents[2] / "ops" / "prometheus" / "rules.yml"
WINDOW_S = 30  # the short copy's rate window (the shipped rules' is 5 minutes)
OUTAGE_S = 75.0  # more than twice that window: an alert on up->down transitions would clear


def _start(settings: Settings) -> Built:
    built = build_daemon(settings, proposer=TemplateWriter(), key=uuid.uuid4().hex)
    built.health.start()
    built.daemon.start()
    return built


def _stop(built: Built) -> None:
    built.daemon.stop()
    built.health.stop()
    built.close()


def _short_copy(path: Path) -> None:
    """The rules with every `for:` at 1 s (test_alerts.py's copy) and every rate window at
    30 s instead of 5 minutes, so an outage longer than the window fits in a test."""
    _short_for_copy(path)
    path.write_text(path.read_text().replace("[5m]", f"[{WINDOW_S}s]"))


def _prometheus(port: int, tmp_path: Path, start: Callable[[str], str]) -> str:
    shutil.copy(RULES, tmp_path / "rules.yml")
    _short_copy(tmp_path / "rules_short_for.yml")
    api = start(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files: [rules.yml, rules_short_for.yml]\n"
        "scrape_configs:\n  - job_name: harness-r1\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{port}']\n"
    )
    wait_for(lambda: bool(_query(api, "up == 1")), 60, "Prometheus to scrape the daemon")
    return api


def _query(api: str, query: str) -> list[dict[str, Any]]:
    try:
        body = httpx.get(f"{api}/api/v1/query", params={"query": query}, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return []
    return list(body.get("data", {}).get("result", []))


def _alerts(api: str, name: str) -> dict[str, tuple[str, dict[str, str]]]:
    """variant -> (state, labels) of alert `name`."""
    try:
        body = httpx.get(f"{api}/api/v1/alerts", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return {
        a["labels"].get("variant", "as_shipped"): (a["state"], a["labels"])
        for a in body.get("data", {}).get("alerts", [])
        if a["labels"]["alertname"] == name
    }


def _firing(api: str, name: str) -> bool:
    return _alerts(api, name).get("short_for", ("", {}))[0] == "firing"


@pytest.fixture
def log_buffer() -> Iterator[io.StringIO]:
    """The daemon's log as `harness-r1 run` writes it (JSON lines), captured."""
    import logging

    buffer = io.StringIO()
    handler = configure_logging("json", "info", buffer)
    try:
        yield buffer
    finally:
        logging.getLogger().removeHandler(handler)


def test_a_broker_outage_keeps_its_alerts_firing_until_the_broker_is_back(
    tmp_path: Path, start_prometheus: Callable[[str], str], log_buffer: io.StringIO
) -> None:
    broker = EmbeddedBroker()
    built: Built | None = None
    try:
        settings = ingest_settings(tmp_path, broker.bootstrap, backoff_max_s=1.0)
        built = _start(settings)
        api = _prometheus(built.health.port, tmp_path, start_prometheus)
        assert _query(api, "harness_r1_broker_reachable == 1")
        broker.stop()
        down_at = time.monotonic()
        wait_for(lambda: _firing(api, "HarnessR1BrokerUnreachable"), 60, "the alert to fire")
        fired_after = time.monotonic() - down_at
        wait_for(lambda: _firing(api, "HarnessR1BrokerErrors"), 30, "broker errors to fire")
        # both stay firing for the whole outage, past the error rate's window: every failed
        # poll counts, not only the transition to down
        checks = 0
        while time.monotonic() - down_at < OUTAGE_S:
            for name in ("HarnessR1BrokerUnreachable", "HarnessR1BrokerErrors"):
                assert _firing(api, name), (round(time.monotonic() - down_at), _alerts(api, name))
            checks += 1
            time.sleep(2)
        assert checks >= 10
        polls = _query(api, 'harness_r1_broker_errors_total{op="poll"}')
        # every failed poll counts (not only the up->down transition, which made 1); a poll
        # due for a metadata check blocks for the request timeout while the broker is away
        assert polls and float(polls[0]["value"][1]) >= 2, polls
        # kafka-python's repeats are collapsed: one line per message per minute
        lines = log_buffer.getvalue().splitlines()
        no_node = [line for line in lines if "No node available" in line]
        assert len(no_node) <= 3, f"{len(no_node)} lines of 'No node available'"

        broker.start()
        wait_for(lambda: not _firing(api, "HarnessR1BrokerUnreachable"), 120, "the alert to clear")
        print(
            f"\nbroker down {OUTAGE_S:.0f} s: unreachable alert firing after {fired_after:.1f} "
            f"s and at each of {checks} checks; {len(no_node)} 'No node available' log lines"
        )
    finally:
        if built is not None:
            _stop(built)
        broker.close()


def test_an_operators_rollback_reaches_the_daemons_metrics_and_its_alert(
    tmp_path: Path, kafka_broker: EmbeddedBroker, start_prometheus: Callable[[str], str]
) -> None:
    private, _ = generate_keypair(tmp_path / "keys", "ops")
    settings = ingest_settings(tmp_path, kafka_broker.bootstrap).model_copy(
        update={"signing_key": private}
    )
    config = write_config(settings, tmp_path / "daemon.yaml")
    built = _start(settings)
    try:
        api = _prometheus(built.health.port, tmp_path, start_prometheus)
        assert not _firing(api, "HarnessR1OverlayRolledBack")
        env = {"PATH": str(Path(HARNESS_R1).parent), "HOME": str(tmp_path), "USER": "alice"}
        done = subprocess.run(
            [str(HARNESS_R1), "--config", str(config), "overlay", "rollback", "--target",
             "pool-a", "--to", "base", "--reason", "INC-42"],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        followed = 'harness_r1_control_commands_followed_total{command="rollback"} > 0'
        wait_for(lambda: bool(_query(api, followed)), 60, "the daemon to count the rollback")
        [series] = _query(api, followed)
        assert series["metric"]["actor"] == "operator"
        wait_for(lambda: _firing(api, "HarnessR1OverlayRolledBack"), 60, "the alert to fire")
        _, labels = _alerts(api, "HarnessR1OverlayRolledBack")["short_for"]
        assert labels["actor"] == "operator"
        # the shipped rule has no `for:`: it fires too (its group evaluates on its own tick)
        wait_for(
            lambda: (
                _alerts(api, "HarnessR1OverlayRolledBack").get("as_shipped", ("",))[0] == "firing"
            ),
            30,
            "the shipped rule to fire",
        )
    finally:
        _stop(built)
