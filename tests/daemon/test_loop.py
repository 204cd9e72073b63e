"""The improvement loop on the real store, real WebShop episodes and the real sandbox, with
test doubles only for the two models (see daemon_rig.py)."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from daemon_rig import (
    ENV,
    SPLIT,
    ReferenceEngineer,
    canary_for,
    data_root,
    failed_trajectories,
    runtime,
)

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.daemon.loop import ImprovementLoop, TaskIndex
from harness_r1.daemon.loop_config import LoopConfig
from harness_r1.daemon.settings import LoopOptions
from harness_r1.daemon.store import StateStore, ingest_item
from harness_r1.deploy.publisher import Publisher
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.registry_records import OverlayState
from harness_r1.deploy.signing import Signer
from harness_r1.envs import get_suite
from harness_r1.harness import RunCancelled
from harness_r1.harness.episode import EpisodeSpec
from harness_r1.harness.tasks import spread
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.patchfile import reference_patches
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.trainer.engineer import EngineerSample
from harness_r1.trainer.writers import TemplateWriter

pytestmark = pytest.mark.integration


def build(tmp_path: Path, proposer, **config):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store, registry = StateStore(url), OverlayRegistry(url)
    sent: list[tuple[str, bytes]] = []
    publisher = Publisher(
        registry,
        Signer("k", Ed25519PrivateKey.generate()),
        lambda topic, value, key: sent.append((topic, value)),
    )
    defaults = {"batch_size": 12, "k": 3, "guard_limit": 20, "release_target": "shop"}
    defaults.update(config)
    max_attempts = defaults.pop("max_attempts", LoopConfig.max_attempts)
    loop = ImprovementLoop(
        store,
        registry,
        proposer,
        canary_for,
        TaskIndex(data_root()),
        LoopConfig(options=LoopOptions(**defaults), max_attempts=max_attempts),
        publisher,
    )
    return loop, store, registry, sent


def ingest(store: StateStore, trajectories) -> None:  # type: ignore[no-untyped-def]
    items = [
        ingest_item(t, t.to_json_bytes(), topic="t", partition=0, offset=i)
        for i, t in enumerate(trajectories)
    ]
    store.ingest(items, "g", {("t", 0): len(items)})


def test_failures_to_promoted_overlay_and_grpo_group(tmp_path: Path) -> None:
    loop, store, registry, sent = build(tmp_path, ReferenceEngineer())
    trajectories = failed_trajectories(12)
    ingest(store, trajectories)
    assert loop.flush() == 1
    outcome = loop.work_once("w1")
    assert outcome is not None
    assert outcome.rewards[0] is not None and outcome.rewards[0] > 0, outcome  # it helps here
    assert outcome.rewards[1:] == (0.0, 0.0)  # static rejection, unparseable: invalid -> 0
    assert outcome.verdicts[0] == "promote" and outcome.overlay_id is not None
    record = registry.get(outcome.overlay_id)
    assert record.state is OverlayState.CANARY and record.target == "shop"
    assert record.group_id == outcome.batch_id and record.packet_id == outcome.packet_id
    assert [topic for topic, _ in sent] == ["harness-r1.overlay-releases"]
    # one known agent: no widening could keep a control group, the configured fraction stays
    assert store.agent_ids() == sorted({t.agent_id for t in trajectories}) and len(sent) == 1
    assert record.evidence["rollout_fraction"] == 0.5
    rows = store.canary_results(outcome.batch_id)
    assert [r.status for r in rows] == ["evaluated", "invalid", "invalid"]
    assert rows[0].overlay_id == outcome.overlay_id
    [group] = store.untrained_groups()
    assert list(group.rewards) == list(outcome.rewards)
    assert "messages" in json.loads(group.prompt)  # no token ids: kept for SFT, not replay
    assert store.batch_state(outcome.batch_id) == "done"
    # the same batch processed again (a lease taken over after a crash): no second overlay
    from harness_r1.daemon.store import Batch, BatchKey

    key = BatchKey("webshop", "scripted@1", "base")
    again = Batch(outcome.batch_id, key, tuple(t.trajectory_id for t in trajectories), 2, None)
    assert loop.process(again).overlay_id == outcome.overlay_id  # type: ignore[arg-type]
    assert len(registry.list(target="shop")) == 1 and len(sent) == 1
    # the overlay is announced again with a fresh seq (fresh agents must find it unexpired)
    assert loop.announce() == [outcome.overlay_id]
    assert [topic for topic, _ in sent] == ["harness-r1.overlay-releases"] * 2


def test_template_teacher_batch_is_evaluated_and_stored(tmp_path: Path) -> None:
    loop, store, registry, _ = build(tmp_path, TemplateWriter(), k=2, guard_limit=0)
    ingest(store, failed_trajectories(8, offset=1))
    assert loop.flush(datetime.now(UTC) + timedelta(hours=1)) == 1  # the window expired
    outcome = loop.work_once("w1")
    assert outcome is not None and len(outcome.rewards) == 2
    assert store.count_canary_results() == 2
    assert all(v != "promote" for v in outcome.verdicts)  # no guard set: never promoted


def test_graded_invalid_rewards_rank_the_refused_candidates(tmp_path: Path) -> None:
    """With graded_invalid the stored group ranks a static rejection above unparseable text
    (trainer.shaping), as `train grpo online --graded-invalid` does; the evaluated patch keeps its
    delta."""
    loop, store, _, _ = build(
        tmp_path, ReferenceEngineer(), guard_limit=0, invalid_reward=-0.4, graded_invalid=True
    )
    ingest(store, failed_trajectories(12))
    assert loop.flush() == 1
    outcome = loop.work_once("w1")
    assert outcome is not None
    assert outcome.rewards[0] is not None and outcome.rewards[0] > 0
    assert outcome.rewards[1:] == pytest.approx((-0.1, -0.4))  # static, then no patch block
    [group] = store.untrained_groups()
    assert list(group.rewards) == list(outcome.rewards)


def test_a_patch_the_canary_validator_refuses_gets_the_runner_grade(tmp_path: Path) -> None:
    """A proposal valid to the engineer's checks but refused by the canary's own validator is
    graded as refused by the runner (the same grade `train grpo` gives it)."""
    from daemon_rig import runtime

    from harness_r1.sandbox.canary import CanaryRunner

    def refusing_canary(env: str) -> CanaryRunner:
        return CanaryRunner(runtime("canary"), lambda patch, cid: None, lambda p: "policy: no")

    loop, store, _, _ = build(
        tmp_path, ReferenceEngineer(), k=1, guard_limit=0, invalid_reward=-0.4, graded_invalid=True
    )
    loop.canary_for = refusing_canary
    ingest(store, failed_trajectories(12))
    assert loop.flush() == 1
    outcome = loop.work_once("w1")
    assert outcome is not None and outcome.rewards == pytest.approx((-0.1,))
    assert [r.status for r in store.canary_results(outcome.batch_id)] == ["invalid"]


def test_back_pressure_keeps_failures_buffered(tmp_path: Path) -> None:
    loop, store, _, _ = build(tmp_path, TemplateWriter(), batch_size=2, max_pending_batches=2)
    ingest(store, failed_trajectories(8, offset=2))
    assert loop.flush() == 2
    assert loop.flush() == 0  # two batches wait: nothing more is sealed, nothing dropped
    assert sum(b.size for b in store.open_buffers()) == 4


def test_infrastructure_failure_is_retried_not_rewarded(tmp_path: Path) -> None:
    def broken(env: str):  # type: ignore[no-untyped-def]
        raise ConnectionError("target model unreachable")

    loop, store, _, _ = build(tmp_path, TemplateWriter(), batch_size=4, max_attempts=2)
    loop.canary_for = broken
    ingest(store, failed_trajectories(4, offset=3))
    loop.flush()
    assert loop.work_once("w1") is None
    assert store.pending_batches() == 1 and store.count_canary_results() == 0
    assert loop.work_once("w1") is None
    assert store.pending_batches() == 0 and store.count_groups() == 0


def test_a_canary_cancelled_by_a_stop_hands_its_batch_back_without_using_an_attempt(
    tmp_path: Path,
) -> None:
    """The daemon's stop cancels the canary under way (RunCancelled from the runtime): the
    batch goes back to pending at once, its attempt not counted, so stopping any number of
    times never makes a batch fail; the next claim sees its first attempt."""

    def stopping(env: str):  # type: ignore[no-untyped-def]
        raise RunCancelled("cancelled with 5 episodes left")

    loop, store, _, _ = build(tmp_path, TemplateWriter(), batch_size=4, max_attempts=1)
    loop.canary_for = stopping
    ingest(store, failed_trajectories(4, offset=3))
    loop.flush()
    for _ in range(3):  # more stops than max_attempts
        assert loop.work_once("w1") is None
        assert store.pending_batches() == 1 and store.running_batches() == 0
    batch = store.claim_batch("w2", 60, max_attempts=1)
    assert batch is not None and batch.attempts == 1
    assert store.count_canary_results() == 0


def test_hand_back_all_returns_what_a_stuck_worker_holds(tmp_path: Path) -> None:
    """A worker still in a model call past the drain: the stopping daemon hands its batch
    back from another thread; the worker's own finish then finds it no longer holds it."""
    entered, release = threading.Event(), threading.Event()

    def stuck(env: str):  # type: ignore[no-untyped-def]
        entered.set()
        release.wait(30)
        raise RunCancelled("cancelled late")

    loop, store, _, _ = build(tmp_path, TemplateWriter(), batch_size=4)
    loop.canary_for = stuck
    ingest(store, failed_trajectories(4, offset=3))
    loop.flush()
    worker = threading.Thread(target=loop.work_once, args=("w1",))
    worker.start()
    assert entered.wait(30)
    assert store.running_batches() == 1
    assert loop.hand_back_all() == 1
    assert store.pending_batches() == 1 and store.running_batches() == 0
    assert loop.hand_back_all() == 0
    release.set()
    worker.join(30)
    assert store.pending_batches() == 1  # the late release found nothing to hand back
    batch = store.claim_batch("w2", 60)
    assert batch is not None and batch.attempts == 1


