"""IsolatedHooks as its operators see it: the whole `events` record, the metric families and the
log events of each outcome, fault details word for word, budgets, restarts and their backoff.

Most tests run real workers. A hook that walks its generator frame (which the static checks
reject; `from_sources` skips them) reaches the worker's own modules: that is how a test looks at
what the worker really runs under, or makes it misbehave on the protocol. Where the worker
cannot be made to misbehave (before any hook runs: the hello, the load), a small executable
stands in for the interpreter (`SandboxConfig.python`) and says what the test wants."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyseccomp
import pytest
import structlog
from prometheus_client import CollectorRegistry

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.harness.hooks import HookCall
from harness_r1.sandbox.executor import IsolatedHooks, SandboxConfig, isolated_hooks_factory
from harness_r1.sandbox.isolation import LAYERS
from harness_r1.sandbox.metrics import SandboxMetrics
from harness_r1.sandbox.static import check_patch

PRE = HookName.PRE_ACTION
PROJECT_ROOT = Path(__file__).resolve().parents[2]
NO_EVENTS = {
    "calls": 0,
    "ok": 0,
    "starts": 0,
    "restarts": 0,
    "start_failures": 0,
    "recycles": 0,
    "load_errors": 0,
    "unisolated_workers": 0,
    "raised": 0,
    "timeouts": 0,
    "crashes": 0,
    "junk": 0,
    "oversized": 0,
    "memory": 0,
    "violations": 0,
    "invalid": 0,
    "refused": 0,
    "closed": 0,
}

# One hook that does what ctx["do"] says. Past "ok", "raise", "set" and "big" it takes the
# worker's module globals (os, sys, resource) through its generator frame.
ACTOR = """
def hook(ctx, state):
    do = ctx.get("do", "ok")
    if do == "ok":
        state["n"] = state.get("n", 0) + 1
        return ctx.get("echo")
    if do == "raise":
        return 1 // 0
    if do == "set":
        return {1}
    if do == "big":
        return "a" * ctx["size"]
    g = (g.gi_frame.f_back.f_back.f_globals for x in [1])
    w = next(g)
    os = w["os"]
    if do == "write":
        return os.open("/tmp/hr1-executor-escape", 65)
    if do == "stderr":
        os.write(2, ctx["text"].encode("latin-1"))
        return None
    if do == "exit":
        os.write(2, ctx["text"].encode("latin-1"))
        os._exit(ctx["code"])
    if do == "peek":
        r, sys = w["resource"], w["sys"]
        flags = sys.flags
        return {
            "uid": [os.getuid(), os.getgid()],
            "cpu": list(r.getrlimit(r.RLIMIT_CPU)),
            "as": list(r.getrlimit(r.RLIMIT_AS)),
            "nofile": list(r.getrlimit(r.RLIMIT_NOFILE)),
            "recursion": sys.getrecursionlimit(),
            "flags": [flags.isolated, flags.no_site, flags.dont_write_bytecode],
            "warnoptions": list(sys.warnoptions),
            "path": sys.path[:2],
            "ours": sorted(m for m in sys.modules if m.split(".")[0] == "harness_r1"),
            "bare": "__file__" not in sys.modules["harness_r1"].__dict__,
        }
    if do == "environ":
        fd = os.open("/proc/self/environ", 0)
        data = os.read(fd, 65536)
        os.close(fd)
        return data.decode()
    if do == "forge":
        s = (s.gi_frame.f_back.f_back.f_back.f_back for x in [1])
        serve = next(s)
        os.write(serve.f_locals["proto_out"], ctx["lines"].encode())
        if ctx.get("die"):
            os.kill(os.getpid(), 9)
        return "real"
    return None
"""


def hooks(code: str = ACTOR, /, **config: Any) -> IsolatedHooks:
    settings = {"call_budget_s": 2.0, **config}
    return IsolatedHooks.from_sources({PRE: code}, SandboxConfig(**settings))


def outcome(result: HookCall) -> HookCall:
    """The result less its timing (asserted apart: positive and within the budget)."""
    assert 0.0 <= result.seconds < 5.0, result
    return dataclasses.replace(result, seconds=0.0)


def size_in(detail: str) -> int:
    """The size in an oversized worker response's detail (it counts the worker's CPU too)."""
    match = re.fullmatch(r"response is (\d+) bytes; the limit is \d+", detail)
    assert match is not None, detail
    return int(match[1])


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_dead(pid: int) -> None:
    """Until the (unreaped) child has exited: a zombie, or gone."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        time.sleep(0.01)
    raise AssertionError(f"{pid} still running")


