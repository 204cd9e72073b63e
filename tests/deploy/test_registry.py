"""The overlay registry on a real SQLite file (and PostgreSQL when one answers locally).

What matters to the rest of the system: the lifecycle refuses moves it does not allow, every
change leaves an audit event, a target never has two active overlays, sequence numbers are
never handed out twice (even to two registry objects racing on the same file), and the patch
read back is byte-identical to the one stored (its sha256 is what gets signed).
"""

from __future__ import annotations

import importlib.util
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.deploy.overlay_views import diff_overlays, render_record
from harness_r1.deploy.registry import OverlayRegistry
from harness_r1.deploy.registry_records import (
    TRANSITIONS,
    InvalidTransition,
    OverlayState,
    RegistryError,
    UnknownOverlay,
)
from harness_r1.deploy.registry_schema import RegistryBase
from harness_r1.deploy.registry_targets import advance_statement

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BODY = "def hook(ctx, state):\n    return None\n"

S = OverlayState


def make_patch(description: str = "noop", code: str = BODY, **extra: str) -> Patch:
    hooks = [HookCode(hook=HookName.PRE_ACTION, code=code)]
    hooks += [HookCode(hook=HookName(name), code=src) for name, src in extra.items()]
    return Patch(env="dbbench", description=description, hooks=hooks)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.fixture
def reg(db_url: str) -> Iterator[OverlayRegistry]:
    registry = OverlayRegistry(db_url)
    yield registry
    registry.close()


def in_state(reg: OverlayRegistry, state: OverlayState, target: str = "pool-a") -> str:
    """An overlay of `target` brought to `state` through allowed moves."""
    path = {
        S.CANDIDATE: [],
        S.CANARY: [S.CANARY],
        S.ACTIVE: [S.CANARY, S.ACTIVE],
        S.RETIRED: [S.CANARY, S.ACTIVE, S.RETIRED],
        S.ROLLED_BACK: [S.CANARY, S.ROLLED_BACK],
    }[state]
    overlay_id = reg.add(make_patch(), target).overlay_id
    for step in path:
        reg.transition(overlay_id, step, actor="test", reason=f"to {step}")
    return overlay_id


def active_id(reg: OverlayRegistry, target: str) -> str | None:
    record = reg.active(target)
    return None if record is None else record.overlay_id


# --- add / get / list ---------------------------------------------------------------------------


def test_add_and_get(reg: OverlayRegistry) -> None:
    patch = make_patch()
    rec = reg.add(patch, "pool-a", packet_id="pk-1", group_id="g-1", evidence={"reward": 0.25})
    assert rec.overlay_id.startswith("ov-") and len(rec.overlay_id) == 15
    int(rec.overlay_id[3:], 16)
    assert rec.state is S.CANDIDATE and rec.env == "dbbench" and rec.target == "pool-a"
    assert (rec.packet_id, rec.group_id, rec.parent_overlay_id) == ("pk-1", "g-1", None)
    assert rec.evidence == {"reward": 0.25}
    assert rec.created_at.tzinfo is UTC and rec.updated_at == rec.created_at
    got = reg.get(rec.overlay_id)
    assert got == rec
    assert got.created_at.tzinfo is UTC


def test_patch_round_trips_with_identical_sha(reg: OverlayRegistry, db_url: str) -> None:
    patch = make_patch("two hooks", post_feedback="def hook(ctx, state):\n    return {}\n")
    rec = reg.add(patch, "pool-a")
    other = OverlayRegistry(db_url)
    try:
        back = other.get(rec.overlay_id).patch
    finally:
        other.close()
    assert back == patch
    assert back.sha256() == patch.sha256() == rec.patch_sha256
    assert back.to_json_bytes() == patch.to_json_bytes()