class WithTokenIds(ReferenceEngineer):
    """TEST DOUBLE: the reference double's texts with (made-up) exact token ids, so its groups
    are stored replayable, naming the engineer that wrote them."""

    def __init__(self, name: str, swap_to: WithTokenIds | None = None) -> None:
        self.name, self.swap_to = name, swap_to
        self.loop: ImprovementLoop | None = None

    def samples(self, packet, k, seed):  # type: ignore[no-untyped-def]
        if self.swap_to is not None and self.loop is not None:
            self.loop.swap_proposer(self.swap_to)  # a GRPO update lands mid-batch
        return [
            EngineerSample(text=s.text, prompt_ids=[1, 2, 3], completion_ids=[4, i + 5])
            for i, s in enumerate(super().samples(packet, k, seed))
        ]


def test_a_swapped_engineer_proposes_from_the_next_batch_on(tmp_path: Path) -> None:
    first = WithTokenIds("engineer-v1", swap_to=WithTokenIds("engineer-v2"))
    loop, store, _, _ = build(tmp_path, first, batch_size=4, k=2, guard_limit=0)
    first.loop = loop
    ingest(store, failed_trajectories(8, offset=3))
    assert loop.flush() == 2
    assert loop.work_once("w1") is not None and loop.proposer.name == "engineer-v2"
    assert loop.work_once("w1") is not None
    older, newer = (json.loads(g.prompt)["replay"] for g in store.untrained_groups())
    # the batch running during the swap is stored under the engineer that wrote it
    assert (older["engineer_version"], newer["engineer_version"]) == (
        "engineer-v1",
        "engineer-v2",
    )


