"""Options that several commands share and whose defaults are the settings' (one source of
defaults: the domain configs -> the settings -> here). `None` means "what the settings say",
so `--config` and `HARNESS_R1_LOOP__*` reach these commands too; `harness-r1 config show`
prints the values in effect."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from harness_r1.cli.jobs import TargetSpec
    from harness_r1.daemon.settings import Settings

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
GuardLimit = Annotated[
    int | None,
    typer.Option(
        help="Guard tasks, others of the split (default: settings loop.guard_limit; 0: none)."
    ),
]
PacketSize = Annotated[
    int | None,
    typer.Option(help="Trajectories per packet (default: settings loop.batch_size)."),
]
MinGuard = Annotated[
    int | None,
    typer.Option(help="Minimum guard tasks to promote (default: settings loop.gate_min_guard)."),
]
# The embedded target's engine defaults as the commands show them: PolicySpec's
# (tests/cli/test_commands.py checks they agree; importing PolicySpec here would import the
# envs on every `--help`).
TARGET_DTYPE = "auto"
TARGET_PREFIX_CACHE = True
TARGET_BATCHED_DECODE = True
TARGET_DRAFT_TOKENS = 4

TargetDtype = Annotated[
    str,
    typer.Option(
        help="Embedded target's number format: auto (bf16 on CPUs with amx_bf16 or "
        "avx512_bf16, else float32), float32, bfloat16, or int8 (faster, not equivalent)."
    ),
]
PrefixCache = Annotated[
    bool,
    typer.Option(
        "--prefix-cache/--no-prefix-cache",
        help="Embedded target reuses the KV cache of shared prompt prefixes.",
    ),
]
BatchedDecode = Annotated[
    bool,
    typer.Option(
        "--batched-decode/--serial-decode",
        help="With the prefix cache: decode a lockstep batch together, or one row at a time "
        "(the engine before issue 16).",
    ),
]
DraftTokens = Annotated[
    int,
    typer.Option(
        min=0,
        help="Greedy lockstep decode: tokens guessed by prompt lookup and checked in the same "
        "forward pass (same text, fewer passes); 0 = off.",
    ),
]
OnIncumbent = Annotated[
    list[Path] | None,
    typer.Option(
        "--on",
        help="The incumbent overlay (the deployed harness): a patch file, repeatable for a "
        "chain, oldest link first. Episodes run under it / candidates are composed onto it and "
        "judged against it. Default: the base harness.",
    ),
]
LeanPrompt = Annotated[
    bool,
    typer.Option(
        "--lean-prompt",
        help="The engineer's lean prompt (~0.9k instead of ~2.6k tokens: the hook surface "
        "without meanings, one example, the failure point's last steps): for small engineers.",
    ),
]
#: the default frozen target: the deployed agent (models/deployed.py's
#: DEFAULT_TARGET, named here so `--help` imports no model code; a test holds them equal)
DEFAULT_TARGET = "smollm2-agent"
TargetPolicy = Annotated[
    str,
    typer.Option(
        "--policy",
        help="The frozen target: smollm2-agent (the deployed agent, the default), smollm2 or "
        "gemma3 (embedded base models), or a checkpoint dir (e.g. a tuned target from "
        "`train target`).",
    ),
]
Alpha = Annotated[
    float | None,
    typer.Option(help="Level of the guard regression test (default: settings loop.gate_alpha)."),
]


def or_setting(value: T | None, setting: T) -> T:
    """The option when given, else the setting."""
    return setting if value is None else value


def target_spec(
    settings: Settings,
    history_turns: int | None,
    max_new_tokens: int | None,
    **fields: Any,
) -> TargetSpec:
    """The target a command runs: its own options, the two settings-defaulted ones resolved
    against `settings`, the model cache from the settings."""
    from harness_r1.cli.jobs import TargetSpec

    return TargetSpec(
        history_turns=or_setting(history_turns, settings.loop.history_turns),
        max_new_tokens=or_setting(max_new_tokens, settings.loop.max_new_tokens),
        cache_dir=settings.cache,
        **fields,
    )
