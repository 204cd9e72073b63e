"""A WebShop catalogue reconstructed from the 60 fixed goals (the real one is not available).

Why reconstruct: WebShop's product file (items_shuffle.json, ~1.2M products) is not here, but
each fixed goal names its target product (asin, full name, category query, required options).
This module builds, deterministically and without randomness, a small catalogue that keeps
WebShop's task structure: search, compare similar items, pick options, mind the price.

Honest summary: the catalogue is reconstructed from the goals' target products plus
distractors drawn from other goals; it is NOT WebShop's product data.

Per goal (rules, in order):
1. Target product: asin, title = key.name, query (category) = key.query, no breadcrumb.
2. Price: a hash of the asin picks a value in [0.55, 0.95) x the goal's bound (always under
   it); a goal without a bound gets 20..200 dollars.
3. Option groups: each goal option gets its own group, named by simple rules: it contains a
   WebShop colour word -> "color"; it has a digit or a size word -> "size"; else "style"; a
   name already taken falls back to the next free one of style / pattern name / flavor name /
   item package quantity. Each group also offers 2 distractor values: other goals' options of
   the same kind first (ranked by a hash), skipping any that would score as the goal's option
   under WebShop's option reward (fuzzy > 85 after normalize_color, or a substring of the
   title / features). Values are shuffled by a hash. Goals without options get no groups.
4. Attributes (the goal's and the target's, the same list): the instruction without its price
   clause is cut at punctuation and connective words (and, with, that, which, for, ...),
   occurrences of the goal's option values are removed, filler words are trimmed from the
   chunk edges; a chunk is kept when one of its content words fuzzy-matches (ratio >= 85) a
   word of the target name. If none does, the chunk closest to the name (partial ratio) is
   kept, so every goal has at least one attribute (WebShop skips attribute-less goals).
5. Near-duplicates of the target (same title, attributes, query), so that a search returns
   look-alikes: "over_price" (price 1.05..1.35 x the bound) when the goal has a bound, and
   "wrong_options" (each group offers only distractor values) when the goal has options.
Features page = the attribute phrases; description = the title; no reviews.
All other goals' products are the distractors of a goal.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from rapidfuzz import fuzz

from harness_r1.envs.webshop.goals import GOALS_FILE, GoalRecord, load_goal_records
from harness_r1.envs.webshop.model import NO_PRICE_BOUND, Goal, Product
from harness_r1.envs.webshop.normalize import (
    COLOR_SET,
    full_process,
    normalize_color,
    ratio,
    token_set_ratio,
    word_set,
    words,
)
from harness_r1.envs.webshop.search import SearchIndex

DISTRACTORS_PER_GROUP = 2

#: Words of the page chrome that option values must never shadow.
RESERVED_CLICKS = frozenset(
    {"back to search", "< prev", "next >", "description", "features", "reviews", "buy now",
     "search", "attributes"}
)  # fmt: skip

#: Split points inside an instruction (a chunk never spans one).
CONNECTIVES = word_set(
    "and or with that that's which who whose is are was it it's its also but so for in while"
)

#: Words trimmed from the edges of a chunk; a chunk of only these is dropped.
FILLER_WORDS = word_set(
    """
    i i'm im am me my we you your she he her his they them a an the this these those some any
    one searching search need needs want wants wanted would like find get buy
    locate trying try choose pick prefer should could can will be have has had come comes go
    please something also too only not just to of on at by from as do does item items product
    products color colour size sizes style version type kind price there so very really mom dad
    made make wears wear match
    """
)

SIZE_WORDS = word_set(
    """
    small medium large x-large xx-large xxx-large x-small xx-small queen king twin full
    pack count ounce ounces oz fl inch inches ft feet foot cm mm meter pound pounds lb size
    """
)

_GROUP_FALLBACKS = ("style", "pattern name", "flavor name", "item package quantity")
_REQUEST_RE = re.compile(r"\b(?:looking|searching|shopping|search|look|trying) (?:for|to)\b")
_SPLIT_RE = re.compile(r"[,;:!?|()\"“”]|\.(?!\d)|\s[-–]\s|\s/\s")


def _hash_int(*parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def _hash01(*parts: str) -> float:
    return _hash_int(*parts) / 2**64


# -- attributes ------------------------------------------------------------------------------


def _chunks(body: str, goal_options: Sequence[str], name: str) -> list[str]:
    text = f" {body.lower()} "
    for option in sorted(goal_options, key=len, reverse=True):
        text = text.replace(option.lower(), " , ")
    text = _REQUEST_RE.sub(" , ", text)
    # option words the target name lacks describe the chosen variant, not the product
    option_words = {w for option in goal_options for w in words(option)} - set(words(name))
    chunks: list[str] = []
    for segment in _SPLIT_RE.split(text):
        current: list[str] = []
        for raw in segment.split():
            if (words(raw) or [raw])[0] in option_words and len(words(raw)) == 1:
                raw = ","  # a removed option word also ends the chunk
            if raw == "," or raw in CONNECTIVES:
                chunks.append(" ".join(current))
                current = []
            else:
                current.append(raw)
        chunks.append(" ".join(current))
    out: list[str] = []
    for chunk in chunks:
        tokens = chunk.split()
        while tokens and tokens[0] in FILLER_WORDS:
            tokens.pop(0)
        while tokens and tokens[-1] in FILLER_WORDS:
            tokens.pop()
        phrase = " ".join(tokens).strip(" -'")
        if phrase and any(t not in FILLER_WORDS and re.search("[a-z]", t) for t in tokens):
            out.append(phrase)
    return out


def _matches_name(chunk: str, name_words: Sequence[str]) -> bool:
    content = [w for w in words(chunk) if len(w) >= 3 and w not in FILLER_WORDS]
    return any(ratio(w, n) >= 85 for w in content for n in name_words)


def derive_attributes(body: str, goal_options: Sequence[str], name: str) -> tuple[str, ...]:
    """The goal's attribute phrases by the rule of the module docstring (step 4)."""
    chunks = list(dict.fromkeys(_chunks(body, goal_options, name)))
    name_words = [w for w in words(name) if len(w) >= 3]
    kept = [c for c in chunks if _matches_name(c, name_words)]
    if not kept and chunks:
        processed = full_process(name)
        kept = [max(chunks, key=lambda c: (fuzz.partial_ratio(full_process(c), processed), c))]
    if not kept:
        kept = [body.lower().strip()]
    return tuple(kept)


