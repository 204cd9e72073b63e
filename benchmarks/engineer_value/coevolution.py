"""Stage coevolution (9), the paper's coevolution: the target fine-tuned on its own
successes under the deployed harness (the incumbent plus the final engineer's best promoted
patch), then the frozen and the tuned target held out under the base harness, the incumbent
and the deployed harness: whether harness patching still adds on top of a tuned target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import (
    committed_results,
    condition_slug,
    heldout_runs,
    heldout_target_runs,
    incumbent_on,
    keep_results,
    rate,
    run,
    target_runs,
)
from .engineers import engineer_args, engineer_files, final_engineer
from .settings import COLDSTART_TASKS, HR, SEED, SPLITS, TARGET_POLICY

#: what the tuned target learns of its successful training episodes under the deployed harness:
#: the executed actions. The incumbents force every step of every success here (WebShop 59 of 59
#: steps, DBBench 7 of 9 and 2 without a model call; BENCHMARKS.md), so the target's own accepted
#: outputs (`--rows own`) are none: the tuned target can only absorb what the harness did.
#: One row a step: `train target`'s default of 4 rows (up to 2.75k tokens each, fp32) was
#: killed for memory at 24 GB on a 2-core host; one epoch (~10 s a row here)
COEVOLUTION_TARGET_ARGS = ["--rows", "executed", "--batch-size", "1", "--epochs", "1"]


def promoted_best(env: str, out: Path) -> dict[str, Path] | None:
    """The final engineer's best promoted patch on `env` and its held-out run (its
    engineers-stage row's files: "best", "after"; None where it promoted nothing or has not
    run here)."""
    name = final_engineer(out)
    args = None if name is None else engineer_args(name, out)
    if name is None or args is None:
        return None
    files = engineer_files(env, name, out, args)
    if not files["report"].exists():  # not "promoted nothing": not measured here
        raise SystemExit(
            f"no {name} row for {env} in {out}: run --stages engineers --envs {env} "
            f"--engineers {name} first (what it promotes is the deployed harness)"
        )
    return files if files["best"].exists() else None


def deployed_on(env: str, out: Path) -> list[str]:
    """`--on` for what the pool runs once the engineers' round is deployed: the incumbent plus
    the final engineer's best promoted patch where it promoted one, else the incumbent."""
    best = promoted_best(env, out)
    return [*incumbent_on(env, out), *(["--on", str(best["best"])] if best else [])]


def short_digest(*parts: bytes) -> str:
    import hashlib

    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


def run_coevolution(envs: list[str], out: Path, log: Path) -> None:
    """Stage 9 (the paper's coevolution): the target fine-tuned on its own successful training
    episodes under the deployed harness (`deployed_on`: the incumbent plus the final
    engineer's best promoted patch, where the engineers stage promoted one; `train target`,
    COEVOLUTION_TARGET_ARGS: LoRA SFT on the executed actions, merged into a checkpoint), then
    the held-out success of the frozen and the tuned target under the base harness, the
    incumbent and the incumbent plus that patch: whether harness patching still adds on top
    of a tuned target (the paper's 59.2 -> 64.2). The patch is the one found against the
    frozen target; the engineer retrained against the tuned target is stages coldstart (packets
    only), grpo and engineers again with `--target-policy` the tuned checkpoint and a fresh
    --out (the package's docstring; `make bench` runs it on WebShop after this stage)."""
    assert not TARGET_POLICY, "coevolution tunes the embedded SmolLM2: no --target-policy"
    folder = out / "coevolution"
    folder.mkdir(parents=True, exist_ok=True)
    runs, generations, harnesses = [], [], []
    for env in envs:
        on = deployed_on(env, out)  # named by its patches' contents: another harness, another file
        tag = short_digest(*(Path(f).read_bytes() for f in on[1::2])) if on else "base"
        path = folder / f"{env}-train-{tag}.jsonl"
        recorded = folder / f"{env}-train-{tag}-generations.jsonl"
        if not path.exists() or not recorded.exists():
            path.unlink(missing_ok=True)
            target_runs(env, SPLITS[env][0], COLDSTART_TASKS[env], SEED,
                        [*on, "--record-generations", str(recorded)], path, log)  # fmt: skip
        runs.append(path)
        generations.append(recorded)
        harnesses.append(f"{env}-{tag}")
    target = folder / f"target-{short_digest(*(h.encode() for h in harnesses))}"

    def merged() -> list[Path]:  # finished merges only (a merge in progress is hidden)
        return sorted(target.glob("tuned-v[0-9][0-9][0-9][0-9]"))

    tuned = merged()
    if not tuned:
        run([HR, "train", "target", *map(str, runs), *COEVOLUTION_TARGET_ARGS,
             *(arg for g in generations for arg in ("--generations", str(g))),
             "--out", str(target)], log)  # fmt: skip
        tuned = merged()
    checkpoint = tuned[-1]
    (folder / "tuned-target.txt").write_text(f"{checkpoint}\n")  # the retrain's (run_all.sh)
    print(f"tuned target: {checkpoint}")
    results: dict[str, dict[str, Any]] = {}
    for env, path in zip(envs, runs, strict=True):
        results[env] = coevolution_rows(env, out, checkpoint, log)
        results[env]["trained_on"] = {**rate(path), "harness": harness_label(env, out)}
    earlier = committed_results("results-coevolution.json")
    keep_results("results-coevolution.json", {**earlier, **results}, out)
    print(json.dumps(results, indent=2))


def harness_label(env: str, out: Path) -> str:
    """The deployed harness of `deployed_on` in words: "incumbent+grpo's best", "incumbent",
    "base"."""
    under = "incumbent" if incumbent_on(env, out) else "base"
    return f"{under}+{final_engineer(out)}'s best" if promoted_best(env, out) else under


def coevolution_rows(env: str, out: Path, checkpoint: Path, log: Path) -> dict[str, Any]:
    """The frozen and the tuned target's held-out success under each harness: base, incumbent
    (where the env has one) and incumbent plus the best promoted patch (where there is one;
    the frozen target's run of it is the engineers stage's)."""
    on, best = incumbent_on(env, out), promoted_best(env, out)
    conditions = {"base": ([], out / f"{env}-heldout-base.jsonl")}
    if on:
        conditions["incumbent"] = (on, heldout_runs(env, out, log))
    if best is not None:  # the deployed harness (`deployed_on`)
        conditions[harness_label(env, out)] = ([*on, "--on", str(best["best"])], best["after"])
    rows: dict[str, dict[str, Any]] = {"frozen": {}, "tuned": {}}
    for condition, (extra, frozen) in conditions.items():
        rows["frozen"][condition] = rate(heldout_target_runs(env, extra, frozen, log))
        tuned_name = f"{checkpoint.parent.name}-{checkpoint.name}"
        path = out / "coevolution" / f"{env}-heldout-{tuned_name}-{condition_slug(condition)}.jsonl"
        tuned = heldout_target_runs(env, ["--policy", str(checkpoint), *extra], path, log)
        rows["tuned"][condition] = rate(tuned)
    return rows
