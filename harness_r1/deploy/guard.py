"""The live guard: after a staged release, compare live success on the new overlay with the
agents kept on the previous harness (the control cohort) and promote or roll back by itself.

It looks after every batch of observations, so its test must stay valid under continuous
monitoring. Two rules (`GuardConfig.method`):

- `msprt` (the default): a mixture sequential probability ratio test (Johari, Pekelis, Walsh,
  "Always valid inference", the rule of online experimentation platforms). The difference of
  the two success rates is tested against 0 with a normal mixing distribution N(0, tau^2) over
  the effect (tau = `min_detectable_effect`: the size the test finds fastest) and the pooled
  binomial variance; the mixture likelihood ratio Lambda is a martingale under equal arms, so
  P(Lambda ever reaches 1/alpha) <= alpha however often it is looked at. A verdict needs
  Lambda >= 1/alpha: promote if the new arm is ahead, roll back if behind. Equal arms therefore
  end in a wrong verdict (promotion or rollback) at most `alpha` of the time in all (the normal
  approximation is why `min_episodes` stays at 20: the error rates are measured by simulation,
  BENCHMARKS.md "The live guard's error rates"). The always-valid p-value is min(1, 1/Lambda).
- `bayes` (the old rule): Beta(prior) on each arm, promote when P(new > control) reaches
  `promote_probability`, roll back when P(new < control) reaches `rollback_probability`. Read
  after every episode its error rates exceed what the probabilities suggest (equal arms were
  wrongly rolled back 9.5% of the time at 0.99); kept for comparison and for demos.

Under both, a verdict waits for `min_episodes` on each arm, and if none has come by the time
the new arm has `max_episodes` (whatever the control arm has: it may be thin or empty) the result
is inconclusive and, as the gate says, inconclusive is not promoted: the overlay is rolled back
with reason `live_guard_inconclusive`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from harness_r1.contracts import OriginCounts, Trajectory


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class GuardConfig:
    """The live guard after a staged release (see harness_r1/deploy/guard.py for the rule).

    The one declaration of the guard's settings: the daemon's settings group `guard` is this
    class (a pydantic dataclass: defaults, bounds and descriptions are read from its fields,
    and checked wherever it is built), so a default or a bound is written here and nowhere
    else. The Beta prior of `bayes` is no setting: `judge` takes it (flat by default)."""

    method: Literal["msprt", "bayes"] = Field(
        default="msprt",
        description="msprt: an always-valid sequential test (wrong verdicts on equal arms at "
        "most `alpha` however often it looks); bayes: the older posterior-probability rule.",
    )
    # msprt: the chance that equal arms get any verdict (rollback or promotion), however often
    # the guard looks; and the effect size (absolute success rate) it is tuned to find fastest
    alpha: float = Field(
        default=0.05,
        gt=0,
        lt=0.5,
        description="msprt: the chance that an overlay as good as its control is promoted or "
        "rolled back anyway (both together).",
    )
    min_detectable_effect: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="msprt: the success-rate difference the test is tuned to find fastest "
        "(0.2 = 20 points); smaller ones are found too, with more episodes.",
    )
    min_episodes: int = Field(
        default=20, ge=1, description="Episodes per arm before the guard may decide."
    )
    max_episodes: int = Field(
        default=400,
        ge=1,
        description="Episodes per arm after which an undecided release is rolled back "
        "(inconclusive is not promoted).",
    )
    # 0.99, not 0.95: the test is re-run after every episode, and with 0.95 a fleet where
    # both arms are equal was wrongly rolled back 23% of the time (0.99: 9.5%; 200 simulated
    # fleets, tests/deploy/test_guard.py), while 30% vs 60% is still caught every time.
    promote_probability: float = Field(
        default=0.99,
        gt=0.5,
        lt=1,
        description="bayes: P(new > control) that promotes; the test re-runs after every "
        "batch, so keep it high (0.95 rolled back equal arms 23% of the time).",
    )
    rollback_probability: float = Field(
        default=0.99, gt=0.5, lt=1, description="bayes: P(new < control) that rolls back."
    )

    def __post_init__(self) -> None:
        if self.max_episodes < self.min_episodes:
            raise ValueError(
                f"max_episodes={self.max_episodes} is below min_episodes={self.min_episodes}; "
                "make max_episodes >= min_episodes (e.g. 20 and 400)"
            )


def probability_better(
    successes_new: int,
    episodes_new: int,
    successes_old: int,
    episodes_old: int,
    prior: tuple[int, int] = (1, 1),
) -> float:
    """Exact P(p_new > p_old) for independent Beta posteriors (integer first parameter).

    Closed form (Evan Miller, "Formulas for Bayesian A/B testing"): a finite sum of Beta
    function ratios, evaluated in log space so thousands of episodes stay stable."""
    if min(prior) < 1:
        raise ValueError("the Beta prior needs integer parameters >= 1")
    a_new = successes_new + prior[0]
    b_new = episodes_new - successes_new + prior[1]
    a_old = successes_old + prior[0]
    b_old = episodes_old - successes_old + prior[1]
    if min(a_new, b_new, a_old, b_old) < 1:
        raise ValueError("successes must lie within 0..episodes")
    base = _log_beta(a_old, b_old)
    total = 0.0
    for i in range(a_new):
        total += math.exp(
            _log_beta(a_old + i, b_old + b_new)
            - math.log(b_new + i)
            - _log_beta(1 + i, b_new)
            - base
        )
    return min(1.0, max(0.0, total))


def mixture_likelihood_ratio(
    successes_new: int,
    episodes_new: int,
    successes_old: int,
    episodes_old: int,
    tau: float,
) -> float:
    """Lambda of the two-sample mSPRT for success rates: N(0, tau^2) mixture over the
    difference, pooled binomial variance (one pseudo-success and one pseudo-failure keep it
    above 0 when every episode so far agrees). 1.0 while an arm is empty."""
    if episodes_new == 0 or episodes_old == 0:
        return 1.0
    if not (0 <= successes_new <= episodes_new and 0 <= successes_old <= episodes_old):
        raise ValueError("successes must lie within 0..episodes")
    delta = successes_new / episodes_new - successes_old / episodes_old
    pooled = (successes_new + successes_old + 1) / (episodes_new + episodes_old + 2)
    variance = pooled * (1.0 - pooled) * (1.0 / episodes_new + 1.0 / episodes_old)
    t2 = tau * tau
    log_ratio = 0.5 * math.log(variance / (variance + t2)) + (delta * delta * t2) / (
        2.0 * variance * (variance + t2)
    )
    return math.exp(min(log_ratio, 700.0))


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


class Verdict(StrEnum):
    CONTINUE = "continue"
    PROMOTE = "promote"
    ROLLBACK = "rollback"


@dataclass(frozen=True)
class GuardDecision:
    verdict: Verdict
    reason: str  # "live_guard" | "live_guard_inconclusive" | "" ; the rollback reason label
    overlay_id: str
    control_id: str
    episodes_new: int
    successes_new: int
    episodes_control: int
    successes_control: int
    p_better: float  # bayes: P(new > control); msprt: 1 if the new arm is ahead, else 0
    p_value: float | None = None  # msprt: the always-valid p-value, min(1, 1 / Lambda)
    # each arm's share of steps a hook forced (None: not read): how much of each arm's success
    # the harness decided rather than the model
    forced_share_new: float | None = None
    forced_share_control: float | None = None

    def summary(self) -> str:
        evidence = (
            f"P(better)={self.p_better:.3f}"
            if self.p_value is None
            else f"always-valid p={self.p_value:.4f}"
        )
        forced = ""
        if self.forced_share_new is not None or self.forced_share_control is not None:
            forced = (
                f", forced share {_share(self.forced_share_new)} vs "
                f"{_share(self.forced_share_control)}"
            )
        return (
            f"{self.verdict.value}: {self.overlay_id} {self.successes_new}/{self.episodes_new}"
            f" vs {self.control_id} {self.successes_control}/{self.episodes_control},"
            f" {evidence}{forced}"
        )


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@dataclass
class _Arm:
    episodes: int = 0
    successes: int = 0
    origins: OriginCounts = field(default_factory=OriginCounts)


@dataclass
class LiveGuard:
    """Watches one staged overlay against its control harness (the parent overlay or base)."""

    overlay_id: str
    control_id: str
    config: GuardConfig = field(default_factory=GuardConfig)
    _arms: dict[str, _Arm] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)

    def observe(self, trajectory: Trajectory) -> bool:
        """Count one finished episode if it ran under either arm; redeliveries count once."""
        version = trajectory.harness_version
        if version not in (self.overlay_id, self.control_id):
            return False
        if trajectory.trajectory_id in self._seen:
            return False
        self._seen.add(trajectory.trajectory_id)
        arm = self._arms.setdefault(version, _Arm())
        arm.episodes += 1
        arm.successes += int(trajectory.outcome.success)
        arm.origins = arm.origins + trajectory.origins
        return True

    def decide(self) -> GuardDecision:
        new = self._arms.get(self.overlay_id, _Arm())
        old = self._arms.get(self.control_id, _Arm())
        decision = judge(
            self.overlay_id,
            self.control_id,
            (new.episodes, new.successes),
            (old.episodes, old.successes),
            self.config,
        )
        return replace(
            decision,
            forced_share_new=new.origins.measured_forced_share,
            forced_share_control=old.origins.measured_forced_share,
        )


def judge(
    overlay_id: str,
    control_id: str,
    new: tuple[int, int],
    old: tuple[int, int],
    config: GuardConfig,
    prior: tuple[int, int] = (1, 1),
) -> GuardDecision:
    """The verdict from (episodes, successes) per arm: what the daemon calls with counts read
    from its store, and what LiveGuard calls with the trajectories it observed (`prior`: the
    Beta prior of `bayes`, (successes, failures))."""
    p_value: float | None = None
    verdict, reason = Verdict.CONTINUE, ""
    enough = min(new[0], old[0]) >= config.min_episodes
    if config.method == "msprt":
        ratio = mixture_likelihood_ratio(
            new[1], new[0], old[1], old[0], config.min_detectable_effect
        )
        p_value = min(1.0, 1.0 / ratio)
        ahead = new[0] > 0 and old[0] > 0 and new[1] / new[0] > old[1] / old[0]
        p_better = 1.0 if ahead else 0.0
        if enough and ratio >= 1.0 / config.alpha:
            verdict = Verdict.PROMOTE if ahead else Verdict.ROLLBACK
            reason = "" if ahead else "live_guard"
    else:
        p_better = probability_better(new[1], new[0], old[1], old[0], prior)
        # continuous posteriors: P(new == old) is 0, so P(old better) is the complement
        if enough:
            if 1.0 - p_better >= config.rollback_probability:
                verdict, reason = Verdict.ROLLBACK, "live_guard"
            elif p_better >= config.promote_probability:
                verdict = Verdict.PROMOTE
    if verdict is Verdict.CONTINUE and new[0] >= config.max_episodes:
        # The new arm has had its share; an empty or thin control arm (every agent hashed into
        # the cohort, or its agents moved away) must not keep an overlay in canary forever.
        verdict, reason = Verdict.ROLLBACK, "live_guard_inconclusive"
    return GuardDecision(
        verdict=verdict,
        reason=reason,
        overlay_id=overlay_id,
        control_id=control_id,
        episodes_new=new[0],
        successes_new=new[1],
        episodes_control=old[0],
        successes_control=old[1],
        p_better=p_better,
        p_value=p_value,
    )
