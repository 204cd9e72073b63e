"""Render the BENCHMARKS.md rows of the CPU-scale engineer run from its outputs.

    .venv/bin/python benchmarks/engineer_rows.py runs/engineer

Reads what `benchmarks/engineer_cpu_run.sh` wrote: the two eval runs, coldstart/stats.json,
the published versions' metadata.json and heldout-*.json (base, sft, grpo and variants such
as heldout-sft-t0.3.json). Prints markdown only;
nothing is computed here that the files do not hold.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _runs(path: Path) -> tuple[int, int]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return len(rows), sum(1 for r in rows if r["outcome"]["success"])


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def data_rows(root: Path) -> list[str]:
    out = ["| what | value |", "| --- | --- |"]
    for split in ("standard", "dev"):
        path = root / f"dbbench-{split}.jsonl"
        if path.is_file():
            n, wins = _runs(path)
            out.append(f"| target on dbbench/{split} | {wins}/{n} solved |")
    stats_path = root / "coldstart" / "stats.json"
    if stats_path.is_file():
        stats = _json(stats_path)
        rejected = ", ".join(f"{k} {v}" for k, v in stats["rejected"].items()) or "none"
        out.append(f"| cold-start packets (training split) | {stats['packets']} |")
        out.append(
            f"| cold-start proposals -> kept | {stats['proposals']} -> {stats['kept']} "
            f"(rejected: {rejected}) |"
        )
        out.append(
            f"| kept: mean delta / improving | {_fmt(stats['kept_mean_delta'])} / "
            f"{stats['kept_improving']} |"
        )
    return out


def training_rows(root: Path) -> list[str]:
    out = [
        "| stage | version | steps | wall s | tokens | tokens/s | train loss | mean reward |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for meta_path in sorted((root / "artifacts" / "engineer").glob("v*/metadata.json")):
        meta = _json(meta_path)
        out.append(
            f"| {meta['kind']} | {meta_path.parent.name} | {meta['steps']} | {meta['wall_s']:.0f} "
            f"| {meta['tokens']} | {_fmt(meta['tokens_per_s'], '.1f')} "
            f"| {_fmt(meta.get('train_loss'))} | {_fmt(meta.get('mean_reward'))} |"
        )
    return out


def heldout_rows(root: Path) -> list[str]:
    out = [
        "| engineer | temperature | proposals | valid | valid fraction | evaluated | mean delta "
        "| mean reward | improved | gen tokens/s | rejected |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    stages = {"base": 0, "sft": 1, "grpo": 2}  # in training order, then any variant by name
    paths = sorted(
        (p for p in root.glob("heldout-*.json") if not p.name.endswith(".partial.json")),
        key=lambda p: (stages.get(p.stem.split("-")[1], 3), p.stem),
    )
    for path in paths:
        name = path.stem.removeprefix("heldout-")
        s = _json(path)["summary"]
        rejected = ", ".join(f"{k} {v}" for k, v in s["rejected"].items()) or "none"
        out.append(
            f"| {name} ({s['engineer']}) | {_fmt(s.get('temperature'), '.1f')} "
            f"| {s['proposals']} | {s['valid']} "
            f"| {_fmt(s['valid_fraction'], '.2f')} | {s['evaluated']} | {_fmt(s['mean_delta'])} "
            f"| {_fmt(s['mean_reward'])} | {_fmt(s['improved_fraction'], '.2f')} "
            f"| {_fmt(s['tokens_per_second'], '.1f')} | {rejected} |"
        )
    return out


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/engineer")
    for block in (data_rows(root), training_rows(root), heldout_rows(root)):
        print("\n".join(block) + "\n")


if __name__ == "__main__":
    main()
