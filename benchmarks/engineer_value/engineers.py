"""Stage engineers (5): the comparison table, each engineer on the held-out packets against the
incumbent.

Untrained, template teacher, SFT, SFT+GRPO and SFT+GRPO+RFT: valid fraction, mean canary
delta, the proposals the gate promotes (guard: the other held-out tasks), and the held-out
success after the best promoted patch. A run over some envs or engineers merges into the
committed table rather than dropping its other rows. How an engineer is run (`engineer_args`)
and where its row's files are (`engineer_files`) are reused by the ablation, transfer,
coevolution and reach stages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness_r1.harness import wilson_interval

from .common import (
    committed_results,
    heldout_runs,
    heldout_target_runs,
    incumbent_digest,
    incumbent_on,
    keep_results,
    rate,
    run,
    weights_sha,
)
from .grpo import grpo_engineer, lineage_envs
from .rft import rft_engineer
from .settings import (
    BATCH,
    COMMITTED_GRPO,
    COMMITTED_RFT,
    ENGINEERS,
    GATE,
    HR,
    SPLITS,
    TABLE_SAMPLING,
    TARGET,
    TARGET_POLICY,
    K,
    option_value,
    published,
    writable,
)
from .sft import sft_version


def engineer_args(name: str, out: Path) -> list[str] | None:
    """How `engineer evaluate` runs each engineer of the table (None: not trained yet);
    `NAME-without-HOOK`: that engineer, barred from writing HOOK (the ablation)."""
    if "-without-" in name:
        base, hook = name.split("-without-")
        args = engineer_args(base, out)
        return None if args is None else [*args, "--without-hook", hook]
    if name == "untrained":
        return []
    if name == "teacher":
        return ["--teacher", "1"]  # as it wrote the cold start: one template per patch
    versions = {"sft": sft_version, "grpo": grpo_engineer, "rft": rft_engineer}
    version = versions[name](out)
    return None if version is None else ["--adapter", str(version)]


def engineer_files(env: str, name: str, out: Path, args: list[str]) -> dict[str, Path]:
    """Where an engineer's table row keeps its files: keyed by the incumbent (a report from
    before an incumbent change is not reused), for a trained engineer by its weights (a
    retrained engineer runs again) and for a model engineer by its prompt (the untrained one
    has no weights of its own: the template menu changed what it reads); the sampling
    in the report's name."""
    temperature = option_value(TABLE_SAMPLING, "--temperature")
    stem = f"{env}-{name}-{engineer_tag(env, out, args)}"
    return {
        "report": out / "engineers" / f"{stem}-t{temperature}.json",
        "best": out / "engineers" / f"{stem}-best.json",
        "after": out / "engineers" / f"{stem}-heldout-after-best.jsonl",
    }


def engineer_tag(env: str, out: Path, args: list[str]) -> str:
    """What an engineer's result on `env` depends on, in a file name: the incumbent, the
    adapter's weights and the prompt it reads (see `engineer_files`)."""
    weights = adapter_weights(args)
    prompt = engineer_prompt_sha(env, args)
    return (
        incumbent_digest(env, out)[:12]
        + (f"-{weights}" if weights else "")
        + (f"-p{prompt[:8]}" if prompt else "")
    )


def engineer_prompt_sha(env: str, args: list[str]) -> str | None:
    """SHA-256 of the lean system prompt an engineer of `args` reads on `env` (the hooks it may
    write included); None for the template teacher, which reads no prompt."""
    import hashlib

    from harness_r1.trainer import PromptConfig, hooks_without, system_prompt

    if "--teacher" in args:
        return None
    removed = [args[i + 1] for i, arg in enumerate(args) if arg == "--without-hook"]
    text = system_prompt(env, config=PromptConfig(lean=True, hooks=hooks_without(removed)))
    return hashlib.sha256(text.encode()).hexdigest()


def adapter_weights(args: list[str]) -> str | None:
    """The first 12 hex digits of the weights of the adapter `args` run (None: no adapter)."""
    return weights_sha(Path(option_value(args, "--adapter")))[:12] if "--adapter" in args else None


