"""KV caches for drafting and verifying, and the sparse policies that shrink the drafter's prefix cache.

- ``PreallocatedCache``: a ``transformers.Cache`` whose layers write into pre-allocated buffers. Appending and
  rolling back are O(1) in the context length (rollback only moves a position), unlike ``DynamicCache``, which
  appends with ``torch.cat``.
- ``prefill``: chunked prefill that can also score every prefix token by the attention it receives.
- ``keep_indices``: the sparse policies, a registry (``sparse_policy``) of one function each: ``topk_chunks`` (the
  paper's TopKChunks), ``streaming``, ``full``, ``snapkv`` (per-KV-head positions) and ``verifier_guided`` (the
  chunks the verifier attends to).
- ``gathered_cache`` / ``PreallocatedCache.from_kv``: a cache holding only the kept prefix positions (the same
  positions in every head of a layer, or each KV head its own).

After sparsification the cache length no longer equals the real position, so every later forward passes explicit
``position_ids`` (real positions P, P+1, ...) while the cache slots stay contiguous.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicCache


class PreallocatedLayer(CacheLayerMixin):
    """One layer's keys/values in a buffer [B, H_kv, capacity, D]; ``length`` slots are valid.

    Two modes. Growing (the prefill): a forward of q tokens writes slots [length, length + q) and attends over the
    first length + q slots, so its shapes follow the length. Fixed (``PreallocatedCache.fix``, the decode steps): a
    forward writes at the device tensor ``slot`` (``index_copy_``) and attends over the whole buffer with a mask
    (``budgetdraft.decoding.engine.Steps``), so every step of one query length has one shape: planned once, capturable as a
    CUDA graph, and no Python int of the cache is read inside the step."""

    is_sliding = False
    is_croppable = True

    def __init__(self, capacity: int = 256):
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.slot: torch.Tensor | None = None  # fixed mode: [] long, the next slot written (shared by all layers)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(b, h, self.capacity, d)
        self.values = value_states.new_zeros(b, h, self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def _reserve(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        if self.slot is not None:
            raise ValueError(f"a fixed-shape cache of {self.capacity} slots cannot hold {needed}")
        capacity = max(needed, 2 * self.capacity)  # amortised O(1) growth when a run outgrows its estimate
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(*old.shape[:2], capacity, old.shape[-1])
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)
        self.capacity = capacity

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, writes=None, **kwargs):
        """Write the step's keys/values; fixed mode writes them at ``writes`` ([q] slots, computed once a step for
        every layer by the step, ``PreallocatedCache.writes``; else slot … slot + q − 1 here)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.slot is not None:  # fixed mode: the host-side length is advanced by the caller, outside the step
            where = (
                writes
                if writes is not None
                else self.slot + torch.arange(key_states.shape[-2], device=self.slot.device)
            )
            self.keys.index_copy_(2, where, key_states)
            self.values.index_copy_(2, where, value_states)
            return self.keys, self.values
        end = self.length + key_states.shape[-2]
        self._reserve(end)
        self.keys[:, :, self.length : end] = key_states
        self.values[:, :, self.length : end] = value_states
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self.slot is not None:
            return self.capacity, 0
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
        if self.slot is not None:
            self.slot.fill_(self.length)

    def reset(self) -> None:
        self.length = 0


