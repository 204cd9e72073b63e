"""Success rates with Wilson 95% intervals, per env and task type (eval and benchmarks)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from harness_r1.contracts import OriginCounts, Trajectory

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval: honest at small n and at 0% / 100%, unlike the normal one."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class RateRow:
    env: str
    group: str  # "all" or a task type
    n: int
    successes: int
    mean_reward: float
    origins: OriginCounts = OriginCounts()  # the group's steps by who decided the action

    @property
    def forced_share(self) -> float | None:
        """Share of the group's steps a hook forced (None: no steps)."""
        return self.origins.measured_forced_share

    @property
    def rate(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.n)


def summarize(trajectories: Iterable[Trajectory]) -> list[RateRow]:
    """One row per env ('all') followed by one per task type, sorted."""
    groups: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[(t.task.env, "all")].append(t)
        groups[(t.task.env, t.task.task_type)].append(t)
    rows = []
    for (env, group), items in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1] != "all", kv[0][1])
    ):
        rows.append(
            RateRow(
                env=env,
                group=group,
                n=len(items),
                successes=sum(t.outcome.success for t in items),
                mean_reward=sum(t.outcome.reward for t in items) / len(items),
                origins=OriginCounts.total(t.origins for t in items),
            )
        )
    return rows
