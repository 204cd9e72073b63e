"""How far two runs of the frozen target on the same tasks agree (issue 16, deliverable 3).

Reads two `harness-r1 eval --out` files of the same tasks and seeds (one per target
configuration, e.g. the new default and fp32), pairs episodes by (task, seed) and prints: the
success rate of each, the steps whose action is identical (compared step by step over the
shorter episode of each pair), the steps identical before the pair's first differing action,
and the episodes identical from start to end. Lower precision changes some tokens; once one
action differs the two episodes see different observations, so the later steps are compared
too but say less.

    .venv/bin/python benchmarks/target_equivalence.py runs/eq-dbbench-fp32.jsonl \
        runs/eq-dbbench-default.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness_r1.contracts import Trajectory


def load(path: Path) -> dict[tuple[str, int], Trajectory]:
    runs = [Trajectory.model_validate_json(line) for line in path.read_text().splitlines() if line]
    return {(t.task.task_id, t.task.seed): t for t in runs}


def compare(
    reference: dict[tuple[str, int], Trajectory], other: dict[tuple[str, int], Trajectory]
) -> dict[str, float]:
    shared = sorted(reference.keys() & other.keys())
    if not shared:
        raise SystemExit("the two runs share no (task, seed)")
    steps = same = before_first_difference = whole = 0
    for key in shared:
        a = [s.action for s in reference[key].steps]
        b = [s.action for s in other[key].steps]
        n = min(len(a), len(b))
        matches = [a[i] == b[i] for i in range(n)]
        steps += n
        same += sum(matches)
        before_first_difference += next((i for i, m in enumerate(matches) if not m), n)
        whole += a == b
    return {
        "episodes": len(shared),
        "success_reference": sum(reference[k].outcome.success for k in shared),
        "success_other": sum(other[k].outcome.success for k in shared),
        "steps_compared": steps,
        "identical_steps": same,
        "identical_before_first_difference": before_first_difference,
        "identical_episodes": whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reference", type=Path)
    parser.add_argument("other", type=Path)
    args = parser.parse_args()
    r = compare(load(args.reference), load(args.other))
    n, steps = r["episodes"], r["steps_compared"]
    print(
        "| episodes | success (reference) | success (other) | identical actions "
        "| identical before the first difference | identical episodes |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| {n} | {r['success_reference']}/{n} | {r['success_other']}/{n} | "
        f"{r['identical_steps']}/{steps} ({r['identical_steps'] / steps:.1%}) | "
        f"{r['identical_before_first_difference']}/{steps} "
        f"({r['identical_before_first_difference'] / steps:.1%}) | "
        f"{r['identical_episodes']}/{n} |"
    )


if __name__ == "__main__":
    main()
