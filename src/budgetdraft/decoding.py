"""Greedy decoding: AR with a full cache, and speculative decoding with a sparse drafter (Algorithm 2).

Speculative decoding is lossless: every emitted token is the verifier's own greedy choice given everything
before it, so the output equals ``autoregressive(...)`` token for token (up to float ties between a batched
verify and single-token steps, ~1e-6 in the logits).

Sampling mode (``sampling=Sampling(...)``, ``budgetdraft.sampling``): AR draws every token from the verifier's
sampling distribution p; speculative decoding draws drafts from the drafter's q and keeps them by the speculative
sampling rule, so its output has AR's distribution (not its tokens). ``sampling=None`` is the greedy code path.

Cache invariants of ``speculative``, with ``out`` the tokens emitted so far:
  verifier cache = prompt + out[:-1]                 (out[-1] is fed at the next verify)
  drafter cache  = sparse(prompt) + out[:-len(pending)]   (pending: emitted but not yet seen by the drafter)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field

import torch

from budgetdraft.drafter import READS_NOTHING, Drafter, PrefillCapture, Reads, VerifierPrefill
from budgetdraft.draftvocab import ReducedHead, load_vocab
from budgetdraft.kvcache import (
    POLICIES,
    PolicyInputs,
    PreallocatedCache,
    check_budget,
    gathered_kv,
    get_policy,
    keep_indices,
    num_layers,
    prefill,
    window_scores,
)
from budgetdraft.metrics import (
    DecodeStats,
    Stopwatch,
    cache_bytes,
    module_tensors,
    peak_memory,
    reset_peak_memory,
    storage_bytes,
)
from budgetdraft.sampling import Sampler, Sampling, add_sampling_flags, sampling_from_args


@dataclass
class Generation:
    tokens: list[int]
    stats: DecodeStats
    # greedy AR only: the verifier's second choice and its top-1 − top-2 logit margin at each token (NaN where
    # the logits are unknown): a run that differs from this one first at a near-tie is not a decoding bug
    runner_up: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)


def top2(logits: torch.Tensor) -> tuple[int, float]:
    """The runner-up token of ``logits`` [V] and the top-1 − top-2 margin."""
    values, ids = logits.float().topk(2)
    return int(ids[1]), float(values[0] - values[1])


def position_range(start: int, length: int, device) -> torch.Tensor:
    return torch.arange(start, start + length, device=device)[None]  # [1, q]


def ids_tensor(tokens: list[int], device) -> torch.Tensor:
    return torch.tensor([tokens], dtype=torch.long, device=device)  # [1, q]


def prompt_key(prompt_ids) -> str:
    """A short content hash of a prompt's token ids (a shared verifier prefill is found by it)."""
    return hashlib.sha256(torch.as_tensor(prompt_ids, dtype=torch.int64).cpu().numpy().tobytes()).hexdigest()[:16]


