"""The command line as an operator meets it: grouped help, an example on every command."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import typer.main
from click import Command
from typer.testing import CliRunner

from harness_r1.cli.app import ENGINEER, MEASURE, OVERLAYS, RUN, app

runner = CliRunner()


def leaf_commands() -> Iterator[tuple[list[str], Command]]:
    def walk(command: Command, path: list[str]) -> Iterator[tuple[list[str], Command]]:
        children = getattr(command, "commands", None)
        if not children:
            yield path, command
            return
        for name, child in children.items():
            yield from walk(child, [*path, name])

    yield from walk(typer.main.get_command(app), [])


def test_every_command_shows_an_example_of_itself() -> None:
    paths = []
    for path, command in leaf_commands():
        paths.append(" ".join(path))
        help_text = command.help or ""
        example = f"Example: `harness-r1 {' '.join(path)}"
        prefixed = f"Example: `harness-r1 --config daemon.yaml {' '.join(path)}"
        assert example in help_text or prefixed in help_text, f"{' '.join(path)}: no example"
    assert len(paths) >= 29 and "train grpo online" in paths and "train grpo replay" in paths


def test_root_help_groups_the_commands_in_panels() -> None:
    result = runner.invoke(app, ["--help"], terminal_width=120)
    assert result.exit_code == 0
    text = result.output
    for panel in (RUN, OVERLAYS, MEASURE, ENGINEER):
        assert panel in text
    order = [text.index(panel) for panel in (RUN, OVERLAYS, MEASURE, ENGINEER)]
    assert order == sorted(order), "panels in the order an operator meets them"
    run_panel = text[text.index(RUN) : text.index(OVERLAYS)]
    assert "│ demo" in run_panel and "│ run " in run_panel and "│ train" not in run_panel
    assert text.index("Harness-R1:") < text.index(RUN), "the help opens with what the tool does"


def test_help_starts_without_importing_the_heavy_packages() -> None:
    """`--help` must not pay for torch, the envs or the sandbox (command modules import them
    inside their commands)."""
    probe = (
        "import sys; from harness_r1.cli.app import app; "
        "heavy = [m for m in ('torch', 'transformers', 'harness_r1.envs', 'harness_r1.sandbox', "
        "'harness_r1.daemon.settings', 'sqlalchemy', 'kafka') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
