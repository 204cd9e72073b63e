"""Runtime signals of an episode, derived from its Trajectory alone (deterministic, no env needed).

Why from text: the Step contract carries no env `info` dict, so a symptom is recognised from the
action and the environment's feedback, the same strings the envs document. The rules:

- repeated action: the step's action equals the previous step's action exactly (the rule the
  runtime's `Counters.repeated_action_streak` uses).
- invalid action, per env (`INVALID_RULES`):
  - alfworld: feedback (stripped) is exactly "Nothing happens." (the engine answers every
    command that is not admissible with it; see envs/alfworld/env.py);
  - dbbench:  feedback starts with "Invalid action" (neither `sql:` nor `answer:`);
  - webshop:  feedback starts with "Invalid action" ("Invalid action '...': why. Nothing
    changed.");
  - any other env: any of the above, or feedback starting with the marker "[invalid]".
- nothing_happens: feedback (stripped) is exactly "Nothing happens." (any env).
- empty SQL result: the action is `sql: <statement>` and the feedback (stripped) is `[]`, unless the
  statement is a modification (INSERT/UPDATE/DELETE/REPLACE/CREATE/DROP/ALTER), which always
  answers `[]` (MySQL's raw response has no result set) and would drown the signal.
- SQL error: feedback starts with "Error" (the DBBench env's `Error: <message>`).
- step-limit hit: the episode's termination is `step_limit`.
- loop: a window of actions with period 2 or 3 (at least two distinct actions in the period)
  repeated at least 3 times in a row; each maximal such window counts once, and scanning resumes
  after it. Constant runs are period 1 and count as repeated actions instead.
- hook fault: every HookFault recorded on a step or at episode start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness_r1.contracts import RuntimeSignals, Step, Termination, Trajectory

NOTHING_HAPPENS = "Nothing happens."
INVALID_PREFIX = "Invalid action"
INVALID_MARKER = "[invalid]"
SQL_ERROR_PREFIX = "Error"
EMPTY_SQL_RESULT = "[]"
MODIFYING_SQL = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER"})
LOOP_PERIODS = (2, 3)
LOOP_MIN_REPEATS = 3

# Flag names, in the order they are listed on a snippet.
REPEATED = "repeated"
INVALID = "invalid"
NOTHING = "nothing_happens"
EMPTY_SQL = "empty_sql_result"
SQL_ERROR = "sql_error"
HOOK_FAULT = "hook_fault"


def _nothing_happens(feedback: str) -> bool:
    return feedback.strip() == NOTHING_HAPPENS


def _invalid_prefix(feedback: str) -> bool:
    return feedback.lstrip().startswith(INVALID_PREFIX)


def _any_invalid(feedback: str) -> bool:
    text = feedback.lstrip()
    return _nothing_happens(text) or _invalid_prefix(text) or text.startswith(INVALID_MARKER)


INVALID_RULES: dict[str, Callable[[str], bool]] = {
    "alfworld": _nothing_happens,
    "dbbench": _invalid_prefix,
    "webshop": _invalid_prefix,
}


def is_invalid(env: str, feedback: str) -> bool:
    """The per-env invalid-action rule (see the module docstring)."""
    return INVALID_RULES.get(env, _any_invalid)(feedback)


def sql_statement(action: str) -> str | None:
    """`sql: SELECT 1` -> `SELECT 1`; None when the action is not an `sql:` action."""
    head, sep, rest = action.strip().partition(":")
    if not sep or head.strip().lower() != "sql":
        return None
    return rest.strip()


def is_empty_sql_result(action: str, feedback: str) -> bool:
    statement = sql_statement(action)
    if statement is None or feedback.strip() != EMPTY_SQL_RESULT:
        return False
    words = statement.split(None, 1)
    return not words or words[0].upper() not in MODIFYING_SQL


def is_sql_error(feedback: str) -> bool:
    return feedback.startswith(SQL_ERROR_PREFIX)


def step_flags(env: str, step: Step, previous_action: str | None) -> list[str]:
    """The symptoms of one step, as the flag names a Snippet carries."""
    flags = []
    if previous_action is not None and step.action == previous_action:
        flags.append(REPEATED)
    if is_invalid(env, step.feedback):
        flags.append(INVALID)
    if _nothing_happens(step.feedback):
        flags.append(NOTHING)
    if is_empty_sql_result(step.action, step.feedback):
        flags.append(EMPTY_SQL)
    if is_sql_error(step.feedback):
        flags.append(SQL_ERROR)
    if step.faults:
        flags.append(HOOK_FAULT)
    return flags


def episode_flags(trajectory: Trajectory) -> list[list[str]]:
    """Flags of every step of an episode, in step order."""
    out: list[list[str]] = []
    previous: str | None = None
    for step in trajectory.steps:
        out.append(step_flags(trajectory.env, step, previous))
        previous = step.action
    return out


def count_loops(actions: Sequence[str]) -> int:
    """Maximal windows where a period-2 or period-3 action cycle repeats >= 3 times."""
    loops = 0
    i = 0
    n = len(actions)
    while i < n:
        span = 0
        for period in LOOP_PERIODS:
            if len(set(actions[i : i + period])) < 2:
                continue
            run = 0
            while i + run + period < n and actions[i + run] == actions[i + run + period]:
                run += 1
            if run + period >= LOOP_MIN_REPEATS * period:
                span = run + period
                break
        if span:
            loops += 1
            i += span
        else:
            i += 1
    return loops


@dataclass(frozen=True)
class FailurePoint:
    """Where an episode went wrong: `step` is None for an episode without steps."""

    step: int | None
    streak: int


def failure_point(flags: Sequence[Sequence[str]]) -> FailurePoint:
    """First step of the longest streak of repeated/invalid steps (earliest on ties), else the
    last step with streak 0."""
    best_start, best_len = -1, 0
    start, length = 0, 0
    for index, step_flags_ in enumerate(flags):
        if REPEATED in step_flags_ or INVALID in step_flags_:
            if length == 0:
                start = index
            length += 1
            if length > best_len:
                best_start, best_len = start, length
        else:
            length = 0
    if best_len:
        return FailurePoint(best_start, best_len)
    return FailurePoint(len(flags) - 1 if flags else None, 0)


def count_signals(trajectories: Sequence[Trajectory]) -> RuntimeSignals:
    """Every signal, summed over the given episodes (the rules are in the module docstring)."""
    totals = dict.fromkeys(RuntimeSignals.model_fields, 0)
    for trajectory in trajectories:
        for flags in episode_flags(trajectory):
            totals["repeated_actions"] += REPEATED in flags
            totals["invalid_actions"] += INVALID in flags
            totals["nothing_happens"] += NOTHING in flags
            totals["empty_sql_results"] += EMPTY_SQL in flags
            totals["sql_errors"] += SQL_ERROR in flags
        totals["step_limit_hits"] += trajectory.outcome.termination == Termination.STEP_LIMIT
        totals["loops"] += count_loops([step.action for step in trajectory.steps])
        totals["hook_faults"] += len(trajectory.episode_start_faults) + sum(
            len(step.faults) for step in trajectory.steps
        )
    return RuntimeSignals(**totals)
