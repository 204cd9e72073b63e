"""Ctrl-C or SIGTERM stops the demo and everything it started (the broker, the daemon's
threads, the hook workers) within 5 s, while the canary runs or while the fleet plays. The demo
runs in its own process with the named stand-ins of tests/daemon/daemon_rig.py, slowed down so
that it is mid-canary or mid-phase when the signal comes. A demo that does not stop has its
threads' stacks dumped (faulthandler, SIGUSR1) into the failure message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

RIG = Path(__file__).parents[1] / "daemon"  # daemon_rig.py, for the demo's process

SCRIPT = """
import faulthandler, signal, sys, time
from pathlib import Path
from rich.console import Console

from daemon_rig import JUNK, StagedEngineer, canary_with_progress, data_root
from harness_r1.demo import DemoOptions, DemoParts, run_demo
from harness_r1.harness.policies import ScriptedPolicy

calls = []
def slow(messages):
    if not calls:  # the fleet's first phase plays before any canary
        print("fleet generating", flush=True)
    calls.append(1)
    time.sleep(0.2)
    return JUNK

policy = ScriptedPolicy(slow)
def canary(env, progress):
    runner = canary_with_progress(env, progress)
    runner.runtime.policy = ScriptedPolicy(slow)
    return runner

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
faulthandler.register(signal.SIGUSR1, file=open(out / "stacks.txt", "w"), all_threads=True)
# the staged engineer's overlays force (default profile), on all 60 goals, as test_demo.py
options = DemoOptions(
    agents=2, episodes_per_agent=2, k=2, guard_tasks=2, out=out, profile="default", split="fixed"
)
parts = DemoParts(policy=policy, canary_for=canary, proposer=StagedEngineer())
run_demo(options, data_root(), out / "cache", Console(width=160), parts)
"""


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            children = (task / "children").read_text().split() if task.exists() else []
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


#: after which line of the demo's output, and how long after it, the signal comes
MID_CANARY = ("succeeded", 2.0)  # the fleet's first phase ended, the canary runs
MID_PHASE = ("fleet generating", 1.0)  # the fleet's first phase plays


def _stacks(demo: subprocess.Popen[str], run: Path) -> str:
    """The stuck demo's threads, from its faulthandler (before it is killed)."""
    demo.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    path = run / "stacks.txt"
    return path.read_text() if path.exists() else "(no stacks written)"


@pytest.mark.parametrize(
    ("signum", "moment"),
    [
        (signal.SIGINT, MID_CANARY),
        (signal.SIGTERM, MID_CANARY),
        (signal.SIGINT, MID_PHASE),
    ],
    ids=["sigint-mid-canary", "sigterm-mid-canary", "sigint-mid-phase"],
)
def test_a_signal_stops_the_demo_and_its_children_within_5_s(
    tmp_path: Path, signum: signal.Signals, moment: tuple[str, float]
) -> None:
    script = tmp_path / "demo.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(RIG)}
    demo = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert demo.stdout is not None
    lines = []
    marker, wait_s = moment
    for line in demo.stdout:
        lines.append(line)
        if marker in line:
            break
    time.sleep(wait_s)
    children = _descendants(demo.pid)
    assert children, "the broker and the hook workers run as child processes"
    sent = time.monotonic()
    demo.send_signal(signum)
    try:
        demo.wait(timeout=10)
    except subprocess.TimeoutExpired:
        stacks = _stacks(demo, tmp_path / "run")
        demo.kill()
        pytest.fail(f"still running 10 s after the signal; its threads:\n{stacks}")
    took = time.monotonic() - sent
    assert took < 5.0, f"stopped after {took:.1f} s:\n{''.join(lines)}{demo.stdout.read()}"
    deadline = time.monotonic() + 2.0
    while any(_alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [c for c in children if _alive(c)], "a child outlived the demo"
