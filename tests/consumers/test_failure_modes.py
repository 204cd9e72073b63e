"""Each failed episode gets one failure mode, by the first rule that holds (failure_modes.py)."""

from __future__ import annotations

import pytest

from harness_r1.consumers.failure_modes import count_failure_modes, failure_mode
from harness_r1.contracts import Termination
from tests.consumers.test_packets import DB_INVALID, traj

LIMIT = Termination.STEP_LIMIT


@pytest.mark.parametrize(
    ("env", "moves", "termination", "mode"),
    [
        ("dbbench", [("sql: SELECT 1", "[(1,)]")], Termination.ERROR, "env error"),
        ("dbbench", [('answer: ["2"]', "wrong")], Termination.FAILURE, "wrong answer"),
        (
            "webshop",
            [("click[buy now]", "score 0.5")],
            Termination.FAILURE,
            "wrong item or options",
        ),
        ("alfworld", [("go to desk 1", "ok")], Termination.FAILURE, "wrong end"),
        ("alfworld", [("look", "a room")] * 4, LIMIT, "repeated action or loop"),
        ("alfworld", [("a", "x"), ("b", "y")] * 3, LIMIT, "repeated action or loop"),  # a loop
        ("dbbench", [("junk", DB_INVALID), ("sql: SELECT 1", "[(1,)]")], LIMIT, "invalid actions"),
        (
            "dbbench",
            [
                ("sql: SELEC 1", "Error: near SELEC"),
                ("sql: SELECT 2", "[(2,)]"),
                ("junk", DB_INVALID),
            ],
            LIMIT,
            "SQL errors",
        ),
        ("alfworld", [("go to desk 1", "ok"), ("go to bed 1", "ok")], LIMIT, "budget exhausted"),
    ],
)
def test_each_failure_gets_the_first_mode_that_holds(env, moves, termination, mode):
    assert failure_mode(traj("t", moves, env=env, termination=termination)) == mode


def test_a_success_has_no_mode_and_the_counter_counts_failures_only():
    won = traj(
        "w", [('answer: ["1"]', "ok")], success=True, reward=1.0, termination=Termination.SUCCESS
    )
    lost = traj("l", [('answer: ["2"]', "no")], termination=Termination.FAILURE)
    assert failure_mode(won) is None
    assert count_failure_modes([won, lost, lost]) == {"wrong answer": 2}
