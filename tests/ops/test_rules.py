"""The alert rules in ops/prometheus pass `promtool check rules` and their unit tests
(`promtool test rules`: every alert fires when its condition holds long enough, and a new
daemon alerts on nothing), and every metric they name is one the daemon exports (docs/metrics.md
lists them). promtool comes from Debian's `prometheus` package (.ci/run installs it); without it
these tests skip, saying so."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

RULES_DIR = Path(__file__).resolve().parents[2] / "ops" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus)"
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120
    )


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    checked = _promtool("check", "rules", "rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


@needs_promtool
def test_the_rules_unit_tests_pass() -> None:
    tested = _promtool("test", "rules", "rules_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


@needs_promtool
def test_the_unit_tests_can_fail(tmp_path: Path) -> None:
    """A rule changed under them (the down alert inverted) fails its unit test."""
    rules = (RULES_DIR / "rules.yml").read_text()
    broken = rules.replace('up{job="harness-r1"} == 0', 'up{job="harness-r1"} == 1')
    assert broken != rules
    (tmp_path / "rules.yml").write_text(broken)
    shutil.copy(RULES_DIR / "rules_test.yml", tmp_path / "rules_test.yml")
    assert PROMTOOL is not None
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", "rules_test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tested.returncode != 0 and "HarnessR1Down" in tested.stdout + tested.stderr


def test_every_alert_has_a_test_a_severity_and_a_runbook_section() -> None:
    groups = yaml.safe_load((RULES_DIR / "rules.yml").read_text())["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    tests = yaml.safe_load((RULES_DIR / "rules_test.yml").read_text())["tests"]
    tested = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert {rule["alert"] for rule in alerts} == tested  # each fires in some test
    for rule in alerts:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["runbook"].startswith("docs/operations.md#"), rule["alert"]


def test_the_rules_name_only_metrics_the_daemon_exports() -> None:
    from metric_names import exported_metric_names

    exported = exported_metric_names() | {"up"}
    groups = yaml.safe_load((RULES_DIR / "rules.yml").read_text())["groups"]
    named = set()
    for group in groups:
        for rule in group["rules"]:
            named |= set(re.findall(r"\b(harness_r1_[a-z0-9_]+|up)\b", rule["expr"]))
    unknown = named - exported
    assert not unknown, f"rules name metrics the daemon does not export: {sorted(unknown)}"
