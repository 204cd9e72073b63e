"""Stage ablation (7): the most trained engineer with each hook removed from what it may
write, on the same held-out packets, canary and gate as its own row: which hooks its gains
come from.
"""

from __future__ import annotations

from pathlib import Path

from .common import committed_results, keep_results
from .engineers import engineers_table, final_engineer, stage_engineers


def run_ablation(envs: list[str], out: Path, log: Path) -> None:
    """Stage 7: the most trained engineer with each of the four hooks removed from what it may
    write (at evaluation: the prompt leaves the hook out, a patch writing it is invalid), on
    the same held-out packets, canary and gate as its own row."""
    from harness_r1.contracts import HookName

    name = final_engineer(out)
    assert name is not None, "train an engineer first (stages sft, grpo)"
    names = (name, *(f"{name}-without-{hook}" for hook in HookName))
    rows = stage_engineers(envs, out, log, names)
    earlier = committed_results("results-ablation.json")
    keep_results("results-ablation.json", {**earlier, **rows}, out)
    print(engineers_table(rows))
