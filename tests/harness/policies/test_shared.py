"""SharedPolicy: concurrent callers' requests go out as one batch and come back to their own
caller, in order; a failure reaches every caller of the batch; a stop ends every caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from harness_r1.harness.policies import ScriptedPolicy
from harness_r1.harness.policies.shared import PolicyStopped, SharedPolicy
from harness_r1.models.base import ChatMessage, GenerationRequest


def _echo(messages: Sequence[ChatMessage]) -> str:
    return "echo " + messages[-1]["content"]


def _request(text: str) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": text}])


def _run_callers(shared: SharedPolicy, callers: int, rounds: int) -> dict[int, list[list[str]]]:
    shared.callers(callers)
    answers: dict[int, list[list[str]]] = {}

    def caller(who: int) -> None:
        mine = []
        for r in range(rounds):
            out = shared.generate([_request(f"{who}-{r}-a"), _request(f"{who}-{r}-b")])
            mine.append([g.text for g in out])
        answers[who] = mine
        shared.leave()

    threads = [threading.Thread(target=caller, args=(w,)) for w in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return answers


def test_each_caller_gets_its_own_answers_in_order() -> None:
    inner = ScriptedPolicy(_echo)
    shared = SharedPolicy(inner, window_s=1.0)
    answers = _run_callers(shared, callers=4, rounds=5)
    for who in range(4):
        assert answers[who] == [[f"echo {who}-{r}-a", f"echo {who}-{r}-b"] for r in range(5)]


def test_concurrent_calls_are_batched() -> None:
    inner = ScriptedPolicy(_echo)
    shared = SharedPolicy(inner, window_s=1.0)  # long window: batches close when all arrived
    _run_callers(shared, callers=4, rounds=5)
    # 20 calls of 4 callers: each round's 4 calls become one batch (a caller that is done
    # leaves, so the last ones do not wait out the window)
    assert inner.calls == shared.batches == 5


def test_a_failed_batch_fails_every_caller_in_it() -> None:
    def broken(messages: Sequence[ChatMessage]) -> str:
        raise RuntimeError("backend down")

    shared = SharedPolicy(ScriptedPolicy(broken), window_s=1.0)
    shared.callers(2)
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            shared.generate([_request("x")])
        except RuntimeError as err:
            errors.append(err)

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert [str(e) for e in errors] == ["backend down", "backend down"]
    with pytest.raises(RuntimeError):
        shared.generate([_request("y")])  # and the next call still gets through


def test_a_stop_ends_waiting_and_later_callers_at_once() -> None:
    """A caller waiting for the others of its batch (a long window, 3 callers expected) and a
    caller arriving after the stop both raise PolicyStopped within a fraction of a second."""
    inner = ScriptedPolicy(_echo)
    shared = SharedPolicy(inner, window_s=60.0)
    shared.callers(3)
    outcome: list[str] = []

    def caller() -> None:
        try:
            shared.generate([_request("x")])
            outcome.append("served")
        except PolicyStopped:
            outcome.append("stopped")

    waiting = threading.Thread(target=caller)
    waiting.start()
    time.sleep(0.2)
    started = time.monotonic()
    shared.stop()
    waiting.join(timeout=5)
    assert time.monotonic() - started < 1.0 and outcome == ["stopped"]
    with pytest.raises(PolicyStopped):
        shared.generate([_request("y")])
    assert inner.calls == 0
