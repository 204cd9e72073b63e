"""`harness-r1 eval`: run episodes with a progress bar, write JSONL, print rates with intervals."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness_r1.cli.jobs.target import TargetSpec
from harness_r1.contracts import Trajectory, format_share
from harness_r1.envs import get_suite
from harness_r1.harness import (
    EpisodeSpec,
    GenerationRecord,
    HarnessRuntime,
    HookSet,
    NoHooks,
    spread,
    summarize,
)
from harness_r1.models import Policy


@dataclass(frozen=True)
class EvalRequest:
    env: str
    split: str
    limit: int | None = None
    seed: int = 0
    out: Path | None = None
    target: TargetSpec = field(default_factory=TargetSpec)
    on: list[Path] = field(default_factory=list)  # the incumbent's chain; empty: base harness
    # Self-Refine (harness.refine): failures critiqued by the target and replayed once; `out`
    # gets the trajectories that count (the replay where the first attempt failed)
    self_refine: bool = False
    # every model call (messages read, text written) as JSON Lines: the tuned target's data
    # (trainer/target_sft.py)
    record_generations: Path | None = None


def rate_table(trajectories: list[Trajectory], title: str) -> Table:
    table = Table(title=title)
    columns = ("env", "task type", "n", "success", "95% interval", "reward", "forced")
    for column in columns:
        table.add_column(column, justify="right" if column not in ("env", "task type") else "left")
    for row in summarize(trajectories):
        low, high = row.interval
        table.add_row(
            row.env,
            row.group,
            str(row.n),
            f"{row.successes}/{row.n} ({row.rate:.1%})",
            f"[{low:.1%}, {high:.1%}]",
            f"{row.mean_reward:.3f}",
            format_share(row.forced_share),
        )
    return table


def _incumbent_hooks(on: list[Path], env: str) -> HookSet:
    """The incumbent's composed patch in one isolated worker shared by the episodes (hooks get
    their state with each call), or the base harness."""
    from harness_r1.cli.jobs.canary import load_incumbent
    from harness_r1.sandbox import IsolatedHooks, SandboxConfig

    incumbent = load_incumbent(on, env)
    if incumbent.patch is None:
        return NoHooks()
    return IsolatedHooks(incumbent.patch, SandboxConfig(), overlay_id=incumbent.overlay_id)


def _refined(
    runtime: HarnessRuntime,
    policy: Policy,
    specs: list[EpisodeSpec],
    hooks: HookSet,
    done: Callable[[Trajectory], None],
    console: Console,
) -> list[Trajectory]:
    """First attempts, then each failure critiqued and replayed; `done` gets the trajectories
    that count, once each, in task order."""
    from harness_r1.harness import self_refine

    result = self_refine(
        runtime.run, policy, [(s.task, s.seed) for s in specs], hooks_for=lambda: hooks
    )
    Console().print(rate_table(result.first, "first attempts"))
    console.print(f"Self-Refine: {result.retried} failures critiqued and replayed")
    for trajectory in result.final:
        done(trajectory)
    return result.final


def _writer_of(records: IO[str]) -> Callable[[GenerationRecord], None]:
    def write(record: GenerationRecord) -> None:
        records.write(json.dumps(dataclasses.asdict(record)) + "\n")

    return write


def run_eval(request: EvalRequest, data_root: Path, console: Console) -> list[Trajectory]:
    suite = get_suite(request.env)
    if request.split not in suite.splits:
        raise SystemExit(
            f"unknown split {request.split!r} for {request.env}; known: {', '.join(suite.splits)}"
        )
    tasks = spread(suite.load_tasks(data_root, request.split), request.limit)
    policy = request.target.build_policy()
    hooks = _incumbent_hooks(request.on, request.env)
    specs = [EpisodeSpec(task=t, seed=request.seed + i, hooks=hooks) for i, t in enumerate(tasks)]
    sink = records = None
    if request.out is not None:
        request.out.parent.mkdir(parents=True, exist_ok=True)
        sink = request.out.open("w", encoding="utf-8")
    if request.record_generations is not None:
        request.record_generations.parent.mkdir(parents=True, exist_ok=True)
        # line-buffered: a stopped run keeps every call it made, as the trajectories do
        records = request.record_generations.open("w", encoding="utf-8", buffering=1)
    runtime = HarnessRuntime(
        suite,
        policy,
        data_root,
        request.target.run_config("eval"),
        on_generation=None if records is None else _writer_of(records),
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task(f"{request.env}/{request.split}", total=len(specs))

            def done(trajectory: Trajectory) -> None:
                if sink is not None:
                    sink.write(trajectory.model_dump_json() + "\n")
                    sink.flush()
                progress.advance(bar)

            if request.self_refine:
                trajectories = _refined(runtime, policy, specs, hooks, done, console)
            else:
                trajectories = runtime.run(specs, on_done=done)
    finally:
        runtime.close()
        close = getattr(hooks, "close", None)
        if close is not None:
            close()
        if sink is not None:
            sink.close()
        if records is not None:
            records.close()
    harness = "base harness" if not request.on else f"overlay {hooks.overlay_id}"
    if request.self_refine:
        harness += " + Self-Refine"
    title = f"{policy.model_id} on {request.env}/{request.split}, {harness}, seed {request.seed}"
    Console().print(rate_table(trajectories, title))
    return trajectories