def test_tampered_patch_is_refused(reg: OverlayRegistry, db_url: str) -> None:
    rec = reg.add(make_patch(), "pool-a")
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE overlay_overlays SET patch_json = replace(patch_json, 'None', 'True')")
    with pytest.raises(RegistryError, match="refusing"):
        reg.get(rec.overlay_id)


def test_unknown_overlay(reg: OverlayRegistry) -> None:
    with pytest.raises(UnknownOverlay, match="ov-000000000000"):
        reg.get("ov-000000000000")
    with pytest.raises(UnknownOverlay):
        reg.transition("ov-000000000000", S.CANARY, actor="x", reason="y")
    with pytest.raises(UnknownOverlay):
        reg.events("ov-000000000000")
    with pytest.raises(UnknownOverlay):
        reg.add(make_patch(), "pool-a", parent_overlay_id="ov-000000000000")


def test_list_filters_newest_first(reg: OverlayRegistry) -> None:
    a1 = reg.add(make_patch("a1"), "pool-a")
    b1 = reg.add(make_patch("b1"), "pool-b")
    a2 = reg.add(make_patch("a2"), "pool-a", parent_overlay_id=a1.overlay_id)
    reg.transition(a2.overlay_id, S.CANARY, actor="t", reason="r")
    ids = [r.overlay_id for r in reg.list()]
    assert ids == [a2.overlay_id, b1.overlay_id, a1.overlay_id]
    assert [r.overlay_id for r in reg.list(target="pool-a")] == [a2.overlay_id, a1.overlay_id]
    assert [r.overlay_id for r in reg.list(state=S.CANDIDATE)] == [b1.overlay_id, a1.overlay_id]
    assert [r.overlay_id for r in reg.list(target="pool-a", state="canary")] == [a2.overlay_id]
    assert reg.list(target="pool-z") == []
    assert reg.get(a2.overlay_id).parent_overlay_id == a1.overlay_id


# --- lifecycle ------------------------------------------------------------------------------


ALLOWED = [(src, dst) for src, dsts in TRANSITIONS.items() for dst in sorted(dsts)]


def test_transition_table_is_the_documented_one() -> None:
    assert set(ALLOWED) == {
        (S.CANDIDATE, S.CANARY),
        (S.CANDIDATE, S.RETIRED),
        (S.CANARY, S.ACTIVE),
        (S.CANARY, S.ROLLED_BACK),
        (S.CANARY, S.RETIRED),
        (S.ACTIVE, S.RETIRED),
        (S.ACTIVE, S.ROLLED_BACK),
        (S.RETIRED, S.ACTIVE),
        (S.ROLLED_BACK, S.ACTIVE),
    }


@pytest.mark.parametrize(("src", "dst"), ALLOWED, ids=[f"{a}->{b}" for a, b in ALLOWED])
def test_allowed_transition(reg: OverlayRegistry, src: OverlayState, dst: OverlayState) -> None:
    overlay_id = in_state(reg, src)
    before = reg.get(overlay_id)
    after = reg.transition(overlay_id, dst, actor="alice", reason="because")
    assert after.state is dst and reg.get(overlay_id).state is dst
    assert after.updated_at >= before.updated_at
    last = reg.events(overlay_id)[-1]
    assert (last.from_state, last.to_state, last.actor, last.reason) == (
        src,
        dst,
        "alice",
        "because",
    )


FORBIDDEN = [
    (S.CANDIDATE, S.ACTIVE),
    (S.CANDIDATE, S.ROLLED_BACK),
    (S.CANARY, S.CANDIDATE),
    (S.ACTIVE, S.CANARY),
    (S.ACTIVE, S.ACTIVE),
    (S.RETIRED, S.CANARY),
    (S.ROLLED_BACK, S.RETIRED),
]


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN, ids=[f"{a}->{b}" for a, b in FORBIDDEN])
def test_forbidden_transition(reg: OverlayRegistry, src: OverlayState, dst: OverlayState) -> None:
    overlay_id = in_state(reg, src)
    n_events = len(reg.events(overlay_id))
    with pytest.raises(InvalidTransition) as err:
        reg.transition(overlay_id, dst, actor="mallory", reason="nope")
    message = str(err.value)
    assert str(src) in message and str(dst) in message
    for allowed in TRANSITIONS[src]:
        assert str(allowed) in message
    assert reg.get(overlay_id).state is src
    assert len(reg.events(overlay_id)) == n_events


