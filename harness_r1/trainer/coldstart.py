"""The cold-start dataset: teacher proposals that the sandbox and the canary proved executable and
non-regressive on the frozen target, as SFT examples for the engineer.

For each packet source (a failure packet from training-split runs plus its real tasks and seeds,
see `coldstart_sources`):
1. The teacher writes K proposals in the engineer's output format
   (`<think>...</think><patch>SECTIONS</patch>`), seeded with `ColdStartConfig.seed`.
2. Each is parsed and statically checked (`trainer.propose.classify`): a parse failure is
   rejected as `unparseable`, a static rejection as `static:<code>` (the first violation's code).
3. The valid ones go to the canary together, in one `CanaryRunner.evaluate` call on the packet's
   batch (one baseline run shared by all of them, the batch's tasks with the seeds they ran with).
4. A candidate is kept only if the canary evaluated it (`status == "evaluated"`; else
   `invalid` when the runner's validator refused it, `infra_error` when the infrastructure did),
   it caused no sandbox violation event (`violation`), no hook fault (`hook_faults`) and it did
   not regress (`regressive`: delta success < `min_delta`, or, when `min_reward_delta` is set,
   delta mean reward below it); which events count, and the buckets' order, are
   `coldstart_rules`. A rejected candidate gets every reason that applies in `reasons`; the
   first in that order is its bucket (`reason`).
5. A kept proposal becomes one SFT row in TRL's conversational prompt/completion format, a
   rejected one a row of the rejected file, so nothing the teacher wrote is lost (steps 1 to 5
   for one packet: `coldstart_packet`).

Outputs in `out_dir` (written to temporary names, renamed when complete): `dataset.jsonl` (kept
rows), `rejected.jsonl` (rejected rows), `packets.jsonl` (each packet used with its real task
ids and seeds, to rebuild prompts or re-run the canary) and `stats.json` (counts: packets,
proposals, kept, rejected by reason, per env and per packet, templates of the kept patches;
`coldstart_stats`). Nothing in them depends on timing (no durations, no worker restart
counters), so the same sources, teacher, config and a deterministic target give the same bytes.
kept + all rejected == proposals, always.

Why a module of its own: the whole build, the one place that picks each env's canary, writes
the four files in one pass and commits them together; the rules, one packet's work and the
counts are the modules beside it, and the output bytes do not depend on how the code is cut.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import structlog

from harness_r1.sandbox import CanaryRunner
from harness_r1.trainer.coldstart_packet import run_packet
from harness_r1.trainer.coldstart_rules import ColdStartConfig
from harness_r1.trainer.coldstart_sources import PacketSource
from harness_r1.trainer.coldstart_stats import ColdStartStats, PacketStats
from harness_r1.trainer.writers import PatchWriter

__all__ = [
    "DATASET_FILE",
    "PACKETS_FILE",
    "REJECTED_FILE",
    "STATS_FILE",
    "build_coldstart",
]

log = structlog.get_logger(__name__)

DATASET_FILE = "dataset.jsonl"
REJECTED_FILE = "rejected.jsonl"
STATS_FILE = "stats.json"
PACKETS_FILE = "packets.jsonl"


# -- the packets file -----------------------------------------------------------------------


def packet_row(source: PacketSource) -> dict[str, Any]:
    """A packet as used (for inspection and re-runs): the packet and its canary batch."""
    return {
        "packet_id": source.packet.packet_id,
        "env": source.env,
        "task_ids": [t.task_id for t in source.tasks],
        "splits": [t.split for t in source.tasks],
        "seeds": list(source.seeds),
        "packet": source.packet.model_dump(mode="json"),
        # the harness candidates were judged against: its id and links, oldest first (none:
        # the base harness), so GRPO re-runs the canary against the same incumbent
        "incumbent": {
            "overlay_id": source.incumbent.overlay_id,
            "links": [
                {"overlay_id": link.overlay_id, "patch": link.patch.model_dump(mode="json")}
                for link in source.incumbent.links
            ],
        },
    }


def _line(row: Mapping[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"


# -- the whole build ------------------------------------------------------------------------


def _runner_env(runner: CanaryRunner) -> str | None:
    suite = getattr(runner.runtime, "suite", None)
    name = getattr(suite, "name", None)
    return name if isinstance(name, str) else None


def _runners(
    runner: CanaryRunner | Mapping[str, CanaryRunner], sources: Sequence[PacketSource]
) -> dict[str, CanaryRunner]:
    if isinstance(runner, CanaryRunner):
        envs = sorted({s.env for s in sources})
        env = _runner_env(runner)
        if env is not None:
            wrong = [e for e in envs if e != env]
            if wrong:
                raise ValueError(
                    f"the canary runs {env}; the sources also hold {', '.join(wrong)} packets"
                )
        return dict.fromkeys(envs, runner)
    missing = sorted({s.env for s in sources} - set(runner))
    if missing:
        raise ValueError(f"no canary runner for env(s) {', '.join(missing)}")
    return dict(runner)


def _commit(handle: IO[str], tmp: Path, final: Path) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    tmp.replace(final)


# Why this size: writes four files in one pass and commits them together; split, a failure could
# leave some renamed
def build_coldstart(
    sources: Sequence[PacketSource],
    teacher: PatchWriter,
    runner: CanaryRunner | Mapping[str, CanaryRunner],
    config: ColdStartConfig | None,
    out_dir: Path,
    *,
    on_packet: Callable[[PacketStats], None] | None = None,
) -> ColdStartStats:
    """The cold-start dataset of `sources` (see the module docstring): writes `dataset.jsonl`,
    `rejected.jsonl`, `packets.jsonl` and `stats.json` into `out_dir` and returns the
    statistics. `runner` is the canary of the sources' env, or one per env. `on_packet` sees
    each packet's stats as it completes (progress). A build that fails midway leaves only
    `.*.partial` files."""
    config = config or ColdStartConfig()
    out_dir = Path(out_dir)
    chosen = list(sources)[: config.max_packets] if config.max_packets is not None else sources
    runners = _runners(runner, chosen)
    name = teacher.name
    for env in sorted({s.env for s in chosen}):
        ref = runners[env].target
        target = f"{ref.model_id}@{ref.version}"
        packet_targets = {
            f"{s.packet.target.model_id}@{s.packet.target.version}" for s in chosen if s.env == env
        }
        others = sorted(packet_targets - {target})
        if others:
            log.warning(
                "coldstart.target_mismatch",
                env=env,
                canary_target=target,
                packet_targets=others,
                note="packets come from another model's runs than the canary re-runs",
            )
    stats = ColdStartStats(
        teacher=name,
        config=config.describe(),
        packets_available=len(sources),
        files={
            "dataset": DATASET_FILE,
            "rejected": REJECTED_FILE,
            "packets": PACKETS_FILE,
            "stats": STATS_FILE,
        },
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {key: out_dir / f".{file}.partial" for key, file in stats.files.items()}
    dataset = paths["dataset"].open("w", encoding="utf-8")
    rejected = paths["rejected"].open("w", encoding="utf-8")
    packets = paths["packets"].open("w", encoding="utf-8")
    try:
        for source in chosen:
            packets.write(_line(packet_row(source)))
            rows = run_packet(source, teacher, runners[source.env], config)
            for row in rows.kept:
                dataset.write(_line(row))
            for row in rows.rejected:
                rejected.write(_line(row))
            stats.add(rows.stats)
            stats.kept_templates.update(rows.templates)
            log.info(
                "coldstart.packet",
                packet=source.packet.packet_id[:12],
                env=source.env,
                proposals=rows.stats.proposals,
                kept=rows.stats.kept,
                rejected=dict(rows.stats.rejected),
            )
            if on_packet is not None:
                on_packet(rows.stats)
        _commit(dataset, paths["dataset"], out_dir / DATASET_FILE)
        _commit(rejected, paths["rejected"], out_dir / REJECTED_FILE)
        _commit(packets, paths["packets"], out_dir / PACKETS_FILE)
    finally:
        dataset.close()
        rejected.close()
        packets.close()
    body = json.dumps(stats.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
    paths["stats"].write_text(body, encoding="utf-8")
    paths["stats"].replace(out_dir / STATS_FILE)
    return stats
