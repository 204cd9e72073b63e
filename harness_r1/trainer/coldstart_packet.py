"""One packet of the cold start: the teacher's K proposals, checked, run through the canary
together and judged, each written as a kept SFT row or a rejected row with its provenance.

A kept proposal becomes one SFT row in TRL's conversational prompt/completion format:
`{"prompt": engineer_messages(packet), "completion": [{"role": "assistant", "content": text}],
"metadata": {...provenance...}}` (SFTTrainer trains on the completion only). A rejected one
becomes a row of the rejected file (same provenance, plus the reasons and the text), so nothing
the teacher wrote is lost.

Why a module of its own: the work and the rows of one packet, from the teacher's texts to the
rows' provenance, are what the cold start repeats per packet; the build around it only picks the
canary, writes the files and sums the counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import structlog

from harness_r1.contracts import (
    CanaryReport,
    CandidateResult,
    EffectKind,
    FailurePacket,
    Patch,
)
from harness_r1.sandbox import WORKER_EVENTS, CanaryRunner, Candidate, InfraFailure
from harness_r1.trainer.coldstart_rules import (
    HOOK_FAULTS,
    INFRA_ERROR,
    NO_EFFECT,
    REGRESSIVE,
    VIOLATION,
    ColdStartConfig,
    hook_fault_events,
    judge,
    proposal_reason,
    violation_events,
)
from harness_r1.trainer.coldstart_sources import PacketSource
from harness_r1.trainer.coldstart_stats import PacketStats
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.prompt import ChatMessage, engineer_messages
from harness_r1.trainer.propose import Proposal, classify
from harness_r1.trainer.teacher import templates_in
from harness_r1.trainer.writers import PatchWriter

log = structlog.get_logger(__name__)


# -- rows -----------------------------------------------------------------------------------


def _effects(result: CandidateResult | None) -> dict[str, int]:
    applied = result.applied_effects if result is not None else {}
    return {str(kind): applied.get(str(kind), 0) for kind in EffectKind}


def _events(result: CandidateResult | None) -> list[dict[str, Any]]:
    """Hook faults and sandbox events, without the worker's housekeeping counters."""
    events = result.sandbox_events if result is not None else {}
    return [
        {"kind": k, "count": v} for k, v in sorted(events.items()) if k not in WORKER_EVENTS and v
    ]


def _metadata(
    source: PacketSource,
    teacher: str,
    config: ColdStartConfig,
    proposal: Proposal,
    candidate_id: str,
    report: CanaryReport | None,
    result: CandidateResult | None,
) -> dict[str, Any]:
    patch: Patch | None = proposal.patch
    evaluated = result is not None and result.status == "evaluated"
    pairs = result.pairs if result is not None else []
    interval = result.delta_interval if result is not None else None
    packet = source.packet
    return {
        "packet_id": packet.packet_id,
        "env": packet.env,
        "splits": source.splits,
        "candidate_id": candidate_id,
        "proposal_index": proposal.index,
        "teacher": teacher,
        "teacher_seed": config.seed,
        "templates": templates_in(patch.description) if patch is not None else [],
        "hooks": [str(h.hook) for h in patch.hooks] if patch is not None else [],
        "patch_sha256": patch.sha256() if patch is not None else None,
        "status": result.status if result is not None else None,
        "delta_success": result.delta_success if evaluated and result else None,
        "delta_mean_reward": result.delta_mean_reward if evaluated and result else None,
        "delta_interval": list(interval) if interval is not None else None,
        "baseline_success_rate": report.baseline_success_rate if report is not None else None,
        "base_successes": sum(p.base_success for p in pairs) if evaluated else None,
        "patched_successes": sum(p.patched_success for p in pairs) if evaluated else None,
        "tasks": len(source.tasks),
        "task_ids": [t.task_id for t in source.tasks],
        "seeds": list(source.seeds),
        "packet_target": packet.target.model_dump(mode="json"),
        "canary_target": report.target.model_dump(mode="json") if report is not None else None,
        "applied_effects": _effects(result if evaluated else None),
        "events": _events(result),
    }


