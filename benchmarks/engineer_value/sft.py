"""Stage sft (4): LoRA SFT of the engineer (SmolLM2-135M) on the merged cold start, and its
held-out validity curve over the checkpoints.

An SFT run takes about half an hour on 2 cores, so the trained engineer is committed
(COMMITTED_SFT) with the digest of the rows it was taught (`rows_digest`) and its total steps:
a later run, on any host, takes it instead of training again as long as the rows it would
teach are the same (`sft_version`). The validity measure (`validity`, `pooled_validity`) is
shared with the sampling stage.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from harness_r1.harness import wilson_interval

from .coldstart import current_format
from .common import copy_whole, heldout_runs, incumbent_on, run, trajectories, weights_sha
from .settings import (
    BATCH,
    COMMITTED,
    COMMITTED_SFT,
    CURVE_PACKETS,
    CURVE_SAMPLING,
    DEFAULT_ENVS,
    HR,
    SFT_ARGS,
    SFT_EPOCHS,
    SPLITS,
    TARGET_POLICY,
    WARM_START,
    K,
    option_value,
    published,
)


def rows_digest(dataset: Path) -> str:
    """SHA-256 of a dataset's rows in order, each as its system message and its completion:
    the teacher's patches SFT teaches, which the committed rows fix, and the system prompt they
    were taught under, which the code fixes (the template menu changed it: an engineer
    trained without the menu is not the one the rows now teach). The user messages are left
    out: a restore rebuilds them from regenerated runs, which differ on another kind of CPU
    (stage 4 in BENCHMARKS.md) while the rows are the same; the metadata too (a restore adds
    to it)."""
    return _rows_digest(
        [(row["prompt"][0]["content"], row["completion"]) for row in trajectories(dataset)]
    )


def _rows_digest(rows: list[Any]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


@functools.cache
def committed_rows_digest(envs: tuple[str, ...] = DEFAULT_ENVS) -> str:
    """`rows_digest` of the dataset a restore of the committed rows would merge (`envs` in the
    default order, each completion in the current format under the current lean system
    prompt), computed without the restore: the rows' completions are committed, only their
    user messages need the regenerated runs."""
    return taught_digest([(env, row) for env in envs for row in committed_coldstart(env)])


def committed_coldstart(env: str) -> list[dict[str, Any]]:
    """The env's committed cold-start rows (completions and metadata, no prompts)."""
    return trajectories(COMMITTED / "coldstart" / f"{env}-rows.jsonl")


