"""Staged-release cohorts: stable, nested, and never empty for a known fleet."""

from __future__ import annotations

from harness_r1.deploy.cohort import cohort_point, fraction_with_both_arms, in_cohort


def test_staged_rollout_cohorts_are_stable_and_nested() -> None:
    agents = [f"agent-{i}" for i in range(400)]
    at_10 = {a for a in agents if in_cohort(a, "ov-x", 0.1)}
    at_50 = {a for a in agents if in_cohort(a, "ov-x", 0.5)}
    assert at_10 <= at_50
    assert 20 <= len(at_10) <= 60 and 160 <= len(at_50) <= 240
    assert all(in_cohort(a, "ov-x", 1.0) for a in agents)


def _empty_cohort_overlay(agents: list[str], fraction: float) -> str:
    """An overlay id whose cohort at `fraction` holds none of `agents` (found by search)."""
    for n in range(10_000):
        overlay = f"ov-{n}"
        if not any(in_cohort(a, overlay, fraction) for a in agents):
            return overlay
    raise AssertionError("no empty cohort in 10,000 ids")


def test_a_fraction_reaching_nobody_is_widened_to_exactly_one_agent() -> None:
    agents = [f"agent-{i}" for i in range(4)]
    overlay = _empty_cohort_overlay(agents, 0.5)
    widened = fraction_with_both_arms(agents, overlay, 0.5)
    assert 0.5 < widened < 1.0
    reached = [a for a in agents if in_cohort(a, overlay, widened)]
    assert reached == [min(agents, key=lambda a: cohort_point(a, overlay))]


def test_a_fraction_that_reaches_someone_or_an_unknown_fleet_is_kept() -> None:
    agents = [f"agent-{i}" for i in range(4)]
    reaching = next(
        f"ov-{n}" for n in range(1000) if any(in_cohort(a, f"ov-{n}", 0.5) for a in agents)
    )
    assert fraction_with_both_arms(agents, reaching, 0.5) == 0.5
    assert fraction_with_both_arms([], "ov-x", 0.5) == 0.5
    alone = _empty_cohort_overlay(agents[:1], 0.5)  # one agent: widening leaves no control
    assert fraction_with_both_arms(agents[:1], alone, 0.5) == 0.5
    assert fraction_with_both_arms(agents, "ov-x", 1.0) == 1.0


def test_a_fraction_reaching_everybody_is_narrowed_to_keep_one_agent_out() -> None:
    agents = [f"agent-{i}" for i in range(4)]
    overlay = next(
        f"ov-{n}" for n in range(10_000) if all(in_cohort(a, f"ov-{n}", 0.5) for a in agents)
    )
    narrowed = fraction_with_both_arms(agents, overlay, 0.5)
    assert 0.0 < narrowed < 0.5
    left_out = [a for a in agents if not in_cohort(a, overlay, narrowed)]
    assert left_out == [max(agents, key=lambda a: cohort_point(a, overlay))]
