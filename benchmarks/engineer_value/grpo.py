"""Stage grpo (6): online GRPO from the SFT engineer on the cold start's packets, the reward
being the canary delta over the incumbent.

GRPO's steps take longer on 2 cores than one run may have, so `--grpo-minutes` pauses the
run and commits its checkpoint (CARRIED_GRPO), which the next run continues on this host
or another; the finished engineer is committed with the SFT weights and options it was trained
from (COMMITTED_GRPO), and is taken again only for the same ones. Its packets are asserted to
be training packets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness_r1.cli import PAUSED_FILE

from .common import assert_train_only, copy_whole, run, trajectories, weights_sha
from .settings import (
    CARRIED_GRPO,
    COMMITTED_GRPO,
    HR,
    TARGET_POLICY,
    grpo_args,
    option_value,
    published,
    writable,
)
from .sft import checkpoints, sft_version


def grpo_version(out: Path, sft: Path) -> Path | None:
    """The published GRPO engineer trained from the SFT version `sft` for the optimizer steps
    asked now (`grpo_args`), if any."""
    from harness_r1.trainer import list_versions, read_metadata

    steps = int(option_value(grpo_args(), "--max-steps"))
    for version in list_versions(out / "engineer"):
        meta = read_metadata(version)
        if (
            meta.get("kind") == "grpo"
            and meta.get("parent_path") == str(sft)
            and meta.get("settings", {}).get("max_steps") == steps
        ):
            return version
    return None


def stage_grpo(envs: list[str], out: Path, log: Path, minutes: float | None) -> Path | None:
    """Stage 6: online GRPO from the SFT engineer on the cold start's packets of every env
    (training split, against the incumbents), K samples per packet, reward = canary delta over
    the incumbent (graded when invalid), `grpo_args`' optimizer steps. Resumable on this host
    (`train grpo online`'s run key) and across hosts: with `minutes` the run pauses before
    overrunning them and its checkpoint is committed (CARRIED_GRPO, ~22 MB: adapter, optimizer,
    scheduler, RNG), the next run continues from it (same SFT engineer and
    GRPO_ARGS). The finished engineer is committed (COMMITTED_GRPO). None: paused."""
    from harness_r1.trainer import carry_checkpoint

    sft = sft_version(out)
    assert sft is not None, "stage 4 (SFT) first"
    version = grpo_engineer(out)
    if version is not None:
        if version != COMMITTED_GRPO:  # published here by an earlier run of this stage
            commit_grpo(version, sft, envs)
        return version
    carried = carried_grpo(sft, envs)
    packets = grpo_packets(envs, out)
    if carried is not None:
        note_packet_drift(carried, packets)
    command = [HR, "train", "grpo", "online", str(packets), "--out", str(out / "engineer"),
               "--adapter", str(sft), *grpo_args()]  # fmt: skip
    if minutes is not None:
        command += ["--stop-after-minutes", str(minutes)]
    if carried is not None:
        command += ["--resume-from", str(carried)]
    if not run(command, log, paused_ok=True):
        paused = json.loads((out / "engineer" / PAUSED_FILE).read_text())
        checkpoint = Path(paused["checkpoint"])
        record_grpo_curve(checkpoint / "trainer_state.json", out)
        lineage = {"sft_weights": weights_sha(sft), "grpo_args": grpo_args(), "envs": envs,
                   "step": paused["step"], "packet_ids": packet_ids(packets)}  # fmt: skip

        def note_lineage(staging: Path) -> None:
            (staging / "lineage.json").write_text(json.dumps(lineage, indent=2) + "\n")

        if TARGET_POLICY:  # not carried: the same command continues it from DIR on this host
            print(f"GRPO paused at step {paused['step']}: {checkpoint}")
            return None
        carry_checkpoint(checkpoint, CARRIED_GRPO, note_lineage)
        print(f"GRPO paused at step {paused['step']}: {CARRIED_GRPO} (commit it; the next run "
              "continues)")  # fmt: skip
        return None
    version = grpo_version(out, sft)
    assert version is not None, "train grpo online published no version"
    record_grpo_curve(checkpoints(version)[-1][1] / "trainer_state.json", out)
    commit_grpo(version, sft, envs)
    return version


#: what the GRPO curve keeps of each logged step (TRL's names; `canary/valid_fraction` is
#: CanaryReward's, logged on the steps that sampled a group, as are `canary/reward_<env>`, the
#: group's mean reward under the env it drew)
GRPO_CURVE_KEYS = ("loss", "reward", "reward_std", "canary/valid_fraction", "grad_norm")
GRPO_CURVE_PREFIXES = ("canary/reward_",)


def grpo_packets(envs: list[str], out: Path) -> Path:
    """GRPO's packets, in DIR: the cold start's packets of `envs` (stage 3 first: it
    regenerates the training runs they come from on this host; packets hold task text, which
    stays in ../shared, never in the repository). Train-only, asserted: no held-out task reaches a
    GRPO group."""
    folders = [out / f"{env}-engineer-coldstart" for env in envs]
    missing = [str(f) for f in folders if not (f / "packets.jsonl").exists()]
    assert not missing, f"no packets for GRPO: run --stages coldstart first ({missing})"
    rows = [row for folder in folders for row in trajectories(folder / "packets.jsonl")]
    for env in envs:
        assert_train_only(env, [row for row in rows if row["env"] == env])
    assert {row["env"] for row in rows} <= set(envs), "GRPO packets of another env"
    packets = out / "engineer-packets.jsonl"
    packets.write_text("".join((f / "packets.jsonl").read_text() for f in folders))
    return packets


def packet_ids(packets: Path) -> list[str]:
    return [row["packet_id"] for row in trajectories(packets)]


def note_packet_drift(carried: Path, packets: Path) -> None:
    """Say so when a carried GRPO run continues on other packets than it paused on: the
    packets are rebuilt by each run from regenerated training runs (task text is not kept),
    and a target that decodes differently on another CPU (bf16 or fp32) can fail other tasks.
    The run continues (its lineage is the engineer's, not the packets'); the curve's reader
    should know."""
    before = json.loads((carried / "lineage.json").read_text()).get("packet_ids")
    now = packet_ids(packets)
    if before is not None and before != now:
        kept = len(set(before) & set(now))
        print(f"GRPO continues on other packets than it paused on: {kept} of {len(now)} the "
              f"same (paused on {len(before)})")  # fmt: skip


def record_grpo_curve(state_file: Path, out: Path) -> list[dict[str, Any]]:
    """The GRPO run's per-step log so far (its trainer state: a resumed run's includes the
    steps before the pause) into DIR and the repository (numbers only), and its plot."""
    history = json.loads(state_file.read_text())["log_history"]

    def kept(key: str) -> bool:
        return key in GRPO_CURVE_KEYS or key.startswith(GRPO_CURVE_PREFIXES)

    curve = [
        {"step": row["step"], **{k: v for k, v in row.items() if kept(k)}}
        for row in history
        if "step" in row and any(kept(k) for k in row)
    ]
    for folder in map(writable, published(out)):
        (folder / "results-grpo-curve.json").write_text(json.dumps(curve, indent=2) + "\n")
        plot_grpo(curve, folder / "grpo-curve.png")
    return curve


def plot_grpo(curve: list[dict[str, Any]], path: Path) -> None:
    """Three panels over GRPO steps: mean reward (with its group spread), the valid fraction
    of the sampled groups, the loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = [("reward", "mean reward (canary delta; graded when invalid)"),
              ("canary/valid_fraction", "valid fraction of the sampled group"),
              ("loss", "GRPO loss (dapo)")]  # fmt: skip
    for axis, (key, title) in zip(axes, panels, strict=True):
        points = [(row["step"], row[key]) for row in curve if key in row]
        if points:
            axis.plot(*zip(*points, strict=True), marker=".", linewidth=0.8)
        axis.set(xlabel="GRPO step", title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def carried_grpo(sft: Path, envs: list[str]) -> Path | None:
    """The committed paused checkpoint when it continues a run from `sft` with `grpo_args` on
    the packets of the same envs."""
    lineage = CARRIED_GRPO / "lineage.json"
    if TARGET_POLICY or not lineage.exists():  # the carried checkpoint ran against SmolLM2
        return None
    meta = json.loads(lineage.read_text())
    same = (weights_sha(sft), grpo_args(), sorted(envs))
    if (meta["sft_weights"], meta["grpo_args"], sorted(meta.get("envs") or [])) != same:
        print(f"{CARRIED_GRPO}: from another SFT engineer, GRPO_ARGS or envs: GRPO starts afresh")
        return None
    return CARRIED_GRPO


def grpo_engineer(out: Path) -> Path | None:
    """The GRPO engineer from the current SFT engineer: published here, else committed."""
    sft = sft_version(out)
    if sft is None:
        return None
    version = grpo_version(out, sft)
    if version is not None:
        return version
    lineage = COMMITTED_GRPO / "lineage.json"
    if not lineage.exists():
        return None
    meta = json.loads(lineage.read_text())
    if meta["sft_weights"] == weights_sha(sft) and meta["grpo_args"] == grpo_args():
        return COMMITTED_GRPO
    return None


def lineage_envs(version: Path, committed: Path) -> list[str] | None:
    """The envs a trained engineer `version` learned from (a GRPO engineer's packets, an RFT
    engineer's rows), from the lineage of the `committed` engineer when `version` has its
    weights (None: not known here)."""
    lineage = committed / "lineage.json"
    if not lineage.exists() or weights_sha(version) != weights_sha(committed):
        return None
    envs: list[str] = json.loads(lineage.read_text())["envs"]
    return envs


def commit_grpo(version: Path, sft: Path, envs: list[str]) -> None:
    """Keep the finished GRPO engineer in the repository with the SFT weights it started
    from; the carried checkpoint has served."""
    import shutil

    if TARGET_POLICY:
        return  # another target's engineer stays in DIR (`published`)

    def note_lineage(copy: Path) -> None:
        lineage = {"sft_weights": weights_sha(sft), "grpo_args": grpo_args(), "envs": envs}
        (copy / "lineage.json").write_text(json.dumps(lineage, indent=2) + "\n")

    if version != COMMITTED_GRPO:
        shutil.rmtree(COMMITTED_GRPO, ignore_errors=True)
        copy_whole(version, COMMITTED_GRPO, note_lineage)
    shutil.rmtree(CARRIED_GRPO, ignore_errors=True)
