"""The `harness-r1` command line. Settings are read here, once, and passed down."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from harness_r1.daemon.cli_settings import cli_settings, use_root_config
from harness_r1.daemon.config_commands import config_app
from harness_r1.daemon.deadletter_commands import deadletter_app
from harness_r1.daemon.ingest_commands import ingest_app
from harness_r1.daemon.overlay_commands import keys_app, overlay_app
from harness_r1.daemon.train_commands import train_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
schemas_app = typer.Typer(no_args_is_help=True, help="JSON Schemas of the message contracts.")
data_app = typer.Typer(
    no_args_is_help=True, help="Benchmark data: what is present, and fetching it."
)
app.add_typer(schemas_app, name="schemas")
patch_app = typer.Typer(no_args_is_help=True, help="Model-written patches: checks.")
app.add_typer(data_app, name="data")
packet_app = typer.Typer(no_args_is_help=True, help="Failure packets: what the engineer reads.")
app.add_typer(patch_app, name="patch")
engineer_app = typer.Typer(no_args_is_help=True, help="The harness engineer: patch proposals.")
app.add_typer(packet_app, name="packet")
app.add_typer(engineer_app, name="engineer")
app.add_typer(train_app, name="train")
app.add_typer(overlay_app, name="overlay")
app.add_typer(keys_app, name="keys")
app.add_typer(config_app, name="config")
app.add_typer(deadletter_app, name="deadletter")
app.add_typer(ingest_app, name="ingest")
console = Console(stderr=True)


@app.callback()
def root(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            exists=True,
            dir_okay=False,
            help="YAML settings for every command (default: $HARNESS_R1_CONFIG); "
            "HARNESS_R1_* environment variables override it.",
        ),
    ] = None,
) -> None:
    """Settings come from --config (here, or on the commands that take one), the
    environment, then the defaults: `harness-r1 config show` prints what is in effect."""
    use_root_config(config)


@schemas_app.command("export")
def schemas_export(directory: Path) -> None:
    """Write every message's JSON Schema into DIRECTORY."""
    from harness_r1.contracts.schemas import export_schemas

    for path in export_schemas(directory):
        typer.echo(str(path))


@data_app.command("status")
def data_status() -> None:
    """Show which data files are present per env and split."""
    from harness_r1.daemon.data_commands import status_table

    console.print(status_table(cli_settings().data_root()))


@data_app.command("fetch")
def data_fetch(
    env: str,
    dest: Annotated[
        Path | None, typer.Option(help="Data root to write (default: HARNESS_R1_DATA).")
    ] = None,
) -> None:
    """Download the official files for ENV and lay them out as the data root expects."""
    from harness_r1.daemon.data_commands import fetch

    settings = cli_settings()
    root = dest or settings.data or Path("data")
    fetch(env, root, console)


@patch_app.command("check")
def patch_check(
    file: Path,
    env: Annotated[str | None, typer.Option(help="Env, when the file does not name one.")] = None,
) -> None:
    """Parse and statically check FILE; print a JSON report; exit 1 if rejected, 2 if unreadable."""
    from harness_r1.sandbox.checks_cli import check_file

    report, code = check_file(file, env)
    typer.echo(json.dumps(report, indent=2))
    raise typer.Exit(code)


@packet_app.command("build")
def packet_build(
    runs: Path,
    token_budget: Annotated[int, typer.Option(help="Approximate tokens (chars / 4).")] = 4000,
    selection: Annotated[str, typer.Option(help="round_robin | lowest_reward")] = "round_robin",
) -> None:
    """Build one failure packet per (env, target, harness version) from a trajectories JSONL."""
    from harness_r1.consumers.packets import PacketConfig, build_packet_from_jsonl

    if selection not in ("round_robin", "lowest_reward"):
        raise typer.BadParameter("selection must be round_robin or lowest_reward")
    config = PacketConfig(token_budget=token_budget, selection=selection)  # type: ignore[arg-type]
    try:
        packets = build_packet_from_jsonl(runs, config)
    except (OSError, ValueError) as err:
        raise SystemExit(f"packet build: {err}") from err
    if not packets:
        console.print(f"{runs}: no failed episodes, no packet")
    for packet in packets:
        typer.echo(packet.to_json_bytes().decode("utf-8"))


