"""TriForce (Sun et al. 2024): hierarchical, lossless greedy speculation with a retrieval cache.

Three levels, all greedy:
  1. the small drafter (the cell's ``drafter``, our untrained drafter) on a StreamingLLM cache (``sinks`` attention-sink
     tokens + the most recent tokens, ``streaming_budget`` in all; evicted again after every round) proposes
     ``gamma_inner`` tokens;
  2. the *verifier model* on a retrieval cache checks them in one forward and keeps the agreeing prefix + its own
     next token; this repeats until it has produced γ tokens, which are the draft handed to
  3. the verifier on its full cache (``budgetdraft.decoding.speculative``), whose acceptance/τ are the cell's.

Retrieval cache (TriForce ``RetrievalCache``): the verifier's prefix KV (the outer verifier's own cache, handed to
``prefill`` with its last prompt queries: ``budgetdraft.decoding.drafter.VerifierPrefill``, no second prefill) is split into chunks of ``chunk_size``; a chunk's key
is the mean of its keys (after RoPE); chunks are scored per KV head by q·k̄ with the query of the last prompt
token (the scores of the query heads of a GQA group are summed), and each KV head keeps its own top chunks: the
first chunk always, a partial last chunk (P not a multiple of the chunk size) whenever the budget has ≥ 2 chunks, and the best others up to
⌊retrieval_budget / chunk_size⌋ chunks in all (so ≤ retrieval_budget tokens). Built once after prefill. The
tokens generated later enter it with the full cache's KV (TriForce ``update_graph_cache``); unlike TriForce they
are appended instead of overwriting the lowest-ranked chunks, so the prefix part keeps its budget.

Differences from TriForce's code: greedy only (no sampling / residual resampling), no CUDA graphs or offloading,
``gamma_inner`` drafts per retrieval verify (TriForce's ``Middle_Spec`` drafts 1 token per retrieval forward,
which gives 1–2 tokens each: ``gamma_inner: 1`` is that rule; its ``gamma`` = 6 is the retrieval level's draft
length, our cell's γ), the small drafter is prefilled on the whole prompt and then cut to sinks + recent (TriForce
evicts while prefilling). The cell's ``budget`` (B) is not used: TriForce's budgets are its ``extra`` keys.
"""

from __future__ import annotations

import torch

from budgetdraft.base.defaults import TRIFORCE_DEFAULTS
from budgetdraft.decoding.drafter import GreedyDrafter, Reads, VerifierPrefill
from budgetdraft.decoding.draftspec import DraftSpec
from budgetdraft.decoding.kvcache import PreallocatedCache, num_layers, prefill
from budgetdraft.decoding.metrics import cache_bytes, module_tensors
from budgetdraft.decoding.policies import streaming
from budgetdraft.decoding.verifier import ids_tensor, position_range

DEFAULTS = dict(TRIFORCE_DEFAULTS)  # one home: budgetdraft.base.defaults, which the config check reads too


