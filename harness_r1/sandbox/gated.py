"""A candidate group through the canary and the promotion gate in one call.

Shared by `harness-r1 canary` and the daemon, so both decide with the same rule: the batch run
(paired, shared baseline) gives each candidate's delta; a guard run on other tasks gives the
regression check; `gate.decide` turns both into promote / reject with its numbers. A candidate
the canary did not evaluate (invalid, refused) is rejected with the canary's reason, and one
over the attribution limits (forced share, patch-alone success) with that figure and limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from harness_r1.contracts import CanaryReport, CandidateResult
from harness_r1.sandbox.canary import BASE_INCUMBENT, CanaryBatch, Candidate, Incumbent
from harness_r1.sandbox.gate import (
    GateConfig,
    GateDecision,
    PairedOutcome,
    attribution_refusal,
    decide,
    reject_unevaluated,
)


class Evaluator(Protocol):
    """What is needed of a runner (`sandbox.canary.CanaryRunner` is one)."""

    def evaluate(
        self,
        batch: CanaryBatch,
        candidates: Sequence[Candidate],
        incumbent: Incumbent = ...,
        *,
        patch_alone: bool = ...,
    ) -> CanaryReport: ...


@dataclass(frozen=True)
class GatedReport:
    report: CanaryReport
    guard: CanaryReport | None
    decisions: dict[str, GateDecision]


def pairs_of(result: CandidateResult) -> list[PairedOutcome]:
    return [PairedOutcome(**p.model_dump()) for p in result.pairs]


def run_gated(
    runner: Evaluator,
    batch: CanaryBatch,
    guard_batch: CanaryBatch | None,
    candidates: Sequence[Candidate],
    gate: GateConfig,
    incumbent: Incumbent = BASE_INCUMBENT,
) -> GatedReport:
    """Both runs judge the candidates composed onto `incumbent` against `incumbent`."""
    report = runner.evaluate(batch, candidates, incumbent)
    over_limits = {
        r.candidate_id: refusal
        for r in report.candidates
        if r.status == "evaluated" and (refusal := attribution_refusal(r, gate)) is not None
    }
    evaluated = {r.candidate_id for r in report.candidates if r.status == "evaluated"}
    # a candidate the batch already rejects (unevaluated, over a limit) costs no guard run
    judged = [
        c for c in candidates if c.candidate_id in evaluated and c.candidate_id not in over_limits
    ]
    guard = None
    if guard_batch is not None and judged:
        # the patch-alone control is the batch's: the guard asks only about regressions
        guard = runner.evaluate(guard_batch, judged, incumbent, patch_alone=False)
    guard_by_id = {c.candidate_id: c for c in guard.candidates} if guard else {}
    decisions: dict[str, GateDecision] = {}
    for result in report.candidates:
        if result.status != "evaluated":
            reason = f"{result.status}: {result.invalid_reason}"
            decisions[result.candidate_id] = reject_unevaluated(reason)
            continue
        if result.candidate_id in over_limits:
            decisions[result.candidate_id] = reject_unevaluated(over_limits[result.candidate_id])
            continue
        guard_result = guard_by_id.get(result.candidate_id)
        guard_pairs = pairs_of(guard_result) if guard_result else None
        decisions[result.candidate_id] = decide(pairs_of(result), guard_pairs, gate)
    return GatedReport(report, guard, decisions)


def best_promoted(gated: GatedReport) -> tuple[str, float] | None:
    """The promoted candidate with the largest batch delta (ties: the larger candidate id, for
    a stable choice), as (candidate id, delta); None when the gate promoted nothing."""
    results = {r.candidate_id: r for r in gated.report.candidates}
    winners = [
        (results[cid].delta_success or 0.0, cid)
        for cid, decision in gated.decisions.items()
        if decision.promote
    ]
    if not winners:
        return None
    delta, cid = max(winners)
    return cid, delta
