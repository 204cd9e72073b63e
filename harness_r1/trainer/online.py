"""Online GRPO's packet -> batch resolver: which tasks, with which seeds, a packet's patches
are judged on, rebuilt from the `packets.jsonl` the cold start writes (each packet with the
real task ids, splits and seeds of the episodes it was built from).

The resolver hands `CanaryReward` the packet's own batch and a runner over the frozen target,
so the reward of a sampled patch is its delta on exactly the failures it was written for (the
paper's transductive objective), against the incumbent the row records (the deployed harness
the cold start judged against; none: the base harness). Unknown packet ids and missing tasks
raise LookupError: a wiring error, never a reward.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_r1.contracts import CanaryReport, FailurePacket, Patch, TaskSpec
from harness_r1.envs import get_suite
from harness_r1.sandbox import BASE_INCUMBENT, CanaryBatch, Candidate, Evaluator, Incumbent, Link
from harness_r1.trainer.canary_reward import MappingResolver


def load_packet_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                for key in ("packet_id", "env", "task_ids", "splits", "seeds", "packet"):
                    row[key]  # noqa: B018 - presence check with a clear error below
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: not a packet row ({err})") from None
            rows.append(row)
    return rows


def incumbent_of_row(row: dict[str, Any]) -> Incumbent:
    """The incumbent a packet row's candidates were judged against (rows written before
    incumbents were recorded, or with none: the base harness)."""
    recorded = row.get("incumbent") or {}
    links = [
        Link(str(link["overlay_id"]), Patch.model_validate(link["patch"]))
        for link in recorded.get("links", [])
    ]
    if not links:
        return BASE_INCUMBENT
    return Incumbent.of_chain(str(recorded["overlay_id"]), links)


@dataclass(frozen=True)
class OnIncumbent:
    """An Evaluator that judges every batch against one incumbent (a packet row's)."""

    runner: Evaluator
    incumbent: Incumbent

    def evaluate(
        self,
        batch: CanaryBatch,
        candidates: Sequence[Candidate],
        incumbent: Incumbent = BASE_INCUMBENT,
        *,
        patch_alone: bool = True,
    ) -> CanaryReport:
        return self.runner.evaluate(batch, candidates, self.incumbent, patch_alone=patch_alone)


def packets_and_resolver(
    rows: Sequence[dict[str, Any]],
    data_root: Path,
    runner_for: Callable[[str], Evaluator],
) -> tuple[list[FailurePacket], MappingResolver]:
    """The packets (for the prompts) and a resolver over their batches."""
    tasks: dict[tuple[str, str], dict[str, TaskSpec]] = {}

    def task(env: str, split: str, task_id: str) -> TaskSpec:
        if (env, split) not in tasks:
            loaded = get_suite(env).load_tasks(data_root, split)
            tasks[(env, split)] = {t.task_id: t for t in loaded}
        try:
            return tasks[(env, split)][task_id]
        except KeyError:
            raise LookupError(f"task {task_id!r} is not in {env}/{split}") from None

    packets, batches = [], {}
    for row in rows:
        packet = FailurePacket.model_validate(row["packet"])
        if packet.packet_id != row["packet_id"]:
            raise ValueError(f"packet row {row['packet_id']} carries packet {packet.packet_id}")
        env = str(row["env"])
        chosen = tuple(
            task(env, split, task_id)
            for task_id, split in zip(row["task_ids"], row["splits"], strict=True)
        )
        batch = CanaryBatch(env, chosen, tuple(int(s) for s in row["seeds"]))
        packets.append(packet)
        incumbent = incumbent_of_row(row)
        runner = runner_for(env)
        batches[packet.packet_id] = (
            batch,
            runner if incumbent.patch is None else OnIncumbent(runner, incumbent),
        )
    return packets, MappingResolver(batches)
