"""The live guard's statistics and verdicts (pure; the end-to-end test is in test_fleet.py)."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime

import pytest

from harness_r1.contracts import (
    Outcome,
    TargetRef,
    TaskRef,
    Termination,
    Timings,
    Trajectory,
)
from harness_r1.deploy.guard import (
    GuardConfig,
    LiveGuard,
    Verdict,
    probability_better,
)


def test_probability_better_matches_monte_carlo() -> None:
    rng = random.Random(7)
    for s_new, n_new, s_old, n_old in [(10, 20, 5, 20), (3, 30, 4, 10), (0, 5, 5, 5)]:
        exact = probability_better(s_new, n_new, s_old, n_old)
        draws = 40_000
        hits = sum(
            rng.betavariate(s_new + 1, n_new - s_new + 1)
            > rng.betavariate(s_old + 1, n_old - s_old + 1)
            for _ in range(draws)
        )
        assert exact == pytest.approx(hits / draws, abs=0.01)


def test_probability_better_is_symmetric_and_stable() -> None:
    assert probability_better(0, 0, 0, 0) == pytest.approx(0.5)
    a = probability_better(12, 40, 20, 40)
    assert a + probability_better(20, 40, 12, 40) == pytest.approx(1.0)
    assert 0.0 <= probability_better(900, 2000, 1000, 2000) < 0.01
    with pytest.raises(ValueError):
        probability_better(5, 3, 0, 0)


def trajectory(version: str, success: bool, tid: str | None = None) -> Trajectory:
    now = datetime.now(UTC)
    return Trajectory(
        trajectory_id=tid or uuid.uuid4().hex,
        agent_id="a",
        target=TargetRef(model_id="m", version="1"),
        harness_version=version,
        task=TaskRef(
            env="dbbench", split="dev", task_id="t", task_type="SELECT", instruction="i", seed=0
        ),
        steps=[],
        outcome=Outcome(
            success=success,
            reward=float(success),
            termination=Termination.SUCCESS if success else Termination.FAILURE,
            steps=1,
        ),
        timings=Timings(started_at=now, finished_at=now),
    )


def run(guard: LiveGuard, p_new: float, p_old: float, seed: int = 0) -> Verdict:
    rng = random.Random(seed)
    for _ in range(guard.config.max_episodes + 1):
        guard.observe(trajectory("new", rng.random() < p_new))
        guard.observe(trajectory("old", rng.random() < p_old))
        verdict = guard.decide().verdict
        if verdict is not Verdict.CONTINUE:
            return verdict
    raise AssertionError("the guard must decide by max_episodes")


def test_harm_is_rolled_back_and_gain_promoted() -> None:
    config = GuardConfig(min_episodes=10, max_episodes=200)
    assert run(LiveGuard("new", "old", config), 0.2, 0.7) is Verdict.ROLLBACK
    assert run(LiveGuard("new", "old", config), 0.8, 0.3) is Verdict.PROMOTE


def test_no_difference_ends_inconclusive_not_promoted() -> None:
    config = GuardConfig(min_episodes=10, max_episodes=60, promote_probability=0.99)
    guard = LiveGuard("new", "old", config)
    for i in range(60):
        guard.observe(trajectory("new", i % 2 == 0))
        guard.observe(trajectory("old", i % 2 == 0))
    decision = guard.decide()
    assert decision.verdict is Verdict.ROLLBACK
    assert decision.reason == "live_guard_inconclusive"


def test_nothing_before_min_episodes_and_redeliveries_count_once() -> None:
    guard = LiveGuard("new", "old", GuardConfig(min_episodes=5, max_episodes=50))
    for _ in range(4):
        guard.observe(trajectory("new", False))
        guard.observe(trajectory("old", True))
    assert guard.decide().verdict is Verdict.CONTINUE
    same = trajectory("new", False, tid="dup")
    assert guard.observe(same) and not guard.observe(same)
    assert not guard.observe(trajectory("other-overlay", True))
    assert guard.decide().episodes_new == 5


def test_false_rollback_rate_under_no_difference_is_bounded() -> None:
    """Peeking after every episode: the rate of wrongly rolling back an overlay that is just
    as good stays bounded (200 simulated fleets; measured 19/200 with the defaults)."""
    config = GuardConfig(min_episodes=20, max_episodes=300)
    wrong = 0
    for seed in range(200):
        guard = LiveGuard("new", "old", config)
        decision = run_to_end(guard, 0.5, 0.5, seed)
        wrong += decision.verdict is Verdict.ROLLBACK and decision.reason == "live_guard"
    assert wrong / 200 < 0.15


def run_to_end(guard: LiveGuard, p_new: float, p_old: float, seed: int):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    for _ in range(guard.config.max_episodes):
        guard.observe(trajectory("new", rng.random() < p_new))
        guard.observe(trajectory("old", rng.random() < p_old))
        decision = guard.decide()
        if decision.verdict is not Verdict.CONTINUE:
            return decision
    return guard.decide()


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        GuardConfig(min_episodes=0)
    with pytest.raises(ValueError):
        GuardConfig(promote_probability=0.4)


def test_an_empty_control_arm_cannot_keep_an_overlay_in_canary_forever() -> None:
    guard = LiveGuard("new", "old", GuardConfig(min_episodes=5, max_episodes=20))
    for _ in range(19):
        guard.observe(trajectory("new", True))
    assert guard.decide().verdict is Verdict.CONTINUE
    guard.observe(trajectory("new", True))
    decision = guard.decide()
    assert (decision.verdict, decision.reason) == (Verdict.ROLLBACK, "live_guard_inconclusive")
