"""The cold-start dataset: teacher proposals that the sandbox and the canary proved executable and
non-regressive on the frozen target, as SFT examples for the engineer.

For each packet source (a failure packet from training-split runs plus its real tasks and seeds,
see `coldstart_sources`):
1. The teacher writes K proposals in the engineer's output format
   (`<think>...</think><patch>SECTIONS</patch>`), seeded with `ColdStartConfig.seed`.
2. Each is parsed and statically checked (`trainer.propose.classify`): a parse failure is
   rejected as `unparseable`, a static rejection as `static:<code>` (the first violation's code).
3. The valid ones go to the canary together, in one `CanaryRunner.evaluate` call on the packet's
   batch (one baseline run shared by all of them, the batch's tasks with the seeds they ran with).
4. A candidate is kept only if the canary evaluated it (`status == "evaluated"`; else
   `invalid` when the runner's validator refused it, `infra_error` when the infrastructure did),
   it caused no sandbox violation event (`violation`, below), no hook fault (`hook_faults`,
   below) and it did not regress (`regressive`: delta success < `min_delta`, or, when
   `min_reward_delta` is set, delta mean reward below it). A rejected candidate gets every reason
   that applies in `reasons`; the first in that order is its bucket (`reason`).
5. A kept proposal becomes one SFT row in TRL's conversational prompt/completion format:
   `{"prompt": engineer_messages(packet), "completion": [{"role": "assistant", "content":
   text}], "metadata": {...provenance...}}` (SFTTrainer trains on the completion only). A
   rejected one becomes a row of the rejected file (same provenance, plus the reasons and the
   text), so nothing the teacher wrote is lost.

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

Outputs in `out_dir` (written to temporary names, renamed when complete): `dataset.jsonl` (kept
rows), `rejected.jsonl` (rejected rows), `packets.jsonl` (each packet used with its real task
ids and seeds, to rebuild prompts or re-run the canary) and `stats.json` (counts: packets,
proposals, kept, rejected by reason, per env and per packet, templates of the kept patches).
Nothing in them depends on timing (no durations, no worker restart counters), so the same
sources, teacher, config and a deterministic target give the same bytes.

Rejection buckets, in the order a candidate is judged: `unparseable`, `static:<code>`, `invalid`,
`infra_error`, `violation`, `hook_faults`, `regressive`, `no_effect` (only with
`require_effect`). kept + all rejected == proposals, always.

Why one module: a third of it is this docstring and the rejection rules; the
judging and the dataset writing are one pipeline whose output bytes must not depend on how it is
cut.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import structlog

from harness_r1.contracts import (
    CanaryReport,
    CandidateResult,
    EffectKind,
    FailurePacket,
    HookFaultKind,
    Patch,
)
from harness_r1.sandbox import WORKER_EVENTS, CanaryRunner, Candidate, InfraFailure
from harness_r1.trainer.coldstart_sources import (
    PacketSource,
)
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.prompt import ChatMessage, PromptConfig, engineer_messages
from harness_r1.trainer.propose import Proposal, classify
from harness_r1.trainer.teacher import templates_in
from harness_r1.trainer.writers import PatchWriter

__all__ = [
    "DATASET_FILE",
    "PACKETS_FILE",
    "HOOK_FAULT_EVENTS",
    "REJECTED_FILE",
    "STATS_FILE",
    "VIOLATION_EVENTS",
    "ColdStartConfig",
    "ColdStartStats",
    "PacketSource",
    "PacketStats",
    "build_coldstart",
    "judge",
]

log = structlog.get_logger(__name__)

DATASET_FILE = "dataset.jsonl"
REJECTED_FILE = "rejected.jsonl"
STATS_FILE = "stats.json"
PACKETS_FILE = "packets.jsonl"

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


# -- statistics -----------------------------------------------------------------------------


@dataclass
class Tally:
    packets: int = 0
    proposals: int = 0
    kept: int = 0
    rejected: Counter[str] = field(default_factory=Counter)

    def add(self, other: Tally) -> None:
        self.packets += other.packets
        self.proposals += other.proposals
        self.kept += other.kept
        self.rejected.update(other.rejected)

    def to_dict(self) -> dict[str, Any]:
        return {
            "packets": self.packets,
            "proposals": self.proposals,
            "kept": self.kept,
            "rejected": dict(sorted(self.rejected.items())),
            "rejected_total": sum(self.rejected.values()),
        }


@dataclass
class PacketStats:
    """What became of one packet's proposals."""

    packet_id: str
    env: str
    tasks: int
    proposals: int = 0
    kept: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    baseline_success_rate: float | None = None
    kept_deltas: list[float] = field(default_factory=list)
    teacher_error: str | None = None

    def tally(self) -> Tally:
        return Tally(1, self.proposals, self.kept, Counter(self.rejected))

    def to_dict(self) -> dict[str, Any]:
        return {
            "packet_id": self.packet_id,
            "env": self.env,
            "tasks": self.tasks,
            "proposals": self.proposals,
            "kept": self.kept,
            "rejected": dict(sorted(self.rejected.items())),
            "baseline_success_rate": self.baseline_success_rate,
            "kept_deltas": self.kept_deltas,
            "teacher_error": self.teacher_error,
        }


