from __future__ import annotations

import math
import random

import pytest

from harness_r1.sandbox.gate import (
    GateConfig,
    GateDecision,
    PairedOutcome,
    PairedStats,
    bootstrap_delta_interval,
    decide,
    mcnemar_regression_p,
    paired_stats,
    percentile_rank,
    reject_unevaluated,
)


def pairs(both: int, improved: int, regressed: int, neither: int) -> list[PairedOutcome]:
    rows = [(True, True)] * both + [(False, True)] * improved
    rows += [(True, False)] * regressed + [(False, False)] * neither
    return [
        PairedOutcome(f"t{i}", i, base, patched, float(base), float(patched))
        for i, (base, patched) in enumerate(rows)
    ]


def test_mcnemar_hand_computed() -> None:
    # 0 improved, 5 regressed: P(X >= 5 | n=5, 1/2) = 1/32
    assert mcnemar_regression_p(0, 5) == pytest.approx(1 / 32)
    # 1 improved, 6 regressed: P(X >= 6 | n=7) = (C(7,6) + C(7,7)) / 128 = 8/128
    assert mcnemar_regression_p(1, 6) == pytest.approx(8 / 128)
    assert mcnemar_regression_p(3, 3) == pytest.approx(
        sum(math.comb(6, k) for k in range(3, 7)) / 64
    )
    assert mcnemar_regression_p(0, 0) == 1.0


def test_paired_stats() -> None:
    s = paired_stats(pairs(2, 3, 1, 4))
    assert (s.n, s.improved, s.regressed) == (10, 3, 1)
    assert s.base_rate == pytest.approx(0.3) and s.patched_rate == pytest.approx(0.5)
    assert s.delta == pytest.approx(0.2)


def test_promotes_a_gain_with_a_clean_guard() -> None:
    decision = decide(
        pairs(0, 3, 0, 7), pairs(10, 1, 1, 10), GateConfig(min_batch_tasks=8, min_guard_tasks=20)
    )
    assert decision.promote and decision.verdict == "promote"
    assert decision.numbers["batch_delta"] == pytest.approx(0.3)
    assert any("no significant regression" in r for r in decision.reasons)


def test_rejects_no_gain() -> None:
    decision = decide(pairs(2, 1, 1, 6), pairs(20, 0, 0, 0), GateConfig())
    assert not decision.promote and decision.verdict == "reject"
    assert "no gain" in decision.reasons[0]


def test_rejects_significant_guard_regression() -> None:
    decision = decide(pairs(0, 4, 0, 6), pairs(10, 0, 6, 10), GateConfig(min_guard_tasks=20))
    assert not decision.promote and decision.verdict == "reject"
    assert decision.numbers["guard_regression_p"] == pytest.approx(1 / 64)


def test_small_regression_is_not_significant() -> None:
    decision = decide(pairs(0, 4, 0, 6), pairs(10, 0, 2, 10), GateConfig(min_guard_tasks=20))
    assert decision.promote  # p = 1/4: not significant at 0.05


@pytest.mark.parametrize("guard", [None, []])
def test_no_guard_data_is_inconclusive(guard: list[PairedOutcome] | None) -> None:
    decision = decide(pairs(0, 4, 0, 6), guard, GateConfig())
    assert not decision.promote and decision.verdict == "inconclusive"


def test_too_small_batch_is_inconclusive() -> None:
    decision = decide(pairs(0, 2, 0, 1), pairs(20, 0, 0, 0), GateConfig(min_batch_tasks=8))
    assert not decision.promote and decision.verdict == "inconclusive"


def test_bootstrap_method() -> None:
    config = GateConfig(method="bootstrap", min_guard_tasks=20)
    bad = decide(pairs(0, 4, 0, 6), pairs(5, 0, 12, 5), config)
    assert not bad.promote and bad.numbers["guard_delta_high"] < 0
    fine = decide(pairs(0, 4, 0, 6), pairs(20, 1, 1, 0), config)
    assert fine.promote


