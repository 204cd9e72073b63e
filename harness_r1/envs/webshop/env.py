"""The local WebShop environment: WebShop's page flow and text observations over the
reconstructed catalogue, with WebShop's reward on `click[buy now]`.

Why a local engine: WebShop's server needs its 1.2M-product file, a Lucene index and Java;
none are available here, and the canary needs fast, deterministic, side-effect-free episodes.
The page flow follows web_agent_site (SimServer.receive in envs/web_agent_text_env.py):

    search page --search[kw]--> results (10 a page; next > / < prev / back to search)
      --click[asin]--> item page (options by group; description / features / reviews;
      < prev back to the results) --click[buy now]--> done (reward, episode over)

Observations use WebShop's simple text mode: the page's visible strings joined by " [SEP] ".
Selecting an option does not change the simple-mode text (as in WebShop); the selection is
reported in info["selected_options"]. A search is only possible where a search box exists
(the search page). Invalid actions change nothing, say why, and set info["invalid_action"].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_r1.contracts import TaskSpec
from harness_r1.envs.base import INFO_ADMISSIBLE, INFO_INVALID, INFO_SUCCESS, EnvError, StepResult
from harness_r1.envs.webshop.actions import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    SUB_PAGES,
    admissible,
    parse_action,
)
from harness_r1.envs.webshop.catalogue import Catalogue, load_catalogue
from harness_r1.envs.webshop.model import Goal, Product
from harness_r1.envs.webshop.nouns import NounFn
from harness_r1.envs.webshop.reward import RewardBreakdown, get_reward
from harness_r1.envs.webshop.search import PRODUCT_WINDOW, page_of

ENV_NAME = "webshop"
SEP = " [SEP] "

SEARCH, RESULTS, ITEM, SUB_PAGE, DONE = "search", "results", "item", "item_sub_page", "done"


@dataclass
class _Session:
    goal: Goal
    page: str = SEARCH
    keywords: str = ""
    results: list[str] = field(default_factory=list)
    result_page: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str | None = None
    reward: RewardBreakdown | None = None


def _norm(value: str) -> str:
    return " ".join(value.lower().split())


class WebShopEnv:
    """One WebShop episode at a time over a catalogue (see the module docstring)."""

    name = ENV_NAME

    def __init__(
        self,
        data_root: Path | None = None,
        *,
        catalogue: Catalogue | None = None,
        nouns: NounFn | None = None,
    ) -> None:
        if catalogue is None:
            if data_root is None:
                raise ValueError("WebShopEnv needs a data_root or a catalogue")
            catalogue = load_catalogue(data_root)
        self.catalogue = catalogue
        self._nouns = nouns
        self._session: _Session | None = None
        self._done = False

    # -- protocol --------------------------------------------------------------------------

    def reset(self, task: TaskSpec, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start the goal `task.task_id` (e.g. fixed_3) on the search page; `seed` is unused
        because the catalogue, search and reward are deterministic."""
        goal = self.catalogue.by_session.get(task.task_id)
        if goal is None:
            raise EnvError(f"unknown WebShop task {task.task_id!r} (expected fixed_<n>)")
        self._session = _Session(goal=goal)
        self._done = False
        observation, clickables, search_bar = self._render()
        return observation, self._info(clickables, search_bar)

    def step(self, action: str) -> StepResult:
        session = self._session
        if session is None:
            raise EnvError("step() before reset()")
        if self._done:
            raise EnvError("the episode is over (bought); call reset()")
        _, clickables, search_bar = self._render()
        parsed = parse_action(action)
        if parsed is None:
            return self._invalid(action, "actions are search[keywords] or click[value]")
        kind, arg = parsed
        if kind == "search":
            if not search_bar:
                return self._invalid(
                    action, f"there is no search box on this page; use click[{BACK_TO_SEARCH}]"
                )
            if not arg.strip():
                return self._invalid(action, "search keywords are empty")
            self._search(session, arg)
            return self._result()
        if arg not in {_norm(c) for c in clickables}:
            return self._invalid(action, f"{arg!r} is not a clickable of this page")
        return self._click(session, arg)

    def close(self) -> None:
        self._session = None

    # -- transitions -------------------------------------------------------------------------

    def _search(self, session: _Session, keywords: str) -> None:
        # WebShop lowercases and splits the query; the Lucene query is the words joined again
        session.keywords = " ".join(keywords.lower().split())
        session.results = self.catalogue.index.search(session.keywords)
        session.result_page = 1
        self._show_results(session)

    def _show_results(self, session: _Session) -> None:
        session.page = RESULTS
        session.asin = None
        session.options = {}  # WebShop's search_results resets the chosen options
        session.sub_page = None

    def _click(self, session: _Session, arg: str) -> StepResult:
        if arg == BACK_TO_SEARCH:
            self._session = _Session(goal=session.goal)
        elif session.page == RESULTS and arg == NEXT_PAGE:
            session.result_page += 1
        elif session.page == RESULTS and arg == PREV_PAGE:
            session.result_page -= 1
        elif session.page == RESULTS:
            session.page = ITEM
            session.asin = arg.upper()
            session.options = {}
        elif session.page == ITEM and arg == PREV_PAGE:
            self._show_results(session)
        elif session.page == ITEM and arg in SUB_PAGES:
            session.page = SUB_PAGE
            session.sub_page = arg
        elif session.page == ITEM and arg == BUY_NOW:
            return self._buy(session)
        elif session.page == ITEM:
            product = self._product(session)
            group = next(g for g, values in product.options if arg in {_norm(v) for v in values})
            value = next(v for v in product.option_groups()[group] if _norm(v) == arg)
            session.options[group] = value
        elif session.page == SUB_PAGE and arg == PREV_PAGE:
            session.page = ITEM
            session.sub_page = None
        return self._result()

    def _buy(self, session: _Session) -> StepResult:
        product = self._product(session)
        breakdown = get_reward(
            product, session.goal, price=product.price, options=session.options, nouns=self._nouns
        )
        session.reward = breakdown
        session.page = DONE
        self._done = True
        observation, _, _ = self._render()
        info = self._info([], False, success=breakdown.success)
        info["reward_info"] = breakdown.as_info()
        info["purchased"] = {"asin": product.asin, "options": dict(session.options)}
        return StepResult(observation, float(breakdown.reward), True, False, info)

    # -- rendering ---------------------------------------------------------------------------

    def _product(self, session: _Session) -> Product:
        assert session.asin is not None
        return self.catalogue.product(session.asin)

    def _render(self) -> tuple[str, list[str], bool]:
        """(observation, clickables, has_search_bar) of the current page."""
        session = self._session
        assert session is not None
        instruction = session.goal.instruction
        if session.page == SEARCH:
            return SEP.join(["WebShop", "Instruction:", instruction, "Search"]), [], True
        header = ["Instruction:", instruction, "Back to Search"]
        clickables = [BACK_TO_SEARCH]
        if session.page == RESULTS:
            total = len(session.results)
            texts = [*header, f"Page {session.result_page} (Total results: {total})"]
            if session.result_page > 1:
                texts.append("< Prev")
                clickables.append(PREV_PAGE)
            if session.result_page * PRODUCT_WINDOW < total:
                texts.append("Next >")
                clickables.append(NEXT_PAGE)
            for asin in page_of(session.results, session.result_page):
                product = self.catalogue.product(asin)
                texts.extend([product.asin, product.title, product.price_tag])
                clickables.append(product.asin.lower())
            return SEP.join(texts), clickables, False
        if session.page == DONE:
            assert session.reward is not None
            texts = ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)"]
            return SEP.join([*texts, str(session.reward.reward)]), [], False
        product = self._product(session)
        texts = [*header, "< Prev"]
        clickables.append(PREV_PAGE)
        if session.page == SUB_PAGE:
            texts.extend(self._sub_page_texts(product, session.sub_page or ""))
            return SEP.join(texts), clickables, False
        for group, values in product.options:
            texts.append(group)
            texts.extend(values)
            clickables.extend(values)
        texts.extend(
            [product.title, f"Price: {product.price_tag}", "Rating: N.A.",
             "Description", "Features", "Reviews", "Buy Now"]
        )  # fmt: skip
        clickables.extend([*SUB_PAGES, BUY_NOW])
        return SEP.join(texts), clickables, False

    @staticmethod
    def _sub_page_texts(product: Product, sub_page: str) -> list[str]:
        if sub_page == "description":
            return [product.description or "No Description"]
        if sub_page == "features":
            return list(product.bullet_points) or ["No Features"]
        return ["No Reviews"]

    def _info(self, clickables: list[str], search_bar: bool, **extra: Any) -> dict[str, Any]:
        session = self._session
        assert session is not None
        info: dict[str, Any] = {
            INFO_ADMISSIBLE: admissible(search_bar, clickables),
            INFO_SUCCESS: False,
            INFO_INVALID: False,
            "page": session.page,
            "asin": session.asin,
            "selected_options": dict(session.options),
        }
        info.update(extra)
        return info

    def _result(self) -> StepResult:
        observation, clickables, search_bar = self._render()
        return StepResult(observation, 0.0, False, False, self._info(clickables, search_bar))

    def _invalid(self, action: str, reason: str) -> StepResult:
        observation, clickables, search_bar = self._render()
        text = f"Invalid action {action!r}: {reason}. Nothing changed.\n{observation}"
        info = self._info(clickables, search_bar)
        info[INFO_INVALID] = True
        return StepResult(text, 0.0, False, False, info)