def engineer_row(env: str, name: str, out: Path, log: Path) -> dict[str, Any] | None:
    """One engineer on the env's held-out packets against the incumbent: K proposals per packet,
    canaried, gated (guard: the other held-out tasks), and the held-out success of the deployed
    harness after its best promoted patch (the incumbent alone when it promoted nothing)."""
    args = engineer_args(name, out)
    if args is None:
        return None
    on = incumbent_on(env, out)
    files = engineer_files(env, name, out, args)
    path = files["report"]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        run([HR, "engineer", "evaluate", str(heldout_runs(env, out, log)), "--env", env,
             "--split", SPLITS[env][1], *args, "--lean-prompt", *on, "-k", str(K),
             "--batch-size", str(BATCH), *TABLE_SAMPLING, *GATE,
             "--max-steps", TARGET[1], "--history-turns", TARGET[3], *TARGET_POLICY,
             "--baseline-cache", str(out / "baselines"), "--out", str(path)], log)  # fmt: skip
    report = json.loads(path.read_text())
    summary = report["summary"]
    promoted = [
        sample for packet in report["packets"] for sample in packet["samples"] if "patch" in sample
    ]
    row: dict[str, Any] = {
        "engineer": name,
        "incumbent_sha256": incumbent_digest(env, out),
        "weights_sha256_12": adapter_weights(args),
        "prompt_sha256": engineer_prompt_sha(env, args),
        "proposals": summary["proposals"],
        "valid": summary["valid"],
        "valid_ci": list(wilson_interval(summary["valid"], summary["proposals"])),
        "evaluated": summary["evaluated"],
        "deltas": [d for packet in report["packets"] for d in packet["deltas"]],
        "mean_delta": summary["mean_delta"],
        "promoted": summary["promoted"],
        "promoted_ci": list(wilson_interval(summary["promoted"], summary["proposals"])),
        "rejected": summary["rejected"],
        "generate_seconds": summary["generate_seconds"],
        "canary_seconds": summary["canary_seconds"],
        "target_dtype": report.get("target_dtype") or target_dtype(),
    }
    row["mean_delta_ci"] = mean_interval(row["deltas"])
    # which envs' packets (GRPO) or improving rows (RFT) it learned from: another env's row is
    # transfer
    committed = {"grpo": COMMITTED_GRPO, "rft": COMMITTED_RFT}.get(name)
    if committed is not None:
        row[f"{name}_envs"] = lineage_envs(Path(option_value(args, "--adapter")), committed)
    after = heldout_runs(env, out, log)
    patch = None
    if promoted:
        patch = json.dumps(max(promoted, key=lambda sample: sample["delta"])["patch"])  # first
    if not files["best"].exists() or files["best"].read_text(encoding="utf-8") != patch:
        # another report's best patch: neither it nor its held-out run is this row's (and
        # `promoted_best` deploys it)
        files["best"].unlink(missing_ok=True)
        files["after"].unlink(missing_ok=True)
    if patch is not None:
        files["best"].write_text(patch, encoding="utf-8")
        after = files["after"]
        heldout_target_runs(env, [*on, "--on", str(files["best"])], after, log)
    row["heldout_after_best"] = rate(after)
    row["heldout_after_best"]["patched"] = bool(promoted)
    return row


def target_dtype() -> str:
    """The number format the embedded target computes in on this host ("auto": bf16 only where
    the CPU has it natively), for a report that does not say its own. A row's canary deltas
    pair two arms of one format; rows measured on hosts of different formats sit in one table,
    so each says its own (the oldest rows have no field: they ran on hosts with native
    bf16)."""
    from harness_r1.models import choose_dtype

    return choose_dtype("auto").dtype


def mean_interval(values: list[float], samples: int = 2000) -> list[float] | None:
    """A 95% percentile-bootstrap interval of the mean (seeded: the same values, the same
    interval); None without values."""
    import random

    if not values:
        return None
    rng = random.Random(0)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(samples))
    return [means[int(0.025 * samples)], means[int(0.975 * samples) - 1]]


