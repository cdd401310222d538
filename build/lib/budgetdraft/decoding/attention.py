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

A second path, ``FLEX_NAME``, runs the fixed-shape decode steps through PyTorch's FlexAttention (``flex_attention``):
under ``torch.compile`` on CUDA, Inductor lowers a short query to its flash-decoding kernel, which splits the KV
sequence across the GPU (what gpt-fast's decode path runs; where the query heads of a KV head are a power of two, as
in the paper's MHA models, not SmolLM2's 3, which get its main flex kernel); the memory-efficient SDPA kernel does
not split the KV sequence for a query of one token. A model opts in with
``model.set_attn_implementation(ATTENTIONS["flex"])``; ``NAME`` stays the default (``load_model``) until a GPU has
measured both (bench/gpu_decode.py --attentions sdpa flex).
"""

from __future__ import annotations

import functools

import torch
from torch.nn.attention.flex_attention import flex_attention
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "budgetdraft_sdpa"
FLEX_NAME = "budgetdraft_flex"
ATTENTIONS = {"sdpa": NAME, "flex": FLEX_NAME}  # the attention a run names -> its registered implementation


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


def flex_decode_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """A fixed-shape decode step's attention through ``flex_attention``: the step's additive mask [1, 1, q, capacity]
    (0 / −inf, made once a step by ``budgetdraft.decoding.engine.decode_step``) is added to each score by a
    ``score_mod`` that reads it, a captured tensor: the valid length stays data, so the step keeps one shape and
    captures whole. Grouped-query heads are broadcast by the kernel (``enable_gqa``), nothing repeated.

    A dense score_mod, not a ``BlockMask``: every query of a step attends to all but the last few slots of its cache
    (at most 256 + γ + 1 of a 4K+ capacity are past the valid length), so a block mask would skip at most 2-3 of
    its 128-slot blocks (under 7% of the KV read at 4K, under 2% at 16K), and it would have to follow the slot,
    a device tensor, every step. Everything else (no mask, the prefill's
    boolean masks, a batch, dropout, position bias) is ``grouped_query_attention``'s path, unchanged."""
    if not is_decode_mask(attention_mask, query, key) or dropout or not plain_attention(kwargs):
        return grouped_query_attention(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )

    def add_mask(score, batch, head, q_idx, kv_idx):
        return score + attention_mask[0, 0, q_idx, kv_idx]

    out = flex_kernel(query.device)(query, key, value, score_mod=add_mask, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def is_decode_mask(mask, query, key) -> bool:
    """A fixed-shape step's mask: additive (floating), one batch, one row per query, one column per cache slot."""
    return (
        isinstance(mask, torch.Tensor)
        and mask.is_floating_point()
        and query.shape[0] == 1
        and tuple(mask.shape) == (1, 1, query.shape[2], key.shape[2])
    )


def plain_attention(kwargs: dict) -> bool:
    """No term besides the mask that ``flex_decode_attention`` would have to add (position bias, softcap, sinks)."""
    return all(kwargs.get(name) is None for name in ("position_bias", "softcap", "s_aux"))


def flex_kernel(device: torch.device):
    """``flex_attention`` as the step should call it. Inside a compiled step (engine ``graphs``) the function
    itself: Torch traces it whole, and Inductor lowers it to its Triton kernel on CUDA. In an eager step on CUDA
    ``flex_attention`` compiled alone (fixed shapes), so that the eager engine also runs the fused kernel, not the
    unfused reference that materialises the scores; on a CPU the reference itself (tests, no compiler)."""
    if device.type != "cuda" or torch.compiler.is_compiling():
        return flex_attention
    return compiled_flex_attention()


@functools.cache
def compiled_flex_attention():
    """``flex_attention`` compiled once per process, one entry per shape (q, capacity, heads, dtype): a run of many
    contexts and drafters outgrows dynamo's default of 8 entries, and hitting the limit must fail, not silently fall
    back to the unfused reference (as ``budgetdraft.decoding.engine.Steps`` does for its compiled steps)."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch.compile(flex_attention, dynamic=False, fullgraph=True)


AttentionInterface.register(NAME, grouped_query_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
AttentionInterface.register(FLEX_NAME, flex_decode_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(FLEX_NAME, sdpa_mask)
