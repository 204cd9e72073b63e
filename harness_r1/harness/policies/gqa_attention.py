"""Grouped-query attention over a masked cache without copying the key/value cache.

Why: SmolLM2-135M has 9 query heads sharing 3 key/value heads. transformers' sdpa attention on
CPU, whenever an attention mask is given (always, for a left-padded lockstep batch), first
expands the cache with `repeat_kv`: every decode step copies each layer's whole cache three
times before reading it. At 8 rows x ~2,000 cached tokens that copy, not the weights, is most
of a step; reading new prompt tokens onto a cached prefix pays it too. The copy is not needed:
the query heads of one group can be stacked along the query-length axis (each with the mask
rows of its positions) and attend to their shared key/value head directly. The result is the
same arithmetic on the same numbers, regrouped.

Registered with transformers' AttentionInterface under NAME (mask construction as "sdpa");
calls without a mask (sdpa then uses its own grouped-query path) or without grouped heads go to
the stock sdpa function.
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
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if groups == 1 or attention_mask is None:
        # no mask: transformers passes `enable_gqa` to sdpa itself, without copying
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    batch, heads, length, dim = query.shape
    kv_heads = heads // groups
    # [batch, kv_heads, groups * length, dim]: a group's query heads one after the other
    grouped = query.reshape(batch, kv_heads, groups * length, dim)
    mask = attention_mask[:, :, :, : key.shape[2]]  # [batch, 1, length, keys]
    if length > 1:  # each query head of a group needs the mask rows of its positions
        mask = mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(
        grouped, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, heads, length, dim).transpose(1, 2).contiguous(), None


def register() -> str:
    """Make NAME known to transformers (idempotent); returns it for `attn_implementation`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, grouped_query_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    return NAME