@dataclass
class ColdStartStats:
    """Counts of one cold-start build (what `stats.json` holds)."""

    teacher: str
    config: dict[str, Any]
    packets_available: int = 0
    total: Tally = field(default_factory=Tally)
    per_env: dict[str, Tally] = field(default_factory=dict)
    per_packet: list[PacketStats] = field(default_factory=list)
    kept_templates: Counter[str] = field(default_factory=Counter)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def packets(self) -> int:
        return self.total.packets

    @property
    def proposals(self) -> int:
        return self.total.proposals

    @property
    def kept(self) -> int:
        return self.total.kept

    @property
    def rejected(self) -> dict[str, int]:
        return dict(sorted(self.total.rejected.items()))

    def add(self, packet: PacketStats) -> None:
        self.per_packet.append(packet)
        tally = packet.tally()
        self.total.add(tally)
        self.per_env.setdefault(packet.env, Tally()).add(tally)

    def to_dict(self) -> dict[str, Any]:
        deltas = [d for p in self.per_packet for d in p.kept_deltas]
        improving = sum(1 for d in deltas if d > 0)
        return {
            "teacher": self.teacher,
            "config": self.config,
            "packets_available": self.packets_available,
            **self.total.to_dict(),
            "kept_rate": self.kept / self.proposals if self.proposals else None,
            "kept_mean_delta": sum(deltas) / len(deltas) if deltas else None,
            "kept_improving": improving,
            "per_env": {env: t.to_dict() for env, t in sorted(self.per_env.items())},
            "kept_templates": dict(sorted(self.kept_templates.items())),
            "teacher_errors": sum(1 for p in self.per_packet if p.teacher_error),
            "per_packet": [p.to_dict() for p in self.per_packet],
            "files": self.files,
        }


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


def packet_row(source: PacketSource) -> dict[str, Any]:
    """A packet as used (for inspection and re-runs): the packet and its canary batch."""
    return {
        "packet_id": source.packet.packet_id,
        "env": source.env,
        "task_ids": [t.task_id for t in source.tasks],
        "splits": [t.split for t in source.tasks],
        "seeds": list(source.seeds),
        "packet": source.packet.model_dump(mode="json"),
        # the harness candidates were judged against: its id and links, oldest first (none:
        # the base harness), so GRPO re-runs the canary against the same incumbent
        "incumbent": {
            "overlay_id": source.incumbent.overlay_id,
            "links": [
                {"overlay_id": link.overlay_id, "patch": link.patch.model_dump(mode="json")}
                for link in source.incumbent.links
            ],
        },
    }


