"""Decoding: AR with a full cache, and speculative decoding with a drafter (Algorithm 2), on fixed-shape steps.

Speculative decoding is lossless: every emitted token is the verifier's own greedy choice given everything
before it, so the output equals ``autoregressive(...)`` token for token (up to float ties between a batched
verify and single-token steps, ~1e-6 in the logits).

Sampling mode (``sampling=Sampling(...)``, ``budgetdraft.sampling``): AR draws every token from the verifier's
sampling distribution p; speculative decoding draws drafts from the drafter's q and keeps them by the speculative
sampling rule, so its output has AR's distribution (not its tokens). ``sampling=None`` is the greedy code path.

Each loop is the algorithm and nothing else: the steps run on an engine (``budgetdraft.engine``: eager or CUDA
graphs), a round reads the device once (drafts, accepted count and bonus token together), phases are timed by a
``metrics.Clock`` that never stops the device mid-generation, and whatever watches the tokens (statistics, a
streamer, stopping criteria) is an ``Observer`` called once per round. The drafters: ``budgetdraft.drafters`` (the
paper's), ``budgetdraft.baselines``; the command line: ``budgetdraft.decode_cli``.

Cache invariants of ``speculative``, with ``out`` the tokens emitted so far:
  verifier cache = prompt + out[:-1]                 (out[-1] is fed at the next verify)
  drafter cache  = sparse(prompt) + out[:-len(pending)]   (pending: emitted but not yet seen by the drafter)
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from budgetdraft.drafter import READS_NOTHING, Drafter, PrefillCapture, Reads, VerifierPrefill
from budgetdraft.engine import check_engine, steps_for
from budgetdraft.kvcache import PreallocatedCache, num_layers, prefill, window_scores
from budgetdraft.metrics import (
    Clock,
    DecodeStats,
    cache_bytes,
    device_bandwidth,
    kv_bytes_per_token,
    module_tensors,
    peak_memory,
    reset_peak_memory,
    storage_bytes,
)
from budgetdraft.sampling import Sampler, Sampling


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


class Verifier:
    """The big model on its full, pre-allocated cache, decoding in fixed-shape steps (``budgetdraft.engine``).

    ``prefilled`` (prompt_key -> SharedPrefill) holds prefills computed once for many runs: a prompt found there
    is not recomputed, its cache is copied in and ``recorded_prefill_s`` says what the prefill cost when it ran."""

    def __init__(
        self,
        model,
        prefill_chunk: int | None = None,
        prefilled: dict[str, SharedPrefill] | None = None,
        engine: str = "eager",
    ):
        self.model = model
        self.prefill_chunk = prefill_chunk
        self.prefilled = prefilled or {}
        self.device = model.device
        self.steps = steps_for(model, engine, "verifier")
        self.lm_head = model.get_output_embeddings()
        # on a CPU a read of a value costs nothing and the LM head over a large vocabulary does: ``verify`` runs
        # the head on the first row alone, and on the others only if the first draft holds
        self.lazy_head = self.device.type == "cpu"

    @property
    def cache(self) -> PreallocatedCache:
        return self.steps.cache

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def prefill(
        self, prompt: torch.Tensor, capacity: int, sampler: Sampler | None = None, reads: Reads = READS_NOTHING
    ) -> int:
        """Prefill the prompt [1, P] (``capacity`` tokens in all will follow it and the prompt); returns the first
        new token: greedy, or drawn by ``sampler`` (``self.last_logits`` [V] keeps the logits it comes from). What a
        drafter ``reads`` of this prefill is recorded while it runs (``self.captured``; None for a prefill copied in
        from a shared file)."""
        cache = self.steps.start(capacity)
        self.captured = None
        shared = self.prefilled.get(prompt_key(prompt[0])) if self.prefilled else None
        if shared is not None:
            cache.load(shared.kv)
            self.steps.fix()
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
        with PrefillCapture(self.model, reads) as self.captured:
            logits, _ = prefill(self.model, prompt, cache, chunk_len=self.prefill_chunk)
        self.steps.fix()
        self.recorded_prefill_s = None
        self.last_logits = logits[0]
        return int(logits.argmax(-1)) if sampler is None else sampler.sample(logits[0])[0]

    def hidden(self, tokens: torch.Tensor, output_hidden_states: bool = False):
        """One fixed-shape step over ``tokens`` [1, q] (on the device) at the next real positions, without the LM
        head: ``last_hidden_state`` [1, q, H] and, if asked, every layer's ``hidden_states``."""
        return self.steps(tokens, output_hidden_states)

    @torch.no_grad()
    def greedy_top2(self, hidden: torch.Tensor) -> tuple[int, int, float]:
        """The greedy token after the last row of ``hidden``, its runner-up and their logit margin (one read of
        the device; the logit soft-capping or scaling some models apply after the head is monotonic)."""
        values, ids = self.lm_head(hidden[0, -1]).float().topk(2)
        first, runner_up, margin = torch.cat([ids.double(), (values[:1] - values[1:]).double()]).tolist()
        return int(first), int(runner_up), margin

    @torch.no_grad()
    def verify(self, hidden: torch.Tensor, drafts: torch.Tensor) -> tuple[list[int], int, int]:
        """The drafts [g] (read here), the accepted count k and the bonus token (the verifier's own choice after
        the k drafts), from the verify step's ``hidden`` [1, γ + 1, H] of [last emitted token] + drafts (+ padding).
        One read of the device a round (two with ``lazy_head``, where the first draft holds)."""
        g = drafts.shape[0]
        if self.lazy_head:
            first = self.lm_head(hidden[0, :1]).argmax(-1)
            *host, choice0 = torch.cat([drafts, first]).tolist()
            if not g or host[0] != choice0:
                return host, 0, choice0
            choice = [choice0] + self.lm_head(hidden[0, 1 : g + 1]).argmax(-1).tolist()
        else:
            values = torch.cat([drafts, self.lm_head(hidden[0, : g + 1]).argmax(-1)]).tolist()
            host, choice = values[:g], values[g:]
        k = 0
        while k < g and host[k] == choice[k]:
            k += 1
        return host, k, choice[k]

    @torch.no_grad()
    def distributions(self, hidden: torch.Tensor, sampler: Sampler) -> torch.Tensor:
        """p [q, V]: the verifier's sampling distribution after each row of ``hidden`` [1, q, H]."""
        return sampler.distribution(self.lm_head(hidden)[0])

    def sample(self, hidden: torch.Tensor, sampler: Sampler) -> int:
        """A token drawn from p after the last row of ``hidden`` (AR sampling)."""
        return sampler.draw(self.distributions(hidden[:, -1:], sampler)[0])

    def verify_sampled(
        self, hidden: torch.Tensor, drafts: list[int], q: torch.Tensor | None, sampler: Sampler
    ) -> tuple[int, int]:
        """``verify`` for sampling mode: accepted drafts k and the next token by the speculative sampling rule
        (``Sampler.speculative_step``), q [γ, V] the drafter's distributions the drafts were drawn from."""
        p = self.distributions(hidden[:, : len(drafts) + 1], sampler)
        return sampler.speculative_step(p, q, drafts) if drafts else (0, sampler.draw(p[0]))

    def check(self, last: int, drafts, gamma: int, q, sampler: Sampler | None, reads: Reads):
        """One verify round: the ``last`` emitted token and the ``drafts`` (a device tensor or a list; q [g, V]
        their distributions in sampling mode) in one step of γ + 1 tokens (padded), then the cache rolled back to
        what was accepted. Returns the step's output, the drafts (a list), the accepted count k and the bonus."""
        base = self.length
        feed = torch.as_tensor([last], device=self.device)
        drafts = torch.as_tensor(drafts, dtype=torch.long, device=self.device)
        padding = torch.zeros(gamma - len(drafts), dtype=torch.long, device=self.device)
        out = self.hidden(torch.cat([feed, drafts, padding])[None], reads.hidden_states)
        if sampler is None:
            drafts, k, bonus = self.verify(out.last_hidden_state, drafts)
        else:
            drafts = drafts.tolist()
            k, bonus = self.verify_sampled(out.last_hidden_state, drafts, q, sampler)
        self.rollback(base + 1 + k)
        return out, drafts, k, bonus

    def rollback(self, length: int) -> None:
        self.cache.truncate(length)

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


