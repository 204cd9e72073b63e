"""Harness-R1: improve deployed LLM agents by patching their harness, judged by real re-runs.

Start with `harness-r1 demo` (all embedded), then `config show` and `run` on your services.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer._click.core import Context  # typer 0.29 vendors click; its groups take this

from harness_r1.cli.config import config_app
from harness_r1.cli.data import data_app, packet_app, patch_app, schemas_app
from harness_r1.cli.deadletter import deadletter_app
from harness_r1.cli.engineer import engineer_app
from harness_r1.cli.env import env_app
from harness_r1.cli.group import MARKUP
from harness_r1.cli.ingest import ingest_app
from harness_r1.cli.measure import canary_command, eval_command
from harness_r1.cli.overlay import keys_app, overlay_app
from harness_r1.cli.publish import publish_command
from harness_r1.cli.run import demo, run_daemon
from harness_r1.cli.settings import use_root_config
from harness_r1.cli.topics import broker_command, topics_app
from harness_r1.cli.train import train_app

#: The help panels, in the order an operator meets the commands.
RUN = "Run and operate"
OVERLAYS = "Overlays and keys"
MEASURE = "Data, eval, canary"
ENGINEER = "Engineer and training"

PANELS = (RUN, OVERLAYS, MEASURE, ENGINEER)


class PanelOrderedGroup(TyperGroup):
    """Lists the commands panel by panel in PANELS order (typer puts plain commands before
    groups, which would put "Data, eval, canary" before "Overlays and keys")."""

    def list_commands(self, ctx: Context) -> list[str]:
        names = super().list_commands(ctx)

        def panel_rank(name: str) -> int:
            panel = getattr(self.commands[name], "rich_help_panel", None)
            return PANELS.index(panel) if panel in PANELS else len(PANELS)

        return sorted(names, key=panel_rank)


app = typer.Typer(
    cls=PanelOrderedGroup,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=MARKUP,
    help=__doc__,
)

app.command("demo", rich_help_panel=RUN)(demo)
app.command("run", rich_help_panel=RUN)(run_daemon)
app.add_typer(config_app, name="config", rich_help_panel=RUN)
app.add_typer(ingest_app, name="ingest", rich_help_panel=RUN)
app.add_typer(deadletter_app, name="deadletter", rich_help_panel=RUN)
app.command("publish", rich_help_panel=RUN)(publish_command)
app.add_typer(topics_app, name="topics", rich_help_panel=RUN)
app.command("broker", rich_help_panel=RUN)(broker_command)

app.add_typer(overlay_app, name="overlay", rich_help_panel=OVERLAYS)
app.add_typer(keys_app, name="keys", rich_help_panel=OVERLAYS)

app.add_typer(data_app, name="data", rich_help_panel=MEASURE)
app.add_typer(env_app, name="env", rich_help_panel=MEASURE)
app.command("eval", rich_help_panel=MEASURE)(eval_command)
app.command("canary", rich_help_panel=MEASURE)(canary_command)
app.add_typer(patch_app, name="patch", rich_help_panel=MEASURE)
app.add_typer(packet_app, name="packet", rich_help_panel=MEASURE)
app.add_typer(schemas_app, name="schemas", rich_help_panel=MEASURE)

app.add_typer(engineer_app, name="engineer", rich_help_panel=ENGINEER)
app.add_typer(train_app, name="train", rich_help_panel=ENGINEER)


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


def hoist_config(argv: list[str]) -> list[str]:
    """`--config FILE` given after a command that has no `--config` of its own (`overlay list
    --config daemon.yaml`) is taken as the root option, as if written before the command
    (`harness-r1 --config daemon.yaml overlay list`): operators write it either way. Commands
    with their own `--config` (`run`, `publish`) keep it."""
    command: Any = typer.main.get_command(app)  # typer's vendored click: duck-typed here
    index = 0
    while index < len(argv) and hasattr(command, "commands"):
        token = argv[index]
        if token == "--config":
            index += 2
            continue
        if token.startswith("-"):
            index += 1
            continue
        if token in getattr(command, "commands", {}):
            command = command.commands[token]
            index += 1
            continue
        break
    if hasattr(command, "commands") or any(
        "--config" in getattr(p, "opts", ()) for p in command.params
    ):
        return argv
    head, moved, rest = argv[:index], [], []
    tail = argv[index:]
    skip = False
    for position, token in enumerate(tail):
        if skip:
            skip = False
            continue
        if token == "--config" and position + 1 < len(tail):
            moved += [token, tail[position + 1]]
            skip = True
        elif token.startswith("--config="):
            moved += ["--config", token.split("=", 1)[1]]
        else:
            rest.append(token)
    return moved + head + rest


def main() -> None:
    app(args=hoist_config(sys.argv[1:]))


if __name__ == "__main__":
    main()
