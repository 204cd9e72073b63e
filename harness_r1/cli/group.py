"""One way to make a command group, so every group's help renders alike: paragraphs reflowed
(markdown), `code` for the example each command ends its help with."""

from __future__ import annotations

from typing import Final, Literal

import typer

MARKUP: Final[Literal["markdown"]] = "markdown"


def command_group(help: str) -> typer.Typer:
    """A group that prints its help when called without a subcommand."""
    return typer.Typer(no_args_is_help=True, rich_markup_mode=MARKUP, help=help)
