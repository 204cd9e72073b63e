"""`harness-r1 data|schemas|patch|packet`: files in, reports out; nothing runs a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from harness_r1.cli.group import command_group
from harness_r1.cli.settings import cli_settings

console = Console(stderr=True)

schemas_app = command_group("JSON Schemas of the message contracts.")
data_app = command_group("Benchmark data: what is present, and fetching it.")
patch_app = command_group("Model-written patches: checks.")
packet_app = command_group("Failure packets: what the engineer reads.")


@schemas_app.command("export")
def schemas_export(directory: Path) -> None:
    """Write every message's JSON Schema into DIRECTORY.

    Example: `harness-r1 schemas export docs/schemas`"""
    from harness_r1.contracts import export_schemas

    for path in export_schemas(directory):
        typer.echo(str(path))


@data_app.command("status")
def data_status() -> None:
    """Show which data files are present per env and split.

    Example: `harness-r1 data status`"""
    from harness_r1.cli.jobs import status_table

    console.print(status_table(cli_settings().data_root()))


@data_app.command("tasks")
def data_tasks(
    env: str,
    split: str,
    limit: Annotated[int, typer.Option(help="Print at most this many (0: all).")] = 0,
) -> None:
    """List the task ids of ENV's SPLIT, one a line with its type: the ids a trajectory's
    `task.task_id` must name for the canary to replay it (docs/agents.md).

    Example: `harness-r1 data tasks dbbench dev --limit 5`"""
    from harness_r1.envs import env_names, get_suite

    known = env_names()
    if env not in known:
        raise typer.BadParameter(f"env must be one of {', '.join(known)}", param_hint="ENV")
    suite = get_suite(env)
    if split not in suite.splits:
        raise typer.BadParameter(
            f"{env}'s splits are {', '.join(suite.splits)}", param_hint="SPLIT"
        )
    tasks = suite.load_tasks(cli_settings().data_root(), split)
    for task in tasks[:limit] if limit > 0 else tasks:
        typer.echo(f"{task.task_id}\t{task.task_type}")
    console.print(f"{len(tasks)} tasks in {env}/{split}")


@data_app.command("fetch")
def data_fetch(
    env: str,
    dest: Annotated[
        Path | None, typer.Option(help="Data root to write (default: HARNESS_R1_DATA).")
    ] = None,
) -> None:
    """Download the official files for ENV and lay them out as the data root expects.

    Example: `harness-r1 data fetch webshop --dest data`"""
    from harness_r1.cli.jobs import fetch

    settings = cli_settings()
    root = dest or settings.data or Path("data")
    fetch(env, root, console)


@patch_app.command("check")
def patch_check(
    file: Path,
    env: Annotated[str | None, typer.Option(help="Env, when the file does not name one.")] = None,
) -> None:
    """Parse and statically check FILE; print a JSON report; exit 1 if rejected, 2 if unreadable.

    Example: `harness-r1 patch check harness_r1/sandbox/reference_patches/dbbench_lookup.patch`"""
    from harness_r1.cli.jobs import check_file

    report, code = check_file(file, env)
    typer.echo(json.dumps(report, indent=2))
    raise typer.Exit(code)


@packet_app.command("build")
def packet_build(
    runs: Path,
    token_budget: Annotated[int, typer.Option(help="Approximate tokens (chars / 4).")] = 4000,
    selection: Annotated[str, typer.Option(help="round_robin | lowest_reward")] = "round_robin",
) -> None:
    """Build one failure packet per (env, target, harness version) from a trajectories JSONL.

    Example: `harness-r1 packet build runs/dev.jsonl --token-budget 4000`"""
    from harness_r1.consumers import PacketConfig, build_packet_from_jsonl

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
