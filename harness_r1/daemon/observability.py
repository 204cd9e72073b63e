"""The daemon's logs, metrics and health endpoints.

Logs: structlog, rendered through the standard library's logging so that lines from
kafka-python, SQLAlchemy or APScheduler come out in the same JSON shape as ours. Ids bound
with `structlog.contextvars.bound_contextvars(packet_id=..., overlay_id=..., group_id=...)`
appear in every line written inside the block, whoever writes it.

Metrics: one `DaemonMetrics` built against a registry the caller owns (the daemon exposes it,
tests pass a fresh one). Labels come from small fixed sets (env, outcome, state, verdict,
reason, topic, queue), never ids: an id per series would grow the registry without bound.

Health: `HealthServer` serves /metrics, /healthz (the process answers) and /readyz (the
daemon's own view: assigned partitions, reachable store, ...) from a daemon thread.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO
from urllib.parse import urlsplit

import structlog
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from harness_r1.contracts import ActionOrigin
from harness_r1.daemon.control import ACTORS, COMMANDS, RESULTS
from harness_r1.daemon.deadletter import REASON_CODES
from harness_r1.envs import ENV_NAMES

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: Label values known in advance: their series exist (at 0) from the first scrape, so a rate()
#: or an alert on them works before the first event. An env outside ENV_NAMES is "other".
ENV_LABELS = (*ENV_NAMES, "other")
OUTCOMES = ("success", "failure")
BROKER_OPS = ("poll", "commit", "dead_letter", "send")
BATCH_STATES = ("sealed", "done", "failed", "retried", "handed_back", "stale")
GATE_VERDICTS = ("promote", "reject", "inconclusive")
GUARD_VERDICTS = ("promote", "rollback")
QUEUES = ("pending_batches", "running_batches", "dead_letters")
# Loggers of libraries whose INFO lines are routine chatter (kafka-python logs every
# connection and metadata refresh: ~65% of a daemon's log at info); they log warnings up.
QUIET_LIBRARIES = ("kafka", "apscheduler.scheduler", "apscheduler.executors")


def env_label(env: str) -> str:
    """The metric label of an env name read from a record: bounded to the known envs."""
    return env if env in ENV_NAMES else "other"


# Candidate minus base success rate on the same tasks: -1 (every task lost) to 1 (every task
# won), finer near 0 where most candidates land.
SHARE_BUCKETS = (0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
CANARY_DELTA_BUCKETS = (-1.0, -0.5, -0.25, -0.1, -0.05, 0.0, 0.05, 0.1, 0.25, 0.5, 1.0)

_HANDLER_NAME = "harness-r1"


def configure_logging(
    format: str = "json", level: str = "info", stream: TextIO | None = None
) -> logging.Handler:
    """Route structlog and the standard library's logging to one handler on `stream`
    (default stderr): `json` writes one object a line with timestamp (ISO, UTC), level,
    logger and the bound context vars; `console` is for a terminal.

    Calling it again replaces the handler it installed before (so tests and a reloaded
    config do not double every line); the handler is returned so a caller can remove it."""
    level_no = _level_number(level)
    if format not in ("json", "console"):
        raise ValueError(f"log format {format!r} is neither 'json' nor 'console'")
    out = stream if stream is not None else sys.stderr
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: list[Any]
    if format == "json":
        renderer = [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=out.isatty())]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(RepeatFilter())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_no)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(level_no, logging.WARNING))
    return handler


class RepeatFilter(logging.Filter):
    """One line per `interval_s` for a library's repeated message, with a count.

    A broker that is down makes kafka-python write the same warning (`No node available for
    metadata refresh`) ~15 times a second: ~880 lines a minute drown everything else. Records
    of the loggers under `libraries` are keyed by logger and message template; within
    `interval_s` of one that passed, the same key is counted and dropped; the next one after
    the interval passes with `(repeated N times in the last S s)` appended. The daemon's own
    lines always pass."""

    def __init__(
        self,
        interval_s: float = 60.0,
        libraries: tuple[str, ...] = ("kafka",),
        clock: Any = time.monotonic,
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.libraries = libraries
        self._clock = clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not any(
            record.name == lib or record.name.startswith(lib + ".") for lib in self.libraries
        ):
            return True
        key = (record.name, str(record.msg))
        now = self._clock()
        with self._lock:
            passed_at, dropped = self._seen.get(key, (None, 0))
            if passed_at is not None and now - passed_at < self.interval_s:
                self._seen[key] = (passed_at, dropped + 1)
                return False
            self._seen[key] = (now, 0)
        if dropped and passed_at is not None:
            since = now - passed_at
            record.msg = f"{record.msg} (repeated {dropped} times in the last {since:.0f} s)"
        return True


def _level_number(level: str) -> int:
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LOG_LEVELS)}")
    return int(getattr(logging, level.upper()))


class DaemonMetrics:
    """The loop's metrics, from consumed trajectory to GRPO update.

    The attributes are the prometheus objects (label them directly); the methods exist where
    one event touches more than one series or needs state (the win-rate window)."""

    # Why this size: one declaration per metric family; the length is the list of what operators
    # can watch
    def __init__(self, registry: CollectorRegistry, win_window: int = 100) -> None:
        if win_window < 1:
            raise ValueError(f"win_window must be >= 1 candidates, got {win_window}")
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
        """Create every series whose label values are known, at zero (see ENV_LABELS)."""
        for env in ENV_LABELS:
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

    def observe_canary(self, env: str, delta: float) -> None:
        """One canaried candidate: its delta goes into the histogram and the env's win rate
        over the last `win_window` candidates is updated (canary workers may call it from
        several threads)."""
        env = env_label(env)
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
                label = env_label(env)
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
        label = env_label(env)
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


Ready = Callable[[], tuple[bool, str]]


class HealthServer:
    """/metrics, /healthz and /readyz over HTTP from a daemon thread (the standard library's
    ThreadingHTTPServer: three small routes do not need a web framework, and a slow scrape
    must not block a probe). `ready()` is called per /readyz request; it should be cheap."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, ready: Ready) -> None:
        self.registry = registry
        self.host = host
        self._requested_port = port
        self._ready = ready
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on: the one picked by the system when 0 was asked for."""
        if self._server is None:
            return self._requested_port
        return int(self._server.server_address[1])

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("HealthServer already started")
        server_cls = _Server6 if ":" in self.host else ThreadingHTTPServer
        try:
            server = server_cls((self.host, self._requested_port), _handler(self))
        except OSError as err:
            raise OSError(
                err.errno,
                f"cannot listen on {self.host}:{self._requested_port} for /metrics: "
                f"{err.strerror}; set HARNESS_R1_METRICS__PORT to a free port (0 picks one)",
            ) from err
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="harness-r1-health",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice or before start."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> HealthServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def respond(self, path: str) -> tuple[int, str, bytes]:
        """Status, content type and body for a GET of `path` (the routes, without HTTP)."""
        route = urlsplit(path).path
        if route == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if route == "/healthz":
            return 200, _TEXT, b"ok\n"
        if route == "/readyz":
            try:
                ok, reason = self._ready()
            except Exception as err:  # a failing check means not ready, not a dead server
                ok, reason = False, f"readiness check failed: {type(err).__name__}: {err}"
            body = (reason or ("ready" if ok else "not ready")) + "\n"
            return (200 if ok else 503), _TEXT, body.encode("utf-8")
        return 404, _TEXT, b"not found; try /metrics, /healthz or /readyz\n"


_TEXT = "text/plain; charset=utf-8"


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler(health: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            try:
                status, content_type, body = health.respond(self.path)
            except Exception as err:
                status, content_type = 500, _TEXT
                body = f"{type(err).__name__}: {err}\n".encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """No access log: a scrape every few seconds would drown the daemon's own lines."""

    return Handler
