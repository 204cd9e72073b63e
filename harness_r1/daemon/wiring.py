"""Settings -> a running Daemon: the one place that knows every component's constructor.

Settings are read once by the caller (the CLI) and passed here; everything below receives
plain objects. Heavy parts (the frozen target model, the engineer model) are built lazily, on
the first batch that needs them, so the daemon starts in about a second and ingests at once.

Why one module: the composition root: settings in, a running daemon out; it is the
one place that shows how the parts connect, and it holds no logic of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from harness_r1.consumers import (
    BroadcastReader,
    KafkaSettings,
    ensure_topics,
    make_producer,
    partition_end,
    publish,
    split_position_key,
)
from harness_r1.contracts import INGEST_TARGET_PREFIX, CanaryReport, ControlCommand, ControlKind
from harness_r1.daemon.canary_log import LoggedCanaryProgress
from harness_r1.daemon.control import ControlFollower
from harness_r1.daemon.daemon_config import DaemonConfig
from harness_r1.daemon.grpo_job import EngineerVersions
from harness_r1.daemon.health import HealthServer
from harness_r1.daemon.ingest import IngestConfig, PollReport, TrajectoryIngest
from harness_r1.daemon.ingest_progress import IngestSink
from harness_r1.daemon.loop import ImprovementLoop, LoopMetricsSink
from harness_r1.daemon.loop_config import LoopConfig
from harness_r1.daemon.metrics import DaemonMetrics
from harness_r1.daemon.replayable import ReplayableTasks
from harness_r1.daemon.service import Daemon
from harness_r1.daemon.settings import Settings
from harness_r1.daemon.store import StateStore
from harness_r1.daemon.tasks import TaskIndex
from harness_r1.deploy import (
    DeployMetrics,
    Keyring,
    OverlayRegistry,
    Publisher,
    PublisherConfig,
    Signer,
)
from harness_r1.envs import env_names
from harness_r1.sandbox import (
    BASE_INCUMBENT,
    CanaryBatch,
    CanaryProgress,
    Candidate,
    Evaluator,
    GateConfig,
    Incumbent,
    SandboxMetrics,
)
from harness_r1.trainer import EngineerWriter, PatchWriter, TeacherConfig, TemplateWriter

log = structlog.get_logger(__name__)


class MetricsAdapter(LoopMetricsSink, IngestSink):
    """The loop's and the ingest loop's reports, onto DaemonMetrics."""

    def __init__(self, metrics: DaemonMetrics) -> None:
        self.m = metrics
        self._held: set[str] = set()  # partitions reported held last time

    def batch(self, state: str) -> None:
        self.m.batches.labels(state=state).inc()

    def candidate(self, env: str, result: str, delta: float | None) -> None:
        self.m.candidates.labels(result=result).inc()
        if delta is not None:
            self.m.observe_canary(env, delta)

    def attribution(self, env: str, forced_share: float | None, patch_alone: float | None) -> None:
        self.m.observe_attribution(env, forced_share, patch_alone)

    def gate(self, verdict: str) -> None:
        self.m.gate_decisions.labels(verdict=verdict).inc()

    def packet(self) -> None:
        self.m.packets.inc()

    def guard(self, watching: int, verdicts: list[str]) -> None:
        self.m.guard_watching.set(watching)
        for verdict in verdicts:
            self.m.guard_decisions.labels(verdict=verdict).inc()

    def polled(self, report: PollReport) -> None:
        self.m.duplicates.inc(report.result.duplicates)
        self.m.observe_steps(report.result.steps_by_origin)
        for reason, count in report.dead_letters_sent.items():
            self.m.dead_lettered.labels(reason=reason).inc(count)
        for (env, outcome), count in report.result.by_env.items():
            label = self.m.env_label(env)
            self.m.trajectories_consumed.labels(env=label, outcome=outcome).inc(count)
            if outcome == "failure":
                self.m.failures_buffered.labels(env=label).inc(count)
        for env, count in report.result.unreplayable.items():
            self.m.unreplayable.labels(env=self.m.env_label(env)).inc(count)
        self.m.queue_depth.labels(queue="dead_letters").set(report.dead_letters_pending)
        if report.dead_letter_error is not None:
            self.m.broker_errors.labels(op="dead_letter").inc()

    def store_error(self) -> None:
        self.m.store_errors.labels(op="ingest").inc()

    def broker_error(self, op: str) -> None:
        self.m.broker_errors.labels(op=op).inc()

    def broker_reachable(self, up: bool) -> None:
        self.m.broker_reachable.set(1 if up else 0)

    def partitions_held(self, held: dict[str, str]) -> None:
        for key in held.keys() | self._held:
            topic, partition = split_position_key(key)
            self.m.partition_held.labels(topic=topic, partition=str(partition)).set(
                1 if key in held else 0
            )
        self._held = set(held)

    def lag(self, lag: dict[str, int]) -> None:
        for key, behind in lag.items():
            topic, _, partition = key.rpartition(":")
            self.m.consumer_lag.labels(topic=topic, partition=partition).set(behind)

    def committed(self, at: float) -> None:
        self.m.last_commit_timestamp.set(at)

    def queue_depth(self, pending: int, running: int) -> None:
        self.m.queue_depth.labels(queue="pending_batches").set(pending)
        self.m.queue_depth.labels(queue="running_batches").set(running)


class _Serialized:
    """One evaluation at a time on a runner: its runtime's env slots are not shareable, so
    with several canary workers in one process they take turns on the model (on a CPU host
    they would anyway); separate processes or hosts scale out instead."""

    def __init__(self, runner: Evaluator) -> None:
        self._runner = runner
        self._lock = threading.Lock()

    def evaluate(
        self,
        batch: CanaryBatch,
        candidates: Sequence[Candidate],
        incumbent: Incumbent = BASE_INCUMBENT,
        *,
        patch_alone: bool = True,
    ) -> CanaryReport:
        with self._lock:
            return self._runner.evaluate(batch, candidates, incumbent, patch_alone=patch_alone)


class CanaryRunners:
    """One canary runner per env over the frozen target, built on first use (thread-safe).
    Setting `cancel` (the daemon's stop) ends a running canary at its next decision round."""

    def __init__(
        self,
        settings: Settings,
        data_root: Callable[[], Path],
        progress: CanaryProgress | None = None,
        sandbox_metrics: SandboxMetrics | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self._data_root = data_root
        self._progress = progress
        self._sandbox_metrics = sandbox_metrics
        self.cancel = cancel
        self._runners: dict[str, Evaluator] = {}
        self._lock = threading.Lock()

    def __call__(self, env: str) -> Evaluator:
        with self._lock:
            if env not in self._runners:
                self._runners[env] = _Serialized(self._build(env))
            return self._runners[env]

    def _build(self, env: str) -> Evaluator:
        from harness_r1.envs import get_suite
        from harness_r1.harness import RunConfig
        from harness_r1.harness.policies import PolicySpec, build_policy
        from harness_r1.models import SamplingConfig
        from harness_r1.sandbox import build_canary_runner

        loop = self.settings.loop
        api_key = loop.target_api_key.get_secret_value() if loop.target_api_key else None
        policy = build_policy(
            PolicySpec(
                kind=loop.target_policy,
                base_url=loop.target_url,
                model=loop.target_model,
                api_key=api_key,
                cache_dir=self.settings.cache,
                sampling=SamplingConfig(max_new_tokens=loop.max_new_tokens),
                dtype=loop.target_dtype,
            )
        )
        sandbox = self.settings.sandbox
        config = RunConfig(
            agent_id="canary",
            max_steps=loop.max_steps,
            history_turns=loop.history_turns,
            hook_budget_s=sandbox.episode_hook_budget_s,
        )
        return build_canary_runner(
            get_suite(env),
            policy,
            self._data_root(),
            config,
            sandbox=sandbox.sandbox_config(),
            progress=self._progress,
            metrics=self._sandbox_metrics,
            cancel=self.cancel,
        )


def _lazy_data_root(settings: Settings) -> Callable[[], Path]:
    """The data root, looked up when a batch first needs tasks: ingesting needs no benchmark
    data. Missing data then fails that batch with the same message, as an error a worker
    thread reports (SystemExit would end the thread without a word)."""

    def resolve() -> Path:
        try:
            return settings.data_root()
        except SystemExit as err:
            raise RuntimeError(str(err)) from None

    return resolve


def build_proposer(settings: Settings, adapter: Path | None = None) -> PatchWriter:
    """The configured engineer, with `adapter` (default: the latest published version)."""
    loop = settings.loop
    advisory = settings.gate.advisory
    if loop.engineer_backend == "template":
        return TemplateWriter(TeacherConfig(advisory=advisory))
    from harness_r1.trainer import EngineerSpec, build_engineer, latest_version

    adapter = adapter or latest_version(settings.cache / "engineer-artifacts")
    api_key = loop.engineer_api_key.get_secret_value() if loop.engineer_api_key else None
    spec = EngineerSpec(
        kind=loop.engineer_backend,
        base_url=loop.engineer_url,
        model=loop.engineer_model,
        api_key=api_key,
        adapter=adapter if loop.engineer_backend not in ("openai",) else None,
        cache_dir=settings.cache,
        token_ids=True,
    )
    from harness_r1.trainer import PromptConfig

    prompt = PromptConfig(lean=loop.engineer_prompt == "lean", advisory=advisory)
    return EngineerWriter(build_engineer(spec), prompt=prompt)


@dataclass
class Built:
    daemon: Daemon
    health: HealthServer
    metrics: DaemonMetrics
    registry: CollectorRegistry
    close: Callable[[], None]


def kafka_settings(settings: Settings) -> KafkaSettings:
    """The daemon's Kafka client settings (`Settings.kafka_client`)."""
    return settings.kafka_client()


def loop_config(settings: Settings) -> LoopConfig:
    """The improvement loop's plain config: the loop's settings as read, the gate from the
    loop's gate fields and the gate group's limits, the guard's settings as its config."""
    loop_options = settings.loop
    return LoopConfig(
        options=loop_options,
        gate=settings.gate.applied_to(
            GateConfig(
                min_batch_tasks=loop_options.gate_min_batch,
                min_guard_tasks=loop_options.gate_min_guard,
                alpha=loop_options.gate_alpha,
            )
        ),
        guard=settings.guard,
    )


# Why this size: the composition root: each part built from the settings and connected, in
# dependency order
def build_daemon(
    settings: Settings,
    *,
    proposer: PatchWriter | None = None,
    canary_for: Callable[[str], Evaluator] | None = None,
    key: str = "main",
    extra_topics: Sequence[str] = (),
    cancel: threading.Event | None = None,
) -> Built:
    """`cancel`: set by the daemon's stop, it ends the canary under way (give the same event
    to a `canary_for` built outside; one is made when None)."""
    cancel = cancel or threading.Event()
    kafka = kafka_settings(settings)
    warning = kafka.plaintext_warning()
    if warning is not None:
        log.warning("kafka_plaintext", detail=warning)
    topics = [
        settings.trajectory_topic,
        settings.release_topic,
        settings.control_topic,
        settings.kafka.dead_letter_topic,
        settings.kafka.events_topic,
        *extra_topics,
    ]
    ensure_topics(kafka, topics)
    producer = make_producer(kafka)
    url = settings.registry_url()
    store = StateStore(url)
    overlays = OverlayRegistry(url)
    registry = CollectorRegistry()
    metrics = DaemonMetrics(registry, envs=env_names())  # plugins get their own label
    adapter = MetricsAdapter(metrics)

    def send(topic: str, value: bytes, key_bytes: bytes | None) -> None:
        publish(producer, topic, value, key=key_bytes, timeout_s=kafka.send_timeout_s)

    def dead_letter(
        topic: str,
        value: bytes,
        key_bytes: bytes | None,
        headers: Sequence[tuple[str, bytes]],
        timestamp_ms: int,
    ) -> None:
        publish(
            producer,
            topic,
            value,
            key=key_bytes,
            headers=headers,
            timeout_s=kafka.send_timeout_s,
            timestamp_ms=timestamp_ms,
        )

    def event(body: dict[str, Any]) -> None:
        import json

        send(settings.kafka.events_topic, json.dumps(body).encode(), None)

    publisher = None
    if settings.signing_key is not None:
        publisher = Publisher(
            overlays,
            Signer.from_file(settings.require_signing_key()),
            send,
            PublisherConfig(
                release_topic=settings.release_topic, control_topic=settings.control_topic
            ),
            DeployMetrics(registry),
        )
    tasks = TaskIndex(_lazy_data_root(settings))  # the canary's and the replay check's
    loop = ImprovementLoop(
        store,
        overlays,
        proposer or build_proposer(settings),
        canary_for
        or CanaryRunners(
            settings,
            _lazy_data_root(settings),
            progress=LoggedCanaryProgress(),
            sandbox_metrics=SandboxMetrics(registry),
            cancel=cancel,
        ),
        tasks,
        loop_config(settings),
        publisher,
        adapter,
        event,
    )
    metrics.set_engineer_version(loop.proposer.name)
    skipper = IngestSkipper(
        settings.kafka.group_id,
        settings.trajectory_topic,
        store,
        event,
        lambda topic, partition: partition_end(kafka, topic, partition),
    )
    ingest_config = IngestConfig(
        topic=settings.trajectory_topic,
        group=settings.kafka.group_id,
        dead_letter_topic=settings.kafka.dead_letter_topic,
        commit_timeout_ms=settings.kafka.commit_timeout_ms,
        poll_timeout_ms=settings.kafka.poll_timeout_ms,
        max_poll_records=settings.kafka.max_poll_records,
        max_record_bytes=settings.kafka.max_record_bytes,
    )
    scheduler = settings.scheduler
    replay = ReplayableTasks(tasks)
    versions = _engineer_versions(settings, loop) if proposer is None else None
    daemon = Daemon(
        store,
        lambda lease: TrajectoryIngest(
            kafka, ingest_config, store, dead_letter, lease=lease, replay_check=replay.why_not
        ),
        loop,
        DaemonConfig(
            key=key,
            canary_workers=settings.loop.canary_workers,
            drain_timeout_s=settings.loop.drain_timeout_s,
            flush_interval_s=scheduler.flush_interval_s,
            guard_interval_s=scheduler.guard_interval_s,
            grpo_cron=scheduler.grpo_cron,
            retention_days=scheduler.retention_days,
            backoff_initial_s=settings.kafka.backoff_initial_s,
            backoff_max_s=settings.kafka.backoff_max_s,
            jobstore_url=settings.jobstore_url(),
            ingest_lock=f"ingest:{settings.kafka.group_id}:{settings.trajectory_topic}",
            stuck_after_s=settings.kafka.stuck_after_s,
            on_log_reset=settings.kafka.on_log_reset,
        ),
        adapter,
        grpo_update=_grpo_job(store, settings, metrics, versions),
        engineer_refresh=_refresh_job(
            versions if settings.loop.engineer_backend in SWAPPABLE_ENGINEERS else None, metrics
        ),
        control_factory=_control_follower(settings, kafka, overlays, store, metrics, skipper),
        cancel=cancel,
    )
    skipper.daemon = daemon
    metrics.watch_readiness(daemon.ready)
    health = HealthServer(registry, settings.metrics.host, settings.metrics.port, daemon.ready)

    def close() -> None:
        producer.close(timeout=5)
        store.close()
        overlays.close()

    return Built(daemon, health, metrics, registry, close)


class IngestSkipper:
    """Applies a verified skip_offset: moves this group's stored position forward (never
    back), makes the daemon's ingest loop re-read from the store, and puts it on record (log
    and events topic): the records passed over are given up on purpose, by the operator the
    signed command names."""

    def __init__(
        self,
        group: str,
        topic: str,
        store: StateStore,
        event: Callable[[dict[str, Any]], None],
        end_of: Callable[[str, int], int | None],
    ) -> None:
        """end_of(topic, partition): the partition's end (None: unknown); a skip past it
        would make the reader start over from the beginning (a position past the end is
        taken for a broker that lost its data), so it is refused."""
        self.group = group
        self.topic = topic
        self.store = store
        self.event = event
        self.end_of = end_of
        self.daemon: Daemon | None = None  # set once built

    def __call__(self, command: ControlCommand) -> str:
        if command.target != f"{INGEST_TARGET_PREFIX}{self.group}":
            return "noted"  # another group's daemons
        assert command.topic is not None and command.partition is not None
        assert command.offset is not None
        if command.topic != self.topic:
            log.warning("ingest_skip_refused", why="not this daemon's topic", seq=command.seq)
            return "out_of_range"
        if command.command is ControlKind.RESET_OFFSET:
            return self._reset(command)
        end = self.end_of(command.topic, command.partition)
        if end is None or command.offset > end:
            log.warning(
                "ingest_skip_refused", why="past the partition's end", end=end, seq=command.seq
            )
            return "out_of_range"
        key = (command.topic, command.partition)
        before = self.store.positions(self.group).get(key, 0)
        if before >= command.offset:
            return "already_applied"
        self.store.advance_positions(self.group, {key: command.offset})
        if self.daemon is not None:
            self.daemon.request_ingest_reopen()
        body = _reset_body(command, self.group, before)
        body["records_skipped"] = command.offset - before
        return self._record("ingest_offset_skipped", body)

    def _record(self, event: str, body: dict[str, Any]) -> str:
        """An operator's order applied: in the log and on the events topic."""
        log.warning(event, **body)
        try:
            self.event({"event": event, **body})
        except Exception as err:  # noqa: BLE001 - done and logged; the topic copy is extra
            log.error("ingest_event_not_published", event=event, error=str(err)[:300])
        return "reconciled"

    def _reset(self, command: ControlCommand) -> str:
        """reset_offset: the stored position set back or forward to the command's offset (the
        CLI resolved earliest/latest when it signed it), and ingest restarted from there; a
        held partition is read again. An offset past the partition's end is refused."""
        assert command.topic is not None and command.partition is not None
        assert command.offset is not None
        end = self.end_of(command.topic, command.partition)
        if end is None or command.offset > end:
            log.warning(
                "ingest_reset_refused", why="past the partition's end", end=end, seq=command.seq
            )
            return "out_of_range"
        before = self.store.reset_position(
            self.group, command.topic, command.partition, command.offset
        )
        if self.daemon is not None:
            self.daemon.request_ingest_reopen()
        return self._record("ingest_offset_reset", _reset_body(command, self.group, before))


def _reset_body(command: ControlCommand, group: str, before: int) -> dict[str, Any]:
    """What an applied skip or reset puts on record (log and events topic)."""
    return {
        "group": group,
        "topic": command.topic,
        "partition": command.partition,
        "from_offset": before,
        "to_offset": command.offset,
        "actor": command.actor,
        "reason": command.reason,
        "seq": command.seq,
        "key_id": command.key_id,
    }


def _control_follower(
    settings: Settings,
    kafka: KafkaSettings,
    overlays: OverlayRegistry,
    store: StateStore,
    metrics: DaemonMetrics,
    on_skip: Callable[[ControlCommand], str] | None = None,
) -> Callable[[], ControlFollower] | None:
    """Follow the control topic when the daemon knows the trusted keys (keys_dir, or the public
    half of its own signing key); without keys it cannot verify, so it does not follow."""
    keyring = trusted_keys(settings)
    if keyring is None:
        return None

    def report(command: str, result: str) -> None:
        metrics.control_commands.labels(command=command, result=result).inc()

    def followed(command: str, actor: str) -> None:
        metrics.control_commands_followed.labels(command=command, actor=actor).inc()

    group = f"{settings.kafka.group_id}.control"

    def save(positions: dict[tuple[str, int], int]) -> None:
        store.advance_positions(group, positions)

    def build() -> ControlFollower:
        stored = {f"{t}:{p}": offset for (t, p), offset in store.positions(group).items()}
        reader = BroadcastReader(kafka, [settings.control_topic], stored)
        # Each consumer group keeps its own mark of the commands it followed (a daemon on the
        # same database with another group is not told "replay" for what the first one saw).
        return ControlFollower(
            reader,
            keyring,
            overlays,
            report,
            save,
            mark_stream=f"control:{group}",
            on_skip=on_skip,
            on_followed=followed,
        )

    return build


def trusted_keys(settings: Settings) -> Keyring | None:
    if settings.keys_dir is not None:
        return Keyring.from_directory(settings.keys_dir)
    if settings.signing_key is not None:
        return Keyring.of([Signer.from_file(settings.require_signing_key())])
    return None


#: Engineers the daemon loads in process and can replace by a new version while it runs.
#: vLLM holds its GPU memory until the process ends (a second engine beside the first does
#: not fit), OpenAI-compatible servers serve their own weights, the template has none.
SWAPPABLE_ENGINEERS = ("smollm2",)


def _engineer_reloader(settings: Settings, loop: ImprovementLoop) -> Callable[[str], str | None]:
    """After a GRPO update, load that version and swap it into the loop, so the daemon proposes
    with what it just trained instead of waiting for a restart. Other backends only log the
    new version (an operator loads it there, or restarts the daemon). A version that fails to
    load leaves the running engineer in place. Returns the name of the engineer now
    proposing, None when nothing was swapped."""

    def reload(version: str) -> str | None:
        backend = settings.loop.engineer_backend
        if backend not in SWAPPABLE_ENGINEERS:
            log.warning("engineer_version_not_loaded", version=version, backend=backend)
            return None
        from harness_r1.trainer import versions_dir

        path = versions_dir(settings.cache / "engineer-artifacts") / version
        try:
            proposer = build_proposer(settings, adapter=path)
        except Exception as err:  # noqa: BLE001 - keep proposing with the running version
            log.error("engineer_reload_failed", version=version, error=repr(err))
            return None
        loop.swap_proposer(proposer)
        return proposer.name

    return reload


def _engineer_versions(settings: Settings, loop: ImprovementLoop) -> EngineerVersions:
    """Which engineer version the loop proposes with (other backends only log a new one)."""
    from harness_r1.trainer import latest_version

    root = settings.cache / "engineer-artifacts"
    latest = latest_version(root)  # what build_proposer loaded at start
    loaded = latest.name if latest is not None else None
    return EngineerVersions(root, _engineer_reloader(settings, loop), loaded)


def _refresh_job(
    versions: EngineerVersions | None, metrics: DaemonMetrics
) -> Callable[[], str | None] | None:
    if versions is None:
        return None

    def run() -> str | None:
        now = versions.refresh()
        if now is not None:
            metrics.set_engineer_version(now)
        return now

    return run


def _grpo_job(
    store: StateStore,
    settings: Settings,
    metrics: DaemonMetrics,
    versions: EngineerVersions | None = None,
) -> Callable[[], int]:
    """The scheduled GRPO update; `versions` swaps the new version in (None: the engineer was
    given by the caller, or is not loaded in process, and stays)."""
    from harness_r1.daemon.grpo_job import GrpoJobConfig, grpo_update

    config = GrpoJobConfig(
        output_root=settings.cache / "engineer-artifacts",
        min_groups=settings.scheduler.grpo_min_groups,
        num_generations=settings.loop.k,
        cache_dir=settings.cache,
    )

    def run() -> int:
        result = grpo_update(store, config)
        if result.version is not None:
            metrics.grpo_updates.inc()
            now = versions.use(result.version) if versions is not None else None
            if now is not None:
                metrics.set_engineer_version(now)
        return result.trained

    return run
