"""Attention for a few new queries on a long grouped-query KV cache (a decode step, a verify of γ+1 tokens, chunked
prefill).

Transformers' ``sdpa`` path repeats every KV head once per query head (``repeat_kv``) whenever the step has a mask
(every fixed-shape decode step of ``budgetdraft.decoding.engine`` has one): at a 4K cache that copy plus the larger attention costs SmolLM2 ~75 ms of a ~170 ms
verify of 6 tokens on CPU. Here the query heads that share a KV head are stacked instead: queries
[1, H, q, D] → [1, H_kv, (H/H_kv)·q, D], the mask rows tiled to match, so each KV head is read once and nothing
is copied. The result is the same attention (equal to ``sdpa``'s in tests).

It is registered with transformers' ``AttentionInterface`` (and ``sdpa``'s mask function) under ``NAME``, the
public way to add an attention function: no modeling code is patched. Every other case (no mask,
MHA, dropout, position bias) is ``sdpa`` itself.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "budgetdraft_sdpa"


def grouped_query_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    groups = getattr(module, "num_key_value_groups", 1)
    q_len, kv_heads = query.shape[2], key.shape[1]
    if (
        groups == 1
        or dropout
        or attention_mask is None
        or attention_mask.shape[1] != 1
        or query.shape[0] != 1
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    d = query.shape[-1]
    packed = query.reshape(1, kv_heads, groups * q_len, d)  # head h = g·groups + r → rows r·q … r·q + q − 1
    mask = attention_mask.repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(1, kv_heads * groups, q_len, value.shape[-1]).transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, grouped_query_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
