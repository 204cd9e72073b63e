"""Shared pieces of the executor tests (test_executor*.py; conftest.py registers its `actor` and
`actor_patch` fixtures): ACTOR, one hook that does what its ctx says, the hook sets built on it,
the `events` record of a hook set that did nothing, and helpers that look at worker processes,
metrics and results.

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
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from harness_r1.contracts import HookCode, HookName, Patch
from harness_r1.harness.hooks import HookCall
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.isolation import LAYERS
from harness_r1.sandbox.sandbox_config import SandboxConfig

PRE = HookName.PRE_ACTION


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


@pytest.fixture
def actor_patch() -> Patch:
    """ACTOR as the pre_action hook of a patch for any env."""
    return Patch(env="any", hooks=[HookCode(hook=PRE, code=ACTOR)])
