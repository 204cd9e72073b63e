"""WebShop (Yao et al. 2022): find and buy the product an instruction describes.

Why two engines: `WebShopEnv` (env.py) plays WebShop's page flow and reward over a catalogue
reconstructed from the 60 fixed goals (the real product file is not available; see
catalogue.py for exactly what is reconstructed and how); `WebShopHttpEnv` (http.py) plays the
same protocol against a real WebShop server (the official web_agent_site Flask app).

Tasks: split `fixed`, task_id `fixed_<n>` (WebShop's session ids for its fixed goals),
task_type = the goal's category query, instruction = the task text without "[Search]".
Splits `fixed_train` (goals 0-39) and `fixed_heldout` (goals 40-59) cut the same 60 goals in
two, so an engineer can be trained on some and measured on the others (issue 20): no goal is
in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import EnvSuite
from harness_r1.envs.data import DataError
from harness_r1.envs.webshop.catalogue import Catalogue, build_catalogue, load_catalogue
from harness_r1.envs.webshop.env import ENV_NAME, WebShopEnv
from harness_r1.envs.webshop.expert import WebShopExpert
from harness_r1.envs.webshop.goals import GOALS_FILE, load_goal_records
from harness_r1.envs.webshop.model import Goal, Product
from harness_r1.envs.webshop.prompter import WebShopPrompter
from harness_r1.envs.webshop.reward import RewardBreakdown, get_reward

SPLITS: tuple[str, ...] = ("fixed", "fixed_train", "fixed_heldout")
DEFAULT_MAX_STEPS = 15
#: the goals (session order) of each split: the first 40 train, the last 20 held out
_GOALS: dict[str, slice] = {
    "fixed": slice(None),
    "fixed_train": slice(0, 40),
    "fixed_heldout": slice(40, None),
}


def load_tasks(data_root: Path, split: str) -> list[TaskSpec]:
    """The tasks of `split` in session order; DataError for a missing or malformed file."""
    if split not in SPLITS:
        known = ", ".join(SPLITS)
        raise DataError(data_root / GOALS_FILE, f"unknown WebShop split {split!r}; known: {known}")
    records = load_goal_records(data_root)[_GOALS[split]]
    return [
        TaskSpec(
            env=ENV_NAME,
            split=split,
            task_id=record.session_idx,
            task_type=record.query,
            instruction=record.instruction,
            max_steps=DEFAULT_MAX_STEPS,
            payload={
                "session_idx": record.session_idx,
                "asin": record.asin,
                "query": record.query,
                "name": record.name,
                "goal_options": list(record.goal_options),
                "price_upper": record.price_upper,
            },
        )
        for record in records
    ]


def make_env(data_root: Path) -> WebShopEnv:
    return WebShopEnv(data_root)


def data_files(data_root: Path) -> dict[str, Sequence[Path]]:
    return {split: [data_root / GOALS_FILE] for split in SPLITS}


SUITE = EnvSuite(
    name=ENV_NAME,
    splits=SPLITS,
    default_max_steps=DEFAULT_MAX_STEPS,
    make_env=make_env,
    load_tasks=load_tasks,
    prompter=WebShopPrompter(),
    data_files=data_files,
    expert=WebShopExpert(),
)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "SPLITS",
    "SUITE",
    "Catalogue",
    "Goal",
    "Product",
    "RewardBreakdown",
    "WebShopEnv",
    "WebShopPrompter",
    "build_catalogue",
    "get_reward",
    "load_catalogue",
    "load_tasks",
]
