"""Shared pieces of the attack corpus (test_attack_corpus*.py; conftest.py registers its `host`
fixture): the budgets, `hook()` that writes a hook source, the generator frame walk
and run-time sizes the hostile hooks use, the case types of the three tables, the run-time
check every case goes through, and a tiny episode world.

Each run-time case shares its worker with a benign `pre_decision` hook that fingerprints the
shared scope (`math.pi`, `re.escape`, `closest`), so "the next call on the same IsolatedHooks
works and sees an unpoisoned scope" is asserted for every case. A module-wide `Host` checks
after every run-time case that the test process kept its pid and uid and that a sentinel file
in a world-writable directory (so only Landlock, not file permissions, stands in the way) is
untouched."""

from __future__ import annotations

import math
import os
import shutil
import stat
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from executor_rig import pid_gone

from harness_r1.contracts import HookCode, HookName, Patch, TaskSpec
from harness_r1.envs.base import EnvError, EnvSuite, StepResult
from harness_r1.harness import EpisodeSpec, HarnessRuntime, RunConfig
from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig
from harness_r1.sandbox.worker_faults import FAULT_COUNTERS

SHORT = 0.3  # wall budget for hooks that must time out
ROOMY = 5.0  # wall budget for hooks that must hit another limit first (memory, recursion, size)
SLACK = 1.0  # kill + reap + scheduling on a loaded two-core machine
OK = "ok"  # a Run outcome: no fault, the hook returned a harmless JSON value
#: faults after which the worker is replaced (a MemoryError recycles it)
RESTARTING = frozenset({"timeout", "crashed", "memory"})
SENTINEL_TEXT = "intact\n"

PRE_ACTION = HookName.PRE_ACTION
PRE_DECISION = HookName.PRE_DECISION
POST_FEEDBACK = HookName.POST_FEEDBACK
EPISODE_START = HookName.EPISODE_START


def hook(body: str, prelude: str = "") -> str:
    """`prelude` (helpers, top-level code) + `def hook(ctx, state):` with `body` indented."""
    return prelude + "def hook(ctx, state):\n" + textwrap.indent(textwrap.dedent(body), "    ")


# A generator frame walk from the hook to the worker's own module globals (os, sys, ...).
WALK = """\
g = (g.gi_frame.f_back.f_back.f_globals for x in [1])
w = next(g)
os = w['os']
sys = w['sys']
"""
# Run-time sizes computed from strings, so no literal-bomb rule can see them.
BIG = "n = int('1' + '0' * 10)\n"  # 10**10

# The benign neighbour of every hostile hook: same worker, must still work, scope unpoisoned.
FINGERPRINT = hook("return [math.pi, re.escape('a.b'), closest('opn door', ['look', 'open door'])]")
FINGERPRINT_VALUE = [math.pi, "a\\.b", "open door"]


@dataclass(frozen=True)
class Run:
    """What the isolated worker makes of a hook: a fault kind, or OK with a harmless value."""

    fault: str
    detail: str = ""  # substring of the fault's detail; for OK, of repr(value)
    budget: float = ROOMY


@dataclass(frozen=True)
class Rejected:
    name: str
    code: str
    violation: str  # a stable static.Code value expected among the report's codes
    run: Run | None = None  # defence in depth: the outcome when run in the worker anyway


@dataclass(frozen=True)
class Contained:
    name: str
    code: str
    run: Run


@dataclass(frozen=True)
class Classified:
    name: str
    hook: HookName
    code: str
    reason: str  # HookFault.reason recorded by the runtime
    detail: str  # substring of HookFault.detail


@dataclass
class Host:
    """The test process and a world-writable sentinel that no hook may touch."""

    root: Path
    sentinel: Path
    pid: int
    ppid: int
    uid: int
    euid: int

    def ctx(self) -> dict[str, Any]:
        return {"path": str(self.sentinel), "dir": str(self.root), "action": "look"}

    def assert_intact(self) -> None:
        assert (os.getpid(), os.getppid()) == (self.pid, self.ppid)
        assert (os.getuid(), os.geteuid()) == (self.uid, self.euid)
        assert self.sentinel.read_text() == SENTINEL_TEXT
        assert sorted(p.name for p in self.root.iterdir()) == ["sentinel"]


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    with IsolatedHooks.from_sources({PRE_DECISION: FINGERPRINT}) as probe:
        if not probe.isolated:
            failed = probe.report.failed if probe.report else "no report"
            message = f"isolation unavailable on this host: {failed}"
            if os.environ.get("HARNESS_R1_ALLOW_NO_ISOLATION") == "1":
                pytest.skip(message + " (HARNESS_R1_ALLOW_NO_ISOLATION=1)")
            pytest.fail(message + "; set HARNESS_R1_ALLOW_NO_ISOLATION=1 to skip knowingly")
    root = Path(tempfile.mkdtemp(prefix="hr1-corpus-"))
    try:
        root.chmod(0o777)  # file permissions would let the worker's uid write here: Landlock won't
        sentinel = root / "sentinel"
        sentinel.write_text(SENTINEL_TEXT)
        sentinel.chmod(0o666)
        assert stat.S_IMODE(sentinel.stat().st_mode) == 0o666
        yield Host(root, sentinel, os.getpid(), os.getppid(), os.getuid(), os.geteuid())
    finally:
        shutil.rmtree(root, ignore_errors=True)