# -- options ---------------------------------------------------------------------------------


def option_kind(value: str) -> str:
    """Kind "color", "size" or "style" by the simple rules of the module docstring (step 3)."""
    if any(color in value for color in COLOR_SET):
        return "color"
    if re.search(r"\d", value) or any(w in SIZE_WORDS for w in value.split()):
        return "size"
    return "style"


def assign_groups(goal_options: Sequence[str]) -> list[tuple[str, str]]:
    """(group name, goal value) for each goal option, one group per option."""
    taken: set[str] = set()
    out: list[tuple[str, str]] = []
    for value in goal_options:
        name = option_kind(value)
        if name in taken:
            name = next(n for n in _GROUP_FALLBACKS if n not in taken)
        taken.add(name)
        out.append((name, value))
    return out


def _option_scores_for_goal(value: str, goal_options: Sequence[str], text: str) -> bool:
    """Would `value`, bought, count as one of `goal_options` (or match the product text)?"""
    normalized = normalize_color(value)
    for option in goal_options:
        target = normalize_color(option)
        if normalized == target or token_set_ratio(target, normalized) > 85:
            return True
    return normalized in text


def _distractor_values(
    record: GoalRecord, group: str, kind: str, pool: Sequence[tuple[str, str]], text: str
) -> list[str]:
    """Other goals' option values for one group, best kind first, ranked by a hash."""
    ranked = sorted(
        {v for _, v in pool},
        key=lambda v: (option_kind(v) != kind, _hash_int(record.asin, group, v), v),
    )
    return [
        v
        for v in ranked
        if v not in RESERVED_CLICKS and not _option_scores_for_goal(v, record.goal_options, text)
    ]


def _ordered(values: Sequence[str], *salt: str) -> tuple[str, ...]:
    return tuple(sorted(values, key=lambda v: (_hash_int(*salt, v), v)))


# -- prices and ids --------------------------------------------------------------------------


def target_price(asin: str, bound: float) -> float:
    h = _hash01(asin, "price")
    if bound >= NO_PRICE_BOUND:
        return round(20.0 + 180.0 * h, 2)
    return min(round(bound * (0.55 + 0.4 * h), 2), round(bound - 0.01, 2))


def over_price(asin: str, bound: float) -> float:
    return max(round(bound * (1.05 + 0.3 * _hash01(asin, "over")), 2), round(bound + 0.01, 2))


