"""`harness-r1 train target --from-experts`: build the deployed agent from expert demonstrations.

Three stages, each leaving a file under `--out`: the demonstration rows (`expert-rows.jsonl`,
its SHA-256 and per-env counts in `expert-rows.json`), the LoRA run (`engineer/vNNNN/`, the
layout every trainer shares) and the shipped adapter with its manifest (`--ship-to`, by default
the package's own adapters directory, where `--policy smollm2-agent` loads it from).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness_r1.envs import get_suite
from harness_r1.harness import spread
from harness_r1.models import (
    DEPLOYED,
    ShippedAgent,
    checkpoint_version,
    converted_checkpoint,
    file_sha256,
)

if TYPE_CHECKING:
    from harness_r1.trainer import DeployedRun

#: the envs the deployed agent learns, with how many training tasks of each (None: all)
DEFAULT_TASKS: dict[str, int | None] = {"webshop": None, "dbbench": None, "alfworld": 24}


@dataclass(frozen=True)
class ExpertRequest:
    data_root: Path
    out: Path
    agent: str = "smollm2-agent"
    tasks: tuple[tuple[str, int | None], ...] = tuple(DEFAULT_TASKS.items())
    history_turns: int = 6
    max_steps: int | None = None  # None: deployed_settings' (what the shipped adapter used)
    ship_to: Path | None = None


def build_rows(request: ExpertRequest, say: Any = print) -> tuple[Path, dict[str, Any]]:
    """The demonstration rows of every env's training split; (rows file, summary)."""
    from harness_r1.trainer import demonstrate, episode_rows, write_rows

    rows: list[dict[str, Any]] = []
    per_env: dict[str, Any] = {}
    for env, limit in request.tasks:
        suite = get_suite(env)
        assert suite.expert is not None
        split = suite.expert.training_splits[0]
        tasks = spread(suite.load_tasks(request.data_root, split), limit)
        started = time.perf_counter()
        demos = demonstrate(suite, request.data_root, tasks, history_turns=request.history_turns)
        env_rows = episode_rows(demos)
        per_env[env] = {
            "tasks": len(tasks),
            "demonstrations": demos.successes,
            "rows": len(env_rows),
            "seconds": round(time.perf_counter() - started, 1),
        }
        say(f"{env} {split}: {demos.successes} of {len(tasks)} demonstrated, {len(env_rows)} rows")
        rows.extend(env_rows)
    path = request.out / "expert-rows.jsonl"
    write_rows(rows, path)
    summary = rows_summary(path, per_env)
    (request.out / "expert-rows.json").write_text(json.dumps(summary, indent=2) + "\n")
    return path, summary


def rows_summary(path: Path, demonstrations: dict[str, Any]) -> dict[str, Any]:
    """The rows file's SHA-256 and, per env, its split, rows and the task ids they come from
    (what the held-out test reads from the manifest), beside the demonstration counts."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    envs: dict[str, Any] = {}
    for row in rows:
        meta = row["metadata"]
        entry = envs.setdefault(meta["env"], {"splits": set(), "rows": 0, "task_ids": set()})
        entry["splits"].add(meta["split"])
        entry["rows"] += 1
        entry["task_ids"].add(meta["task_id"])
    return {
        "sha256": file_sha256(path),
        "rows": len(rows),
        "envs": {
            env: {
                **demonstrations.get(env, {}),
                "splits": sorted(entry["splits"]),
                "rows": entry["rows"],
                "task_ids": sorted(entry["task_ids"]),
            }
            for env, entry in sorted(envs.items())
        },
    }


def build_deployed(request: ExpertRequest, cache_dir: Path | None, say: Any = print) -> str:
    """Rows, training, the shipped adapter; returns the adapter's SHA-256."""
    from harness_r1.trainer import deployed_settings, train_deployed

    agent = DEPLOYED[request.agent]
    if request.ship_to is not None:
        agent = ShippedAgent(agent.name, agent.base, agent.model_id, request.ship_to)
    rows_path, summary = build_rows(request, say)
    steps = {} if request.max_steps is None else {"max_steps": request.max_steps}
    settings = deployed_settings(request.out, **steps)
    run = train_deployed(rows_path, settings, base=agent.base, cache_dir=cache_dir)
    digest = ship(agent, run, summary, cache_dir, "harness-r1 " + shlex.join(sys.argv[1:]))
    say(f"shipped {agent.adapter_file} (sha256 {digest})")
    return digest


def ship(
    agent: ShippedAgent,
    run: DeployedRun,
    rows: dict[str, Any],
    cache_dir: Path | None,
    rebuild: str,
) -> str:
    """The trained adapter as the agent's shipped file and manifest; its SHA-256."""
    from harness_r1.trainer import export_adapter

    base_dir = converted_checkpoint(agent.base_model, cache_dir)
    metadata = run.result.metadata
    manifest = {
        "name": agent.name,
        "model_id": agent.model_id,
        "base": agent.base_model.name,
        "base_gguf": agent.base_model.gguf_name,
        "base_version": checkpoint_version(base_dir),
        "rows": rows,
        "training": {
            "steps": metadata.get("steps"),
            "wall_s": metadata.get("wall_s"),
            "tokens": run.tokens,
            "trained_tokens": run.trained_tokens,
            "train_loss": metadata.get("train_loss"),
            "loss_curve": metadata.get("loss_curve"),
            "settings": metadata.get("settings"),
            "host": host(),
        },
        "rebuild": rebuild,
    }
    return export_adapter(run.result.version_dir, agent.adapter_file, agent.manifest_file, manifest)


def host() -> str:
    """The CPU model and core count training ran on (BENCHMARKS.md's training cost)."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines()
                 if ln.startswith("model name")]  # fmt: skip
        model = names[0] if names else model
    return f"{model}, {os.cpu_count()} cores"