def test_bootstrap_interval_is_deterministic_and_brackets_the_mean() -> None:
    data = pairs(5, 6, 2, 7)
    low, high = bootstrap_delta_interval(data, 1000, 0.05, seed=3)
    assert (low, high) == bootstrap_delta_interval(data, 1000, 0.05, seed=3)
    assert low < 0.2 < high


@pytest.mark.parametrize(
    "bad",
    [
        {"alpha": 0.0},
        {"alpha": 1.5},
        {"min_batch_tasks": 0},
        {"bootstrap_samples": 5},
        {"method": "vibes"},
    ],
)
def test_gate_config_is_validated(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        GateConfig(**bad)  # type: ignore[arg-type]


def test_unevaluated_candidates_are_rejected_with_their_reason() -> None:
    decision = reject_unevaluated("invalid: banned_import")
    assert not decision.promote and decision.verdict == "reject"
    assert decision.reasons == ["invalid: banned_import"]


@pytest.mark.parametrize("minimum", [1, 8, 12])
def test_batch_minimum_is_inclusive(minimum: int) -> None:
    """n = minimum - 1 paired batch tasks is inconclusive; n = minimum is judged."""
    config = GateConfig(min_batch_tasks=minimum, min_guard_tasks=20)
    guard = pairs(20, 0, 0, 0)
    short = decide(pairs(0, 1, 0, minimum - 2) if minimum > 1 else [], guard, config)
    assert short.verdict == "inconclusive" and short.numbers["batch_n"] == minimum - 1
    enough = decide(pairs(0, 1, 0, minimum - 1), guard, config)
    assert enough.verdict == "promote" and enough.numbers["batch_n"] == minimum


@pytest.mark.parametrize("minimum", [1, 20])
def test_guard_minimum_is_inclusive(minimum: int) -> None:
    """n = minimum - 1 paired guard tasks is inconclusive; n = minimum is judged."""
    config = GateConfig(min_batch_tasks=8, min_guard_tasks=minimum)
    batch = pairs(0, 4, 0, 6)
    short = decide(batch, pairs(minimum - 1, 0, 0, 0), config)
    assert short.verdict == "inconclusive" and short.numbers["guard_n"] == minimum - 1
    assert decide(batch, pairs(minimum, 0, 0, 0), config).verdict == "promote"


def test_guard_with_as_many_gains_as_losses_is_never_a_regression() -> None:
    """McNemar's p is at least 0.5 when regressions do not outnumber improvements, so only a
    loose alpha tells the rule's second half (`regressed > improved`) from the p-value alone."""
    decision = decide(pairs(0, 4, 0, 6), pairs(18, 1, 1, 0), GateConfig(alpha=0.9))
    assert decision.numbers["guard_regression_p"] == pytest.approx(0.75)
    assert decision.verdict == "promote"


def test_bootstrap_regression_margin_is_a_strict_bound() -> None:
    """The bootstrap rule rejects only when the whole interval lies below -margin."""
    guard = pairs(0, 0, 20, 0)  # every guard task regressed: interval is exactly [-1, -1]
    batch = pairs(0, 4, 0, 6)

    def verdict(margin: float) -> str:
        config = GateConfig(min_guard_tasks=20, method="bootstrap", regression_margin=margin)
        return decide(batch, guard, config).verdict

    assert verdict(0.99) == "reject"
    assert verdict(1.0) == "promote"  # high == -margin: not below it


def test_percentile_rank_is_the_nearest_rank_at_or_below() -> None:
    assert [percentile_rank(q, 2000) for q in (0.0, 0.025, 0.975, 1.0)] == [0, 49, 1949, 1999]
    assert [percentile_rank(q, 101) for q in (0.15, 0.5, 0.85)] == [15, 50, 85]
    assert percentile_rank(0.149, 101) == 14


def test_bootstrap_interval_of_no_pairs_is_zero() -> None:
    assert bootstrap_delta_interval([], 2000, 0.05, seed=0) == (0.0, 0.0)


def test_bootstrap_interval_depends_on_its_seed_only() -> None:
    data = pairs(3, 9, 4, 4)
    intervals = {bootstrap_delta_interval(data, 100, 0.5, seed=s) for s in range(8)}
    assert len(intervals) > 1  # the seed is used
    assert bootstrap_delta_interval(data, 100, 0.5, seed=5) == bootstrap_delta_interval(
        data, 100, 0.5, seed=5
    )


BATCH_GAIN = pairs(0, 4, 0, 6)  # 10 tasks, 0.0 -> 0.4
BATCH_NUMBERS = {
    "batch_n": 10,
    "batch_delta": 0.4,
    "batch_base_rate": 0.0,
    "batch_patched_rate": 0.4,
}


def test_a_short_batch_decision_in_full() -> None:
    decision = decide(pairs(0, 2, 0, 1), pairs(20, 0, 0, 0), GateConfig(min_batch_tasks=8))
    assert decision == GateDecision(
        False,
        "inconclusive",
        ["batch has 3 paired tasks; the minimum is 8"],
        {"batch_n": 3, "batch_delta": 2 / 3, "batch_base_rate": 0.0, "batch_patched_rate": 2 / 3},
    )


def test_a_no_gain_decision_in_full() -> None:
    decision = decide(pairs(2, 1, 1, 6), pairs(20, 0, 0, 0), GateConfig())
    numbers = {"batch_n": 10, "batch_delta": 0.0, "batch_base_rate": 0.3, "batch_patched_rate": 0.3}
    assert decision == GateDecision(
        False, "reject", ["no gain on the batch (delta +0.000)"], numbers
    )


def test_a_short_guard_decision_in_full() -> None:
    decision = decide(BATCH_GAIN, pairs(5, 0, 0, 5), GateConfig(min_guard_tasks=20))
    guard = {"guard_n": 10, "guard_delta": 0.0, "guard_improved": 0, "guard_regressed": 0}
    assert decision == GateDecision(
        False,
        "inconclusive",
        ["batch delta +0.400 over 10 tasks", "guard set has 10 paired tasks; the minimum is 20"],
        BATCH_NUMBERS | guard,
    )


def test_a_mcnemar_rejection_in_full() -> None:
    decision = decide(BATCH_GAIN, pairs(10, 0, 6, 10), GateConfig(min_guard_tasks=20))
    guard = {
        "guard_n": 26,
        "guard_delta": 10 / 26 - 16 / 26,
        "guard_improved": 0,
        "guard_regressed": 6,
        "guard_regression_p": 1 / 64,
    }
    assert decision == GateDecision(
        False,
        "reject",
        [
            "batch delta +0.400 over 10 tasks",
            "significant regression on the guard set: McNemar one-sided p=0.0156 "
            "(6 regressed, 0 improved)",
        ],
        BATCH_NUMBERS | guard,
    )


def test_a_mcnemar_promotion_in_full() -> None:
    decision = decide(BATCH_GAIN, pairs(10, 1, 1, 10), GateConfig(min_guard_tasks=20))
    guard = {
        "guard_n": 22,
        "guard_delta": 0.0,
        "guard_improved": 1,
        "guard_regressed": 1,
        "guard_regression_p": 0.75,
    }
    assert decision == GateDecision(
        True,
        "promote",
        [
            "batch delta +0.400 over 10 tasks",
            "no significant regression on the guard set: McNemar one-sided p=0.7500 "
            "(1 regressed, 1 improved)",
        ],
        BATCH_NUMBERS | guard,
    )


def test_mcnemar_p_at_exactly_alpha_is_not_significant() -> None:
    """p = 1/64 with alpha = 1/64: the rule is p < alpha."""
    decision = decide(BATCH_GAIN, pairs(10, 0, 6, 10), GateConfig(alpha=1 / 64))
    assert decision.verdict == "promote"


def test_a_bootstrap_rejection_in_full() -> None:
    config = GateConfig(min_guard_tasks=20, method="bootstrap")
    decision = decide(BATCH_GAIN, pairs(0, 0, 20, 0), config)
    guard = {
        "guard_n": 20,
        "guard_delta": -1.0,
        "guard_improved": 0,
        "guard_regressed": 20,
        "guard_delta_low": -1.0,
        "guard_delta_high": -1.0,
    }
    assert decision == GateDecision(
        False,
        "reject",
        [
            "batch delta +0.400 over 10 tasks",
            "significant regression on the guard set: "
            "bootstrap 95% interval of guard delta [-1.000, -1.000]",
        ],
        BATCH_NUMBERS | guard,
    )


def test_the_bootstrap_rule_uses_the_configured_seed() -> None:
    """For several seeds, on a guard large and a resample count small enough that unseeded
    intervals differ from run to run: the gate's interval is the seeded one every time."""
    guard = pairs(8, 3, 5, 6)
    config = GateConfig(min_guard_tasks=20, method="bootstrap", bootstrap_seed=11)
    numbers = decide(BATCH_GAIN, guard, config).numbers
    expected = bootstrap_delta_interval(guard, config.bootstrap_samples, config.alpha, seed=11)
    assert (numbers["guard_delta_low"], numbers["guard_delta_high"]) == expected
    wide = pairs(60, 40, 50, 50)
    for seed in range(5):
        small = GateConfig(
            min_guard_tasks=20, method="bootstrap", bootstrap_samples=100, bootstrap_seed=seed
        )
        got = decide(BATCH_GAIN, wide, small).numbers
        seeded = bootstrap_delta_interval(wide, 100, small.alpha, seed=seed)
        assert (got["guard_delta_low"], got["guard_delta_high"]) == seeded
    assert (
        decide(BATCH_GAIN, guard, config)
        .reasons[-1]
        .startswith("no significant regression on the guard set: bootstrap 95% interval")
    )


MINIMA = "min_batch_tasks >= 1, min_guard_tasks >= 0, bootstrap_samples >= 100"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("alpha", 1.0, r"^alpha must be in \(0, 1\), got 1.0$"),
        ("min_guard_tasks", -1, f"^{MINIMA}$"),
        ("bootstrap_samples", 99, f"^{MINIMA}$"),
        ("method", "vibes", "^method must be mcnemar or bootstrap, got 'vibes'$"),
    ],
)
def test_gate_config_refusals_name_the_rule(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GateConfig(**{field: value})  # type: ignore[arg-type]


def test_gate_config_accepts_its_boundaries() -> None:
    config = GateConfig(min_batch_tasks=1, min_guard_tasks=0, bootstrap_samples=100)
    assert (config.min_batch_tasks, config.min_guard_tasks, config.bootstrap_samples) == (1, 0, 100)


def test_paired_stats_of_nothing_is_all_zero() -> None:
    assert paired_stats([]) == PairedStats(0, 0.0, 0.0, 0, 0)


def test_mcnemar_p_values() -> None:
    assert mcnemar_regression_p(0, 0) == 1.0
    assert mcnemar_regression_p(1, 0) == 1.0  # one discordant pair, no regression
    assert mcnemar_regression_p(0, 1) == 0.5
    assert mcnemar_regression_p(2, 1) == 7 / 8


def test_unevaluated_rejection_in_full() -> None:
    assert reject_unevaluated("infra: x") == GateDecision(False, "reject", ["infra: x"])


def test_bootstrap_interval_is_the_alpha_over_2_percentile_pair_of_resampled_means() -> None:
    """The documented procedure: resample the task pairs `samples` times with Random(seed),
    sort the means, take the ranks of alpha/2 and 1 - alpha/2. 400 tasks make the means fine
    grained, so a neighbouring quantile gives another value."""
    data = pairs(0, 300, 100, 0)
    diffs = [int(p.patched_success) - int(p.base_success) for p in data]
    rng = random.Random(7)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(2000))
    low, high = bootstrap_delta_interval(data, 2000, 0.2, seed=7)
    assert (low, high) == (means[199], means[1799])
    assert len({means[133], means[199], means[799]}) == 3  # other quantiles differ here
    assert len({means[1866], means[1799], means[1199]}) == 3
