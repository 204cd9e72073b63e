"""The daemon's Prometheus metrics: `DaemonMetrics`, from consumed trajectory to GRPO
update, and the fixed label values its series are created with.

One `DaemonMetrics` is built against a registry the caller owns (the daemon exposes it, tests
pass a fresh one). Labels come from small fixed sets (env, outcome, state, verdict, reason,
topic, queue), never ids: an id per series would grow the registry without bound.

A module of its own: the metric families are the list of what operators can watch (alerts
and dashboards name them); neither the logs nor the HTTP server that serves them need it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)

from harness_r1.contracts import ActionOrigin
from harness_r1.daemon.control import ACTORS, COMMANDS, RESULTS
from harness_r1.daemon.deadletter import REASON_CODES
from harness_r1.envs import ENV_NAMES

#: Label values known in advance (these, and the env labels): their series exist (at 0) from
#: the first scrape, so a rate() or an alert on them works before the first event. The env
#: label takes the envs the metrics were built for (the daemon's: the built-in ones and the
#: installed plugins); any other env read from a record is "other", so a producer's typo
#: cannot grow the series without bound.
OTHER_ENV = "other"
OUTCOMES = ("success", "failure")
BROKER_OPS = ("poll", "commit", "dead_letter", "send")
BATCH_STATES = ("sealed", "done", "failed", "retried", "handed_back", "stale")
GATE_VERDICTS = ("promote", "reject", "inconclusive")
GUARD_VERDICTS = ("promote", "rollback")
QUEUES = ("pending_batches", "running_batches", "dead_letters")


# Candidate minus base success rate on the same tasks: -1 (every task lost) to 1 (every task
# won), finer near 0 where most candidates land.
SHARE_BUCKETS = (0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
CANARY_DELTA_BUCKETS = (-1.0, -0.5, -0.25, -0.1, -0.05, 0.0, 0.05, 0.1, 0.25, 0.5, 1.0)


class DaemonMetrics:
    """The loop's metrics, from consumed trajectory to GRPO update.

    The attributes are the prometheus objects (label them directly); the methods exist where
    one event touches more than one series or needs state (the win-rate window)."""

    # Why this size: one declaration per metric family; the length is the list of what operators
    # can watch
    def __init__(
        self,
        registry: CollectorRegistry,
        win_window: int = 100,
        envs: Sequence[str] = ENV_NAMES,
    ) -> None:
        if win_window < 1:
            raise ValueError(f"win_window must be >= 1 candidates, got {win_window}")
        self.env_labels: tuple[str, ...] = (*dict.fromkeys(envs), OTHER_ENV)
        self.trajectories_consumed = Counter(
            "harness_r1_trajectories_consumed",
            "Trajectories stored (new ones, not redelivered copies), by env and outcome "
            "(success, failure); records that are not stored are in dead_lettered",
            ["env", "outcome"],
            registry=registry,
        )
        self.action_steps = Counter(
            "harness_r1_action_steps",
            "Steps of stored trajectories, by env and by who decided the action (origin: "
            + ", ".join(ActionOrigin)
            + ")",
            ["env", "origin"],
            registry=registry,
        )
        self.forced_action_share = Gauge(
            "harness_r1_forced_action_share",
            "Share of the steps of the trajectories stored since start that a hook forced "
            "(the model did not decide them), by env; NaN before the first step",
            ["env"],
            registry=registry,
        )
        self.candidate_forced_share = Histogram(
            "harness_r1_candidate_forced_share",
            "Canaried candidates' share of forced steps on their batch, by env",
            ["env"],
            buckets=SHARE_BUCKETS,
            registry=registry,
        )
        self.candidate_patch_alone = Histogram(
            "harness_r1_candidate_patch_alone_success",
            "Canaried candidates' success rate under the null policy (the harness without "
            "the model), by env",
            ["env"],
            buckets=SHARE_BUCKETS,
            registry=registry,
        )
        self.duplicates = Counter(
            "harness_r1_trajectories_duplicate",
            "Trajectories skipped because their episode was already consumed (redelivery)",
            registry=registry,
        )
        self.dead_lettered = Counter(
            "harness_r1_dead_lettered",
            "Records published to the dead-letter topic, by reason ("
            + ", ".join(REASON_CODES)
            + ")",
            ["reason"],
            registry=registry,
        )
        self.failures_buffered = Counter(
            "harness_r1_failures_buffered",
            "Failed episodes added to an open batch, by env (queue_depth has what is held now)",
            ["env"],
            registry=registry,
        )
        self.batches = Counter(
            "harness_r1_batches",
            "Batch transitions, by the state entered (sealed, done, failed, retried, "
            "handed_back: back to pending at a stop, the attempt not counted, stale)",
            ["state"],
            registry=registry,
        )
        self.packets = Counter(
            "harness_r1_packets",
            "Failure packets built and handed to the engineer",
            registry=registry,
        )
        self.candidates = Counter(
            "harness_r1_candidates",
            "Engineer candidates, by result (invalid, rejected, won, lost, error, ...)",
            ["result"],
            registry=registry,
        )
        self.canary_delta = Histogram(
            "harness_r1_canary_delta",
            "Candidate minus incumbent (live overlay or base) success rate on a batch's tasks, "
            "by env",
            ["env"],
            buckets=CANARY_DELTA_BUCKETS,
            registry=registry,
        )
        self.patch_win_rate = Gauge(
            "harness_r1_patch_win_rate",
            f"Share of the last {win_window} canaried candidates with a delta above 0, by env",
            ["env"],
            registry=registry,
        )
        self.gate_decisions = Counter(
            "harness_r1_gate_decisions",
            "Gate decisions on canaried candidates, by verdict",
            ["verdict"],
            registry=registry,
        )
        self.grpo_updates = Counter(
            "harness_r1_grpo_updates",
            "GRPO updates of the engineer that published a new version",
            registry=registry,
        )
        self.grpo_mean_reward = Gauge(
            "harness_r1_grpo_mean_reward",
            "Mean reward of the groups in the last GRPO update",
            registry=registry,
        )
        self.engineer = Info(
            "harness_r1_engineer",
            "The engineer version proposing patches (one series, replaced on update)",
            registry=registry,
        )
        self.consumer_lag = Gauge(
            "harness_r1_consumer_lag",
            "Records behind the end of the log (high watermark), by topic and partition",
            ["topic", "partition"],
            registry=registry,
        )
        self.store_errors = Counter(
            "harness_r1_store_errors",
            "State-store transactions that failed (the batch is read again), by operation",
            ["op"],
            registry=registry,
        )
        self.last_commit_timestamp = Gauge(
            "harness_r1_last_commit_timestamp_seconds",
            "Unix time of the last successful offset commit",
            registry=registry,
        )
        self.broker_errors = Counter(
            "harness_r1_broker_errors",
            "Kafka operations that failed, by operation (" + ", ".join(BROKER_OPS) + ")",
            ["op"],
            registry=registry,
        )
        self.unreplayable = Counter(
            "harness_r1_unreplayable_failures",
            "Failed trajectories stored but kept out of batches: their task is not in the "
            "daemon's benchmark data, so the canary cannot replay them, by env",
            ["env"],
            registry=registry,
        )
        self.partition_held = Gauge(
            "harness_r1_ingest_partition_held",
            "1 while ingest holds a partition whose log the broker reset under the stored "
            "position (kafka.on_log_reset: stop), by topic and partition",
            ["topic", "partition"],
            registry=registry,
        )
        self.broker_reachable = Gauge(
            "harness_r1_broker_reachable",
            "1 while the ingest reader reaches the Kafka broker, 0 for as long as it does not "
            "(set on every poll; a standby that does not poll keeps 1)",
            registry=registry,
        )
        self.broker_reachable.set(1)
        self.queue_depth = Gauge(
            "harness_r1_queue_depth",
            "Items held in an internal queue now (failures, batches, canary work, ...)",
            ["queue"],
            registry=registry,
        )
        self.control_commands = Counter(
            "harness_r1_control_commands_seen",
            "Control commands read from the control topic, by command and what the daemon did",
            ["command", "result"],
            registry=registry,
        )
        self.control_commands_followed = Counter(
            "harness_r1_control_commands_followed",
            "Signed control commands the daemon accepted from the control topic, by command "
            "and actor (operator, live_guard, daemon): an operator's rollback counts here "
            "whichever process published it",
            ["command", "actor"],
            registry=registry,
        )
        self.guard_watching = Gauge(
            "harness_r1_guard_watching",
            "Staged releases the live guard is judging now (released, not yet decided)",
            registry=registry,
        )
        self.guard_decisions = Counter(
            "harness_r1_guard_decisions",
            "Live guard verdicts on staged releases (promote, rollback)",
            ["verdict"],
            registry=registry,
        )
        self.ready = Gauge(
            "harness_r1_ready",
            "1 when the daemon is ready (what /readyz answers), 0 when not",
            registry=registry,
        )
        self._window = win_window
        self._recent: dict[str, deque[bool]] = {}
        self._steps: dict[str, dict[str, int]] = {}  # env label -> origin -> steps since start
        self._lock = threading.Lock()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        self._initialise_series()

    def _initialise_series(self) -> None:
        """Create every series whose label values are known, at zero (see OTHER_ENV)."""
        for env in self.env_labels:
            for outcome in OUTCOMES:
                self.trajectories_consumed.labels(env=env, outcome=outcome)
            self.failures_buffered.labels(env=env)
            self.canary_delta.labels(env=env)
            # Not 0 before the first candidate: no win rate yet is not a win rate of 0 (an
            # alert on a low win rate must not fire on a daemon that just started).
            self.unreplayable.labels(env=env)
            self.patch_win_rate.labels(env=env).set(float("nan"))
            self.forced_action_share.labels(env=env).set(float("nan"))
            self.candidate_forced_share.labels(env=env)
            self.candidate_patch_alone.labels(env=env)
            for origin in ActionOrigin:
                self.action_steps.labels(env=env, origin=origin)
        for reason in REASON_CODES:
            self.dead_lettered.labels(reason=reason)
        for op in BROKER_OPS:
            self.broker_errors.labels(op=op)
        for state in BATCH_STATES:
            self.batches.labels(state=state)
        for verdict in GATE_VERDICTS:
            self.gate_decisions.labels(verdict=verdict)
        for verdict in GUARD_VERDICTS:
            self.guard_decisions.labels(verdict=verdict)
        for queue in QUEUES:
            self.queue_depth.labels(queue=queue)
        self.store_errors.labels(op="ingest")
        for command in COMMANDS:
            for result in RESULTS:
                self.control_commands.labels(command=command, result=result)
            for actor in ACTORS:
                self.control_commands_followed.labels(command=command, actor=actor)

    def env_label(self, env: str) -> str:
        """The metric label of an env name read from a record: bounded to the known envs."""
        return env if env in self.env_labels else OTHER_ENV

    def observe_canary(self, env: str, delta: float) -> None:
        """One canaried candidate: its delta goes into the histogram and the env's win rate
        over the last `win_window` candidates is updated (canary workers may call it from
        several threads)."""
        env = self.env_label(env)
        self.canary_delta.labels(env=env).observe(delta)
        with self._lock:
            recent = self._recent.setdefault(env, deque(maxlen=self._window))
            recent.append(delta > 0)
            rate = sum(recent) / len(recent)
        self.patch_win_rate.labels(env=env).set(rate)

    def observe_steps(self, steps_by_origin: Mapping[tuple[str, str], int]) -> None:
        """Stored trajectories' steps by (env, origin): the counters, then each env's forced
        share since start (from running totals kept with the counters, so both agree)."""
        touched = set()
        with self._lock:
            for (env, origin), count in steps_by_origin.items():
                label = self.env_label(env)
                self.action_steps.labels(env=label, origin=origin).inc(count)
                totals = self._steps.setdefault(label, {})
                totals[origin] = totals.get(origin, 0) + count
                touched.add(label)
            for label in touched:
                total = sum(self._steps[label].values())
                if total:
                    forced = self._steps[label].get(ActionOrigin.FORCED, 0)
                    self.forced_action_share.labels(env=label).set(forced / total)

    def observe_attribution(
        self, env: str, forced_share: float | None, patch_alone: float | None
    ) -> None:
        """One canaried candidate's forced share and patch-alone success (None: not measured)."""
        label = self.env_label(env)
        if forced_share is not None:
            self.candidate_forced_share.labels(env=label).observe(forced_share)
        if patch_alone is not None:
            self.candidate_patch_alone.labels(env=label).observe(patch_alone)

    def watch_readiness(self, ready: Callable[[], tuple[bool, str]]) -> None:
        """`harness_r1_ready` asks `ready` on every scrape (what /readyz answers), so an
        alert can see readiness without a probe of its own."""

        def value() -> float:
            try:
                return 1.0 if ready()[0] else 0.0
            except Exception:  # noqa: BLE001 - a failing check means not ready
                return 0.0

        self.ready.set_function(value)

    def committed(self) -> None:
        """An offset commit succeeded now."""
        self.last_commit_timestamp.set_to_current_time()

    def set_engineer_version(self, version: str) -> None:
        self.engineer.info({"version": version})
