"""`harness-r1 eval|canary`: the frozen target on real tasks, under the base harness or
paired with candidate patches. Registered on the root command by `cli.app`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from harness_r1.cli.options import (
    DEFAULT_TARGET,
    TARGET_BATCHED_DECODE,
    TARGET_DRAFT_TOKENS,
    TARGET_DTYPE,
    TARGET_PREFIX_CACHE,
    Alpha,
    BatchedDecode,
    DraftTokens,
    GuardLimit,
    HistoryTurns,
    MinBatch,
    MinGuard,
    OnIncumbent,
    PrefixCache,
    TargetDtype,
    TargetPolicy,
    TargetTokens,
    or_setting,
    target_spec,
)
from harness_r1.cli.settings import cli_settings

console = Console(stderr=True)


#: every --env takes a plugin's env too
ENV_HELP = "alfworld | dbbench | webshop, or a plugin env (harness-r1 env list)"


def eval_command(
    env: Annotated[str, typer.Option(help=ENV_HELP)],
    split: Annotated[str, typer.Option()],
    limit: Annotated[int | None, typer.Option(help="Tasks, spread evenly over the split.")] = None,
    policy: Annotated[
        str,
        typer.Option(
            help="smollm2-agent (the deployed agent), smollm2 or gemma3 (embedded base "
            "models), openai, or a checkpoint dir"
        ),
    ] = DEFAULT_TARGET,
    seed: Annotated[int, typer.Option()] = 0,
    out: Annotated[Path | None, typer.Option(help="Write trajectories as JSON Lines.")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name on that server.")] = None,
    temperature: Annotated[float, typer.Option(help="0 = greedy.")] = 0.0,
    max_steps: Annotated[int | None, typer.Option(help="Override the env's step limit.")] = None,
    lockstep: Annotated[int, typer.Option(help="Episodes run in lockstep (batched).")] = 8,
    max_new_tokens: TargetTokens = None,
    history_turns: HistoryTurns = None,
    prefix_cache: PrefixCache = TARGET_PREFIX_CACHE,
    batched_decode: BatchedDecode = TARGET_BATCHED_DECODE,
    draft_tokens: DraftTokens = TARGET_DRAFT_TOKENS,
    dtype: TargetDtype = TARGET_DTYPE,
    on: OnIncumbent = None,
    self_refine: Annotated[
        bool,
        typer.Option(
            help="Self-Refine (the paper's prompt-level baseline): each failure is critiqued "
            "by the target and replayed once with the critique; --out gets what counts."
        ),
    ] = False,
    record_generations: Annotated[
        Path | None,
        typer.Option(
            help="Write every model call (the messages the target read, the text it wrote) "
            "as JSON Lines: the data of `train target`."
        ),
    ] = None,
) -> None:
    """Run the frozen target on real tasks under the base harness (or the incumbent overlay
    `--on`) and report success rates.

    Example: `harness-r1 eval --env dbbench --split dev --limit 20 --out runs/dev.jsonl`"""
    from harness_r1.cli.jobs import EvalRequest, run_eval

    settings = cli_settings()
    target = target_spec(
        settings,
        history_turns,
        max_new_tokens,
        kind=policy,
        base_url=base_url,
        model=model,
        temperature=temperature,
        max_steps=max_steps,
        lockstep=lockstep,
        prefix_cache=prefix_cache,
        batched_decode=batched_decode,
        draft_tokens=draft_tokens,
        dtype=dtype,
    )
    request = EvalRequest(
        env=env,
        split=split,
        limit=limit,
        seed=seed,
        out=out,
        target=target,
        on=list(on or []),
        self_refine=self_refine,
        record_generations=record_generations,
    )
    run_eval(request, settings.data_root(), console)


def canary_command(
    env: Annotated[str, typer.Option(help=ENV_HELP)],
    split: Annotated[str, typer.Option()],
    patch: Annotated[list[Path], typer.Option(help="Candidate patch file (repeatable).")],
    on: Annotated[
        list[Path] | None,
        typer.Option(
            help="The incumbent: a patch file each candidate is composed onto and judged "
            "against (repeatable: a chain, oldest first). Default: the base harness."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="Batch tasks, spread over the split.")] = 20,
    seed: Annotated[int, typer.Option()] = 0,
    guard_limit: GuardLimit = None,
    min_guard: MinGuard = None,
    min_batch: MinBatch = None,
    alpha: Alpha = None,
    method: Annotated[str, typer.Option(help="mcnemar | bootstrap")] = "mcnemar",
    max_steps: Annotated[int | None, typer.Option()] = None,
    history_turns: HistoryTurns = None,
    lockstep: Annotated[int, typer.Option()] = 8,
    max_new_tokens: TargetTokens = None,
    allow_unisolated: Annotated[
        bool, typer.Option(help="DEVELOPMENT ONLY: run patches even if isolation is missing.")
    ] = False,
    control: Annotated[
        bool, typer.Option(help="Also re-run the batch unpatched: measures pairing noise.")
    ] = False,
    out: Annotated[Path | None, typer.Option(help="Write the full JSON report.")] = None,
    prefix_cache: PrefixCache = TARGET_PREFIX_CACHE,
    batched_decode: BatchedDecode = TARGET_BATCHED_DECODE,
    draft_tokens: DraftTokens = TARGET_DRAFT_TOKENS,
    dtype: TargetDtype = TARGET_DTYPE,
    policy: TargetPolicy = DEFAULT_TARGET,
) -> None:
    """Measure candidate patches on the frozen target (paired, shared baseline); gate them.

    Example: `harness-r1 canary --env dbbench --split dev --limit 20 --guard-limit 20 --patch
    harness_r1/sandbox/reference_patches/dbbench_lookup.patch`"""
    from harness_r1.cli.jobs import CanaryRequest, canary_table, run_canary
    from harness_r1.sandbox import GateConfig

    settings = cli_settings()
    loop = settings.loop
    target = target_spec(
        settings,
        history_turns,
        max_new_tokens,
        kind=policy,
        max_steps=max_steps,
        lockstep=lockstep,
        prefix_cache=prefix_cache,
        batched_decode=batched_decode,
        draft_tokens=draft_tokens,
        dtype=dtype,
    )
    request = CanaryRequest(
        env=env,
        split=split,
        patches=list(patch),
        on=list(on or []),
        limit=limit,
        seed=seed,
        guard_limit=or_setting(guard_limit, loop.guard_limit),
        target=target,
        allow_unisolated=allow_unisolated,
        control=control,
        out=out,
        gate=settings.gate.applied_to(  # gate.profile / the attribution limits
            GateConfig(
                min_batch_tasks=or_setting(min_batch, loop.gate_min_batch),
                min_guard_tasks=or_setting(min_guard, loop.gate_min_guard),
                alpha=or_setting(alpha, loop.gate_alpha),
                method=method,  # type: ignore[arg-type]  # validated by GateConfig
            )
        ),
    )
    report, guard, decisions = run_canary(request, settings.data_root(), console)
    Console(width=200).print(canary_table(report, guard, decisions))
