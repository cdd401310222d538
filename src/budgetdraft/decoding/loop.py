"""Decoding: AR with a full cache, and speculative decoding with a drafter (Algorithm 2), on fixed-shape steps.

Speculative decoding is lossless: every emitted token is the verifier's own greedy choice given everything
before it, so the output equals ``autoregressive(...)`` token for token (up to float ties between a batched
verify and single-token steps, ~1e-6 in the logits).

Sampling mode (``sampling=Sampling(...)``, ``budgetdraft.decoding.sampling``): AR draws every token from the verifier's
sampling distribution p; speculative decoding draws drafts from the drafter's q and keeps them by the speculative
sampling rule, so its output has AR's distribution (not its tokens). ``sampling=None`` is the greedy code path.

Each loop is the algorithm and nothing else: the steps run on an engine (``budgetdraft.decoding.engine``: eager or CUDA
graphs), a round reads the device once (drafts, accepted count and bonus token together), phases are timed by a
``metrics.Clock`` that never stops the device mid-generation, and whatever watches the tokens (statistics, a
streamer, stopping criteria) is an ``Observer`` called once per round. The drafters: ``budgetdraft.decoding.sparse_drafter`` (the
paper's), ``budgetdraft.decoding.baselines``; the command line: ``budgetdraft.decoding.decode``.

Cache invariants of ``speculative``, with ``out`` the tokens emitted so far:
  verifier cache = prompt + out[:-1]                 (out[-1] is fed at the next verify)
  drafter cache  = sparse(prompt) + out[:-len(pending)]   (pending: emitted but not yet seen by the drafter)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from budgetdraft.decoding.drafter import Drafter
from budgetdraft.decoding.engine import check_engine
from budgetdraft.decoding.metrics import (
    Clock,
    DecodeStats,
    device_bandwidth,
    kv_bytes_per_token,
    peak_memory,
    reset_peak_memory,
)
from budgetdraft.decoding.sampling import Sampler, Sampling
from budgetdraft.decoding.verifier import (
    SharedPrefill,
    Verifier,
    check_request,
    check_sampling,
    ids_tensor,
    top2,
    weight_bytes,
)


@dataclass
class Generation:
    tokens: list[int]
    stats: DecodeStats
    # greedy AR only: the verifier's second choice and its top-1 − top-2 logit margin at each token (NaN where
    # the logits are unknown): a run that differs from this one first at a near-tie is not a decoding bug
    runner_up: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)


def _eos_ids(model, eos_token_id) -> set[int]:
    eos = model.generation_config.eos_token_id if eos_token_id is None else eos_token_id
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}


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
    distribution (``sampling``); ``engine`` runs its steps (``budgetdraft.decoding.engine``), ``observer`` sees every
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
    from budgetdraft.decoding.models import check_pair

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
    """Speculative decoding (Algorithm 2): ``drafter`` (``budgetdraft.decoding.drafter.Drafter``) proposes γ tokens, the
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
