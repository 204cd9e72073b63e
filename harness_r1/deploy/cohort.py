"""Staged-release cohorts: which agents apply a release with `rollout_fraction < 1`.

Each agent has a stable point in [0, 1) per overlay (a hash of overlay id and agent id); it is
in the cohort when its point is below the fraction, so cohorts are nested as the fraction
grows. The points are independent per agent, so on a small fleet a fraction can reach nobody
(4 agents at 0.5: 1 release in 16). A canary that reaches nobody measures nothing and waits
for the guard's timeout, so the publisher side widens such a fraction just enough to reach
the known agent with the lowest point (`fraction_reaching_one`).
"""

from __future__ import annotations

import hashlib
import math
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
    """`fraction`, or the smallest larger fraction that puts one of `agent_ids` in the cohort
    when it reaches none of them. Unknown fleets (no ids) keep the configured fraction; the
    widened fraction includes exactly the one agent with the lowest point, so the others stay
    on their overlay as the guard's control group."""
    points = [cohort_point(agent, overlay_id) for agent in agent_ids]
    if fraction >= 1.0 or not points or min(points) < fraction:
        return fraction
    return min(1.0, math.nextafter(min(points), math.inf))
