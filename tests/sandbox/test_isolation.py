"""Isolated hook execution: the worker's layers are really in force, faults are contained."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import time
from collections.abc import Iterator

import pytest

from harness_r1.harness.hooks import InProcessHooks
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig

BUDGET = 0.25
TRIVIAL = """
def hook(ctx, state):
    state["n"] = state.get("n", 0) + 1
    return {"effect": "rewrite", "text": ctx["action"].strip()}
"""


def hooks(code: str, **config: object) -> IsolatedHooks:
    settings = {"call_budget_s": BUDGET, **config}
    return IsolatedHooks.from_sources({"pre_action": code}, SandboxConfig(**settings))  # type: ignore[arg-type]


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def host_isolation() -> Iterator[None]:
    with hooks(TRIVIAL) as probe:
        if not probe.isolated:
            failed = probe.report.failed if probe.report else "no report"
            message = f"isolation unavailable on this host: {failed}"
            if os.environ.get("HARNESS_R1_ALLOW_NO_ISOLATION") == "1":
                pytest.skip(message + " (HARNESS_R1_ALLOW_NO_ISOLATION=1)")
            pytest.fail(message + "; set HARNESS_R1_ALLOW_NO_ISOLATION=1 to skip knowingly")
    yield


@pytest.fixture
def trivial(host_isolation: None) -> Iterator[IsolatedHooks]:
    with hooks(TRIVIAL) as hs:
        yield hs


def test_round_trip_returns_value_and_mutated_state(trivial: IsolatedHooks) -> None:
    state = {"n": 41, "seen": ["a"]}
    result = trivial.call("pre_action", {"action": "  go north "}, state)  # type: ignore[arg-type]
    assert result.fault is None, result.detail
    assert result.value == {"effect": "rewrite", "text": "go north"}
    assert result.state == {"n": 42, "seen": ["a"]}
    assert state == {"n": 41, "seen": ["a"]}  # the caller's state is never mutated
    assert trivial.isolated and trivial.has("pre_action") and not trivial.has("post_feedback")  # type: ignore[arg-type]
    assert trivial.events["ok"] == 1 and trivial.events["starts"] == 1


def test_every_isolation_layer_is_in_force_inside_the_worker(host_isolation: None) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    with hooks(TRIVIAL, enable_probe=True) as hs:
        assert hs.isolated, hs.report
        assert hs.report is not None and not hs.report.failed
        assert hs.report.applied == [
            "session", "environment", "fds", "cwd", "rlimits", "uid", "nnp", "landlock", "seccomp"
        ]  # fmt: skip
        probe = hs.probe(port)
        pid = hs.worker_pid
    with pytest.raises(TimeoutError):
        listener.accept()  # nothing ever reached the listener
    listener.close()

    def denied(name: str, error: str, errno: int | None = None) -> None:
        outcome = probe[name]
        assert not outcome["ok"], (name, outcome)
        assert outcome["error"] == error, (name, outcome)
        if errno is not None:
            assert outcome["errno"] == errno, (name, outcome)

    denied("write_tmp", "PermissionError", 13)  # Landlock (EACCES)
    denied("write_cwd", "PermissionError", 13)
    denied("mkdir_tmp", "PermissionError", 13)
    denied("socket", "PermissionError", 1)  # seccomp (EPERM)
    denied("connect", "PermissionError", 1)
    denied("fork", "PermissionError", 1)
    denied("exec", "PermissionError", 1)
    denied("thread", "RuntimeError")  # clone is gone, so are threads
    denied("alloc_1g", "MemoryError")  # RLIMIT_AS
    denied("kill_parent", "PermissionError", 1)
    denied("kill_init", "PermissionError", 1)
    denied("setsid", "PermissionError", 1)
    denied("setuid_root", "PermissionError", 1)
    assert probe["kill_self"]["ok"]  # signals to itself stay possible (abort, faulthandler)
    # reads: Landlock handles them too and grants none (EACCES), /proc of the daemon included
    for name in ("read_passwd", "listdir_cwd", "listdir_root"):
        denied(name, "PermissionError", 13)
    for name in ("read_parent_environ", "read_parent_cmdline", "read_own_environ"):
        denied(name, "PermissionError", 13)
    expected_uid = 65534 if os.geteuid() == 0 else os.getuid()
    assert probe["uid"] == probe["euid"] == expected_uid
    if os.geteuid() == 0:
        assert probe["gid"] == 65534 and probe["groups"] == []
    assert probe["environ"] == {}
    assert probe["sid"] == probe["pgid"] == probe["pid"] == pid
    assert probe["status"]["NoNewPrivs"] == "1" and probe["status"]["Seccomp"] == "2"
    assert probe["status"]["Threads"] == "1"
    # stdio, two protocol pipes, the kept /proc/self/statm (the RSS check) and listdir's own
    assert set(probe["fds"]) <= {0, 1, 2, 3, 4, 5, 6}
    limits = probe["rlimits"]
    assert limits["AS"] == [512 * 2**20] * 2
    assert limits["FSIZE"] == [0, 0] and limits["CORE"] == [0, 0] and limits["NPROC"] == [0, 0]
    assert limits["NOFILE"] == [16, 16] and limits["CPU"][1] == 300


ESCAPE = """
def hook(ctx, state):
    g = (g.gi_frame.f_back.f_back.f_globals for x in [1])
    os = next(g)["os"]
    what = ctx["what"]
    if what == "uid":
        return os.getuid()
    if what == "fork":
        return os.fork()
    if what == "write":
        return os.open("/tmp/hr1-escape-" + str(os.getpid()), 65)
    if what == "exec":
        return os.execv("/bin/sh", ["sh", "-c", "true"])
    return os.kill(os.getppid(), 9)
