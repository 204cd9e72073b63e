"""Each outcome of an IsolatedHooks call, as its operators see it: the whole `events` record,
the metric families and the log events of each fault, its detail word for word; crashes and
timeouts that end a worker and the restart that follows; the limits on requests and responses;
malformed, forged and stale responses."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import structlog
from executor_rig import NO_EVENTS, PRE, hooks, metric_events, outcome, pid_gone, size_in, wait_dead
from prometheus_client import CollectorRegistry

from harness_r1.contracts import HookName, Patch
from harness_r1.harness.hooks import HookCall
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.metrics import SandboxMetrics
from harness_r1.sandbox.sandbox_config import SandboxConfig

# --- the record of each outcome -----------------------------------------------------------


def test_each_outcome_is_counted_once_in_events_metrics_and_logs(actor_patch: Patch) -> None:
    registry = CollectorRegistry()
    metrics = SandboxMetrics(registry)
    with structlog.testing.capture_logs() as logs:
        hs = IsolatedHooks(
            actor_patch, SandboxConfig(call_budget_s=2.0), static_checks=False, metrics=metrics
        )
        with hs:
            pid = hs.worker_pid
            assert pid is not None and hs.isolated  # started by the constructor
            assert hs.overlay_id == f"patch-{actor_patch.sha256()[:16]}"
            results = [
                hs.call(PRE, {"do": "ok", "echo": [1, "a"]}, {"n": 1, "k": "v"}),
                hs.call(PRE, {"do": "raise"}, {"s": 1}),
                hs.call(PRE, {"do": "write"}, {"s": 2}),
                hs.call(PRE, {"do": "write"}, {"s": 3}),
                hs.call(PRE, {"do": "set"}, {"s": 4}),
                hs.call(PRE, {"do": "big", "size": 300_000}, {"s": 5}),
                hs.call(HookName.POST_FEEDBACK, {}, {"s": 6}),
                hs.call(PRE, {"do": "raise"}, {"s": 7}),
                hs.call(PRE, {"do": "ok"}, {}),
            ]
            assert hs.worker_pid == pid  # every fault contained in the worker
    escape = "PermissionError: [Errno 13] Permission denied: '/tmp/hr1-executor-escape'"
    big = f"response is {size_in(results[5].detail)} bytes; the limit is 262144"
    division = "ZeroDivisionError: integer division or modulo by zero"
    assert [outcome(r) for r in results] == [
        HookCall(value=[1, "a"], state={"n": 2, "k": "v"}),
        HookCall(state={"s": 1}, fault="raised", detail=division),
        HookCall(state={"s": 2}, fault="violation", detail=escape),
        HookCall(state={"s": 3}, fault="violation", detail=escape),
        HookCall(
            state={"s": 4},
            fault="junk",
            detail="TypeError: Object of type set is not JSON serializable",
        ),
        HookCall(state={"s": 5}, fault="oversized", detail=big),
        HookCall(state={"s": 6}, fault="invalid", detail="the patch has no post_feedback hook"),
        HookCall(state={"s": 7}, fault="raised", detail=division),
        HookCall(value=None, state={"n": 1}),
    ]
    assert all(r.seconds > 0 for r in results)
    assert hs.events == {
        **NO_EVENTS,
        "calls": 9,
        "ok": 2,
        "starts": 1,
        "raised": 2,
        "violations": 2,
        "violations.os_error": 2,
        "junk": 1,
        "oversized": 1,
        "invalid": 1,
    }
    assert metric_events(registry) == {
        "starts": 1.0,
        "raised": 2.0,
        "violations": 2.0,
        "junk": 1.0,
        "oversized": 1.0,
        "invalid": 1.0,
    }
    assert registry.get_sample_value("harness_r1_sandbox_isolated") == 1.0
    overlay = hs.overlay_id
    assert [e for e in logs if e["event"] == "sandbox.hook_fault"] == [
        {"event": "sandbox.hook_fault", "log_level": "debug", "overlay": overlay, "fault": r.fault,
         "detail": r.detail}
        for r in results
        if r.fault is not None
    ]  # fmt: skip
    assert [e["event"] for e in logs if e["event"] != "sandbox.hook_fault"] == []
    assert hs.last_start_s is not None and 0.0 < hs.last_start_s < 10.0


def test_a_call_that_ends_its_worker_is_a_crash_with_the_exit_status_and_stderr(
    actor: IsolatedHooks,
) -> None:
    noise = "x" * 200 + "y" * 300 + "\xff\n"
    pid = actor.worker_pid
    assert pid is not None
    before = dict(actor.events)
    quiet = actor.call(PRE, {"do": "stderr", "text": noise}, {"a": 1})
    assert outcome(quiet) == HookCall(value=None, state={"a": 1})
    died = actor.call(PRE, {"do": "exit", "code": 7, "text": "last words\n"}, {"a": 2})
    # The last 300 bytes of the worker's stderr, decoded leniently, stripped.
    tail = "y" * 287 + "\ufffd\nlast words"
    assert outcome(died) == HookCall(
        state={"a": 2},
        fault="crashed",
        detail=f"the worker closed its pipe; exited with status 7; stderr: {tail}",
    )
    assert actor.worker_pid is None and pid_gone(pid)
    again = actor.call(PRE, {"echo": "back"}, {})
    assert outcome(again) == HookCall(value="back", state={"n": 1})
    changes = {"calls": 3, "ok": 2, "crashes": 1, "starts": 1, "restarts": 1}
    assert actor.events == {k: before[k] + changes.get(k, 0) for k in before}


def test_a_crash_without_stderr_says_how_the_worker_ended_and_nothing_more(
    actor: IsolatedHooks,
) -> None:
    died = actor.call(PRE, {"do": "exit", "code": 0, "text": ""}, {})
    assert outcome(died) == HookCall(
        fault="crashed", detail="the worker closed its pipe; exited with status 0"
    )
    pid = actor.worker_pid
    assert actor.call(PRE, {}, {}).fault is None and actor.worker_pid not in (None, pid)
    pid = actor.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_dead(pid)
    killed = actor.call(PRE, {}, {"n": 3})
    assert outcome(killed) == HookCall(
        state={"n": 3},
        fault="crashed",
        detail="writing to the worker: [Errno 32] Broken pipe; killed by SIGKILL",
    )


def test_a_stopped_worker_times_out_on_the_write_or_on_the_read() -> None:
    with hooks(call_budget_s=0.3) as hs:
        for ctx, detail in [
            ({"do": "ok"}, "no response within the budget"),
            ({"do": "ok", "pad": "p" * 300_000}, "the worker did not take the request in time"),
        ]:
            pid = hs.worker_pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            started = time.perf_counter()
            result = hs.call(PRE, ctx, {"k": 1})
            assert time.perf_counter() - started < 2.0
            assert outcome(result) == HookCall(state={"k": 1}, fault="timeout", detail=detail)
            assert hs.worker_pid is None and pid_gone(pid)
            assert hs.call(PRE, {}, {}).fault is None
        assert hs.events == {
            **NO_EVENTS,
            "calls": 4,
            "ok": 2,
            "timeouts": 2,
            "starts": 3,
            "restarts": 2,
        }


# --- requests and responses ---------------------------------------------------------------


def test_the_request_limit_counts_the_whole_line_as_the_worker_does() -> None:
    """A request of exactly `max_request_bytes` (its newline included) goes through; one byte
    more is refused here as junk and the worker stays up (the worker itself would have died on
    it). The limit reaches the worker: a limit above the default is honoured there too."""
    ctx = {"pad": "p" * 1_500_000}
    line = json.dumps({"id": 2, "op": "call", "hook": "pre_action", "ctx": ctx, "state": {}})
    limit = len(line) + 1
    with hooks(max_request_bytes=limit) as hs:
        pid = hs.worker_pid
        assert outcome(hs.call(PRE, ctx, {})) == HookCall(value=None, state={"n": 1})
        over = hs.call(PRE, {"pad": ctx["pad"] + "p"}, {})
        detail = f"request is {limit + 1} bytes; the limit is {limit}"
        assert outcome(over) == HookCall(fault="junk", detail=detail)
        assert hs.worker_pid == pid
        assert hs.events == {**NO_EVENTS, "calls": 2, "ok": 1, "junk": 1, "starts": 1}


def test_ctx_or_state_that_is_not_strict_json_is_junk_and_the_worker_stays(
    actor: IsolatedHooks,
) -> None:
    assert actor.call(PRE, {}, {}).fault is None
    pid = actor.worker_pid
    nan = actor.call(PRE, {"x": float("nan")}, {"s": 1})
    detail = "ctx/state are not JSON-able: Out of range float values are not JSON compliant"
    assert outcome(nan) == HookCall(state={"s": 1}, fault="junk", detail=detail)
    odd = actor.call(PRE, {}, {"s": {1, 2}})
    detail = "ctx/state are not JSON-able: Object of type set is not JSON serializable"
    assert outcome(odd) == HookCall(state={"s": {1, 2}}, fault="junk", detail=detail)
    assert actor.worker_pid == pid


def test_the_response_limit_reaches_the_worker() -> None:
    with hooks(max_response_bytes=1000) as hs:
        fits = hs.call(PRE, {"do": "big", "size": 900}, {})
        assert outcome(fits) == HookCall(value="a" * 900, state={})
        big = hs.call(PRE, {"do": "big", "size": 1000}, {})
        detail = f"response is {size_in(big.detail)} bytes; the limit is 1000"
        assert outcome(big) == HookCall(fault="oversized", detail=detail)


@pytest.mark.parametrize(
    ("lines", "fault", "detail", "counted"),
    [
        ("\n", "junk", "malformed response: Expecting value: line 1 column 1 (char 0)",
         {"junk": 1}),
        ('{"id": 2, "value": Infinity, "state": {}}\n', "junk",
         "malformed response: non-standard JSON constant Infinity", {"junk": 1}),
        ('{"id": 2, "value": 1, "state": []}\n', "junk", "malformed response from the worker",
         {"junk": 1}),
        ('{"id": 2, "state": {}}\n', "junk", "malformed response from the worker", {"junk": 1}),
        ('[2]\n', "junk", "response does not answer the request", {"junk": 1}),
        ("x" * 400_000, "oversized", "response exceeds 266240 bytes", {"oversized": 1}),
    ],
)  # fmt: skip
def test_a_malformed_response_is_a_fault_and_the_worker_is_replaced(
    lines: str, fault: str, detail: str, counted: dict[str, int]
) -> None:
    # Request 1 was `load`, so the call below is request 2.
    with hooks() as hs:
        pid = hs.worker_pid
        assert pid is not None
        result = hs.call(PRE, {"do": "forge", "lines": lines}, {"s": 1})
        assert outcome(result) == HookCall(state={"s": 1}, fault=fault, detail=detail)
        assert hs.worker_pid is None and pid_gone(pid)
        assert outcome(hs.call(PRE, {"echo": 5}, {})) == HookCall(value=5, state={"n": 1})
        assert hs.events == {
            **NO_EVENTS,
            "calls": 2,
            "ok": 1,
            "starts": 2,
            "restarts": 1,
            **counted,
        }


@pytest.mark.parametrize(
    ("lines", "fault", "detail", "counted"),
    [
        ('{"id": 2, "fault": "violation", "detail": "forged"}\n', "violation", "forged",
         {"violations": 1, "violations.unknown": 1}),
        ('{"id": 2, "fault": "violation", "kind": "escape", "detail": "d"}\n', "violation", "d",
         {"violations": 1, "violations.escape": 1}),
        ('{"id": 2, "fault": "bogus", "detail": "made up"}\n', "junk", "made up", {"junk": 1}),
        ('{"id": 2, "fault": "timeout"}\n', "timeout", "", {"timeouts": 1}),
        (json.dumps({"id": 2, "fault": "raised", "detail": "d" * 600}) + "\n", "raised", "d" * 500,
         {"raised": 1}),
    ],
)  # fmt: skip
def test_a_fault_the_worker_reports_is_taken_as_reported_unknown_kinds_as_junk(
    lines: str, fault: str, detail: str, counted: dict[str, int]
) -> None:
    """The hook forges the fault line and then kills its worker (SIGKILL to itself): the fault
    answers the call; the dead worker is found on the next call's write."""
    with hooks() as hs:
        result = hs.call(PRE, {"do": "forge", "lines": lines, "die": True}, {"s": 1})
        assert outcome(result) == HookCall(state={"s": 1}, fault=fault, detail=detail)
        assert hs.call(PRE, {}, {}).fault == "crashed"
        assert hs.events == {**NO_EVENTS, "calls": 2, "starts": 1, "crashes": 1, **counted}


