"""Lockstep decode's pieces on small tensors: stacking caches with left padding and cutting a
row back out, choosing next tokens, and the grouped-query decode attention (same numbers as
transformers' own sdpa attention). The real model: tests/integration/test_target_engine.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from transformers import DynamicCache  # noqa: E402
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

from harness_r1.models.base import SamplingConfig  # noqa: E402
from harness_r1.models.gqa_attention import grouped_query_attention  # noqa: E402
from harness_r1.models.kv_lockstep import (  # noqa: E402
    RowState,
    alias,
    left_pad_stack,
    next_tokens,
    row_cache,
)


def _cache(length: int, layers: int = 2, fill: float = 1.0) -> DynamicCache:
    cache = DynamicCache()
    for index in range(layers):
        keys = torch.full((1, 3, length, 4), fill + index)
        values = (
            torch.arange(length, dtype=torch.float32)
            .reshape(1, 1, length, 1)
            .expand(1, 3, length, 4)
            + 100 * index
        )
        cache.update(keys, values.clone(), index)
    return cache


def test_caches_are_left_padded_to_the_longest_and_cut_back_out_exactly() -> None:
    short, long = _cache(2, fill=1.0), _cache(5, fill=7.0)
    stacked, pads = left_pad_stack([short, long], room=2)
    assert pads == [3, 0]
    assert stacked.get_seq_length() == 5
    layer = stacked.layers[1]
    assert layer.keys.shape == (2, 3, 5, 4)
    assert torch.all(layer.keys[0, :, :3] == 0) and torch.all(layer.keys[0, :, 3:] == 2.0)
    for row, (original, pad) in enumerate(zip([short, long], pads, strict=True)):
        length = original.get_seq_length()
        back = row_cache(stacked, row, slice(pad, pad + length))
        for got, want in zip(back.layers, original.layers, strict=True):
            assert torch.equal(got.keys, want.keys) and torch.equal(got.values, want.values)
    # decode steps write in place while there is room, and grow past it keeping every token
    buffer = layer.keys.data_ptr()
    for step in range(3):
        token = torch.full((2, 3, 1, 4), 50.0 + step)
        keys, values = layer.update(token, token.clone())
        assert keys.shape == (2, 3, 6 + step, 4) and torch.all(keys[:, :, -1] == 50.0 + step)
        assert (keys.data_ptr() == buffer) == (step < 2)
    assert stacked.layers[1].get_seq_length() == 8
    assert torch.all(layer.keys[0, :, 3:5] == 2.0) and torch.all(layer.keys[:, :, 5:7] >= 50)
    # a cut-out row is a copy: growing it leaves the batch alone
    back = row_cache(stacked, 0, slice(3, 4))
    back.layers[0].keys += 1
    assert torch.all(stacked.layers[0].keys[0, :, 3:] == 1.0)


def test_an_alias_shares_tensors_and_neither_side_changes_the_other() -> None:
    cache = _cache(4)
    twin = alias(cache)
    assert twin is not cache and twin.layers[0] is not cache.layers[0]
    assert twin.layers[0].keys.data_ptr() == cache.layers[0].keys.data_ptr()
    twin.crop(-2)  # the store crops a continuation that re-reads its last token
    twin.update(torch.ones(1, 3, 3, 4), torch.ones(1, 3, 3, 4), 0)
    assert twin.layers[0].get_seq_length() == 5
    assert cache.get_seq_length() == 4 and torch.all(cache.layers[0].keys == 1.0)


def test_greedy_takes_the_argmax_and_sampling_follows_each_rows_own_generator() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 0.0]])
    rows = [RowState([1], None, []), RowState([2], None, [])]
    assert next_tokens(logits, SamplingConfig(), rows) == [1, 0]
    sampled = SamplingConfig(temperature=1.0, top_p=0.5)

    def seeded(seed: int) -> list[RowState]:
        return [RowState([1], torch.Generator().manual_seed(seed), []) for _ in range(2)]

    # top_p 0.5 keeps only each row's most likely token, whatever the generator draws
    assert next_tokens(logits, sampled, seeded(1)) == [1, 0]
    flat = torch.zeros(2, 50)
    wide = SamplingConfig(temperature=1.0, top_p=1.0)
    draws = [next_tokens(flat, wide, seeded(s)) for s in (3, 3, 4)]
    assert draws[0] == draws[1]  # same seeds, same draws
    assert draws[0][0] == draws[0][1]  # rows with the same seed draw the same
    assert draws[0] != draws[2]


class _Layer:
    """What the attention functions read from the layer module."""

    num_key_value_groups = 3
    is_causal = True
    training = False


def _one_token_step(
    seed: int, batch: int, length: int, kv_heads: int = 3, groups: int = 3, dim: int = 8
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random query (one token, kv_heads x groups heads) and a cache of `length` keys/values."""
    torch.manual_seed(seed)
    query = torch.randn(batch, kv_heads * groups, 1, dim)
    key = torch.randn(batch, kv_heads, length, dim)
    return query, key, torch.randn(batch, kv_heads, length, dim)


