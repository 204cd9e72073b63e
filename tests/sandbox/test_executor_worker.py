"""The IsolatedHooks worker: what it runs under (the configured limits, its interpreter's
flags and modules, an empty environment, CPU recycling, a parent that sleeps while it computes)
and how it starts (a start that fails, retried with a capped doubling backoff; a bad hello or
load, discarded and reported; hooks that do not compile)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pyseccomp
import pytest
import structlog
from executor_rig import (
    ACTOR,
    GOOD_HELLO,
    NO_EVENTS,
    PRE,
    fake_python,
    hooks,
    outcome,
    pid_gone,
    wait_dead,
)

from harness_r1.contracts import HookName
from harness_r1.harness.hooks import HookCall
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig

PROJECT_ROOT = Path(__file__).resolve().parents[2]


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
