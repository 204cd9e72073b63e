"""Issue 20, the engineer's value at CPU scale: stage 1, the deployed harness and the baselines.

    .venv/bin/python benchmarks/engineer_value.py [--envs webshop,dbbench,alfworld] [--out DIR]

Per env, every step a `harness-r1` command (printed, and kept in DIR/commands.log):
1. the frozen target on the env's training split (base harness): its failures are the cold
   start's packets;
2. one round of the template teacher on them (`train coldstart`, K proposals per packet, each
   canaried on the packet's own tasks): the kept patch with the best delta is the
   **incumbent**, the deployed harness every engineer is trained and judged against
   (`<env>-incumbent.txt`);
3. on the held-out split: the base harness, the incumbent alone, and the incumbent with
   Self-Refine (the target critiques its failure and replays it), with Wilson 95% intervals;
4. with `--teacher`: the template teacher as an engineer on held-out packets against the
   incumbent (valid fraction, mean canary delta, share improving) and the held-out success of
   its best patch composed onto the incumbent.
Held-out tasks never reach a packet, a cold-start row or a canary of step 2: asserted on the
files (task ids of the train runs, the cold-start packets and the held-out runs).

Resumable: a step whose output exists is skipped (delete an output to redo it). Results:
DIR/results-<env>.json and a markdown table on stdout (BENCHMARKS.md, "The engineer's value").
Later stages (cold start >= 200 rows, SFT curve, GRPO, the engineers' rows) build on these
files with the same splits.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness_r1.harness.evaluation import wilson_interval

HR = str(Path(sys.executable).parent / "harness-r1")
#: (training split, held-out split) per env: the issue's splits
SPLITS = {
    "alfworld": ("train", "valid_seen"),
    "dbbench": ("standard", "dev"),
    "webshop": ("fixed_train", "fixed_heldout"),
}
TRAIN_TASKS = {"alfworld": 16, "dbbench": 16, "webshop": 16}
HELDOUT_TASKS = {"alfworld": 20, "dbbench": 20, "webshop": 20}
#: the frozen target as in the demo and the CPU engineer runs: SmolLM2-135M greedy
TARGET = ["--max-steps", "6", "--history-turns", "3", "--max-new-tokens", "64"]
BATCH = 4  # episodes per packet
K = 4  # teacher proposals per packet
SEED = 0
HELDOUT_SEED = 1000  # other seeds than training: held-out episodes are new episodes


def run(command: list[str], log: Path) -> None:
    line = " ".join(shlex.quote(part) for part in command)
    print(f"$ {line}", flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True)
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"{line}  # {time.perf_counter() - started:.0f} s\n")


def trajectories(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def rate(path: Path) -> dict[str, Any]:
    rows = trajectories(path)
    wins = sum(1 for row in rows if row["outcome"]["success"])
    low, high = wilson_interval(wins, len(rows))
    return {"n": len(rows), "successes": wins, "rate": wins / len(rows), "ci": [low, high]}


def best_kept(dataset: Path) -> dict[str, Any] | None:
    """The kept cold-start row with the best canary delta (then mean reward, then the
    shortest completion: the simplest of equals)."""
    rows = trajectories(dataset) if dataset.exists() else []
    scored = [r for r in rows if r["metadata"].get("delta_success") is not None]
    if not scored:
        return None
    return max(
        scored,
        key=lambda r: (
            r["metadata"]["delta_success"],
            r["metadata"].get("delta_mean_reward") or 0.0,
            -len(r["completion"][-1]["content"]),
        ),
    )


def assert_held_out(env: str, out: Path) -> None:
    """No held-out task in the training runs or in any cold-start packet or canary batch."""
    train, heldout = SPLITS[env]
    held = {row["task"]["task_id"] for row in trajectories(out / f"{env}-heldout-base.jsonl")}
    trained = {row["task"]["task_id"] for row in trajectories(out / f"{env}-train-base.jsonl")}
    packets = trajectories(out / f"{env}-coldstart" / "packets.jsonl")
    canaried = {task_id for row in packets for task_id in row["task_ids"]}
    splits = {split for row in packets for split in row["splits"]}
    assert not held & trained, f"{env}: held-out tasks in the training runs: {held & trained}"
    assert not held & canaried, f"{env}: held-out tasks canaried: {held & canaried}"
    assert splits <= {train} and heldout not in splits, f"{env}: packets from {splits}"


def stage_one(env: str, out: Path, log: Path) -> dict[str, Any]:
    train, heldout = SPLITS[env]
    base_train = out / f"{env}-train-base.jsonl"
    if not base_train.exists():
        run([HR, "eval", "--env", env, "--split", train, "--limit", str(TRAIN_TASKS[env]),
             "--seed", str(SEED), *TARGET, "--out", str(base_train)], log)  # fmt: skip
    coldstart = out / f"{env}-coldstart"
    if not (coldstart / "stats.json").exists():
        run([HR, "train", "coldstart", str(base_train), "--env", env, "--split", train,
             "--out", str(coldstart), "-k", str(K), "--batch-size", str(BATCH),
             "--baseline-cache", str(out / "baselines"), *TARGET], log)  # fmt: skip
    incumbent_file = out / f"{env}-incumbent.txt"
    best = best_kept(coldstart / "dataset.jsonl")
    if best is not None and best["metadata"]["delta_success"] > 0:
        incumbent_file.write_text(best["completion"][-1]["content"], encoding="utf-8")
    on = ["--on", str(incumbent_file)] if incumbent_file.exists() else []
    rows: dict[str, Any] = {}
    refine = [*on, "--self-refine"]
    conditions = [("base", []), ("incumbent", on), ("incumbent+self-refine", refine)]
    for name, extra in conditions:
        if name != "base" and not on:
            continue  # no incumbent: the base harness is the deployed one (said in results)
        path = out / f"{env}-heldout-{name}.jsonl"
        if not path.exists():
            run([HR, "eval", "--env", env, "--split", heldout, "--limit",
                 str(HELDOUT_TASKS[env]), "--seed", str(HELDOUT_SEED), *TARGET, *extra,
                 "--out", str(path)], log)  # fmt: skip
        rows[name] = rate(path)
    assert_held_out(env, out)
    stats = json.loads((coldstart / "stats.json").read_text())
    return {
        "env": env,
        "splits": {"train": train, "heldout": heldout},
        "train_base": rate(base_train),
        "coldstart": {"proposals": stats.get("proposals"), "kept": stats.get("kept")},
        "incumbent": None
        if best is None or not on
        else {
            "templates": best["metadata"].get("templates"),
            "delta_success": best["metadata"]["delta_success"],
            "description": best["metadata"].get("description"),
        },
        "heldout": rows,
    }


def stage_teacher(env: str, out: Path, log: Path) -> dict[str, Any] | None:
    """The template teacher as an engineer on held-out packets (failures of the held-out runs
    under the incumbent), K proposals each, canaried against the incumbent: valid fraction,
    mean delta, share improving; then its best patch, composed onto the incumbent, on the
    held-out tasks (transductive, as the canary: the same tasks it was chosen on). Its packets
    are held-out ones and stay in their own folder: no training stage reads them."""
    _, heldout = SPLITS[env]
    incumbent_file = out / f"{env}-incumbent.txt"
    runs = out / f"{env}-heldout-incumbent.jsonl"
    if not incumbent_file.exists() or not runs.exists():
        return None
    teacher = out / f"{env}-eval-teacher"
    on = ["--on", str(incumbent_file)]
    if not (teacher / "stats.json").exists():
        run([HR, "train", "coldstart", str(runs), "--env", env, "--split", heldout,
             "--out", str(teacher), "-k", str(K), "--batch-size", str(BATCH), *on,
             "--baseline-cache", str(out / "baselines"), *TARGET], log)  # fmt: skip
    rows = trajectories(teacher / "dataset.jsonl") + trajectories(teacher / "rejected.jsonl")
    deltas = [r["metadata"].get("delta_success") for r in rows]
    evaluated = [d for d in deltas if d is not None]
    best = best_kept(teacher / "dataset.jsonl")
    summary: dict[str, Any] = {
        "proposals": len(rows),
        "valid": len(evaluated),
        "valid_fraction": len(evaluated) / len(rows) if rows else 0.0,
        "mean_delta": sum(evaluated) / len(evaluated) if evaluated else None,
        "improving_fraction": sum(d > 0 for d in evaluated) / len(rows) if rows else 0.0,
        "best_delta": best["metadata"]["delta_success"] if best else None,
    }
    if best is not None and best["metadata"]["delta_success"] > 0:
        link = out / f"{env}-teacher-best.txt"
        link.write_text(best["completion"][-1]["content"], encoding="utf-8")
        path = out / f"{env}-heldout-incumbent+teacher.jsonl"
        if not path.exists():
            run([HR, "eval", "--env", env, "--split", heldout, "--limit",
                 str(HELDOUT_TASKS[env]), "--seed", str(HELDOUT_SEED), *TARGET, *on,
                 "--on", str(link), "--out", str(path)], log)  # fmt: skip
        summary["heldout_after_best"] = rate(path)
    return summary


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| env | condition | held-out success | 95% interval |",
        "| --- | --- | --- | --- |",
    ]
    for result in results:
        rows = dict(result["heldout"])
        after = (result.get("teacher") or {}).get("heldout_after_best")
        if after is not None:
            rows["incumbent+teacher's best"] = after
        for name, row in rows.items():
            low, high = row["ci"]
            lines.append(
                f"| {result['env']} | {name} | {row['successes']}/{row['n']} "
                f"({row['rate']:.0%}) | [{low:.0%}, {high:.0%}] |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="webshop,dbbench,alfworld")
    parser.add_argument("--out", type=Path, default=Path("runs/engineer-value"))
    parser.add_argument(
        "--teacher", action="store_true", help="Also score the template teacher (stage 2)."
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "commands.log"
    results = []
    for env in args.envs.split(","):
        result = stage_one(env, args.out, log)
        if args.teacher:
            result["teacher"] = stage_teacher(env, args.out, log)
        results.append(result)
    for result in results:  # one file per env: envs may run in separate invocations
        path = args.out / f"results-{result['env']}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
