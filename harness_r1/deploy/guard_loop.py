"""Wiring of the live guard: live trajectories in, one signed promotion or rollback out.

The guard itself (guard.py) is pure counting and statistics; this loop reads finished
trajectories (from the trajectory topic, or handed in directly), feeds them to it, and acts
once on the first non-continue verdict through the Publisher, with actor `live_guard`.
A trajectory that does not parse is skipped and counted here; routing it to the dead-letter
topic is the daemon's consumer's job (the daemon owns that topic's offsets).
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog
from pydantic import ValidationError

from harness_r1.contracts import ControlKind, Trajectory
from harness_r1.deploy.client import MessageSource
from harness_r1.deploy.guard import GuardDecision, LiveGuard, Verdict
from harness_r1.deploy.publisher import Publisher

log = structlog.get_logger(__name__)

ACTOR = "live_guard"


class GuardLoop:
    def __init__(
        self,
        guard: LiveGuard,
        publisher: Publisher,
        target: str,
        source: MessageSource | None = None,
    ) -> None:
        self.guard = guard
        self.publisher = publisher
        self.target = target
        self._source = source
        self.decision: GuardDecision | None = None  # the acted-on decision, once there is one
        self.unreadable = 0

    @property
    def done(self) -> bool:
        return self.decision is not None

    def feed(self, trajectories: Iterable[Trajectory]) -> GuardDecision:
        """Observe trajectories, decide, act if decided. After acting, further input is ignored."""
        if self.decision is not None:
            return self.decision
        for trajectory in trajectories:
            self.guard.observe(trajectory)
        decision = self.guard.decide()
        if decision.verdict is not Verdict.CONTINUE:
            self._act(decision)
        return decision

    def poll(self, timeout_ms: int = 200) -> GuardDecision:
        """Read what the trajectory topic holds now and `feed` it."""
        if self._source is None:
            raise RuntimeError("GuardLoop.poll needs a source; use feed() otherwise")
        parsed = []
        for record in self._source.poll(timeout_ms):
            try:
                parsed.append(Trajectory.from_json_bytes(record.value))
            except (ValidationError, ValueError) as err:
                self.unreadable += 1
                log.warning("guard_trajectory_unreadable", offset=record.offset, error=str(err))
        return self.feed(parsed)

    def _act(self, decision: GuardDecision) -> None:
        enact(decision, self.publisher, self.target)
        self.decision = decision


def enact(decision: GuardDecision, publisher: Publisher, target: str) -> None:
    """Publish what a decided verdict means: a full release, or a rollback of the overlay."""
    overlay = decision.overlay_id
    if decision.verdict is Verdict.PROMOTE:
        publisher.release(overlay, fraction=1.0, actor=ACTOR, reason=decision.summary())
    elif decision.verdict is Verdict.ROLLBACK:
        publisher.control(
            ControlKind.ROLLBACK,
            target,
            actor=ACTOR,
            reason=f"{decision.reason}: {decision.summary()}",
            revoke_overlay_id=overlay,
        )
    else:
        return
    log.info("live_guard_decided", overlay_id=overlay, decision=decision.summary())
