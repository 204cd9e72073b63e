"""Noun extraction for WebShop's type reward (title overlap between bought and target product).

Why: WebShop's `get_type_reward` keeps the tokens of both product names that spaCy tags NOUN,
PNOUN or PROPN (with `en_core_web_lg`) and scores their overlap. spaCy and its models are not
installed here, so `title_nouns` uses spaCy when it and a model import (`en_core_web_lg`, then
`en_core_web_sm`) and otherwise a documented deterministic approximation:

    nouns ~= lowercase alphabetic tokens of length >= 2 that are neither stop words nor in a
    short list of common adjectives / descriptors (colours, sizes, quality words, ...).

Product titles are mostly capitalised noun phrases that spaCy tags NOUN/PROPN, so "every word
that is not a function word or an obvious adjective" is close; duplicates are kept because
WebShop divides by the length of the target's noun *list*. Callers that need stable numbers
(tests, reports) pass `approximate_nouns` explicitly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from harness_r1.envs.webshop.normalize import word_set

NounFn = Callable[[str], list[str]]

_ALPHA_RE = re.compile(r"[a-z]+")

STOP_WORDS: frozenset[str] = word_set(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up upon very was we
    were what when where which while who whom why will with within without would you your yours
    yourself yourselves per via vs etc
    """
)

ADJECTIVES: frozenset[str] = word_set(
    """
    long short high low big small large little tiny huge mini new old soft hard hot cold warm
    cool wet dry light heavy thick thin wide narrow deep flat round square fast quick slow easy
    simple best better good great premium professional pro natural organic fresh pure real
    original classic modern vintage retro rustic casual comfy comfortable cute sexy elegant
    luxury fancy beautiful pretty durable portable adjustable reusable washable waterproof
    wireless digital electric electronic manual automatic universal compatible flexible
    healthy delicious gourmet spicy sweet salty free full half double single dual triple
    extra ultra super multi multiple various assorted mixed different compact sturdy strong
    safe gentle fine coarse smooth curly wavy straight synthetic plastic wooden metal cotton
    black white red blue green yellow grey gray brown pink purple orange beige silver golden
    gold navy clear dark bright colorful decorative outdoor indoor active
    """
)


def approximate_nouns(text: str) -> list[str]:
    """The deterministic stand-in for spaCy's NOUN/PROPN tokens (see the module docstring)."""
    return [
        token
        for token in _ALPHA_RE.findall(text.lower())
        if len(token) >= 2 and token not in STOP_WORDS and token not in ADJECTIVES
    ]


@lru_cache(maxsize=1)
def _spacy_model() -> Any | None:
    try:
        import spacy
    except Exception:
        return None
    for model in ("en_core_web_lg", "en_core_web_sm"):
        try:
            return spacy.load(model)
        except Exception:
            continue
    return None


def spacy_nouns(text: str) -> list[str] | None:
    """WebShop's own rule when spaCy and a model are importable; None otherwise."""
    nlp = _spacy_model()
    if nlp is None:
        return None
    return [t.text.lower() for t in nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]


def title_nouns(text: str) -> list[str]:
    """spaCy's nouns when available, else `approximate_nouns`."""
    nouns = spacy_nouns(text)
    return approximate_nouns(text) if nouns is None else nouns
