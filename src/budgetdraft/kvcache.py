"""KV caches for drafting and verifying, and the sparse policies that shrink the drafter's prefix cache.

- ``PreallocatedCache``: a ``transformers.Cache`` whose layers write into pre-allocated buffers. Appending and
  rolling back are O(1) in the context length (rollback only moves a position), unlike ``DynamicCache``, which
  appends with ``torch.cat``.
- ``prefill``: chunked prefill that can also score every prefix token by the attention it receives.
- ``keep_indices``: the sparse policies (``topk_chunks`` = the paper's TopKChunks, ``streaming``, ``full``).
- ``gathered_cache`` / ``PreallocatedCache.from_kv``: a cache holding only the kept prefix positions.

After sparsification the cache length no longer equals the real position, so every later forward passes explicit
``position_ids`` (real positions P, P+1, ...) while the cache slots stay contiguous.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicCache


class PreallocatedLayer(CacheLayerMixin):
    """One layer's keys/values in a buffer [B, H_kv, capacity, D]; ``length`` slots are valid."""

    is_sliding = False
    is_croppable = True

    def __init__(self, capacity: int = 256):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(b, h, self.capacity, d)
        self.values = value_states.new_zeros(b, h, self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def _reserve(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        capacity = max(needed, 2 * self.capacity)  # amortised O(1) growth when a run outgrows its estimate
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(*old.shape[:2], capacity, old.shape[-1])
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)
        self.capacity = capacity

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        self._reserve(end)
        self.keys[:, :, self.length : end] = key_states
        self.values[:, :, self.length : end] = value_states
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        """Transformers semantics: a negative argument removes that many of the last entries."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): pass a negative number of tokens to remove")
        self.length = max(0, self.length + tokens_to_remove)

    def reset(self) -> None:
        self.length = 0


class PreallocatedCache(Cache):
    """A per-layer pre-allocated KV cache; ``truncate(n)`` rolls back to the first ``n`` slots in O(1)."""

    def __init__(self, num_layers: int, capacity: int = 256):
        super().__init__(layers=[PreallocatedLayer(capacity) for _ in range(num_layers)])

    @classmethod
    def from_kv(cls, kv: list[tuple[torch.Tensor, torch.Tensor]], capacity: int) -> PreallocatedCache:
        """A cache holding the given per-layer keys/values [B, H_kv, T, D], with room for ``capacity`` entries."""
        cache = cls(len(kv), capacity)
        for layer, (k, v) in zip(cache.layers, kv):
            layer.capacity = max(capacity, k.shape[-2])
            layer.update(k, v)
        return cache

    def truncate(self, length: int) -> None:
        for layer in self.layers:
            if length > layer.length:
                raise ValueError(f"cannot truncate a cache of {layer.length} entries to {length}")
            layer.length = length

    def kv(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[layer_idx]
        return layer.keys[:, :, : layer.length], layer.values[:, :, : layer.length]


def layer_kv(cache: Cache, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The valid keys/values [B, H_kv, T, D] of one layer of any cache (keys are stored after RoPE)."""
    if isinstance(cache, PreallocatedCache):
        return cache.kv(layer_idx)
    layer = cache.layers[layer_idx]
    return layer.keys, layer.values


def num_layers(model) -> int:
    return model.config.num_hidden_layers


def decoder_layers(model):
    return model.model.layers


# --------------------------------------------------------------------------------------------------------------
# Attention scores of the last queries of a prefill


def attention_queries(attn, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The queries [1, H, w, D] (after RoPE) that attention module ``attn`` computes from its inputs
    ``hidden`` [1, w, hidden] and rotary ``(cos, sin)``: q_proj, the optional q_norm, then RoPE."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q = attn.q_proj(hidden).view(1, hidden.shape[1], -1, attn.head_dim)
    if getattr(attn, "q_norm", None) is not None:
        q = attn.q_norm(q)
    q = q.transpose(1, 2)
    return apply_rotary_pos_emb(q, q, cos, sin)[0]


class QueryCapture:
    """Keeps, per layer, the attention inputs of the last ``window`` prefill positions.

    A forward pre-hook on each attention module records its ``hidden_states`` and the rotary ``(cos, sin)`` it is
    given; the queries are recomputed from them afterwards (q_proj, optional q_norm, RoPE), so nothing in the
    modeling code is patched and the eager ``output_attentions`` path (~13 GB per layer at 16K) is never needed.
    """

    def __init__(self, model, window: int):
        self.window = window
        self.hidden: dict[int, torch.Tensor] = {}
        self.rope: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.handles = [
            layer.self_attn.register_forward_pre_hook(self._hook(i), with_kwargs=True)
            for i, layer in enumerate(decoder_layers(model))
        ]

    def _hook(self, idx: int):
        def hook(module, args, kwargs):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            cos, sin = kwargs["position_embeddings"]
            if idx in self.hidden:  # chunked prefill: roll the window over chunk boundaries
                hidden = torch.cat([self.hidden[idx], hidden], dim=1)
                cos = torch.cat([self.rope[idx][0], cos], dim=1)
                sin = torch.cat([self.rope[idx][1], sin], dim=1)
            self.hidden[idx] = hidden[:, -self.window :].detach()
            self.rope[idx] = (cos[:, -self.window :].detach(), sin[:, -self.window :].detach())

        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def scores(self, model, cache: Cache) -> list[torch.Tensor]:
        """Per layer, a [T] float32 tensor: attention weight each cached position receives, summed over the
        captured queries and over all heads (softmax(q·kᵀ/√d) with the causal mask)."""
        out = []
        for idx, layer in enumerate(decoder_layers(model)):
            attn = layer.self_attn
            head_dim = attn.head_dim
            q = attention_queries(attn, self.hidden[idx], *self.rope[idx])  # [1, H, w, D]
            w = q.shape[2]
            keys, _ = layer_kv(cache, idx)  # [1, H_kv, T, D]
            t = keys.shape[-2]
            keys = keys.repeat_interleave(q.shape[1] // keys.shape[1], dim=1)
            scale = getattr(attn, "scaling", head_dim**-0.5)
            logits = torch.matmul(q.float(), keys.float().transpose(-1, -2)) * scale  # [1, H, w, T]
            query_pos = torch.arange(t - w, t, device=keys.device)[:, None]
            logits = logits.masked_fill(torch.arange(t, device=keys.device)[None, :] > query_pos, float("-inf"))
            out.append(torch.softmax(logits, dim=-1).sum(dim=(0, 1, 2)))
        return out


@torch.no_grad()
def prefill(
    model,
    input_ids: torch.Tensor,
    cache: Cache,
    *,
    chunk_len: int | None = None,
    score_window: int = 0,
    position_offset: int = 0,
):
    """Run ``model`` over ``input_ids`` [1, T] appending to ``cache``, ``chunk_len`` tokens per forward.

    Returns (logits of the last position [1, V], per-layer scores or None). With ``score_window > 0`` the scores
    are the cumulative attention weight each of the T prefix positions receives from the last ``score_window``
    queries of the prefill, heads pooled by summation (what TopKChunks ranks chunks by).
    """
    total = input_ids.shape[1]
    chunk_len = chunk_len or total
    capture = QueryCapture(model, score_window) if score_window > 0 else None
    try:
        logits = None
        for start in range(0, total, chunk_len):
            ids = input_ids[:, start : start + chunk_len]
            positions = torch.arange(start, start + ids.shape[1], device=ids.device)[None] + position_offset
            out = model(input_ids=ids, past_key_values=cache, position_ids=positions, use_cache=True, logits_to_keep=1)
            logits = out.logits[:, -1]
        scores = capture.scores(model, cache) if capture else None
    finally:
        if capture:
            capture.remove()
    return logits, scores


# --------------------------------------------------------------------------------------------------------------
# Sparse policies: which prefix positions the drafter keeps under a budget of B tokens


def check_budget(budget: int, chunk_size: int) -> None:
    if budget <= 0:
        raise ValueError(f"budget must be a positive number of tokens, got {budget}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")


def topk_chunks(scores: torch.Tensor, prefix_len: int, budget: int, chunk_size: int) -> torch.Tensor:
    """TopKChunks: split [0, P) into chunks of ``chunk_size``, score each chunk by the summed attention of its
    tokens, keep ⌊B/s⌋ chunks in original order. B ≥ P keeps everything.

    When P is not a multiple of s, the trailing partial chunk (the P mod s most recent tokens) is always one of
    the kept chunks, so every layer keeps exactly the same number of tokens (≤ B) and the caches of all layers
    stay one length.
    """
    if budget >= prefix_len:
        return torch.arange(prefix_len, device=scores.device)
    n_full, tail = divmod(prefix_len, chunk_size)
    keep = budget // chunk_size
    if keep == 0:
        return torch.arange(0, device=scores.device)
    chunk_scores = scores[: n_full * chunk_size].float().view(n_full, chunk_size).sum(dim=1)
    chunks = torch.topk(chunk_scores, keep - (tail > 0)).indices.sort().values
    idx = (chunks[:, None] * chunk_size + torch.arange(chunk_size, device=scores.device)).flatten()
    return torch.cat([idx, torch.arange(n_full * chunk_size, prefix_len, device=scores.device)])


def streaming(prefix_len: int, budget: int, sinks: int = 4) -> torch.Tensor:
    """StreamingLLM: the first ``sinks`` tokens (attention sinks) plus the most recent B − sinks tokens."""
    if budget >= prefix_len:
        return torch.arange(prefix_len)
    sinks = min(sinks, budget)
    return torch.cat([torch.arange(sinks), torch.arange(prefix_len - (budget - sinks), prefix_len)])


POLICIES = ("topk_chunks", "streaming", "full")


def needs_scores(policy: str) -> bool:
    return policy == "topk_chunks"


def keep_indices(
    policy: str, scores: list[torch.Tensor] | None, prefix_len: int, budget: int, chunk_size: int, num_layers: int
) -> list[torch.Tensor]:
    """Per layer, the sorted prefix positions the drafter keeps."""
    if policy not in POLICIES:
        raise ValueError(f"unknown sparse policy {policy!r}; choose one of {', '.join(POLICIES)}")
    check_budget(budget, chunk_size)
    if policy == "full":
        return [torch.arange(prefix_len)] * num_layers
    if policy == "streaming":
        return [streaming(prefix_len, budget)] * num_layers
    if scores is None:
        raise ValueError("policy 'topk_chunks' needs attention scores: prefill with score_window > 0")
    return [topk_chunks(s, prefix_len, budget, chunk_size) for s in scores]


def gathered_kv(cache: Cache, indices: list[torch.Tensor] | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for i in range(len(cache.layers)):
        k, v = layer_kv(cache, i)
        if indices is not None:
            idx = indices[i].to(k.device)
            k, v = k.index_select(2, idx), v.index_select(2, idx)
        else:
            k, v = k.clone(), v.clone()
        out.append((k.detach(), v.detach()))
    return out


def gathered_cache(cache: Cache, indices: list[torch.Tensor] | None) -> DynamicCache:
    """A new ``DynamicCache`` with the kept positions of ``cache`` (all of them when ``indices`` is None)."""
    return DynamicCache(gathered_kv(cache, indices))
