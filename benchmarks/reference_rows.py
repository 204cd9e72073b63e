"""Markdown rows for BENCHMARKS.md from the reference canary reports (runs/ref-*.json).

.venv/bin/python benchmarks/reference_rows.py runs/ref-alfworld.json runs/ref-dbbench.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness_r1.contracts import OriginCounts
from harness_r1.harness import wilson_interval

FAULTS = {"raised", "junk", "timeout", "crashed", "violation", "memory", "oversized", "invalid"}


def row(path: Path) -> str:
    body = json.loads(path.read_text())
    report = body["batch"]
    [result] = report["candidates"]
    pairs = result["pairs"]
    n = len(pairs)
    base = sum(p["base_success"] for p in pairs)
    patched = sum(p["patched_success"] for p in pairs)
    low, high = result["delta_interval"] or (0.0, 0.0)
    origins = OriginCounts(**result.get("origins", {}))
    alone = result.get("patch_alone")
    alone_text = f"{alone['successes']}/{alone['tasks']}" if alone else "not run"
    faults = sum(
        v
        for k, v in result["sandbox_events"].items()
        if k
        in {"raised", "junk", "timeout", "crashed", "violation", "memory", "oversized", "invalid"}
    )
    gate = body["gate"][result["candidate_id"]]["verdict"]
    b_low, b_high = wilson_interval(base, n)
    return (
        f"| {report['env']} | {result['candidate_id']} | {n} "
        f"| {base}/{n} [{b_low:.1%}, {b_high:.1%}] "
        f"| {patched}/{n} | {result['delta_success']:+.3f} [{low:+.2f}, {high:+.2f}] "
        f"| {origins.forced_share:.2f} ({origins.forced}/{origins.steps}) | {alone_text} "
        f"| {faults} | {result['cost']['seconds']:.0f} s | {gate} |"
    )


def main() -> None:
    print(
        "| env | patch | tasks | base success [Wilson 95%] | patched | delta [bootstrap 95%] "
        "| forced share (steps) | patch alone | hook faults | canary seconds | gate |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in sys.argv[1:]:
        print(row(Path(name)))


if __name__ == "__main__":
    main()
