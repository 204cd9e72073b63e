"""The promotion gate: a patch is promoted only on evidence, never by default.

Rule: delta success on its own batch > 0, AND no significant regression on a guard set of
other tasks (paired: same tasks and seeds with and without the patch), with minimum sample
sizes. Missing or too little data is "inconclusive" and inconclusive is "no".

Tests: McNemar's exact test on the discordant pairs (one-sided, for regression), or a paired
bootstrap interval of the success delta (regression if the upper bound is below -margin).

Attribution limits (`max_forced_share`, `max_patch_alone_success`; None = no limit) hold a
patch to advice: a candidate whose hooks forced more of its steps, or whose overlay wins more
tasks under the null policy (the canary's patch-alone control), than the operator allows is
rejected before its delta is weighed, with the figure and the limit in its reason. The
`advisory` profile sets both (`ADVISORY_LIMITS`); the default profile sets neither.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness_r1.contracts import CandidateResult


@dataclass(frozen=True)
class PairedOutcome:
    task_id: str
    seed: int
    base_success: bool
    patched_success: bool
    base_reward: float
    patched_reward: float


@dataclass(frozen=True)
class GateConfig:
    """Minimum sample sizes, the test and its level; `regression_margin` is the guard delta
    (a negative number's size) the bootstrap rule tolerates."""

    min_batch_tasks: int = 8
    min_guard_tasks: int = 20
    alpha: float = 0.05
    method: Literal["mcnemar", "bootstrap"] = "mcnemar"
    bootstrap_samples: int = 2000
    bootstrap_seed: int = 0
    regression_margin: float = 0.0
    max_forced_share: float | None = None
    max_patch_alone_success: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_forced_share", "max_patch_alone_success"):
            limit = getattr(self, name)
            if limit is not None and not 0.0 <= limit <= 1.0:
                raise ValueError(f"{name} must be in [0, 1] (or None), got {limit}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.min_batch_tasks < 1 or self.min_guard_tasks < 0 or self.bootstrap_samples < 100:
            raise ValueError("min_batch_tasks >= 1, min_guard_tasks >= 0, bootstrap_samples >= 100")
        if self.method not in ("mcnemar", "bootstrap"):
            raise ValueError(f"method must be mcnemar or bootstrap, got {self.method!r}")


#: The advisory profile's limits: at most 10% of steps forced, nothing won without the model.
ADVISORY_LIMITS = {"max_forced_share": 0.1, "max_patch_alone_success": 0.0}
GATE_PROFILES: dict[str, dict[str, float]] = {"default": {}, "advisory": ADVISORY_LIMITS}


def attribution_refusal(result: CandidateResult, config: GateConfig) -> str | None:
    """Why an evaluated candidate is over the operator's attribution limits (None: within
    them). The reason names the figure, the limit and the setting, for the operator and for
    the engineer whose reward sees it."""
    forced_limit = config.max_forced_share
    if forced_limit is not None:
        share = result.forced_share or 0.0
        if share > forced_limit:
            return (
                f"attribution_forced_share: the patch forced {share:.2f} of the steps "
                f"({result.origins.forced} of {result.origins.steps}); the limit is "
                f"{forced_limit:.2f} (gate.max_forced_share): advise the model, do not act for it"
            )
    alone_limit = config.max_patch_alone_success
    if alone_limit is not None:
        alone = result.patch_alone
        if alone is None:
            return (
                "attribution_patch_alone: the patch-alone control did not run, and "
                "gate.max_patch_alone_success needs it"
            )
        if alone.success_rate > alone_limit:
            return (
                f"attribution_patch_alone: the harness alone solved {alone.successes} of "
                f"{alone.tasks} tasks ({alone.success_rate:.2f}) under the null policy; the "
                f"limit is {alone_limit:.2f} (gate.max_patch_alone_success): the patch plays "
                "the task itself"
            )
    return None


@dataclass(frozen=True)
class PairedStats:
    n: int
    base_rate: float
    patched_rate: float
    improved: int  # base failed, patched succeeded
    regressed: int  # base succeeded, patched failed

    @property
    def delta(self) -> float:
        return self.patched_rate - self.base_rate


@dataclass(frozen=True)
class GateDecision:
    promote: bool
    verdict: Literal["promote", "reject", "inconclusive"]
    reasons: list[str]
    numbers: dict[str, float] = field(default_factory=dict)


def paired_stats(pairs: Sequence[PairedOutcome]) -> PairedStats:
    """Rates and discordant counts of a paired sample."""
    n = len(pairs)
    if n == 0:
        return PairedStats(0, 0.0, 0.0, 0, 0)
    return PairedStats(
        n=n,
        base_rate=sum(p.base_success for p in pairs) / n,
        patched_rate=sum(p.patched_success for p in pairs) / n,
        improved=sum(p.patched_success and not p.base_success for p in pairs),
        regressed=sum(p.base_success and not p.patched_success for p in pairs),
    )


def mcnemar_regression_p(improved: int, regressed: int) -> float:
    """One-sided exact McNemar: P(at least `regressed` regressions among the discordant pairs
    if the patch changed nothing (each discordant pair a fair coin))."""
    discordant = improved + regressed
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, k) for k in range(regressed, discordant + 1))
    return tail / 2**discordant


