"""The live guard's statistics and verdicts (pure; the end-to-end test is in test_fleet.py)."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from fractions import Fraction
from math import comb, factorial

import pytest

from harness_r1.contracts import (
    OriginCounts,
    Outcome,
    TargetRef,
    TaskRef,
    Termination,
    Timings,
    Trajectory,
)
from harness_r1.deploy.guard import (
    GuardConfig,
    GuardDecision,
    LiveGuard,
    Verdict,
    judge,
    mixture_likelihood_ratio,
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
    config = GuardConfig(method="bayes", min_episodes=10, max_episodes=60, promote_probability=0.99)
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


def test_false_rollback_rate_under_no_difference_is_bounded_for_the_old_rule() -> None:
    """The Bayesian rule, peeking after every episode: wrong rollbacks of an overlay that is
    just as good stay under 15% (200 simulated fleets; measured 19/200 at 0.99)."""
    config = GuardConfig(method="bayes", min_episodes=20, max_episodes=300)
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


def feed(guard: LiveGuard, version: str, successes: int, episodes: int) -> None:
    for i in range(episodes):
        assert guard.observe(trajectory(version, i < successes))


def test_a_thin_control_arm_holds_the_verdict_until_it_reaches_min_episodes() -> None:
    """Issue 21: both arms must have `min_episodes`, not just the new one. The other tests grow
    both arms together, so a guard that checked only the new arm passed them all."""
    config = GuardConfig(method="bayes", min_episodes=20, max_episodes=400)
    cases = [(0, 10, Verdict.ROLLBACK), (30, 0, Verdict.PROMOTE)]  # clear harm, clear gain
    for new_successes, control_successes, once_enough in cases:
        guard = LiveGuard("new", "old", config)
        feed(guard, "new", new_successes, 30)
        feed(guard, "old", control_successes, 10)
        decision = guard.decide()
        # the evidence alone would decide, so only the control arm's minimum holds it back
        assert min(decision.p_better, 1.0 - decision.p_better) < 1e-4
        assert (decision.episodes_new, decision.episodes_control) == (30, 10)
        assert (decision.verdict, decision.reason) == (Verdict.CONTINUE, "")
        feed(guard, "old", control_successes, 10)  # the control arm reaches 20
        assert guard.decide().verdict is once_enough


def exact_probability_better(
    successes_new: int,
    episodes_new: int,
    successes_old: int,
    episodes_old: int,
    prior: tuple[int, int],
) -> Fraction:
    """P(X > Y), X ~ Beta(a1, b1), Y ~ Beta(a2, b2), integer parameters, in exact arithmetic
    and by another route than the guard's: Y's CDF is a binomial tail,
    F_Y(x) = sum_{j=a2}^{n} C(n, j) x^j (1-x)^(n-j) with n = a2 + b2 - 1, so
    P(X > Y) = E[F_Y(X)] = sum_j C(n, j) B(a1 + j, b1 + n - j) / B(a1, b1)."""

    def beta(a: int, b: int) -> Fraction:
        return Fraction(factorial(a - 1) * factorial(b - 1), factorial(a + b - 1))

    a1, b1 = successes_new + prior[0], episodes_new - successes_new + prior[1]
    a2, b2 = successes_old + prior[0], episodes_old - successes_old + prior[1]
    n = a2 + b2 - 1
    tail = sum(comb(n, j) * beta(a1 + j, b1 + n - j) for j in range(a2, n + 1))
    return tail / beta(a1, b1)


def test_probability_better_honours_an_asymmetric_prior() -> None:
    """Issue 21: every other test uses the flat (1, 1) prior, under which ignoring the prior or
    swapping its two parameters goes unseen. Checked against an exact closed form, both in
    `probability_better` and through the GuardConfig the guard builds its prior from."""
    counts, prior = (3, 10, 6, 12), (8, 2)
    expected = float(exact_probability_better(*counts, prior))
    # the case tells the prior apart from the flat one and from its swap
    for wrong in [(1, 1), (2, 8)]:
        assert abs(expected - float(exact_probability_better(*counts, wrong))) > 0.05
    assert probability_better(*counts, prior=prior) == pytest.approx(expected, abs=1e-9)
    decision = judge("new", "old", (10, 3), (12, 6), GuardConfig(method="bayes"), prior=prior)
    assert decision.p_better == pytest.approx(expected, abs=1e-9)


def test_rollback_fires_at_the_default_threshold_and_not_below_it() -> None:
    """Issue 21: the rollback threshold is 0.99, inclusive. 8/30 against 17/30 gives
    P(worse) = 0.9901 (rolled back), 9/30 against 18/30 gives 0.9896 (not yet), so a threshold
    nudged either way past 0.99 shows; at exactly the threshold the guard rolls back."""
    config = GuardConfig(method="bayes")
    assert (config.min_episodes, config.rollback_probability) == (20, 0.99)
    worse = judge("new", "old", (30, 8), (30, 17), config)
    assert 0.99 < 1.0 - worse.p_better < 0.9905
    assert (worse.verdict, worse.reason) == (Verdict.ROLLBACK, "live_guard")
    nearly = judge("new", "old", (30, 9), (30, 18), config)
    assert 0.9895 < 1.0 - nearly.p_better < 0.99
    assert nearly.verdict is Verdict.CONTINUE
    at = GuardConfig(method="bayes", rollback_probability=1.0 - worse.p_better)
    assert judge("new", "old", (30, 8), (30, 17), at).verdict is Verdict.ROLLBACK


def test_probability_better_refuses_successes_outside_0_to_episodes() -> None:
    """Each arm, each side: more successes than episodes, or fewer than none."""
    for counts in [(5, 3, 0, 0), (-1, 3, 0, 0), (0, 0, 5, 3), (0, 0, -1, 3)]:
        with pytest.raises(ValueError, match="^successes must lie within 0..episodes$"):
            probability_better(*counts)


def test_probability_better_stays_a_probability_when_the_sum_overshoots() -> None:
    """44/57 against 0/36: the exact sum is 1 - 1e-20, the float one lands just above 1."""
    assert probability_better(44, 57, 0, 36) == 1.0
    assert probability_better(0, 36, 44, 57) == pytest.approx(0.0, abs=1e-12)


def test_config_accepts_its_bounds_and_says_what_is_wrong_outside_them() -> None:
    """The bounds are the settings' own (the settings group is this config): a value outside
    them is refused naming the field and the bound, wherever the config is built."""
    GuardConfig(min_episodes=1, max_episodes=1)  # a single episode per arm is allowed
    GuardConfig(promote_probability=0.501, rollback_probability=0.999)
    with pytest.raises(ValueError, match="min_episodes\n  Input should be greater than or"):
        GuardConfig(min_episodes=0)
    with pytest.raises(ValueError, match="max_episodes=4 is below min_episodes=5; make"):
        GuardConfig(min_episodes=5, max_episodes=4)
    for name in ("promote_probability", "rollback_probability"):
        for value, bound in ((0.5, "greater than 0.5"), (1.0, "less than 1")):
            with pytest.raises(ValueError, match=f"{name}\n  Input should be {bound}"):
                GuardConfig(**{name: value})  # type: ignore[arg-type]
    for name, value in (("alpha", 0.5), ("min_detectable_effect", 0.0), ("method", "vote")):
        with pytest.raises(ValueError, match=name):
            GuardConfig(**{name: value})  # type: ignore[arg-type]
    for prior in [(0, 1), (1, 0)]:
        with pytest.raises(ValueError, match="^the Beta prior needs integer parameters >= 1$"):
            probability_better(3, 10, 6, 12, prior=prior)


def test_a_fresh_guard_continues_with_nothing_counted() -> None:
    assert LiveGuard("new", "old").decide().p_value == 1.0  # msprt: no evidence at all
    decision = LiveGuard("new", "old", GuardConfig(method="bayes")).decide()
    assert decision == GuardDecision(
        verdict=Verdict.CONTINUE,
        reason="",
        overlay_id="new",
        control_id="old",
        episodes_new=0,
        successes_new=0,
        episodes_control=0,
        successes_control=0,
        p_better=decision.p_better,
    )
    assert decision.p_better == pytest.approx(0.5)


def test_the_decision_carries_both_arms_and_promotes_at_the_threshold() -> None:
    """17/30 on the new overlay against 8/30 on the control: the whole decision, its summary
    line, and promotion when P(better) is exactly the configured promote_probability."""
    guard = LiveGuard("ov-2", "ov-1", GuardConfig(method="bayes"))
    feed(guard, "ov-2", 17, 30)
    feed(guard, "ov-1", 8, 30)
    decision = guard.decide()
    p_better = float(exact_probability_better(17, 30, 8, 30, (1, 1)))
    assert 0.99 < p_better < 0.9905  # the default promote threshold is just passed
    assert decision.p_better == pytest.approx(p_better, abs=1e-12)
    assert decision == GuardDecision(
        verdict=Verdict.PROMOTE,
        reason="",
        overlay_id="ov-2",
        control_id="ov-1",
        episodes_new=30,
        successes_new=17,
        episodes_control=30,
        successes_control=8,
        p_better=decision.p_better,
    )
    assert decision.summary() == "promote: ov-2 17/30 vs ov-1 8/30, P(better)=0.990"
    at = GuardConfig(method="bayes", promote_probability=decision.p_better)
    assert judge("ov-2", "ov-1", (30, 17), (30, 8), at).verdict is Verdict.PROMOTE
    above = GuardConfig(method="bayes", promote_probability=0.9905)
    assert judge("ov-2", "ov-1", (30, 17), (30, 8), above).verdict is Verdict.CONTINUE


def test_msprt_keeps_both_error_rates_at_alpha_under_continuous_monitoring() -> None:
    """The default rule, a look after every pair of episodes: equal arms end in a verdict (a
    wrong rollback or a wrong promotion) at most alpha = 5% of the time, with room for 300
    fleets' noise; 30% against 60% is caught every time, both ways. 2,000 fleets per case are
    in BENCHMARKS.md (benchmarks/guard_error_rates.py)."""
    config = GuardConfig()
    assert (config.method, config.alpha, config.min_episodes) == ("msprt", 0.05, 20)
    wrong = {"rollback": 0, "promote": 0}
    for seed in range(300):
        decision = run_to_end(LiveGuard("new", "old", config), 0.4, 0.4, seed)
        if decision.reason == "live_guard":
            wrong["rollback"] += 1
        elif decision.verdict is Verdict.PROMOTE:
            wrong["promote"] += 1
    assert wrong["rollback"] + wrong["promote"] <= 0.07 * 300, wrong
    for p_new, p_old, right in [(0.6, 0.3, Verdict.PROMOTE), (0.3, 0.6, Verdict.ROLLBACK)]:
        for seed in range(50):
            decision = run_to_end(LiveGuard("new", "old", config), p_new, p_old, seed)
            assert decision.verdict is right and decision.reason != "live_guard_inconclusive"


def test_msprt_verdict_at_one_over_alpha_and_its_p_value() -> None:
    config = GuardConfig(min_detectable_effect=0.2)
    # 30 vs 30 episodes, 25/30 against 10/30: clearly better (24/30 against 12/30 is not yet:
    # Lambda 18.8, short of 1/alpha = 20)
    assert judge("new", "old", (30, 24), (30, 12), config).verdict is Verdict.CONTINUE
    better = judge("new", "old", (30, 25), (30, 10), config)
    assert better.verdict is Verdict.PROMOTE and better.p_value is not None
    assert better.p_value <= config.alpha and "always-valid p=" in better.summary()
    worse = judge("new", "old", (30, 10), (30, 25), config)
    assert (worse.verdict, worse.reason) == (Verdict.ROLLBACK, "live_guard")
    close = judge("new", "old", (30, 16), (30, 14), config)
    assert close.verdict is Verdict.CONTINUE and close.p_value is not None and close.p_value > 0.05
    # an empty arm carries no evidence; every episode agreeing keeps the variance positive
    assert mixture_likelihood_ratio(0, 0, 3, 10, 0.2) == 1.0
    assert mixture_likelihood_ratio(20, 20, 20, 20, 0.2) < 1.0


def test_the_guard_reports_each_arms_forced_share() -> None:
    """Beside the arms' success: how much of each arm's steps the hooks forced."""
    from harness_r1.contracts import Step

    def played(version: str, origins: list[str]) -> Trajectory:
        base = trajectory(version, True)
        steps = [
            Step(index=i, observation="o", raw_output="", action="a", origin=origin)
            for i, origin in enumerate(origins)
        ]
        return base.model_copy(update={"steps": steps, "origins": OriginCounts.of(origins)})

    guard = LiveGuard("ov-1", "base", GuardConfig(min_episodes=1))
    assert guard.decide().forced_share_new is None  # no steps yet: no share
    guard.observe(played("ov-1", ["forced", "forced", "model", "rewritten"]))
    guard.observe(played("base", ["model", "model"]))
    decision = guard.decide()
    assert (decision.forced_share_new, decision.forced_share_control) == (0.5, 0.0)
    assert "forced share 0.50 vs 0.00" in decision.summary()
