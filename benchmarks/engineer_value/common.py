"""What every stage does the same way: run a `harness-r1` command and log it with its wall
time, run the frozen target (a complete run file is reused, a short one runs again), read run
files and their success rates, find the env's incumbent, check that no held-out task reaches
training, copy an engineer into the repository whole, and keep results both in DIR and in the
repository.

In one module so that a stage module reads as its stage. Every command the experiment starts
goes through `run`, which logs it: the commands and their wall times are the record of a run.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness_r1.cli import PAUSED_EXIT
from harness_r1.harness import wilson_interval

from .settings import (
    COMMITTED,
    HELDOUT_SEED,
    HELDOUT_TASKS,
    HR,
    SPLITS,
    TARGET,
    TARGET_POLICY,
    published,
    results_home,
    writable,
)

#: the commands that run the frozen target: without `--target-policy` they run the embedded
#: base model these results were measured on (the CLI's default target is the deployed agent)
TARGET_COMMANDS = (("eval",), ("canary",), ("train", "coldstart"), ("engineer", "evaluate"),
                   ("train", "grpo"))  # fmt: skip


def on_base_target(command: list[str]) -> list[str]:
    """`command` with `--policy smollm2` when it runs the target and names none."""
    runs_target = any(tuple(command[1 : 1 + len(c)]) == c for c in TARGET_COMMANDS)
    if command[:1] == [HR] and runs_target and "--policy" not in command:
        return [*command, "--policy", "smollm2"]
    return command


def run(command: list[str], log: Path, paused_ok: bool = False) -> bool:
    """Run and log `command`; False when it paused at its time budget (`paused_ok`)."""
    command = on_base_target(command)
    line = " ".join(shlex.quote(part) for part in command)
    print(f"$ {line}", flush=True)
    started = time.perf_counter()
    code = subprocess.run(command, check=False).returncode
    paused = paused_ok and code == PAUSED_EXIT
    if code and not paused:
        raise subprocess.CalledProcessError(code, command)
    with log.open("a", encoding="utf-8") as handle:
        note = " (paused)" if paused else ""
        handle.write(f"{line}  # {time.perf_counter() - started:.0f} s{note}\n")
    return not paused


def target_runs(
    env: str, split: str, limit: int, seed: int, extra: list[str], path: Path, log: Path
) -> Path:
    """The frozen target's runs (`harness-r1 eval`, TARGET settings, `extra` e.g. `--on`) into
    `path`, unless they are there already, all of them: `eval` writes each episode as it ends,
    so a stopped run leaves a short file (even an empty one), which runs again."""
    if not path.exists() or len(trajectories(path)) < episodes_of(env, split, limit):
        run([HR, "eval", "--env", env, "--split", split, "--limit", str(limit), "--seed",
             str(seed), *TARGET, *TARGET_POLICY, *extra, "--out", str(path)], log)  # fmt: skip
    return path


def episodes_of(env: str, split: str, limit: int) -> int:
    """How many episodes `eval --limit` runs on the split: `limit`, or all of a smaller split."""
    from harness_r1.envs import default_data_root, get_suite

    root = default_data_root()
    assert root is not None, "no data root (../shared/benchmarks)"
    return min(limit, len(get_suite(env).load_tasks(root, split)))


def heldout_target_runs(env: str, extra: list[str], path: Path, log: Path) -> Path:
    """The target on the env's held-out tasks (HELDOUT_TASKS of them, HELDOUT_SEED)."""
    return target_runs(env, SPLITS[env][1], HELDOUT_TASKS[env], HELDOUT_SEED, extra, path, log)


