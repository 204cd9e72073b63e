"""WebShop's demonstrator: the goal's oracle path on `fixed_train` goals (0-39).

Search with the instruction's own words (its price clause left out), open the goal's product,
choose each option the goal asks for, buy. The words of the search are the instruction's, so
what the model learns is to copy the request, not the catalogue's category names; the product
is the goal's, which a model tells apart from its look-alikes by title and price. A goal whose
product is not on the first page of results gives no demonstration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import INFO_ADMISSIBLE, Env
from harness_r1.envs.webshop.env import WebShopEnv
from harness_r1.envs.webshop.goals import PRICE_CLAUSE_RE

BUY_NOW = "buy now"


def action_reply(action: str) -> str:
    return f"Action:\n{action}"


def _click_targets(admissible: list[str]) -> set[str]:
    """The lowercased targets of the page's `click[...]` actions (WebShop lowercases clicks)."""
    return {
        " ".join(action[len("click[") : -1].lower().split())
        for action in admissible
        if action.startswith("click[") and action.endswith("]")
    }


class _OraclePath:
    def __init__(self, task: TaskSpec) -> None:
        payload = task.payload
        self.query = PRICE_CLAUSE_RE.sub("", task.instruction).strip()
        self.asin = str(payload["asin"]).lower()
        self.options = [" ".join(str(o).lower().split()) for o in payload["goal_options"]]
        self.searched = False
        self.chosen: list[str] = []

    def reply(self, observation: str, info: dict[str, Any]) -> str | None:
        clickables = _click_targets(info.get(INFO_ADMISSIBLE) or [])
        if not self.searched:
            self.searched = True
            return action_reply(f"search[{self.query}]")
        if self.asin in clickables:
            return action_reply(f"click[{self.asin}]")
        if BUY_NOW not in clickables:
            return None  # not on the results' first page, or an unexpected page
        for option in self.options:
            if option not in self.chosen and option in clickables:
                self.chosen.append(option)
                return action_reply(f"click[{option}]")
        return action_reply(f"click[{BUY_NOW}]")


class WebShopExpert:
    training_splits: tuple[str, ...] = ("fixed_train",)

    def make_env(self, data_root: Path) -> Env:
        return WebShopEnv(data_root)

    def episode(self, task: TaskSpec, env: Env) -> _OraclePath:
        return _OraclePath(task)