def stage_engineers(
    envs: list[str], out: Path, log: Path, names: tuple[str, ...] = ENGINEERS
) -> dict[str, list[dict[str, Any]]]:
    """Stage 5: the comparison table's engineer rows, per env (those trained so far)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for env in envs:
        found = [engineer_row(env, name, out, log) for name in names]
        rows[env] = [row for row in found if row is not None]
    return rows


def plot_engineers(rows: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """The table as bars per env and engineer: valid fraction, mean canary delta and promoted
    fraction, each with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(rows)
    names = [n for n in ENGINEERS if any(r["engineer"] == n for env in envs for r in rows[env])]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    width = 0.8 / max(1, len(names))
    panels = [
        ("valid fraction", "valid", "valid_ci", True),
        ("mean canary delta of the valid proposals", "mean_delta", "mean_delta_ci", False),
        ("promoted by the gate", "promoted", "promoted_ci", True),
    ]
    for axis, (title, key, ci_key, fraction) in zip(axes, panels, strict=True):
        for offset, name in enumerate(names):
            xs, ys, lows, highs = [], [], [], []
            for x, env in enumerate(envs):
                row = next((r for r in rows[env] if r["engineer"] == name), None)
                if row is None or row[key] is None or row[ci_key] is None:
                    continue
                value = row[key] / row["proposals"] if fraction else row[key]
                xs.append(x + offset * width)
                ys.append(value)
                lows.append(max(0.0, value - row[ci_key][0]))
                highs.append(max(0.0, row[ci_key][1] - value))
            axis.bar(xs, ys, width, yerr=[lows, highs], capsize=2, label=name)
        axis.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(envs))], envs)
        axis.set_title(title, fontsize=10)
        axis.axhline(0, color="grey", linewidth=0.6)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def engineers_table(rows: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| env | engineer | valid | mean delta [95%] | promoted | held-out after best |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for env, env_rows in rows.items():
        for row in env_rows:
            low, high = row["valid_ci"]
            valid = f"{row['valid']}/{row['proposals']} [{low:.0%}, {high:.0%}]"
            delta = "n/a"
            if row["mean_delta"] is not None:
                low, high = row["mean_delta_ci"]
                delta = f"{row['mean_delta']:+.3f} [{low:+.3f}, {high:+.3f}]"
            promoted = f"{row['promoted']}/{row['proposals']}"
            after = row["heldout_after_best"]
            held = f"{after['successes']}/{after['n']} [{after['ci'][0]:.0%}, {after['ci'][1]:.0%}]"
            if not after["patched"]:
                held += " (nothing promoted: the incumbent)"
            fp32 = row.get("target_dtype") == "float32"
            name = row["engineer"] + (" (fp32 target)" if fp32 else "")
            lines.append(f"| {env} | {name} | {valid} | {delta} | {promoted} | {held} |")
    return "\n".join(lines)


def merged_engineer_rows(
    earlier: dict[str, list[dict[str, Any]]], rows: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """The committed table with this run's rows in: per env, an earlier row is kept only for an
    engineer not rerun, only if it ran against the same incumbent as this run's rows, and, for
    a model engineer (not the teacher), only if it read the current prompt (a row from before
    `prompt_sha256` was recorded has none: it goes)."""
    merged = {env: list(found) for env, found in earlier.items()}
    for env, found in rows.items():
        if not found:  # no engineer of this run is trained yet: the committed rows stand
            continue
        rerun = {row["engineer"] for row in found}
        incumbents = {row["incumbent_sha256"] for row in found}
        prompt = engineer_prompt_sha(env, [])  # what the table's model engineers read
        kept = [
            row
            for row in earlier.get(env, [])
            if row["engineer"] not in rerun
            and row.get("incumbent_sha256") in incumbents
            and (row["engineer"] == "teacher" or row.get("prompt_sha256") == prompt)
        ]
        order = {name: i for i, name in enumerate(ENGINEERS)}
        merged[env] = sorted([*kept, *found], key=lambda row: order.get(row["engineer"], 99))
    return merged


def run_engineers(envs: list[str], out: Path, log: Path, names: tuple[str, ...]) -> None:
    rows = merged_engineer_rows(
        committed_results("results-engineers.json"), stage_engineers(envs, out, log, names)
    )
    keep_results("results-engineers.json", rows, out)
    for folder in map(writable, published(out)):
        plot_engineers(rows, folder / "engineers.png")
    print(engineers_table(rows))


def final_engineer(out: Path) -> str | None:
    """The most trained engineer of the SFT -> GRPO line: the subject of the ablation, the
    transfer and the coevolution (the RFT engineer came after they were measured, and is not
    theirs)."""
    return next((n for n in ("grpo", "sft") if engineer_args(n, out) is not None), None)