def retrieval_indices(keys: torch.Tensor, query: torch.Tensor, budget: int, chunk_size: int) -> torch.Tensor:
    """Per KV head, the sorted prefix positions kept: [H_kv, K] (K ≤ budget, the same for every head).

    keys [1, H_kv, P, D] (after RoPE); query [1, H_q, 1, D] (after RoPE) of the last prompt token."""
    _, h_kv, p, d = keys.shape
    n_full, tail = divmod(p, chunk_size)
    n_chunks = n_full + (tail > 0)
    select = max(budget // chunk_size, 1)
    if n_chunks <= select:
        return torch.arange(p, device=keys.device).expand(h_kv, p)
    chunk_keys = keys[0, :, : n_full * chunk_size].float().view(h_kv, n_full, chunk_size, d).mean(dim=2)
    q = query[0, :, 0].float().view(h_kv, -1, d)  # [H_kv, group, D]
    scores = torch.einsum("hgd,hcd->hc", q, chunk_keys)  # summed over the group's query heads
    keep_tail = tail > 0 and select >= 2
    others = select - 1 - keep_tail  # first chunk (and a partial last one, budget allowing) are always kept
    top = torch.topk(scores[:, 1:], others, dim=-1).indices + 1 if others > 0 else scores.new_zeros(h_kv, 0).long()
    chunks = torch.cat([torch.zeros(h_kv, 1, dtype=torch.long, device=keys.device), top], dim=1).sort(-1).values
    idx = (chunks[:, :, None] * chunk_size + torch.arange(chunk_size, device=keys.device)).flatten(1)
    if keep_tail:
        idx = torch.cat([idx, torch.arange(n_full * chunk_size, p, device=keys.device).expand(h_kv, tail)], 1)
    return idx


def _gather_heads(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """t [1, H, T, D], idx [H, K] -> [1, H, K, D]."""
    return torch.gather(t, 2, idx[None, :, :, None].expand(1, -1, -1, t.shape[-1])).contiguous()


class TriForceDrafter(GreedyDrafter):
    """A drafter for ``speculative`` (``budgetdraft.decoding.drafter.Drafter``): ``draft`` runs the inner small-drafter ↔
    retrieval-verifier loop."""

    reads = Reads(last_queries=True)  # and the verifier's prefix cache, which every VerifierPrefill holds
    owns_full = False  # the full prefix cache it reads is the verifier's own (VerifierPrefill.cache), never a copy

    def __init__(
        self,
        verifier,
        small,
        retrieval_budget=DEFAULTS["retrieval_budget"],
        streaming_budget=DEFAULTS["streaming_budget"],
        sinks=DEFAULTS["sinks"],
        chunk_size=DEFAULTS["chunk_size"],
        gamma_inner=DEFAULTS["gamma_inner"],
        prefill_chunk=None,
    ):
        if retrieval_budget < chunk_size or chunk_size < 1:
            raise ValueError(f"retrieval_budget {retrieval_budget} must be >= chunk_size {chunk_size} >= 1")
        if not 0 <= sinks < streaming_budget:
            raise ValueError(f"sinks {sinks} must be in [0, streaming_budget {streaming_budget})")
        if gamma_inner < 1:
            raise ValueError(f"gamma_inner must be >= 1, got {gamma_inner}")
        self.verifier, self.model, self.device = verifier, small, small.device
        self.retrieval_budget, self.streaming_budget, self.sinks = retrieval_budget, streaming_budget, sinks
        self.chunk_size, self.gamma_inner, self.prefill_chunk = chunk_size, gamma_inner, prefill_chunk
        # forwards of each inner level (the cell's acceptance/τ are the outer level's)
        self.retrieval_forwards = self.small_forwards = 0

    # ------------------------------------------------------------------------------------------ prefill
    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, capacity: int, verifier: VerifierPrefill) -> None:
        p = self.prompt_len = prompt.shape[1]
        full = self.full_cache = verifier.cache  # the verifier's own cache: read here, never written
        kv, self.kept = [], []
        for i in range(num_layers(self.verifier)):
            keys, values = full.layers[i].keys[:, :, :p], full.layers[i].values[:, :, :p]
            q = verifier.last_queries[i]  # the last prompt token's, [1, H, 1, D]
            idx = retrieval_indices(keys, q, self.retrieval_budget, self.chunk_size)
            self.kept.append(idx)
            kv.append((_gather_heads(keys, idx), _gather_heads(values, idx)))
        self.r_prefix = kv[0][0].shape[2]
        self.retrieval = PreallocatedCache.from_kv(kv, self.r_prefix + capacity + self.gamma_inner + 1)
        self.copied = 0  # generated tokens whose full-cache KV is in the retrieval cache
        # small drafter: full prefill, then StreamingLLM (sinks + recent)
        small_full = PreallocatedCache(num_layers(self.model), p)
        prefill(self.model, prompt.to(self.device), small_full, chunk_len=self.prefill_chunk)
        idx = streaming(p, self.streaming_budget, self.sinks).to(self.device)
        skv = [
            (
                small_full.layers[i].keys[:, :, :p].index_select(2, idx),
                small_full.layers[i].values[:, :, :p].index_select(2, idx),
            )
            for i in range(num_layers(self.model))
        ]
        self.small = PreallocatedCache.from_kv(skv, self.streaming_budget + capacity + self.gamma_inner + 1)
        self.s_tokens: list[int] = []  # generated tokens the small cache holds (logically)
        self.s_base_phys, self.s_base_tok = len(idx), 0
        self.committed: list[int] = []  # tokens emitted by the outer loop so far (= its `out`)
        self.last_drafts: list[int] = []

    # ------------------------------------------------------------------------------------------ small drafter
    def _small_sync(self, context: list[int], evict: bool) -> None:
        """Make the small cache hold a prefix of ``context`` (truncate to the common prefix); with ``evict`` (only
        when ``context`` holds nothing but emitted tokens, so no later truncation reaches below) evict down to
        sinks + recent."""
        n = 0
        while n < min(len(self.s_tokens), len(context)) and self.s_tokens[n] == context[n]:
            n += 1
        if n < self.s_base_tok:
            raise AssertionError("small-drafter rollback below its last eviction")
        self.small.truncate(self.s_base_phys + n - self.s_base_tok)
        self.s_tokens = self.s_tokens[:n]
        length = self.small.get_seq_length()
        if evict and length > self.streaming_budget:  # StreamingLLM eviction: keep sinks + the most recent tokens
            recent = self.streaming_budget - self.sinks
            for layer in self.small.layers:
                for name in ("keys", "values"):
                    buf = getattr(layer, name)
                    buf[:, :, self.sinks : self.sinks + recent] = buf[:, :, length - recent : length].clone()
            self.small.truncate(self.streaming_budget)
            self.s_base_phys, self.s_base_tok = self.streaming_budget, n

    def _small_draft(self, context: list[int], n: int, evict: bool) -> list[int]:
        self._small_sync(context, evict)
        feed, drafts = context[len(self.s_tokens) :], []
        for _ in range(n):
            start = self.prompt_len + len(self.s_tokens)
            logits = self.model(
                input_ids=ids_tensor(feed, self.device),
                past_key_values=self.small,
                position_ids=position_range(start, len(feed), self.device),
                use_cache=True,
                logits_to_keep=1,
            ).logits
            self.small_forwards += 1
            self.s_tokens += feed
            feed = [int(logits[0, -1].argmax())]
            drafts.append(feed[0])
        return drafts

    # ------------------------------------------------------------------------------------------ the interface
    @torch.no_grad()
    def draft(self, pending: list[int], gamma: int) -> list[int]:
        if not self.committed:
            self.committed = list(pending)
        if self.committed[-len(pending) :] != list(pending):
            raise AssertionError(f"pending {pending} is not the end of the emitted tokens")
        vdev = self.verifier.device
        produced: list[int] = []
        r_feed = [self.committed[-1]]
        r_pos = self.prompt_len + len(self.committed) - 1
        while len(produced) < gamma:
            g = min(self.gamma_inner, gamma - len(produced) - 1)
            small = self._small_draft(self.committed + produced, g, not produced) if g > 0 else []
            base = self.retrieval.get_seq_length()
            fed = r_feed + small
            logits = self.verifier(
                input_ids=ids_tensor(fed, vdev),
                past_key_values=self.retrieval,
                position_ids=position_range(r_pos, len(fed), vdev),
                use_cache=True,
                logits_to_keep=len(small) + 1,
            ).logits
            self.retrieval_forwards += 1
            choice = logits[0].argmax(-1).tolist()
            k = 0
            while k < len(small) and small[k] == choice[k]:
                k += 1
            self.retrieval.truncate(base + len(r_feed) + k)
            r_pos += len(r_feed) + k
            produced += small[:k] + [choice[k]]
            r_feed = [choice[k]]
        self.last_drafts = produced
        return produced

    def rollback(self, kept_new: int) -> None:
        """Nothing to do: both inner caches are re-synchronised from the emitted tokens (``after_verify``)."""

    @torch.no_grad()
    def after_verify(self, verifier_output, accepted: int, bonus: int) -> None:
        if not self.committed:
            raise AssertionError("after_verify before the first draft")
        self.committed += self.last_drafts[:accepted] + [bonus]
        self.last_drafts = []
        # retrieval cache: drop the inner-level tokens, append the full cache's KV of the newly verified ones
        full = getattr(verifier_output, "past_key_values", None)
        full = self.full_cache if full is None else full
        end = full.get_seq_length()
        self.retrieval.truncate(self.r_prefix + self.copied)
        start = self.prompt_len + self.copied
        for layer, src in zip(self.retrieval.layers, full.layers):
            layer.update(src.keys[:, :, start:end], src.values[:, :, start:end])
        self.copied = end - self.prompt_len

    def kv_bytes(self) -> int:
        """The retrieval and StreamingLLM caches (the full prefix cache it reads is the verifier's, counted there)."""
        return cache_bytes(self.retrieval) + cache_bytes(self.small)

    def weight_tensors(self):
        return module_tensors(self.model)  # the small drafter; the retrieval level runs the verifier's weights


def settings(draft: DraftSpec, extra: dict) -> dict:
    """TriForce's settings of a drafter: ``DEFAULTS``, the drafter's chunk size, its ``extra`` on top."""
    unknown = set(extra) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown triforce settings {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    out = {**DEFAULTS, "chunk_size": draft.chunk_size, **extra}
    return {k: int(v) for k, v in out.items()}


def drafter_factory(verifier, draft: DraftSpec, extra: dict, load=None):
    """``eval-cell`` method triforce: its small drafter loaded once by ``load`` (default ``load_model``); returns ()
    -> a fresh TriForce drafter per run."""
    from budgetdraft.decoding.loading import load_model

    small = (load or load_model)(draft.drafter, draft.device, draft.drafter_dtype)
    cfg = settings(draft, extra or {})
    return lambda: TriForceDrafter(verifier, small, **cfg)
