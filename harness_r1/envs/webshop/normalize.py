"""String normalisation shared by the WebShop reward and the catalogue reconstruction.

Why a module of its own: the reward must compare strings exactly as WebShop does, and the
catalogue builder must use the *same* comparisons to keep distractor options from
accidentally matching a goal. Keeping both on one implementation makes that guarantee hold.

- `COLOR_SET` / `normalize_color`: WebShop's web_agent_site/engine/normalize.py, verbatim in
  behaviour (first colour word found as a substring wins; otherwise the string is returned).
- `token_set_ratio`: thefuzz's `fuzz.token_set_ratio` (what WebShop calls) on top of rapidfuzz:
  thefuzz preprocesses with `full_process` (drop Latin-1 high characters, lowercase, non
  alphanumerics to spaces, trim) and rounds the score to an int before WebShop's `> 85` test.
"""

from __future__ import annotations

import re

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana",
    "beige", "black", "blue", "blush", "bordeaux", "bronze", "brown",
    "burgundy", "camel", "camo", "caramel", "champagne", "charcoal",
    "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac",
    "copper", "coral", "cranberry", "cream", "crystal", "dark", "denim",
    "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite",
    "grape", "graphite", "grass", "gray", "green", "grey", "heather",
    "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard",
    "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot",
    "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard",
    "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink",
    "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand",
    "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise",
    "violet", "walnut", "wheat", "white", "wine", "yellow",
)  # fmt: skip

_LATIN1_HIGH = {code: None for code in range(128, 256)}
_WORD_RE = re.compile(r"[a-z0-9]+")


def normalize_color(color_string: str) -> str:
    """WebShop's normalize_color: the first COLOR_SET entry contained in the string, else it."""
    for norm_color in COLOR_SET:
        if norm_color in color_string:
            return norm_color
    return color_string


def full_process(text: str) -> str:
    """thefuzz's `utils.full_process(s, force_ascii=True)`."""
    return str(default_process(text.translate(_LATIN1_HIGH)))


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's `fuzz.token_set_ratio` (0..100, an int); 0 when either side is empty."""
    left, right = full_process(a), full_process(b)
    if not left or not right:
        return 0
    return int(round(fuzz.token_set_ratio(left, right)))


def ratio(a: str, b: str) -> int:
    """thefuzz's `fuzz.ratio` on processed strings (used to compare single words)."""
    left, right = full_process(a), full_process(b)
    if not left or not right:
        return 0
    return int(round(fuzz.ratio(left, right)))


def word_set(text: str) -> frozenset[str]:
    """The whitespace-separated words of a literal word list."""
    return frozenset(text.split())


def words(text: str) -> list[str]:
    """Lowercase alphanumeric words (the tokenisation used by search and attribute rules)."""
    return _WORD_RE.findall(text.lower())