def dataset_row(messages: list[ChatMessage], text: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """One SFT example: TRL's conversational prompt/completion format plus provenance."""
    return {
        "prompt": messages,
        "completion": [{"role": "assistant", "content": text}],
        "metadata": metadata,
    }


def rejected_row(
    proposal: Proposal, reasons: list[str], detail: str, metadata: dict[str, Any]
) -> dict[str, Any]:
    return {
        "reason": reasons[0],
        "reasons": reasons,
        "detail": detail,
        "text": proposal.text,
        "metadata": metadata,
    }


# -- one packet -----------------------------------------------------------------------------


@dataclass
class _PacketRows:
    stats: PacketStats
    kept: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    templates: Counter[str] = field(default_factory=Counter)


def _candidate_id(index: int) -> str:
    return f"k{index}"


def _canary(
    runner: CanaryRunner, source: PacketSource, candidates: list[Candidate]
) -> tuple[CanaryReport | None, dict[str, CandidateResult], str]:
    """(report, results by candidate id, infra detail); no canary run without candidates."""
    if not candidates:
        return None, {}, ""
    try:
        report = runner.evaluate(source.batch(), candidates, source.incumbent)
    except InfraFailure as err:
        log.error("coldstart.baseline_failed", packet=source.packet.packet_id[:12], error=str(err))
        return None, {}, f"infra: {err}"
    return report, {r.candidate_id: r for r in report.candidates}, ""


def _detail(result: CandidateResult, reasons: list[str]) -> str:
    parts = []
    if result.invalid_reason:
        parts.append(result.invalid_reason)
    if VIOLATION in reasons:
        parts.append(f"violation events {violation_events(result.sandbox_events)}")
    if HOOK_FAULTS in reasons:
        parts.append(f"hook faults {hook_fault_events(result.sandbox_events)}")
    if REGRESSIVE in reasons:
        parts.append(
            f"delta success {result.delta_success}, delta mean reward {result.delta_mean_reward}"
        )
    if NO_EFFECT in reasons:
        parts.append("no effect applied on the batch")
    return "; ".join(parts)


def run_packet(
    source: PacketSource,
    teacher: PatchWriter,
    runner: CanaryRunner,
    config: ColdStartConfig,
) -> _PacketRows:
    """Propose, check, canary and judge one packet's K proposals."""
    packet: FailurePacket = source.packet
    rows = _PacketRows(PacketStats(packet.packet_id, packet.env, len(source.tasks)))
    try:
        texts = [sample.text for sample in teacher.samples(packet, config.k, config.seed)]
    except Exception as err:  # noqa: BLE001 - a teacher failure is recorded, not fatal
        rows.stats.teacher_error = f"{type(err).__name__}: {err}"
        log.warning("coldstart.teacher_failed", packet=packet.packet_id[:12], error=str(err))
        return rows
    proposals = [
        classify(EngineerSample(text=text), packet.env, index, config.prompt.limits)
        for index, text in enumerate(texts)
    ]
    rows.stats.proposals = len(proposals)
    candidates = [
        Candidate(_candidate_id(p.index), p.patch)
        for p in proposals
        if p.valid and p.patch is not None
    ]
    report, results, infra = _canary(runner, source, candidates)
    if report is not None:
        rows.stats.baseline_success_rate = report.baseline_success_rate
    messages = engineer_messages(packet, config=config.prompt)
    for proposal in proposals:
        candidate_id = _candidate_id(proposal.index)
        result = results.get(candidate_id)
        early = proposal_reason(proposal)
        if early is not None:
            reasons, detail = [early], proposal.message
        elif result is None:
            reasons, detail = [INFRA_ERROR], infra or "infra: no canary result"
        else:
            reasons = judge(result, config)
            detail = _detail(result, reasons)
        metadata = _metadata(source, teacher.name, config, proposal, candidate_id, report, result)
        if reasons:
            rows.stats.rejected[reasons[0]] += 1
            rows.rejected.append(rejected_row(proposal, reasons, detail, metadata))
            continue
        assert result is not None and result.delta_success is not None
        rows.stats.kept += 1
        rows.stats.kept_deltas.append(result.delta_success)
        rows.templates.update(metadata["templates"])
        rows.kept.append(dataset_row(messages, proposal.text, metadata))
    return rows