class PreallocatedCache(Cache):
    """A per-layer pre-allocated KV cache; ``truncate(n)`` rolls back to the first ``n`` slots in O(1)."""

    def __init__(self, num_layers: int, capacity: int = 256):
        super().__init__(layers=[PreallocatedLayer(capacity) for _ in range(num_layers)])
        self.slot: torch.Tensor | None = None  # fixed mode (``fix``): [] long on the cache's device
        self.position_offset: torch.Tensor | None = None  # fixed mode: real position − slot (a sparse drafter's gap)
        self.slot_index: torch.Tensor | None = None  # fixed mode: [1, 1, 1, capacity] long, 0 … capacity − 1
        self.mask_values: tuple[torch.Tensor, torch.Tensor] | None = None  # fixed mode: 0 and −inf, the KV's dtype
        self.writes: torch.Tensor | None = None  # fixed mode, set by each step: [q] the slots its queries write

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """A layer's write: in fixed mode at the step's ``writes`` (one index for every layer, not one a layer)."""
        return self.layers[layer_idx].update(key_states, value_states, writes=self.writes)

    @classmethod
    def from_kv(cls, kv: list[tuple[torch.Tensor, torch.Tensor]], capacity: int) -> PreallocatedCache:
        """A cache holding the given per-layer keys/values [B, H_kv, T, D], with room for ``capacity`` entries."""
        cache = cls(len(kv), capacity)
        cache.load(kv)
        return cache

    def load(self, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Hold exactly the given per-layer keys/values, written into the buffers already allocated when they fit
        (their addresses stay: a captured CUDA graph keeps reading them), else into new ones."""
        self.release()
        for layer, (k, v) in zip(self.layers, kv):
            layer.length = 0
            if layer.is_initialized and k.shape[-2] > layer.capacity:
                layer.is_initialized = False
            layer.capacity = max(layer.capacity, k.shape[-2])
            layer.update(k, v)

    def empty_layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, keys and values [B, H_kv, 0, D] of its buffers' dtype and device, holding none of their memory:
        what another cache of the same model allocates its buffers from (``allocate``) before a prefill writes."""
        return [(layer.keys.new_empty(layer.keys.shape[:2] + (0,) + layer.keys.shape[3:]),
                 layer.values.new_empty(layer.values.shape[:2] + (0,) + layer.values.shape[3:]))
                for layer in self.layers]  # fmt: skip

    def allocate(self, empty_layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Allocate every layer's buffers now, at this cache's capacity, shaped as ``empty_layers`` (keys, values)."""
        for layer, (keys, values) in zip(self.layers, empty_layers, strict=True):
            layer.lazy_initialization(keys, values)

    def fix(self, position_offset: int = 0) -> None:
        """Enter fixed-shape mode at the current length (every layer holds the same number of slots); the slot
        written next, and real position − slot, are device tensors that the decode steps read and advance."""
        length = self.layers[0].length
        device = self.layers[0].keys.device
        if self.slot is None or self.slot.device != device:
            self.slot = torch.zeros((), dtype=torch.long, device=device)
            self.position_offset = torch.zeros((), dtype=torch.long, device=device)
        if self.slot_index is None or self.slot_index.device != device or self.slot_index.shape[-1] != self.capacity:
            self.slot_index = torch.arange(self.capacity, device=device).view(1, 1, 1, self.capacity)
        dtype = self.layers[0].keys.dtype
        if self.mask_values is None or self.mask_values[0].device != device or self.mask_values[0].dtype != dtype:
            self.mask_values = (
                torch.zeros((), dtype=dtype, device=device),
                torch.full((), -torch.inf, dtype=dtype, device=device),
            )
        self.slot.fill_(length)
        self.position_offset.fill_(position_offset)
        for layer in self.layers:
            if layer.length != length:
                raise ValueError(f"fixed mode needs equal layer lengths, got {layer.length} and {length}")
            layer.slot = self.slot

    def release(self) -> None:
        """Back to growing mode (a new prefill): the device tensors stay, for the next ``fix``."""
        for layer in self.layers:
            layer.slot = None

    def advance(self, tokens: int) -> None:
        """Fixed mode, after a step of ``tokens`` queries: the host-side lengths follow the device slot (which the
        step advanced itself)."""
        for layer in self.layers:
            layer.length += tokens

    @property
    def capacity(self) -> int:
        return self.layers[0].capacity

    def truncate(self, length: int) -> None:
        for layer in self.layers:
            if length > layer.length:
                raise ValueError(f"cannot truncate a cache of {layer.length} entries to {length}")
            layer.length = length
        if self.slot is not None:
            self.slot.fill_(length)

    def kv(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[layer_idx]
        return layer.keys[:, :, : layer.length], layer.values[:, :, : layer.length]


class ReadOnlyLayer(CacheLayerMixin):
    """Keys/values [B, H_kv, T, D] seen through without being written: ``update`` returns them with the new
    entries appended (a copy) and keeps nothing, so the tensors it was given, a view into another cache, never
    change."""

    is_sliding = False
    is_croppable = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.keys, self.values = keys, values
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2] + query_length, 0

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]

    def get_max_length(self) -> int:
        return -1


def read_only_view(cache: Cache, length: int) -> Cache:
    """The first ``length`` positions of every layer of ``cache``, as a cache a forward can attend to without
    writing into ``cache`` (``ReadOnlyLayer``)."""
    return Cache(layers=[ReadOnlyLayer(k[:, :, :length], v[:, :, :length]) for k, v in all_layer_kv(cache)])


def all_layer_kv(cache: Cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [layer_kv(cache, i) for i in range(len(cache.layers))]


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

    def probabilities(self, model, cache: Cache):
        """Per layer, the attention weights [1, H, w, T] (float32) of the captured queries on the T cached positions
        (softmax(q·kᵀ/√d) with the causal mask; the captured queries are the last w of the T), and H_kv."""
        for idx, layer in enumerate(decoder_layers(model)):
            attn = layer.self_attn
            head_dim = attn.head_dim
            q = attention_queries(attn, self.hidden[idx], *self.rope[idx])  # [1, H, w, D]
            w = q.shape[2]
            keys, _ = layer_kv(cache, idx)  # [1, H_kv, T, D]
            t, kv_heads = keys.shape[-2], keys.shape[1]
            keys = keys.repeat_interleave(q.shape[1] // kv_heads, dim=1)
            scale = getattr(attn, "scaling", head_dim**-0.5)
            logits = torch.matmul(q.float(), keys.float().transpose(-1, -2)) * scale  # [1, H, w, T]
            query_pos = torch.arange(t - w, t, device=keys.device)[:, None]
            logits = logits.masked_fill(torch.arange(t, device=keys.device)[None, :] > query_pos, float("-inf"))
            yield torch.softmax(logits, dim=-1), kv_heads

    def scores(self, model, cache: Cache) -> list[torch.Tensor]:
        """Per layer, a [T] float32 tensor: attention weight each cached position receives, summed over the
        captured queries and over all heads."""
        return [probs.sum(dim=(0, 1, 2)) for probs, _ in self.probabilities(model, cache)]

    def head_scores(self, model, cache: Cache) -> list[torch.Tensor]:
        """Per layer, a [H_kv, T] float32 tensor: the same weights summed over the captured queries and over the
        query heads that share each KV head (what a per-head policy ranks a KV head's positions by)."""
        out = []
        for probs, kv_heads in self.probabilities(model, cache):
            _, h, w, t = probs.shape
            out.append(probs[0].view(kv_heads, h // kv_heads, w, t).sum(dim=(1, 2)))
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
    per_head: bool = False,
):
    """Run ``model`` over ``input_ids`` [1, T] appending to ``cache``, ``chunk_len`` tokens per forward.

    Returns (logits of the last position [1, V], per-layer scores or None). With ``score_window > 0`` the scores
    are the cumulative attention weight each of the T prefix positions receives from the last ``score_window``
    queries of the prefill, heads pooled by summation (what TopKChunks ranks chunks by): [T] per layer, or with
    ``per_head`` [H_kv, T] per layer, the query heads of each KV head pooled.
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
        scores = None if capture is None else (capture.head_scores if per_head else capture.scores)(model, cache)
    finally:
        if capture:
            capture.remove()
    return logits, scores


@torch.no_grad()
def window_scores(model, cache: Cache, input_ids: torch.Tensor, window: int) -> list[torch.Tensor]:
    """The scores ``prefill(..., score_window=window)`` gives (per layer [T]), for a model whose ``cache`` already
    holds the prefill of ``input_ids`` [1, T], computed afterwards without writing into ``cache``.

    The last w prompt tokens are run again over a read-only view of the first T − w cached positions (so their
    queries are captured), then scored against the cached keys. A verifier's cache stays bit for bit what it was:
    decoding with it stays lossless. Costs one forward of w tokens over T − w positions."""
    t = input_ids.shape[1]
    if cache.get_seq_length() != t:
        raise ValueError(f"the cache holds {cache.get_seq_length()} positions, not the prompt's {t}")
    w = min(window, t)
    capture = QueryCapture(model, w)
    try:
        model.get_decoder()(
            input_ids=input_ids[:, t - w :],
            past_key_values=read_only_view(cache, t - w),
            position_ids=torch.arange(t - w, t, device=input_ids.device)[None],
            use_cache=True,
        )
        return capture.scores(model, cache)
    finally:
        capture.remove()


# --------------------------------------------------------------------------------------------------------------
# Sparse policies: which prefix positions the drafter keeps under a budget of B tokens
#
# A policy is one function registered with ``@sparse_policy(name, needs=...)``: it gets a ``PolicyInputs`` and
# returns, per drafter layer, the kept prefix positions: a 1-D tensor [n] (every KV head keeps them) or a 2-D
# tensor [H_kv, n] (each KV head its own n positions). Every layer keeps the same n ≤ B (all of [0, P) when
# B ≥ P); keys were cached after RoPE, so a kept key carries its real position wherever it lands in the cache.


def gathered_kv(cache: Cache, indices: list[torch.Tensor] | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, copies of the keys/values at ``indices[layer]``: [n] positions kept by every head
    (``index_select``), or [H_kv, n], each KV head its own (``gather``); all of them when ``indices`` is None."""
    out = []
    for i in range(len(cache.layers)):
        k, v = layer_kv(cache, i)
        if indices is not None and indices[i].dim() == 2:
            idx = indices[i].to(k.device)
            if idx.shape[0] != k.shape[1]:
                raise ValueError(f"layer {i}: per-head indices for {idx.shape[0]} heads, the cache has {k.shape[1]}")
            rows = idx[None, :, :, None].expand(k.shape[0], -1, -1, k.shape[-1])
            k, v = k.gather(2, rows), v.gather(2, rows[..., :1].expand(-1, -1, -1, v.shape[-1]))
        elif indices is not None:
            idx = indices[i].to(k.device)
            k, v = k.index_select(2, idx), v.index_select(2, idx)
        else:
            k, v = k.clone(), v.clone()
        out.append((k.detach(), v.detach()))
    return out


def gathered_cache(cache: Cache, indices: list[torch.Tensor] | None) -> DynamicCache:
    """A new ``DynamicCache`` with the kept positions of ``cache`` (all of them when ``indices`` is None)."""
    return DynamicCache(gathered_kv(cache, indices))
