"""A warm hook worker keeps nothing between calls that a hook could use or grow: the real
`re` module's pattern cache is emptied after every call, a worker whose peak RSS passed its
threshold is recycled, and so is one that hit a MemoryError. Real isolated workers, hooks run
with the static checks skipped (as a hook past the language filter would be)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness_r1.contracts import HookName
from harness_r1.sandbox.executor import IsolatedHooks
from harness_r1.sandbox.sandbox_config import SandboxConfig

pytestmark = pytest.mark.integration

PRE = HookName.PRE_ACTION

#: Counts the entries of the worker's real regex cache through a frame walk up to the worker's
#: module (a hook that got past the filter), after compiling a pattern of its own.
CACHE_PROBE = """
def hook(ctx, state):
    re.compile("probe-" + str(ctx["step"]) + "-[a-z]+")
    walk = (walk.gi_frame.f_back for x in [1])
    frame = next(walk)
    while "Worker" not in frame.f_globals:
        frame = frame.f_back
    return len(frame.f_globals["re"]._cache)
"""

#: Fills the regex cache with distinct patterns on every call.
CACHE_FILLER = """
def hook(ctx, state):
    for i in range(400):
        re.compile("p" + str(ctx["step"]) + "x" + str(i) + "(a|b)+c{2,9}[0-9]*")
    return None
"""

#: Holds on to a growing list through the real module's globals (a leak a hook could plant).
HOARDER = """
def hook(ctx, state):
    walk = (walk.gi_frame.f_back for x in [1])
    frame = next(walk)
    while "Worker" not in frame.f_globals:
        frame = frame.f_back
    keep = frame.f_globals.setdefault("KEEP", [])
    keep.append("x" * (8 * 1024 * 1024))
    return len(keep)
"""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _call(hs: IsolatedHooks, step: int) -> Any:
    result = hs.call(PRE, {"step": step}, {})
    assert result.fault is None, result
    return result.value


def test_the_regex_cache_is_empty_at_the_start_of_every_call() -> None:
    with IsolatedHooks.from_sources({PRE: CACHE_PROBE}, SandboxConfig(call_budget_s=2.0)) as hs:
        seen = [_call(hs, step) for step in range(3)]
    # only the pattern compiled in this call: nothing from the calls before
    assert seen == [1, 1, 1]


def test_twenty_calls_of_a_cache_filling_hook_leave_the_worker_bounded() -> None:
    config = SandboxConfig(call_budget_s=5.0)
    with IsolatedHooks.from_sources({PRE: CACHE_FILLER}, config) as hs:
        _call(hs, 0)
        pid = hs.worker_pid
        assert pid is not None
        first = _rss_mb(pid)
        for step in range(1, 20):
            _call(hs, step)
        assert hs.worker_pid == pid  # no recycle needed: the purge keeps it small
        assert _rss_mb(pid) < first + 10, (first, _rss_mb(pid))


def test_a_worker_past_its_rss_threshold_is_recycled_after_the_call() -> None:
    config = SandboxConfig(call_budget_s=5.0, worker_rss_mb=60)  # a fresh worker: ~20 MB
    with IsolatedHooks.from_sources({PRE: HOARDER}, config) as hs:
        pids, kept = [], []
        for step in range(12):
            kept.append(_call(hs, step))
            pids.append(hs.worker_pid)
        assert hs.events["recycles"] >= 1
        # what the hook hoarded went with the recycled worker: the count starts again
        assert max(kept) < 12 and kept.count(1) >= 2, kept


def test_a_memory_fault_recycles_the_worker() -> None:
    bomb = (
        "def hook(ctx, state):\n"
        "    if ctx['step'] == 1:\n"
        "        return len('x' * (4 * 1024 * 1024 * 1024))\n"
        "    return ctx['step']\n"
    )
    config = SandboxConfig(call_budget_s=5.0)
    with IsolatedHooks.from_sources({PRE: bomb}, config) as hs:
        assert _call(hs, 0) == 0
        first = hs.worker_pid
        result = hs.call(PRE, {"step": 1}, {})
        assert result.fault == "memory", result
        assert hs.events["recycles"] == 1
        assert _call(hs, 2) == 2
        assert hs.worker_pid not in (None, first)  # the next call ran in a fresh worker


def test_object_addresses_do_not_reach_the_host() -> None:
    leak = "def hook(ctx, state):\n    return repr(hook) + ' ' + repr(len)\n"
    with IsolatedHooks.from_sources({PRE: leak}, SandboxConfig(call_budget_s=2.0)) as hs:
        text = _call(hs, 0)
    assert "<function hook at 0x?>" in text and "0x7" not in text, text


def test_a_large_host_does_not_make_its_workers_look_large() -> None:
    """Linux carries a parent's peak RSS over fork and exec: the worker of a daemon holding a
    model must not look as large as the daemon (and be recycled after every call)."""
    ballast = bytearray(300 * 1024 * 1024)
    ballast[::4096] = b"x" * len(range(0, len(ballast), 4096))  # resident, not just reserved
    quiet = "def hook(ctx, state):\n    return ctx['step']\n"
    with IsolatedHooks.from_sources({PRE: quiet}, SandboxConfig(call_budget_s=2.0)) as hs:
        values = [_call(hs, step) for step in range(3)]
        pid = hs.worker_pid
        assert values == [0, 1, 2] and pid is not None
        assert hs.events["recycles"] == 0 and _rss_mb(pid) < 60
    del ballast


#: a loop of 10**8 steps (seconds: past any call budget here), its size computed so the
#: literal limit of the static checks does not apply (these hooks skip them anyway)
LONG_LOOP = (
    "    n = int('1' + '0' * 8)\n    t = 0\n    for i in range(n):\n        t += i\n    return t\n"
)


def test_after_max_worker_kills_the_hook_set_answers_disabled_at_once() -> None:
    slow = "def hook(ctx, state):\n" + LONG_LOOP
    config = SandboxConfig(call_budget_s=0.3, max_worker_kills=2)
    with IsolatedHooks.from_sources({PRE: slow}, config) as hs:
        faults = [hs.call(PRE, {"step": i}, {}).fault for i in range(2)]
        assert faults == ["timeout", "timeout"]
        assert hs.disabled_reason is not None and hs.worker_pid is None
        later = hs.call(PRE, {"step": 2}, {})
        assert later.fault == "disabled" and "after 2 timeouts" in later.detail
        assert later.seconds < 0.05 and hs.worker_pid is None  # no worker started again
        assert hs.events["restarts"] == 1 and hs.events["disabled"] == 1


def test_timeouts_and_memory_faults_count_together_against_the_worker_kill_budget() -> None:
    """Both end the worker (a restart for the next call): a patch alternating them must not
    restart its worker forever."""
    code = (
        "def hook(ctx, state):\n"
        "    if ctx['step'] % 2:\n"
        "        return len('x' * int('9' + '0' * 9))\n" + LONG_LOOP
    )
    config = SandboxConfig(call_budget_s=0.3, max_worker_kills=2)
    with IsolatedHooks.from_sources({PRE: code}, config) as hs:
        faults = [hs.call(PRE, {"step": i}, {}).fault for i in range(2)]
        assert faults == ["timeout", "memory"]
        later = hs.call(PRE, {"step": 2}, {})
        assert later.fault == "disabled", later
        assert "after 1 timeout, 1 memory fault" in later.detail
        assert hs.worker_pid is None
