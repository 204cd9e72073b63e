"""`harness-r1 env list|check`: the environments this installation runs, and whether one keeps
the contract (the built-in three, and every plugin an installed package adds through the
entry-point group `harness_r1.envs`)."""

from __future__ import annotations

from typing import Annotated

import typer

from harness_r1.cli.group import command_group
from harness_r1.cli.settings import cli_settings

env_app = command_group("Environments: the built-in ones and installed plugins.")


@env_app.command("list")
def env_list() -> None:
    """Print each env with where it comes from: built in, or the plugin's package and entry
    point (plugins are not loaded: `env check` does that).

    Example: `harness-r1 env list`"""
    from harness_r1.envs import BUILTIN_ENVS, plugin_entry_points

    for name in BUILTIN_ENVS:
        typer.echo(f"{name}\tbuilt in")
    for name, entry in plugin_entry_points().items():
        package = f"{entry.dist.name} {entry.dist.version}" if entry.dist else "a package"
        typer.echo(f"{name}\tplugin: {package} ({entry.value})")


@env_app.command("check")
def env_check(
    name: Annotated[str, typer.Argument(help="The env (see `env list`).")],
    split: Annotated[str | None, typer.Option(help="Check this split only.")] = None,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Check an env's contract on the data root: its suite loads, each split's tasks load with
    unique ids, a seeded reset repeats, a junk step returns the declared types and no win.
    Exits 1 naming the first breach.

    Example: `harness-r1 env check dbbench --split dev`"""
    from harness_r1.envs import ConformanceError, DataError, EnvError, check_suite, get_suite

    try:
        lines = check_suite(get_suite(name), cli_settings().data_root(), split=split, seed=seed)
    except KeyError as err:
        raise typer.BadParameter(str(err.args[0]), param_hint="NAME") from err
    except (ConformanceError, DataError, EnvError) as err:
        typer.echo(f"{name}: {type(err).__name__}: {err}", err=True)
        raise typer.Exit(1) from err
    for line in lines:
        typer.echo(f"{name}: {line}")
    typer.echo(f"{name}: ok")