def _line(row: Mapping[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n"


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


# -- the whole build ------------------------------------------------------------------------


def _runner_env(runner: CanaryRunner) -> str | None:
    suite = getattr(runner.runtime, "suite", None)
    name = getattr(suite, "name", None)
    return name if isinstance(name, str) else None


def _runners(
    runner: CanaryRunner | Mapping[str, CanaryRunner], sources: Sequence[PacketSource]
) -> dict[str, CanaryRunner]:
    if isinstance(runner, CanaryRunner):
        envs = sorted({s.env for s in sources})
        env = _runner_env(runner)
        if env is not None:
            wrong = [e for e in envs if e != env]
            if wrong:
                raise ValueError(
                    f"the canary runs {env}; the sources also hold {', '.join(wrong)} packets"
                )
        return dict.fromkeys(envs, runner)
    missing = sorted({s.env for s in sources} - set(runner))
    if missing:
        raise ValueError(f"no canary runner for env(s) {', '.join(missing)}")
    return dict(runner)


def _commit(handle: IO[str], tmp: Path, final: Path) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    tmp.replace(final)


# Why this size: writes four files in one pass and commits them together; split, a failure could
# leave some renamed
def build_coldstart(
    sources: Sequence[PacketSource],
    teacher: PatchWriter,
    runner: CanaryRunner | Mapping[str, CanaryRunner],
    config: ColdStartConfig | None,
    out_dir: Path,
    *,
    on_packet: Callable[[PacketStats], None] | None = None,
) -> ColdStartStats:
    """The cold-start dataset of `sources` (see the module docstring): writes `dataset.jsonl`,
    `rejected.jsonl`, `packets.jsonl` and `stats.json` into `out_dir` and returns the
    statistics. `runner` is the canary of the sources' env, or one per env. `on_packet` sees
    each packet's stats as it completes (progress). A build that fails midway leaves only
    `.*.partial` files."""
    config = config or ColdStartConfig()
    out_dir = Path(out_dir)
    chosen = list(sources)[: config.max_packets] if config.max_packets is not None else sources
    runners = _runners(runner, chosen)
    name = teacher.name
    for env in sorted({s.env for s in chosen}):
        ref = runners[env].target
        target = f"{ref.model_id}@{ref.version}"
        packet_targets = {
            f"{s.packet.target.model_id}@{s.packet.target.version}" for s in chosen if s.env == env
        }
        others = sorted(packet_targets - {target})
        if others:
            log.warning(
                "coldstart.target_mismatch",
                env=env,
                canary_target=target,
                packet_targets=others,
                note="packets come from another model's runs than the canary re-runs",
            )
    stats = ColdStartStats(
        teacher=name,
        config=config.describe(),
        packets_available=len(sources),
        files={
            "dataset": DATASET_FILE,
            "rejected": REJECTED_FILE,
            "packets": PACKETS_FILE,
            "stats": STATS_FILE,
        },
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {key: out_dir / f".{file}.partial" for key, file in stats.files.items()}
    dataset = paths["dataset"].open("w", encoding="utf-8")
    rejected = paths["rejected"].open("w", encoding="utf-8")
    packets = paths["packets"].open("w", encoding="utf-8")
    try:
        for source in chosen:
            packets.write(_line(packet_row(source)))
            rows = run_packet(source, teacher, runners[source.env], config)
            for row in rows.kept:
                dataset.write(_line(row))
            for row in rows.rejected:
                rejected.write(_line(row))
            stats.add(rows.stats)
            stats.kept_templates.update(rows.templates)
            log.info(
                "coldstart.packet",
                packet=source.packet.packet_id[:12],
                env=source.env,
                proposals=rows.stats.proposals,
                kept=rows.stats.kept,
                rejected=dict(rows.stats.rejected),
            )
            if on_packet is not None:
                on_packet(rows.stats)
        _commit(dataset, paths["dataset"], out_dir / DATASET_FILE)
        _commit(rejected, paths["rejected"], out_dir / REJECTED_FILE)
        _commit(packets, paths["packets"], out_dir / PACKETS_FILE)
    finally:
        dataset.close()
        rejected.close()
        packets.close()
    body = json.dumps(stats.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
    paths["stats"].write_text(body, encoding="utf-8")
    paths["stats"].replace(out_dir / STATS_FILE)
    return stats