@engineer_app.command("evaluate")
def engineer_evaluate(
    runs: Annotated[list[Path], typer.Argument(help="Trajectories JSONL of held-out runs.")],
    env: Annotated[str, typer.Option()],
    split: Annotated[str, typer.Option(help="The split the runs came from (held out).")],
    adapter: Annotated[
        Path | None, typer.Option(help="LoRA adapter dir of a trained engineer.")
    ] = None,
    k: Annotated[int, typer.Option("-k", help="Proposals per packet.")] = 4,
    seed: Annotated[int, typer.Option()] = 0,
    temperature: Annotated[float, typer.Option()] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Engineer tokens per proposal.")] = 512,
    limit_packets: Annotated[int | None, typer.Option()] = None,
    batch_size: Annotated[int, typer.Option(help="Trajectories per packet.")] = 8,
    max_steps: Annotated[int | None, typer.Option(help="Canary step limit.")] = None,
    history_turns: Annotated[int, typer.Option(help="Canary history.")] = 3,
    baseline_cache: Annotated[
        Path | None, typer.Option(help="Keep canary baselines here (share across versions).")
    ] = None,
    prefix_cache: Annotated[bool, typer.Option(help="Target reuses prompt-prefix KV.")] = False,
    threads: Annotated[int | None, typer.Option(help="Engineer torch threads.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the JSON report.")] = None,
) -> None:
    """Score an engineer version on held-out packets: valid fraction, mean canary delta."""
    from harness_r1.daemon.engineer_eval_command import EngineerEvalRequest, run_engineer_eval
    from harness_r1.trainer.engineer import EngineerSpec
    from harness_r1.trainer.heldout import HeldOutConfig

    settings = cli_settings()
    request = EngineerEvalRequest(
        runs=list(runs),
        env=env,
        split=split,
        engineer=EngineerSpec(adapter=adapter, cache_dir=settings.cache, threads=threads),
        heldout=HeldOutConfig(
            k=k, seed=seed, temperature=temperature, max_new_tokens=max_new_tokens
        ),
        out=out,
        limit_packets=limit_packets,
        batch_size=batch_size,
        max_steps=max_steps,
        history_turns=history_turns,
        prefix_cache=prefix_cache,
        baseline_cache=baseline_cache,
        cache_dir=settings.cache,
    )
    report = run_engineer_eval(request, settings.data_root(), console)
    typer.echo(json.dumps(report.summary(), indent=2))


@engineer_app.command("propose")
def engineer_propose(
    packet: Path,
    k: Annotated[int, typer.Option("-k", help="Candidates to sample.")] = 4,
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
) -> None:
    """Read a packet (JSON, or trajectories JSONL) and print K proposals with their validity."""
    from harness_r1.trainer.propose import proposals_json, propose_command

    settings = cli_settings()
    if backend == "template":
        from harness_r1.trainer.propose import load_packet
        from harness_r1.trainer.teacher import TemplateTeacher

        texts = TemplateTeacher().propose(load_packet(packet), k, seed)
        typer.echo(json.dumps([{"index": i, "text": t} for i, t in enumerate(texts)], indent=2))
        return
    from harness_r1.trainer.engineer import EngineerSpec

    spec = EngineerSpec(
        kind=backend, base_url=base_url, model=model, adapter=adapter, cache_dir=settings.cache
    )
    proposals = propose_command(
        packet, k, spec, seed=seed, temperature=temperature, max_new_tokens=max_new_tokens
    )
    typer.echo(proposals_json(proposals))