def test_grouped_query_attention_equals_sdpa_with_a_padding_mask() -> None:
    batch, kv_heads, groups, length, dim = 2, 3, 3, 7, 8
    query, key, value = _one_token_step(0, batch, length)
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    mask[0, :, :, :3] = False  # row 0 is left-padded by three
    ours, _ = grouped_query_attention(_Layer(), query, key, value, mask, scaling=dim**-0.5)
    theirs, _ = sdpa_attention_forward(_Layer(), query, key, value, mask, scaling=dim**-0.5)
    assert ours.shape == theirs.shape == (batch, 1, kv_heads * groups, dim)
    assert torch.allclose(ours, theirs, atol=1e-6)
    # the padding really is masked: changing a padded key changes nothing
    key[0, :, :3] += 10
    again, _ = grouped_query_attention(_Layer(), query, key, value, mask, scaling=dim**-0.5)
    assert torch.allclose(again, ours, atol=1e-6)
    # several new tokens onto a cached prefix (a prompt read from the prefix cache): each
    # position sees the cache and the new tokens up to itself
    several = torch.randn(batch, kv_heads * groups, 4, dim)
    causal = torch.ones(4, length, dtype=torch.bool).tril(diagonal=length - 4)
    mask4 = causal.expand(batch, 1, 4, length).clone()
    mask4[0, :, :, :3] = False
    ours4, _ = grouped_query_attention(_Layer(), several, key, value, mask4, scaling=0.3)
    theirs4, _ = sdpa_attention_forward(_Layer(), several, key, value, mask4, scaling=0.3)
    assert ours4.shape == (batch, 4, kv_heads * groups, dim)
    assert torch.allclose(ours4, theirs4, atol=1e-6)
    # without a mask transformers' own function runs (sdpa's grouped-query path)
    plain, _ = grouped_query_attention(_Layer(), several, key[:, :, :4], value[:, :, :4], None)
    stock, _ = sdpa_attention_forward(_Layer(), several, key[:, :, :4], value[:, :, :4], None)
    assert torch.equal(plain, stock)


def test_a_prompt_read_onto_a_cached_prefix_needs_no_mask() -> None:
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    from harness_r1.models.gqa_attention import lower_right_causal_or_mask

    torch.manual_seed(3)
    cached, new, dim = 11, 5, 8
    query = torch.randn(1, 9, new, dim)
    key, value = torch.randn(1, 3, cached + new, dim), torch.randn(1, 3, cached + new, dim)
    causal = torch.ones(new, cached + new, dtype=torch.bool).tril(diagonal=cached)[None, None]
    ours, _ = grouped_query_attention(_Layer(), query, key, value, None, scaling=0.3)
    theirs, _ = sdpa_attention_forward(_Layer(), query, key, value, causal, scaling=0.3)
    assert torch.allclose(ours, theirs, atol=1e-6)
    # a later key really is hidden from an earlier new token: changing the last key changes
    # only the last position's output
    key[:, :, -1] += 5
    moved, _ = grouped_query_attention(_Layer(), query, key, value, None, scaling=0.3)
    assert torch.allclose(moved[:, :-1], ours[:, :-1], atol=1e-6)
    assert not torch.allclose(moved[:, -1], ours[:, -1], atol=1e-3)
    # the mask function leaves that case (one unpadded row, several tokens) to the attention
    # and builds transformers' mask for every other
    args = {"q_length": new, "kv_length": cached + new, "mask_function": causal_mask_function}
    assert lower_right_causal_or_mask(batch_size=1, **args) is None
    unpadded = torch.ones(1, cached + new)
    assert lower_right_causal_or_mask(batch_size=1, attention_mask=unpadded, **args) is None
    padded = torch.ones(2, cached + new, dtype=torch.bool)
    padded[0, :2] = False
    built = lower_right_causal_or_mask(batch_size=2, attention_mask=padded, **args)
    assert torch.equal(built, sdpa_mask(batch_size=2, attention_mask=padded, **args))


def test_one_token_steps_fold_without_a_mask_and_skip_finished_rows() -> None:
    query, key, value = _one_token_step(1, batch=4, length=9)
    # no mask (transformers drops an all-ones one): folded, same numbers as sdpa's own path
    ours, _ = grouped_query_attention(_Layer(), query, key, value, None, scaling=0.2)
    theirs, _ = sdpa_attention_forward(_Layer(), query, key, value, None, scaling=0.2)
    assert torch.allclose(ours, theirs, atol=1e-6)
    # rows 1 and 2 finished: rows 0 and 3 as before, the finished rows' outputs are zeros
    skipping, _ = grouped_query_attention(
        _Layer(), query, key, value, None, scaling=0.2, active_rows=((0, 1), (3, 4))
    )
    assert torch.allclose(skipping[[0, 3]], ours[[0, 3]], atol=1e-6)  # rounding: batch size
    assert not skipping[1:3].any()


def test_active_runs_group_consecutive_rows_still_decoding() -> None:
    from harness_r1.models.kv_lockstep import RowState, active_runs, skip_finished

    rows = [RowState([1], None, [], done=d) for d in (False, False, True, False, True, False)]
    assert active_runs(rows) == ((0, 2), (3, 4), (5, 6))
    assert skip_finished(rows) == {"active_rows": ((0, 2), (3, 4), (5, 6))}
    assert skip_finished([RowState([1], None, [])]) == {}


def test_prompt_lookup_drafts_what_followed_the_latest_occurrence_of_the_tail() -> None:
    from harness_r1.models.kv_lockstep import PromptLookup

    lookup = PromptLookup([5, 6, 7, 8, 9, 1, 6, 7, 4, 2])
    assert lookup.propose(3) == []  # the tail (4, 2) / (7, 4, 2) never occurred before
    lookup.extend([5, 6, 7])
    # (5, 6, 7) occurred once, followed by 8 9 1; the 2-gram (6, 7) last by 4 2 5
    assert lookup.propose(3) == [8, 9, 1]
    assert lookup.propose(0) == []
    lookup.extend([3])
    assert lookup.propose(4) == []
    lookup.extend([6, 7])  # (3, 6, 7) unseen: the latest (6, 7) was followed by 3
    assert lookup.propose(2) == [3, 6]