def weight_bytes(verifier_model, drafter: Drafter | None = None) -> int:
    """Bytes of the verifier's weights and of those the drafter runs (``weight_tensors``); a storage both use
    (self-drafting, EAGLE-3's borrowed embedding and LM head) counts once."""
    extra = drafter.weight_tensors() if drafter is not None else ()
    return storage_bytes(itertools.chain(module_tensors(verifier_model), extra))


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


@dataclass
class Round:
    """What one round decided: ``drafted`` drafts proposed, the first ``accepted`` of them kept, and the ``tokens``
    it emitted (the accepted drafts and the verifier's own next token, cut at EOS / ``max_new_tokens``). The
    prefill's token is the first round (nothing drafted); each AR step is a round."""

    drafted: int
    accepted: int
    tokens: list[int]


Observer = Callable[[Round], "bool | None"]  # called once per round; True ends the generation after that round


class Emission:
    """The tokens emitted so far: each round's tokens cut at the first EOS and at ``max_new_tokens``, counted in
    ``stats`` and handed to the ``observer``; calling it returns True when the generation is over."""

    def __init__(self, max_new_tokens: int, eos: set[int], stats: DecodeStats, observer: Observer | None):
        self.max_new_tokens, self.eos, self.stats, self.observer = max_new_tokens, eos, stats, observer
        self.out: list[int] = []
        self.done = False

    def __call__(self, drafted: int, accepted: int, tokens: list[int]) -> bool:
        self.stats.record_round(drafted, accepted)
        room = self.max_new_tokens - len(self.out)
        tokens = tokens[:room]
        for i, token in enumerate(tokens):
            if token in self.eos:
                tokens, self.done = tokens[: i + 1], True
                break
        self.out += tokens
        self.done |= len(self.out) >= self.max_new_tokens
        if self.observer is not None and self.observer(Round(drafted, accepted, tokens)):
            self.done = True
        return self.done


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
    observer: Observer | None = None,
) -> Generation:
    """AR decoding on a full pre-allocated cache: greedy, or each token drawn from the verifier's sampling
    distribution (``sampling``); ``engine`` runs its steps (``budgetdraft.engine``), ``observer`` sees every
    token as it is decided and may stop the generation."""
    check_request(verifier_model, len(prompt_ids), max_new_tokens)
    sampler = None if sampling is None else Sampler(sampling)
    if sampler is not None:
        check_sampling(verifier_model)
    device, eos = verifier_model.device, _eos_ids(verifier_model, eos_token_id)
    verifier = Verifier(verifier_model, prefill_chunk, prefilled, check_engine(engine))
    stats = DecodeStats(prompt_tokens=len(prompt_ids), engine=engine)
    emitted = Emission(max_new_tokens, eos, stats, observer)
    clock = Clock(device)
    reset_peak_memory(device)
    with clock.total():
        with clock("verifier_prefill"):
            token = verifier.prefill(ids_tensor(prompt_ids, device), len(prompt_ids) + max_new_tokens, sampler)
        ties = [top2(verifier.last_logits) if verifier.last_logits is not None else (-1, math.nan)]
        emitted(0, 0, [token])
        while not emitted.done:
            with clock("verify"):
                hidden = verifier.hidden(ids_tensor([token], device)).last_hidden_state
                if sampler is None:
                    token, *tie = verifier.greedy_top2(hidden)
                    ties.append(tuple(tie))
                else:
                    token = verifier.sample(hidden, sampler)
            emitted(0, 0, [token])
    stats.record_memory(weight_bytes(verifier_model), verifier.kv_bytes())
    stats.record_bound(device_bandwidth(device), weight_bytes(verifier_model), kv_bytes_per_token(verifier.cache))
    gen = _close(emitted.out, stats, clock, verifier)
    if sampler is None:
        n = len(emitted.out)
        gen.runner_up, gen.margins = [t[0] for t in ties[:n]], [t[1] for t in ties[:n]]
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
    observer: Observer | None = None,
) -> Generation:
    """Speculative decoding (Algorithm 2): ``drafter`` (``budgetdraft.drafter.Drafter``) proposes γ tokens, the
    verifier checks them in one forward on its full cache, the longest agreeing prefix is kept plus the verifier's
    own next token (the bonus). The drafter is prefilled after the verifier, with what it ``reads`` of the
    verifier's prefill. With ``sampling``: drafts drawn from q, kept by the speculative sampling rule
    (``Sampler.speculative_step``). ``engine`` runs the verifier's steps (a drafter is built with its own);
    ``observer`` sees every round as it is decided and may stop the generation."""
    check_speculative(drafter, verifier_model, len(prompt_ids), max_new_tokens, gamma, sampling)
    sampler = None if sampling is None else Sampler(sampling)
    device, eos = verifier_model.device, _eos_ids(verifier_model, eos_token_id)
    verifier = Verifier(verifier_model, prefill_chunk, prefilled, check_engine(engine))
    stats = DecodeStats(prompt_tokens=len(prompt_ids), engine=engine)
    emitted = Emission(max_new_tokens, eos, stats, observer)
    clock = Clock(device)
    prompt = ids_tensor(prompt_ids, device)
    reset_peak_memory(device)
    with clock.total():
        with clock("verifier_prefill"):
            first = verifier.prefill(prompt, len(prompt_ids) + max_new_tokens + gamma + 1, sampler, drafter.reads)
        with clock("drafter_prefill"):
            state = verifier.prefill_state(prompt, drafter.reads)  # not kept: its tensors go with the prefill
            drafter.prefill(prompt.to(drafter.device), max_new_tokens + gamma + 1, state)
            del state
        emitted(0, 0, [first])
        pending = [first]  # emitted tokens the drafter has not seen yet
        while not emitted.done:
            g = min(gamma, max_new_tokens - len(emitted.out) - 1)  # never draft past the last token still wanted
            drafts, q = [], None  # the very last token (g = 0) is the verifier's alone
            with clock("draft"):
                if g and sampler is None:
                    drafts = drafter.draft(pending, g)
                elif g:
                    drafts, q = drafter.draft_sampled(pending, g, sampler)
            with clock("verify"):
                vout, drafts, k, bonus = verifier.check(emitted.out[-1], drafts, gamma, q, sampler, drafter.reads)
            if g:  # the last round drafted nothing: the drafter has no round to hear about
                drafter.after_verify(vout, k, bonus)
                if k < g:
                    drafter.rollback(len(pending) + k)
                    pending = [bonus]
                else:  # every draft accepted: the drafter has not yet seen the last draft
                    pending = [drafts[-1], bonus]
            stats.draft_steps += g
            emitted(g, k, drafts[:k] + [bonus])
    stats.record_memory(weight_bytes(verifier_model, drafter), verifier.kv_bytes(), drafter.kv_bytes())
    return _close(emitted.out, stats, clock, verifier)


def _close(out: list[int], stats: DecodeStats, clock: Clock, verifier: Verifier) -> Generation:
    """The generation's stats from its clock: a shared prefill is charged the seconds it took when computed."""
    recorded = verifier.recorded_prefill_s
    spent = clock.seconds("verifier_prefill")
    stats.verifier_prefill_s = spent if recorded is None else recorded
    stats.total_s = clock.total_s + stats.verifier_prefill_s - spent
    stats.drafter_prefill_s = clock.seconds("drafter_prefill")
    stats.draft_s, stats.verify_s = clock.seconds("draft"), clock.seconds("verify")
    stats.decode_s = stats.total_s - stats.verifier_prefill_s - stats.drafter_prefill_s
    stats.verifier_forwards = 1 + verifier.steps.forwards  # the prefill, then every step
    stats.new_tokens = len(out)
    stats.peak_mem_mb, stats.mem_kind = peak_memory(verifier.device, stats.peak_tensor_mb)
    return Generation(out, stats)
