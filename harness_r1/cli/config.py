"""`harness-r1 config show|reference`: the settings in effect, after every source has been
merged; and the reference of every setting (docs/configuration.md).

Settings come from keyword arguments, HARNESS_R1_* variables, a YAML file and defaults; when
the daemon does something unexpected, the first question is which value won. Secrets are
printed as `**********`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from harness_r1.cli.group import command_group

config_app = command_group("Settings: what is in effect.")


@config_app.callback()
def _config() -> None:
    """Settings: what is in effect (YAML file < HARNESS_R1_* environment)."""


@config_app.command("show")
def config_show(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="YAML settings file (default: $HARNESS_R1_CONFIG, if set).",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Print the effective settings as JSON; exit 2 naming each bad value and where to fix it.

    Example: `harness-r1 --config daemon.yaml config show`"""
    from harness_r1.cli.settings import cli_settings
    from harness_r1.daemon.settings import SettingsError

    try:
        settings = cli_settings(config)
    except SettingsError as err:
        typer.echo(err.message, err=True)
        raise typer.Exit(2) from err
    typer.echo(json.dumps(settings.masked(), indent=2))


@config_app.command("reference")
def config_reference() -> None:
    """Print every setting (YAML key, environment variable, default, description) as
    markdown, the production-required ones marked: docs/configuration.md is this output.

    Example: `harness-r1 config reference > docs/configuration.md`"""
    from harness_r1.daemon.settings import settings_reference

    typer.echo(settings_reference(), nl=False)
