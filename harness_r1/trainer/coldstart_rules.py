"""The cold start's rules: what a build is configured with (`ColdStartConfig`) and how each
candidate is judged against it, into keep or the rejection buckets.

Rejection buckets, in the order a candidate is judged: `unparseable`, `static:<code>`, `invalid`,
`infra_error`, `violation`, `hook_faults`, `regressive`, `no_effect` (only with
`require_effect`). A rejected candidate gets every reason that applies; the first in that order
is its bucket.

Sandbox events that count as a violation (`VIOLATION_EVENTS`; the canary's `sandbox_events`
carries each hook fault by its kind): `violation` (the worker's runtime guard stopped a forbidden
operation, e.g. file or network access), `timeout` (a call ran past its wall-clock budget and
the worker was killed), `crashed` (the worker died during a call), `memory` (a call hit the
worker's memory limit), `oversized` (a response over the size limit). Hook faults that make a
patch not cleanly executable (`HOOK_FAULT_EVENTS`): `raised` (the hook raised), `junk` (it
returned something that is not an allowed effect, or a state that is not JSON-able), `invalid`
(its hooks could not be loaded in the worker). Not counted against a patch: `veto_limit` (the
runtime took the model's action after the patch vetoed it too often: a behaviour, not a fault)
and the worker's housekeeping counters (`canary.WORKER_EVENTS`: restarts, planned recycles;
refusals and start failures already make the result an `infra_error`).

Why a module of its own: what makes a teacher's patch a training example is a decision of its
own, tested result by result (`judge`) and shared by the fault contract's tests; it reads one
canary result and the config, nothing of the files the build writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness_r1.contracts import CandidateResult, HookFaultKind
from harness_r1.trainer.prompt_config import PromptConfig
from harness_r1.trainer.propose import Proposal

__all__ = [
    "HOOK_FAULT_EVENTS",
    "VIOLATION_EVENTS",
    "ColdStartConfig",
    "judge",
]

#: Sandbox events that make a patch a violator (see the module docstring), with their meaning.
VIOLATION_EVENTS: dict[str, str] = {
    HookFaultKind.VIOLATION: "the worker's runtime guard stopped a forbidden operation",
    HookFaultKind.TIMEOUT: "a hook call ran past its wall-clock budget (worker killed)",
    HookFaultKind.CRASHED: "the worker process died during a call",
    HookFaultKind.MEMORY: "a hook call hit the worker's memory limit",
    HookFaultKind.OVERSIZED: "a hook's response was over the size limit",
}
#: Hook faults that make a patch not cleanly executable.
HOOK_FAULT_EVENTS: dict[str, str] = {
    HookFaultKind.RAISED: "the hook raised an exception",
    HookFaultKind.JUNK: "the hook returned something that is not an allowed effect (or bad state)",
    HookFaultKind.INVALID: "the patch's hooks could not be loaded in the worker",
}

UNPARSEABLE = "unparseable"
INVALID = "invalid"
INFRA_ERROR = "infra_error"
VIOLATION = "violation"
HOOK_FAULTS = "hook_faults"
REGRESSIVE = "regressive"
NO_EFFECT = "no_effect"


@dataclass(frozen=True)
class ColdStartConfig:
    """k: proposals per packet. seed: the teacher's seed (the same for every packet; the
    template teacher mixes in the packet's bytes). min_delta: the least delta success a kept
    patch has on its batch (0.0: non-regressive means delta >= 0). min_reward_delta: when set,
    also the least delta mean reward. require_no_violations / require_no_hook_faults: reject
    patches with such events (see the module docstring). require_effect: also reject a patch that
    applied no effect at all on its batch (`no_effect`: it never fired, so it teaches nothing
    about the packet; off by default). max_packets: use at most this many
    sources, in the order given. prompt: the engineer prompt's config (also the static limits
    proposals are checked against)."""

    k: int = 4
    seed: int = 0
    min_delta: float = 0.0
    min_reward_delta: float | None = None
    require_no_violations: bool = True
    require_no_hook_faults: bool = True
    require_effect: bool = False
    max_packets: int | None = None
    prompt: PromptConfig = field(default_factory=PromptConfig)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.max_packets is not None and self.max_packets < 0:
            raise ValueError(f"max_packets must be >= 0, got {self.max_packets}")

    def describe(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "seed": self.seed,
            "min_delta": self.min_delta,
            "min_reward_delta": self.min_reward_delta,
            "require_no_violations": self.require_no_violations,
            "require_no_hook_faults": self.require_no_hook_faults,
            "require_effect": self.require_effect,
            "max_packets": self.max_packets,
        }


# -- judging one canary result --------------------------------------------------------------


def violation_events(events: Mapping[str, int]) -> dict[str, int]:
    """The events of a result that count as sandbox violations (violations.<kind> included)."""
    return {
        k: v
        for k, v in sorted(events.items())
        if v and (k in VIOLATION_EVENTS or k.startswith("violations."))
    }


def hook_fault_events(events: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in sorted(events.items()) if v and k in HOOK_FAULT_EVENTS}


def judge(result: CandidateResult, config: ColdStartConfig) -> list[str]:
    """Every reason to reject a canary result, in bucket order; [] means keep it."""
    if result.status == "invalid":
        return [INVALID]
    if result.status != "evaluated":
        return [INFRA_ERROR]
    reasons = []
    if config.require_no_violations and violation_events(result.sandbox_events):
        reasons.append(VIOLATION)
    if config.require_no_hook_faults and hook_fault_events(result.sandbox_events):
        reasons.append(HOOK_FAULTS)
    delta = result.delta_success
    regressive = delta is None or delta < config.min_delta
    if config.min_reward_delta is not None:
        reward = result.delta_mean_reward
        regressive = regressive or reward is None or reward < config.min_reward_delta
    if regressive:
        reasons.append(REGRESSIVE)
    if config.require_effect and not any(result.applied_effects.values()):
        reasons.append(NO_EFFECT)
    return reasons


def proposal_reason(proposal: Proposal) -> str | None:
    """The bucket of a proposal the first two layers rejected (None when it is valid)."""
    if proposal.valid:
        return None
    if proposal.stage == "parse":
        return UNPARSEABLE
    return f"static:{proposal.reason}"
