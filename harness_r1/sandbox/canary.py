"""The canary: re-run the frozen target on the same tasks and seeds with and without a patch.

Design (paired, shared baseline): the batch's baseline run is computed once per (batch,
incumbent, target, run config) and cached; every valid candidate then runs the same task ids
with the same seeds, all candidates' episodes together in lockstep so generation is batched
across them. Cost: n + K*n episodes instead of the naive 2*K*n. Candidates whose composed
overlays are the same patch (`Patch.sha256`: code and description; samples that agree, common
once an engineer has learnt a patch) run once: the others get the first's result, verdict,
pairs and counters included, with no episodes of their own (cost 0), so K identical proposals
cost one candidate's n episodes (plus the baseline's n when it is not cached) and are judged
alike; a worker failure of that one run is every twin's `infra_error`.

The baseline is the *incumbent*: the overlay the pool runs now (or the base harness). Each
candidate is a link composed onto the incumbent's chain (`sandbox/compose.py`) and the composed
overlay is what runs, so its delta is what the patch adds to what is live; a candidate that
only repeats the incumbent scores 0. The control arm (when asked for) re-runs the incumbent.

Infrastructure failures (an env error, a model backend failure) are retried and, if they
persist, reported as `infra_error` with no reward: they are never turned into a reward.

Who decided: every result counts its episodes' steps by origin (`origins`, the forced share),
and each evaluated candidate's overlay runs once more on the same tasks and seeds under the null
policy (`harness/policies/null.py`), all candidates in one lockstep run: its success is what
the harness wins without the model (`patch_alone`). It calls no model, so it costs env and hook
time only (a fraction of a second on WebShop and DBBench batches, ~1 s a game on ALFWorld).
`evaluate(..., patch_alone=False)` skips it (the gate's guard run: the batch answers it).

Why one module: the paired design is one algorithm: the shared baseline cache, the lockstep
run of every candidate, the merging of twins and the per-candidate scoring; its cost claim
(n + K*n episodes) holds only for the parts together.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from harness_r1.contracts import (
    CanaryReport,
    CandidateCost,
    CandidateResult,
    HookFaultKind,
    OriginCounts,
    PairedTask,
    Patch,
    PatchAlone,
    TargetRef,
    TaskSpec,
    Termination,
    Trajectory,
)
from harness_r1.harness import EpisodeSpec, HarnessRuntime, HookSet, NoHooks
from harness_r1.harness.policies import NullPolicy
from harness_r1.models import PolicyError
from harness_r1.sandbox.compose import CompositionRefused, Link, compose_chain
from harness_r1.sandbox.gate import PairedOutcome, bootstrap_delta_interval

log = structlog.get_logger(__name__)


HookSetFactory = Callable[[Patch, str], HookSet]
Validator = Callable[[Patch], str | None]  # None when valid, else "code: message"


@dataclass(frozen=True)
class CanaryBatch:
    """The paired unit: these tasks with these seeds, run with and without each patch."""

    env: str
    tasks: tuple[TaskSpec, ...]
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.tasks:  # nothing to pair: every candidate's delta would divide by zero
            raise ValueError("a canary batch needs at least one task")
        if len(self.tasks) != len(self.seeds):
            raise ValueError("a canary batch needs one seed per task")
        if any(t.env != self.env for t in self.tasks):
            raise ValueError("every task of a canary batch must belong to its env")

    @property
    def batch_id(self) -> str:
        key = [self.env, [[t.split, t.task_id] for t in self.tasks], list(self.seeds)]
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()


@dataclass(frozen=True)
class Candidate:
    """One proposal: a parsed patch, or the reason it could not be parsed."""

    candidate_id: str
    patch: Patch | None
    invalid_reason: str | None = None  # set when parsing already failed


@dataclass(frozen=True)
class Incumbent:
    """What a batch is judged against: the pool's live overlay (its id, the chain of links it
    was composed from, and the composed patch the fleet runs), or the base harness."""

    overlay_id: str = "base"
    links: tuple[Link, ...] = ()
    patch: Patch | None = None

    def __post_init__(self) -> None:
        if (self.patch is None) != (not self.links):
            raise ValueError("an incumbent overlay has both its links and its composed patch")

    @classmethod
    def of_chain(cls, overlay_id: str, links: Sequence[Link]) -> Incumbent:
        """The incumbent composed from its links (a test or a hand-run canary's `--on`)."""
        return cls(overlay_id, tuple(links), compose_chain(links).patch)

    @property
    def identity(self) -> list[str]:
        """What a baseline run on it is keyed by."""
        return ["base"] if self.patch is None else [self.overlay_id, self.patch.sha256()]

    def with_link(self, candidate_id: str, patch: Patch) -> Patch:
        """The candidate's overlay: this chain plus the candidate as its newest link."""
        return compose_chain([*self.links, Link(candidate_id, patch)]).patch


BASE_INCUMBENT = Incumbent()


def composed_overlay(
    candidate_id: str, patch: Patch, incumbent: Incumbent, validator: Validator
) -> tuple[Patch | None, str | None]:
    """The overlay `patch` runs as, composed onto `incumbent`, or why it cannot run: its own
    static refusal, the composition's, or the composed overlay's (None when it can). The
    canary's whole check before any episode, so a validity-only evaluation (no episodes) refuses
    exactly what the canary would."""
    reason = validator(patch)
    if reason is not None:
        return None, reason
    try:
        overlay = incumbent.with_link(candidate_id, patch)
    except CompositionRefused as err:
        return None, f"composition_{err.code}: {err.message}"
    return overlay, validator(overlay)


@dataclass(frozen=True)
class CanaryConfig:
    invalid_reward: float = 0.0
    infra_retries: int = 2
    bootstrap_samples: int = 2000
    alpha: float = 0.05  # of the reported paired bootstrap interval
    # Also run the batch once more with no patch, in the candidates' lockstep groups: its
    # "delta" measures how much batch composition alone moves outcomes (pairing noise).
    control: bool = False
    # Run each candidate's overlay once more under the null policy (the model-free control):
    # its success is what the harness wins without the model (`CandidateResult.patch_alone`).
    # Costs env and hook time only; the advisory gate needs it.
    patch_alone: bool = True


CONTROL_ID = "control"


class CanaryProgress(Protocol):
    """Watches a canary's episodes (a progress bar, a metric): `planned` when a run of
    episodes is about to start (the total grows as runs are planned: the baseline, then the
    candidates), `finished` as each one ends (retries of infrastructure errors included)."""

    def planned(self, episodes: int) -> None: ...

    def finished(self, trajectory: Trajectory) -> None: ...


@dataclass(frozen=True)
class EpisodeOutcome:
    task_id: str
    seed: int
    success: bool
    reward: float
    tokens: int
    seconds: float
    steps: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    effects: dict[str, int] = field(default_factory=dict)
    origins: dict[str, int] = field(default_factory=dict)  # OriginCounts, as JSON


#: Executor counters that say something about the worker rather than one call.
WORKER_EVENTS = ("restarts", "start_failures", "refused", "unisolated_workers", "recycles")


def generation_identity(policy: object) -> dict[str, Any]:
    """The policy's settings that change what it writes (read from the attributes the backends
    expose; None where a backend has no such setting)."""
    sampling = getattr(policy, "sampling", None)
    return {
        "sampling": asdict(sampling) if is_dataclass(sampling) else None,  # type: ignore[arg-type]
        "max_prompt_tokens": getattr(policy, "max_prompt_tokens", None),
        "max_batch": getattr(policy, "max_batch", None),
        "prefix_cache": getattr(policy, "prefix_cache", None) is not None,
        "batched_decode": getattr(policy, "batched_decode", None),
        "draft_tokens": getattr(policy, "draft_tokens", None),
        "dtype": getattr(policy, "dtype", None),
    }


def _outcome(t: Trajectory) -> EpisodeOutcome:
    faults = Counter(f.reason for s in t.steps for f in s.faults)
    faults.update(f.reason for f in t.episode_start_faults)
    effects = Counter(str(e.kind) for s in t.steps for e in s.effects)
    effects.update(str(e.kind) for e in t.episode_start_effects)
    timing = t.timings
    return EpisodeOutcome(
        task_id=t.task.task_id,
        seed=t.task.seed,
        success=t.outcome.success,
        reward=t.outcome.reward,
        tokens=timing.generated_tokens,
        seconds=timing.model_seconds + timing.env_seconds + timing.hook_seconds,
        steps=t.outcome.steps,
        faults=dict(faults),
        effects=dict(effects),
        origins=t.origins.model_dump(),
    )


def origins_of(outcomes: Sequence[EpisodeOutcome]) -> OriginCounts:
    """The steps of these episodes by origin (a cached baseline without them counts none)."""
    return OriginCounts.total(OriginCounts(**o.origins) for o in outcomes)


def _caused_by_patch(t: Trajectory) -> bool:
    """An env error right after an action the patch chose (rewrite/force) is the patch's doing:
    it counts as a failed episode, not as infrastructure to retry."""
    if not t.steps:
        return False
    return any(e.kind in ("rewrite", "force") for e in t.steps[-1].effects)


def _close(hooks: HookSet) -> None:
    close = getattr(hooks, "close", None)
    if callable(close):
        close()


def _over_budget(patched: list[EpisodeOutcome]) -> str | None:
    """The hooks spent an episode's hook time budget (RunConfig.hook_budget_s): those episodes
    ran partly without the patch, so their outcome is not the patch's."""
    spent = sum(1 for outcome in patched if outcome.faults.get(HookFaultKind.OVER_BUDGET))
    if not spent:
        return None
    return (
        f"the hooks spent an episode's hook time budget in {spent} of {len(patched)} "
        "episodes: keep every hook call to a few milliseconds"
    )


def _refused(hooks: HookSet) -> bool:
    """The executor could not isolate or start the patch: infrastructure, not the patch."""
    events: dict[str, Any] = getattr(hooks, "events", None) or {}
    not_isolated = getattr(hooks, "isolated", True) is False
    return not_isolated or any(events.get(k, 0) for k in ("refused", "start_failures"))


class BaselineCache:
    """Baseline outcomes keyed by batch, target and run config; in memory, optionally on disk."""

    def __init__(self, directory: Path | None = None) -> None:
        self._memory: dict[str, list[EpisodeOutcome]] = {}
        self._directory = directory

    def get(self, key: str) -> list[EpisodeOutcome] | None:
        if key in self._memory:
            return self._memory[key]
        if self._directory is not None and (path := self._directory / f"{key}.json").is_file():
            rows = [EpisodeOutcome(**row) for row in json.loads(path.read_text())]
            self._memory[key] = rows
            return rows
        return None

    def put(self, key: str, outcomes: list[EpisodeOutcome]) -> None:
        self._memory[key] = outcomes
        if self._directory is not None:
            self._directory.mkdir(parents=True, exist_ok=True)
            tmp = self._directory / f".{key}.tmp"
            tmp.write_text(json.dumps([asdict(o) for o in outcomes]))
            tmp.rename(self._directory / f"{key}.json")


class InfraFailure(RuntimeError):
    pass


def _check_pairing(base: list[EpisodeOutcome], patched: list[EpisodeOutcome]) -> None:
    """A pair compares one task with itself: a baseline outcome matched to another task's
    patched outcome would keep every sum right and every per-task claim wrong."""
    pairs = zip(base, patched, strict=True)
    if any((b.task_id, b.seed) != (p.task_id, p.seed) for b, p in pairs):
        raise InfraFailure("canary pairing: baseline and patched outcomes are not the same tasks")


def _twin_result(first: CandidateResult, twin: Candidate) -> CandidateResult:
    """The result of a candidate whose composed overlay is `first`'s: the same verdict and
    pairs, its own id and patch digest, no cost (it ran no episode)."""
    own = twin.patch.sha256() if twin.patch is not None else None
    update = {"candidate_id": twin.candidate_id, "patch_sha256": own, "cost": CandidateCost()}
    return first.model_copy(update=update, deep=True)


class CanaryRunner:
    """Evaluates candidate patches against a shared baseline (see the module docstring)."""

    def __init__(
        self,
        runtime: HarnessRuntime,
        hooks_factory: HookSetFactory,
        validator: Validator,
        config: CanaryConfig | None = None,
        cache: BaselineCache | None = None,
        progress: CanaryProgress | None = None,
    ) -> None:
        self.runtime = runtime
        self.hooks_factory = hooks_factory
        self.validator = validator
        self.config = config or CanaryConfig()
        self.cache = cache or BaselineCache()
        self.progress = progress

    @property
    def target(self) -> TargetRef:
        policy = self.runtime.policy
        return TargetRef(model_id=policy.model_id, version=policy.version)

    def baseline_key(self, batch: CanaryBatch, incumbent: Incumbent = BASE_INCUMBENT) -> str:
        """Batch, incumbent, target and everything about how the target runs that can change an
        outcome (step limit, history, decoding settings, batching, prefix reuse): a baseline is
        shared only with candidates run exactly the same way on the same incumbent."""
        config = self.runtime.config
        key = [
            batch.batch_id,
            self.target.model_dump(),
            *incumbent.identity,
            config.max_steps,
            config.history_turns,
            config.lockstep,
            generation_identity(self.runtime.policy),
        ]
        return hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()

    # -- running episodes with retries --------------------------------------------------------

    def _run(
        self, specs: list[EpisodeSpec], runtime: HarnessRuntime | None = None
    ) -> dict[str, Trajectory]:
        """Run specs (on `runtime`, default the target's); re-run episodes that ended in an
        infrastructure error."""
        runtime = runtime or self.runtime
        pending, done = list(specs), {}
        watcher = self.progress
        for attempt in range(self.config.infra_retries + 1):
            if watcher is not None:
                watcher.planned(len(pending))
            try:
                trajectories = runtime.run(
                    pending, on_done=watcher.finished if watcher is not None else None
                )
            except PolicyError as err:
                log.warning("canary.policy_error", attempt=attempt, error=str(err))
                continue
            retry = []
            for spec, trajectory in zip(pending, trajectories, strict=True):
                error = trajectory.outcome.termination == Termination.ERROR
                if error and not _caused_by_patch(trajectory):
                    retry.append(spec)
                else:
                    done[spec.trajectory_id] = trajectory
            pending = retry
            if not pending:
                break
        for spec in pending:
            log.error("canary.infra_failure", trajectory_id=spec.trajectory_id)
        return done

    def _specs(self, batch: CanaryBatch, hooks: HookSet, prefix: str) -> list[EpisodeSpec]:
        return [
            EpisodeSpec(task=t, seed=s, hooks=hooks, trajectory_id=f"{prefix}-{i}")
            for i, (t, s) in enumerate(zip(batch.tasks, batch.seeds, strict=True))
        ]

    def _incumbent_hooks(self, incumbent: Incumbent) -> HookSet:
        if incumbent.patch is None:
            return NoHooks()
        return self.hooks_factory(incumbent.patch, incumbent.overlay_id)

    def baseline(
        self, batch: CanaryBatch, incumbent: Incumbent = BASE_INCUMBENT
    ) -> tuple[list[EpisodeOutcome], bool]:
        key = self.baseline_key(batch, incumbent)
        cached = self.cache.get(key)
        if cached is not None:
            return cached, True
        hooks = self._incumbent_hooks(incumbent)
        try:
            if _refused(hooks):
                raise InfraFailure(f"incumbent {incumbent.overlay_id}: isolation refused")
            specs = self._specs(batch, hooks, f"canary-{batch.batch_id[:12]}-base")
            done = self._run(specs)
        finally:
            _close(hooks)
        if len(done) != len(specs):
            raise InfraFailure(f"baseline of batch {batch.batch_id[:12]}: episodes kept failing")
        outcomes = [_outcome(done[s.trajectory_id]) for s in specs]
        self.cache.put(key, outcomes)
        return outcomes, False

    # -- the public entry point ---------------------------------------------------------------

    def evaluate(
        self,
        batch: CanaryBatch,
        candidates: Sequence[Candidate],
        incumbent: Incumbent = BASE_INCUMBENT,
        *,
        patch_alone: bool = True,
    ) -> CanaryReport:
        """Each candidate composed onto `incumbent` and paired against it on `batch`; with
        `patch_alone` (and the config's) also under the null policy."""
        ids = [c.candidate_id for c in candidates]
        if len(set(ids)) != len(ids) or (self.config.control and CONTROL_ID in ids):
            raise ValueError(
                f"candidate ids must be unique (and not {CONTROL_ID!r}): {sorted(ids)}"
            )
        started = time.perf_counter()
        base, cached = self.baseline(batch, incumbent)
        base_seconds = 0.0 if cached else time.perf_counter() - started
        results: dict[str, CandidateResult] = {}
        runnable: list[tuple[Candidate, HookSet]] = []
        composed: dict[str, str] = {}
        overlays: dict[str, Patch] = {}  # the composed overlay of each candidate that runs
        first_with: dict[str, Candidate] = {}  # composed overlay -> the candidate that runs it
        twins: list[tuple[Candidate, Candidate]] = []  # (a candidate, its overlay's first)
        for candidate in candidates:
            overlay, reason = self._overlay(candidate, incumbent)
            if reason is not None or overlay is None:
                reason = reason or "no_patch: the candidate carries no patch"
                results[candidate.candidate_id] = self._invalid(candidate, reason)
                continue
            composed[candidate.candidate_id] = sha = overlay.sha256()
            if sha in first_with:
                twins.append((candidate, first_with[sha]))
                continue
            first_with[sha] = candidate
            overlays[candidate.candidate_id] = overlay
            runnable.append((candidate, self.hooks_factory(overlay, candidate.candidate_id)))
        if self.config.control:
            runnable.append((Candidate(CONTROL_ID, None), self._incumbent_hooks(incumbent)))
        specs_by_candidate = {
            c.candidate_id: self._specs(
                batch, hooks, f"canary-{batch.batch_id[:12]}-{c.candidate_id}"
            )
            for c, hooks in runnable
        }
        try:
            done = self._run([s for specs in specs_by_candidate.values() for s in specs])
        finally:
            for _, hooks in runnable:
                _close(hooks)
        control = None
        for candidate, hooks in runnable:
            specs = specs_by_candidate[candidate.candidate_id]
            result = self._evaluated(candidate, hooks, specs, done, base)
            if candidate.candidate_id in composed:
                result = result.model_copy(
                    update={"composed_sha256": composed[candidate.candidate_id]}
                )
            if candidate.patch is None:
                control = result
            else:
                results[candidate.candidate_id] = result
        if self.config.patch_alone and patch_alone:
            self._patch_alone(batch, results, overlays)
        for twin, first in twins:
            results[twin.candidate_id] = _twin_result(results[first.candidate_id], twin)
        return CanaryReport(
            batch_id=batch.batch_id,
            env=batch.env,
            target=self.target,
            tasks=len(batch.tasks),
            incumbent_overlay_id=incumbent.overlay_id,
            baseline_cached=cached,
            baseline_success_rate=sum(o.success for o in base) / max(1, len(base)),
            baseline_origins=origins_of(base),
            baseline_cost=CandidateCost(
                episodes=0 if cached else len(base),
                steps=0 if cached else sum(o.steps for o in base),
                generated_tokens=0 if cached else sum(o.tokens for o in base),
                seconds=round(base_seconds, 3),
            ),
            candidates=[results[c.candidate_id] for c in candidates],
            control=control,
        )

    def _patch_alone(
        self,
        batch: CanaryBatch,
        results: dict[str, CandidateResult],
        overlays: dict[str, Patch],
    ) -> None:
        """The model-free control: every evaluated candidate's overlay once more under the null
        policy, on the same tasks and seeds, all in one lockstep run (no model time). Its
        success goes into the result as `patch_alone`; episodes that keep failing leave it
        None (the advisory gate then refuses to promote on missing evidence)."""
        evaluated = [cid for cid in overlays if results[cid].status == "evaluated"]
        if not evaluated:
            return
        started = time.perf_counter()
        null_runtime = self.runtime.with_policy(NullPolicy(self.runtime.policy.max_batch))
        runs: list[tuple[str, HookSet, list[EpisodeSpec]]] = []
        for cid in evaluated:
            hooks = self.hooks_factory(overlays[cid], cid)
            prefix = f"canary-{batch.batch_id[:12]}-{cid}-alone"
            runs.append((cid, hooks, self._specs(batch, hooks, prefix)))
        try:
            done = self._run([s for _, _, specs in runs for s in specs], null_runtime)
        finally:
            for _, hooks, _ in runs:
                _close(hooks)
        for cid, hooks, specs in runs:
            if _refused(hooks) or any(s.trajectory_id not in done for s in specs):
                log.warning("canary.patch_alone_missing", candidate=cid)
                continue
            outcomes = [_outcome(done[s.trajectory_id]) for s in specs]
            alone = PatchAlone(
                tasks=len(outcomes),
                successes=sum(o.success for o in outcomes),
                origins=origins_of(outcomes),
            )
            results[cid] = results[cid].model_copy(update={"patch_alone": alone})
        log.info(
            "canary.patch_alone",
            candidates=len(runs),
            episodes=len(done),
            seconds=round(time.perf_counter() - started, 3),
        )

    def _overlay(
        self, candidate: Candidate, incumbent: Incumbent
    ) -> tuple[Patch | None, str | None]:
        """The overlay a candidate runs as (its patch composed onto the incumbent), or why it
        cannot run: its own parse or static refusal, or the composition's."""
        if candidate.invalid_reason is not None or candidate.patch is None:
            return None, candidate.invalid_reason
        return composed_overlay(candidate.candidate_id, candidate.patch, incumbent, self.validator)

    def _invalid(self, candidate: Candidate, reason: str) -> CandidateResult:
        return CandidateResult(
            candidate_id=candidate.candidate_id,
            patch_sha256=candidate.patch.sha256() if candidate.patch else None,
            status="invalid",
            invalid_reason=reason,
            reward=self.config.invalid_reward,
        )

    def _evaluated(
        self,
        candidate: Candidate,
        hooks: HookSet,
        specs: list[EpisodeSpec],
        done: dict[str, Trajectory],
        base: list[EpisodeOutcome],
    ) -> CandidateResult:
        sha = candidate.patch.sha256() if candidate.patch is not None else None
        worker: dict[str, int] = getattr(hooks, "events", None) or {}
        events: Counter[str] = Counter({k: worker[k] for k in WORKER_EVENTS if worker.get(k)})
        missing = any(s.trajectory_id not in done for s in specs)
        if missing or _refused(hooks):
            reason = "episodes kept failing after retries" if missing else "isolation refused"
            return CandidateResult(
                candidate_id=candidate.candidate_id,
                patch_sha256=sha,
                status="infra_error",
                invalid_reason=f"infra: {reason}",
                sandbox_events=dict(events),
            )
        patched = [_outcome(done[s.trajectory_id]) for s in specs]
        _check_pairing(base, patched)
        effects: Counter[str] = Counter()
        for outcome in patched:
            events.update(outcome.faults)
            effects.update(outcome.effects)
        disabled = getattr(hooks, "disabled_reason", None) or _over_budget(patched)
        if disabled:
            # over the per-overlay budget: not judged on episodes it ran only partly; invalid,
            # with the reason in the engineer's terms
            result = self._invalid(candidate, f"hook_budget: {disabled}")
            return result.model_copy(update={"sandbox_events": dict(events)})
        pairs = [
            PairedTask(
                task_id=b.task_id,
                seed=b.seed,
                base_success=b.success,
                patched_success=p.success,
                base_reward=b.reward,
                patched_reward=p.reward,
            )
            for b, p in zip(base, patched, strict=True)
        ]
        n = len(pairs)
        delta = sum(p.patched_success - p.base_success for p in pairs) / n
        delta_reward = sum(p.patched_reward - p.base_reward for p in pairs) / n
        interval = bootstrap_delta_interval(
            [PairedOutcome(**p.model_dump()) for p in pairs],
            self.config.bootstrap_samples,
            self.config.alpha,
            seed=0,
        )
        return CandidateResult(
            candidate_id=candidate.candidate_id,
            patch_sha256=sha,
            status="evaluated",
            pairs=pairs,
            delta_success=delta,
            delta_mean_reward=delta_reward,
            delta_interval=interval,
            sandbox_events=dict(events),
            applied_effects=dict(effects),
            origins=origins_of(patched),
            cost=CandidateCost(
                episodes=n,
                steps=sum(p.steps for p in patched),
                generated_tokens=sum(p.tokens for p in patched),
                seconds=round(sum(p.seconds for p in patched), 3),
            ),
            reward=delta,
        )
