"""The prefix cache on the real SmolLM2: same greedy answers as reading every prompt whole,
with the earlier turn's and the shared instructions' keys/values actually reused."""

from __future__ import annotations

import pytest

from harness_r1.models.base import GenerationRequest, SamplingConfig
from harness_r1.models.transformers_backend import TransformersPolicy

pytestmark = pytest.mark.integration

SYSTEM = (
    "You are an agent in a household. Answer with one command per turn, such as 'go to "
    "cabinet 1', 'open drawer 2', 'take apple 1 from countertop 1' or 'look'. " * 3
)


def _conversations() -> list[list[dict[str, str]]]:
    first = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "You see a cabinet 1 and a fridge 1. Task: cool an apple."},
    ]
    other = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "You see a desk 1 and a lamp 1. Task: examine a book."},
    ]
    return [first, other]


def _second_turn(conversation: list[dict[str, str]], answer: str) -> list[dict[str, str]]:
    return [
        *conversation,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Nothing happens. What next?"},
    ]


def test_cached_answers_equal_whole_prompt_answers() -> None:
    sampling = SamplingConfig(max_new_tokens=12)
    whole = TransformersPolicy.embedded(sampling=sampling, max_batch=1)
    cached = TransformersPolicy.embedded(sampling=sampling, max_batch=1, prefix_cache=True)
    assert cached.prefix_cache is not None
    turns = _conversations()
    answers: dict[str, list[str]] = {"whole": [], "cached": []}
    for name, policy in (("whole", whole), ("cached", cached)):
        first = policy.generate([GenerationRequest(messages=t) for t in turns])
        second = policy.generate(
            [
                GenerationRequest(messages=_second_turn(t, g.text))
                for t, g in zip(turns, first, strict=True)
            ]
        )
        answers[name] = [g.text for g in first + second]
    assert answers["cached"] == answers["whole"]
    stats = cached.prefix_cache.stats
    # turn 1 of the second conversation reuses the shared system prompt; both second turns
    # reuse their own first turn
    assert stats.lookups == 4 and stats.hits == 3
    assert stats.reuse_ratio > 0.5
