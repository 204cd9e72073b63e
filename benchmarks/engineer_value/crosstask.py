"""Stage crosstask: the engineers on an env none of them was trained on, the TextWorld challenge
games of examples/textworld_env (a plugin: `pip install -e examples/textworld_env`).

Per engineer (the template teacher, which has only its env-independent templates for an env
without rules; the untrained engineer; SFT; SFT+GRPO, as committed), K proposals for each of
the first CROSS_PACKETS failure packets of the embedded target's runs on the plugin's `test`
split (held-out generation seeds 1001-1010; neither the engineers nor the target ever saw a
TextWorld challenge game), each canaried against the base harness on its packet's tasks:
valid proposals, mean delta with a 95% bootstrap interval, and who decided the evaluated
proposals' episodes (forced share, and the success the patch wins without the model). No
gate: the question is whether what an engineer writes transfers, not the promotion rule's
verdict at this size.

The target is the deployed agent (`smollm2-agent`, the demo's and `eval`'s default), not the
base SmolLM2 the engineers were trained against (`--target-policy` of the other stages): the
base model wins none of these games in 6 steps (0/20), so no patch that leaves it deciding
could move it. The change of target is part of what transfers here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness_r1.harness import wilson_interval

from .common import keep_results, rate, run, target_runs
from .engineers import engineer_args, engineer_tag, mean_interval
from .settings import BATCH, HELDOUT_SEED, HR, TABLE_SAMPLING, TARGET, K

CROSS_ENV = "textworld"
CROSS_SPLIT = "test"
CROSS_TASKS = 20  # 5 games of each challenge
CROSS_PACKETS = 3  # packets of BATCH failures: the first 12 failed episodes
CROSS_TARGET = ["--policy", "smollm2-agent"]
CROSS_ENGINEERS = ("teacher", "untrained", "sft", "grpo")
RESULTS = "results-crosstask.json"


def run_crosstask(out: Path, log: Path) -> dict[str, Any]:
    """The held-out runs of the target on the plugin env, then each engineer's row."""
    from harness_r1.envs import env_names

    if CROSS_ENV not in env_names():  # `--stages all` goes on without it
        print(
            f"crosstask: skipped, the {CROSS_ENV} env is not installed (pip install -e "
            "examples/textworld_env, or PYTHONPATH to a `pip install --target` of it)"
        )
        return {}
    folder = out / "crosstask"
    folder.mkdir(parents=True, exist_ok=True)
    runs = folder / f"{CROSS_ENV}-{CROSS_SPLIT}-{CROSS_TARGET[1]}-base.jsonl"
    target_runs(CROSS_ENV, CROSS_SPLIT, CROSS_TASKS, HELDOUT_SEED, CROSS_TARGET, runs, log)
    rows = []
    for name in CROSS_ENGINEERS:
        args = engineer_args(name, out)
        if args is None:
            print(f"crosstask: no {name} engineer in {out} or committed: row left out")
            continue
        tag = f"{CROSS_TARGET[1]}-{engineer_tag(CROSS_ENV, out, args)}"
        report = folder / f"{CROSS_ENV}-{name}-{tag}.json"
        if not report.exists():
            run([HR, "engineer", "evaluate", str(runs), "--env", CROSS_ENV, "--split",
                 CROSS_SPLIT, *args, "--lean-prompt", "-k", str(K), "--batch-size", str(BATCH),
                 *TABLE_SAMPLING, "--max-steps", TARGET[1], "--history-turns", TARGET[3],
                 *CROSS_TARGET, "--limit-packets", str(CROSS_PACKETS),
                 "--baseline-cache", str(out / "baselines"),
                 "--out", str(report)], log)  # fmt: skip
        rows.append(crosstask_row(name, json.loads(report.read_text(encoding="utf-8"))))
    results = {
        "env": CROSS_ENV,
        "split": CROSS_SPLIT,
        "target_policy": CROSS_TARGET[1],
        "target": rate(runs),
        "rows": rows,
    }
    keep_results(RESULTS, results, out)
    print(crosstask_table(results))
    return results


def crosstask_row(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """One engineer's row from its `engineer evaluate` report."""
    summary = report["summary"]
    packets = report["packets"]
    deltas = [d for packet in packets for d in packet["deltas"]]
    return {
        "engineer": name,
        "packets": summary["packets"],
        "proposals": summary["proposals"],
        "valid": summary["valid"],
        "valid_ci": list(wilson_interval(summary["valid"], summary["proposals"])),
        "evaluated": summary["evaluated"],
        "deltas": deltas,
        "mean_delta": summary["mean_delta"],
        "mean_delta_ci": mean_interval(deltas),
        "improved": sum(d > 0 for d in deltas),
        "mean_forced_share": summary.get("mean_forced_share"),
        "mean_patch_alone": summary.get("mean_patch_alone"),
        "rejected": summary["rejected"],
        "generate_seconds": summary["generate_seconds"],
        "canary_seconds": summary["canary_seconds"],
    }


def crosstask_table(results: dict[str, Any]) -> str:
    """The rows as BENCHMARKS.md shows them."""
    target = results["target"]
    low, high = target["ci"]
    lines = [
        f"{results['target_policy']} on {results['env']}/{results['split']}, base harness: "
        f"{target['successes']}/{target['n']} [{low:.0%}, {high:.0%}], forced share 0",
        "",
        "| engineer | valid [95%] | mean delta [95%] | improved | forced share | patch alone |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in results["rows"]:
        v_low, v_high = row["valid_ci"]
        valid = f"{row['valid']}/{row['proposals']} [{v_low:.0%}, {v_high:.0%}]"
        delta = "n/a"
        if row["mean_delta"] is not None and row["mean_delta_ci"] is not None:
            d_low, d_high = row["mean_delta_ci"]
            delta = f"{row['mean_delta']:+.3f} [{d_low:+.3f}, {d_high:+.3f}]"
        forced, alone = row["mean_forced_share"], row["mean_patch_alone"]
        lines.append(
            f"| {row['engineer']} | {valid} | {delta} | {row['improved']}/{row['evaluated']} | "
            f"{'n/a' if forced is None else f'{forced:.2f}'} | "
            f"{'n/a' if alone is None else f'{alone:.0%}'} |"
        )
    return "\n".join(lines)