def test_unknown_state_name(reg: OverlayRegistry) -> None:
    overlay_id = in_state(reg, S.CANDIDATE)
    with pytest.raises(InvalidTransition, match="unknown overlay state"):
        reg.transition(overlay_id, "shipped", actor="t", reason="r")


def test_activation_retires_previous_active_of_same_target_only(reg: OverlayRegistry) -> None:
    old_a = in_state(reg, S.ACTIVE, "pool-a")
    old_b = in_state(reg, S.ACTIVE, "pool-b")
    new_a = in_state(reg, S.CANARY, "pool-a")
    assert active_id(reg, "pool-a") == old_a

    reg.transition(new_a, S.ACTIVE, actor="live_guard", reason="canary passed")

    assert reg.get(new_a).state is S.ACTIVE
    assert reg.get(old_a).state is S.RETIRED
    assert reg.get(old_b).state is S.ACTIVE
    assert active_id(reg, "pool-a") == new_a
    assert active_id(reg, "pool-b") == old_b
    assert active_id(reg, "pool-c") is None
    retire = reg.events(old_a)[-1]
    assert (retire.from_state, retire.to_state, retire.actor) == (S.ACTIVE, S.RETIRED, "live_guard")
    assert new_a in retire.reason and "canary passed" in retire.reason
    assert retire.evidence == {"superseded_by": new_a}

    # rollback --to: the retired overlay comes back and the current one is retired.
    reg.transition(old_a, S.ACTIVE, actor="bob", reason="rollback --to")
    assert active_id(reg, "pool-a") == old_a
    assert reg.get(new_a).state is S.RETIRED
    assert [r.overlay_id for r in reg.list(target="pool-a", state=S.ACTIVE)] == [old_a]


