"""The release policy: what happens to a candidate the gate promoted.

It is registered once per batch (a retried batch reuses its overlay), then released to a canary
cohort that holds at least one known agent and leaves at least one out (on a small fleet the
configured fraction can reach nobody, and a canary nobody runs measures nothing). One staged
release at a time per target: a second cohort would eat the first one's control arm, so a
later winner stays a candidate for an operator (or a later batch) to release. Without a
signing key nothing is released.

The overlay registered is the winner composed onto the incumbent it was judged against (its
parent), with the winner's own patch kept as its link. It is released only while that parent
is still the pool's active overlay (or the base harness, for a first link): composed onto a
harness that is no longer live, it would take back whatever replaced it, so it stays a
candidate (logged) for an operator to look at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from harness_r1.contracts import Patch
from harness_r1.deploy.cohort import fraction_with_both_arms
from harness_r1.deploy.publisher import Publisher
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.registry_records import OverlayRecord, OverlayState

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Promotion:
    """A candidate the gate promoted, with what the registry keeps as its evidence."""

    candidate_id: str
    patch: Patch  # the composed overlay: what is signed and released
    delta: float
    group_id: str  # the batch: one overlay per group, whatever the retries
    packet_id: str
    evidence: Mapping[str, Any]
    link: Patch | None = None  # the winner's own patch (None: `patch` is a root)
    parent_overlay_id: str | None = None  # the incumbent it was composed onto (None: base)
    contributors: Mapping[str, Sequence[int]] = field(default_factory=dict)


class Promoter:
    """Registers promoted candidates and stages their release (module docstring)."""

    def __init__(
        self,
        registry: OverlayRegistry,
        publisher: Publisher | None,
        target: str,
        rollout_fraction: float,
        actor: str,
    ) -> None:
        self.registry = registry
        self.publisher = publisher
        self.target = target
        self.rollout_fraction = rollout_fraction
        self.actor = actor

    def promote(self, promotion: Promotion, agents: Callable[[], list[str]]) -> str:
        """The overlay id of `promotion`, registered and (when the policy allows) released to a
        cohort of `agents()` (the fleet as far as the caller knows it)."""
        record = self._overlay_of(promotion.group_id) or self.registry.add(
            promotion.patch,
            self.target,
            packet_id=promotion.packet_id,
            group_id=promotion.group_id,
            parent_overlay_id=promotion.parent_overlay_id,
            evidence=dict(promotion.evidence),
            actor=self.actor,
            link=promotion.link,
            contributors=promotion.contributors,
        )
        if record.state is not OverlayState.CANDIDATE:
            return record.overlay_id  # released by an earlier attempt
        if self.publisher is None:
            log.warning("promoted_not_released_no_signing_key", overlay_id=record.overlay_id)
            return record.overlay_id
        if self.registry.list(target=self.target, state=OverlayState.CANARY):
            log.info("release_deferred_canary_in_flight", overlay_id=record.overlay_id)
            return record.overlay_id
        live = self._active_id()
        if record.parent_overlay_id != live:
            log.warning(
                "release_refused_incumbent_changed",
                overlay_id=record.overlay_id,
                composed_onto=record.parent_overlay_id or "base",
                active=live or "base",
            )
            return record.overlay_id
        fraction = fraction_with_both_arms(agents(), record.overlay_id, self.rollout_fraction)
        self.publisher.release(
            record.overlay_id,
            fraction=fraction,
            actor=self.actor,
            reason=(
                f"gate promoted {promotion.candidate_id}: delta {promotion.delta:+.3f} "
                f"on batch {promotion.group_id}"
            ),
        )
        return record.overlay_id

    def _active_id(self) -> str | None:
        active = self.registry.active(self.target)
        return active.overlay_id if active else None

    def _overlay_of(self, group_id: str) -> OverlayRecord | None:
        found = [r for r in self.registry.list(target=self.target) if r.group_id == group_id]
        return found[0] if found else None
