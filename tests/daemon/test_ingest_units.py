"""Ingest's decisions that need neither a broker nor a store: why a record is unreadable (the
reason code and the detail an operator reads on its dead letter), what the store could not hold,
which store errors are a record's fault, where the group resumes after a batch, and how far
behind it is."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc
from test_durability import synthetic_trajectory

from harness_r1.consumers.records import Record
from harness_r1.contracts import Trajectory
from harness_r1.daemon.deadletter import ReasonCode
from harness_r1.daemon.ingest import (
    STORED_LIMITS,
    Unreadable,
    _short,
    check_storable,
    is_data_error,
    next_positions,
    parse_trajectory,
)
from harness_r1.daemon.ingest_progress import LogEnds


def trajectory() -> Trajectory:
    return synthetic_trajectory(1, random.Random(1))


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(trajectory().to_json_bytes())
    doc.update(changes)
    return doc


def encoded(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def without_version() -> bytes:
    doc = document()
    del doc["schema_version"]
    return encoded(doc)


def with_nan_reward() -> bytes:
    doc = document()
    doc["steps"][0]["reward"] = float("nan")  # json.dumps writes NaN, which pydantic reads
    return encoded(doc)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "empty: null or empty value"),
        (b"x" * 100_001, "too_large: 100001 bytes, a trajectory may have 100000"),
        (b"{broken", "not_json: Invalid JSON: key must be a string at line 1 column 2"),
        (b"\xff\xfe", "not_json: Invalid JSON: expected value at line 1 column 1"),
        (b"[" * 50_000, "not_json: Invalid JSON: recursion limit exceeded at line 1 column 202"),
        (
            encoded(document(schema_version="2.0")),
            "unsupported_version: Value error, schema_version '2.0' has major 2; this release "
            "reads major 1 only",
        ),
        (
            encoded(document(schema_version="2.0", agent_id=3)),
            "unsupported_version: Value error, schema_version '2.0' has major 2; this release "
            "reads major 1 only",
        ),
        (without_version(), "unsupported_version: no schema_version in the record"),
        (b"[1]", "invalid: Input should be an object at <root>"),
        (encoded(document(agent_id=3)), "invalid: Input should be a valid string at agent_id"),
        (with_nan_reward(), "invalid: Input should be a finite number at steps.0.reward"),
        (encoded(document(agent_id="a\x00b")), "unstorable: agent_id has a NUL character"),
        (
            encoded(document(trajectory_id="t" * 256)),
            "unstorable: trajectory_id is over 255 characters",
        ),
    ],
    ids=[
        "empty",
        "too_large",
        "not_json",
        "not_utf8",
        "recursion_bomb",
        "major_2",
        "major_2_and_invalid",
        "no_version",
        "not_an_object",
        "wrong_type",
        "nan",
        "nul",
        "id_too_long",
    ],
)
def test_an_unreadable_record_says_why_with_a_reason_code_and_detail(
    value: bytes, reason: str
) -> None:
    with pytest.raises(Unreadable) as caught:
        parse_trajectory(value, max_bytes=100_000)
    code, _, detail = reason.partition(": ")
    err = caught.value
    assert (err.code, err.detail, err.reason, str(err)) == (
        ReasonCode(code),
        detail,
        reason,
        reason,
    )


def test_a_valid_record_parses_whatever_its_size_when_no_limit_is_set() -> None:
    original = trajectory().model_copy(update={"agent_id": "agent-é", "harness_version": "ü"})
    value = original.to_json_bytes()
    assert parse_trajectory(value) == original
    assert parse_trajectory(value, max_bytes=len(value)) == original  # the limit is inclusive
    with pytest.raises(Unreadable, match="too_large"):
        parse_trajectory(value, max_bytes=len(value) - 1)


def with_field(name: str, value: str) -> Trajectory:
    t = trajectory()
    if name == "target":  # stored as "model_id@version", the version here "1"
        assert value.endswith("@1") and t.target.version == "1"
        target = t.target.model_copy(update={"model_id": value.removesuffix("@1")})
        return t.model_copy(update={"target": target})
    if name.startswith("task."):
        task = t.task.model_copy(update={name.removeprefix("task."): value})
        return t.model_copy(update={"task": task})
    return t.model_copy(update={name: value})


def unstorable(t: Trajectory) -> str | None:
    try:
        check_storable(t)
    except Unreadable as err:
        assert err.code is ReasonCode.UNSTORABLE
        return err.detail
    return None


@pytest.mark.parametrize("name", sorted(STORED_LIMITS))
def test_a_field_the_store_indexes_may_fill_its_column_but_not_more(name: str) -> None:
    limit = STORED_LIMITS[name]
    assert unstorable(with_field(name, "é" * (limit - 2) + "@1")) is None
    over = with_field(name, "x" * (limit - 1) + "@1")
    assert unstorable(over) == f"{name} is over {limit} characters"
    assert unstorable(with_field(name, "a\x00@1")) == f"{name} has a NUL character"
    assert unstorable(with_field(name, "a\ud800@1")) == (
        f"{name} is not encodable: 'utf-8' codec can't encode character '\\ud800' in position 1: "
        "surrogates not allowed"
    )


def test_the_stored_limits_are_the_store_s_column_sizes() -> None:
    """Read from the trajectories table itself, so a widened column cannot leave validation
    refusing what the store would take (or the reverse)."""
    from harness_r1.daemon.store.schema import _TrajectoryRow

    columns = _TrajectoryRow.__table__.columns
    column_of = {"task.env": "env", "task.task_id": "task_id", "task.task_type": "task_type"}
    sizes = {field: columns[column_of.get(field, field)].type.length for field in STORED_LIMITS}
    assert sizes == STORED_LIMITS
    assert set(STORED_LIMITS) == {
        "trajectory_id",
        "agent_id",
        "harness_version",
        "task.env",
        "task.task_id",
        "task.task_type",
        "target",
    }


def statement_error(orig: BaseException) -> sa_exc.StatementError:
    return sa_exc.StatementError("could not bind", "INSERT ...", {}, orig)


@pytest.mark.parametrize(
    ("err", "data"),
    [
        (sa_exc.IntegrityError("INSERT ...", {}, Exception("CHECK failed")), True),
        (sa_exc.DataError("INSERT ...", {}, Exception("value too long")), True),
        (statement_error(ValueError("bad value")), True),
        (statement_error(TypeError("bad type")), True),
        (statement_error(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogate")), True),
        (statement_error(OverflowError("too big")), True),
        (statement_error(RuntimeError("a bug")), False),
        (sa_exc.OperationalError("INSERT ...", {}, ValueError("database is locked")), False),
        (sa_exc.ProgrammingError("INSERT ...", {}, Exception("no such table")), False),
        (RuntimeError("a bug"), False),
        (ValueError("a bug"), False),
    ],
    ids=[
        "integrity",
        "data",
        "bind_value",
        "bind_type",
        "bind_encoding",
        "bind_overflow",
        "bind_bug",
        "locked",
        "missing_table",
        "bug",
        "bug_value_error",
    ],
)
def test_only_a_record_s_data_error_is_taken_for_poison(err: BaseException, data: bool) -> None:
    assert is_data_error(err) is data


def record(topic: str, partition: int, offset: int) -> Record:
    return Record(topic, partition, offset, None, b"{}", (), 0)


def test_the_next_positions_are_one_past_the_highest_offset_of_each_partition() -> None:
    records = [record("t", 1, 7), record("t", 0, 4), record("t", 1, 2), record("u", 0, 0)]
    assert next_positions(records) == {("t", 0): 5, ("t", 1): 8, ("u", 0): 1}
    assert next_positions([]) == {}


def test_a_store_error_is_quoted_by_its_first_line_and_300_characters_at_most() -> None:
    assert _short(ValueError("x" * 400 + "\n[SQL: INSERT ...]")) == "ValueError: " + "x" * 288
    assert _short(KeyError("k")) == "KeyError: 'k'"


def test_lag_counts_from_the_highest_log_end_seen() -> None:
    """A reopened reader's first answer (tansu's ListOffsets: the base offset of the last
    batch) is lower than the end an earlier reader fetched: the lag keeps the higher one.
    A fetch's end is exact and replaces it, lower or not (a broker restarted empty)."""
    ends = LogEnds()
    assert ends.lag({"t:0": 50, "t:1": 4}, {"t:0": 50}, {"t:0": 0, "t:1": 4}) == {
        "t:0": 50,
        "t:1": 0,
    }
    assert ends.lag({"t:0": 15}, {}, {}) == {"t:0": 50}  # reopened: knows only a batch's base
    assert ends.lag({"t:0": 60}, {}, {"t:0": 20}) == {"t:0": 40}
    assert ends.lag({}, {}, {"t:0": 20}) == {}  # the broker did not answer: nothing to report
    assert ends.lag({"t:0": 3}, {"t:0": 3}, {"t:0": 1}) == {"t:0": 2}  # a log begun again
