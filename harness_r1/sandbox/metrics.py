"""Prometheus metrics of the sandbox, built against a registry the caller passes in (the daemon
owns the registry and exposes it; tests pass a fresh one)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class SandboxMetrics:
    """`isolated` says whether the last worker started with every isolation layer (0 means
    untrusted patches are being refused, or run unisolated in development); `events` counts
    hook faults and worker lifecycle events by kind."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.isolated = Gauge(
            "harness_r1_sandbox_isolated",
            "1 when hook workers start with every isolation layer, 0 when isolation is missing "
            "(NaN until the first worker started)",
            registry=registry,
        )
        # no worker yet is not 'isolation missing': an alert on == 0 must not fire at start
        self.isolated.set(float("nan"))
        self.shared_uid = Gauge(
            "harness_r1_sandbox_shared_uid",
            "1 when hook workers run isolated but with the daemon's own uid (started as "
            "non-root with accept_shared_uid), 0 when they have a uid of their own",
            registry=registry,
        )
        self.events = Counter(
            "harness_r1_sandbox_events",
            "Sandbox events by kind (timeouts, crashes, violations, refusals, restarts, ...)",
            ["kind"],
            registry=registry,
        )

    def event(self, kind: str) -> None:
        self.events.labels(kind=kind).inc()
