"""`harness-r1 train coldstart|sft|grpo online|replay`: CLI options -> harness_r1.trainer."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from harness_r1.cli.group import command_group
from harness_r1.cli.options import (
    DEFAULT_TARGET,
    TARGET_PREFIX_CACHE,
    HistoryTurns,
    LeanPrompt,
    OnIncumbent,
    PacketSize,
    PrefixCache,
    TargetPolicy,
    TargetTokens,
    or_setting,
    target_spec,
)
from harness_r1.cli.settings import cli_settings

train_app = command_group("Train the harness engineer (SFT, GRPO).")


@train_app.command("coldstart")
def coldstart(
    runs: Annotated[list[Path], typer.Argument(help="Trajectories JSONL of training-split runs.")],
    env: Annotated[str, typer.Option()],
    split: Annotated[str, typer.Option(help="The split the runs came from (train splits).")],
    out: Annotated[
        Path, typer.Option(help="Output dir: dataset.jsonl, rejected.jsonl, stats.json")
    ],
    k: Annotated[
        int | None,
        typer.Option("-k", help="Teacher proposals per packet (default: settings loop.k)."),
    ] = None,
    limit_packets: Annotated[int | None, typer.Option()] = None,
    max_steps: Annotated[int | None, typer.Option()] = None,
    history_turns: HistoryTurns = None,
    seed: Annotated[int, typer.Option()] = 0,
    batch_size: PacketSize = None,
    max_new_tokens: TargetTokens = None,
    baseline_cache: Annotated[
        Path | None, typer.Option(help="Keep canary baselines here across runs.")
    ] = None,
    prefix_cache: PrefixCache = TARGET_PREFIX_CACHE,
    max_templates: Annotated[
        int, typer.Option(help="Templates per teacher patch (1-3; 1 = shortest completions).")
    ] = 3,
    lean_prompt: LeanPrompt = False,
    on: OnIncumbent = None,
    policy: TargetPolicy = DEFAULT_TARGET,
) -> None:
    """Teacher proposals kept only when executable and non-regressive on the frozen target.

    Example: `harness-r1 train coldstart runs/train.jsonl --env dbbench --split standard --out
    runs/cs`"""
    from harness_r1.cli.jobs import ColdStartRequest, run_coldstart
    from harness_r1.trainer import TeacherConfig, TemplateWriter

    settings = cli_settings()
    request = ColdStartRequest(
        runs=list(runs),
        env=env,
        split=split,
        out_dir=out,
        k=or_setting(k, settings.loop.k),
        limit_packets=limit_packets,
        seed=seed,
        batch_size=or_setting(batch_size, settings.loop.batch_size),
        baseline_cache=baseline_cache,
        target=target_spec(
            settings,
            history_turns,
            max_new_tokens,
            kind=policy,
            max_steps=max_steps,
            prefix_cache=prefix_cache,
        ),
        lean_prompt=lean_prompt,
        on=list(on or []),
    )
    teacher = TemplateWriter(TeacherConfig(max_templates=max_templates))
    stats = run_coldstart(request, settings.data_root(), teacher=teacher)
    typer.echo((out / "stats.json").read_text() if (out / "stats.json").exists() else str(stats))


CpuBf16 = Annotated[
    bool,
    typer.Option(
        help="On CPU, bf16 autocast with fp32 master weights (faster where the CPU has bf16 "
        "instructions: AVX512-BF16, AMX)."
    ),
]


@train_app.command("sft")
def sft(
    dataset: Annotated[Path, typer.Argument(help="dataset.jsonl from `train coldstart`.")],
    out: Annotated[Path, typer.Option(help="Root of runs/ and engineer/vNNNN/.")] = Path(
        "artifacts"
    ),
    max_steps: Annotated[int, typer.Option(help="> 0 overrides epochs.")] = -1,
    epochs: Annotated[float, typer.Option()] = 1.0,
    learning_rate: Annotated[float, typer.Option()] = 2e-4,
    batch_size: Annotated[int, typer.Option()] = 4,
    adapter: Annotated[Path | None, typer.Option(help="Continue from this adapter.")] = None,
    threads: Annotated[int | None, typer.Option(help="torch threads (1 on busy hosts).")] = None,
    max_length: Annotated[
        int, typer.Option(help="Longest row (tokens); longer is refused.")
    ] = 4096,
    save_steps: Annotated[int, typer.Option(help="Save a checkpoint every N steps.")] = 50,
    keep_checkpoints: Annotated[
        int,
        typer.Option(
            min=0,
            help="Checkpoints kept (0: all; each checkpoint-N/ is a loadable adapter, "
            "for a curve over training).",
        ),
    ] = 2,
    cpu_bf16: CpuBf16 = False,
) -> None:
    """Cold-start SFT (LoRA, completion-only loss); publishes the next engineer version.

    Example: `harness-r1 train sft runs/cs/dataset.jsonl --out artifacts`"""
    from harness_r1.trainer import SftSettings, train_sft

    settings = SftSettings(
        output_root=out,
        max_steps=max_steps,
        epochs=epochs,
        learning_rate=learning_rate,
        batch_size=batch_size,
        threads=threads,
        max_length=max_length,
        save_steps=save_steps,
        save_total_limit=keep_checkpoints or None,
        cpu_bf16=cpu_bf16,
    )
    result = train_sft(dataset, settings=settings, adapter=adapter, cache_dir=cli_settings().cache)
    typer.echo(f"published {result.version_dir}")


class TargetRows(StrEnum):
    """What `train target` learns of each successful step (see trainer/target_sft.py)."""

    OWN = "own"
    EXECUTED = "executed"


@train_app.command("target")
def target(
    out: Annotated[Path, typer.Option(help="Root of the tuned target's runs and checkpoint.")],
    runs: Annotated[
        list[Path] | None, typer.Argument(help="Trajectories JSONL of `eval` runs.")
    ] = None,
    generations: Annotated[
        list[Path] | None,
        typer.Option(help="The same runs' `eval --record-generations` files (repeatable)."),
    ] = None,
    from_experts: Annotated[
        bool,
        typer.Option(
            "--from-experts",
            help="Build the deployed agent instead: LoRA on expert demonstrations of every "
            "env's training split (trainer/target_experts.py), shipped as the adapter "
            "`--policy smollm2-agent` loads.",
        ),
    ] = False,
    max_steps: Annotated[
        int, typer.Option(help="--from-experts: optimizer steps (4 rows each).")
    ] = 50,
    alfworld_games: Annotated[
        int, typer.Option(help="--from-experts: ALFWorld train games demonstrated.")
    ] = 24,
    ship_to: Annotated[
        Path | None,
        typer.Option(help="--from-experts: where the adapter goes (default: the package's)."),
    ] = None,
    base: Annotated[
        str,
        typer.Option(help="The target the runs are of: smollm2, gemma3 or a checkpoint dir."),
    ] = "smollm2",
    epochs: Annotated[float, typer.Option()] = 2.0,
    learning_rate: Annotated[float, typer.Option()] = 2e-4,
    batch_size: Annotated[int, typer.Option()] = 4,
    max_length: Annotated[
        int, typer.Option(help="Longest row (tokens); longer is refused.")
    ] = 4096,
    rows_of: Annotated[
        TargetRows,
        typer.Option(
            "--rows",
            help="own: the target's outputs the harness took as they were; executed: the "
            "action each step ran, whoever wrote it (where the incumbent decides its "
            "successes' actions, the only thing to learn).",
        ),
    ] = TargetRows.OWN,
) -> None:
    """Fine-tune the target on its own successful episodes (LoRA, merged into a checkpoint):
    the paper's tuned target (coevolution). Serve it with `--policy OUT/tuned-vNNNN`. The runs
    come from `eval --out r.jsonl --record-generations g.jsonl` (under the incumbent, `--on`).

    Example: `harness-r1 train target r.jsonl --generations g.jsonl --out artifacts/target`;
    the deployed agent: `harness-r1 train target --from-experts --out artifacts/deployed`"""
    if from_experts:
        _deployed_from_experts(out, max_steps, alfworld_games, ship_to)
        return
    if not runs or not generations:
        raise typer.BadParameter("give the runs and their --generations (or --from-experts)")
    from harness_r1.consumers import read_trajectories
    from harness_r1.envs import get_suite
    from harness_r1.models import EMBEDDED
    from harness_r1.trainer import (
        SftSettings,
        check_runs_of,
        executed_success_rows,
        merge_checkpoint,
        own_success_rows,
        read_records,
        resolve_base,
        train_sft,
        write_rows,
    )

    trajectories = [t for path in runs for t in read_trajectories(path)]
    try:
        check_runs_of(trajectories, EMBEDDED[base].name if base in EMBEDDED else Path(base).name)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    records = [r for path in generations for r in read_records(path)]
    if rows_of is TargetRows.OWN:
        rows = own_success_rows(trajectories, records)
    else:
        prompters = {env: get_suite(env).prompter for env in {t.env for t in trajectories}}
        rows = executed_success_rows(trajectories, records, prompters)
    if not rows:
        hint = (
            " (under an incumbent that decides them: --rows executed)"
            if rows_of is TargetRows.OWN
            else ""
        )
        raise typer.BadParameter(f"no successful episode with a recorded model call to learn{hint}")
    dataset = out / "target-rows.jsonl"
    write_rows(rows, dataset)
    typer.echo(f"{len(rows)} rows from {sum(t.outcome.success for t in trajectories)} successes")
    settings = SftSettings(
        output_root=out,
        epochs=epochs,
        learning_rate=learning_rate,
        batch_size=batch_size,
        max_length=max_length,
    )
    cache = cli_settings().cache
    result = train_sft(dataset, base, settings=settings, cache_dir=cache)
    tuned = out / f"tuned-{result.version_dir.name}"
    if not tuned.exists():
        merge_checkpoint(resolve_base(base, cache), result.version_dir, tuned)
    typer.echo(f"tuned target: {tuned} (serve it with --policy {tuned})")


def _deployed_from_experts(
    out: Path, max_steps: int, alfworld_games: int, ship_to: Path | None
) -> None:
    from harness_r1.cli.jobs import DEFAULT_TASKS, ExpertRequest, build_deployed

    settings = cli_settings()
    request = ExpertRequest(
        data_root=settings.data_root(),
        out=out,
        tasks=tuple({**DEFAULT_TASKS, "alfworld": alfworld_games}.items()),
        history_turns=settings.loop.history_turns,
        max_steps=max_steps,
        ship_to=ship_to,
    )
    build_deployed(request, settings.cache, say=typer.echo)


grpo_app = command_group(
    "GRPO (dapo loss, clipped ratio, beta 0) of the engineer: online on cold-start packets, or "
    "on groups the daemon already evaluated."
)
train_app.add_typer(grpo_app, name="grpo")

#: `train grpo online` stopped at its time budget (EX_TEMPFAIL: run it again to continue);
#: where its checkpoint is: PAUSED_FILE in --out (removed when a run finishes)
PAUSED_EXIT = 75
PAUSED_FILE = "paused.json"

Out = Annotated[Path, typer.Option(help="Root of runs/ and engineer/vNNNN/.")]
Adapter = Annotated[Path | None, typer.Option(help="The engineer version to improve.")]
MaxSteps = Annotated[int, typer.Option(help="Optimizer steps.")]
Iterations = Annotated[int, typer.Option(help=">= 2 so the clipped ratio acts.")]
Threads = Annotated[int | None, typer.Option(help="torch threads (1 on busy hosts).")]
LearningRate = Annotated[float, typer.Option()]
MicroBatch = Annotated[
    int | None, typer.Option(help="Completions per forward/backward (1 for long rows on CPU).")
]


@grpo_app.command("online")
def grpo_online(
    packets: Annotated[
        Path,
        typer.Argument(
            help="packets.jsonl of a cold start: K samples per packet, each rewarded by its "
            "canary delta on the packet's own tasks and seeds (the `--policy` target)."
        ),
    ],
    out: Out = Path("artifacts"),
    adapter: Adapter = None,
    max_steps: MaxSteps = 20,
    num_iterations: Iterations = 2,
    k: Annotated[
        int | None,
        typer.Option("-k", help="Completions per packet (default: settings loop.k)."),
    ] = None,
    target_steps: Annotated[int | None, typer.Option(help="Canary step limit.")] = None,
    history_turns: HistoryTurns = None,
    threads: Threads = None,
    max_completion_length: Annotated[
        int, typer.Option(help="Engineer tokens per completion.")
    ] = 512,
    learning_rate: LearningRate = 5e-5,
    invalid_reward: Annotated[
        float | None,
        typer.Option(
            max=0.0,
            help="Reward of a patch that does not parse or check (default: settings "
            "loop.invalid_reward).",
        ),
    ] = None,
    micro_batch: MicroBatch = None,
    prefix_cache: PrefixCache = TARGET_PREFIX_CACHE,
    temperature: Annotated[float, typer.Option(help="The engineer's sampling temperature.")] = 1.0,
    graded_invalid: Annotated[
        bool | None,
        typer.Option(
            help="Grade the invalid reward by how far a patch got, and charge hook faults a "
            "little (trainer.shaping); off = the paper's flat reward (default: settings "
            "loop.graded_invalid)."
        ),
    ] = None,
    lean_prompt: LeanPrompt = False,
    policy: TargetPolicy = DEFAULT_TARGET,
    stop_after_minutes: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            help="Time budget: save a checkpoint and stop (exit 75, nothing published) before "
            "overrunning it; the same command continues.",
        ),
    ] = None,
    resume_from: Annotated[
        Path | None,
        typer.Option(help="A paused run's checkpoint (e.g. carried from another host)."),
    ] = None,
    cpu_bf16: CpuBf16 = False,
) -> None:
    """Online GRPO: the engineer samples K patches per packet, the canary rewards each (on the
    target `--policy`).

    Example: `harness-r1 train grpo online runs/cs/packets.jsonl --adapter
    artifacts/engineer/v0001`"""
    from harness_r1.trainer import (
        CanaryReward,
        GrpoSettings,
        canary_rows,
        load_packet_rows,
        packets_and_resolver,
        train_grpo_online,
    )

    settings = cli_settings()
    turns = or_setting(history_turns, settings.loop.history_turns)
    runner_for = _canary_runners(policy, target_steps, turns, prefix_cache)
    found, resolver = packets_and_resolver(
        load_packet_rows(packets), settings.data_root(), runner_for
    )
    if not found:
        raise SystemExit(f"{packets}: no packets")
    grpo_settings = GrpoSettings(
        output_root=out,
        max_steps=max_steps,
        num_generations=or_setting(k, settings.loop.k),
        num_iterations=num_iterations,
        threads=threads,
        max_completion_length=max_completion_length,
        learning_rate=learning_rate,
        invalid_reward=or_setting(invalid_reward, settings.loop.invalid_reward),
        micro_batch=micro_batch,
        temperature=temperature,
        stop_after_s=None if stop_after_minutes is None else stop_after_minutes * 60,
        cpu_bf16=cpu_bf16,
    )
    from harness_r1.sandbox import GateConfig
    from harness_r1.trainer import PromptConfig, TrainingPaused

    # gate.profile reaches the reward: under attribution limits a solver earns the refusal's
    attribution = settings.gate.applied_to(GateConfig()) if settings.gate.limits() else None
    reward = CanaryReward(
        resolver,
        invalid_reward=or_setting(invalid_reward, settings.loop.invalid_reward),
        graded=or_setting(graded_invalid, settings.loop.graded_invalid),
        attribution=attribution,
    )
    try:
        result = train_grpo_online(
            canary_rows(
                found, config=PromptConfig(lean=lean_prompt, advisory=settings.gate.advisory)
            ),
            reward,
            settings=grpo_settings,
            adapter=adapter,
            cache_dir=settings.cache,
            resume_from=resume_from,
        )
    except TrainingPaused as paused:
        note = {"checkpoint": str(paused.checkpoint), "step": paused.step,
                "max_steps": paused.max_steps}  # fmt: skip
        (out / PAUSED_FILE).write_text(json.dumps(note) + "\n", encoding="utf-8")
        typer.echo(f"paused {paused.checkpoint} step {paused.step} of {paused.max_steps}")
        raise typer.Exit(PAUSED_EXIT) from None
    (out / PAUSED_FILE).unlink(missing_ok=True)
    typer.echo(f"published {result.version_dir}")


@grpo_app.command("replay")
def grpo_replay(
    groups_file: Annotated[
        Path, typer.Argument(help="Replay groups JSONL (the daemon's K + rewards).")
    ],
    out: Out = Path("artifacts"),
    adapter: Adapter = None,
    max_steps: MaxSteps = 20,
    num_iterations: Iterations = 2,
    threads: Threads = None,
    learning_rate: LearningRate = 5e-5,
    micro_batch: MicroBatch = None,
) -> None:
    """GRPO on groups the daemon already evaluated: no canary runs here.

    Example: `harness-r1 train grpo replay state/replay/groups.jsonl --adapter
    artifacts/engineer/v0001`"""
    from harness_r1.trainer import GrpoSettings, load_replay_groups, train_grpo_replay

    groups = load_replay_groups(groups_file)
    if not groups:
        raise SystemExit(f"{groups_file}: no replay groups")
    grpo_settings = GrpoSettings(
        output_root=out,
        max_steps=max_steps,
        num_generations=len(groups[0].completion_ids),
        num_iterations=num_iterations,
        threads=threads,
        learning_rate=learning_rate,
        micro_batch=micro_batch,
    )
    result = train_grpo_replay(
        groups, settings=grpo_settings, adapter=adapter, cache_dir=cli_settings().cache
    )
    typer.echo(f"published {result.version_dir}")


def _canary_runners(  # type: ignore[no-untyped-def]
    policy_kind: str, target_steps: int | None, history_turns: int, prefix_cache: bool
):
    """env name -> the canary runner that rewards online completions (one shared target)."""
    from harness_r1.envs import get_suite
    from harness_r1.harness import RunConfig
    from harness_r1.harness.policies import PolicySpec, build_policy
    from harness_r1.models import SamplingConfig
    from harness_r1.sandbox import CanaryRunner, build_canary_runner

    settings = cli_settings()
    root = settings.data_root()
    policy = build_policy(
        PolicySpec(
            kind=policy_kind,
            sampling=SamplingConfig(max_new_tokens=64),
            cache_dir=settings.cache,
            prefix_cache=prefix_cache,
        )
    )

    def runner_for(env: str) -> CanaryRunner:
        config = RunConfig(
            agent_id="grpo-canary", max_steps=target_steps, history_turns=history_turns
        )
        return build_canary_runner(get_suite(env), policy, root, config)

    return runner_for