def derived_asin(asin: str, variant: str, taken: set[str]) -> str:
    """A fresh 10-character ASIN-like id for a near-duplicate (deterministic)."""
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    salt = 0
    while True:
        n = _hash_int(asin, variant, str(salt))
        chars = []
        for _ in range(8):
            n, digit = divmod(n, 36)
            chars.append(alphabet[digit])
        candidate = "B0" + "".join(chars)
        if candidate not in taken:
            return candidate
        salt += 1


# -- the catalogue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Catalogue:
    products: tuple[Product, ...]
    goals: tuple[Goal, ...]
    by_asin: dict[str, Product] = field(default_factory=dict, compare=False)
    by_session: dict[str, Goal] = field(default_factory=dict, compare=False)
    index: SearchIndex = field(default_factory=lambda: SearchIndex(()), compare=False)

    def product(self, asin: str) -> Product:
        return self.by_asin[asin.upper()]

    def goal(self, session_idx: str) -> Goal:
        return self.by_session[session_idx]


def _build_goal_products(
    record: GoalRecord, pool: Sequence[tuple[str, str]], taken: set[str]
) -> tuple[Goal, list[Product]]:
    attributes = derive_attributes(record.body, record.goal_options, record.name)
    goal = Goal(
        session_idx=record.session_idx,
        asin=record.asin,
        name=record.name,
        query=record.query,
        instruction=record.instruction,
        price_upper=record.price_upper,
        goal_options=record.goal_options,
        attributes=attributes,
    )
    text = " ".join((record.name.lower(), " ".join(attributes).lower()))
    other_pool = [(s, v) for s, v in pool if s != record.session_idx]
    target_groups: list[tuple[str, tuple[str, ...]]] = []
    wrong_groups: list[tuple[str, tuple[str, ...]]] = []
    used: set[str] = set(record.goal_options)
    for group, value in assign_groups(record.goal_options):
        candidates = [
            v
            for v in _distractor_values(record, group, option_kind(value), other_pool, text)
            if v not in used
        ]
        distinct: list[str] = []
        for candidate in candidates:  # no two values of a group that WebShop would equate
            if not _option_scores_for_goal(candidate, distinct, ""):
                distinct.append(candidate)
        distractors = distinct[:DISTRACTORS_PER_GROUP]
        wrong = distinct[: DISTRACTORS_PER_GROUP + 1]
        used.update(wrong)
        target_groups.append((group, _ordered([value, *distractors], record.asin, group)))
        if wrong:
            wrong_groups.append((group, _ordered(wrong, record.asin, group, "wrong")))
    target = Product(
        asin=record.asin,
        title=record.name,
        query=record.query,
        price=target_price(record.asin, record.price_upper),
        options=tuple(target_groups),
        attributes=attributes,
        bullet_points=attributes,
        description=record.name,
        variant="target",
        source_goal=record.session_idx,
    )
    products = [target]
    if record.price_upper < NO_PRICE_BOUND:
        asin = derived_asin(record.asin, "over_price", taken)
        taken.add(asin)
        price = over_price(record.asin, record.price_upper)
        products.append(replace(target, asin=asin, price=price, variant="over_price"))
    if record.goal_options and len(wrong_groups) == len(target_groups):
        asin = derived_asin(record.asin, "wrong_options", taken)
        taken.add(asin)
        products.append(
            replace(
                target,
                asin=asin,
                price=target_price(asin, record.price_upper),
                options=tuple(wrong_groups),
                variant="wrong_options",
            )
        )
    return goal, products


def build_catalogue(records: Sequence[GoalRecord]) -> Catalogue:
    """The reconstructed catalogue for `records` (see the module docstring for the rules)."""
    pool = [(r.session_idx, option) for r in records for option in r.goal_options]
    taken = {r.asin for r in records}
    goals: list[Goal] = []
    products: list[Product] = []
    for record in records:
        goal, made = _build_goal_products(record, pool, taken)
        goals.append(goal)
        products.extend(made)
    products.sort(key=lambda p: p.asin)
    return Catalogue(
        products=tuple(products),
        goals=tuple(goals),
        by_asin={p.asin: p for p in products},
        by_session={g.session_idx: g for g in goals},
        index=SearchIndex(products),
    )


@lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int, size: int) -> Catalogue:
    return build_catalogue(load_goal_records(Path(path).parents[1]))


def load_catalogue(data_root: Path) -> Catalogue:
    """The catalogue for a data root, built once per goals-file version (DataError if bad)."""
    path = (data_root / GOALS_FILE).resolve()
    if not path.is_file():
        return build_catalogue(load_goal_records(data_root))  # raises the DataError
    stat = path.stat()
    return _cached(str(path), stat.st_mtime_ns, stat.st_size)
