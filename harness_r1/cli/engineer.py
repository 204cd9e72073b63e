"""`harness-r1 engineer propose|evaluate`: the harness engineer's proposals, and its score
on held-out packets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from harness_r1.cli.group import command_group
from harness_r1.cli.options import (
    DEFAULT_TARGET,
    TARGET_PREFIX_CACHE,
    HistoryTurns,
    LeanPrompt,
    MinBatch,
    MinGuard,
    OnIncumbent,
    PacketSize,
    PrefixCache,
    TargetPolicy,
    or_setting,
    target_spec,
)
from harness_r1.cli.settings import cli_settings
from harness_r1.contracts import HookName

console = Console(stderr=True)

engineer_app = command_group("The harness engineer: patch proposals.")


@engineer_app.command("evaluate")
def engineer_evaluate(
    runs: Annotated[list[Path], typer.Argument(help="Trajectories JSONL of held-out runs.")],
    env: Annotated[str, typer.Option()],
    split: Annotated[str, typer.Option(help="The split the runs came from (held out).")],
    adapter: Annotated[
        Path | None, typer.Option(help="LoRA adapter dir of a trained engineer.")
    ] = None,
    k: Annotated[
        int | None, typer.Option("-k", help="Proposals per packet (default: settings loop.k).")
    ] = None,
    seed: Annotated[int, typer.Option()] = 0,
    temperature: Annotated[float, typer.Option()] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Engineer tokens per proposal.")] = 512,
    limit_packets: Annotated[int | None, typer.Option()] = None,
    batch_size: PacketSize = None,
    max_steps: Annotated[int | None, typer.Option(help="Canary step limit.")] = None,
    history_turns: HistoryTurns = None,
    baseline_cache: Annotated[
        Path | None, typer.Option(help="Keep canary baselines here (share across versions).")
    ] = None,
    prefix_cache: PrefixCache = TARGET_PREFIX_CACHE,
    threads: Annotated[int | None, typer.Option(help="Engineer torch threads.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the JSON report.")] = None,
    lean_prompt: LeanPrompt = False,
    on: OnIncumbent = None,
    validity_only: Annotated[
        bool,
        typer.Option(
            help="No canary: valid = parses, passes the static checks and composes onto the "
            "incumbent (an SFT checkpoint's validity, without episodes)."
        ),
    ] = False,
    teacher: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=3,
            help="Score the template teacher instead of a model, with this many templates per "
            "patch (as `train coldstart --max-templates`): the teacher's row of the comparison.",
        ),
    ] = None,
    gate: Annotated[
        bool,
        typer.Option(
            help="Also the promotion gate's verdicts: a proposal that gains on its packet runs "
            "on the runs' other tasks (the guard) and counts as promoted without a significant "
            "regression there."
        ),
    ] = False,
    gate_min_batch: MinBatch = None,
    gate_min_guard: MinGuard = None,
    without_hook: Annotated[
        list[HookName] | None,
        typer.Option(
            help="A hook the engineer may not write (repeatable; the hook ablation): the "
            "prompt leaves it out and a patch writing it counts as invalid (stage scope)."
        ),
    ] = None,
    policy: TargetPolicy = DEFAULT_TARGET,
) -> None:
    """Score an engineer version on held-out packets: valid fraction, mean canary delta.

    Example: `harness-r1 engineer evaluate runs/dev.jsonl --env dbbench --split dev --adapter
    artifacts/engineer/v0002 --out heldout.json`"""
    from harness_r1.cli.jobs import EngineerEvalRequest, run_engineer_eval
    from harness_r1.sandbox import GateConfig
    from harness_r1.trainer import EngineerSpec, HeldOutConfig, PromptConfig, hooks_without

    settings = cli_settings()
    request = EngineerEvalRequest(
        runs=list(runs),
        env=env,
        split=split,
        engineer=EngineerSpec(adapter=adapter, cache_dir=settings.cache, threads=threads),
        teacher_templates=teacher,
        heldout=HeldOutConfig(
            k=or_setting(k, settings.loop.k),
            seed=seed,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            prompt=PromptConfig(
                lean=lean_prompt,
                hooks=hooks_without(without_hook or []),
            ),
            canary=not validity_only,
        ),
        out=out,
        limit_packets=limit_packets,
        batch_size=or_setting(batch_size, settings.loop.batch_size),
        target=target_spec(
            settings,
            history_turns,
            64,
            kind=policy,
            max_steps=max_steps,
            prefix_cache=prefix_cache,
        ),
        baseline_cache=baseline_cache,
        on=list(on or []),
        gate=GateConfig(
            min_batch_tasks=or_setting(gate_min_batch, settings.loop.gate_min_batch),
            min_guard_tasks=or_setting(gate_min_guard, settings.loop.gate_min_guard),
        )
        if gate
        else None,
    )
    if teacher is not None and adapter is not None:
        raise typer.BadParameter("--teacher scores the template teacher: drop --adapter")
    if gate and validity_only:
        raise typer.BadParameter("--gate needs the canary: drop --validity-only")
    if not request.heldout.prompt.hooks:
        raise typer.BadParameter("--without-hook left no hook to write")
    report = run_engineer_eval(request, settings.data_root(), console)
    typer.echo(json.dumps(report.summary(), indent=2))


@engineer_app.command("propose")
def engineer_propose(
    packet: Path,
    k: Annotated[
        int | None, typer.Option("-k", help="Candidates to sample (default: settings loop.k).")
    ] = None,
    backend: Annotated[
        str, typer.Option(help="smollm2 | openai | vllm | a checkpoint dir | template")
    ] = "smollm2",
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name (openai) or path (vllm).")] = None,
    adapter: Annotated[
        Path | None, typer.Option(help="LoRA adapter dir of a trained engineer.")
    ] = None,
    seed: Annotated[int, typer.Option()] = 0,
    temperature: Annotated[float, typer.Option()] = 1.0,
    max_new_tokens: Annotated[int, typer.Option()] = 384,
    lean_prompt: LeanPrompt = False,
) -> None:
    """Read a packet (JSON, or trajectories JSONL) and print K proposals with their validity.

    Example: `harness-r1 engineer propose packet.json -k 4 --backend template`"""
    from harness_r1.trainer import proposals_json, propose_command

    settings = cli_settings()
    k = or_setting(k, settings.loop.k)
    if backend == "template":
        from harness_r1.trainer import TeacherConfig, TemplateTeacher, load_packet

        teacher = TemplateTeacher(TeacherConfig(advisory=settings.gate.advisory))
        texts = teacher.propose(load_packet(packet), k, seed)
        typer.echo(json.dumps([{"index": i, "text": t} for i, t in enumerate(texts)], indent=2))
        return
    from harness_r1.trainer import EngineerSpec

    spec = EngineerSpec(
        kind=backend, base_url=base_url, model=model, adapter=adapter, cache_dir=settings.cache
    )
    from harness_r1.trainer import PromptConfig

    proposals = propose_command(
        packet,
        k,
        spec,
        seed=seed,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        prompt_config=PromptConfig(lean=lean_prompt, advisory=settings.gate.advisory),
    )
    typer.echo(proposals_json(proposals))