def test_a_response_answers_only_its_own_request() -> None:
    """Every request carries a fresh id. A line with this call's id answers it (a hook can say
    what its own call returns, nothing more); the worker's late answer to that call is then
    stale, and the next call refuses it rather than take it as its own."""
    forged = '{"id": 2, "value": "forged", "state": {"f": 1}}\n'
    with hooks() as hs:
        first = hs.call(PRE, {"do": "forge", "lines": forged}, {})
        assert outcome(first) == HookCall(value="forged", state={"f": 1})
        stale = hs.call(PRE, {}, {"s": 1})
        detail = "response does not answer the request"
        assert outcome(stale) == HookCall(state={"s": 1}, fault="junk", detail=detail)
        assert outcome(hs.call(PRE, {"echo": 1}, {})) == HookCall(value=1, state={"n": 1})


def test_a_response_line_ends_at_its_newline_and_what_follows_waits_for_the_next_request() -> None:
    """Two lines in one write (so in one read): the first answers this call, the second is
    kept, whole, for the next."""
    lines = '{"id": 2, "value": "one", "state": {}}\n{"id": 3, "value": "two", "state": {}}\n'
    with hooks() as hs:
        assert hs.call(PRE, {"do": "forge", "lines": lines}, {}).value == "one"
        assert outcome(hs.call(PRE, {}, {})) == HookCall(value="two", state={})