"""


def test_a_hook_past_the_language_filter_is_still_held_by_the_os_layers(
    host_isolation: None,
) -> None:
    # A generator frame walk (which the static checks must reject) reaches the worker's `os`;
    # what that buys a hook is shown here, from inside hook code.
    with hooks(ESCAPE) as hs:
        uid = hs.call("pre_action", {"what": "uid"}, {})  # type: ignore[arg-type]
        assert uid.value == (65534 if os.geteuid() == 0 else os.getuid())
        for what, errno in [("fork", 1), ("write", 13), ("exec", 1), ("kill", 1)]:
            result = hs.call("pre_action", {"what": what}, {"s": 0})  # type: ignore[arg-type]
            assert result.fault == "violation", (what, result)
            assert f"[Errno {errno}]" in result.detail and result.state == {"s": 0}
        assert hs.events["violations"] == 4 and hs.events["violations.os_error"] == 4
        assert hs.events["restarts"] == 0
    assert not any(name.startswith("hr1-escape-") for name in os.listdir("/tmp"))


LIAR = """
def hook(ctx, state):
    g = (g.gi_frame.f_back.f_back.f_back.f_back for x in [1])
    serve = next(g)
    os = serve.f_globals["os"]
    os.write(serve.f_locals["proto_out"], ctx["bytes"].encode())
    return "after the lie"
