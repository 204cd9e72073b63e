"""Which games make up each split: a challenge, a difficulty and a generation seed per task.

A task is fully described by (challenge, difficulty, seed): TextWorld's generator is
deterministic in its seed, so the same triple always yields the same game, on any machine.
Splits differ only in seeds and difficulty, never in challenge, so a held-out split asks
"does it work on games it never saw" and not "on kinds of games it never saw":

- `train`: seeds 1-10 at the easy settings (for whoever wants to train on this env);
- `test`: seeds 1001-1010 at the easy settings (held-out games of the same difficulty);
- `test_hard`: seeds 1001-1010 at the hard settings (held-out and harder).

Each split holds every challenge once per seed: 4 challenges x 10 seeds = 40 tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec

ENV_NAME = "textworld"
DEFAULT_MAX_STEPS = 25
SEEDS_PER_SPLIT = 10


@dataclass(frozen=True)
class Difficulty:
    """The `tw-make` settings of one challenge at one difficulty (its own option names)."""

    challenge: str
    level: str
    settings: Mapping[str, Any]


#: tw-cooking's flags, all off unless a difficulty turns one on; its recipe seed is the game's
#: generation seed (games.py), its food split TextWorld's joint distribution (split None).
_COOKING_FLAGS: dict[str, Any] = {
    "open": False,
    "cook": False,
    "cut": False,
    "drop": False,
    "split": None,
}

#: `tw-make <challenge> <settings>` per challenge and difficulty. The options are TextWorld's
#: own (`tw-make tw-cooking --help`): coin collector levels 1-100 are a chain of rooms as long
#: as the level, 101-200 add a dead-end room beside each; treasure hunter 1-10 has 5 rooms and
#: no doors, 11-20 has 10 rooms with closed doors and containers; cooking's recipe/take/go
#: count ingredients, items to fetch and rooms; simple's rewards and goal set how much the
#: game tells and rewards.
DIFFICULTIES: dict[tuple[str, str], Difficulty] = {
    (d.challenge, d.level): d
    for d in (
        Difficulty("tw-coin_collector", "easy", {"level": 3}),
        Difficulty("tw-coin_collector", "hard", {"level": 105}),
        Difficulty("tw-treasure_hunter", "easy", {"level": 1}),
        Difficulty("tw-treasure_hunter", "hard", {"level": 11}),
        Difficulty(
            "tw-cooking",
            "easy",
            {"recipe": 1, "take": 1, "go": 1, **_COOKING_FLAGS},
        ),
        Difficulty(
            "tw-cooking",
            "hard",
            {"recipe": 2, "take": 2, "go": 6, **_COOKING_FLAGS, "open": True, "cook": True},
        ),
        Difficulty("tw-simple", "easy", {"rewards": "dense", "goal": "detailed", "test": False}),
        Difficulty("tw-simple", "hard", {"rewards": "sparse", "goal": "brief", "test": True}),
    )
}
CHALLENGES: tuple[str, ...] = (
    "tw-coin_collector",
    "tw-treasure_hunter",
    "tw-cooking",
    "tw-simple",
)

#: split -> (difficulty, first seed)
SPLIT_PLAN: dict[str, tuple[str, int]] = {
    "train": ("easy", 1),
    "test": ("easy", 1001),
    "test_hard": ("hard", 1001),
}
SPLITS: tuple[str, ...] = tuple(SPLIT_PLAN)


def task_type(challenge: str) -> str:
    """`tw-coin_collector` -> `coin_collector`: the task family a packet groups by."""
    return challenge.removeprefix("tw-")


def load_tasks(data_root: Path, split: str) -> list[TaskSpec]:
    """The split's tasks, without generating a game (that happens on the first reset).
    `data_root` is not used: games live in the cache (games.py), never in the data root."""
    del data_root
    if split not in SPLIT_PLAN:
        raise KeyError(f"unknown split {split!r} of env {ENV_NAME}; known: {', '.join(SPLITS)}")
    level, first_seed = SPLIT_PLAN[split]
    tasks = []
    # challenge by challenge: a spread of n tasks over the split meets every challenge
    for challenge in CHALLENGES:
        for seed in range(first_seed, first_seed + SEEDS_PER_SPLIT):
            kind = task_type(challenge)
            tasks.append(
                TaskSpec(
                    env=ENV_NAME,
                    split=split,
                    task_id=f"{kind}/{level}/seed{seed}",
                    task_type=kind,
                    # the game's own objective is shown on reset; this one line names the game
                    instruction=INSTRUCTIONS[kind],
                    max_steps=DEFAULT_MAX_STEPS,
                    payload={"challenge": challenge, "level": level, "seed": seed},
                )
            )
    return tasks


#: What each game asks, in one line (the game's own, longer objective comes with the reset).
INSTRUCTIONS: dict[str, str] = {
    "coin_collector": "Find the coin and take it.",
    "treasure_hunter": "Find the object the game names and take it.",
    "cooking": "Find the recipe, gather and prepare its ingredients, then eat the meal.",
    "simple": "Do what the game's objective asks.",
}


def data_files(data_root: Path) -> dict[str, Sequence[Path]]:
    """Nothing to download: every game is generated from its seed into the cache."""
    del data_root
    return {}