def test_an_inconclusive_candidate_is_neither_registered_nor_released(tmp_path: Path) -> None:
    """A batch gain with no guard set is "inconclusive" at the gate, and inconclusive is "no":
    the loop registers no overlay, publishes no release and links no candidate to one."""
    loop, store, registry, sent = build(tmp_path, ReferenceEngineer(), guard_limit=0)
    ingest(store, failed_trajectories(12))
    assert loop.flush() == 1
    outcome = loop.work_once("w1")
    assert outcome is not None
    assert outcome.rewards[0] is not None and outcome.rewards[0] > 0  # it does help the batch
    assert outcome.verdicts[0] == "inconclusive", outcome.verdicts
    assert outcome.overlay_id is None
    assert registry.list(target="shop") == [], "an inconclusive candidate was registered"
    assert sent == [], "an inconclusive candidate was released"
    assert [r.overlay_id for r in store.canary_results(outcome.batch_id)] == [None] * 3


# -- improvement accumulates (issue 17) -------------------------------------------------------

NOTE = Patch(
    env="webshop",
    description="round 1: a note",
    hooks=[
        HookCode(
            hook=HookName.PRE_DECISION,
            code="def hook(ctx, state):\n    return 'Buy the closest match.'\n",
        )
    ],
)


def trajectories_under(overlay_id: str, patch: Patch, n: int, offset: int = 0):  # type: ignore[no-untyped-def]
    """n real WebShop episodes of the junk target under `patch`, recorded as `overlay_id`."""
    tasks = spread(get_suite(ENV).load_tasks(data_root(), SPLIT), n, offset)
    run = runtime()
    hooks = IsolatedHooks(patch, SandboxConfig(call_budget_s=2.0), overlay_id=overlay_id)
    try:
        return run.run([EpisodeSpec(task=t, seed=i, hooks=hooks) for i, t in enumerate(tasks)])
    finally:
        hooks.close()
        run.close()


