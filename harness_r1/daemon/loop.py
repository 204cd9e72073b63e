"""The continual-improvement loop: failure batch -> packet -> K proposals -> sandbox + canary
-> gate -> registry -> signed staged release -> GRPO group; and the live guard on what was
released.

Everything between two steps is in the state store, so any step can crash and be redone:
- `flush` seals buffered failures into batches (B failures, or T seconds since the oldest),
  but only while fewer than `max_pending_batches` wait: when canaries fall behind, failures
  stay buffered (bounded queue, nothing dropped) until workers catch up;
- `work_once` claims one batch under a lease (several workers, and several daemons sharing
  PostgreSQL, never take the same one; an expired lease is taken over after a crash),
  processes it and finishes it. An infrastructure failure (the target or the engineer
  unreachable, a broken env) puts the batch back for a retry, never turns into a reward; after
  `max_attempts` it is marked failed with the error;
- `guard_once` judges every overlay in canary state from live success counts in the store and
  promotes it to all agents or rolls it back (deploy.guard).

Improvement accumulates: a batch is judged against the pool's incumbent (its active overlay, or
the base harness), each candidate runs composed onto the incumbent's chain, and a winner is
registered as that composition with the incumbent as its parent (sandbox.compose). A batch of
failures recorded under another harness version (a control cohort on the previous overlay, a
canary cohort not yet promoted, a version since rolled back or superseded) is finished as
`stale` when claimed: it is not re-run, not shown to the engineer and earns no reward, because
a packet of another harness's failures shows problems the incumbent may not have and the
fleet keeps producing failures of the live one. Its trajectories stay in the store.
Canary work is shared between daemon workers through the store's leased claims rather than
a Kafka consumer group (the issue allows either): a lease gives crash recovery for free, and
consumer-group joins cost ~23 s on tansu (DESIGN.md).

Why one module: every step reads and writes the same store records in one order (claim,
propose, canary, gate, register, release, finish); the crash-safety argument above is about
that order, and it reads in one place.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import structlog

from harness_r1.consumers import build_packet
from harness_r1.contracts import FailurePacket, Trajectory
from harness_r1.daemon.loop_config import LoopConfig
from harness_r1.daemon.store import Batch, CandidateRow, StateStore
from harness_r1.daemon.tasks import TaskIndex
from harness_r1.deploy import (
    GuardDecision,
    OverlayRegistry,
    OverlayState,
    Promoter,
    Promotion,
    Publisher,
    Verdict,
    enact,
    judge,
)
from harness_r1.harness import RunCancelled, spread
from harness_r1.sandbox import (
    BASE_INCUMBENT,
    CanaryBatch,
    Candidate,
    Evaluator,
    GateDecision,
    GatedReport,
    Incumbent,
    Link,
    best_promoted,
    compose_chain,
    effective_sources,
    run_gated,
)
from harness_r1.trainer import (
    EngineerSample,
    InvalidRewardShape,
    PatchWriter,
    Proposal,
    ReplayGroup,
    classify,
)

log = structlog.get_logger(__name__)

GUARD_SEED_OFFSET = 10_000
DAEMON_ACTOR = "daemon"


@dataclass(frozen=True)
class BatchOutcome:
    batch_id: str
    packet_id: str
    rewards: tuple[float | None, ...]
    verdicts: tuple[str, ...]
    overlay_id: str | None
    # per candidate, as the canary measured it (None: not evaluated): who decided the actions
    forced_shares: tuple[float | None, ...] = ()
    patch_alone: tuple[float | None, ...] = ()


class LoopMetricsSink:
    """What the loop reports; the daemon's DaemonMetrics adapts to it (None: report nothing)."""

    def batch(self, state: str) -> None: ...
    def candidate(self, env: str, result: str, delta: float | None) -> None: ...
    def gate(self, verdict: str) -> None: ...
    def attribution(
        self, env: str, forced_share: float | None, patch_alone: float | None
    ) -> None: ...
    def packet(self) -> None: ...
    def guard(self, watching: int, verdicts: list[str]) -> None: ...