def test_concurrent_activations_leave_one_active(db_url: str) -> None:
    """Two processes promoting two canaries of one target at once: both moves succeed in turn
    (write transactions serialise), and exactly one overlay ends up active."""
    registries = [OverlayRegistry(db_url), OverlayRegistry(db_url)]
    canaries = [in_state(registries[0], S.CANARY) for _ in range(2)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def promote(i: int) -> None:
        try:
            start.wait()
            registries[i].transition(canaries[i], S.ACTIVE, actor=f"w{i}", reason="race")
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=promote, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    states = sorted(str(registries[0].get(c).state) for c in canaries)
    assert states == ["active", "retired"]
    for r in registries:
        r.close()


def test_database_refuses_a_second_active(reg: OverlayRegistry, db_url: str) -> None:
    first = in_state(reg, S.ACTIVE)
    second = in_state(reg, S.CANARY)
    assert first != second
    with (
        sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn,
        pytest.raises(sqlite3.IntegrityError),
    ):
        conn.execute("UPDATE overlay_overlays SET state = 'active' WHERE overlay_id = ?", (second,))


# --- events ---------------------------------------------------------------------------------


def test_events_oldest_first_with_actor_reason_evidence(reg: OverlayRegistry) -> None:
    rec = reg.add(make_patch(), "pool-a", actor="engineer", evidence={"packet": "pk"})
    reg.transition(
        rec.overlay_id, S.CANARY, actor="daemon", reason="gate passed", evidence={"n": 8}
    )
    reg.transition(
        rec.overlay_id, S.ACTIVE, actor="live_guard", reason="promote", evidence={"p": 0.01}
    )
    pin = reg.record_event(rec.overlay_id, actor="carol", reason="pin", evidence={"until": "x"})
    events = reg.events(rec.overlay_id)
    assert [(e.from_state, e.to_state, e.actor, e.reason) for e in events] == [
        (None, S.CANDIDATE, "engineer", "created"),
        (S.CANDIDATE, S.CANARY, "daemon", "gate passed"),
        (S.CANARY, S.ACTIVE, "live_guard", "promote"),
        (S.ACTIVE, S.ACTIVE, "carol", "pin"),
    ]
    assert events[-1] == pin
    assert [e.evidence for e in events] == [{"packet": "pk"}, {"n": 8}, {"p": 0.01}, {"until": "x"}]
    assert all(e.at.tzinfo is UTC for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)
    # transition evidence is merged into the overlay's; record_event leaves state and it alone
    current = reg.get(rec.overlay_id)
    assert current.evidence == {"packet": "pk", "n": 8, "p": 0.01}
    assert current.state is S.ACTIVE


def test_evidence_must_be_json(reg: OverlayRegistry) -> None:
    with pytest.raises(RegistryError, match="JSON"):
        reg.add(make_patch(), "pool-a", evidence={"bad": object()})
    rec = reg.add(make_patch(), "pool-a")
    with pytest.raises(RegistryError, match="actor"):
        reg.record_event(rec.overlay_id, actor="", reason="anonymous")


# --- sequence numbers ----------------------------------------------------------------------


def test_next_seq_monotonic_and_independent(reg: OverlayRegistry) -> None:
    assert [reg.next_seq("pool-a", "release") for _ in range(3)] == [1, 2, 3]
    assert reg.next_seq("pool-a", "control") == 1
    assert reg.next_seq("pool-b", "release") == 1
    assert reg.next_seq("pool-a", "release") == 4
    assert reg.next_seq("pool-a", "control") == 2


def test_next_seq_survives_reopen(reg: OverlayRegistry, db_url: str) -> None:
    reg.next_seq("pool-a", "release")
    reg.next_seq("pool-a", "release")
    with OverlayRegistry(db_url) as again:
        assert again.next_seq("pool-a", "release") == 3


def test_next_seq_two_registries_two_threads_no_duplicates(db_url: str) -> None:
    registries = [OverlayRegistry(db_url), OverlayRegistry(db_url)]
    results: list[list[int]] = [[], []]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work(i: int) -> None:
        try:
            start.wait()
            for _ in range(50):
                results[i].append(registries[i].next_seq("pool-a", "release"))
        except BaseException as err:  # surfaced below; a thread's exception is otherwise lost
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for r in registries:
        r.close()
    assert not errors, errors
    for mine in results:
        assert mine == sorted(mine) and len(set(mine)) == 50  # monotonic per caller
    assert sorted(results[0] + results[1]) == list(range(1, 101))


# --- high-water marks, conditional moves, transactions (races with the CLI) -------------------


def test_advance_mark_only_upward_and_survives_reopen(reg: OverlayRegistry, db_url: str) -> None:
    assert reg.mark("pool-a", "control") == 0
    assert reg.advance_mark("pool-a", "control", 3)
    assert not reg.advance_mark("pool-a", "control", 3)  # the same seq: a replay
    assert not reg.advance_mark("pool-a", "control", 2)  # older: refused, mark unchanged
    assert reg.mark("pool-a", "control") == 3
    assert reg.advance_mark("pool-a", "control", 7)
    assert reg.advance_mark("pool-a", "release", 1)  # separate streams
    assert reg.advance_mark("pool-b", "control", 1)  # and separate targets
    with OverlayRegistry(db_url) as again:  # a restarted daemon keeps refusing old seqs
        assert again.mark("pool-a", "control") == 7
        assert not again.advance_mark("pool-a", "control", 5)


def test_advance_mark_racing_registries_never_say_yes_twice(db_url: str) -> None:
    """Four registry objects (as four processes would) offer seqs 1..40 in different orders:
    each seq is accepted at most once, every accepted seq is above every earlier accepted
    one, and the mark ends at the highest."""
    import random

    registries = [OverlayRegistry(db_url) for _ in range(4)]
    accepted: list[tuple[int, int]] = []  # (order of acceptance, seq)
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(i: int) -> None:
        seqs = list(range(1, 41))
        random.Random(i).shuffle(seqs)
        try:
            start.wait()
            for seq in seqs:
                with registries[i].transaction():
                    if registries[i].advance_mark("pool-a", "control", seq):
                        with lock:
                            accepted.append((len(accepted), seq))
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    seqs = [seq for _, seq in sorted(accepted)]
    assert seqs == sorted(set(seqs))  # strictly increasing in commit order, no duplicate
    assert seqs[-1] == 40 and registries[0].mark("pool-a", "control") == 40
    for r in registries:
        r.close()


def test_transition_if_answers_none_where_transition_raises(reg: OverlayRegistry) -> None:
    live = in_state(reg, S.ACTIVE)
    assert reg.transition_if(live, S.ACTIVE, actor="t", reason="again") is None  # already
    rolled = reg.transition_if(
        live, S.ROLLED_BACK, expect={S.CANARY, S.ACTIVE}, actor="t", reason="r"
    )
    assert rolled is not None and rolled.state is S.ROLLED_BACK
    # the second recorder of the same rollback finds it done instead of InvalidTransition
    assert reg.transition_if(live, S.ROLLED_BACK, actor="t", reason="r") is None
    assert reg.transition_if(live, S.RETIRED, actor="t", reason="r") is None  # not allowed
    assert reg.transition_if(live, S.ACTIVE, expect={S.CANARY}, actor="t", reason="r") is None
    assert reg.get(live).state is S.ROLLED_BACK
    assert [e.to_state for e in reg.events(live)][-1] is S.ROLLED_BACK
    assert len(reg.events(live)) == 4  # created, canary, active, rolled_back: no extra event
    with pytest.raises(UnknownOverlay):
        reg.transition_if("ov-missing", S.ACTIVE, actor="t", reason="r")


def test_transaction_is_all_or_nothing(reg: OverlayRegistry, db_url: str) -> None:
    first = in_state(reg, S.ACTIVE)
    second = in_state(reg, S.CANARY)
    other = OverlayRegistry(db_url)  # another process's view
    with pytest.raises(RuntimeError), reg.transaction():
        assert reg.advance_mark("pool-a", "control", 4)
        reg.transition(second, S.ACTIVE, actor="t", reason="r")
        assert active_id(reg, "pool-a") == second  # reads inside see the transaction's moves
        assert active_id(other, "pool-a") == first  # others do not, before it commits
        raise RuntimeError("half-way")
    other.close()
    assert active_id(reg, "pool-a") == first
    assert reg.get(second).state is S.CANARY
    assert reg.mark("pool-a", "control") == 0
    with reg.transaction(), reg.transaction():  # nested blocks join the outer one
        reg.transition(second, S.ACTIVE, actor="t", reason="r")
    assert active_id(reg, "pool-a") == second and reg.get(first).state is S.RETIRED


def test_superseded_names_the_overlay_active_before(reg: OverlayRegistry) -> None:
    a = in_state(reg, S.ACTIVE)
    b = in_state(reg, S.CANARY)
    reg.transition(b, S.ACTIVE, actor="t", reason="r")
    c = in_state(reg, S.CANARY)
    reg.transition(c, S.ACTIVE, actor="t", reason="r")
    assert (reg.superseded(c), reg.superseded(b), reg.superseded(a)) == (b, a, None)
    reg.transition(a, S.ACTIVE, actor="t", reason="back to a")  # c retired, superseded by a
    assert reg.superseded(a) == c  # the latest activation counts


# --- SQLite setup ---------------------------------------------------------------------------


def test_sqlite_wal_and_busy_timeout(reg: OverlayRegistry, db_url: str) -> None:
    reg.add(make_patch(), "pool-a")
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"overlay_overlays", "overlay_events", "overlay_sequences"} <= tables
    engine = reg._engine  # the registry's own connections carry the timeout
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 30_000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1


