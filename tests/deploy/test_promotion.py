"""The release policy on a real registry and publisher: register once per batch, release to a
cohort that reaches at least one agent, one staged release per target, nothing without a key."""

from __future__ import annotations

from deploy_rig import Rig, make_patch

from harness_r1.deploy.cohort import in_cohort
from harness_r1.deploy.promotion import Promoter, Promotion
from harness_r1.deploy.registry_records import OverlayState


def promotion(
    tag: str, group: str = "batch-1", delta: float = 0.25, parent: str | None = None
) -> Promotion:
    return Promotion(
        candidate_id=f"{group}-c2",
        patch=make_patch(tag),
        delta=delta,
        group_id=group,
        packet_id=f"packet-{group}",
        evidence={"delta_success": delta},
        parent_overlay_id=parent,
    )


def promoter(rig: Rig, *, keyed: bool = True) -> Promoter:
    return Promoter(rig.registry, rig.publisher if keyed else None, "pool-a", 0.01, "daemon")


AGENTS = [f"agent-{i}" for i in range(4)]


def test_a_promotion_is_registered_with_its_lineage_and_released_to_a_reachable_cohort(
    rig: Rig,
) -> None:
    parent = rig.overlay("live")
    rig.publisher.release(parent, fraction=1.0, actor="op", reason="r")
    overlay_id = promoter(rig).promote(promotion("new", parent=parent), lambda: AGENTS)
    record = rig.registry.get(overlay_id)
    assert record.state is OverlayState.CANARY
    assert (record.parent_overlay_id, record.group_id, record.packet_id) == (
        parent,
        "batch-1",
        "packet-batch-1",
    )
    released = rig.registry.events(overlay_id)[-1]
    assert released.actor == "daemon"
    assert released.reason == "gate promoted batch-1-c2: delta +0.250 on batch batch-1"
    fraction = released.evidence["rollout_fraction"]
    reached = [agent for agent in AGENTS if in_cohort(agent, overlay_id, fraction)]
    assert 1 <= len(reached) < len(AGENTS), (fraction, reached)  # 1% alone: usually nobody


def test_a_retried_batch_reuses_its_overlay(rig: Rig) -> None:
    first = promoter(rig).promote(promotion("a"), lambda: AGENTS)
    again = promoter(rig).promote(promotion("a"), lambda: AGENTS)
    assert again == first and len(rig.registry.list(target="pool-a")) == 1


def test_one_staged_release_at_a_time(rig: Rig) -> None:
    first = promoter(rig).promote(promotion("a", group="b1"), lambda: AGENTS)
    second = promoter(rig).promote(promotion("b", group="b2"), lambda: AGENTS)
    assert rig.registry.get(first).state is OverlayState.CANARY
    assert rig.registry.get(second).state is OverlayState.CANDIDATE


def test_without_a_signing_key_nothing_is_released(rig: Rig) -> None:
    overlay_id = promoter(rig, keyed=False).promote(promotion("a"), lambda: AGENTS)
    assert rig.registry.get(overlay_id).state is OverlayState.CANDIDATE
    assert rig.bus.log == []


def test_a_winner_composed_onto_a_harness_no_longer_live_stays_a_candidate(rig: Rig) -> None:
    """Judged against (and composed onto) one overlay, released only while that overlay is
    live: onto anything else it would take back what replaced it."""
    first = rig.overlay("first")
    rig.publisher.release(first, fraction=1.0, actor="op", reason="r")
    onto_base = promoter(rig).promote(promotion("stale", group="b1"), lambda: AGENTS)
    assert rig.registry.get(onto_base).state is OverlayState.CANDIDATE
    onto_first = promoter(rig).promote(promotion("fresh", group="b2", parent=first), lambda: AGENTS)
    assert rig.registry.get(onto_first).state is OverlayState.CANARY
