"""The ALFWorld task catalogue: one TaskSpec per game file, read cheaply from the data root.

Layout: ``<data_root>/alfworld/<split>/<task-type>-<object>-<...>-<scene>/<trial>/game.tw-pddl``.

Why no TextWorld here: the daemon lists whole splits (900 train games) to draw batches, and
building a game's PDDL state costs ~0.8 s. A game file is plain JSON (PDDL domain and problem,
grammar, walkthrough), and the goal sentence is a literal rule of its grammar
(``"task": [{"rhs": "Your task is to: ..."}]``, the text the game prints after the room), so one
``json.loads`` plus one regex give everything a TaskSpec needs. Parsed games are memoised per
file, keyed by (mtime_ns, size): measured on this machine, a cold listing of the 900 train games
(~83 MB of JSON) takes ~0.3 s and a repeated listing only stats the files (~20 ms).

Games that ALFWorld's own evaluation leaves out are skipped here too: paths containing
'movable' or 'Sliced', and files marked ``"solvable": false``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.data import DataError

ENV_NAME = "alfworld"
#: Directory under the data root that holds the ALFWorld splits.
DATA_SUBDIR = "alfworld"
GAME_FILE = "game.tw-pddl"
#: The splits of the shared benchmark copy; `load_tasks` also reads any other split directory
#: that exists (e.g. `valid_unseen` after `harness-r1 data fetch alfworld`).
SPLITS: tuple[str, ...] = ("valid_seen", "valid_train", "train")
#: AgentBench's step budget for ALFWorld (configs/tasks/alfworld.yaml: max_step 35).
DEFAULT_MAX_STEPS = 35
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
GOAL_PREFIX = "Your task is to: "

_SPLIT_NAME = re.compile(r"^[a-z0-9_]+$")
_TASK_RULE = re.compile(r'"task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*"(?P<rhs>(?:[^"\\]|\\.)*)"')
_SKIPPED_BY_ALFWORLD = ("movable", "Sliced")


@dataclass(frozen=True)
class GameRecord:
    """What the catalogue needs from one game file."""

    instruction: str
    walkthrough: tuple[str, ...]
    solvable: bool


_cache: dict[str, tuple[int, int, GameRecord]] = {}
_cache_lock = threading.Lock()


def split_dir(data_root: Path, split: str) -> Path:
    if not _SPLIT_NAME.match(split):
        raise DataError(Path(data_root) / DATA_SUBDIR / split, "not a valid split name")
    return Path(data_root) / DATA_SUBDIR / split


def task_type_of(game_dir: str) -> str:
    """`pick_heat_then_place_in_recep-Egg-None-DiningTable-4` -> `pick_heat_then_place_in_recep`."""
    return game_dir.split("-", 1)[0]


def goal_from_grammar(path: Path, grammar: str) -> str:
    """The goal of a game: the grammar's `task` rule, without its "Your task is to: " prefix."""
    match = _TASK_RULE.search(grammar)
    if match is None:
        raise DataError(path, "the grammar has no `task` rule (the goal sentence)")
    try:
        sentence = json.loads(f'"{match.group("rhs")}"')
    except json.JSONDecodeError as err:
        problem = f"the grammar's `task` rule is not a valid string: {err.msg}"
        raise DataError(path, problem) from err
    if not sentence.startswith(GOAL_PREFIX) or not sentence[len(GOAL_PREFIX) :].strip():
        raise DataError(path, f"the grammar's `task` rule is not a goal sentence: {sentence!r}")
    return str(sentence[len(GOAL_PREFIX) :].strip())


def parse_game(path: Path, data: Any) -> GameRecord:
    """Check the fields TextWorld needs and extract the catalogue's; DataError names the file."""
    if not isinstance(data, dict):
        raise DataError(path, f"expected a JSON object, got {type(data).__name__}")
    for key in ("pddl_domain", "pddl_problem", "grammar"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise DataError(path, f"field {key!r} is missing or not a non-empty string")
    walkthrough = data.get("walkthrough", [])
    if not isinstance(walkthrough, list) or not all(isinstance(a, str) for a in walkthrough):
        raise DataError(path, "field 'walkthrough' must be a list of strings")
    solvable = data.get("solvable", True)
    if not isinstance(solvable, bool):
        raise DataError(path, "field 'solvable' must be a boolean")
    return GameRecord(goal_from_grammar(path, data["grammar"]), tuple(walkthrough), solvable)


def read_game(path: Path) -> GameRecord:
    """Parse one game file, memoised on (mtime_ns, size) so repeated listings are stat-only."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        problem = "game file is missing (run `harness-r1 data fetch alfworld`)"
        raise DataError(path, problem) from None
    key = str(path)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == stat.st_mtime_ns and hit[1] == stat.st_size:
        return hit[2]
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as err:
        raise DataError(path, f"not UTF-8 text: {err.reason}") from err
    except json.JSONDecodeError as err:
        raise DataError(path, f"not valid JSON: {err.msg} at line {err.lineno}") from err
    record = parse_game(path, data)
    with _cache_lock:
        _cache[key] = (stat.st_mtime_ns, stat.st_size, record)
    return record


def _subdirs(path: Path) -> list[os.DirEntry[str]]:
    with os.scandir(path) as entries:
        return sorted(
            (e for e in entries if e.is_dir() and not e.name.startswith(".")), key=lambda e: e.name
        )


def load_tasks(data_root: Path, split: str) -> list[TaskSpec]:
    """Every playable game of a split, in sorted (game dir, trial dir) order."""
    root = split_dir(data_root, split)
    if not root.is_dir():
        raise DataError(root, "split directory is missing (run `harness-r1 data fetch alfworld`)")
    tasks: list[TaskSpec] = []
    for game in _subdirs(root):
        task_type = task_type_of(game.name)
        if any(marker in game.name for marker in _SKIPPED_BY_ALFWORLD):
            continue
        if task_type not in TASK_TYPES:
            problem = f"unknown task type {task_type!r} in the directory name"
            raise DataError(Path(game.path), problem)
        for trial in _subdirs(Path(game.path)):
            game_file = Path(trial.path) / GAME_FILE
            record = read_game(game_file)
            if not record.solvable:
                continue
            tasks.append(
                TaskSpec(
                    env=ENV_NAME,
                    split=split,
                    task_id=f"{game.name}/{trial.name}",
                    task_type=task_type,
                    instruction=record.instruction,
                    max_steps=DEFAULT_MAX_STEPS,
                    payload={
                        "game_file": f"{DATA_SUBDIR}/{split}/{game.name}/{trial.name}/{GAME_FILE}",
                        "walkthrough": list(record.walkthrough),
                    },
                )
            )
    return tasks


def data_files(data_root: Path) -> dict[str, Sequence[Path]]:
    """Per split, the split directory (relative to the data root) that must exist.

    A directory rather than its ~1,000 game files: `load_tasks` checks each game when it lists
    the split and names any missing or malformed file.
    """
    return {split: [Path(DATA_SUBDIR) / split] for split in SPLITS}


def game_path(data_root: Path, task: TaskSpec) -> Path:
    """The game file of a task: `payload.game_file`, which must stay inside the data root."""
    relative = task.payload.get("game_file")
    root = Path(data_root)
    if not isinstance(relative, str) or not relative:
        raise DataError(root, f"task {task.task_id!r} has no payload.game_file")
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise DataError(root / relative, "payload.game_file points outside the data root")
    return path