@dataclass
class SharedPrefill:
    """The verifier's prefill of one prompt, computed once (``budgetdraft prefill``): its KV cache per layer, the
    greedy first token, and the seconds it took, which every run that reuses it is charged; ``logits`` [V] of the
    last prompt position let sampling mode draw the first token (None in files written without them)."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    first_token: int
    seconds: float
    logits: torch.Tensor | None = None


def check_request(model, prompt_len: int, max_new_tokens: int) -> None:
    limit = getattr(model.config, "max_position_embeddings", None)
    if prompt_len < 1:
        raise ValueError("prompt is empty")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if limit and prompt_len + max_new_tokens > limit:
        raise ValueError(
            f"prompt of {prompt_len} tokens + max_new_tokens {max_new_tokens} exceeds the verifier's "
            f"max_position_embeddings {limit}"
        )


def _eos_ids(model, eos_token_id) -> set[int]:
    eos = model.generation_config.eos_token_id if eos_token_id is None else eos_token_id
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}


def _finish(out: list[int], max_new_tokens: int, eos: set[int]) -> tuple[list[int], bool]:
    """Cut ``out`` after the first EOS or at ``max_new_tokens``; True when generation is over."""
    for i, tok in enumerate(out[:max_new_tokens]):
        if tok in eos:
            return out[: i + 1], True
    return out[:max_new_tokens], len(out) >= max_new_tokens


class Verifier:
    """The big model on a full, pre-allocated cache.

    ``prefilled`` (prompt_key -> SharedPrefill) holds prefills computed once for many runs: a prompt found there
    is not recomputed, its cache is copied in and ``recorded_prefill_s`` says what the prefill cost when it ran."""

    def __init__(self, model, prefill_chunk: int | None = None, prefilled: dict[str, SharedPrefill] | None = None):
        self.model = model
        self.prefill_chunk = prefill_chunk
        self.prefilled = prefilled or {}
        self.device = model.device

    def prefill(
        self, prompt: torch.Tensor, capacity: int, sampler: Sampler | None = None, reads: Reads = READS_NOTHING
    ) -> int:
        """Prefill the prompt [1, P]; returns the first new token: greedy, or drawn by ``sampler``
        (``self.last_logits`` [V] keeps the logits it comes from). What a drafter ``reads`` of this prefill is
        recorded while it runs (``self.captured``; None for a prefill copied in from a shared file)."""
        self.length = prompt.shape[1]
        self.captured = None
        shared = self.prefilled.get(prompt_key(prompt[0])) if self.prefilled else None
        if shared is not None:
            self.cache = PreallocatedCache.from_kv(shared.kv, capacity)
            self.recorded_prefill_s = shared.seconds
            self.last_logits = shared.logits
            if sampler is None:
                return shared.first_token
            if shared.logits is None:
                raise ValueError(
                    "the shared verifier prefill holds no first-token logits, which sampling needs: "
                    "rebuild it with `budgetdraft prefill`"
                )
            return sampler.sample(shared.logits)[0]
        self.cache = PreallocatedCache(num_layers(self.model), capacity)
        with PrefillCapture(self.model, reads) as self.captured:
            logits, _ = prefill(self.model, prompt, self.cache, chunk_len=self.prefill_chunk)
        self.recorded_prefill_s = None
        self.last_logits = logits[0]
        return int(logits.argmax(-1)) if sampler is None else sampler.sample(logits[0])[0]

    @torch.no_grad()
    def hidden(self, tokens: list[int], output_hidden_states: bool = False):
        """Feed ``tokens`` (real positions continue the cache) through the decoder, without the LM head: returns
        ``last_hidden_state`` [1, q, H], the optional per-layer ``hidden_states`` and ``past_key_values``;
        ``greedy`` / ``verify`` apply the head to the rows they need."""
        out = self.model.get_decoder()(
            input_ids=ids_tensor(tokens, self.device),
            past_key_values=self.cache,
            position_ids=position_range(self.length, len(tokens), self.device),
            use_cache=True,
            output_hidden_states=output_hidden_states,
        )
        self.length += len(tokens)
        return out

    @torch.no_grad()
    def greedy(self, hidden: torch.Tensor) -> list[int]:
        """The verifier's greedy token after each row of ``hidden`` [1, q, H] (argmax of the LM head; the logit
        soft-capping or scaling some models apply after it is monotonic and cannot change the argmax)."""
        return self.model.get_output_embeddings()(hidden)[0].argmax(-1).tolist()

    @torch.no_grad()
    def greedy_top2(self, hidden: torch.Tensor) -> tuple[int, int, float]:
        """The greedy token after the last row of ``hidden``, its runner-up and their logit margin."""
        logits = self.model.get_output_embeddings()(hidden[:, -1:])[0, 0]
        return int(logits.argmax()), *top2(logits)

    def verify(self, hidden: torch.Tensor, drafts: list[int]) -> tuple[int, int]:
        """Accepted drafts k and the bonus token (the verifier's own choice after them), from the decoder output
        of [last emitted token] + drafts. The head runs on the first row alone and on the other rows only when the
        first draft survives: on CPU the head over a 49K vocabulary costs ~2× as much for 6 rows as for 1, and at
        low acceptance most rounds end at the first row."""
        first = self.greedy(hidden[:, :1])[0]
        if not drafts or drafts[0] != first:
            return 0, first
        choice = [first] + self.greedy(hidden[:, 1:])
        k = 1
        while k < len(drafts) and drafts[k] == choice[k]:
            k += 1
        return k, choice[k]

    @torch.no_grad()
    def distributions(self, hidden: torch.Tensor, sampler: Sampler) -> torch.Tensor:
        """p [q, V]: the verifier's sampling distribution after each row of ``hidden`` [1, q, H]."""
        return sampler.distribution(self.model.get_output_embeddings()(hidden)[0])

    def sample(self, hidden: torch.Tensor, sampler: Sampler) -> int:
        """A token drawn from p after the last row of ``hidden`` (AR sampling)."""
        return sampler.draw(self.distributions(hidden[:, -1:], sampler)[0])

    def verify_sampled(
        self, hidden: torch.Tensor, drafts: list[int], q: torch.Tensor | None, sampler: Sampler
    ) -> tuple[int, int]:
        """``verify`` for sampling mode: accepted drafts k and the next token by the speculative sampling rule
        (``Sampler.speculative_step``), q [γ, V] the drafter's distributions the drafts were drawn from."""
        p = self.distributions(hidden, sampler)
        return sampler.speculative_step(p, q, drafts) if drafts else (0, sampler.draw(p[0]))

    def rollback(self, length: int) -> None:
        self.cache.truncate(length)
        self.length = length

    def prefill_state(self, prompt: torch.Tensor, reads: Reads) -> VerifierPrefill:
        """What a drafter ``reads`` of this prefill, right after it: the layer outputs and last queries recorded
        while it ran or, for a prefill copied in from a shared file, recorded by running the prompt through the
        verifier once more (into a scratch cache, dropped after); the window scores read its cache."""
        captured, self.captured = self.captured, None  # handed over once, not kept for the whole generation
        if captured is None and (reads.layers or reads.last_queries):
            scratch = PreallocatedCache(num_layers(self.model), prompt.shape[1])
            with PrefillCapture(self.model, reads) as captured:
                prefill(self.model, prompt.to(self.device), scratch, chunk_len=self.prefill_chunk)
        window = self.window_scores(prompt, reads.window_scores) if reads.window_scores else None
        if captured is None:
            return VerifierPrefill(self.cache, window_scores=window)
        return VerifierPrefill(self.cache, captured.layer_outputs(), captured.last_queries(), window)

    def window_scores(self, prompt: torch.Tensor, window: int) -> torch.Tensor:
        """[P]: the attention the last ``window`` prompt tokens pay to every prompt position, summed over the
        verifier's layers and heads, right after ``prefill`` (its cache is read, never written)."""
        if self.length != prompt.shape[1]:
            raise ValueError(f"window_scores: the verifier is at position {self.length}, past the prompt")
        return torch.stack(window_scores(self.model, self.cache, prompt.to(self.device), window)).sum(dim=0)

    def kv_bytes(self) -> int:
        return cache_bytes(self.cache)


class SparseDrafter:
    """The paper's drafter: a small causal LM whose prefix cache is cut to a budget of B tokens by a policy
    (a ``budgetdraft.drafter.Drafter``)."""

    samples = True

    def __init__(
        self,
        model,
        budget: int,
        policy: str = "topk_chunks",
        chunk_size: int = 8,
        score_window: int = 32,
        prefill_chunk: int | None = None,
        draft_vocab: torch.Tensor | None = None,
    ):
        """``draft_vocab``: token ids the drafter may propose (`budgetdraft.draftvocab`); None = all of them."""
        check_budget(budget, chunk_size)
        self.needs = get_policy(policy).needs
        self.model, self.budget, self.policy = model, budget, policy
        self.chunk_size, self.score_window, self.prefill_chunk = chunk_size, score_window, prefill_chunk
        self.device = model.device
        self.head = None if draft_vocab is None else ReducedHead(model, draft_vocab)
        # a policy that ranks the prompt by the verifier's attention reads its window scores
        self.reads = Reads(window_scores=score_window if "verifier_scores" in self.needs else 0)

    def prefill(self, prompt: torch.Tensor, capacity: int, verifier: VerifierPrefill | None = None) -> None:
        """Prefill the full prompt once, then keep only the policy's positions (explicit real positions later);
        ``verifier``: the verifier's prefill, for a policy that needs its scores."""
        prompt_len = prompt.shape[1]
        full = PreallocatedCache(num_layers(self.model), prompt_len)
        per_head = "head_scores" in self.needs
        window = self.score_window if per_head or "scores" in self.needs else 0
        _, scores = prefill(
            self.model, prompt, full, chunk_len=self.prefill_chunk, score_window=window, per_head=per_head
        )
        observed = {}
        if per_head:
            observed["head_scores"] = scores
            if "scores" in self.needs:
                observed["scores"] = [s.sum(dim=0) for s in scores]
        elif scores is not None:
            observed["scores"] = scores
        if self.reads.window_scores:
            if verifier is None or verifier.window_scores is None:
                raise ValueError(
                    f"policy {self.policy!r} reads the verifier's attention: prefill(..., verifier=its prefill_state)"
                )
            observed["verifier_scores"] = verifier.window_scores.to(self.device)
        inputs = PolicyInputs(
            prompt_len, self.budget, self.chunk_size, num_layers(self.model), self.score_window, **observed
        )
        idx = keep_indices(self.policy, inputs)  # every layer keeps the same number of positions (checked)
        self.cache = PreallocatedCache.from_kv(gathered_kv(full, idx), idx[0].shape[-1] + capacity)
        self.position = prompt_len  # real position of the next token fed

    def draft(self, pending: list[int], gamma: int) -> list[int]:
        """Feed the ``pending`` tokens, then propose ``gamma`` greedy tokens; the drafter cache ends up holding
        pending + the first gamma − 1 drafts."""
        return self._draft(pending, gamma, lambda logits: (int(logits.argmax()), None))[0]

    def draft_sampled(self, pending: list[int], gamma: int, sampler: Sampler) -> tuple[list[int], torch.Tensor]:
        """``draft`` for sampling mode: each draft drawn from q, the drafter's sampling distribution; returns the
        drafts and q [gamma, V]."""
        drafts, q = self._draft(pending, gamma, sampler.sample)
        return drafts, torch.stack(q)

    @torch.no_grad()
    def _draft(self, pending: list[int], gamma: int, choose) -> tuple[list[int], list]:
        """``gamma`` drafts, each ``choose(logits [V]) -> (token, its distribution or None)``."""
        self.start = self.cache.get_seq_length()
        drafts, dists, feed = [], [], pending
        for _ in range(gamma):
            token, dist = choose(self.next_logits(feed))
            feed = [token]
            drafts.append(token)
            dists.append(dist)
        return drafts, dists

    def next_logits(self, feed: list[int]) -> torch.Tensor:
        """Feed ``feed`` at the next real positions; the logits [V] of the token after it."""
        inputs = dict(
            input_ids=ids_tensor(feed, self.device),
            past_key_values=self.cache,
            position_ids=position_range(self.position, len(feed), self.device),
            use_cache=True,
        )
        self.position += len(feed)
        if self.head is None:
            return self.model(**inputs, logits_to_keep=1).logits[0, -1]
        return self.head(self.model.get_decoder()(**inputs).last_hidden_state[0, -1])

    def rollback(self, kept_new: int) -> None:
        """Keep only the first ``kept_new`` tokens fed during the last ``draft``."""
        dropped = self.cache.get_seq_length() - (self.start + kept_new)
        self.cache.truncate(self.start + kept_new)
        self.position -= dropped

    def after_verify(self, verifier_output, accepted: int, bonus: int) -> None:
        """Hook for drafters that read the verifier's decoder output (EAGLE-3, TriForce); this one needs nothing."""

    def kv_bytes(self) -> int:
        """Allocated bytes of the sparse cache (the full prefill cache it was cut from is freed in ``prefill``)."""
        return cache_bytes(self.cache)

    def weight_tensors(self):
        head = [] if self.head is None else [self.head.weight]
        return [*module_tensors(self.model), *head]


def weight_bytes(verifier_model, drafter: Drafter | None = None) -> int:
    """Bytes of the verifier's weights and of those the drafter runs (``weight_tensors``); a storage both use
    (self-drafting, EAGLE-3's borrowed embedding and LM head) counts once."""
    extra = drafter.weight_tensors() if drafter is not None else ()
    return storage_bytes(itertools.chain(module_tensors(verifier_model), extra))


def timed_prefill(
    verifier: Verifier,
    prompt: torch.Tensor,
    capacity: int,
    stats: DecodeStats,
    device,
    sampler: Sampler | None = None,
    reads: Reads = READS_NOTHING,
) -> tuple[int, float]:
    """The verifier's prefill (recording what a drafter ``reads``): its first token, with
    ``stats.verifier_prefill_s`` its seconds (for a shared prefill, the seconds recorded when it was computed) and
    the correction to add to the run's wall time (recorded − spent copying the shared cache in; 0 when computed
    here)."""
    with Stopwatch(device) as t:
        first = verifier.prefill(prompt, capacity, sampler, reads)
    recorded = verifier.recorded_prefill_s
    stats.verifier_prefill_s, stats.verifier_forwards = (t.seconds if recorded is None else recorded), 1
    return first, stats.verifier_prefill_s - t.seconds


def timed_draft(
    drafter, pending: list[int], g: int, stats: DecodeStats, device, sampler: Sampler | None = None
) -> tuple[list[int], torch.Tensor | None]:
    """``drafter.draft(pending, g)`` (nothing when g = 0), its seconds and steps added to ``stats``; with a
    ``sampler``, ``drafter.draft_sampled`` and the drafter's distributions q [g, V] (else None)."""
    if g == 0:
        return [], None
    with Stopwatch(device) as t:
        drafts, q = (drafter.draft(pending, g), None) if sampler is None else drafter.draft_sampled(pending, g, sampler)
    stats.draft_s += t.seconds
    stats.draft_steps += len(drafts)
    return drafts, q


def check_sampling(verifier_model, drafter=None) -> None:
    """Sampling mode needs the verifier's true logits from its LM head and a drafter that samples its drafts."""
    cfg = verifier_model.config
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None) not in (None, 1, 1.0):
        raise ValueError(
            f"sampling: the verifier ({cfg.model_type}) rescales its logits after the LM head, which "
            "the sampling path does not apply; decode it greedily (temperature 0)"
        )
    if drafter is not None and not drafter.samples:
        raise ValueError(
            f"sampling: the {type(drafter).__name__} drafter drafts greedily only; sample with the sparse "
            "drafter (method sd) or decode greedily (temperature 0)"
        )


