"""The Grafana dashboard (ops/grafana/dashboards/harness-r1.json): every query in it parses
in a real Prometheus server (its HTTP query API answers `success`, not `bad_data`), names only
metrics the daemon exports, and the panels an operator asked for are there. Grafana's own
variables are replaced by what Grafana would put there before a query is sent. Without the
`prometheus` binary (Debian package prometheus) the parse test skips, saying so."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from metric_names import exported_metric_names

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "ops" / "grafana" / "dashboards" / "harness-r1.json"
)
#: what Grafana substitutes for its variables before sending a query
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$instance": ".*"}


def _queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    found = [
        target["expr"]
        for panel in board["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    found += [item["expr"] for item in board["annotations"]["list"] if "expr" in item]
    for variable in board["templating"]["list"]:
        inner = re.fullmatch(r"label_values\((.+), \w+\)", variable["definition"])
        assert inner, variable["definition"]
        found.append(inner.group(1))  # the selector inside Grafana's label_values()
    return found


def _substituted(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable this test does not know: {expr}"
    return expr


def test_the_dashboard_names_only_metrics_the_daemon_exports() -> None:
    exported = exported_metric_names()
    named = {m for expr in _queries() for m in re.findall(r"\bharness_r1_[a-z0-9_]+", expr)}
    assert named, "no queries found"
    assert named <= exported, f"not exported by the daemon: {sorted(named - exported)}"


def test_the_dashboard_shows_what_operators_watch() -> None:
    text = " ".join(_queries())
    for metric in (
        "harness_r1_patch_win_rate",  # win rate per env
        "harness_r1_canary_delta",  # canary deltas
        "harness_r1_overlay_promotions_total",
        "harness_r1_overlay_rollbacks_total",  # by reason
        "harness_r1_guard_watching",  # live guard state
        "harness_r1_guard_decisions_total",
        "harness_r1_trajectories_consumed_total",  # ingest rate
        "harness_r1_consumer_lag",
        "harness_r1_dead_lettered_total",
        "harness_r1_sandbox_events_total",
        "harness_r1_grpo_updates_total",
        "harness_r1_engineer_info",  # engineer version
    ):
        assert metric in text, metric


@pytest.fixture
def prometheus_api(start_prometheus: Callable[[str], str]) -> str:
    api = start_prometheus("global:\n  scrape_interval: 15s\n") + "/api/v1/query"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(api, params={"query": "1"}, timeout=2).status_code == 200:
                return api
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "Prometheus did not start"
        time.sleep(0.2)


def test_every_query_parses_in_prometheus(prometheus_api: str) -> None:
    broken = httpx.get(prometheus_api, params={"query": "sum by (env (x)"}, timeout=5).json()
    assert broken["status"] == "error" and broken["errorType"] == "bad_data"  # it can fail
    failures = []
    for expr in _queries():
        answer = httpx.get(prometheus_api, params={"query": _substituted(expr)}, timeout=5).json()
        if answer.get("status") != "success":
            failures.append(f"{expr}: {answer.get('error')}")
    assert not failures, "\n".join(failures)