def contain(code: str, run: Run, host: Host) -> None:
    """Run one hostile hook in a fresh isolated worker and assert its concrete outcome."""
    config = SandboxConfig(call_budget_s=run.budget)
    with IsolatedHooks.from_sources({PRE_ACTION: code, PRE_DECISION: FINGERPRINT}, config) as hs:
        assert hs.isolated, hs.report
        pid = hs.worker_pid
        assert pid is not None
        started = time.perf_counter()
        result = hs.call(PRE_ACTION, host.ctx(), {"keep": 1})
        elapsed = time.perf_counter() - started
        assert elapsed < run.budget + SLACK, elapsed
        if run.fault == OK:
            assert result.fault is None, result
            assert run.detail in repr(result.value), result
        else:
            # "memory|timeout": either limit contains the hook; which fires first depends on how
            # fast the host hands out pages (the detail is checked for the first one named)
            allowed = run.fault.split("|")
            assert result.fault in allowed, result
            if result.fault == allowed[0]:
                assert run.detail in result.detail, result
            assert result.value is None and result.state == {"keep": 1}
            assert hs.events[FAULT_COUNTERS[str(result.fault)]] == 1, hs.events
            if result.fault == "violation":
                assert hs.events["violations.os_error"] == 1
        restarted = result.fault in RESTARTING
        if restarted:
            assert hs.worker_pid is None and pid_gone(pid)
        else:
            assert hs.worker_pid == pid
        after = hs.call(PRE_DECISION, {}, {})
        assert after.fault is None and after.value == FINGERPRINT_VALUE, after
        assert (hs.worker_pid != pid) == restarted
        assert hs.events["restarts"] == int(restarted)
        last = hs.worker_pid
    assert last is not None and pid_gone(last)
    host.assert_intact()


def patch_of(code: str, hook_name: HookName = PRE_ACTION) -> Patch:
    return Patch(env="door", hooks=[HookCode(hook=hook_name, code=code)])


# -- the tiny episode world -------------------------------------------------------------------


class DoorEnv:
    """`open door` wins, `look` is harmless, anything else: 'Nothing happens.'"""

    name = "door"

    def __init__(self) -> None:
        self.done = False
        self.actions: list[str] = []

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.done = False
        return "You are in a room with a door.", self._info()

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {"admissible_actions": ["open door", "look"], **extra}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EnvError("episode is over")
        self.actions.append(action)
        if action == "open door":
            self.done = True
            return StepResult("The door opens.", 1.0, True, False, self._info(success=True))
        return StepResult("Nothing happens.", 0.0, False, False, self._info(invalid_action=True))

    def close(self) -> None:
        pass


class DoorPrompter:
    def system_prompt(self, task: TaskSpec) -> str:
        return "Open the door. Answer with ACTION: <command>."

    def first_message(self, task: TaskSpec, observation: str, info: dict[str, Any]) -> str:
        return observation

    def feedback_message(self, observation: str, info: dict[str, Any]) -> str:
        return observation

    def extract_action(self, raw_output: str, info: dict[str, Any]) -> str:
        return raw_output.split("ACTION:")[-1].strip().lower()


TASK = TaskSpec(
    env="door", split="test", task_id="d1", task_type="door", instruction="open it", max_steps=5
)


def run_episode(hooks: IsolatedHooks, replies: list[str]) -> tuple[Any, DoorEnv, list[str]]:
    """One episode; returns the trajectory, the env and every system prompt the model saw."""
    env = DoorEnv()
    systems: list[str] = []
    scripted = iter(replies)

    def respond(messages: Any) -> str:
        systems.append(messages[0]["content"])
        return next(scripted, replies[-1])

    suite = EnvSuite(
        name="door",
        splits=("test",),
        default_max_steps=5,
        make_env=lambda root: env,
        load_tasks=lambda root, split: [TASK],
        prompter=DoorPrompter(),
        data_files=lambda root: {},
    )
    runtime = HarnessRuntime(
        suite, ScriptedPolicy(respond), Path("."), RunConfig(), env_factory=lambda: env
    )
    try:
        [trajectory] = runtime.run([EpisodeSpec(task=TASK, seed=1, hooks=hooks)])
    finally:
        runtime.close()
    return trajectory, env, systems
