"""The second embedded target (Gemma 3 270M): its tokenizer rebuilt from the GGUF, its turn
format, and the policy running it without the prefix cache."""

from __future__ import annotations

import pytest

from harness_r1.harness.policies.base import GenerationRequest, SamplingConfig
from harness_r1.harness.policies.gguf_tokenizer import CONTROL, NORMAL, merges_by_score
from harness_r1.harness.policies.transformers_backend import TransformersPolicy


def test_merges_come_in_the_order_of_the_joined_pieces_scores() -> None:
    pieces = ["<s>", "a", "b", "c", "ab", "bc", "abc"]
    scores = [0.0, -1.0, -1.0, -1.0, -5.0, -2.0, -3.0]
    types = [CONTROL] + [NORMAL] * 6

    merges = merges_by_score(pieces, scores, types)

    # bc (-2) before abc (-3) before ab (-5); abc splits as a+bc and ab+c
    assert merges == [("b", "c"), ("a", "bc"), ("ab", "c"), ("a", "b")]


def test_control_pieces_never_take_part_in_a_merge() -> None:
    pieces = ["<", "s", ">", "<s>", "s>"]
    types = [NORMAL, NORMAL, NORMAL, CONTROL, NORMAL]

    merges = merges_by_score(pieces, [-1.0, -1.0, -1.0, 0.0, -2.0], types)

    assert merges == [("s", ">")]


@pytest.fixture(scope="module")
def gemma() -> TransformersPolicy:
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12)
    return TransformersPolicy.embedded("gemma3", sampling=sampling, prefix_cache=True)


@pytest.mark.integration
def test_gemma_reads_words_not_letters(gemma: TransformersPolicy) -> None:
    tokenizer = gemma.tokenizer
    ids = tokenizer("What is the capital of France?", add_special_tokens=False)["input_ids"]

    assert tokenizer.convert_ids_to_tokens(ids) == [
        "What", "\u2581is", "\u2581the", "\u2581capital", "\u2581of", "\u2581France", "?",
    ]  # fmt: skip
    assert tokenizer.decode(ids) == "What is the capital of France?"


@pytest.mark.integration
def test_gemma_speaks_in_its_own_turns_and_stops_at_their_end(gemma: TransformersPolicy) -> None:
    messages = (
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name a colour."},
    )
    request = GenerationRequest(messages=messages, seed=0)
    prompt = gemma._prompt(request)
    answer = gemma.generate([request])[0]

    assert prompt == (
        "<bos><start_of_turn>user\nAnswer briefly.\n\nName a colour.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert gemma.prefix_cache is None  # its sliding-window layers: plain generate
    end_of_turn = gemma.tokenizer.convert_tokens_to_ids("<end_of_turn>")
    assert end_of_turn in gemma._stop_set
    assert 0 < answer.tokens <= 12 and answer.prompt_tokens < 30