@app.command("eval")
def eval_command(
    env: Annotated[str, typer.Option(help="alfworld | dbbench | webshop")],
    split: Annotated[str, typer.Option()],
    limit: Annotated[int | None, typer.Option(help="Tasks, spread evenly over the split.")] = None,
    policy: Annotated[str, typer.Option(help="smollm2 (embedded) or openai")] = "smollm2",
    seed: Annotated[int, typer.Option()] = 0,
    out: Annotated[Path | None, typer.Option(help="Write trajectories as JSON Lines.")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server URL.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name on that server.")] = None,
    temperature: Annotated[float, typer.Option(help="0 = greedy.")] = 0.0,
    max_steps: Annotated[int | None, typer.Option(help="Override the env's step limit.")] = None,
    lockstep: Annotated[int, typer.Option(help="Episodes run in lockstep (batched).")] = 8,
    max_new_tokens: Annotated[int, typer.Option()] = 96,
    history_turns: Annotated[int, typer.Option(help="Past exchanges the model sees.")] = 6,
    prefix_cache: Annotated[
        bool, typer.Option(help="Reuse the KV cache of shared prompt prefixes (transformers).")
    ] = False,
) -> None:
    """Run the frozen target on real tasks under the base harness and report success rates."""
    from harness_r1.daemon.eval_command import EvalRequest, run_eval

    settings = cli_settings()
    request = EvalRequest(
        env=env,
        split=split,
        limit=limit,
        policy=policy,
        seed=seed,
        out=out,
        base_url=base_url,
        model=model,
        temperature=temperature,
        max_steps=max_steps,
        lockstep=lockstep,
        max_new_tokens=max_new_tokens,
        history_turns=history_turns,
        cache_dir=settings.cache,
        prefix_cache=prefix_cache,
    )
    run_eval(request, settings.data_root(), console)


@app.command("canary")
def canary_command(
    env: Annotated[str, typer.Option(help="alfworld | dbbench | webshop")],
    split: Annotated[str, typer.Option()],
    patch: Annotated[list[Path], typer.Option(help="Candidate patch file (repeatable).")],
    limit: Annotated[int, typer.Option(help="Batch tasks, spread over the split.")] = 20,
    seed: Annotated[int, typer.Option()] = 0,
    guard_limit: Annotated[int, typer.Option(help="Guard tasks (others of the split).")] = 0,
    min_guard: Annotated[int, typer.Option(help="Minimum guard tasks to promote.")] = 20,
    min_batch: Annotated[int, typer.Option(help="Minimum batch tasks to promote.")] = 8,
    alpha: Annotated[float, typer.Option(help="Level of the guard regression test.")] = 0.05,
    method: Annotated[str, typer.Option(help="mcnemar | bootstrap")] = "mcnemar",
    max_steps: Annotated[int | None, typer.Option()] = None,
    history_turns: Annotated[int, typer.Option()] = 6,
    lockstep: Annotated[int, typer.Option()] = 8,
    max_new_tokens: Annotated[int, typer.Option()] = 96,
    allow_unisolated: Annotated[
        bool, typer.Option(help="DEVELOPMENT ONLY: run patches even if isolation is missing.")
    ] = False,
    control: Annotated[
        bool, typer.Option(help="Also re-run the batch unpatched: measures pairing noise.")
    ] = False,
    out: Annotated[Path | None, typer.Option(help="Write the full JSON report.")] = None,
    prefix_cache: Annotated[
        bool, typer.Option(help="Reuse the KV cache of shared prompt prefixes (transformers).")
    ] = False,
) -> None:
    """Measure candidate patches on the frozen target (paired, shared baseline); gate them."""
    from harness_r1.daemon.canary_command import CanaryRequest, canary_table, run_canary
    from harness_r1.sandbox.gate import GateConfig

    request = CanaryRequest(
        env=env,
        split=split,
        patches=list(patch),
        limit=limit,
        seed=seed,
        guard_limit=guard_limit,
        max_steps=max_steps,
        history_turns=history_turns,
        lockstep=lockstep,
        max_new_tokens=max_new_tokens,
        allow_unisolated=allow_unisolated,
        control=control,
        out=out,
        cache_dir=cli_settings().cache,
        prefix_cache=prefix_cache,
        gate=GateConfig(
            min_batch_tasks=min_batch,
            min_guard_tasks=min_guard,
            alpha=alpha,
            method=method,  # type: ignore[arg-type]  # validated by GateConfig
        ),
    )
    report, guard, decisions = run_canary(request, cli_settings().data_root(), console)
    Console(width=200).print(canary_table(report, guard, decisions))


@app.command("demo")
def demo(
    reference: Annotated[
        bool,
        typer.Option(
            help="Instead of the loop: SmolLM2 on all three envs, base harness vs each env's "
            "hand-written reference patch (paired canary)."
        ),
    ] = False,
    env: Annotated[str, typer.Option(help="Env of the fleet (the loop demo).")] = "webshop",
    split: Annotated[str, typer.Option()] = "fixed",
    agents: Annotated[int, typer.Option(help="Deployed agents in the fleet.")] = 4,
    episodes: Annotated[int, typer.Option(help="Episodes per agent per phase.")] = 4,
    k: Annotated[int, typer.Option("-k", help="Candidate patches per batch.")] = 3,
    limit: Annotated[int, typer.Option(help="--reference: tasks per env.")] = 4,
    max_steps: Annotated[int | None, typer.Option(help="Default 6 (loop), 12 (reference).")] = None,
) -> None:
    """The embedded default, no external services: the whole improvement loop on one machine.

    An embedded Kafka broker (tansu), a fleet of agents (SmolLM2-135M on real tasks) that
    publish trajectories and apply signed overlays, and the daemon: failures -> packet -> K
    patches -> sandbox + canary -> gate -> staged release -> live guard. Ends with a summary."""
    if not reference:
        from harness_r1.daemon.demo import DemoOptions, run_demo

        settings = cli_settings()
        options = DemoOptions(
            env=env,
            split=split,
            agents=agents,
            episodes_per_agent=episodes,
            max_steps=max_steps or 6,
            k=k,
        )
        run_demo(options, settings.data_root(), settings.cache, Console(width=160))
        return
    from harness_r1.daemon.canary_command import CanaryRequest, canary_table, run_canary
    from harness_r1.sandbox.gate import GateConfig
    from harness_r1.sandbox.patchfile import REFERENCE_DIR

    settings = cli_settings()
    root = settings.data_root()
    patches = {
        "alfworld": "alfworld_explorer",
        "dbbench": "dbbench_lookup",
        "webshop": "webshop_shopper",
    }
    first_split = {"alfworld": "valid_seen", "dbbench": "dev", "webshop": "fixed"}
    summary = []
    for env, split in first_split.items():
        request = CanaryRequest(
            env=env,
            split=split,
            patches=[REFERENCE_DIR / f"{patches[env]}.patch"],
            limit=limit,
            max_steps=max_steps or 12,
            history_turns=3,
            max_new_tokens=64,
            lockstep=limit,
            cache_dir=settings.cache,
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


@app.command("run")
def run_daemon(
    config: Annotated[
        Path | None, typer.Option(help="YAML settings file (HARNESS_R1_* env overrides it).")
    ] = None,
) -> None:
    """The production entry point: the daemon against the configured Kafka and state store.

    SIGTERM or Ctrl-C drains in-flight work and exits."""
    from harness_r1.daemon.observability import configure_logging
    from harness_r1.daemon.wiring import build_daemon

    settings = cli_settings(config)
    configure_logging(settings.metrics.log_format, settings.metrics.log_level)
    built = build_daemon(settings)
    built.health.start()
    console.print(f"metrics and health on http://{settings.metrics.host}:{built.health.port}")
    try:
        built.daemon.run_forever()
    finally:
        built.health.stop()
        built.close()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
