"""Where the cold start's packets come from: trajectories of training-split runs, cut into
batches, each batch turned into one failure packet plus the real tasks and seeds to re-run.

A packet masks its task ids (T1, T2...), so a patch cannot hard-code them; the canary, though,
needs the real ones. A `PacketSource` keeps both: the packet the engineer reads and the
(TaskSpec, seed) list the frozen target re-runs with and without each patch (its canary batch).
TaskSpecs come from the env's task registry (`get_suite(env).load_tasks(root, split)`), looked up
by the task id and split each trajectory carries, and must match the trajectory's task
(instruction and type), so a changed data file is caught instead of silently canaried.

Rules (deterministic: the same trajectories in the same order give the same sources):
1. Trajectories are grouped by (env, target, harness version), groups in sorted order, and
   deduplicated by trajectory_id (an identical copy is dropped; two different trajectories
   under one id are a ValueError).
2. Within a group, trajectories keep their input order and are cut into consecutive batches of
   `batch_size` (the last one may be smaller), like the daemon's failure batches.
3. Each batch gives one packet (`consumers.packets.build_packet`); a batch without a failed
   episode gives none.
4. With an incumbent overlay (`SourceConfig.incumbent`: the deployed harness the engineer
   improves), every trajectory must have run under it (its harness version is the incumbent's
   id, else ValueError: failures of another harness show problems the incumbent may not have);
   the packet shows the incumbent's hooks and the canary judges candidates composed onto it,
   against it.
5. The canary batch, `scope="batch"` (default): every episode of the batch, successes included,
   so a patch that breaks what the target already solved shows up as a negative delta (a batch
   of failures only cannot measure a regression with a deterministic target). `scope="packet"`:
   only the failed episodes the packet shows. Either way the tasks are ordered by
   trajectory_id (the packet's batch order) and a repeated (task, seed) pair runs once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from harness_r1.consumers import (
    NoFailures,
    PacketConfig,
    batch_key,
    build_packet,
    is_failure,
    read_trajectories,
    select_order,
)
from harness_r1.contracts import FailurePacket, TaskRef, TaskSpec, Trajectory
from harness_r1.envs import get_suite
from harness_r1.sandbox import BASE_INCUMBENT, CanaryBatch, Incumbent, effective_sources

__all__ = [
    "CanaryScope",
    "PacketSource",
    "SourceConfig",
    "TaskIndex",
    "sources_from_runs",
    "sources_from_trajectories",
]

CanaryScope = Literal["batch", "packet"]
SCOPES: tuple[str, ...] = ("batch", "packet")


@dataclass(frozen=True)
class SourceConfig:
    """batch_size: trajectories per packet batch. scope: what the canary re-runs ("batch": all
    episodes of the packet's batch; "packet": only the failed episodes the packet shows).
    packet: how each packet is drawn (token budget, selection, snippets)."""

    batch_size: int = 8
    scope: CanaryScope = "batch"
    packet: PacketConfig = field(default_factory=PacketConfig)
    incumbent: Incumbent = BASE_INCUMBENT  # the harness the runs were played under (rule 4)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, not {self.scope!r}")


@dataclass(frozen=True)
class PacketSource:
    """A packet and its canary batch: the real tasks (unmasked) with the seeds they ran with."""

    packet: FailurePacket
    tasks: tuple[TaskSpec, ...]
    seeds: tuple[int, ...]
    incumbent: Incumbent = BASE_INCUMBENT  # what candidates are composed onto and judged against

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError(f"packet {self.packet.packet_id[:12]}: a source needs >= 1 task")
        if len(self.tasks) != len(self.seeds):
            raise ValueError("a packet source needs one seed per task")
        others = sorted({t.env for t in self.tasks if t.env != self.packet.env})
        if others:
            raise ValueError(
                f"packet {self.packet.packet_id[:12]} is for {self.packet.env}, "
                f"its tasks for {', '.join(others)}"
            )

    @property
    def env(self) -> str:
        return self.packet.env

    @property
    def splits(self) -> list[str]:
        return sorted({t.split for t in self.tasks})

    def batch(self) -> CanaryBatch:
        return CanaryBatch(self.env, self.tasks, self.seeds)


TaskLookup = Callable[[TaskRef], TaskSpec]


class TaskIndex:
    """TaskSpecs of one env by (split, task_id), each split loaded from the registry on first
    use. Calling it with a trajectory's TaskRef returns the matching TaskSpec (checked)."""

    def __init__(self, env: str, data_root: Path) -> None:
        self.env = env
        self.data_root = Path(data_root)
        self._suite = get_suite(env)
        self._splits: dict[str, dict[str, TaskSpec]] = {}

    def split(self, split: str) -> dict[str, TaskSpec]:
        if split not in self._splits:
            if split not in self._suite.splits:
                raise ValueError(
                    f"unknown split {split!r} for {self.env}; known: "
                    f"{', '.join(self._suite.splits)}"
                )
            tasks = self._suite.load_tasks(self.data_root, split)
            self._splits[split] = {t.task_id: t for t in tasks}
        return self._splits[split]

    def __call__(self, ref: TaskRef) -> TaskSpec:
        if ref.env != self.env:
            raise ValueError(f"task {ref.task_id} is a {ref.env} task, not {self.env}")
        task = self.split(ref.split).get(ref.task_id)
        if task is None:
            raise ValueError(
                f"task {ref.task_id!r} is not in the {self.env}/{ref.split} registry "
                f"under {self.data_root}"
            )
        return check_task(task, ref)


def check_task(task: TaskSpec, ref: TaskRef) -> TaskSpec:
    """The registry's task, if it is the task the trajectory ran (else ValueError)."""
    if task.instruction != ref.instruction or task.task_type != ref.task_type:
        raise ValueError(
            f"{ref.env}/{ref.split} task {ref.task_id}: the registry's task differs from the "
            "one the trajectory ran (instruction or type changed: another data version?)"
        )
    return task


def _dedup(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """First occurrence of each trajectory_id, in input order (rule 1)."""
    seen: dict[str, Trajectory] = {}
    out = []
    for trajectory in trajectories:
        previous = seen.get(trajectory.trajectory_id)
        if previous is None:
            seen[trajectory.trajectory_id] = trajectory
            out.append(trajectory)
        elif previous != trajectory:
            raise ValueError(
                f"two different trajectories share trajectory_id {trajectory.trajectory_id!r}"
            )
    return out


def _canary_runs(
    chunk: Sequence[Trajectory], packet: FailurePacket, config: SourceConfig
) -> list[Trajectory]:
    """The trajectories whose (task, seed) the canary re-runs (rule 5)."""
    ordered = sorted(chunk, key=lambda t: t.trajectory_id)
    if config.scope == "batch":
        return ordered
    failures = [t for t in ordered if is_failure(t)]
    shown = select_order(failures, packet.selection)[: len(packet.episodes)]
    for trajectory, episode in zip(shown, packet.episodes, strict=True):
        if trajectory.task.task_type != episode.task_type:  # pragma: no cover - invariant
            raise RuntimeError("packet episodes no longer follow the selection order")
    return sorted(shown, key=lambda t: t.trajectory_id)


def tasks_and_seeds(
    runs: Sequence[Trajectory], lookup: TaskLookup
) -> tuple[tuple[TaskSpec, ...], tuple[int, ...]]:
    """The distinct (task, seed) pairs the runs played, in run order: what re-running them
    (a canary batch) needs."""
    tasks: list[TaskSpec] = []
    seeds: list[int] = []
    seen: set[tuple[str, str, int]] = set()
    for trajectory in runs:
        ref = trajectory.task
        key = (ref.split, ref.task_id, ref.seed)
        if key in seen:
            continue
        seen.add(key)
        tasks.append(lookup(ref))
        seeds.append(ref.seed)
    return tuple(tasks), tuple(seeds)


def sources_from_trajectories(
    trajectories: Iterable[Trajectory],
    lookup: TaskLookup,
    config: SourceConfig | None = None,
) -> list[PacketSource]:
    """Packet sources from trajectories (see the module docstring for every rule); `lookup`
    maps a trajectory's TaskRef to the registry's TaskSpec (e.g. a `TaskIndex`)."""
    config = config or SourceConfig()
    incumbent = config.incumbent
    live = effective_sources(incumbent.links)
    groups: dict[tuple[str, str, str, str], list[Trajectory]] = defaultdict(list)
    for trajectory in _dedup(trajectories):
        if trajectory.harness_version != incumbent.overlay_id:
            raise ValueError(
                f"trajectory {trajectory.trajectory_id} ran under "
                f"{trajectory.harness_version!r}, not the incumbent {incumbent.overlay_id!r}: "
                "play the runs under the incumbent (`harness-r1 eval --on ...`)"
            )
        groups[batch_key(trajectory)].append(trajectory)
    sources = []
    for key in sorted(groups):
        group = groups[key]
        for start in range(0, len(group), config.batch_size):
            chunk = group[start : start + config.batch_size]
            try:
                packet = build_packet(chunk, config.packet, incumbent=live)
            except NoFailures:
                continue
            tasks, seeds = tasks_and_seeds(_canary_runs(chunk, packet, config), lookup)
            sources.append(PacketSource(packet, tasks, seeds, incumbent))
    return sources


def sources_from_runs(
    runs: Sequence[Path],
    env: str,
    split: str,
    data_root: Path,
    config: SourceConfig | None = None,
) -> list[PacketSource]:
    """Packet sources from trajectories JSONL files (in the order given), which must all be
    `env` episodes of `split` (the training split the cold start draws from)."""
    trajectories: list[Trajectory] = []
    for path in runs:
        trajectories.extend(read_trajectories(path))
    wrong = sorted({f"{t.env}/{t.task.split}" for t in trajectories} - {f"{env}/{split}"})
    if wrong:
        raise ValueError(
            f"the cold start draws from {env}/{split} runs only; the runs also hold "
            f"{', '.join(wrong)}"
        )
    return sources_from_trajectories(trajectories, TaskIndex(env, data_root), config)
