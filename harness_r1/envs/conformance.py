"""check_env: the contract every environment must pass (Gymnasium's check_env, for text envs).

`check_suite` adds what a whole suite owes (declared splits, loadable tasks with unique ids):
what `harness-r1 env check NAME` runs on a built-in env or a plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import (
    INFO_ADMISSIBLE,
    INFO_SUCCESS,
    Env,
    EnvError,
    EnvSuite,
    StepResult,
)


class ConformanceError(AssertionError):
    pass


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


def _check_info(info: Any, where: str) -> None:
    _require(isinstance(info, dict), f"{where}: info must be a dict, got {type(info).__name__}")
    admissible = info.get(INFO_ADMISSIBLE)
    _require(
        admissible is None
        or (isinstance(admissible, list) and all(isinstance(a, str) for a in admissible)),
        f"{where}: info[{INFO_ADMISSIBLE!r}] must be None or a list of str",
    )


def _check_step(result: Any, where: str) -> StepResult:
    _require(isinstance(result, StepResult), f"{where}: step must return StepResult")
    _require(isinstance(result.observation, str), f"{where}: observation must be str")
    _require(isinstance(result.reward, float | int), f"{where}: reward must be a number")
    _require(isinstance(result.terminated, bool), f"{where}: terminated must be bool")
    _require(isinstance(result.truncated, bool), f"{where}: truncated must be bool")
    _check_info(result.info, where)
    if result.terminated:
        _require(
            isinstance(result.info.get(INFO_SUCCESS), bool), f"{where}: terminal info needs success"
        )
    return result


def check_env(env: Env, task: TaskSpec, *, junk_action: str = "xyzzy plugh", seed: int = 0) -> None:
    """Reset twice with one seed (same observation), play a junk action (no crash, not a win),
    and check the types of everything returned. Raises ConformanceError on the first breach."""
    _require(isinstance(env.name, str) and env.name == task.env, "env.name must match task.env")
    obs1, info1 = env.reset(task, seed=seed)
    _require(isinstance(obs1, str) and obs1.strip() != "", "reset must return a non-empty str")
    _check_info(info1, "reset")
    obs2, _ = env.reset(task, seed=seed)
    _require(obs1 == obs2, "reset with the same task and seed must give the same observation")
    result = _check_step(env.step(junk_action), "step(junk)")
    _require(
        not (result.terminated and result.info.get(INFO_SUCCESS)),
        "a junk action must not solve the task",
    )
    if result.terminated:
        try:
            env.step(junk_action)
        except EnvError:
            pass
        else:
            raise ConformanceError("stepping after termination must raise EnvError")


def check_suite(
    suite: EnvSuite, data_root: Path, split: str | None = None, seed: int = 0
) -> list[str]:
    """An env suite's contract, as `harness-r1 env check` runs it: declared splits, each
    split's tasks loadable, of this env and with unique ids, then `check_env` on the first
    task. Returns what was checked, a line each; raises ConformanceError on the first breach
    (DataError where the data is missing)."""
    _require(isinstance(suite.name, str) and suite.name != "", "the suite needs a name")
    _require(len(suite.splits) > 0, "the suite declares no split")
    _require(split is None or split in suite.splits, f"split {split!r} is none of {suite.splits}")
    checked = []
    splits = list(suite.splits) if split is None else [split]
    for name in splits:
        tasks = suite.load_tasks(data_root, name)
        _require(len(tasks) > 0, f"split {name!r} holds no task")
        ids = [task.task_id for task in tasks]
        _require(len(set(ids)) == len(ids), f"split {name!r} repeats task ids")
        _require(
            all(t.env == suite.name for t in tasks), f"split {name!r} holds another env's task"
        )
        checked.append(f"split {name}: {len(tasks)} tasks, ids unique")
    first = suite.load_tasks(data_root, splits[0])[0]
    check_env(suite.make_env(data_root), first, seed=seed)
    checked.append(
        f"{splits[0]}/{first.task_id}: seeded reset repeats, a junk step is typed and no win"
    )
    return checked