def test_shares_a_database_with_other_tables(db_url: str) -> None:
    path = db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE daemon_jobs (id INTEGER PRIMARY KEY)")
    with OverlayRegistry(db_url) as reg:
        reg.add(make_patch(), "pool-a")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM daemon_jobs").fetchone() == (0,)
    assert all(name.startswith("overlay_") for name in RegistryBase.metadata.tables)


def test_unsupported_dialect() -> None:
    with pytest.raises(RegistryError, match="supports sqlite and postgresql"):
        OverlayRegistry("mysql://u@localhost/db")


# --- views ----------------------------------------------------------------------------------


def test_diff_overlays(reg: OverlayRegistry) -> None:
    a = reg.add(make_patch("a"), "pool-a")
    new_code = "def hook(ctx, state):\n    return {'kind': 'veto', 'reason': 'no DROP'}\n"
    b = reg.add(
        make_patch("b", code=new_code, episode_start="def hook(ctx, state):\n    pass\n"), "pool-a"
    )
    diff = diff_overlays(a, b)
    assert f"--- {a.overlay_id}/pre_action" in diff
    assert f"+++ {b.overlay_id}/pre_action" in diff
    assert "-    return None" in diff
    assert "+    return {'kind': 'veto', 'reason': 'no DROP'}" in diff
    assert f"--- {a.overlay_id}/episode_start (absent)" in diff
    assert "+    pass" in diff
    assert a.overlay_id in diff.splitlines()[0] and b.overlay_id in diff.splitlines()[0]
    assert diff_overlays(a, reg.add(make_patch("same code"), "pool-b")) == ""


