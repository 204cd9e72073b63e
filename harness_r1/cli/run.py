"""`harness-r1 run|demo`: the daemon against real services, or the whole loop embedded.
Registered on the root command by `cli.app`."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from harness_r1.cli.settings import cli_settings

console = Console(stderr=True)


def demo(
    reference: Annotated[
        bool,
        typer.Option(
            help="Instead of the loop: the target on all three envs' held-out splits, base "
            "harness vs each env's hand-written reference patch (paired canary)."
        ),
    ] = False,
    env: Annotated[str, typer.Option(help="Env of the fleet.")] = "webshop",
    split: Annotated[
        str,
        typer.Option(
            help="Split the fleet's tasks come from (the default: goals 40-59, which the "
            "deployed agent never trained on)."
        ),
    ] = "fixed_heldout",
    agents: Annotated[int, typer.Option(help="Fleet size: deployed agents (>= 2).")] = 4,
    episodes: Annotated[int, typer.Option(help="Episodes per agent per phase.")] = 2,
    rounds: Annotated[int, typer.Option(help="Improvement rounds, each on the last.")] = 2,
    k: Annotated[int, typer.Option("-k", help="Candidate patches per round.")] = 3,
    guard_tasks: Annotated[int, typer.Option(help="Gate regression tasks per canary.")] = 2,
    guard_phases: Annotated[
        int, typer.Option(help="Fleet phases the live guard may watch per round.")
    ] = 3,
    budget: Annotated[
        float, typer.Option(help="Time budget in seconds; later phases are skipped.")
    ] = 900.0,
    profile: Annotated[
        str,
        typer.Option(
            help="The gate's attribution profile: advisory (candidates may force at most 10% "
            "of steps and win nothing without the model; advisory templates only) or default."
        ),
    ] = "advisory",
    out: Annotated[
        Path | None, typer.Option(help="Run folder (default runs/demo-YYYYMMDD-HHMMSS, UTC).")
    ] = None,
    limit: Annotated[int, typer.Option(help="--reference: tasks per env.")] = 4,
    max_steps: Annotated[int | None, typer.Option(help="Default 6 (loop), 12 (reference).")] = None,
) -> None:
    """The embedded default, no external services: improvement rounds that build on each other.

    An embedded Kafka broker (tansu), a fleet of agents (SmolLM2-135M on real tasks) that
    publish trajectories and apply signed overlays, and the daemon: failures -> packet -> K
    patches composed onto the live overlay -> sandbox + canary against it -> gate -> staged
    release -> live guard; round 2 builds on round 1; then an operator rollback through the
    control topic. Ends with a summary, an HTML report and a plot in the run folder.

    Example: `harness-r1 demo --env webshop --agents 4 --episodes 2 --rounds 2`"""
    if not reference:
        from harness_r1.demo import DemoOptions, run_demo

        settings = cli_settings()
        options = DemoOptions(
            env=env,
            split=split,
            agents=agents,
            episodes_per_agent=episodes,
            rounds=rounds,
            max_steps=max_steps or 6,
            k=k,
            guard_tasks=guard_tasks,
            guard_phases=guard_phases,
            budget_s=budget,
            profile=_profile(profile),
            out=out,
        )
        try:
            outcome = run_demo(options, settings.data_root(), settings.cache, Console(width=160))
        except (KeyboardInterrupt, SystemExit) as stop:
            _exit_now(stop)
        if not outcome.rounds:
            raise typer.Exit(1)
        return
    from harness_r1.cli.jobs import CanaryRequest, TargetSpec, canary_table, run_canary
    from harness_r1.sandbox import REFERENCE_DIR, GateConfig

    settings = cli_settings()
    root = settings.data_root()
    patches = {
        "alfworld": "alfworld_explorer",
        "dbbench": "dbbench_lookup",
        "webshop": "webshop_shopper",
    }
    # held-out splits: the deployed agent trained on none of their tasks
    first_split = {"alfworld": "valid_seen", "dbbench": "dev", "webshop": "fixed_heldout"}
    summary = []
    for env, split in first_split.items():
        request = CanaryRequest(
            env=env,
            split=split,
            patches=[REFERENCE_DIR / f"{patches[env]}.patch"],
            guard_limit=0,  # a quick look: the gate sees no guard set here
            limit=limit,
            target=TargetSpec(
                max_steps=max_steps or 12,
                history_turns=3,
                max_new_tokens=64,
                lockstep=limit,
                cache_dir=settings.cache,
            ),
            gate=GateConfig(min_batch_tasks=1, min_guard_tasks=0),
        )
        report, guard, decisions = run_canary(request, root, console)
        Console(width=200).print(canary_table(report, guard, decisions))
        [result] = report.candidates
        after = report.baseline_success_rate + (result.delta_success or 0.0)
        summary.append((env, report.tasks, report.baseline_success_rate, after))
    table = Table(title="demo summary: success of the frozen SmolLM2-135M")
    for column in ("env", "tasks", "base harness", "with reference patch"):
        table.add_column(column)
    for env, tasks, before, after in summary:
        table.add_row(env, str(tasks), f"{before:.0%}", f"{after:.0%}")
    Console(width=200).print(table)


def _exit_now(stop: BaseException) -> NoReturn:
    """The demo has stopped everything it started (its cleanup ran on the way here); exit
    without interpreter finalization, which would wait on (or abort inside) a daemon thread
    still in a model call."""
    code = stop.code if isinstance(stop, SystemExit) and isinstance(stop.code, int) else 130
    console.print(f"demo stopped (exit {code})")
    _exit_without_finalization(code)


def run_daemon(
    config: Annotated[
        Path | None, typer.Option(help="YAML settings file (HARNESS_R1_* env overrides it).")
    ] = None,
) -> None:
    """The production entry point: the daemon against the configured Kafka and state store.

    SIGTERM or Ctrl-C drains in-flight work and exits.

    Example: `harness-r1 run --config /etc/harness-r1/daemon.yaml`"""
    from harness_r1.daemon import build_daemon, configure_logging

    settings = cli_settings(config)
    if settings.metrics.log_format == "json":
        quiet_library_output()
    configure_logging(settings.metrics.log_format, settings.metrics.log_level)
    built = build_daemon(settings)
    built.health.start()
    _announce(f"http://{settings.metrics.host}:{built.health.port}", settings.metrics.log_format)
    try:
        built.daemon.run_forever()
    finally:
        try:
            built.health.stop()
            built.close()
        finally:
            if built.daemon.left_running:
                # a thread still in native code (a model call, a training step) past the
                # drain: its batch is handed back already; interpreter finalization would
                # wait on it or abort inside it (SIGABRT, "terminate called without an
                # active exception")
                _exit_without_finalization(0)


def _announce(url: str, log_format: str) -> None:
    """Where the daemon listens, on stdout whatever the log level (scripts and supervisors wait
    for it): a JSON line under the JSON log format, so every line of its output is JSON."""
    if log_format == "json":
        line = {
            "event": "daemon_listening",
            "url": url,
            "metrics": f"{url}/metrics",
            "ready": f"{url}/readyz",
            "level": "info",
            "logger": "harness_r1.cli",
            "timestamp": datetime.now(UTC).isoformat(),
        }
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
    else:
        console.print(f"daemon_listening: metrics and health on {url}")


def quiet_library_output() -> None:
    """Keep the libraries' own output out of a JSON log: Hugging Face's progress bars
    (`Loading weights`) and transformers' advisory warnings write plain lines to stderr
    through handlers of their own. Read when they are imported (lazily, after this)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _exit_without_finalization(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def _profile(value: str) -> Literal["default", "advisory"]:
    if value == "default":
        return "default"
    if value == "advisory":
        return "advisory"
    raise typer.BadParameter(f"--profile must be default or advisory, got {value!r}")
