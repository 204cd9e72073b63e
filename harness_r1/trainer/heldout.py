"""How good is an engineer version? Its proposals on held-out packets, judged like production.

For each held-out packet source (packets built from runs of a split the engineer never trained
on, with the real tasks and seeds behind them): the engineer samples K proposals; each is
parsed and statically checked; the valid ones are canaried together on the packet's batch
(one shared baseline, cached on disk so every version compared is judged against the same
baseline episodes). Numbers per version:

- valid fraction: proposals that parse and pass the static checks, over all proposals;
- mean canary delta: the mean success delta over the proposals the canary evaluated;
- mean reward: the paper's flat training reward over all proposals (invalid ->
  `invalid_reward`, never graded by trainer.shaping, so versions trained with either reward
  compare on one scale); infrastructure failures are left out of both means and counted;
- who decided the evaluated proposals' episodes: their forced share and the success the patch
  wins without the model (the canary's patch-alone control), per proposal and as means;
- improved fraction: proposals with a positive delta, over all proposals but infrastructure
  failures;
- promoted fraction (with a `HeldOutGate`): proposals the promotion gate (`sandbox.gate.decide`)
  promotes, over all proposals but infrastructure failures: a candidate that gained on its
  packet's batch is also judged on a guard (every other held-out task and seed of the runs,
  under the same incumbent) and promoted only without a significant regression there, as the
  daemon promotes; the promoted patch is kept in its sample (`patch`), so the held-out success
  after an engineer's best promoted patch can be measured. The guard's episodes are run once
  per patch over the whole pool and each packet reads its own guard from them (the pool without
  its own tasks): a trained engineer proposes one patch for many packets, and each used to pay
  its own guard run (2,032 s of a 2,594 s WebShop row, BENCHMARKS.md);
- cost: proposals, generated tokens, generation seconds and tokens/s, candidate episodes and
  canary seconds (baseline episodes and seconds apart: they are paid once per packet and
  shared across versions through the baseline cache).

Validity only (`HeldOutConfig.canary=False`, for an SFT checkpoint's validity curve, where the
canary's episodes would cost far more than the generation): a proposal counts as valid when it
parses, passes the static checks and composes onto the packet's incumbent under the canary's own
pre-episode check (`sandbox.canary.composed_overlay`); a refused composition is rejected as
`canary:composition_<code>`, as the canary would; no delta, no reward.

A canary that fails as infrastructure (its baseline kept failing, the backend died) makes that
packet's valid proposals `infra_errors`: no delta, no reward, the evaluation goes on.

Same sources, engineer, seed and a greedy target give the same numbers (sampling is seeded per
packet: `seed + packet index`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import structlog

from harness_r1.contracts import CanaryReport, CandidateResult
from harness_r1.sandbox import (
    BASE_INCUMBENT,
    CanaryBatch,
    Candidate,
    Evaluator,
    GateConfig,
    Incumbent,
    PairedOutcome,
    composed_overlay,
    decide,
    pairs_of,
    static_validator,
)
from harness_r1.trainer.coldstart_sources import PacketSource
from harness_r1.trainer.engineer import EngineerBackend
from harness_r1.trainer.prompt_config import PromptConfig
from harness_r1.trainer.propose import classify
from harness_r1.trainer.writers import EngineerWriter, PatchWriter

log = structlog.get_logger(__name__)


TEXT_CHARS = 4000


@dataclass(frozen=True)
class HeldOutConfig:
    k: int = 4
    seed: int = 0
    temperature: float = 1.0
    max_new_tokens: int = 512
    invalid_reward: float = 0.0
    prompt: PromptConfig = field(default_factory=PromptConfig)
    canary: bool = True  # False: validity only (parse, static, composition), no episodes


@dataclass
class PacketScore:
    """One packet's K proposals: what became of each."""

    packet_id: str
    tasks: int
    proposals: int = 0
    valid: int = 0
    deltas: list[float] = field(default_factory=list)  # evaluated proposals only
    #: of the evaluated proposals: forced share of their steps, success without the model
    forced_shares: list[float] = field(default_factory=list)
    patch_alone: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # all proposals but infra failures
    infra_errors: int = 0
    rejected: Counter[str] = field(default_factory=Counter)  # by stage:code
    generated_tokens: int = 0
    generate_seconds: float = 0.0
    canary_episodes: int = 0
    canary_seconds: float = 0.0
    baseline_episodes: int = 0
    baseline_seconds: float = 0.0
    # each proposal as written (cut to TEXT_CHARS) with its verdict, to read what went wrong
    samples: list[dict[str, Any]] = field(default_factory=list)
    promoted: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)  # the gate's, per evaluated proposal
    guard_episodes: int = 0
    guard_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("rejected", "verdicts"):
            data[name] = dict(sorted(data[name].items()))
        for name in ("generate_seconds", "canary_seconds", "baseline_seconds", "guard_seconds"):
            data[name] = round(data[name], 3)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PacketScore:
        """A score as `to_dict` wrote it (a resumed evaluation's finished packets; a field
        that an older report lacks keeps its default)."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values.update(rejected=Counter(data["rejected"]), verdicts=Counter(data["verdicts"]))
        return cls(**values)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class HeldOutReport:
    engineer: str
    config: HeldOutConfig
    packets: list[PacketScore]
    gated: bool = False

    def _all(self, name: str) -> list[float]:
        return [v for p in self.packets for v in getattr(p, name)]

    def summary(self) -> dict[str, Any]:
        proposals = sum(p.proposals for p in self.packets)
        valid = sum(p.valid for p in self.packets)
        deltas = self._all("deltas")
        tokens = sum(p.generated_tokens for p in self.packets)
        seconds = sum(p.generate_seconds for p in self.packets)
        rejected: Counter[str] = Counter()
        for p in self.packets:
            rejected.update(p.rejected)
        infra = sum(p.infra_errors for p in self.packets)
        judged = proposals - infra
        return {
            "engineer": self.engineer,
            "packets": len(self.packets),
            "proposals": proposals,
            "valid": valid,
            "valid_fraction": valid / proposals if proposals else None,
            "evaluated": len(deltas),
            "mean_delta": _mean(deltas),
            "mean_forced_share": _mean(self._all("forced_shares")),
            "mean_patch_alone": _mean(self._all("patch_alone")),
            "mean_reward": _mean(self._all("rewards")),
            "improved_fraction": sum(d > 0 for d in deltas) / judged if judged else None,
            "gated": self.gated,
            "promoted": sum(p.promoted for p in self.packets),
            "promoted_fraction": (
                sum(p.promoted for p in self.packets) / judged if judged and self.gated else None
            ),
            "verdicts": dict(sorted(sum((p.verdicts for p in self.packets), Counter()).items())),
            "guard_episodes": sum(p.guard_episodes for p in self.packets),
            "guard_seconds": round(sum(p.guard_seconds for p in self.packets), 3),
            "infra_errors": infra,
            "rejected": dict(sorted(rejected.items())),
            "generated_tokens": tokens,
            "generate_seconds": round(seconds, 3),
            "tokens_per_second": tokens / seconds if seconds else None,
            "canary_episodes": sum(p.canary_episodes for p in self.packets),
            "canary_seconds": round(sum(p.canary_seconds for p in self.packets), 3),
            "baseline_episodes": sum(p.baseline_episodes for p in self.packets),
            "baseline_seconds": round(sum(p.baseline_seconds for p in self.packets), 3),
            "k": self.config.k,
            "seed": self.config.seed,
            "temperature": self.config.temperature,
            "max_new_tokens": self.config.max_new_tokens,
            "lean_prompt": self.config.prompt.lean,
            "hooks": [str(hook) for hook in self.config.prompt.hooks],  # what it might write
        }

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "packets": [p.to_dict() for p in self.packets]}


@dataclass(frozen=True)
class HeldOutGate:
    """The promotion gate over held-out proposals. pool: every held-out (task, seed) of the runs;
    a packet's guard batch is the pool without the packet's own tasks. config: the gate's rule
    and minimum sizes (at CPU scale, packets of 4 and a pool of 20 need smaller minimums than
    the daemon's 8 and 20: say which in the report)."""

    pool: CanaryBatch
    config: GateConfig = field(default_factory=GateConfig)
    #: each patch's result over the whole pool, by (patch, incumbent); `evaluate_engineer` runs
    #: on a fresh copy, so one evaluation's runs never answer another's (another target/config)
    _on_pool: dict[tuple[str, ...], CandidateResult] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        keys = [(t.task_id, s) for t, s in zip(self.pool.tasks, self.pool.seeds, strict=True)]
        if len(set(keys)) != len(keys):  # a guard pair names its task by (task_id, seed) only
            raise ValueError("the held-out pool repeats a (task_id, seed)")

    def guard_for(self, source: PacketSource) -> CanaryBatch | None:
        own = _own(source)
        rest = [
            (task, seed)
            for task, seed in zip(self.pool.tasks, self.pool.seeds, strict=True)
            if (task.task_id, seed) not in own
        ]
        if not rest:
            return None
        return CanaryBatch(self.pool.env, tuple(t for t, _ in rest), tuple(s for _, s in rest))

    def guard_pairs(
        self,
        source: PacketSource,
        candidates: Sequence[Candidate],
        runner: Evaluator,
    ) -> tuple[dict[str, list[PairedOutcome]], int]:
        """Each candidate's guard pairs (its results on the pool without the packet's own
        tasks) and the episodes run for them: a patch not judged on the pool yet runs there
        (every candidate that needs it in one canary call, the pool's baseline from the
        runner's cache after its first run); one already judged is read back. A candidate the
        pool run did not evaluate has no pairs (no promotion): an invalid result (over its hook
        budget) is kept, an infrastructure error is run again by the next packet that proposes
        it. Since the pool holds the packet's own tasks, an episode that keeps failing there
        takes the guard from every packet, its own included. Raises what the runner raises."""
        guard = self.guard_for(source)  # the one definition of a packet's guard tasks
        if guard is None:
            return {}, 0
        kept = set(zip((t.task_id for t in guard.tasks), guard.seeds, strict=True))
        keys = {c.candidate_id: _pool_key(c, source.incumbent) for c in candidates}
        missing: dict[tuple[str, ...], Candidate] = {}
        for candidate in candidates:
            if keys[candidate.candidate_id] not in self._on_pool:
                missing.setdefault(keys[candidate.candidate_id], candidate)
        episodes = 0
        if missing:
            report = runner.evaluate(self.pool, list(missing.values()), source.incumbent)
            episodes = report.baseline_cost.episodes + sum(
                r.cost.episodes for r in report.candidates
            )
            by_id = {r.candidate_id: r for r in report.candidates}
            for key, candidate in missing.items():
                result = by_id.get(candidate.candidate_id)
                if result is not None and result.status != "infra_error":
                    self._on_pool[key] = result
        judged = {key: r for key, r in self._on_pool.items() if r.status == "evaluated"}
        pairs = {
            candidate_id: [p for p in pairs_of(judged[key]) if (p.task_id, p.seed) in kept]
            for candidate_id, key in keys.items()
            if key in judged
        }
        return pairs, episodes


def _own(source: PacketSource) -> set[tuple[str, int]]:
    return {(task.task_id, seed) for task, seed in zip(source.tasks, source.seeds, strict=True)}


def _pool_key(candidate: Candidate, incumbent: Incumbent) -> tuple[str, ...]:
    """The same patch on the same incumbent runs the same composed overlay."""
    patch = candidate.patch.sha256() if candidate.patch is not None else "none"
    return (patch, *incumbent.identity)


def score_packet(
    index: int,
    source: PacketSource,
    writer: PatchWriter,
    runner: Evaluator,
    config: HeldOutConfig,
    gate: HeldOutGate | None = None,
) -> PacketScore:
    score = PacketScore(packet_id=source.packet.packet_id, tasks=len(source.tasks))
    started = time.perf_counter()
    samples = writer.samples(source.packet, config.k, config.seed + index)
    proposals = [
        classify(sample, source.env, i, config.prompt.limits, config.prompt.hooks)
        for i, sample in enumerate(samples)
    ]
    score.generate_seconds = time.perf_counter() - started
    score.proposals = len(proposals)
    score.generated_tokens = sum(p.sample.completion_tokens or 0 for p in proposals)
    score.samples = [
        {
            "index": p.index,
            "valid": p.valid,
            "rejected": None if p.valid else f"{p.stage}:{p.reason}",
            "tokens": p.sample.completion_tokens,
            "text": p.text[:TEXT_CHARS],
        }
        for p in proposals
    ]
    candidates = []
    for p in proposals:
        if p.valid and p.patch is not None:
            candidates.append(Candidate(f"p{p.index}", p.patch))
        else:
            score.rejected[f"{p.stage}:{p.reason}"] += 1
            score.rewards.append(config.invalid_reward)
    if not config.canary:
        candidates = _composable(candidates, source, config, score)
    score.valid = len(candidates)
    if not candidates or not config.canary:
        return score
    started = time.perf_counter()
    try:
        report = runner.evaluate(source.batch(), candidates, source.incumbent)
    except Exception as err:  # noqa: BLE001 - infrastructure: no delta, the evaluation goes on
        log.warning("held-out canary failed", packet_id=source.packet.packet_id, error=str(err))
        score.infra_errors += len(candidates)
        return score
    elapsed = time.perf_counter() - started
    score.baseline_episodes = report.baseline_cost.episodes
    score.baseline_seconds = report.baseline_cost.seconds
    score.canary_seconds = max(0.0, elapsed - report.baseline_cost.seconds)
    for result in report.candidates:
        score.canary_episodes += result.cost.episodes
        if result.status == "infra_error":
            score.infra_errors += 1
        elif result.status == "invalid" or result.delta_success is None:
            score.rejected[f"canary:{(result.invalid_reason or 'invalid').split(':')[0]}"] += 1
            score.rewards.append(config.invalid_reward)
        else:
            score.deltas.append(result.delta_success)
            score.rewards.append(result.delta_success)
            _attribute(score, result)
    if gate is not None:
        _gate(score, report, candidates, source, runner, gate)
    return score


def _attribute(score: PacketScore, result: CandidateResult) -> None:
    """Who decided an evaluated proposal's episodes: its forced share and what the harness won
    without the model, on its sample and in the packet's lists (None values left out)."""
    sample = next(s for s in score.samples if f"p{s['index']}" == result.candidate_id)
    forced, alone = result.forced_share, result.patch_alone_success
    sample.update(forced_share=forced, patch_alone=alone)
    if forced is not None:
        score.forced_shares.append(forced)
    if alone is not None:
        score.patch_alone.append(alone)


def _gate(
    score: PacketScore,
    report: CanaryReport,
    candidates: Sequence[Candidate],
    source: PacketSource,
    runner: Evaluator,
    gate: HeldOutGate,
) -> None:
    """The gate's verdict on every evaluated proposal; the guard is looked at only for those
    that gained on their batch (the gate rejects the rest before looking at a guard)."""
    evaluated = [
        r for r in report.candidates if r.status == "evaluated" and r.delta_success is not None
    ]
    gaining = {r.candidate_id for r in evaluated if (r.delta_success or 0.0) > 0}
    guard: dict[str, list[PairedOutcome]] = {}
    if gaining and gate.guard_for(source) is not None:
        started = time.perf_counter()
        try:
            guard, score.guard_episodes = gate.guard_pairs(
                source, [c for c in candidates if c.candidate_id in gaining], runner
            )
        except Exception as err:  # noqa: BLE001 - infrastructure: no promotion, go on
            log.warning("held-out guard failed", packet_id=source.packet.packet_id, error=str(err))
        score.guard_seconds = time.perf_counter() - started
    patches = {c.candidate_id: c.patch for c in candidates}
    samples = {f"p{sample['index']}": sample for sample in score.samples}
    for result in evaluated:
        decision = decide(pairs_of(result), guard.get(result.candidate_id), gate.config)
        score.verdicts[decision.verdict] += 1
        sample = samples[result.candidate_id]
        sample.update(delta=result.delta_success, verdict=decision.verdict)
        if decision.promote:
            score.promoted += 1
            patch = patches[result.candidate_id]
            sample["patch"] = None if patch is None else patch.model_dump(mode="json")


class NoCanary:
    """The evaluator of a validity-only evaluation (`HeldOutConfig.canary=False`): no target is
    loaded, and nothing may ask it for episodes."""

    def evaluate(
        self,
        batch: CanaryBatch,
        candidates: Sequence[Candidate],
        incumbent: Incumbent = BASE_INCUMBENT,
        *,
        patch_alone: bool = True,
    ) -> CanaryReport:
        raise AssertionError("a validity-only evaluation runs no canary")


def _composable(
    candidates: list[Candidate], source: PacketSource, config: HeldOutConfig, score: PacketScore
) -> list[Candidate]:
    """The candidates the canary would run (validity only): each composed onto the packet's
    incumbent and checked as the canary checks it; the refused ones counted by reason."""
    validator = static_validator(config.prompt.limits)
    kept = []
    for candidate in candidates:
        assert candidate.patch is not None
        _, reason = composed_overlay(
            candidate.candidate_id, candidate.patch, source.incumbent, validator
        )
        if reason is None:
            kept.append(candidate)
        else:
            score.rejected[f"canary:{reason.split(':')[0]}"] += 1
    return kept


def evaluate_engineer(
    sources: Sequence[PacketSource],
    engineer: EngineerBackend | PatchWriter,
    runner_for: Callable[[str], Evaluator],
    config: HeldOutConfig | None = None,
    on_packet: Callable[[PacketScore], None] | None = None,
    gate: HeldOutGate | None = None,
    done: Sequence[PacketScore] = (),
) -> HeldOutReport:
    """Score `engineer` on every held-out source, in order (with `gate`: and the gate's
    verdicts). An engineer model is prompted with the config's prompt, temperature and token
    budget; a PatchWriter (e.g. the template teacher) writes as it does in production.

    `done`: the scores of the first sources from an interrupted evaluation of the same
    engineer and config; they are kept and those sources skipped. Sampling is seeded per
    packet index, so the resumed report's proposals and deltas are those of an uninterrupted
    run (its timings are each packet's own run's); the guard's runs over the pool are not
    kept, so the first packets after a resume run their patches on the pool again (more guard
    episodes than an uninterrupted run; with a bf16 target, whose outcomes can move with what
    shares a lockstep batch, a verdict can differ from that run's)."""
    config = config or HeldOutConfig()
    gate = None if gate is None else replace(gate)  # its own guard memo (`HeldOutGate`)
    expected = [source.packet.packet_id for source in sources[: len(done)]]
    if [score.packet_id for score in done] != expected:
        raise ValueError("the finished scores are not the first packets of these sources")
    writer = engineer if isinstance(engineer, PatchWriter) else _writer(engineer, config)
    scores = list(done)
    for index, source in enumerate(sources):
        if index < len(done):
            continue
        score = score_packet(index, source, writer, runner_for(source.env), config, gate)
        scores.append(score)
        if on_packet is not None:
            on_packet(score)
    return HeldOutReport(
        engineer=writer.name, config=config, packets=scores, gated=gate is not None
    )


def _writer(backend: EngineerBackend, config: HeldOutConfig) -> PatchWriter:
    return EngineerWriter(backend, config.temperature, config.max_new_tokens, config.prompt)
