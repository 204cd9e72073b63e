"""Staged-release cohorts: which agents apply a release with `rollout_fraction < 1`.

Each agent has a stable point in [0, 1) per overlay (a hash of overlay id and agent id); it is
in the cohort when its point is below the fraction, so cohorts are nested as the fraction
grows. The points are independent per agent, so on a small fleet a fraction can reach nobody
(4 agents at 0.5: 1 release in 16). A canary that reaches nobody measures nothing and waits
for the guard's timeout, so the daemon widens such a fraction to reach exactly one agent of the
fleet it knows (`fraction_reaching_one`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def cohort_point(agent_id: str, overlay_id: str) -> float:
    """The agent's stable point in [0, 1) for this overlay."""
    digest = hashlib.sha256(f"{overlay_id}\0{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def in_cohort(agent_id: str, overlay_id: str, fraction: float) -> bool:
    """Stable, nested cohorts: the same agent is in for every fraction above its point."""
    if fraction >= 1.0:
        return True
    return cohort_point(agent_id, overlay_id) < fraction


def fraction_reaching_one(agent_ids: Iterable[str], overlay_id: str, fraction: float) -> float:
    """`fraction`, or a larger one that puts exactly one of the known `agent_ids` in the
    cohort when `fraction` reaches none of them: halfway between the lowest and the second
    lowest point, so every other known agent stays on its overlay as the guard's control
    group (the margin also survives the fraction's trips through JSON). With fewer than two
    known agents no widening can keep a control group, so `fraction` is kept; the result is
    always below 1 (a fraction of 1 is a full release, which skips the guard)."""
    points = sorted(cohort_point(agent, overlay_id) for agent in set(agent_ids))
    if fraction >= 1.0 or len(points) < 2 or points[0] < fraction:
        return fraction
    return (points[0] + points[1]) / 2
