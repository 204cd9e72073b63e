"""The held-out gate's guard: one run per patch over the pool, each packet's guard read from it.

The evaluator here is a test double that records what it is asked to run and answers with
fixed outcomes (the real canary runs the guard in tests/trainer/test_heldout.py's gate test);
what is tested is the bookkeeping: which candidates run, on which batch, and which pairs a
packet's guard keeps."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

import pytest

from harness_r1.contracts import (
    CanaryReport,
    CandidateCost,
    CandidateResult,
    HookCode,
    PairedTask,
    Patch,
    TargetRef,
    TaskSpec,
)
from harness_r1.sandbox.canary import BASE_INCUMBENT, CanaryBatch, Candidate, Incumbent
from harness_r1.sandbox.compose import Link
from harness_r1.trainer.heldout import HeldOutGate


def _task(i: int) -> TaskSpec:
    return TaskSpec(
        env="webshop", split="heldout", task_id=f"t{i}", task_type="buy", instruction=""
    )


POOL = CanaryBatch("webshop", tuple(_task(i) for i in range(6)), tuple(range(6)))
#: one task at two seeds beside another: a guard keeps (task, seed) pairs, not tasks
SEEDED = CanaryBatch("webshop", (_task(0), _task(0), _task(1)), (0, 1, 0))


def _patch(code: str) -> Patch:
    return Patch(env="webshop", hooks=[HookCode(hook="pre_action", code=code)])


SAME = _patch("def hook(ctx, state):\n    return None\n")
OTHER = _patch("def hook(ctx, state):\n    return 1\n")


class RecordingEvaluator:
    """Test double: records each call's tasks, candidates and incumbent; every candidate is
    evaluated, patched success on even task numbers, base success never; `fail` makes a
    candidate an infra error, `over_budget` an invalid one."""

    def __init__(self, fail: Sequence[str] = (), over_budget: Sequence[str] = ()) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []
        self.incumbents: list[list[str]] = []
        self.fail = set(fail)
        self.over_budget = set(over_budget)

    def evaluate(
        self,
        batch: CanaryBatch,
        candidates: Sequence[Candidate],
        incumbent: Incumbent = BASE_INCUMBENT,
        *,
        patch_alone: bool = True,
    ) -> CanaryReport:
        self.calls.append(([t.task_id for t in batch.tasks], [c.candidate_id for c in candidates]))
        self.incumbents.append(incumbent.identity)
        results = [self._result(batch, c) for c in candidates]
        return CanaryReport(
            batch_id=batch.batch_id,
            env=batch.env,
            target=TargetRef(model_id="double", version="0"),
            tasks=len(batch.tasks),
            baseline_cached=False,
            baseline_success_rate=0.0,
            baseline_cost=CandidateCost(episodes=len(batch.tasks)),
            candidates=results,
        )

    def _result(self, batch: CanaryBatch, candidate: Candidate) -> CandidateResult:
        if candidate.candidate_id in self.fail:
            return CandidateResult(
                candidate_id=candidate.candidate_id, patch_sha256=None, status="infra_error"
            )
        if candidate.candidate_id in self.over_budget:
            return CandidateResult(
                candidate_id=candidate.candidate_id,
                patch_sha256=None,
                status="invalid",
                invalid_reason="hook_budget: over",
                cost=CandidateCost(episodes=len(batch.tasks)),
            )
        pairs = [
            PairedTask(
                task_id=t.task_id,
                seed=s,
                base_success=False,
                patched_success=int(t.task_id[1:]) % 2 == 0,
                base_reward=0.0,
                patched_reward=0.0,
            )
            for t, s in zip(batch.tasks, batch.seeds, strict=True)
        ]
        return CandidateResult(
            candidate_id=candidate.candidate_id,
            patch_sha256=None,
            status="evaluated",
            pairs=pairs,
            cost=CandidateCost(episodes=len(batch.tasks)),
        )


def _source(first: int, pool: CanaryBatch = POOL, size: int = 2) -> Any:
    """A packet of `size` pool tasks (what `guard_pairs` reads of a PacketSource)."""
    tasks, seeds = pool.tasks[first : first + size], pool.seeds[first : first + size]
    return SimpleNamespace(tasks=tasks, seeds=seeds, incumbent=BASE_INCUMBENT)


def test_a_patch_runs_once_on_the_pool_and_each_packet_keeps_the_other_tasks() -> None:
    gate = HeldOutGate(POOL)
    runner = RecordingEvaluator()
    pairs, episodes = gate.guard_pairs(
        _source(0), [Candidate("p0", SAME), Candidate("p1", SAME)], runner
    )
    # one run over the whole pool for both proposals of the same patch
    assert runner.calls == [([f"t{i}" for i in range(6)], ["p0"])]
    assert episodes == 6 + 6  # the pool's baseline (not cached by the double) + the patch
    assert [p.task_id for p in pairs["p0"]] == ["t2", "t3", "t4", "t5"]
    assert pairs["p1"] == pairs["p0"]
    # the next packet proposes the same patch and a new one: only the new one runs
    pairs, episodes = gate.guard_pairs(
        _source(2), [Candidate("p0", SAME), Candidate("p1", OTHER)], runner
    )
    assert runner.calls[1:] == [([f"t{i}" for i in range(6)], ["p1"])]
    assert episodes == 12
    assert [p.task_id for p in pairs["p0"]] == ["t0", "t1", "t4", "t5"]
    assert [p.patched_success for p in pairs["p1"]] == [True, False, True, False]
    # a fresh gate (another evaluation) runs it again
    HeldOutGate(POOL).guard_pairs(_source(0), [Candidate("p0", SAME)], runner)
    assert len(runner.calls) == 3


def test_a_patch_the_pool_run_did_not_evaluate_has_no_guard_and_is_tried_again() -> None:
    gate = HeldOutGate(POOL)
    pairs, episodes = gate.guard_pairs(
        _source(0), [Candidate("p0", SAME)], RecordingEvaluator(fail=["p0"])
    )
    assert pairs == {} and episodes == 6  # the baseline ran; the candidate had no episodes
    runner = RecordingEvaluator()
    pairs, _ = gate.guard_pairs(_source(0), [Candidate("p0", SAME)], runner)
    assert len(runner.calls) == 1 and len(pairs["p0"]) == 4


def test_the_same_patch_on_another_incumbent_is_another_run() -> None:
    gate = HeldOutGate(POOL)
    runner = RecordingEvaluator()
    gate.guard_pairs(_source(0), [Candidate("p0", SAME)], runner)
    source = _source(0)
    source.incumbent = Incumbent.of_chain("live-1", [Link("l1", OTHER)])
    gate.guard_pairs(source, [Candidate("p0", SAME)], runner)
    gate.guard_pairs(source, [Candidate("p0", SAME)], runner)
    assert len(runner.calls) == 2
    assert runner.incumbents == [["base"], source.incumbent.identity]


def test_a_packet_leaves_out_its_own_seed_of_a_task_not_the_task() -> None:
    gate = HeldOutGate(SEEDED)
    pairs, _ = gate.guard_pairs(
        _source(0, SEEDED, size=1), [Candidate("p0", SAME)], RecordingEvaluator()
    )
    assert [(p.task_id, p.seed) for p in pairs["p0"]] == [("t0", 1), ("t1", 0)]


def test_a_patch_over_its_budget_on_the_pool_is_not_run_again() -> None:
    gate = HeldOutGate(POOL)
    runner = RecordingEvaluator(over_budget=["p0"])
    for first in (0, 2):
        pairs, _ = gate.guard_pairs(_source(first), [Candidate("p0", SAME)], runner)
        assert pairs == {}  # no guard: not promoted
    assert len(runner.calls) == 1


def test_a_pool_that_repeats_a_task_and_seed_is_refused() -> None:
    task = _task(0)
    with pytest.raises(ValueError, match="repeats"):
        HeldOutGate(CanaryBatch("webshop", (task, task), (0, 0)))


def test_the_guard_leaves_out_nothing_but_the_packets_own_tasks() -> None:
    gate = HeldOutGate(POOL)
    batch = gate.guard_for(cast(Any, _source(4)))
    assert batch is not None and [t.task_id for t in batch.tasks] == ["t0", "t1", "t2", "t3"]
