"""Grouped-query attention over a masked cache without copying the key/value cache.

Why: SmolLM2-135M has 9 query heads sharing 3 key/value heads. transformers' sdpa attention on
CPU, whenever an attention mask is given (always, for a left-padded lockstep batch), first
expands the cache with `repeat_kv`: every decode step copies each layer's whole cache three
times before reading it. At 8 rows x ~2,000 cached tokens that copy, not the weights, is most
of a step; reading new prompt tokens onto a cached prefix pays it too. The copy is not needed:
the query heads of one group can be stacked along the query-length axis (each with the mask
rows of its positions) and attend to their shared key/value head directly. The result is the
same arithmetic on the same numbers, regrouped.

The same folding pays for one-token steps without a mask (transformers drops an all-ones
mask: one row, or rows of equal length): torch's own grouped-query path (`enable_gqa`) is ~5x
slower there on CPU in bf16 (measured at 2,300 cached tokens: 1.6 against 0.3 ms a layer for
one row, 12.6 against 2.6 for eight). Prompt reads without a mask (a first read, causal) keep
the stock sdpa function, as do models without grouped heads.

Rows that have finished decoding still ride along in a lockstep batch (their tokens are
thrown away). A caller may pass `active_rows`, the runs `(start, stop)` of rows still decoding,
through the model's keyword arguments (transformers hands them to the attention function):
steps then attend only for those rows, each run a view of the cache (nothing copied),
and the finished rows' outputs are zeros. Each row's attention reads only its own cache, so
the active rows get the same arithmetic as without skipping (to rounding: sdpa's kernel blocks
its work by batch size, as any change of batch does).

Reading a prompt onto a cached prefix (one row, several new tokens) needs causality aligned
to the end of the cache, which sdpa's `is_causal` does not do (it aligns to the start), so
transformers materialises the mask ([new, cached + new] booleans, built element by element)
and sdpa then computes every masked score too. For that case the mask function registered
under NAME (`lower_right_causal_or_mask`) returns None, and the attention is computed in two
parts merged by their log-sum-exps: the new tokens against the cached prefix (no mask, the
grouped heads folded) and against themselves (causal, `is_causal`, which skips the blocks above
the diagonal). Same arithmetic on the same numbers, split; on ALFWorld's first reads (~1,000 new
tokens onto ~500 cached) it does a third less work and builds no mask.

Registered with transformers' AttentionInterface under NAME (with that mask function).
"""

from __future__ import annotations

from typing import Any

NAME = "harness_r1_gqa"


def grouped_query_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """query [batch, heads, length, dim], key/value [batch, kv_heads, keys, dim], mask
    [batch, 1, length, keys]; returns the attention output as [batch, length, heads, dim], as
    transformers' attention functions do."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    length = query.shape[2]
    cached = key.shape[2] - length
    if attention_mask is None and length > 1 and cached > 0:
        # a prompt read onto a cached prefix (lower_right_causal_or_mask returned None)
        out = _causal_after_prefix(query, key, value, groups, scaling)
        return out.transpose(1, 2).contiguous(), None
    if groups == 1 or (attention_mask is None and length > 1):
        kwargs.pop("active_rows", None)
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    mask = None if attention_mask is None else attention_mask[:, :, :, : key.shape[2]]
    runs = kwargs.get("active_rows")
    if runs is None:  # every row: no output buffer to fill
        out = _folded(query, key, value, mask, groups, dropout, scaling)
        return out.transpose(1, 2).contiguous(), None
    out = query.new_zeros(query.shape)
    for start, stop in runs:
        out[start:stop] = _folded(
            query[start:stop],
            key[start:stop],
            value[start:stop],
            None if mask is None else mask[start:stop],
            groups,
            dropout,
            scaling,
        )
    return out.transpose(1, 2).contiguous(), None


def _folded(
    query: Any, key: Any, value: Any, mask: Any, groups: int, dropout: float, scaling: Any
) -> Any:
    """sdpa with a group's query heads stacked along the query axis (see the module
    docstring); returns [batch, heads, length, dim]."""
    import torch

    batch, heads, length, dim = query.shape
    # [batch, kv_heads, groups * length, dim]: a group's query heads one after the other
    grouped = query.reshape(batch, heads // groups, groups * length, dim)
    if mask is not None and length > 1:  # each head of a group needs its positions' mask rows
        mask = mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(
        grouped, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, heads, length, dim)


def _causal_after_prefix(query: Any, key: Any, value: Any, groups: int, scaling: Any) -> Any:
    """Causal attention of `length` new tokens that follow a cached prefix, for one row
    ([1, heads, length, dim] against [1, kv_heads, cached + length, dim]); returns
    [1, heads, length, dim]. The two parts are merged by their log-sum-exps in fp32."""
    import torch

    batch, heads, length, dim = query.shape
    cached = key.shape[2] - length
    if query.device.type != "cpu":  # the split needs the CPU kernel's log-sum-exp
        mask = torch.ones(length, cached + length, dtype=torch.bool, device=query.device)
        return _folded(query, key, value, mask.tril(cached)[None, None], groups, 0.0, scaling)
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    grouped = query.reshape(batch, heads // groups, groups * length, dim)
    old, old_lse = flash(grouped, key[:, :, :cached], value[:, :, :cached], scale=scaling)
    # the new tokens' keys/values per query head (a copy of `length` positions only)
    new_keys = key[:, :, cached:].repeat_interleave(groups, dim=1)
    new_values = value[:, :, cached:].repeat_interleave(groups, dim=1)
    new, new_lse = flash(query, new_keys, new_values, is_causal=True, scale=scaling)
    old_lse = old_lse.reshape(batch, heads, length)
    total = torch.logaddexp(old_lse, new_lse)
    merged = old.reshape(batch, heads, length, dim).float() * (old_lse - total).exp()[..., None]
    merged += new.float() * (new_lse - total).exp()[..., None]
    return merged.to(query.dtype)


def lower_right_causal_or_mask(
    *,
    batch_size: int,
    q_length: int,
    kv_length: int,
    mask_function: Any,
    attention_mask: Any = None,
    **kwargs: Any,
) -> Any:
    """transformers' sdpa mask, except None for one row of several tokens with nothing
    padded under a plain causal mask: grouped_query_attention computes that case itself
    (`_causal_after_prefix`) without materialising the mask."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    plain = mask_function is causal_mask_function
    unpadded = attention_mask is None or bool(attention_mask.all())
    if batch_size == 1 and q_length > 1 and plain and unpadded:
        return None
    return sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        mask_function=mask_function,
        attention_mask=attention_mask,
        **kwargs,
    )


def register() -> str:
    """Make NAME known to transformers (idempotent); returns it for `attn_implementation`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(NAME, grouped_query_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, lower_right_causal_or_mask)
    return NAME
