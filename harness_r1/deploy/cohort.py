"""Staged-release cohorts: which agents apply a release with `rollout_fraction < 1`.

Each agent has a stable point in [0, 1) per overlay (a hash of overlay id and agent id); it is
in the cohort when its point is below the fraction, so cohorts are nested as the fraction
grows. The points are independent per agent, so on a small fleet a fraction can reach nobody
(4 agents at 0.5: 1 release in 16). A canary that reaches nobody measures nothing and waits
for the guard's timeout, so the daemon widens such a fraction to reach exactly one agent of the
fleet it knows; a cohort of every agent leaves the guard no control group, so it narrows that
one to keep exactly one agent out (`fraction_with_both_arms`).
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


def fraction_with_both_arms(agent_ids: Iterable[str], overlay_id: str, fraction: float) -> float:
    """`fraction`, or one that leaves the live guard both arms among the known `agent_ids`:
    when `fraction` reaches none of them, a larger one that puts exactly one in the cohort
    (halfway between the lowest and the second lowest point); when it reaches all of them
    (4 agents at 0.5: 1 release in 16 as well), a smaller one that keeps exactly one out
    (halfway between the two highest points), so the guard has a control group. The margins
    survive the fraction's trips through JSON. With fewer than two known agents nothing can
    give both arms, so `fraction` is kept; a fraction of 1 is a full release (no guard)."""
    points = sorted(cohort_point(agent, overlay_id) for agent in set(agent_ids))
    if fraction >= 1.0 or len(points) < 2:
        return fraction
    if points[0] >= fraction:  # nobody in the cohort
        return (points[0] + points[1]) / 2
    if points[-1] < fraction:  # everybody in the cohort
        return (points[-2] + points[-1]) / 2
    return fraction