def bootstrap_delta_interval(
    pairs: Sequence[PairedOutcome], samples: int, alpha: float, seed: int
) -> tuple[float, float]:
    """Two-sided (1 - alpha) percentile interval of the mean paired success delta
    (resampling task pairs)."""
    if not pairs:
        return (0.0, 0.0)
    diffs = [int(p.patched_success) - int(p.base_success) for p in pairs]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choice(diffs) for _ in range(n)) / n for _ in range(samples))
    return (
        means[percentile_rank(alpha / 2, samples)],
        means[percentile_rank(1 - alpha / 2, samples)],
    )


def percentile_rank(q: float, samples: int) -> int:
    """The index of the q-quantile among `samples` sorted values: the nearest rank at or below
    q * (samples - 1), so q = 0 is the smallest value and q = 1 the largest."""
    return int(q * (samples - 1))


def reject_unevaluated(reason: str) -> GateDecision:
    """An invalid or unevaluated candidate: rejected, with the reason it could not be measured."""
    return GateDecision(False, "reject", [reason])


def decide(
    batch: Sequence[PairedOutcome], guard: Sequence[PairedOutcome] | None, config: GateConfig
) -> GateDecision:
    """Promote only on a batch gain with no significant guard regression (module docstring).

    Known limit, stated not hidden: picking the best of K candidates on the same batch is not
    corrected for; the guard set (other tasks) is what protects against promoting noise."""
    reasons: list[str] = []
    b = paired_stats(batch)
    numbers: dict[str, float] = {
        "batch_n": b.n,
        "batch_delta": b.delta,
        "batch_base_rate": b.base_rate,
        "batch_patched_rate": b.patched_rate,
    }
    if b.n < config.min_batch_tasks:
        reasons.append(f"batch has {b.n} paired tasks; the minimum is {config.min_batch_tasks}")
        return GateDecision(False, "inconclusive", reasons, numbers)
    if b.delta <= 0:
        reasons.append(f"no gain on the batch (delta {b.delta:+.3f})")
        return GateDecision(False, "reject", reasons, numbers)
    reasons.append(f"batch delta {b.delta:+.3f} over {b.n} tasks")
    g = paired_stats(guard or [])
    numbers.update(
        guard_n=g.n,
        guard_delta=g.delta,
        guard_improved=g.improved,
        guard_regressed=g.regressed,
    )
    if g.n < config.min_guard_tasks:
        reasons.append(f"guard set has {g.n} paired tasks; the minimum is {config.min_guard_tasks}")
        return GateDecision(False, "inconclusive", reasons, numbers)
    if config.method == "mcnemar":
        p = mcnemar_regression_p(g.improved, g.regressed)
        numbers["guard_regression_p"] = p
        significant = p < config.alpha and g.regressed > g.improved
        detail = f"McNemar one-sided p={p:.4f} ({g.regressed} regressed, {g.improved} improved)"
    else:
        low, high = bootstrap_delta_interval(
            guard or [], config.bootstrap_samples, config.alpha, config.bootstrap_seed
        )
        numbers.update(guard_delta_low=low, guard_delta_high=high)
        significant = high < -config.regression_margin
        detail = (
            f"bootstrap {1 - config.alpha:.0%} interval of guard delta [{low:+.3f}, {high:+.3f}]"
        )
    if significant:
        reasons.append(f"significant regression on the guard set: {detail}")
        return GateDecision(False, "reject", reasons, numbers)
    reasons.append(f"no significant regression on the guard set: {detail}")
    return GateDecision(True, "promote", reasons, numbers)
