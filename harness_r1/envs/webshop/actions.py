"""WebShop's action language and page-chrome names, shared by the local env, the HTTP adapter
and the prompter so that all three accept and print exactly the same strings.

Actions are `search[keywords]` and `click[value]`; click values are matched lowercased
(WebShop lowercases the argument and its clickables). The admissible-action list gives one
`search[<your query>]` where a search box exists and `click[x]` for each clickable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

BACK_TO_SEARCH = "back to search"
PREV_PAGE = "< prev"
NEXT_PAGE = "next >"
BUY_NOW = "buy now"
SUB_PAGES = ("description", "features", "reviews")
SEARCH_PLACEHOLDER = "search[<your query>]"

_ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


def parse_action(action: str) -> tuple[str, str] | None:
    """("search", keywords) or ("click", lowercased value); None when not of that form."""
    match = _ACTION_RE.match(action)
    if match is None:
        return None
    kind = match.group(1).lower()
    arg = " ".join(match.group(2).split())
    return (kind, arg.lower()) if kind == "click" else (kind, arg)


def admissible(has_search_bar: bool, clickables: Iterable[str]) -> list[str]:
    out = [SEARCH_PLACEHOLDER] if has_search_bar else []
    out.extend(f"click[{c}]" for c in clickables)
    return out