def live(registry: OverlayRegistry, patch: Patch) -> str:
    """`patch` as the pool's active overlay (as the live guard leaves a winner)."""
    record = registry.add(patch, "shop")
    for state in (OverlayState.CANARY, OverlayState.ACTIVE):
        registry.transition(record.overlay_id, state, actor="test", reason="round 1 won")
    return record.overlay_id


def test_round_two_composes_onto_round_one_and_keeps_its_hooks(tmp_path: Path) -> None:
    loop, store, registry, sent = build(tmp_path, ReferenceEngineer(), k=1)
    round_one = live(registry, NOTE)
    ingest(store, trajectories_under(round_one, NOTE, 12))
    assert loop.flush() == 1
    outcome = loop.work_once("w1")
    assert outcome is not None and outcome.verdicts == ("promote",), outcome
    record = registry.get(outcome.overlay_id)  # type: ignore[arg-type]
    assert record.parent_overlay_id == round_one
    shopper = next(iter(reference_patches("webshop").values()))
    # round 1's note still runs, and the shopper's hooks with it
    assert record.patch.code_for(HookName.PRE_DECISION) is not None
    assert {h.hook for h in record.patch.hooks} == {h.hook for h in [*NOTE.hooks, *shopper.hooks]}
    link = registry.link(record.overlay_id)
    assert link is not None and link.patch == shopper
    assert [oid for oid, _ in registry.chain(record.overlay_id)] == [round_one, record.overlay_id]
    assert [topic for topic, _ in sent] == ["harness-r1.overlay-releases"]  # onto the live one


def test_a_repeat_of_the_incumbent_scores_zero_and_is_not_promoted(tmp_path: Path) -> None:
    loop, store, registry, sent = build(tmp_path, ReferenceEngineer(), k=1)
    shopper = next(iter(reference_patches("webshop").values()))
    round_one = live(registry, shopper)
    ingest(store, trajectories_under(round_one, shopper, 12))
    assert loop.flush(datetime.now(UTC) + timedelta(hours=1)) == 1  # the shopper wins some
    outcome = loop.work_once("w1")
    assert outcome is not None and outcome.rewards == (0.0,), outcome
    assert outcome.verdicts != ("promote",) and outcome.overlay_id is None
    assert sent == [] and len(registry.list(target="shop")) == 1


def test_failures_of_a_harness_that_is_not_the_incumbent_are_stale(tmp_path: Path) -> None:
    loop, store, registry, sent = build(tmp_path, ReferenceEngineer(), k=1, batch_size=4)
    ingest(store, failed_trajectories(4, offset=5))  # recorded under the base harness
    live(registry, NOTE)  # ... which is no longer what the pool runs
    assert loop.flush() == 1
    assert loop.work_once("w1") is None
    assert len(store.batch_ids(state="stale")) == 1 and store.pending_batches() == 0
    assert store.count_canary_results() == 0 and store.count_groups() == 0
    assert sent == []


def test_seal_now_ends_one_harness_window_and_leaves_the_others(tmp_path: Path) -> None:
    loop, store, registry, sent = build(tmp_path, ReferenceEngineer(), k=1, batch_size=3)
    ingest(store, failed_trajectories(5))  # base: 5 failures, window far from over
    round_one = live(registry, NOTE)
    ingest(store, trajectories_under(round_one, NOTE, 2))
    sealed = loop.seal_now(ENV, round_one)
    assert len(sealed) == 1  # only round one's failures, whatever their age or count
    assert loop.seal_now(ENV, round_one) == []  # nothing of it left
    assert [b.key.harness_version for b in store.open_buffers()] == ["base"]
    assert [b.size for b in store.open_buffers()] == [5]


def test_a_task_failed_twice_with_the_same_seed_is_canaried_once(tmp_path: Path) -> None:
    loop, store, registry, sent = build(tmp_path, ReferenceEngineer(), k=1, batch_size=8)
    once = failed_trajectories(4)
    again = [t.model_copy(update={"trajectory_id": t.trajectory_id + "-again"}) for t in once]
    ingest(store, [*once, *again])
    assert loop.flush() == 1
    outcome = loop.work_once("w1")
    assert outcome is not None
    with sqlite3.connect(tmp_path / "state.db") as db:
        [(report,)] = db.execute("SELECT report_json FROM daemon_canary_reports").fetchall()
    assert json.loads(report)["batch"]["tasks"] == 4  # 8 failures, 4 distinct (task, seed)