@torch.no_grad()
def autoregressive(
    verifier_model,
    prompt_ids: list[int],
    max_new_tokens: int,
    *,
    eos_token_id=None,
    prefill_chunk: int | None = None,
    prefilled: dict[str, SharedPrefill] | None = None,
    sampling: Sampling | None = None,
    engine: str = "eager",
) -> Generation:
    """AR decoding on a full pre-allocated cache: greedy, or each token drawn from the verifier's sampling
    distribution (``sampling``)."""
    check_request(verifier_model, len(prompt_ids), max_new_tokens)
    sampler = None if sampling is None else Sampler(sampling)
    if sampler is not None:
        check_sampling(verifier_model)
    device, eos = verifier_model.device, _eos_ids(verifier_model, eos_token_id)
    stats = DecodeStats(prompt_tokens=len(prompt_ids))
    verifier = Verifier(verifier_model, prefill_chunk, prefilled)
    weights = weight_bytes(verifier_model)
    reset_peak_memory(device)
    with Stopwatch(device) as total:  # the prefill yields the first token
        first, correction = timed_prefill(
            verifier, ids_tensor(prompt_ids, device), len(prompt_ids) + max_new_tokens, stats, device, sampler
        )
        out = [first]
        ties = [top2(verifier.last_logits) if verifier.last_logits is not None else (-1, math.nan)]
        stats.record_memory(weights, verifier.kv_bytes())
        out, done = _finish(out, max_new_tokens, eos)
        while not done:
            with Stopwatch(device) as t:
                hidden = verifier.hidden([out[-1]]).last_hidden_state
                if sampler is None:
                    token, *tie = verifier.greedy_top2(hidden)
                    ties.append(tuple(tie))
                else:
                    token = verifier.sample(hidden, sampler)
            stats.verify_s += t.seconds
            stats.verifier_forwards += 1
            stats.record_memory(weights, verifier.kv_bytes())
            out, done = _finish(out + [token], max_new_tokens, eos)
    gen = _close(out, stats, total.seconds + correction, device)
    if sampler is None:
        gen.runner_up, gen.margins = [t[0] for t in ties[: len(out)]], [t[1] for t in ties[: len(out)]]
    return gen


