"""What an agent's failures look like: each failed episode's main failure mode, from the same
signals its failure packet counts (signals.py), so the table of an agent's failure modes and
the packets the engineer reads agree.

One mode per failed episode, the first rule that holds:
1. `env error`: the episode ended in an environment error.
2. `wrong answer` (DBBench) / `wrong item or options` (WebShop) / `wrong end` (other envs): the
   agent ended the task itself and lost (its last action decided it).
3. `repeated action or loop`: the step limit was hit with at least 3 repeated actions or a loop.
4. `invalid actions`: the step limit was hit with at least half of the steps invalid.
5. `SQL errors`: the step limit was hit after at least one SQL error.
6. `budget exhausted`: the step limit was hit otherwise (valid, varied actions, no end).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from harness_r1.consumers.signals import count_signals
from harness_r1.contracts import Termination, Trajectory

ENV_ERROR = "env error"
REPEATED = "repeated action or loop"
INVALID = "invalid actions"
SQL_ERRORS = "SQL errors"
BUDGET = "budget exhausted"
WRONG_END = {"dbbench": "wrong answer", "webshop": "wrong item or options"}
MODES = (ENV_ERROR, *WRONG_END.values(), "wrong end", REPEATED, INVALID, SQL_ERRORS, BUDGET)
REPEATS_FOR_LOOP = 3


def failure_mode(trajectory: Trajectory) -> str | None:
    """The episode's failure mode (module docstring), None for a success."""
    if trajectory.outcome.success:
        return None
    termination = trajectory.outcome.termination
    if termination == Termination.ERROR:
        return ENV_ERROR
    if termination == Termination.FAILURE:
        return WRONG_END.get(trajectory.env, "wrong end")
    signals = count_signals([trajectory])
    if signals.repeated_actions >= REPEATS_FOR_LOOP or signals.loops:
        return REPEATED
    if 2 * signals.invalid_actions >= max(1, len(trajectory.steps)):
        return INVALID
    if signals.sql_errors:
        return SQL_ERRORS
    return BUDGET


def count_failure_modes(trajectories: Iterable[Trajectory]) -> Counter[str]:
    """Failed episodes per mode."""
    return Counter(m for t in trajectories if (m := failure_mode(t)) is not None)