def test_render_record_is_json_ready(reg: OverlayRegistry) -> None:
    import json

    rec = reg.add(make_patch(), "pool-a", evidence={"k": [1, 2]})
    reg.transition(rec.overlay_id, S.CANARY, actor="t", reason="r")
    view = render_record(reg.get(rec.overlay_id), reg.events(rec.overlay_id))
    again = json.loads(json.dumps(view))
    assert again == view
    assert view["state"] == "canary" and view["patch_sha256"] == rec.patch_sha256
    assert view["patch"]["hooks"][0]["hook"] == "pre_action"
    assert [e["to_state"] for e in view["events"]] == ["candidate", "canary"]
    assert Patch.model_validate(view["patch"]).sha256() == rec.patch_sha256


# --- PostgreSQL -----------------------------------------------------------------------------


def test_schema_and_upsert_compile_for_postgresql() -> None:
    """Portability without a server: the DDL and the sequence upsert render for PostgreSQL."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    for table in RegistryBase.metadata.sorted_tables:
        ddl = str(CreateTable(table).compile(dialect=dialect))
        assert "JSON" not in ddl
        for index in table.indexes:
            rendered = str(CreateIndex(index).compile(dialect=dialect))
            if index.name == "overlay_one_active_per_target":
                assert "WHERE state = 'active'" in rendered
    upsert = advance_statement("postgresql", "pool-a", "control", 3, datetime.now(UTC))
    rendered = str(upsert.compile(dialect=dialect))
    assert "ON CONFLICT (target, stream) DO UPDATE" in rendered
    assert "WHERE overlay_marks.seq < excluded.seq RETURNING" in rendered


def _postgres_or_skip() -> None:
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg (v3) is not installed; PostgreSQL test not run")
    engine = create_engine(PG_URL, connect_args={"connect_timeout": 2})
    try:
        with engine.connect():
            pass
    except Exception as err:  # any failure to connect means "no server here"
        pytest.skip(f"no PostgreSQL answering at {PG_URL}: {type(err).__name__}: {err}")
    finally:
        engine.dispose()


def test_postgresql_round_trip() -> None:
    _postgres_or_skip()
    reg = OverlayRegistry(PG_URL)
    target = f"pool-{uuid.uuid4().hex[:8]}"
    try:
        first = in_state(reg, S.ACTIVE, target)
        second = in_state(reg, S.CANARY, target)
        rec = reg.transition(second, S.ACTIVE, actor="t", reason="promote")
        assert rec.updated_at.tzinfo is UTC
        assert reg.get(first).state is S.RETIRED
        assert active_id(reg, target) == second
        assert reg.get(second).patch.sha256() == rec.patch_sha256
        assert [reg.next_seq(target, "release") for _ in range(3)] == [1, 2, 3]
        with pytest.raises(InvalidTransition):
            reg.transition(second, S.CANARY, actor="t", reason="r")
    finally:
        RegistryBase.metadata.drop_all(reg._engine)
        reg.close()


# -- lineage of composed overlays (issue 17) ---------------------------------------------------


def test_each_link_is_stored_and_the_chain_walks_back_to_the_root(reg: OverlayRegistry) -> None:
    root = reg.add(make_patch("root"), "pool-a")
    link_b = make_patch("b", code="def hook(ctx, state):\n    return {'effect': 'allow'}\n")
    # the composed patch is whatever composition gave; the registry stores it as it is
    composed_b = make_patch("b composed", post_feedback=BODY)
    b = reg.add(
        composed_b,
        "pool-a",
        parent_overlay_id=root.overlay_id,
        link=link_b,
        contributors={"pre_action": [1, 2], "post_feedback": [2]},
    )
    link_c = make_patch("c")
    c = reg.add(make_patch("c composed"), "pool-a", parent_overlay_id=b.overlay_id, link=link_c)
    assert reg.link(root.overlay_id) is None  # a root: its patch is its whole chain
    stored = reg.link(b.overlay_id)
    assert stored is not None and stored.patch == link_b
    assert stored.contributors == {"pre_action": [1, 2], "post_feedback": [2]}
    assert reg.chain(c.overlay_id) == [
        (root.overlay_id, root.patch),
        (b.overlay_id, link_b),
        (c.overlay_id, link_c),
    ]
    assert reg.get(b.overlay_id).patch == composed_b  # what is signed: the composed overlay
    view = render_record(reg.get(b.overlay_id), [], stored, [root.overlay_id, b.overlay_id])
    assert view["composition"]["chain"] == [root.overlay_id, b.overlay_id]
    assert view["composition"]["contributors"] == {
        "pre_action": [root.overlay_id, b.overlay_id],
        "post_feedback": [b.overlay_id],
    }
    assert view["composition"]["link"]["description"] == "b"
    assert view["patch"]["description"] == "b composed"


def test_an_overlay_with_a_parent_but_no_link_is_a_root(reg: OverlayRegistry) -> None:
    """Overlays registered before composition recorded their parent as lineage only: their
    patch stands alone, and the chain must not compose the parent in again."""
    first = reg.add(make_patch("first"), "pool-a")
    second = reg.add(make_patch("second"), "pool-a", parent_overlay_id=first.overlay_id)
    assert reg.chain(second.overlay_id) == [(second.overlay_id, second.patch)]


def test_a_database_from_before_links_gains_the_table(db_url: str) -> None:
    old = OverlayRegistry(db_url)
    record = old.add(make_patch("old"), "pool-a")
    old.close()
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        conn.execute("DROP TABLE overlay_links")
    reopened = OverlayRegistry(db_url)
    try:
        assert reopened.chain(record.overlay_id) == [(record.overlay_id, record.patch)]
        child = reopened.add(
            make_patch("child"), "pool-a", parent_overlay_id=record.overlay_id, link=make_patch()
        )
        assert len(reopened.chain(child.overlay_id)) == 2
    finally:
        reopened.close()