@torch.no_grad()
def check_speculative(drafter, verifier_model, prompt_len: int, max_new_tokens: int, gamma: int, sampling) -> None:
    """Refuse a request `speculative` cannot serve, before any forward."""
    if gamma < 1:
        raise ValueError(f"gamma (draft length) must be >= 1, got {gamma}")
    check_request(verifier_model, prompt_len, max_new_tokens)
    if sampling is not None:
        check_sampling(verifier_model, drafter)
    from budgetdraft.models import check_pair

    check_pair(drafter.model, verifier_model)


def speculative(
    drafter: Drafter,
    verifier_model,
    prompt_ids: list[int],
    max_new_tokens: int,
    gamma: int,
    *,
    eos_token_id=None,
    prefill_chunk: int | None = None,
    prefilled: dict[str, SharedPrefill] | None = None,
    sampling: Sampling | None = None,
    engine: str = "eager",
) -> Generation:
    """Greedy speculative decoding: ``drafter`` (``budgetdraft.drafter.Drafter``) proposes γ tokens, the verifier
    checks them in one forward on its full cache, the longest agreeing prefix is kept plus the verifier's own next
    token (the bonus). The drafter is prefilled after the verifier, with what it ``reads`` of the verifier's prefill.
    With ``sampling``: drafts drawn from q, kept by the speculative sampling rule (``Sampler.speculative_step``)."""
    check_speculative(drafter, verifier_model, len(prompt_ids), max_new_tokens, gamma, sampling)
    sampler = None if sampling is None else Sampler(sampling)
    device, eos = verifier_model.device, _eos_ids(verifier_model, eos_token_id)
    stats = DecodeStats(prompt_tokens=len(prompt_ids))
    verifier = Verifier(verifier_model, prefill_chunk, prefilled)
    prompt = ids_tensor(prompt_ids, device)
    capacity = len(prompt_ids) + max_new_tokens + gamma + 1
    weights = weight_bytes(verifier_model, drafter)
    reset_peak_memory(device)
    with Stopwatch(device) as total:
        first, correction = timed_prefill(verifier, prompt, capacity, stats, device, sampler, drafter.reads)
        out = [first]
        with Stopwatch(device) as t:
            state = verifier.prefill_state(prompt, drafter.reads)  # not kept: its tensors go with the prefill
            drafter.prefill(prompt.to(drafter.device), max_new_tokens + gamma + 1, state)
            del state
        stats.drafter_prefill_s = t.seconds
        stats.record_memory(weights, verifier.kv_bytes(), drafter.kv_bytes())
        out, done = _finish(out, max_new_tokens, eos)
        pending = [out[-1]]
        while not done:
            g = min(gamma, max_new_tokens - len(out) - 1)  # never draft past the last token still wanted
            drafts, q = timed_draft(drafter, pending, g, stats, device, sampler)
            base = verifier.length
            with Stopwatch(device) as t:
                vout = verifier.hidden([out[-1]] + drafts, output_hidden_states=drafter.reads.hidden_states)
                if sampler is None:
                    k, bonus = verifier.verify(vout.last_hidden_state, drafts)
                else:
                    k, bonus = verifier.verify_sampled(vout.last_hidden_state, drafts, q, sampler)
            stats.verify_s += t.seconds
            stats.record_round(len(drafts), k)
            verifier.rollback(base + 1 + k)
            if drafts:  # g = 0 only for the very last token: the drafter has no round to hear about
                drafter.after_verify(vout, k, bonus)
                if k < g:
                    drafter.rollback(len(pending) + k)
                    pending = [bonus]
                else:  # every draft accepted: the drafter has not yet seen the last draft
                    pending = [drafts[-1], bonus]
            stats.record_memory(weights, verifier.kv_bytes(), drafter.kv_bytes())
            out, done = _finish(out + drafts[:k] + [bonus], max_new_tokens, eos)
    return _close(out, stats, total.seconds + correction, device)


