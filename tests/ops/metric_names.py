"""Every metric name a daemon's /metrics can carry, from the metric objects the daemon
registers (DaemonMetrics, DeployMetrics, SandboxMetrics: see daemon/wiring.py), expanded as
Prometheus sees them (a counter's `_total`, a histogram's `_bucket`/`_sum`/`_count`, an info's
`_info`) plus the process collector's. Shared by the rules, dashboard and docs tests."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from harness_r1.daemon.metrics import DaemonMetrics
from harness_r1.deploy.publisher import DeployMetrics
from harness_r1.sandbox.metrics import SandboxMetrics

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "info": ("_info",),
    "summary": ("_sum", "_count", "_created"),
}


def daemon_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    DaemonMetrics(registry)
    DeployMetrics(registry)
    SandboxMetrics(registry)
    return registry


def metric_families() -> dict[str, tuple[str, str]]:
    """Family name -> (type, help) of every metric the daemon registers."""
    return {
        family.name: (family.type, family.documentation) for family in daemon_registry().collect()
    }


def exported_metric_names() -> set[str]:
    names = set()
    for name, (kind, _) in metric_families().items():
        suffixes = _SUFFIXES.get(kind, ("",))
        names |= {name + suffix for suffix in suffixes}
    return names