def metric_events(registry: CollectorRegistry) -> dict[str, float]:
    return {
        sample.labels["kind"]: sample.value
        for family in registry.collect()
        if family.name == "harness_r1_sandbox_events"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def fake_python(tmp_path: Path, body: str, name: str = "python") -> str:
    """An executable that stands in for the worker's interpreter: a Python script with `body`
    (it gets the worker's argv and pipes, and speaks the protocol as told)."""
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport sys, json, os, time\n{body}\n")
    path.chmod(0o755)
    return str(path)


FORCED = "forced failure (IsolationSettings.fail_layer, testing only)"
GOOD_HELLO = json.dumps(
    {
        "hello": True,
        "report": {
            "layers": [{"name": n, "ok": True, "detail": "", "required": True} for n in LAYERS]
        },
    }
)


@pytest.fixture(scope="module")
def actor() -> Iterator[IsolatedHooks]:
    """One warm worker shared by the tests that leave it healthy."""
    with hooks() as hs:
        assert hs.isolated, hs.report
        yield hs


# --- construction, closing, static rejection ----------------------------------------------


def test_a_rejected_patch_reports_its_first_violation_and_never_starts() -> None:
    code = "import os\ndef hook(ctx, state):\n    return open('x')\n"
    patch = Patch(env="any", hooks=[HookCode(hook=PRE, code=code)])
    first = check_patch(patch).violations[0]
    hs = IsolatedHooks(patch, overlay_id="ov-5")
    hs.call(PRE, {}, {})
    result = hs.call(PRE, {}, {"k": 1})
    assert result == HookCall(
        state={"k": 1},
        fault="invalid",
        detail=f"rejected by the static checks: {first.code}: {first.message}",
    )
    assert hs.static_rejection == f"{first.code}: {first.message}"
    assert (hs.worker_pid, hs.report, hs.last_start_s, hs.isolated) == (None, None, None, False)
    assert hs.has(PRE) and not hs.has(HookName.POST_FEEDBACK) and not hs.has("nope")  # type: ignore[arg-type]
    assert hs.events == {**NO_EVENTS, "calls": 2, "invalid": 2}
    hs.close()


def test_the_canary_factory_builds_checked_hook_sets_named_by_candidate() -> None:
    bad = Patch(
        env="any", hooks=[HookCode(hook=PRE, code="import os\ndef hook(c, s):\n    pass\n")]
    )
    config = SandboxConfig(call_budget_s=0.3)
    made = isolated_hooks_factory(config)(bad, "cand-7")
    assert made.overlay_id == "cand-7" and made.config is config
    assert made.static_rejection is not None and made.worker_pid is None
    default = isolated_hooks_factory()(bad, "cand-8")
    assert default.config == SandboxConfig() and default.overlay_id == "cand-8"


def test_from_sources_runs_the_static_checks_when_asked() -> None:
    code = "import os\ndef hook(ctx, state):\n    return None\n"
    hs = IsolatedHooks.from_sources({PRE: code}, static_checks=True)
    assert hs.static_rejection is not None and hs.worker_pid is None
    assert hs.call(PRE, {}, {}).fault == "invalid"


def test_from_sources_builds_an_any_env_patch_and_starts_its_worker() -> None:
    with IsolatedHooks.from_sources({PRE: ACTOR}) as hs:
        patch = Patch(env="any", hooks=[HookCode(hook=PRE, code=ACTOR)])
        assert hs.overlay_id == f"patch-{patch.sha256()[:16]}"
        assert hs.config == SandboxConfig() and hs.worker_pid is not None


def test_the_restart_backoff_is_capped_at_thirty_seconds(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-python")
    config = SandboxConfig(python=missing, restart_backoff_s=45.0)
    with structlog.testing.capture_logs() as logs:
        hs = IsolatedHooks.from_sources({PRE: ACTOR}, config, overlay_id="ov-2")
    detail = f"could not start the worker: [Errno 2] No such file or directory: {missing!r}"
    assert logs == [
        {"event": "sandbox.worker_start_failed", "log_level": "error", "overlay": "ov-2",
         "detail": detail, "retry_in_s": 30.0}
    ]  # fmt: skip
    assert hs.events == {**NO_EVENTS, "start_failures": 1}
    assert outcome(hs.call(PRE, {}, {})) == HookCall(
        fault="crashed", detail="the worker is unavailable (restart backoff)"
    )
    hs.close()


def test_a_closed_hook_set_answers_closed_and_starts_nothing() -> None:
    hs = hooks()
    hs.close()
    assert outcome(hs.call(PRE, {}, {"s": 1})) == HookCall(
        state={"s": 1}, fault="closed", detail="this hook set is closed"
    )
    with pytest.raises(RuntimeError, match="^probe failed: closed: this hook set is closed$"):
        hs.probe()
    assert hs.worker_pid is None
    assert hs.events == {**NO_EVENTS, "calls": 1, "starts": 1, "closed": 1}


def test_missing_isolation_is_refused_loudly_and_counted() -> None:
    registry = CollectorRegistry()
    patch = Patch(env="any", hooks=[HookCode(hook=PRE, code=ACTOR)])
    config = SandboxConfig(fail_layer="seccomp")
    with structlog.testing.capture_logs() as logs:
        hs = IsolatedHooks(
            patch, config, overlay_id="ov-3", static_checks=False, metrics=SandboxMetrics(registry)
        )
        result = hs.call(PRE, {}, {"s": 1})
    refused = f"isolation incomplete (seccomp: {FORCED}); untrusted hooks refused"
    assert outcome(result) == HookCall(state={"s": 1}, fault="unisolated_refused", detail=refused)
    assert hs.worker_pid is None and not hs.isolated
    assert hs.events == {**NO_EVENTS, "calls": 1, "starts": 1, "start_failures": 1, "refused": 1}
    assert metric_events(registry) == {"starts": 1.0, "refused": 1.0}
    assert registry.get_sample_value("harness_r1_sandbox_isolated") == 0.0
    assert logs == [
        {"event": "sandbox.unisolated_refused", "log_level": "error", "overlay": "ov-3",
         "failed": {"seccomp": FORCED},
         "hint": "fix the host, or pass allow_unisolated=True for development only"},
        {"event": "sandbox.worker_start_failed", "log_level": "error", "overlay": "ov-3",
         "detail": refused, "retry_in_s": 0.5},
        {"event": "sandbox.hook_fault", "log_level": "debug", "overlay": "ov-3",
         "fault": "unisolated_refused", "detail": refused},
    ]  # fmt: skip
    hs.close()


def test_running_unisolated_when_allowed_is_logged_as_a_warning() -> None:
    config = SandboxConfig(fail_layer="landlock", allow_unisolated=True)
    with (
        structlog.testing.capture_logs() as logs,
        IsolatedHooks.from_sources({PRE: ACTOR}, config, overlay_id="ov-4") as hs,
    ):
        assert outcome(hs.call(PRE, {"echo": 2}, {})) == HookCall(value=2, state={"n": 1})
    assert logs == [
        {"event": "sandbox.RUNNING_UNISOLATED", "log_level": "warning", "overlay": "ov-4",
         "failed": {"landlock": FORCED},
         "note": "allow_unisolated=True: model-written code runs without full isolation"},
    ]  # fmt: skip
    assert hs.events == {**NO_EVENTS, "calls": 1, "ok": 1, "starts": 1, "unisolated_workers": 1}


# --- the record of a session --------------------------------------------------------------


def test_each_outcome_is_counted_once_in_events_metrics_and_logs() -> None:
    registry = CollectorRegistry()
    metrics = SandboxMetrics(registry)
    patch = Patch(env="any", hooks=[HookCode(hook=PRE, code=ACTOR)])
    with structlog.testing.capture_logs() as logs:
        hs = IsolatedHooks(
            patch, SandboxConfig(call_budget_s=2.0), static_checks=False, metrics=metrics
        )
        with hs:
            pid = hs.worker_pid
            assert pid is not None and hs.isolated  # started by the constructor
            assert hs.overlay_id == f"patch-{patch.sha256()[:16]}"
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


# --- what the worker runs under -----------------------------------------------------------


def test_the_configured_limits_reach_the_worker_and_its_interpreter() -> None:
    limits = {"memory_mb": 384, "cpu_seconds": 3, "worker_cpu_seconds": 100, "nofile": 20}
    with hooks(**limits, recursion_limit=200, uid=4242, gid=4343) as hs:
        assert hs.isolated, hs.report
        peek = hs.call(PRE, {"do": "peek"}, {})
    ids = [4242, 4343] if os.geteuid() == 0 else [os.getuid(), os.getgid()]
    assert peek.fault is None, peek
    assert peek.value == {
        "uid": ids,
        "cpu": [4, 100],  # re-armed for the call: CPU used so far (< 1 s) + 3 + 1
        "as": [384 * 2**20] * 2,
        "nofile": [20, 20],
        "recursion": 200,
        "flags": [1, 1, 1],  # python -I -S -B
        "warnoptions": ["ignore"],
        "path": [str(PROJECT_ROOT), str(Path(pyseccomp.__file__).parent)],
        "ours": [  # bare packages: neither harness_r1/__init__ nor sandbox/__init__ ran
            "harness_r1",
            "harness_r1.sandbox",
            "harness_r1.sandbox.hooklib",
            "harness_r1.sandbox.isolation",
            "harness_r1.sandbox.worker_main",
        ],
        "bare": True,
    }


def test_worker_cpu_is_recycled_before_the_lifetime_limit() -> None:
    """A worker is replaced once its CPU passes worker_cpu_seconds - 2 * cpu_seconds - 1 (with
    (5, 2): at once; with (4, 1): not before 1 s of CPU), after answering the call."""
    with hooks(worker_cpu_seconds=5, cpu_seconds=2) as hs:
        pid = hs.worker_pid
        assert outcome(hs.call(PRE, {"echo": 1}, {})) == HookCall(value=1, state={"n": 1})
        assert hs.worker_pid is None and pid is not None and pid_gone(pid)
        assert hs.call(PRE, {"echo": 2}, {}).value == 2
        assert hs.events == {
            **NO_EVENTS,
            "calls": 2,
            "ok": 2,
            "starts": 2,
            "restarts": 1,
            "recycles": 2,
        }
    with hooks(worker_cpu_seconds=4, cpu_seconds=1) as hs:
        pid = hs.worker_pid
        assert hs.call(PRE, {"echo": 1}, {}).value == 1
        assert hs.worker_pid == pid
        assert hs.events == {**NO_EVENTS, "calls": 1, "ok": 1, "starts": 1}


# --- starting workers -----------------------------------------------------------------------


def test_a_worker_that_cannot_start_is_retried_with_a_doubling_backoff(tmp_path: Path) -> None:
    flag = tmp_path / "works"
    body = f"""
if not os.path.exists({str(flag)!r}):
    sys.stderr.write("no interpreter today\\n")
    sys.exit(3)
os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])
"""
    config = SandboxConfig(
        python=fake_python(tmp_path, body), restart_backoff_s=0.5, call_budget_s=2.0
    )
    failed = "the worker closed its pipe; exited with status 3; stderr: no interpreter today"
    with structlog.testing.capture_logs() as logs:
        hs = IsolatedHooks.from_sources({PRE: ACTOR}, config, overlay_id="ov-1")
        assert hs.worker_pid is None and hs.report is None and not hs.isolated
        waiting = hs.call(PRE, {}, {"s": 1})
        backoff = "the worker is unavailable (restart backoff)"
        assert outcome(waiting) == HookCall(state={"s": 1}, fault="crashed", detail=backoff)
        time.sleep(0.6)
        assert outcome(hs.call(PRE, {}, {})) == HookCall(fault="crashed", detail=failed)
        time.sleep(0.5)  # inside the doubled backoff (1 s)
        assert hs.call(PRE, {}, {}).detail == backoff
        time.sleep(0.6)
        flag.touch()
        assert outcome(hs.call(PRE, {"echo": 1}, {})) == HookCall(value=1, state={"n": 1})
        flag.unlink()
        pid = hs.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        assert hs.call(PRE, {}, {}).fault == "crashed"
        assert hs.call(PRE, {}, {}).detail == failed  # the backoff began again from 0.5 s
        hs.close()
    assert hs.events == {
        **NO_EVENTS,
        "calls": 6,
        "ok": 1,
        "starts": 4,
        "restarts": 3,
        "start_failures": 3,
        "crashes": 5,
        "closed": 0,
    }
    assert [e for e in logs if e["event"] == "sandbox.worker_start_failed"] == [
        {"event": "sandbox.worker_start_failed", "log_level": "error", "overlay": "ov-1",
         "detail": failed, "retry_in_s": retry}
        for retry in (0.5, 1.0, 0.5)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("script", "fault", "detail"),
    [
        ("print('not json')", "junk", "malformed hello: Expecting value: line 1 column 1 (char 0)"),
        ("print('{\"hello\": true, \"x\": NaN}')", "junk",
         "malformed hello: non-standard JSON constant NaN"),
        ("print('[1]')", "junk", "the worker did not say hello"),
        ("print('{\"hello\": 1}')", "junk", "the worker did not say hello"),
        ("print('{\"hello\": false}')", "junk", "the worker did not say hello"),
        ("print('{\"hello\": true}')", "unisolated_refused",
         "isolation incomplete (); untrusted hooks refused"),
        ("print(json.dumps({'hello': True, 'report': {'layers': [{'name': 'nnp', 'detail': 'no'},"
         " {'name': 'uid', 'detail': 'root'}]}}))", "unisolated_refused",
         "isolation incomplete (nnp: no; uid: root); untrusted hooks refused"),
        ("print(HELLO, flush=True); sys.stdin.readline(); print('{\"id\": 1, \"loaded\": []}')",
         "junk", ""),
        ("print(HELLO, flush=True); sys.stdin.readline(); "
         "print('{\"id\": 1, \"fault\": \"memory\", \"detail\": \"no room\"}')",
         "memory", "no room"),
        ("print(HELLO, flush=True); sys.stdin.readline(); "
         "print('{\"id\": 1, \"fault\": \"odd\", \"errors\": {}}')", "junk", ""),
        ("time.sleep(30)", "timeout", "no response within the budget"),
    ],
)  # fmt: skip
def test_a_worker_that_fails_its_start_is_discarded_and_reported(
    tmp_path: Path, script: str, fault: str, detail: str
) -> None:
    body = f"HELLO = {GOOD_HELLO!r}\n{script}"
    config = SandboxConfig(python=fake_python(tmp_path, body), start_budget_s=0.5)
    hs = IsolatedHooks.from_sources({PRE: ACTOR}, config, start=False)
    started = time.perf_counter()
    result = hs.call(PRE, {}, {"s": 1})
    assert time.perf_counter() - started < 3.0  # the hung one is killed, not waited for
    assert outcome(result) == HookCall(state={"s": 1}, fault=fault, detail=detail)
    assert hs.worker_pid is None
    counter = {"junk": "junk", "memory": "memory", "timeout": "timeouts"}.get(fault, "refused")
    assert hs.events == {**NO_EVENTS, "calls": 1, "starts": 1, "start_failures": 1, counter: 1}
    hs.close()


def test_a_load_too_large_for_the_request_limit_fails_the_start_and_leaves_no_worker() -> None:
    with hooks(max_request_bytes=200, restart_backoff_s=0.05) as hs:
        assert hs.worker_pid is None
        assert hs.events == {**NO_EVENTS, "starts": 1, "start_failures": 1}
        time.sleep(0.1)
        result = hs.call(PRE, {}, {})
        load = json.dumps({"id": 1, "op": "load", "hooks": {"pre_action": ACTOR}})
        detail = f"request is {len(load) + 1} bytes; the limit is 200"
        assert outcome(result) == HookCall(fault="junk", detail=detail)
        assert hs.worker_pid is None
        assert hs.events == {
            **NO_EVENTS,
            "calls": 1,
            "starts": 2,
            "restarts": 1,
            "start_failures": 2,
            "junk": 1,
        }


def test_hooks_that_do_not_compile_are_counted_and_answer_invalid() -> None:
    sources: dict[HookName | str, str] = {
        PRE: "def hook(ctx, state)\n    return 1\n",
        HookName.POST_FEEDBACK: "x = 1\n",
    }
    with IsolatedHooks.from_sources(sources, SandboxConfig()) as hs:
        assert hs.load_errors == {
            "pre_action": "SyntaxError: expected ':' (line 1)",
            "post_feedback": "ValueError: no top-level `def hook(ctx, state)`",
        }
        assert outcome(hs.call(PRE, {}, {"s": 1})) == HookCall(
            state={"s": 1}, fault="invalid", detail="SyntaxError: expected ':' (line 1)"
        )
        assert hs.events == {**NO_EVENTS, "calls": 1, "starts": 1, "load_errors": 2, "invalid": 1}


# --- refusing, closing, static rejection --------------------------------------------------


def test_restarts_leave_no_descriptor_behind(actor: IsolatedHooks) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    actor.call(PRE, {}, {})
    before = fds()
    for _ in range(3):
        pid = actor.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        actor.call(PRE, {}, {})
        assert actor.call(PRE, {}, {}).fault is None
    assert fds() == before


def test_the_worker_starts_with_an_empty_environment() -> None:
    """Even where the worker keeps the uid that could read its /proc/self/environ (started as
    root with uid 0 allowed unisolated; or not root at all), there is nothing of ours in it,
    and Landlock (reads handled, none granted) keeps it from being opened at all."""
    root = os.geteuid() == 0
    config = {"uid": 0, "gid": 0, "allow_unisolated": True} if root else {}
    os.environ["HR1_TEST_SECRET"] = "s3cret"
    try:
        with hooks(**config) as hs:
            result = hs.call(PRE, {"do": "environ"}, {})
            assert result.fault == "violation" and "Permission denied" in result.detail, result
            assert "s3cret" not in result.detail
    finally:
        del os.environ["HR1_TEST_SECRET"]


def test_close_releases_the_worker_and_every_pipe_to_it() -> None:
    """Closing kills and reaps the worker and closes our three pipe ends (an agent swaps
    overlays for days: a leaked descriptor per swap would run it out of them)."""
    h = hooks()
    worker = h._worker
    assert worker is not None
    streams = (worker.proc.stdin, worker.proc.stdout, worker.proc.stderr)
    h.close()
    assert worker.proc.returncode is not None
    assert all(stream is not None and stream.closed for stream in streams)


def test_close_after_the_worker_died_and_was_reaped_does_not_raise() -> None:
    """The worker can be gone before we close (killed, crashed, reaped): its process group
    no longer exists, and closing must still succeed."""
    h = hooks()
    worker = h._worker
    assert worker is not None
    worker.proc.kill()
    worker.proc.wait(timeout=5)
    h.close()
    assert h._worker is None


def test_a_probe_of_a_refused_hook_set_says_it_was_refused() -> None:
    """Once isolation was found missing, every later use is refused with the same reason,
    the self-test included (it must not start a worker behind the refusal)."""
    patch = Patch(env="any", hooks=[HookCode(hook=PRE, code=ACTOR)])
    hs = IsolatedHooks(patch, SandboxConfig(fail_layer="seccomp"), static_checks=False)
    refused = f"isolation incomplete (seccomp: {FORCED}); untrusted hooks refused"
    with pytest.raises(RuntimeError) as raised:
        hs.probe()
    assert str(raised.value) == f"probe failed: unisolated_refused: {refused}"
    assert hs.worker_pid is None
    hs.close()


def test_the_parent_sleeps_while_the_worker_computes() -> None:
    """Waiting for a slow hook costs the agent's process no CPU: it polls the worker's pipe,
    it does not spin on it (an agent runs next to its model on the same cores)."""
    slow = (
        # ~0.3 s on this project's fastest host so far (4M iterations took 0.08 s there)
        "def hook(ctx, state):\n    n = 0\n    for i in range(15000000):\n        n += i\n"
        '    return {"effect": "hint", "text": str(n)}\n'
    )
    h = hooks(slow, call_budget_s=10.0)
    h.call(PRE, {}, {})  # warm: the worker is up and the code compiled
    wall, cpu = time.perf_counter(), time.process_time()
    result = h.call(PRE, {}, {})
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    h.close()
    assert result.fault is None and wall > 0.1, (result, wall)
    assert cpu < 0.25 * wall, f"parent used {cpu:.3f} s CPU during a {wall:.3f} s call"