class ImprovementLoop:
    # Why this size: the loop's collaborators (store, proposer, canaries, registry, publisher,
    # tasks, metrics, clock), injected so tests can replace each
    def __init__(
        self,
        store: StateStore,
        registry: OverlayRegistry,
        proposer: PatchWriter,
        canary_for: Callable[[str], Evaluator],
        tasks: TaskIndex,
        config: LoopConfig | None = None,
        publisher: Publisher | None = None,
        metrics: LoopMetricsSink | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.proposer = proposer
        self.canary_for = canary_for
        self.tasks = tasks
        self.config = config or LoopConfig()
        self.publisher = publisher
        self.metrics = metrics or LoopMetricsSink()
        self._on_event = on_event
        self._held: dict[str, str] = {}  # worker -> the batch it is working on
        self._held_lock = threading.Lock()
        self.promoter = Promoter(
            registry,
            publisher,
            self.config.options.release_target,
            self.config.options.rollout_fraction,
            DAEMON_ACTOR,
        )

    def swap_proposer(self, proposer: PatchWriter) -> None:
        """Use `proposer` for the batches that start from now on (a new engineer version after
        a GRPO update); a batch already running keeps the one it started with, so its samples
        and its stored group name the engineer that wrote them."""
        previous, self.proposer = self.proposer, proposer
        log.info("engineer_swapped", previous=previous.name, current=proposer.name)

    # -- batching ------------------------------------------------------------------------------

    def flush(self, now: datetime | None = None) -> int:
        """Seal ready failure buffers into batches, within the back-pressure bound."""
        now = now or datetime.now(UTC)
        sealed = 0
        while self.store.pending_batches() < self.config.options.max_pending_batches:
            ready = [b for b in self.store.open_buffers() if self._ready(b.size, b.oldest_at, now)]
            if not ready:
                break
            info = min(ready, key=lambda b: b.oldest_at)
            if self.store.seal_batch(info.key, self.config.options.batch_size) is None:
                break
            sealed += 1
            self.metrics.batch("sealed")
        return sealed

    def seal_now(self, env: str, harness_version: str) -> list[str]:
        """End the batch window of one harness's failures now (an operator's "judge what this
        overlay's agents failed at", the demo's end of a phase): up to B of the oldest
        buffered failures per target become a batch, whatever their age; other harnesses'
        buffers are left to the window."""
        sealed = []
        for info in self.store.open_buffers():
            if info.key.env != env or info.key.harness_version != harness_version:
                continue
            batch_id = self.store.seal_batch(info.key, self.config.options.batch_size)
            if batch_id is not None:
                sealed.append(batch_id)
                self.metrics.batch("sealed")
        return sealed

    def _ready(self, size: int, oldest_at: datetime, now: datetime) -> bool:
        age = (now - oldest_at).total_seconds()
        options = self.config.options
        return size >= options.batch_size or (size > 0 and age >= options.batch_window_s)

    # -- canary work ---------------------------------------------------------------------------

    def work_once(self, worker: str) -> BatchOutcome | None:
        """Claim one batch, process it, finish it. None when no batch was waiting."""
        batch = self.store.claim_batch(
            worker, self.config.options.canary_lease_s, max_attempts=self.config.max_attempts
        )
        if batch is None:
            return None
        with (
            structlog.contextvars.bound_contextvars(batch_id=batch.batch_id, worker=worker),
            self._heartbeat(batch.batch_id, worker),
            self._holding(batch.batch_id, worker),
        ):
            try:
                outcome = self.process(batch)
            except RunCancelled as err:  # the daemon is stopping: not this batch's fault
                if self.store.release_batch(batch.batch_id, worker, count_attempt=False):
                    self.metrics.batch("handed_back")
                    log.info("batch_handed_back", reason=str(err))
                return None
            except StaleBatch as err:
                self.store.finish_batch(batch.batch_id, worker, "stale", str(err))
                self.metrics.batch("stale")
                log.info("batch_stale", reason=str(err))
                return None
            except Exception as err:  # noqa: BLE001 - infrastructure: retry, never a reward
                self._failed_attempt(batch, worker, err)
                return None
            self.store.finish_batch(batch.batch_id, worker, "done")
            self.metrics.batch("done")
            return outcome

    @contextmanager
    def _holding(self, batch_id: str, worker: str) -> Iterator[None]:
        with self._held_lock:
            self._held[worker] = batch_id
        try:
            yield
        finally:
            with self._held_lock:
                self._held.pop(worker, None)

    def hand_back_all(self) -> int:
        """Hand every batch a worker of this loop still holds back to pending, its attempt
        not counted: the daemon's stop, when a worker did not end within the drain timeout.
        The worker's own finish later fails quietly (it no longer holds the batch)."""
        with self._held_lock:
            held = dict(self._held)
        handed = 0
        for worker, batch_id in held.items():
            if self.store.release_batch(batch_id, worker, count_attempt=False):
                self.metrics.batch("handed_back")
                log.info("batch_handed_back", batch_id=batch_id, worker=worker)
                handed += 1
        return handed

    @contextmanager
    def _heartbeat(self, batch_id: str, worker: str) -> Iterator[None]:
        """Renew the batch's lease every third of it while the canary runs, so a slow canary
        is not taken over (and run twice) by another worker."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.config.options.canary_lease_s / 3):
                if not self.store.renew_lease(batch_id, worker, self.config.options.canary_lease_s):
                    log.warning("lease_lost", batch_id=batch_id)
                    return

        thread = threading.Thread(target=beat, name=f"lease-{batch_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=5)

    def _failed_attempt(self, batch: Batch, worker: str, err: Exception) -> None:
        detail = f"{type(err).__name__}: {err}"[:1000]
        if batch.attempts >= self.config.max_attempts:
            self.store.finish_batch(batch.batch_id, worker, "failed", detail)
            self.metrics.batch("failed")
            log.error("batch_failed", attempts=batch.attempts, error=detail)
        else:
            self.store.release_batch(batch.batch_id, worker)
            self.metrics.batch("retried")
            log.warning("batch_retry", attempts=batch.attempts, error=detail)

    def incumbent(self, env: str) -> Incumbent:
        """The pool's live overlay for `env` with its chain, or the base harness."""
        return incumbent_of(self.registry, self.config.options.release_target, env)

    def process(self, batch: Batch) -> BatchOutcome:
        incumbent = self.incumbent(batch.key.env)
        if batch.key.harness_version != incumbent.overlay_id:
            raise StaleBatch(
                f"recorded under {batch.key.harness_version}; the pool's incumbent is "
                f"{incumbent.overlay_id}"
            )
        trajectories = [
            Trajectory.from_json_bytes(p)
            for p in self.store.load_trajectory_payloads(batch.trajectory_ids)
        ]
        packet = build_packet(
            trajectories, self.config.packet, incumbent=effective_sources(incumbent.links)
        )
        self.store.save_packet(batch.batch_id, packet.packet_id, packet.to_json_bytes().decode())
        self.metrics.packet()
        proposer = self.proposer  # one engineer for the whole batch, even across a swap
        with structlog.contextvars.bound_contextvars(packet_id=packet.packet_id):
            samples = proposer.samples(packet, self.config.options.k, _seed(batch.batch_id))
            proposals = [classify(s, packet.env, i) for i, s in enumerate(samples)]
            gated = self._canary(batch, packet, trajectories, proposals, incumbent)
            _refuse_infra_errors(gated)
            rewards = self._rewards(batch.batch_id, gated, proposals)
            overlay_id, winner = self._promote(batch.batch_id, packet, proposals, gated, incumbent)
            self._store_results(
                batch, packet, samples, proposals, gated, rewards, winner, overlay_id, proposer.name
            )
        outcome = _batch_outcome(batch.batch_id, packet.packet_id, gated, rewards, overlay_id)
        self._event("batch_evaluated", outcome)
        return outcome

    def _canary(
        self,
        batch: Batch,
        packet: FailurePacket,
        trajectories: Sequence[Trajectory],
        proposals: Sequence[Proposal],
        incumbent: Incumbent,
    ) -> GatedReport:
        # one pair per (task, seed): the same task failed twice with the same seed (a fleet
        # replaying its tasks) is one piece of evidence, not two
        unique = {(t.task.task_id, t.task.seed): t.task for t in trajectories}
        refs = list(unique.values())
        tasks = tuple(self.tasks.get(r.env, r.split, r.task_id) for r in refs)
        canary_batch = CanaryBatch(packet.env, tasks, tuple(r.seed for r in refs))
        chosen = {t.task_id for t in tasks}
        others = [t for t in self.tasks.split(packet.env, refs[0].split) if t.task_id not in chosen]
        guard_tasks = spread(others, self.config.options.guard_limit)
        guard_batch = None
        if guard_tasks:
            seeds = tuple(GUARD_SEED_OFFSET + i for i in range(len(guard_tasks)))
            guard_batch = CanaryBatch(packet.env, tuple(guard_tasks), seeds)
        candidates = [
            Candidate(
                _cid(batch.batch_id, p.index),
                p.patch if p.valid else None,
                None if p.valid else f"{p.stage}: {p.reason}",
            )
            for p in proposals
        ]
        return run_gated(
            self.canary_for(packet.env),
            canary_batch,
            guard_batch,
            candidates,
            self.config.gate,
            incumbent,
        )

    def _rewards(
        self, batch_id: str, gated: GatedReport, proposals: Sequence[Proposal]
    ) -> tuple[float | None, ...]:
        """The GRPO reward of each candidate, as `train grpo`'s CanaryReward gives it
        (trainer.shaping): the canary delta; a refused patch the invalid reward (graded by how
        far it got when configured). No delta is no reward (None); infrastructure errors never
        get here (`_refuse_infra_errors` retries the batch first)."""
        shape = InvalidRewardShape(
            self.config.options.invalid_reward,
            graded=self.config.options.graded_invalid,
            attribution=self.config.gate,
        )
        refused = {_cid(batch_id, p.index): p for p in proposals if not p.valid}
        rewards: list[float | None] = []
        for result in gated.report.candidates:
            evaluated = result.status == "evaluated" and result.delta_success is not None
            proposal = refused.get(result.candidate_id)  # refused before the canary ran
            if proposal is not None:
                rewards.append(shape.rejected(proposal.stage, proposal.reason))
            else:
                rewards.append(shape.of_result(result))
            result_label = "evaluated" if evaluated else result.status
            self.metrics.candidate(gated.report.env, result_label, result.delta_success)
            if evaluated:
                self.metrics.attribution(
                    gated.report.env, result.forced_share, result.patch_alone_success
                )
            self.metrics.gate(gated.decisions[result.candidate_id].verdict)
        return tuple(rewards)

    def _promote(
        self,
        batch_id: str,
        packet: FailurePacket,
        proposals: Sequence[Proposal],
        gated: GatedReport,
        incumbent: Incumbent,
    ) -> tuple[str | None, str | None]:
        """The best candidate the gate promotes, composed onto the incumbent and handed to the
        release policy (`deploy.promotion`). Returns (overlay id, winning candidate id), both
        None when nothing was promoted."""
        best = best_promoted(gated)
        if best is None:
            return None, None
        cid, delta = best
        patches = {_cid(batch_id, i): p.patch for i, p in enumerate(proposals)}
        patch = patches[cid]
        assert patch is not None  # the gate promotes evaluated candidates only
        composition = compose_chain([*incumbent.links, Link(cid, patch)])
        measured = next(r for r in gated.report.candidates if r.candidate_id == cid)
        if measured.composed_sha256 not in (None, composition.patch.sha256()):
            raise RuntimeError(f"{cid}: the composition to release is not the one measured")
        promotion = Promotion(
            candidate_id=cid,
            patch=composition.patch,
            delta=delta,
            group_id=batch_id,
            packet_id=packet.packet_id,
            evidence=_evidence(gated, cid, delta),
            link=patch,
            parent_overlay_id=None if incumbent.patch is None else incumbent.overlay_id,
            contributors=composition.describe(),
        )
        return self.promoter.promote(promotion, self.store.agent_ids), cid

    # Why this size: one transaction's worth of one batch's results, passed through rather than
    # bundled for a single caller
    def _store_results(
        self,
        batch: Batch,
        packet: FailurePacket,
        samples: Sequence[EngineerSample],
        proposals: Sequence[Proposal],
        gated: GatedReport,
        rewards: Sequence[float | None],
        winner: str | None,
        overlay_id: str | None,
        engineer: str,
    ) -> None:
        results = {r.candidate_id: r for r in gated.report.candidates}
        rows = []
        for proposal, reward in zip(proposals, rewards, strict=True):
            cid = _cid(batch.batch_id, proposal.index)
            decision = gated.decisions[cid]
            rows.append(
                CandidateRow(
                    candidate_id=cid,
                    completion=proposal.text,
                    patch_json=None if proposal.patch is None else proposal.patch.model_dump_json(),
                    status=results[cid].status,
                    reward=reward,
                    delta_success=results[cid].delta_success,
                    gate_verdict=decision.verdict,
                    overlay_id=overlay_id if cid == winner else None,
                )
            )
        report = {
            "batch": gated.report.model_dump(mode="json"),
            "guard": None if gated.guard is None else gated.guard.model_dump(mode="json"),
            "gate": {k: _decision_json(v) for k, v in gated.decisions.items()},
        }
        self.store.save_canary(batch.batch_id, packet.packet_id, json.dumps(report), rows)
        self.store.save_group(
            batch.batch_id,
            packet.packet_id,
            _group_prompt(batch.batch_id, packet, samples, rewards, engineer),
            [s.text for s in samples],
            list(rewards),
        )

    # -- announcements ---------------------------------------------------------------------------

    def announce(self) -> list[str]:
        """Re-publish the pool's live overlays (active, and canary with its fraction) with a
        fresh signature and seq. Releases expire (so they cannot be replayed later): without
        this, an agent that joins, or comes back after the validity window, would find only
        expired releases and run the base harness while the registry says otherwise."""
        if self.publisher is None:
            return []
        target = self.config.options.release_target
        announced = []
        for state in (OverlayState.ACTIVE, OverlayState.CANARY):
            for record in self.registry.list(target=target, state=state):
                fraction = 1.0
                if state is OverlayState.CANARY:
                    default = self.config.options.rollout_fraction
                    value = record.evidence.get("rollout_fraction", default)
                    fraction = float(value)
                self.publisher.release(
                    record.overlay_id, fraction=fraction, actor=DAEMON_ACTOR, reason="announce"
                )
                announced.append(record.overlay_id)
        return announced

    # -- live guard ----------------------------------------------------------------------------

    def guard_once(self) -> list[GuardDecision]:
        """Judge each overlay in canary state on live counts since its release; act if decided."""
        decided = []
        target = self.config.options.release_target
        watched = self.registry.list(target=target, state=OverlayState.CANARY)
        for record in watched:
            control = record.parent_overlay_id or "base"
            counts = self.store.success_counts(
                [record.overlay_id, control], since=record.updated_at
            )
            decision = judge(
                record.overlay_id,
                control,
                counts.get(record.overlay_id, (0, 0)),
                counts.get(control, (0, 0)),
                self.config.guard,
            )
            if decision.verdict is Verdict.CONTINUE:
                continue
            origins = self.store.origin_counts(
                [record.overlay_id, control], since=record.updated_at
            )
            decision = replace(
                decision,
                forced_share_new=origins[record.overlay_id].measured_forced_share,
                forced_share_control=origins[control].measured_forced_share,
            )
            if self.publisher is not None:
                enact(decision, self.publisher, target)
            decided.append(decision)
            self._event("live_guard", decision)
        self.metrics.guard(len(watched) - len(decided), [str(d.verdict) for d in decided])
        return decided

    def _event(self, kind: str, body: Any) -> None:
        """Audit events are best effort: a broker hiccup here must not redo a finished batch."""
        if self._on_event is None:
            return
        data = body if isinstance(body, dict) else dict(vars(body))
        try:
            self._on_event({"event": kind, "at": time.time(), **_jsonable(data)})
        except Exception as err:  # noqa: BLE001
            log.warning("audit_event_not_sent", kind=kind, error=f"{type(err).__name__}: {err}")


def incumbent_of(registry: OverlayRegistry, target: str, env: str) -> Incumbent:
    """`target`'s active overlay as an Incumbent (its stored composed patch, which the fleet
    runs, and the chain of links new candidates compose onto), or the base harness when the
    pool has none for `env` (a pool's one active overlay belongs to one env)."""
    active = registry.active(target)
    if active is None or active.env != env:
        return BASE_INCUMBENT
    links = tuple(Link(oid, patch) for oid, patch in registry.chain(active.overlay_id))
    return Incumbent(active.overlay_id, links, active.patch)


class StaleBatch(Exception):
    """The batch's failures were recorded under a harness that is not the incumbent."""


class CanaryInfraError(RuntimeError):
    """A candidate could not be measured for infrastructure reasons: retry the batch."""


def _refuse_infra_errors(gated: GatedReport) -> None:
    failed = [r.candidate_id for r in gated.report.candidates if r.status == "infra_error"]
    if failed:
        raise CanaryInfraError(f"infrastructure failure on {', '.join(failed)}: batch retried")


def _cid(batch_id: str, index: int) -> str:
    return f"{batch_id}-c{index}"


def _seed(batch_id: str) -> int:
    return int(hashlib.sha256(batch_id.encode()).hexdigest()[:8], 16)


def _batch_outcome(
    batch_id: str,
    packet_id: str,
    gated: GatedReport,
    rewards: Sequence[float | None],
    overlay_id: str | None,
) -> BatchOutcome:
    """What the batch's event says, per candidate in proposal order: reward, verdict, forced
    share and patch-alone success."""
    results = {r.candidate_id: r for r in gated.report.candidates}
    ordered = [results[_cid(batch_id, i)] for i in range(len(rewards))]
    return BatchOutcome(
        batch_id,
        packet_id,
        tuple(rewards),
        tuple(gated.decisions[r.candidate_id].verdict for r in ordered),
        overlay_id,
        forced_shares=tuple(r.forced_share for r in ordered),
        patch_alone=tuple(r.patch_alone_success for r in ordered),
    )


def _decision_json(decision: GateDecision) -> dict[str, Any]:
    return {
        "promote": decision.promote,
        "verdict": decision.verdict,
        "reasons": list(decision.reasons),
        "numbers": dict(decision.numbers),
    }


def _evidence(gated: GatedReport, cid: str, delta: float) -> dict[str, Any]:
    result = next(r for r in gated.report.candidates if r.candidate_id == cid)
    return {
        "candidate_id": cid,
        "delta_success": delta,
        "delta_interval": result.delta_interval,
        "baseline_success_rate": gated.report.baseline_success_rate,
        "tasks": gated.report.tasks,
        "forced_share": result.forced_share,
        "patch_alone_success": result.patch_alone_success,
        "gate": _decision_json(gated.decisions[cid]),
    }


def _group_prompt(
    group_id: str,
    packet: FailurePacket,
    samples: Sequence[EngineerSample],
    rewards: Sequence[float | None],
    engineer: str,
) -> str:
    """The stored group: a replayable ReplayGroup (exact token ids) when the engineer reported
    them, else the prompt messages with the texts (enough for SFT, not for exact replay)."""
    try:
        group = ReplayGroup.from_samples(
            group_id, samples, list(rewards), packet_id=packet.packet_id, engineer_version=engineer
        )
        return json.dumps({"replay": group.to_dict()})
    except ValueError:
        from harness_r1.trainer import engineer_messages

        return json.dumps({"messages": [dict(m) for m in engineer_messages(packet)]})


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(data, default=str))
    return out
