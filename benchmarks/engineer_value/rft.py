"""Stage rft: rejection-sampling fine-tuning, the SFT+GRPO engineer continued by SFT on the
cold start's rows that beat the incumbent in their canary.

GRPO's small groups almost never sample a rare winning call (the reach stage shows which), so
its reward never points there; the cold start holds such calls where they won. The engineer is
committed with what it continued and what it was taught (COMMITTED_RFT), so a later run takes
it instead of training again.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .coldstart import coldstart_rows, stage_coldstart
from .common import copy_whole, run, trajectories, weights_sha
from .grpo import grpo_engineer
from .settings import COMMITTED_RFT, HR, SFT_ARGS, TARGET_POLICY, option_value
from .sft import committed_coldstart, epoch_steps, rows_digest, taught_digest

#: rejection-sampling fine-tuning (RFT; DeepSeek-R1's step after its first RL stage): the
#: SFT+GRPO engineer continued by SFT on the cold start's rows whose canary beat the incumbent,
#: that is realised outcomes of the template teacher's samples on training packets. Why: GRPO's
#: groups of K=4 almost never sample ALFWorld's winning call (the reach stage: once in 80 at
#: temperature 1.0), so its reward never pointed there, while the cold start holds that call
#: improving 3 times. RFT_EPOCHS passes over `rft_selection`, the SFT engineer's settings
#: (SFT_ARGS) otherwise
RFT_EPOCHS = 3


def improving(row: dict[str, Any]) -> bool:
    """Whether a cold-start row's canary beat the incumbent (success rate, its packet's tasks)."""
    delta: float = row["metadata"]["delta_success"]
    return delta > 0


def rft_selection(rows_by_env: dict[str, list[dict[str, Any]]]) -> list[tuple[str, Any]]:
    """(env, row) for every improving row, env order then file order, each env's rows repeated
    round(most / its count) times, where `most` is the largest env's count: WebShop's 13
    improving rows would otherwise drown ALFWorld's 3. An env without one adds nothing."""
    kept = {env: [row for row in rows if improving(row)] for env, rows in rows_by_env.items()}
    most = max((len(rows) for rows in kept.values()), default=0)
    return [
        (env, row)
        for env, rows in kept.items()
        if rows
        for _ in range(round(most / len(rows)))
        for row in rows
    ]


def rft_dataset(envs: list[str], out: Path) -> Path:
    """The RFT rows (`rft_selection` of the envs' cold starts in sorted env order, prompts and
    completions as the SFT dataset has them) in DIR/engineer-rft.jsonl."""
    selected = rft_selection({env: coldstart_rows(env, out) for env in sorted(envs)})
    path = out / "engineer-rft.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for _, row in selected), encoding="utf-8")
    return path


@functools.cache
def committed_rft_digest(envs: tuple[str, ...]) -> str:
    """`rows_digest` of the RFT dataset a restore of the committed rows of `envs` would give,
    computed without the restore (as `committed_rows_digest`)."""
    return taught_digest(rft_selection({env: committed_coldstart(env) for env in sorted(envs)}))


def rft_steps(rows: int) -> int:
    """RFT's optimizer steps over `rows` rows: RFT_EPOCHS epochs (`epoch_steps`)."""
    return epoch_steps(rows, RFT_EPOCHS)


def rft_parent(out: Path) -> Path | None:
    """The engineer RFT continues: the SFT+GRPO engineer (None before it is trained)."""
    return grpo_engineer(out)


def rft_engineer(out: Path, envs: list[str] | None = None) -> Path | None:
    """The RFT engineer of the current parent (`rft_parent`): published here from this run's
    RFT dataset with rft_steps and SFT_ARGS' learning rate, else the committed one if it
    continued the same weights for RFT_EPOCHS on the rows the committed cold start of `envs`
    gives (its own envs when None: the table takes it whatever it was taught; the rft stage
    only for the rows it would teach, so an env without an improving row changes nothing);
    None otherwise."""
    from harness_r1.trainer import file_sha256, list_versions, read_metadata

    parent = rft_parent(out)
    if parent is None:
        return None
    parent_sha = weights_sha(parent)
    dataset = out / "engineer-rft.jsonl"
    if dataset.exists():
        sha, steps = file_sha256(dataset), rft_steps(len(trajectories(dataset)))
        rate = float(option_value(SFT_ARGS, "--learning-rate"))
        for version in reversed(list_versions(out / "rft")):  # the latest first
            meta = read_metadata(version)
            continued = Path(meta.get("parent_path") or "")
            if (
                meta.get("dataset", {}).get("sha256") == sha
                and meta.get("steps") == steps
                and meta.get("settings", {}).get("learning_rate") == rate
                and (continued / "adapter_model.safetensors").exists()
                and weights_sha(continued) == parent_sha
            ):
                return version
    lineage = COMMITTED_RFT / "lineage.json"
    if not lineage.exists():
        return None
    meta = json.loads(lineage.read_text())
    same = (
        meta["parent_weights"] == parent_sha
        and meta["epochs"] == RFT_EPOCHS
        and meta["rows_digest"]
        == committed_rft_digest(tuple(meta["envs"] if envs is None else envs))
    )
    return COMMITTED_RFT if same else None


def stage_rft(envs: list[str], out: Path, log: Path) -> Path | None:
    """RFT: the envs' cold starts (restored from the committed rows, or run), their improving
    rows (`rft_selection`), and `train sft` from a copy of the SFT+GRPO engineer for rft_steps
    over them (resumable by its run key); the result is committed with its lineage (not under
    `--target-policy`). None, said why, before GRPO has finished, without an improving row, or
    against another target (its cold start is packets only: no rows to filter)."""
    if TARGET_POLICY:
        print("RFT: against another target the cold start has no rows (`packets_only`)")
        return None
    parent = rft_parent(out)
    if parent is None:
        print("RFT: no SFT+GRPO engineer yet (stage grpo) to continue")
        return None
    for env in envs:
        stage_coldstart(env, out, log)
    dataset = rft_dataset(envs, out)
    rows = len(trajectories(dataset))
    if not rows:
        print(f"RFT: no cold-start row of {envs} beat the incumbent: nothing to teach")
        return None
    version = rft_engineer(out, envs)
    if version is None:
        copy = out / "rft-parents" / weights_sha(parent)[:12]
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy_whole(parent, copy)
        run([HR, "train", "sft", str(dataset), "--out", str(out / "rft"), "--adapter", str(copy),
             "--max-steps", str(rft_steps(rows)), *SFT_ARGS], log)  # fmt: skip
        version = rft_engineer(out, envs)
    assert version is not None, "train sft published no version for the RFT rows"
    commit_rft(version, parent, dataset, envs)
    return version


def commit_rft(version: Path, parent: Path, dataset: Path, envs: list[str]) -> None:
    """Keep the RFT engineer in the repository with what it continued and what it was taught
    (`rft_engineer` takes it only for the same)."""
    import shutil

    if version == COMMITTED_RFT or TARGET_POLICY:
        return

    def note_lineage(copy: Path) -> None:
        lineage = {"parent_weights": weights_sha(parent), "rows_digest": rows_digest(dataset),
                   "epochs": RFT_EPOCHS, "envs": sorted(envs)}  # fmt: skip
        (copy / "lineage.json").write_text(json.dumps(lineage, indent=2) + "\n")

    shutil.rmtree(COMMITTED_RFT, ignore_errors=True)
    copy_whole(version, COMMITTED_RFT, note_lineage)
