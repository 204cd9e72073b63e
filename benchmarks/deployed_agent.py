"""The tables of the deployed agent's vanilla runs (benchmarks/deployed_agent.sh writes them):
success with Wilson 95% intervals, forced share (0 under the base harness: checked, not
assumed), decisions per second of model time, and each policy's failure modes
(harness_r1/consumers/failure_modes.py).

    .venv/bin/python benchmarks/deployed_agent.py runs/deployed-agent \
        --policies smollm2 smollm2-agent --json runs/deployed-agent/summary.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness_r1.consumers import MODES, count_failure_modes, read_trajectories
from harness_r1.contracts import OriginCounts, format_share
from harness_r1.harness import wilson_interval

ENVS = ("alfworld", "dbbench", "webshop")


def summarize(path: Path) -> dict[str, Any]:
    runs = read_trajectories(path)
    successes = sum(t.outcome.success for t in runs)
    low, high = wilson_interval(successes, len(runs))
    origins = sum((t.origins for t in runs), OriginCounts())
    calls = sum(s.model_calls for t in runs for s in t.steps)
    model_s = sum(t.timings.model_seconds for t in runs)
    return {
        "split": runs[0].task.split if runs else None,
        "n": len(runs),
        "successes": successes,
        "interval": [round(low, 4), round(high, 4)],
        "won": sorted(t.task.task_id for t in runs if t.outcome.success),
        "forced_share": origins.measured_forced_share,
        "decisions_per_s": round(calls / model_s, 3) if model_s else None,
        "failure_modes": dict(count_failure_modes(runs)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", type=Path)
    parser.add_argument("--policies", nargs="+", default=["smollm2", "smollm2-agent"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {
        policy: {
            env: summarize(args.runs / f"{policy}-{env}.jsonl")
            for env in ENVS
            if (args.runs / f"{policy}-{env}.jsonl").is_file()
        }
        for policy in args.policies
    }
    print("| env | held-out split | target | success | 95% interval | forced share | decisions/s |")
    print("| --- | --- | --- | ---: | --- | ---: | ---: |")
    for env in ENVS:
        for policy in args.policies:
            row = results[policy].get(env)
            if row is None:
                continue
            low, high = row["interval"]
            print(
                f"| {env} | {row['split']} | {policy} | {row['successes']}/{row['n']} "
                f"({row['successes'] / row['n']:.1%}) | [{low:.1%}, {high:.1%}] | "
                f"{format_share(row['forced_share'])} | {row['decisions_per_s']} |"
            )
    print()
    print("| env | target | failures | " + " | ".join(MODES) + " |")
    print("| --- | --- | ---: | " + " | ".join("---:" for _ in MODES) + " |")
    for env in ENVS:
        for policy in args.policies:
            row = results[policy].get(env)
            if row is None:
                continue
            modes = row["failure_modes"]
            counts = " | ".join(str(modes.get(mode, 0)) for mode in MODES)
            print(f"| {env} | {policy} | {row['n'] - row['successes']} | {counts} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
