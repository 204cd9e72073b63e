"""Graded rewards for patches that never reached a fair canary comparison.

The paper's reward is the canary delta, and every patch that does not parse or check gets one
flat `invalid_reward`. That is right for a strong engineer. A 135M engineer early in training
writes mostly invalid patches, and a GRPO group whose samples are all invalid has every reward
equal, so zero advantage and no gradient: validity itself cannot be learned from such groups.
`InvalidRewardShape` grades the failure by how far the completion got through the sandbox's
layers, so a group of a missing block and a bad JSON string still ranks its samples:

  no patch block / too large        1.0   x invalid_reward
  no hook section, JSON undecodable 0.75
  JSON is not a patch for this env  0.5
  a template call naming wrongly    0.5   (bad_template_call: trainer/template_calls.py)
  a static check refused it         0.25
  the runner's validator refused it 0.25
  evaluated, but over the gate's     0.25  (attribution limits: forced share, patch-alone
    attribution limits                       success; sandbox/gate.py)
  evaluated, but its hooks faulted  delta + 0.125 x invalid_reward

A hook that faults is skipped by the harness (fail-open), so a faulting patch usually scores
the delta of no patch; the small fault term ranks a patch that runs cleanly above one that
only survives because the harness ignores it. With `graded=False` every invalid patch gets
`invalid_reward` and an evaluated patch its delta: the paper's reward, the default.

Under attribution limits (`attribution`, the gate's config: the advisory profile), a patch the
gate rejects for forcing the model's actions or winning without it is rewarded as refused,
never with its delta: the engineer learns that a solver is not what the operator asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness_r1.contracts import CandidateResult
from harness_r1.sandbox import WORKER_EVENTS, GateConfig, attribution_refusal

# How much of `invalid_reward` each failure keeps (1.0: the whole penalty).
PARSE_WEIGHTS: Mapping[str, float] = {
    "too_large": 1.0,
    "no_patch_block": 1.0,
    "invalid_json": 0.75,
    "invalid_patch": 0.5,
    "env_mismatch": 0.5,
    "bad_template_call": 0.5,  # a call in shape, a template or value wrong (template_calls)
}
STATIC_WEIGHT = 0.25
RUNNER_REFUSED_WEIGHT = 0.25
ATTRIBUTION_WEIGHT = 0.25
FAULT_WEIGHT = 0.125


@dataclass(frozen=True)
class InvalidRewardShape:
    """The reward of a patch by how far it got (see the module); flat unless `graded`."""

    invalid_reward: float = 0.0
    graded: bool = False
    attribution: GateConfig | None = None  # the gate whose attribution limits apply

    def __post_init__(self) -> None:
        if self.graded and self.invalid_reward >= 0:
            raise ValueError(
                "graded invalid rewards need a negative invalid_reward (with 0 nothing is "
                f"graded; a positive one ranks the worst failures best), got {self.invalid_reward}"
            )

    def rejected(self, stage: str | None, reason: str | None) -> float:
        """A proposal refused before the canary ran: `stage` "parse" (with the ParseCode as
        `reason`), "static", "scope" (a hook the engineer may not write; graded as a runner
        refusal), "runner" (the runner's own validator) or "attribution" (over the gate's
        attribution limits)."""
        if not self.graded:
            return self.invalid_reward
        if stage == "attribution":
            return self.invalid_reward * ATTRIBUTION_WEIGHT
        if stage == "parse":
            return self.invalid_reward * PARSE_WEIGHTS.get(str(reason), 1.0)
        if stage == "static":
            return self.invalid_reward * STATIC_WEIGHT
        return self.invalid_reward * RUNNER_REFUSED_WEIGHT

    def of_result(self, result: CandidateResult, metric: str = "delta_success") -> float | None:
        """A canary result's reward: its `metric` delta when evaluated, the runner-refusal
        grade when its validator refused it, None (no reward) for an infrastructure error or
        a missing delta. The one place the trainer and the daemon map results to rewards."""
        if result.status == "invalid":
            return self.rejected("runner", result.invalid_reason)
        if result.status == "evaluated" and self.attribution is not None:
            over = attribution_refusal(result, self.attribution)
            if over is not None:
                return self.rejected("attribution", over)
        value = getattr(result, metric) if result.status == "evaluated" else None
        return None if value is None else self.evaluated(float(value), result.sandbox_events)

    def evaluated(self, delta: float, sandbox_events: Mapping[str, int]) -> float:
        """An evaluated patch: its delta, plus the (negative) fault term when graded and a
        hook faulted."""
        if not self.graded or not hook_faulted(sandbox_events):
            return delta
        return delta + self.invalid_reward * FAULT_WEIGHT


def hook_faulted(sandbox_events: Mapping[str, int]) -> bool:
    """Whether any hook fault (not a worker restart or recycle) was counted."""
    return any(n > 0 for key, n in sandbox_events.items() if key not in WORKER_EVENTS)