"""


@pytest.mark.parametrize(
    ("payload", "fault"),
    [
        ("not json\n", "junk"),
        ('{"id": 999, "value": 1, "state": {}}\n', "junk"),
        ('{"id": 2, "value": NaN, "state": {}}\n', "junk"),
        ('{"id": 2, "value": 1}\n', "junk"),
        ("[" * 100_000 + "\n", "junk"),
        ("x" * 400_000, "oversized"),
    ],
)
def test_a_worker_that_lies_on_the_protocol_is_killed(
    host_isolation: None, payload: str, fault: str
) -> None:
    # Request 1 was `load`, so the call below is request 2.
    with hooks(LIAR, call_budget_s=2.0) as hs:
        pid = hs.worker_pid
        assert pid is not None
        result = hs.call("pre_action", {"bytes": payload}, {"s": 1})  # type: ignore[arg-type]
        assert result.fault == fault, result
        assert result.state == {"s": 1} and result.value is None
        assert hs.worker_pid is None and pid_gone(pid)
        fine = hs.call("pre_action", {"bytes": ""}, {})  # type: ignore[arg-type]
        assert fine.fault is None and fine.value == "after the lie"


def test_infinite_loop_times_out_kills_the_group_and_next_call_gets_a_fresh_worker(
    host_isolation: None,
) -> None:
    loop = "def hook(ctx, state):\n    if ctx.get('spin'):\n        for i in range(10**12):\n"
    loop += "            pass\n    return 'ok'\n"
    with hooks(loop) as hs:
        first_pid = hs.worker_pid
        assert first_pid is not None
        started = time.perf_counter()
        result = hs.call("pre_action", {"spin": True}, {"k": 1})  # type: ignore[arg-type]
        elapsed = time.perf_counter() - started
        assert result.fault == "timeout" and result.state == {"k": 1} and result.value is None
        assert elapsed < BUDGET + 0.5, elapsed
        assert hs.worker_pid is None and pid_gone(first_pid)
        again = hs.call("pre_action", {}, {})  # type: ignore[arg-type]
        assert again.fault is None and again.value == "ok"
        assert hs.worker_pid not in (None, first_pid)
        assert hs.events["timeouts"] == 1 and hs.events["restarts"] == 1


def test_cpu_limit_is_a_backstop_behind_the_wall_clock(host_isolation: None) -> None:
    loop = "def hook(ctx, state):\n    for i in range(10**12):\n        pass\n"
    config = SandboxConfig(call_budget_s=8.0, cpu_seconds=1)  # wall budget too long on purpose
    with IsolatedHooks.from_sources({"pre_action": loop}, config) as hs:
        started = time.perf_counter()
        result = hs.call("pre_action", {}, {})  # type: ignore[arg-type]
        assert result.fault == "timeout", result
        assert result.detail == "the worker hit its CPU limit (SIGXCPU)"
        assert time.perf_counter() - started < config.call_budget_s  # not the wall clock
        assert hs.events["timeouts"] == 1 and hs.worker_pid is None


@pytest.mark.parametrize(
    "body",
    [
        "x = 'a' * (10**10)",
        "x = [0] * (10**9)",
        "x = [str(i) * 10**6 for i in range(10**4)]",
    ],
)
def test_memory_bombs_are_contained(host_isolation: None, body: str) -> None:
    code = f"def hook(ctx, state):\n    if ctx.get('bomb'):\n        {body}\n    return 'fine'\n"
    with hooks(code, call_budget_s=3.0) as hs:  # long enough for the memory limit to bite first
        result = hs.call("pre_action", {"bomb": True}, {"s": 1})  # type: ignore[arg-type]
        assert result.fault in ("memory", "crashed"), result
        assert result.state == {"s": 1}
        after = hs.call("pre_action", {}, {})  # type: ignore[arg-type]
        assert after.fault is None and after.value == "fine"


@pytest.mark.parametrize(
    ("code", "fault", "detail"),
    [
        ("def hook(ctx, state):\n    return ctx['missing']\n", "raised", "KeyError"),
        ("def hook(ctx, state):\n    return 1 // 0\n", "raised", "ZeroDivisionError"),
        ("def f(n):\n    return f(n + 1)\ndef hook(ctx, state):\n    return f(0)\n", "raised",
         "RecursionError"),
        ("def hook(ctx, state):\n    return open('/etc/passwd')\n", "raised", "NameError"),
        ("def hook(ctx, state):\n    return {1, 2}\n", "junk", "set"),
        ("def hook(ctx, state):\n    return float('nan')\n", "junk", "Out of range float"),
        ("def hook(ctx, state):\n    state['x'] = range(3)\n    return None\n", "junk", "range"),
        ("def hook(ctx, state):\n    return 'a' * 300000\n", "oversized", "limit"),
        ("def hook(ctx, state)\n    return 1\n", "invalid", "SyntaxError"),
        ("def helper(ctx, state):\n    return 1\n", "invalid", "def hook"),
    ],
)  # fmt: skip
def test_bad_hooks_fault_without_effect_and_the_worker_survives(
    host_isolation: None, code: str, fault: str, detail: str
) -> None:
    with hooks(code) as hs:
        pid = hs.worker_pid
        result = hs.call("pre_action", {"action": "x"}, {"keep": True})  # type: ignore[arg-type]
        assert result.fault == fault, result
        assert detail in result.detail, result
        assert result.state == {"keep": True} and result.value is None
        assert hs.worker_pid == pid  # contained inside the worker: no restart needed
        assert hs.events["restarts"] == 0


def test_a_dead_worker_is_a_crash_and_the_next_call_restarts(trivial: IsolatedHooks) -> None:
    pid = trivial.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    result = trivial.call("pre_action", {"action": "a"}, {"n": 5})  # type: ignore[arg-type]
    assert result.fault == "crashed" and result.state == {"n": 5}, result
    assert "SIGKILL" in result.detail and pid_gone(pid)
    again = trivial.call("pre_action", {"action": "a"}, {"n": 5})  # type: ignore[arg-type]
    assert again.fault is None and again.state == {"n": 6}
    assert trivial.events["crashes"] == 1 and trivial.events["restarts"] == 1


def test_module_globals_do_not_leak_between_calls(host_isolation: None) -> None:
    code = "SEEN = []\ndef hook(ctx, state):\n    SEEN.append(1)\n    return len(SEEN)\n"
    with hooks(code) as hs:
        values = [hs.call("pre_action", {}, {}).value for _ in range(3)]  # type: ignore[arg-type]
    assert values == [1, 1, 1]


def test_closed_hookset_kills_its_worker(host_isolation: None) -> None:
    hs = hooks(TRIVIAL)
    pid = hs.worker_pid
    assert pid is not None
    hs.close()
    assert pid_gone(pid)
    result = hs.call("pre_action", {"action": "a"}, {})  # type: ignore[arg-type]
    assert result.fault == "closed"


def test_hundred_calls_reuse_one_worker(trivial: IsolatedHooks) -> None:
    pid = trivial.worker_pid
    ctx = {"action": " look ", "admissible": [f"go to shelf {i}" for i in range(30)]}
    for _ in range(10):  # warm up
        trivial.call("pre_action", ctx, {})  # type: ignore[arg-type]
    isolated = []
    state: dict[str, object] = {}
    for _ in range(100):
        started = time.perf_counter()
        result = trivial.call("pre_action", ctx, state)  # type: ignore[arg-type]
        isolated.append(time.perf_counter() - started)
        assert result.fault is None
        state = result.state
    assert state["n"] == 100 and trivial.worker_pid == pid and trivial.events["starts"] == 1

    namespace: dict[str, object] = {}
    exec(TRIVIAL, namespace)
    local = InProcessHooks("local", {"pre_action": namespace["hook"]})  # type: ignore[dict-item]
    in_process = []
    for _ in range(100):
        started = time.perf_counter()
        local.call("pre_action", ctx, {})  # type: ignore[arg-type]
        in_process.append(time.perf_counter() - started)

    def pct(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1e6

    print(
        f"\nisolated round trip p50={pct(isolated, 0.5):.0f}us p99={pct(isolated, 0.99):.0f}us; "
        f"in-process p50={pct(in_process, 0.5):.0f}us p99={pct(in_process, 0.99):.0f}us; "
        f"worker start {trivial.last_start_s:.3f}s"
    )
    assert statistics.median(isolated) < BUDGET


@pytest.mark.parametrize(
    "knob", [{"fail_layer": "seccomp"}, {"fail_layer": "landlock"}, {"min_landlock_abi": 99}]
)
def test_fails_closed_when_isolation_cannot_be_set_up(knob: dict[str, object]) -> None:
    with hooks(TRIVIAL, **knob) as hs:
        assert not hs.isolated
        assert hs.report is not None and hs.report.failed
        result = hs.call("pre_action", {"action": "a"}, {"n": 1})  # type: ignore[arg-type]
        assert result.fault == "unisolated_refused" and result.state == {"n": 1}
        assert hs.worker_pid is None and hs.events["refused"] == 1


def test_allow_unisolated_runs_anyway_and_says_so() -> None:
    with hooks(TRIVIAL, fail_layer="seccomp", allow_unisolated=True) as hs:
        assert not hs.isolated and hs.events["unisolated_workers"] == 1
        result = hs.call("pre_action", {"action": " a "}, {})  # type: ignore[arg-type]
        assert result.fault is None and result.value == {"effect": "rewrite", "text": "a"}


def test_a_patch_the_static_checks_reject_never_reaches_a_worker() -> None:
    from harness_r1.contracts import HookCode, HookName, Patch

    bad = Patch(
        env="any",
        hooks=[
            HookCode(
                hook=HookName.PRE_ACTION, code="import os\ndef hook(ctx, state):\n    return None\n"
            )
        ],
    )
    with IsolatedHooks(bad, SandboxConfig()) as hs:
        result = hs.call(HookName.PRE_ACTION, {}, {"k": 1})
        assert result.fault == "invalid" and "static checks" in result.detail
        assert result.state == {"k": 1} and hs.worker_pid is None
        assert hs.events["invalid"] == 1 and hs.events["starts"] == 0


def test_missing_isolation_shows_in_the_metric_and_refuses() -> None:
    from prometheus_client import CollectorRegistry

    from harness_r1.contracts import HookCode, HookName, Patch
    from harness_r1.sandbox.metrics import SandboxMetrics

    registry = CollectorRegistry()
    metrics = SandboxMetrics(registry)
    ok = Patch(env="any", hooks=[HookCode(hook=HookName.PRE_ACTION, code=TRIVIAL)])
    ctx = {"action": "look"}
    with IsolatedHooks(ok, SandboxConfig(), metrics=metrics) as hs:
        assert hs.call(HookName.PRE_ACTION, ctx, {}).fault is None
    assert registry.get_sample_value("harness_r1_sandbox_isolated") == 1.0
    with IsolatedHooks(ok, SandboxConfig(fail_layer="seccomp"), metrics=metrics) as hs:
        assert hs.call(HookName.PRE_ACTION, ctx, {}).fault == "unisolated_refused"
    assert registry.get_sample_value("harness_r1_sandbox_isolated") == 0.0
    refused = registry.get_sample_value("harness_r1_sandbox_events_total", {"kind": "refused"})
    assert refused is not None and refused >= 1


def test_the_worker_itself_refuses_hooks_when_an_isolation_layer_failed() -> None:
    """The worker's own fail-closed check, behind the parent's: the worker is started exactly
    as the executor starts it (its bootstrap, sys.path and packages), with seccomp forced to
    fail and unisolated execution not allowed, but spoken to directly, without IsolatedHooks
    (whose refusal would come first). It says in its hello that it is not permitted, answers
    load and call with `unisolated_refused` naming the failed layer, runs nothing, and stays up
    (a ping is answered)."""
    import json
    import subprocess
    import sys
    from dataclasses import asdict

    from harness_r1.sandbox import worker_process
    from harness_r1.sandbox.isolation import IsolationSettings

    boot = {
        "path": worker_process._worker_sys_path(),
        "packages": [
            ["harness_r1", str(worker_process._SANDBOX_DIR.parent)],
            ["harness_r1.sandbox", str(worker_process._SANDBOX_DIR)],
        ],
        "config": {
            "isolation": asdict(IsolationSettings(fail_layer="seccomp")),
            "allow_unisolated": False,
        },
    }
    requests = [
        {"id": 1, "op": "load", "hooks": {"pre_action": TRIVIAL}},
        {"id": 2, "op": "call", "hook": "pre_action", "ctx": {"action": " a "}, "state": {"n": 1}},
        {"id": 3, "op": "ping"},
    ]
    argv = [sys.executable, "-I", "-S", "-B", "-W", "ignore", "-c", worker_process._BOOTSTRAP]
    done = subprocess.run(
        [*argv, json.dumps(boot)],
        input="".join(json.dumps(r) + "\n" for r in requests).encode(),
        capture_output=True,
        env={},
        cwd="/",
        start_new_session=True,
        timeout=30,
    )
    hello, *responses = (json.loads(line) for line in done.stdout.splitlines())
    assert hello["hello"] is True, done.stderr
    assert hello["isolated"] is False and hello["permitted"] is False, hello
    assert [r["id"] for r in responses] == [1, 2, 3], (responses, done.stderr)
    load, call, ping = responses
    for response in (load, call):
        assert response.get("fault") == "unisolated_refused", response
        assert "seccomp: forced failure" in response["detail"], response
        assert "untrusted code refused" in response["detail"], response
    assert "loaded" not in load and "value" not in call and "state" not in call
    assert ping["pong"] is True
