"""Options that several commands share and whose defaults are the settings' (one source of
defaults: the domain configs -> the settings -> here). `None` means "what the settings say",
so `--config` and `HARNESS_R1_LOOP__*` reach these commands too; `harness-r1 config show`
prints the values in effect."""

from __future__ import annotations

from typing import Annotated, TypeVar

import typer

T = TypeVar("T")

HistoryTurns = Annotated[
    int | None,
    typer.Option(help="Past exchanges the target sees (default: settings loop.history_turns)."),
]
TargetTokens = Annotated[
    int | None,
    typer.Option(help="Target tokens per decision (default: settings loop.max_new_tokens)."),
]
MinBatch = Annotated[
    int | None,
    typer.Option(help="Minimum batch tasks to promote (default: settings loop.gate_min_batch)."),
]
MinGuard = Annotated[
    int | None,
    typer.Option(help="Minimum guard tasks to promote (default: settings loop.gate_min_guard)."),
]
Alpha = Annotated[
    float | None,
    typer.Option(help="Level of the guard regression test (default: settings loop.gate_alpha)."),
]


def or_setting(value: T | None, setting: T) -> T:
    """The option when given, else the setting."""
    return setting if value is None else value