def trajectories(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def rate(path: Path) -> dict[str, Any]:
    rows = trajectories(path)
    wins = sum(1 for row in rows if row["outcome"]["success"])
    low, high = wilson_interval(wins, len(rows))
    return {"n": len(rows), "successes": wins, "rate": wins / len(rows), "ci": [low, high]}


def incumbent_digest(env: str, out: Path) -> str:
    """The env's incumbent now, by content: its patch's SHA-256 (`Patch.sha256`, the think
    text left out), or "base"."""
    from harness_r1.sandbox import load_patch_file

    on = incumbent_on(env, out)
    return load_patch_file(Path(on[1]), env).sha256() if on else "base"


def incumbent_on(env: str, out: Path) -> list[str]:
    """`--on` for the env's incumbent: stage 1's file in DIR, else the committed one (the
    incumbent is a patch, no task data, so it is kept in the repository; stage 1 need not be
    rerun to train against it). No incumbent (ALFWorld): the base harness, []."""
    path = out / f"{env}-incumbent.txt"
    committed = COMMITTED / path.name
    if not path.exists() and committed.exists():
        path.write_text(committed.read_text(encoding="utf-8"), encoding="utf-8")
    return ["--on", str(path)] if path.exists() else []


def heldout_task_ids(env: str) -> set[str]:
    """Every task id of the env's held-out split (not only the ones run): none may be trained on."""
    from harness_r1.envs import default_data_root, get_suite

    root = default_data_root()
    assert root is not None, "no data root (../shared/benchmarks)"
    return {task.task_id for task in get_suite(env).load_tasks(root, SPLITS[env][1])}


def assert_train_only(env: str, packets: list[dict[str, Any]]) -> None:
    """No packet row of `env` canaries a held-out task or one outside the training split."""
    train, heldout = SPLITS[env]
    canaried = {task_id for row in packets for task_id in row["task_ids"]}
    leaked = canaried & heldout_task_ids(env)
    assert not leaked, f"{env}: held-out tasks in the engineers' cold start: {sorted(leaked)[:5]}"
    splits = {split for row in packets for split in row["splits"]}
    assert splits <= {train}, f"{env}: cold-start packets from {splits}"


def heldout_runs(env: str, out: Path, log: Path) -> Path:
    """The held-out runs under the deployed harness (stage 1's file; the same command): the
    failures the engineers are scored on."""
    on = incumbent_on(env, out)
    path = out / f"{env}-heldout-{'incumbent' if on else 'base'}.jsonl"
    return heldout_target_runs(env, on, path, log)


#: files a kept engineer leaves out: the base model's tokenizer (its package ships it) and
#: optimizer states (a resumed run starts from its own checkpoint, never from a kept copy)
NOT_KEPT = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "optimizer.pt",
)


def copy_whole(source: Path, dest: Path, prepare: Callable[[Path], None] | None = None) -> None:
    """Copy `source` to `dest` through a staging folder, `prepare(staging)` before the rename:
    `dest` is never a half copy."""
    import shutil

    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging, ignore=shutil.ignore_patterns(*NOT_KEPT))
    if prepare is not None:
        prepare(staging)
    staging.rename(dest)


def weights_sha(version: Path) -> str:
    from harness_r1.trainer import file_sha256

    return file_sha256(version / "adapter_model.safetensors")


def keep_results(name: str, results: Any, out: Path) -> None:
    """A stage's results (counts and rates, no task data) into DIR and into the repository
    (`results_home`), so what BENCHMARKS.md reports is the file the run wrote."""
    for folder in map(writable, published(out)):
        (folder / name).write_text(json.dumps(results, indent=2) + "\n")


def committed_results(name: str) -> dict[str, Any]:
    """A stage's committed results (empty before its first run): a run over some envs or
    engineers merges into them rather than dropping the others' rows; those of the target the
    run is against (`results_home`)."""
    path = results_home() / name
    return json.loads(path.read_text()) if path.exists() else {}


def condition_slug(condition: str) -> str:
    """A harness condition as a file-name part: "incumbent+grpo's best" ->
    "incumbent-grpo-s-best"."""
    return re.sub(r"[^a-z0-9]+", "-", condition.lower()).strip("-")
