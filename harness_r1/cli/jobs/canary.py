"""`harness-r1 canary`: run K candidate patches against the frozen target on a paired batch,
then apply the promotion gate with a guard set, and print one row per candidate."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness_r1.cli.jobs.target import TargetSpec
from harness_r1.contracts import CanaryReport, format_share
from harness_r1.envs import get_suite
from harness_r1.harness import spread
from harness_r1.sandbox import (
    BASE_INCUMBENT,
    WORKER_EVENTS,
    CanaryBatch,
    CanaryConfig,
    Candidate,
    GateConfig,
    GateDecision,
    Incumbent,
    Link,
    PatchFileError,
    SandboxConfig,
    build_canary_runner,
    load_patch_file,
    run_gated,
)


@dataclass(frozen=True)
class CanaryRequest:
    env: str
    split: str
    patches: list[Path]
    guard_limit: int  # the CLI's option, else the setting loop.guard_limit
    limit: int | None = 20
    seed: int = 0
    target: TargetSpec = field(default_factory=TargetSpec)
    allow_unisolated: bool = False
    control: bool = False
    out: Path | None = None
    gate: GateConfig = field(default_factory=GateConfig)
    on: list[Path] = field(default_factory=list)  # the incumbent's chain, oldest link first


def _unique_ids(paths: list[Path]) -> list[str]:
    """File stems, made unique (a/x.patch and b/x.patch become x and x-2)."""
    seen: dict[str, int] = {}
    ids = []
    for path in paths:
        seen[path.stem] = seen.get(path.stem, 0) + 1
        ids.append(path.stem if seen[path.stem] == 1 else f"{path.stem}-{seen[path.stem]}")
    return ids


def load_candidates(paths: list[Path], env: str) -> list[Candidate]:
    candidates = []
    for path, candidate_id in zip(paths, _unique_ids(paths), strict=True):
        try:
            patch = load_patch_file(path, env=env)
        except (PatchFileError, OSError, ValueError) as err:
            candidates.append(Candidate(candidate_id, None, f"unparseable: {err}"))
            continue
        if patch.env != env:
            reason = f"env_mismatch: patch is for {patch.env}"
            candidates.append(Candidate(candidate_id, None, reason))
            continue
        candidates.append(Candidate(candidate_id, patch))
    return candidates


def load_incumbent(paths: list[Path], env: str) -> Incumbent:
    """`--on` files as the incumbent's chain (oldest first); the base harness when none."""
    if not paths:
        return BASE_INCUMBENT
    links = [
        Link(link_id, load_patch_file(path, env=env))
        for path, link_id in zip(paths, _unique_ids(paths), strict=True)
    ]
    return Incumbent.of_chain("on-" + "-".join(link.overlay_id for link in links), links)


def run_canary(
    request: CanaryRequest, data_root: Path, console: Console
) -> tuple[CanaryReport, CanaryReport | None, dict[str, GateDecision]]:
    suite = get_suite(request.env)
    all_tasks = suite.load_tasks(data_root, request.split)
    tasks = spread(all_tasks, request.limit)
    chosen = {t.task_id for t in tasks}
    guard_tasks = spread([t for t in all_tasks if t.task_id not in chosen], request.guard_limit)
    policy = request.target.build_policy()
    runner = build_canary_runner(
        suite,
        policy,
        data_root,
        request.target.run_config("canary"),
        sandbox=SandboxConfig(allow_unisolated=request.allow_unisolated),
        canary=CanaryConfig(control=request.control),
    )
    runtime = runner.runtime
    candidates = load_candidates(request.patches, request.env)
    incumbent = load_incumbent(request.on, request.env)
    try:
        seeds = tuple(request.seed + i for i in range(len(tasks)))
        console.print(f"canary batch: {len(tasks)} tasks x {len(candidates)} candidates")
        guard_batch = None
        if guard_tasks:
            console.print(f"guard set: {len(guard_tasks)} tasks")
            guard_seeds = tuple(request.seed + 10_000 + i for i in range(len(guard_tasks)))
            guard_batch = CanaryBatch(request.env, tuple(guard_tasks), guard_seeds)
        batch = CanaryBatch(request.env, tuple(tasks), seeds)
        if incumbent.patch is not None:
            console.print(f"incumbent: {incumbent.overlay_id} ({len(incumbent.links)} links)")
        gated = run_gated(runner, batch, guard_batch, candidates, request.gate, incumbent)
    finally:
        runtime.close()
    report, guard, decisions = gated.report, gated.guard, gated.decisions
    if request.out is not None:
        request.out.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "batch": report.model_dump(mode="json"),
            "guard": guard.model_dump(mode="json") if guard else None,
            "gate": {k: vars(v) for k, v in decisions.items()},
        }
        request.out.write_text(json.dumps(body, indent=2))
    return report, guard, decisions


def canary_table(
    report: CanaryReport, guard: CanaryReport | None, decisions: dict[str, GateDecision]
) -> Table:
    base_forced = report.baseline_origins.measured_forced_share
    title = (
        f"canary on {report.env}: {report.tasks} tasks, baseline success "
        f"{report.baseline_success_rate:.1%}, forced share {format_share(base_forced)} "
        f"({report.target.model_id}, incumbent {report.incumbent_overlay_id})"
    )
    table = Table(title=title)
    columns = (
        "candidate",
        "status",
        "delta",
        "95% interval",
        "d reward",
        "guard delta",
        "hook faults",
        "forced share",
        "patch alone",
        "episodes",
        "gate",
    )
    for column in columns:
        table.add_column(column)
    guard_by_id = {c.candidate_id: c for c in guard.candidates} if guard else {}
    for result in report.candidates:
        decision = decisions[result.candidate_id]
        interval = result.delta_interval
        guard_result = guard_by_id.get(result.candidate_id)
        faults = sum(v for k, v in result.sandbox_events.items() if k not in WORKER_EVENTS)
        origins = result.origins
        forced_text = (
            f"{origins.forced_share:.2f} ({origins.forced}/{origins.steps})"
            if origins.steps
            else "-"
        )
        alone = result.patch_alone
        alone_text = f"{alone.successes}/{alone.tasks}" if alone is not None else "-"
        table.add_row(
            result.candidate_id,
            result.status if result.status != "invalid" else f"invalid ({result.invalid_reason})",
            f"{result.delta_success:+.3f}" if result.delta_success is not None else "-",
            f"[{interval[0]:+.2f}, {interval[1]:+.2f}]" if interval else "-",
            f"{result.delta_mean_reward:+.3f}" if result.delta_mean_reward is not None else "-",
            f"{guard_result.delta_success:+.3f}"
            if guard_result and guard_result.delta_success is not None
            else "-",
            str(faults),
            forced_text,
            alone_text,
            str(result.cost.episodes),
            f"{decision.verdict}: {decision.reasons[-1]}",
        )
    if report.control is not None and report.control.delta_success is not None:
        c = report.control
        interval = c.delta_interval or (0.0, 0.0)
        table.add_row(
            "(control: no patch)",
            c.status,
            f"{c.delta_success:+.3f}",
            f"[{interval[0]:+.2f}, {interval[1]:+.2f}]",
            f"{c.delta_mean_reward or 0.0:+.3f}",
            "-",
            "0",
            format_share(c.forced_share),
            "-",
            str(c.cost.episodes),
            "pairing noise",
        )
    return table