def taught_digest(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """`rows_digest` of (env, committed row) pairs as a dataset would teach them: each
    completion in the current format under the env's current lean system prompt."""
    from harness_r1.trainer import PromptConfig, system_prompt

    return _rows_digest(
        [
            (
                system_prompt(env, config=PromptConfig(lean=True)),
                current_format(row["completion"], env),
            )
            for env, row in rows
        ]
    )


def sft_version(out: Path) -> Path | None:
    """The published SFT engineer trained on this cold start (its dataset's sha256; the most
    trained of them), else the committed one if it was trained on the same rows
    (`rows_digest`), else None."""
    from harness_r1.trainer import file_sha256, list_versions, read_metadata

    dataset = out / "engineer-coldstart.jsonl"
    digest = COMMITTED_SFT / "rows-digest.txt"
    if not dataset.exists():  # no restore here: the committed engineer if the rows are its
        if not digest.exists():
            return None
        return COMMITTED_SFT if digest.read_text().strip() == committed_rows_digest() else None
    sha = file_sha256(dataset)
    local = []
    for version in list_versions(out / "engineer"):
        meta = read_metadata(version)
        if meta.get("kind") == "sft" and meta.get("dataset", {}).get("sha256") == sha:
            local.append(version)
    if digest.exists() and digest.read_text().strip() == rows_digest(dataset):
        local.insert(0, COMMITTED_SFT)  # a local run no more trained than it loses to it
    # the most trained; of equals the latest (list_versions is oldest first)
    return max(reversed(local), key=sft_steps) if local else None


def sft_steps(version: Path) -> int:
    """Optimizer steps behind an SFT engineer, those of the adapters it continued from
    included (`train sft --adapter` starts a new run: its `steps` are its own). The committed
    engineer carries its total (`steps_total`), so its lineage need not be on this host."""
    from harness_r1.trainer import read_metadata

    meta = read_metadata(version)
    if "steps_total" in meta:
        return int(meta["steps_total"])
    parent = meta.get("parent_path")
    return int(meta.get("steps", 0)) + (sft_steps(Path(parent)) if parent else 0)


def parent_steps(version: Path) -> int:
    """Steps of the adapter `version`'s run continued from (0: a fresh LoRA)."""
    from harness_r1.trainer import read_metadata

    parent = read_metadata(version).get("parent_path")
    return sft_steps(Path(parent)) if parent else 0


def sft_steps_planned(dataset: Path) -> int:
    """Optimizer steps of the SFT engineer: WARM_START's, then SFT_EPOCHS over `dataset`."""
    return warm_steps() + epoch_steps(len(trajectories(dataset)), SFT_EPOCHS)


def epoch_steps(rows: int, epochs: int) -> int:
    """Optimizer steps of `epochs` passes over `rows` rows at SFT_ARGS' batch size (rows /
    batch, rounded up, an epoch)."""
    batch = int(option_value(SFT_ARGS, "--batch-size"))
    return epochs * -(-rows // batch)


def warm_steps() -> int:
    """Optimizer steps behind WARM_START (0 without one: the SFT starts from the base model)."""
    return sft_steps(WARM_START) if WARM_START.exists() else 0


def commit_sft(version: Path, dataset: Path) -> None:
    """Keep the SFT engineer in the repository (COMMITTED_SFT), with the digest of the rows it
    was trained on (`sft_version` takes it only for the same rows) and its total steps (its
    parent may be the committed engineer it replaces)."""
    import shutil

    if version == COMMITTED_SFT or TARGET_POLICY:
        return
    total = sft_steps(version)

    def note_lineage(copy: Path) -> None:
        meta = json.loads((copy / "metadata.json").read_text())
        meta["steps_total"] = total
        (copy / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        (copy / "rows-digest.txt").write_text(rows_digest(dataset) + "\n")

    shutil.rmtree(COMMITTED_SFT, ignore_errors=True)
    copy_whole(version, COMMITTED_SFT, note_lineage)


def snapshot(version: Path, out: Path) -> Path:
    """A copy of `version` under DIR to continue from: the committed engineer is replaced
    when the continued one is committed, and a parent must stay what it was."""
    weights = weights_sha(version)[:12]
    copy = out / "sft-parents" / f"steps-{sft_steps(version):04d}-{weights}"
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy_whole(version, copy)
    return copy


def sft_command(out: Path, adapter: Path | None, steps: int) -> list[str]:
    extra = [] if adapter is None else ["--adapter", str(adapter)]
    return [HR, "train", "sft", str(out / "engineer-coldstart.jsonl"), "--out",
            str(out / "engineer"), "--max-steps", str(steps), *extra, *SFT_ARGS]  # fmt: skip


def stage_sft(envs: list[str], out: Path, log: Path) -> Path:
    """Stage 4a: LoRA SFT of the engineer (SmolLM2-135M) on the merged cold start, SFT_EPOCHS
    epochs, a checkpoint every 25 steps kept (the curve's points). Resumable by `train sft`'s
    run key: the same command continues from the last checkpoint, and a run with fewer steps
    than SFT_EPOCHS now ask for is extended (a new version). An engineer whose run is not on
    this host (the committed one) is continued from its adapter: a new run (its learning-rate
    schedule starts again) for the steps still missing. A first run starts from WARM_START."""
    from harness_r1.trainer import read_metadata

    planned = sft_steps_planned(out / "engineer-coldstart.jsonl")
    version = sft_version(out)
    if version is None:
        warm = snapshot(WARM_START, out) if WARM_START.exists() else None
        run(sft_command(out, warm, planned - warm_steps()), log)
    elif sft_steps(version) < planned:
        meta = read_metadata(version)
        parent = Path(meta["parent_path"]) if meta.get("parent_path") else None
        if version != COMMITTED_SFT and Path(meta["run_dir"]).is_dir():  # extend its run
            run(sft_command(out, parent, planned - parent_steps(version)), log)
        else:
            run(sft_command(out, snapshot(version, out), planned - sft_steps(version)), log)
    version = sft_version(out)
    assert version is not None, "train sft published no version for this cold start"
    return version


def checkpoints(version: Path) -> list[tuple[int, Path]]:
    """(step, adapter dir) of every checkpoint of the run that published `version`."""
    from harness_r1.trainer import read_metadata

    run_dir = Path(read_metadata(version)["run_dir"])
    found = [(int(p.name.rsplit("-", 1)[1]), p) for p in run_dir.glob("checkpoint-*")]
    return sorted(found)


def validity(
    env: str,
    adapter: Path | None,
    name: str,
    out: Path,
    log: Path,
    temperature: float | None = None,
    packets: int = CURVE_PACKETS,
) -> dict[str, Any]:
    """One engineer's validity on the env's held-out packets (no canary: parse, static checks,
    composition onto the incumbent), `packets` packets x K, the curve's fixed sampling (or
    another temperature: the sampling sweep)."""
    sampling = list(CURVE_SAMPLING)
    folder = "sft-curve"
    if temperature is not None:
        sampling[sampling.index("--temperature") + 1] = str(temperature)
        folder = "sampling"
        name = f"{name}-t{temperature}-p{packets}"
    path = out / folder / f"{env}-{name}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        extra = [] if adapter is None else ["--adapter", str(adapter)]
        run([HR, "engineer", "evaluate", str(heldout_runs(env, out, log)), "--env", env,
             "--split", SPLITS[env][1], *extra, "--validity-only", "--lean-prompt",
             *incumbent_on(env, out), "-k", str(K), "--batch-size", str(BATCH),
             "--limit-packets", str(packets), *sampling,
             "--out", str(path)], log)  # fmt: skip
    summary: dict[str, Any] = json.loads(path.read_text())["summary"]
    return summary


def stage_sft_curve(envs: list[str], out: Path, log: Path) -> list[dict[str, Any]]:
    """Stage 4b: the held-out valid fraction of the engineer the SFT run started from (the base
    model, or WARM_START) and of every SFT checkpoint, per env and pooled, with Wilson 95%
    intervals. Each point's result is kept under the adapter's weights (a later run from
    other weights at the same step count measures again)."""
    from harness_r1.trainer import read_metadata

    version = stage_sft(envs, out, log)
    parent = read_metadata(version).get("parent_path")
    start: tuple[int, Path | None] = (parent_steps(version), Path(parent) if parent else None)
    points: list[tuple[int, Path | None]] = [
        start,
        *((start[0] + step, path) for step, path in checkpoints(version)),
    ]
    curve = []
    for step, adapter in points:
        name = f"step{step:04d}" + ("" if adapter is None else f"-{weights_sha(adapter)[:8]}")
        per_env = {env: validity(env, adapter, name, out, log) for env in envs}
        curve.append({"step": step, **pooled_validity(per_env)})
    return curve


def pooled_validity(per_env: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Valid proposals pooled over the envs' `validity()` summaries, with the Wilson 95%
    interval, and each env's counts."""
    keys = ("valid", "proposals", "rejected", "generated_tokens", "generate_seconds")
    valid = sum(s["valid"] for s in per_env.values())
    proposals = sum(s["proposals"] for s in per_env.values())
    low, high = wilson_interval(valid, proposals)
    return {
        "valid": valid,
        "proposals": proposals,
        "valid_fraction": valid / proposals if proposals else None,
        "ci": [low, high],
        "per_env": {env: {k: s[k] for k in keys} for env, s in per_env.items()},
    }


def training_log(version: Path) -> list[dict[str, Any]]:
    """The Trainer's per-step log (loss, learning rate, ...) of the run behind `version`."""
    steps = checkpoints(version)
    if not steps:
        return []
    state = json.loads((steps[-1][1] / "trainer_state.json").read_text())
    return [row for row in state["log_history"] if "loss" in row]


def plot_sft(curve: list[dict[str, Any]], version: Path, path: Path) -> None:
    """Two panels: the held-out valid fraction over SFT steps (pooled with its 95% interval,
    and per env), and the training loss per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [point["step"] for point in curve]
    pooled = [point["valid_fraction"] for point in curve]
    # clamped: at 0 valid the Wilson bound is 0 up to rounding (-1e-17 fails errorbar)
    low = [max(0.0, f - point["ci"][0]) for f, point in zip(pooled, curve, strict=True)]
    high = [max(0.0, point["ci"][1] - f) for f, point in zip(pooled, curve, strict=True)]
    left.errorbar(steps, pooled, yerr=[low, high], marker="o", capsize=3, label="all envs")
    for env in curve[0]["per_env"]:
        fractions = [p["per_env"][env]["valid"] / p["per_env"][env]["proposals"] for p in curve]
        left.plot(steps, fractions, marker=".", linestyle="--", alpha=0.7, label=env)
    left.axhline(0.8, color="grey", linewidth=0.8, linestyle=":", label="goal 0.8")
    left.set(xlabel="SFT step", ylabel="held-out valid fraction", ylim=(0, 1.05))
    left.set_title("Held-out proposals that would run (95% interval)")
    left.legend(fontsize=8)
    log = training_log(version)
    offset = parent_steps(version)  # a run continued from an adapter counts from its steps
    right.plot([offset + row["step"] for row in log], [row["loss"] for row in log], linewidth=0.8)
    right.set(xlabel="SFT step", ylabel="training loss (completion tokens)")
    right.set_title("SFT loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_sft(envs: list[str], out: Path, log: Path) -> None:
    if TARGET_POLICY:  # "a new engineer version from the same cold start" (issue 20)
        print(f"SFT engineer against another target: the committed one, {sft_version(out)}")
        return
    version = sft_version(out)
    planned = sft_steps_planned(out / "engineer-coldstart.jsonl")
    if version == COMMITTED_SFT and sft_steps(version) >= planned:  # trained by an earlier run
        print(f"SFT engineer: {version} (committed; its curve: {COMMITTED}/results-sft-curve.json)")
        return
    curve = stage_sft_curve(envs, out, log)
    (out / "results-sft-curve.json").write_text(json.dumps(curve, indent=2) + "\n")
    version = sft_version(out)
    assert version is not None
    commit_sft(version, out / "engineer-coldstart.jsonl")
    commit_curve(curve)
    for folder in published(out):
        plot_sft(curve, version, folder / "sft-curve.png")
    for point in curve:
        low, high = point["ci"]
        print(f"step {point['step']}: {point['valid']}/{point['proposals']} valid "
              f"[{low:.0%}, {high:.0%}]")  # fmt: skip


def commit_curve(curve: list[dict[str, Any]]) -> None:
    """The curve's points into the repository (counts only), after the points of earlier
    runs up to where this curve starts (its run continued from there: later points of
    theirs belong to another run)."""
    if TARGET_POLICY:
        return  # another target's curve stays in DIR (`published`)
    path = COMMITTED / "results-sft-curve.json"
    earlier = json.loads(path.read_text()) if path.exists() else []
    points = {p["step"]: p for p in earlier if p["step"] < curve[0]["step"]}
    points.update({p["step"]: p for p in curve})
    path.write_text(json.dumps([points[k] for k in sorted(points)], indent=2) + "\n")
