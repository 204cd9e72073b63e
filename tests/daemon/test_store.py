"""The daemon's state store on a real SQLite file and on PostgreSQL (when one answers locally).

What the rest of the daemon relies on: a trajectory is stored once however often it is
delivered, and its failure is buffered once; positions only move forward and move in the same
transaction as the rows; a batch is held by one worker at a time (also when workers race, and
after a worker dies); a superseded worker cannot record an outcome; retention never drops what
is still open; the schema upgrades in place and refuses to be run by older code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, create_engine, inspect, text

from harness_r1.consumers.records import Record
from harness_r1.contracts import Outcome, TargetRef, TaskRef, Termination, Timings, Trajectory
from harness_r1.daemon.deadletter import DeadLetter, ReasonCode, dead_letter
from harness_r1.daemon.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    BatchKey,
    CandidateRow,
    IngestItem,
    IngestLease,
    IngestLeaseLost,
    LeaseLost,
    SchemaTooNew,
    StateStore,
    StoreBase,
    StoreError,
    UnknownTrajectory,
    ingest_item,
    upgrade,
)

GROUP = "daemon"
TOPIC = "harness.trajectories"
KEY = BatchKey("dbbench", "tiny@1", "base")


@pytest.fixture
def store(db_url: str) -> Iterator[StateStore]:
    with StateStore(db_url) as s:
        yield s


def item(
    tid: str,
    *,
    failed: bool = True,
    offset: int = 0,
    partition: int = 0,
    env: str = "dbbench",
    target: str = "tiny@1",
    harness: str = "base",
) -> IngestItem:
    return IngestItem(
        trajectory_id=tid,
        env=env,
        target=target,
        harness_version=harness,
        agent_id="agent-1",
        task_id=f"task-{tid}",
        task_type="counting",
        success=not failed,
        reward=0.0 if failed else 1.0,
        failed=failed,
        payload=f'{{"trajectory_id": "{tid}"}}'.encode(),
        topic=TOPIC,
        partition=partition,
        offset=offset,
    )


def fill(store: StateStore, n: int, prefix: str = "t", key: BatchKey = KEY) -> list[str]:
    ids = [f"{prefix}{i:03d}" for i in range(n)]
    items = [
        item(tid, offset=i, env=key.env, target=key.target, harness=key.harness_version)
        for i, tid in enumerate(ids)
    ]
    store.ingest(items, GROUP, {(TOPIC, 0): n})
    return ids


# --- ingest ---------------------------------------------------------------------------------


def test_dedup_within_and_across_calls_positions_still_advance(store: StateStore) -> None:
    first = store.ingest([item("a", offset=0), item("a", offset=1)], GROUP, {(TOPIC, 0): 2})
    assert (first.new, first.duplicates, first.failures) == (1, 1, 1)
    again = store.ingest([item("a", offset=2), item("b", offset=3)], GROUP, {(TOPIC, 0): 4})
    assert (again.new, again.duplicates, again.failures) == (1, 1, 1)
    assert store.trajectory_count() == 2
    assert store.positions(GROUP) == {(TOPIC, 0): 4}
    # A batch of nothing but redeliveries still moves the group on.
    only_dupes = store.ingest([item("b", offset=4)], GROUP, {(TOPIC, 0): 5})
    assert (only_dupes.new, only_dupes.duplicates) == (0, 1)
    assert store.positions(GROUP) == {(TOPIC, 0): 5}
    assert [b.size for b in store.open_buffers()] == [2]  # "a" buffered once
    assert store.has_trajectory("a") and not store.has_trajectory("zzz")
    assert store.load_trajectory_payloads(["b", "a"]) == [
        b'{"trajectory_id": "b"}',
        b'{"trajectory_id": "a"}',
    ]
    with pytest.raises(UnknownTrajectory):
        store.load_trajectory_payloads(["a", "missing"])


def test_failures_are_buffered_per_key(store: StateStore) -> None:
    other_target = BatchKey("dbbench", "tiny@2", "base")
    other_harness = BatchKey("dbbench", "tiny@1", "ov-1")
    items = [
        item("f1", offset=0),
        item("ok", failed=False, offset=1),
        item("f2", offset=2, target="tiny@2"),
        item("f3", offset=3, harness="ov-1"),
        item("f4", offset=4),
        item("w1", offset=5, env="webshop", failed=False),
    ]
    result = store.ingest(items, GROUP, {(TOPIC, 0): 6})
    assert (result.new, result.failures) == (6, 4)
    sizes = {b.key: b.size for b in store.open_buffers()}
    assert sizes == {KEY: 2, other_target: 1, other_harness: 1}
    buffers = store.open_buffers()
    assert buffers[0].key == KEY  # oldest first (ties: by key)
    assert all(b.oldest_at.tzinfo is UTC for b in buffers)
    assert store.trajectory_count("dbbench") == 5 and store.trajectory_count("webshop") == 1


def test_positions_only_move_forward(store: StateStore) -> None:
    store.ingest([item("a", offset=9)], GROUP, {(TOPIC, 0): 10, (TOPIC, 1): 3})
    store.ingest([], GROUP, {(TOPIC, 0): 4, (TOPIC, 1): 7})
    assert store.positions(GROUP) == {(TOPIC, 0): 10, (TOPIC, 1): 7}
    store.advance_positions(GROUP, {(TOPIC, 0): 2, (TOPIC, 2): 1})
    assert store.positions(GROUP) == {(TOPIC, 0): 10, (TOPIC, 1): 7, (TOPIC, 2): 1}
    store.advance_positions(GROUP, {(TOPIC, 0): 11})
    assert store.positions(GROUP)[(TOPIC, 0)] == 11
    assert store.positions("other-group") == {}
    assert store.trajectory_count() == 1  # advancing stores nothing


# --- batches --------------------------------------------------------------------------------


def test_seal_claim_finish_lifecycle(store: StateStore) -> None:
    assert store.seal_batch(KEY, 10) is None
    ids = fill(store, 5)
    batch_id = store.seal_batch(KEY, 3)
    assert batch_id is not None and batch_id.startswith("b-") and len(batch_id) == 14
    assert [b.size for b in store.open_buffers()] == [2]
    assert store.pending_batches() == 1 and store.running_batches() == 0

    batch = store.claim_batch("w1", 30)
    assert batch is not None
    assert batch.batch_id == batch_id and batch.key == KEY
    assert batch.trajectory_ids == tuple(ids[:3])  # oldest first
    assert batch.attempts == 1 and batch.created_at.tzinfo is UTC
    assert store.pending_batches() == 0 and store.running_batches() == 1
    assert store.claim_batch("w2", 30) is None  # held, lease not expired

    assert store.renew_lease(batch_id, "w1", 30)
    assert not store.renew_lease(batch_id, "w2", 30)
    store.finish_batch(batch_id, "w1", "done")
    assert store.batch_state(batch_id) == "done"
    assert store.running_batches() == 0
    with pytest.raises(LeaseLost):
        store.finish_batch(batch_id, "w1", "failed")

    rest = store.seal_batch(KEY, 10)
    assert rest is not None and store.open_buffers() == []
    claimed = store.claim_batch("w1", 30)
    assert claimed is not None and claimed.trajectory_ids == tuple(ids[3:])


def test_expired_lease_is_reclaimed_and_the_old_worker_refused(store: StateStore) -> None:
    fill(store, 2)
    batch_id = store.seal_batch(KEY, 10)
    first = store.claim_batch("w1", 0.05)
    assert first is not None and first.batch_id == batch_id
    time.sleep(0.15)
    second = store.claim_batch("w2", 30)
    assert second is not None and second.batch_id == batch_id and second.attempts == 2
    assert not store.renew_lease(batch_id, "w1", 30)
    with pytest.raises(LeaseLost, match="w1"):
        store.finish_batch(batch_id, "w1", "done")
    assert store.release_batch(batch_id, "w1") is False
    store.finish_batch(batch_id, "w2", "failed", "canary crashed")
    assert store.batch_state(batch_id) == "failed"


def test_release_and_give_up_after_max_attempts(store: StateStore) -> None:
    fill(store, 1)
    batch_id = store.seal_batch(KEY, 10)
    assert batch_id is not None
    for attempt in (1, 2):
        batch = store.claim_batch("w1", 30, max_attempts=2)
        assert batch is not None and batch.attempts == attempt
        assert store.release_batch(batch_id, "w1")
        assert store.batch_state(batch_id) == "pending"
    # Claimed twice without finishing: the third claim marks it failed instead.
    assert store.claim_batch("w1", 30, max_attempts=2) is None
    assert store.batch_state(batch_id) == "failed"


def test_a_batch_handed_back_at_a_stop_keeps_its_attempts(store: StateStore) -> None:
    """A daemon's stop hands its batch back without counting the attempt: stopping any number
    of times never makes a batch fail."""
    fill(store, 1)
    batch_id = store.seal_batch(KEY, 10)
    assert batch_id is not None
    for _ in range(4):
        batch = store.claim_batch("w1", 30, max_attempts=2)
        assert batch is not None and batch.attempts == 1
        assert store.release_batch(batch_id, "w1", count_attempt=False)
        assert store.batch_state(batch_id) == "pending"
    assert store.release_batch(batch_id, "w1", count_attempt=False) is False  # not held


def test_an_unreplayable_failure_is_stored_and_counted_not_buffered(store: StateStore) -> None:
    unknown = replace(item("u", offset=0), replayable=False)
    result = store.ingest([unknown, item("k", offset=1)], GROUP, {(TOPIC, 0): 2})
    assert (result.new, result.failures) == (2, 1)
    assert result.unreplayable == {"dbbench": 1}
    assert store.has_trajectory("u")
    assert sum(b.size for b in store.open_buffers()) == 1


def test_reset_position_moves_a_position_back(store: StateStore) -> None:
    store.ingest([item("a", offset=5)], GROUP, {(TOPIC, 0): 6})
    assert store.reset_position(GROUP, TOPIC, 0, 0) == 6
    assert store.positions(GROUP) == {(TOPIC, 0): 0}
    assert store.reset_position(GROUP, TOPIC, 1, 3) == 0  # a partition with no position yet
    assert store.positions(GROUP)[(TOPIC, 1)] == 3


def test_concurrent_claims_never_share_a_batch(db_url: str) -> None:
    stores = [StateStore(db_url), StateStore(db_url)]
    try:
        for i in range(50):
            fill(stores[0], 1, prefix=f"c{i:02d}-")
            assert stores[0].seal_batch(KEY, 1) is not None
        claimed: list[list[str]] = [[] for _ in range(4)]
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def work(i: int) -> None:
            try:
                start.wait()
                while (batch := stores[i % 2].claim_batch(f"w{i}", 60)) is not None:
                    claimed[i].append(batch.batch_id)
            except BaseException as err:  # surfaced below
                errors.append(err)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        every = [b for ids in claimed for b in ids]
        assert len(every) == 50 and len(set(every)) == 50
        assert stores[0].running_batches() == 50 and stores[0].pending_batches() == 0
    finally:
        for s in stores:
            s.close()


# --- results and groups ---------------------------------------------------------------------


def _candidate(cid: str, reward: float | None) -> CandidateRow:
    return CandidateRow(cid, f"<patch>{cid}</patch>", None, "ok", reward, 0.1, "promote", None)


def test_packets_and_canary_results(store: StateStore) -> None:
    fill(store, 1)
    batch_id = store.seal_batch(KEY, 10)
    assert batch_id is not None
    store.save_packet(batch_id, "p-1", '{"packet_id": "p-1"}')
    store.save_packet(batch_id, "p-1", '{"packet_id": "p-1"}')  # a re-run: same packet
    fill(store, 1, prefix="u")
    other = store.seal_batch(KEY, 10)
    assert other is not None and other != batch_id
    store.save_packet(other, "p-1", '{"packet_id": "p-1"}')  # failures that read the same
    with pytest.raises(StoreError, match="other content"):
        store.save_packet(batch_id, "p-1", '{"packet_id": "p-1", "x": 1}')
    store.save_canary(batch_id, "p-1", "{}", [_candidate("c0", 0.5), _candidate("c1", None)])
    store.save_canary(batch_id, "p-1", "{}", [_candidate("c1", 1.0), _candidate("c0", 0.0)])
    assert [(c.candidate_id, c.reward) for c in store.canary_results(batch_id)] == [
        ("c1", 1.0),
        ("c0", 0.0),
    ]
    assert store.count_canary_results() == 2
    assert store.canary_results("b-unknown") == []


def test_groups_save_untrained_mark_trained(store: StateStore) -> None:
    assert store.save_group("g1", "p1", "prompt 1", ["a", "b"], [1.0, None])
    assert not store.save_group("g1", "p1", "changed", ["x"], [0.0])  # idempotent
    assert store.save_group("g2", "p2", "prompt 2", ["c"], [0.25])
    with pytest.raises(StoreError):
        store.save_group("g3", "p3", "prompt", ["a", "b"], [1.0])
    groups = store.untrained_groups()
    assert [g.group_id for g in groups] == ["g1", "g2"]
    assert groups[0].completions == ("a", "b") and groups[0].rewards == (1.0, None)
    assert groups[0].prompt == "prompt 1" and groups[0].created_at.tzinfo is UTC
    assert [g.group_id for g in store.untrained_groups(limit=1)] == ["g1"]
    assert store.mark_trained(["g1", "nope"], "eng-v2") == 1
    assert store.mark_trained(["g1"], "eng-v3") == 0
    assert [g.group_id for g in store.untrained_groups()] == ["g2"]
    assert (store.count_groups(), store.count_groups(True), store.count_groups(False)) == (2, 1, 1)


def test_success_counts(store: StateStore) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    items = [
        item("o1", failed=False, harness="ov-1"),
        item("o2", failed=True, harness="ov-1"),
        item("o3", failed=False, harness="ov-1", target="tiny@2"),
        item("b1", failed=False),
        item("b2", failed=True),
    ]
    store.ingest(items, GROUP, {(TOPIC, 0): 5})
    counts = store.success_counts(["ov-1", "base", "ov-none"])
    assert counts == {"ov-1": (3, 2), "base": (2, 1), "ov-none": (0, 0)}
    assert store.success_counts(["ov-1"], since=before) == {"ov-1": (3, 2)}
    later = datetime.now(UTC) + timedelta(seconds=5)
    assert store.success_counts(["ov-1"], since=later) == {"ov-1": (0, 0)}
    assert store.success_counts(["ov-1"], target="tiny@1") == {"ov-1": (2, 1)}
    with pytest.raises(ValueError):
        store.success_counts(["ov-1"], since=datetime(2026, 1, 1))  # naive


# --- retention ------------------------------------------------------------------------------


def test_purge_keeps_buffered_open_and_untrained_data(store: StateStore) -> None:
    ids = fill(store, 6)  # six failures
    store.ingest([item("ok", failed=False, offset=6)], GROUP, {(TOPIC, 0): 7})
    done = store.seal_batch(KEY, 2)
    pending = store.seal_batch(KEY, 2)
    assert done is not None and pending is not None
    claimed = store.claim_batch("w1", 30)
    assert claimed is not None and claimed.batch_id == done
    store.save_packet(done, "p-done", "{}")
    store.save_canary(done, "p-done", "{}", [_candidate("c0", 1.0)])
    store.finish_batch(done, "w1", "done")
    store.save_group("g-other", "p-unrelated", "prompt", ["a"], [1.0])

    future = datetime.now(UTC) + timedelta(seconds=5)
    assert store.purge(datetime.now(UTC) - timedelta(hours=1)) == dict.fromkeys(
        (
            "daemon_dead_letters",
            "daemon_canary_candidates",
            "daemon_canary_reports",
            "daemon_packets",
            "daemon_batch_items",
            "daemon_batches",
            "daemon_trajectories",
        ),
        0,
    )
    counts = store.purge(future)
    # Gone: the success and the done batch's two members, plus the done batch and its results.
    assert counts["daemon_trajectories"] == 3
    assert counts["daemon_batches"] == 1 and counts["daemon_batch_items"] == 2
    assert counts["daemon_packets"] == 1 and counts["daemon_canary_candidates"] == 1
    assert store.trajectory_count() == 4
    assert store.load_trajectory_payloads(ids[2:])  # pending batch and buffer intact
    assert store.pending_batches() == 1 and [b.size for b in store.open_buffers()] == [2]
    assert store.positions(GROUP) == {(TOPIC, 0): 7}
    assert store.count_groups() == 1


def test_purge_keeps_a_finished_batch_whose_group_is_untrained(store: StateStore) -> None:
    fill(store, 1)
    batch_id = store.seal_batch(KEY, 10)
    assert batch_id is not None and store.claim_batch("w1", 30) is not None
    store.save_packet(batch_id, "p-1", "{}")
    store.finish_batch(batch_id, "w1", "done")
    store.save_group(batch_id, "p-1", "prompt", ["a"], [1.0])
    future = datetime.now(UTC) + timedelta(seconds=5)
    assert store.purge(future)["daemon_batches"] == 0
    store.mark_trained([batch_id], "eng-v1")
    assert store.purge(future)["daemon_batches"] == 1
    assert store.count_groups() == 1  # groups are never purged


# --- schema ---------------------------------------------------------------------------------


def _index_names(engine: Engine, table: str) -> set[str]:
    return {str(ix["name"]) for ix in inspect(engine).get_indexes(table)}


def test_fresh_database_is_at_the_latest_version_and_matches_the_models(
    store: StateStore, db_url: str
) -> None:
    assert store.schema_version() == SCHEMA_VERSION == MIGRATIONS[-1].version
    engine = create_engine(db_url)
    try:
        found = inspect(engine)
        for table in StoreBase.metadata.sorted_tables:
            columns = {c["name"]: c["nullable"] for c in found.get_columns(table.name)}
            assert columns == {c.name: c.nullable for c in table.columns}, table.name
        assert "daemon_trajectories_guard" in _index_names(engine, "daemon_trajectories")
    finally:
        engine.dispose()


def test_a_version_1_database_upgrades_in_place(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            assert upgrade(conn, MIGRATIONS[:1]) == 1
        assert "daemon_trajectories_guard" not in _index_names(engine, "daemon_trajectories")
        with engine.begin() as conn:  # data written under version 1 survives the upgrade
            conn.execute(
                text(
                    "INSERT INTO daemon_positions (consumer_group, kafka_topic, kafka_partition,"
                    " next_offset, updated_at) VALUES ('g', 't', 0, 42, :at)"
                ),
                {"at": datetime(2026, 1, 1)},
            )
        with StateStore(db_url) as store:
            assert store.schema_version() == SCHEMA_VERSION
            assert store.positions("g") == {("t", 0): 42}
            fill(store, 1)
            assert store.success_counts(["base"]) == {"base": (1, 0)}
        assert "daemon_trajectories_guard" in _index_names(engine, "daemon_trajectories")
        with engine.connect() as conn:
            versions = conn.execute(text("SELECT version FROM daemon_schema_version")).scalars()
            assert sorted(versions) == list(range(1, SCHEMA_VERSION + 1))
    finally:
        engine.dispose()


def test_a_newer_schema_is_refused(store: StateStore, db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO daemon_schema_version (version, description, applied_at) "
                    "VALUES (99, 'from the future', :at)"
                ),
                {"at": datetime(2030, 1, 1)},
            )
    finally:
        engine.dispose()
    with pytest.raises(SchemaTooNew, match=f"version 99.*up to {SCHEMA_VERSION}"):
        StateStore(db_url)


def test_simultaneous_first_starts_migrate_once(db_url: str) -> None:
    stores: list[StateStore] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_store() -> None:
        try:
            start.wait()
            stores.append(StateStore(db_url))
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        assert not errors, errors
        assert len(stores) == 4 and {s.schema_version() for s in stores} == {SCHEMA_VERSION}
        with stores[0]._engine.connect() as conn:
            rows = conn.execute(text("SELECT version FROM daemon_schema_version")).scalars()
            assert sorted(rows) == [m.version for m in MIGRATIONS]
    finally:
        for s in stores:
            s.close()


# --- odds and ends --------------------------------------------------------------------------


def test_unsupported_dialect() -> None:
    with pytest.raises(StoreError, match="supports sqlite and postgresql"):
        StateStore("mysql://u@localhost/db")


def test_ingest_item_from_a_trajectory() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    trajectory = Trajectory(
        trajectory_id="t-1",
        agent_id="agent-7",
        target=TargetRef(model_id="tiny", version="3"),
        harness_version="ov-abc",
        task=TaskRef(
            env="dbbench",
            split="dev",
            task_id="q1",
            task_type="counting",
            instruction="How many?",
            seed=0,
        ),
        steps=[],
        outcome=Outcome(success=True, reward=0.5, termination=Termination.SUCCESS, steps=0),
        timings=Timings(started_at=at, finished_at=at),
    )
    payload = trajectory.to_json_bytes()
    got = ingest_item(trajectory, payload, topic=TOPIC, partition=2, offset=7)
    assert (got.env, got.target, got.harness_version) == ("dbbench", "tiny@3", "ov-abc")
    assert got.failed  # a partial reward counts as a failure
    assert got.payload is payload and (got.partition, got.offset) == (2, 7)


def _failed_trajectory(trajectory_id: str, task_id: str) -> Trajectory:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Trajectory(
        trajectory_id=trajectory_id,
        agent_id="agent-7",
        target=TargetRef(model_id="tiny", version="1"),
        harness_version="base",
        task=TaskRef(
            env="dbbench",
            split="dev",
            task_id=task_id,
            task_type="counting",
            instruction="How many?",
            seed=0,
        ),
        steps=[],
        outcome=Outcome(success=False, reward=0.0, termination=Termination.FAILURE, steps=0),
        timings=Timings(started_at=at, finished_at=at),
    )


def test_a_stored_trajectory_keeps_its_trajectory_id_and_is_deduplicated_by_it(
    store: StateStore,
) -> None:
    """From a parsed Trajectory (`ingest_item`) to the store and back, the id is the one the
    trajectory was written with: found under it, its bytes loaded by it, batched under it; a
    redelivery of it is a duplicate, while another trajectory (other id, same everything else
    but the task) is new."""
    first, second = _failed_trajectory("traj-1", "q1"), _failed_trajectory("traj-2", "q2")
    payloads = {t.trajectory_id: t.to_json_bytes() for t in (first, second)}
    items = [
        ingest_item(t, payloads[t.trajectory_id], topic=TOPIC, partition=0, offset=i)
        for i, t in enumerate((first, second, first))  # the third: `first` delivered again
    ]
    assert [i.trajectory_id for i in items] == ["traj-1", "traj-2", "traj-1"]
    result = store.ingest(items, GROUP, {(TOPIC, 0): 3})
    assert (result.new, result.duplicates, result.failures) == (2, 1, 2)
    again = store.ingest(items[:1], GROUP, {(TOPIC, 0): 4})  # a later redelivery
    assert (again.new, again.duplicates, again.failures) == (0, 1, 0)
    assert store.trajectory_count() == 2
    assert store.has_trajectory("traj-1") and store.has_trajectory("traj-2")
    loaded = store.load_trajectory_payloads(["traj-2", "traj-1"])
    assert loaded == [payloads["traj-2"], payloads["traj-1"]]
    assert [Trajectory.from_json_bytes(p).trajectory_id for p in loaded] == ["traj-2", "traj-1"]
    assert store.seal_batch(BatchKey("dbbench", "tiny@1", "base"), 10) is not None
    batch = store.claim_batch("w1", 30)
    assert batch is not None and batch.trajectory_ids == ("traj-1", "traj-2")


def test_exclusive_is_held_by_one_holder_at_a_time(store: StateStore, db_url: str) -> None:
    """Two daemons on one database: a singleton job runs in one of them at a time."""
    other = StateStore(db_url)
    try:
        with store.exclusive("job:guard") as first:
            assert first
            with other.exclusive("job:guard") as second:
                assert not second
            with other.exclusive("job:grpo") as different:
                assert different
        with other.exclusive("job:guard") as after:
            assert after
    finally:
        other.close()


def _letter(offset: int, group: str = GROUP) -> DeadLetter:
    record = Record(TOPIC, 0, offset, b"k", b"bad\x00value", (("h", b"1"),), 1_700_000_000_000)
    return dead_letter(record, group, ReasonCode.NOT_JSON, "detail with a \x00 NUL")


def test_dead_letter_outbox_once_per_record_until_retention(store: StateStore) -> None:
    store.ingest([], GROUP, {(TOPIC, 0): 2}, [_letter(0), _letter(1)])
    pending = store.pending_dead_letters(GROUP)
    assert [letter.offset for _, letter in pending] == [0, 1]
    assert pending[0][1].headers == (("h", b"1"),) and pending[0][1].key == b"k"
    assert "\x00" not in pending[0][1].detail  # escaped: PostgreSQL text refuses a NUL
    assert store.pending_dead_letters("another-group") == []
    store.mark_dead_letters_published([row for row, _ in pending])
    assert store.count_pending_dead_letters() == 0
    store.ingest([], GROUP, {(TOPIC, 0): 2}, [_letter(0), _letter(2)])  # 0 read again
    assert [letter.offset for _, letter in store.pending_dead_letters(GROUP)] == [2]
    purged = store.purge(datetime.now(UTC) + timedelta(seconds=5))
    assert purged["daemon_dead_letters"] == 2  # the published ones; 2 still waits
    assert store.count_pending_dead_letters() == 1


def test_ingest_lease_one_holder_checked_in_every_ingest(store: StateStore) -> None:
    # 2 s: the steps up to the pause below must fit in one lease on a loaded 2-core CI host
    a = IngestLease("ingest:g", "daemon-a", ttl_s=2.0)
    b = IngestLease("ingest:g", "daemon-b", ttl_s=2.0)
    assert store.acquire_ingest_lease(a) and not store.acquire_ingest_lease(b)
    assert store.acquire_ingest_lease(a)  # renewal
    store.ingest([item("t1", offset=0)], GROUP, {(TOPIC, 0): 1}, (), a)
    with pytest.raises(IngestLeaseLost):
        store.ingest([item("t2", offset=1)], GROUP, {(TOPIC, 0): 2}, (), b)
    assert not store.has_trajectory("t2") and store.positions(GROUP) == {(TOPIC, 0): 1}
    time.sleep(2.2)  # a paused holder: its lease runs out, another takes it
    assert store.acquire_ingest_lease(b) and store.holds_ingest_lease(b)
    with pytest.raises(IngestLeaseLost):
        store.ingest([item("t3", offset=1)], GROUP, {(TOPIC, 0): 2}, (), a)
    assert not store.has_trajectory("t3")
    store.release_ingest_lease(b)
    assert store.acquire_ingest_lease(a)  # a clean stop frees it at once


def test_origin_counts_per_harness_version_from_the_stored_trajectories(store: StateStore) -> None:
    """The live guard's arms' forced share: steps by origin, summed per version, read from the
    stored payloads; the ingest result counts the same steps by (env, origin)."""
    from harness_r1.contracts import OriginCounts, Step

    def played(tid: str, version: str, origins: list[str]) -> Trajectory:
        steps = [
            Step(index=i, observation="o", raw_output="", action="a", origin=o)
            for i, o in enumerate(origins)
        ]
        base = _failed_trajectory(tid, f"q-{tid}")
        return base.model_copy(
            update={"harness_version": version, "steps": steps, "origins": OriginCounts.of(origins)}
        )

    trajectories = [
        played("a", "ov-1", ["forced", "model"]),
        played("b", "ov-1", ["forced", "forced", "rewritten"]),
        played("c", "base", ["model", "vetoed_then_model"]),
    ]
    items = [
        ingest_item(t, t.to_json_bytes(), topic=TOPIC, partition=0, offset=i)
        for i, t in enumerate(trajectories)
    ]
    result = store.ingest(items, GROUP, {(TOPIC, 0): 3})
    assert result.steps_by_origin == {
        ("dbbench", "forced"): 3,
        ("dbbench", "model"): 2,
        ("dbbench", "rewritten"): 1,
        ("dbbench", "vetoed_then_model"): 1,
    }
    counts = store.origin_counts(["ov-1", "base", "ov-none"])
    assert counts["ov-1"] == OriginCounts(forced=3, model=1, rewritten=1)
    assert counts["ov-1"].forced_share == 0.6
    assert counts["base"] == OriginCounts(model=1, vetoed_then_model=1)
    assert counts["ov-none"] == OriginCounts()
    later = datetime.now(UTC) + timedelta(seconds=5)
    assert store.origin_counts(["ov-1"], since=later) == {"ov-1": OriginCounts()}
