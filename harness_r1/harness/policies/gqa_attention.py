"""Decode-step attention for grouped-query models without copying the key/value cache.

Why: SmolLM2-135M has 9 query heads sharing 3 key/value heads. transformers' sdpa attention on
CPU, whenever an attention mask is given (always, for a left-padded lockstep batch), first
expands the cache with `repeat_kv`: every decode step copies each layer's whole cache three
times before reading it. At 8 rows x ~2,000 cached tokens that copy, not the weights, is most
of a step. For one new token the copy is not needed: the query heads of one group can be
stacked along the query-length axis (they attend from the same position, so the same mask
row applies) and attend to their shared key/value head directly. The result is the same
arithmetic on the same numbers, regrouped.

Registered with transformers' AttentionInterface under NAME (mask construction as "sdpa");
anything but a single-token step of a grouped-query layer goes to the stock sdpa function.
"""

from __future__ import annotations

from typing import Any

NAME = "harness_r1_gqa_decode"


def gqa_decode_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """query [batch, heads, 1, dim], key/value [batch, kv_heads, length, dim]; returns the
    attention output as [batch, 1, heads, dim], as transformers' attention functions do."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    batch, heads, _, dim = query.shape
    grouped = query.reshape(batch, heads // groups, groups, dim)
    mask = attention_mask
    if mask is not None:  # [batch, 1, 1, length]: one mask row, the same for every query head
        mask = mask[:, :, :1, : key.shape[2]]
    out = torch.nn.functional.scaled_dot_product_attention(
        grouped, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def register() -> str:
    """Make NAME known to transformers (idempotent); returns it for `attn_implementation`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, gqa_decode_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    return NAME
