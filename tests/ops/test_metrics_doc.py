"""docs/metrics.md lists every metric the daemon registers with its type and labels, and for
each the alerts in ops/prometheus/rules.yml that use it: a metric added, relabelled or newly
alerted on without the doc being updated fails here."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from metric_names import daemon_registry

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"


def _doc_rows() -> dict[str, list[str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"\| `(harness_r1_[a-z0-9_]+)` \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


def _alerts_using(name: str) -> str:
    groups = yaml.safe_load((ROOT / "ops" / "prometheus" / "rules.yml").read_text())["groups"]
    pattern = re.compile(r"\b" + re.escape(name) + r"(_total|_bucket|_sum|_count|_info)?\b")
    used = sorted(
        rule["alert"] for group in groups for rule in group["rules"] if pattern.search(rule["expr"])
    )
    return ", ".join(used) or "-"


def test_every_metric_is_documented_with_its_type_labels_and_alerts() -> None:
    rows = _doc_rows()
    registry = daemon_registry()
    seen = set()
    for collector in list(registry._collector_to_names):  # noqa: SLF001 - the metric objects
        if not hasattr(collector, "_labelnames"):
            continue  # the process and platform collectors (named in the doc's prose)
        name = collector._name
        seen.add(name)
        assert name in rows, f"{name} is not in docs/metrics.md"
        kind, labels, meaning, alerts = rows[name]
        assert kind == collector._type, (name, kind)
        assert labels == (", ".join(collector._labelnames) or "-"), (name, labels)
        assert meaning, name
        assert alerts == _alerts_using(name), (name, alerts, _alerts_using(name))
    client = {f"harness_r1_client_{name}" for name in ("messages", "rejections", "swaps")}
    assert set(rows) - seen == client  # nothing documented that no one exports
