"""`run_demo`: build the embedded world (broker, daemon, fleet) in a run folder, run the
choreography (`rounds.py`), write the summary, the HTML report and the plot, and take the world
down again within a few seconds whatever happened (Ctrl-C and SIGTERM included)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console

from harness_r1.contracts import BASE_HARNESS
from harness_r1.demo.fleet import Fleet, build_fleet
from harness_r1.demo.narration import CanaryRelay, Narrator, stderr_to
from harness_r1.demo.options import (
    DEMO_MIN_BATCH,
    DEMO_MIN_GUARD_EPISODES,
    FLEET,
    DemoOptions,
    DemoParts,
    DemoResult,
)
from harness_r1.demo.rounds import Choreography
from harness_r1.deploy import GuardConfig

if TYPE_CHECKING:
    from harness_r1.daemon.settings import Settings

#: Seconds the daemon gets to drain when the demo stops: the demo's state is its own, a
#: half-run canary is simply dropped.
DRAIN_S = 1.0


def default_run_dir() -> Path:
    return Path("runs") / f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}"


def run_demo(
    options: DemoOptions,
    data_root: Path,
    cache: Path,
    console: Console,
    parts: DemoParts | None = None,
) -> DemoResult:
    """SIGTERM exits through the cleanup below, as Ctrl-C does (the broker runs in its own
    process group and the hook workers in their own processes: both would outlive a killed
    demo)."""
    if threading.current_thread() is not threading.main_thread():
        return _run_demo(options, data_root, cache, console, parts or DemoParts())
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return _run_demo(options, data_root, cache, console, parts or DemoParts())
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _run_demo(
    options: DemoOptions, data_root: Path, cache: Path, console: Console, parts: DemoParts
) -> DemoResult:
    started = time.monotonic()
    run_dir = (options.out or default_run_dir()).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    narrator = Narrator(console)
    log_path = run_dir / "demo.log"
    narrator.say(f"[bold]run folder[/bold] {run_dir} (log: {log_path.name})")
    with stderr_to(log_path):
        result = _in_world(options, data_root, cache, narrator, parts, run_dir, started)
    from harness_r1.demo.report import write_report
    from harness_r1.demo.summary import print_summary

    result.seconds["total"] = time.monotonic() - started
    print_summary(console, result, options)
    result.report_html, result.plot_png = write_report(result, options)
    narrator.say(f"[bold]report[/bold] {result.report_html}")
    narrator.say(f"[bold]plot[/bold]   {result.plot_png}")
    return result


def _in_world(
    options: DemoOptions,
    data_root: Path,
    cache: Path,
    narrator: Narrator,
    parts: DemoParts,
    run_dir: Path,
    started: float,
) -> DemoResult:
    from harness_r1.consumers import EmbeddedBroker, KafkaSettings, make_producer
    from harness_r1.daemon import CanaryRunners, build_daemon
    from harness_r1.demo.summary import scrape_win_rate
    from harness_r1.deploy import generate_keypair

    relay = CanaryRelay()
    with EmbeddedBroker(log_dir=run_dir / "broker") as broker:
        narrator.say(f"[bold]broker[/bold] tansu on {broker.bootstrap}")
        private, _ = generate_keypair(run_dir / "keys", "demo")
        settings = demo_settings(options, data_root, cache, run_dir, broker.bootstrap, private)
        config_path = write_config(settings, run_dir / "harness-r1.yaml")
        cancel = threading.Event()  # the daemon's stop ends the canary under way
        canary_for: Any = CanaryRunners(settings, lambda: data_root, progress=relay, cancel=cancel)
        if parts.canary_for is not None:
            given = parts.canary_for

            def canary_for(env: str) -> Any:
                return given(env, relay)

        built = build_daemon(
            settings,
            key=f"demo-{uuid.uuid4().hex[:6]}",
            proposer=parts.proposer,
            canary_for=canary_for,
            cancel=cancel,
        )
        built.health.start()
        built.daemon.start()
        metrics_url = f"http://127.0.0.1:{built.health.port}/metrics"
        narrator.say(f"[bold]daemon[/bold] up; metrics on {metrics_url}")
        kafka = KafkaSettings(bootstrap=broker.bootstrap)
        producer = make_producer(kafka)
        fleet: Fleet | None = None
        try:
            policy = parts.policy or _target(options, settings)
            holder: list[Choreography] = []
            fleet = build_fleet(
                options,
                settings,
                producer,
                run_dir,
                policy,
                lambda t: holder[0].on_trajectory(t) if holder else None,
            )
            deadline = started + options.budget_s
            show = Choreography(
                options, built.daemon, fleet, narrator, relay, config_path, deadline
            )
            holder.append(show)
            result = _choreograph(show, options, metrics_url, run_dir)
            result.win_rate = scrape_win_rate(metrics_url)
            return result
        finally:
            # Stop what plays first, then the daemon with a short drain: within seconds.
            if fleet is not None:
                fleet.close()
            producer.close(timeout=1)
            built.daemon.config = replace(built.daemon.config, drain_timeout_s=DRAIN_S)
            built.daemon.stop()
            built.health.stop()
            built.close()


def _choreograph(
    show: Choreography, options: DemoOptions, metrics_url: str, run_dir: Path
) -> DemoResult:
    rounds = []
    incumbent = BASE_HARNESS
    note = ""
    for number in range(1, options.rounds + 1):
        if show.left() <= 0:
            note = f"the time budget ({options.budget_s:.0f} s) ran out before round {number}"
            break
        result = show.round(number, incumbent)
        rounds.append(result)
        if result.guard is not None and result.guard.state == "active":
            incumbent = result.guard.overlay_id
        if result.note:
            note = f"round {number}: {result.note}"
            if "budget" in result.note:
                break
    final: list = []
    if show.left() > 0:
        final = show.play(f"after round {len(rounds)} · fleet on {incumbent}")
    rollback = show.rollback(rounds) if show.left() > 0 else None
    return DemoResult(
        run_dir=run_dir,
        rounds=rounds,
        final=final,
        final_incumbent=incumbent,
        rollback=rollback,
        win_rate={},
        metrics_url=metrics_url,
        seconds=dict(show.narrator.timings),
        note=note,
    )


def _target(options: DemoOptions, settings: Settings) -> Any:
    from harness_r1.harness.policies import PolicySpec, build_policy
    from harness_r1.models import SamplingConfig

    return build_policy(
        PolicySpec(
            max_batch=options.phase_episodes,  # every agent's rows in one batched call
            sampling=SamplingConfig(max_new_tokens=64),
            cache_dir=settings.cache,
            dtype=settings.loop.target_dtype,
        )
    )


def demo_settings(
    options: DemoOptions, data_root: Path, cache: Path, work: Path, bootstrap: str, key: Path
) -> Settings:
    """The daemon's settings for a demo-sized run: batches sealed by the choreography (no
    size or age seal in between), small gate minima, a guard that can decide within a few
    phases, quick scheduler ticks."""
    from harness_r1.daemon.settings import (
        GateOptions,
        LoopOptions,
        MetricsOptions,
        SandboxOptions,
        SchedulerOptions,
        Settings,
    )

    n = options.phase_episodes
    return Settings(
        data=data_root,
        cache=cache,
        state_url=f"sqlite:///{work / 'state.db'}",
        kafka_bootstrap=bootstrap,
        signing_key=key,
        loop=LoopOptions(
            batch_size=n,
            batch_window_s=86_400,  # sealed when the fleet's phase ends (rounds.py)
            k=options.k,
            guard_limit=options.guard_tasks,
            # a round on a good incumbent has few failures (2 of 8 once round 1 won 6): the
            # gate may promote on a batch of 2 here (the daemon's default is 8)
            gate_min_batch=min(DEMO_MIN_BATCH, n),
            gate_min_guard=min(options.guard_tasks, 4),
            max_steps=options.max_steps,
            history_turns=3,
            max_new_tokens=64,
            rollout_fraction=0.5,
            release_target=FLEET,
            engineer_backend="template",
        ),
        guard=GuardConfig(
            # demo-sized arms (a few episodes each): the Bayesian rule, printed with the
            # result; the daemon's default is the always-valid mSPRT at alpha 0.05
            method="bayes",
            min_episodes=max(DEMO_MIN_GUARD_EPISODES, options.episodes_per_agent),
            # what a cohort of one agent plays in `guard_phases` phases (a larger cohort gets
            # there sooner): undecided by then is rolled back, as inconclusive
            max_episodes=max(
                DEMO_MIN_GUARD_EPISODES, options.guard_phases * options.episodes_per_agent
            ),
            promote_probability=options.promote_probability,
        ),
        gate=GateOptions(profile=options.profile),
        scheduler=SchedulerOptions(flush_interval_s=86_400, guard_interval_s=1),
        # a developer's laptop runs the demo as a user: the workers share that uid (Landlock
        # still denies them every read; the log says so once); a production daemon as a user
        # must accept this in its settings, knowingly
        sandbox=SandboxOptions(accept_shared_uid=os.geteuid() != 0),
        metrics=MetricsOptions(port=0, log_level="info"),
    )


def write_config(settings: Settings, path: Path) -> Path:
    """The run's settings as a config file, so an operator's commands reach the same broker,
    registry and key (`harness-r1 --config FILE overlay ...`)."""
    data = settings.model_dump(mode="json", exclude_defaults=True, exclude_none=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