def _close(out: list[int], stats: DecodeStats, total_s: float, device) -> Generation:
    stats.new_tokens = len(out)
    stats.total_s = total_s
    stats.decode_s = total_s - stats.verifier_prefill_s - stats.drafter_prefill_s
    stats.peak_mem_mb, stats.mem_kind = peak_memory(device, stats.peak_tensor_mb)
    return Generation(out, stats)


# --------------------------------------------------------------------------------------------------------------
# Command line: decode one prompt and print the text and the metrics


def configure_parser(parser) -> None:
    parser.add_argument("--verifier", default="embedded:smollm2", help="verifier model spec")
    parser.add_argument("--drafter", default="embedded:smollm2:layers=4", help="drafter model spec (sd)")
    parser.add_argument("--method", choices=["ar", "sd"], default="sd")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", help="file holding the prompt text")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=5, help="draft length γ")
    parser.add_argument("--budget", type=int, default=256, help="drafter KV budget B (tokens of the prompt kept)")
    parser.add_argument("--policy", default="topk_chunks", choices=POLICIES, help="sparse policy of the drafter")
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--score-window", type=int, default=32, help="last prefill queries that score chunks")
    parser.add_argument("--draft-vocab", help=".safetensors of the token ids the drafter may draft (draft-vocab)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--verifier-dtype", default="float32")
    parser.add_argument("--drafter-dtype", default="float32")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    add_sampling_flags(parser)


def run(args) -> None:
    from budgetdraft.models import load_model, load_tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    sampling = sampling_from_args(args)
    text = args.prompt or "Once upon a time"
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8") as f:
            text = f.read()
    tokenizer = load_tokenizer(args.verifier)
    if args.chat:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, return_dict=False
        )
    else:
        ids = tokenizer(text)["input_ids"]
    verifier = load_model(args.verifier, args.device, args.verifier_dtype)
    if args.method == "ar":
        gen = autoregressive(verifier, ids, args.max_new_tokens, sampling=sampling)
    else:
        drafter_model = load_model(args.drafter, args.device, args.drafter_dtype)
        vocab = load_vocab(args.draft_vocab) if args.draft_vocab else None
        drafter = SparseDrafter(
            drafter_model, args.budget, args.policy, args.chunk_size, args.score_window, draft_vocab=vocab
        )
        gen = speculative(drafter, verifier, ids, args.max_new_tokens, args.gamma, sampling=sampling)
    print(tokenizer.decode(gen.tokens, skip_special_tokens=True))
    print(
        json.dumps(
            {k: v for k, v in gen.stats.as_dict().items() if k not in ("reached_by_position", "accepted_by_position")},
            indent=1,
        )
    )
