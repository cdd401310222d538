"""Decoding: AR with a full cache, and speculative decoding with a drafter (Algorithm 2), on fixed-shape steps.

Speculative decoding is lossless: every emitted token is the verifier's own greedy choice given everything
before it, so the output equals ``autoregressive(...)`` token for token (up to float ties between a batched
verify and single-token steps, ~1e-6 in the logits).

Sampling mode (``sampling=Sampling(...)``, ``budgetdraft.decoding.sampling``): AR draws every token from the verifier's
sampling distribution p; speculative decoding draws drafts from the drafter's q and keeps them by the speculative
sampling rule, so its output has AR's distribution (not its tokens). ``sampling=None`` is the greedy code path.

Each loop is the algorithm and nothing else: it decides tokens, and whoever calls it times it. The steps run on an
engine (``budgetdraft.decoding.engine``: eager or CUDA graphs), a round reads the device once (drafts, accepted count
and bonus token together), whatever watches the tokens (a streamer, stopping criteria) is an ``Observer`` called
once per round, and the ``Generation`` holds the tokens and their counts (``metrics.DecodeCounts``). No clock and
no memory reading is in here: ``budgetdraft.evaluation.measure`` times a generation through the two seams the loop
offers, the drafter it is handed and the ``verifier`` factory of its ``Options`` (a timed proxy of each, CUDA events
on a GPU), and reads memory around the call. The drafters: ``budgetdraft.decoding.sparse_drafter`` (the paper's),
``budgetdraft.decoding.baselines``; the command line: ``budgetdraft.pipeline.commands.cmd_decode``.

Cache invariants of ``speculative``, with ``out`` the tokens emitted so far:
  verifier cache = prompt + out[:-1]                 (out[-1] is fed at the next verify)
  drafter cache  = sparse(prompt) + out[:-len(pending)]   (pending: emitted but not yet seen by the drafter)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch

from budgetdraft.base.defaults import ENGINE
from budgetdraft.decoding.drafter import Drafter
from budgetdraft.decoding.engine import check_engine
from budgetdraft.decoding.metrics import DecodeCounts
from budgetdraft.decoding.sampling import Sampler, Sampling
from budgetdraft.decoding.verifier import (
    SharedPrefill,
    Verifier,
    check_request,
    check_sampling,
    ids_tensor,
    top2,
)


@dataclass
class Generation:
    tokens: list[int]
    stats: DecodeCounts  # what the loop counted (a measured run: ``evaluation.measure.DecodeStats``, timings added)
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
    it emitted (the accepted drafts and the verifier's own next token, cut at EOS / ``max_new_tokens``; a cut inside
    the accepted drafts ends the round there: drafted = accepted = the tokens emitted). The prefill's token is the
    first round (nothing drafted); each AR step is a round."""

    drafted: int
    accepted: int
    tokens: list[int]


Observer = Callable[[Round], "bool | None"]  # called once per round; True ends the generation after that round


@dataclass(frozen=True)
class Options:
    """The keyword options of both loops: ``eos_token_id`` (None: the verifier's generation config; [] none),
    ``prefill_chunk``, ``prefilled`` (shared verifier prefills by ``prompt_key``), ``sampling`` (None: greedy),
    ``engine`` (``budgetdraft.decoding.engine``), ``observer`` (sees every round, may end the generation) and
    ``verifier``, what builds the ``Verifier`` from (model, prefill_chunk, prefilled, engine): a caller that times
    the verifier's phases passes one of its own (``budgetdraft.evaluation.measure``)."""

    eos_token_id: int | list[int] | None = None
    prefill_chunk: int | None = None
    prefilled: dict[str, SharedPrefill] | None = None
    sampling: Sampling | None = None
    engine: str = ENGINE
    observer: Observer | None = None
    verifier: Callable[..., Verifier] = Verifier


class Emission:
    """The tokens emitted so far: each round's tokens cut at the first EOS and at ``max_new_tokens``, counted in
    ``counts`` as emitted and handed to the ``observer``; calling it returns True when the generation is over."""

    def __init__(self, max_new_tokens: int, eos: set[int], counts: DecodeCounts, observer: Observer | None):
        self.max_new_tokens, self.eos, self.counts, self.observer = max_new_tokens, eos, counts, observer
        self.out: list[int] = []
        self.done = False

    def __call__(self, drafted: int, accepted: int, tokens: list[int]) -> bool:
        self.counts.draft_steps += drafted  # what the drafter ran, emitted or not
        tokens = tokens[: self.max_new_tokens - len(self.out)]
        for i, token in enumerate(tokens):
            if token in self.eos:
                tokens, self.done = tokens[: i + 1], True
                break
        if len(tokens) <= accepted:  # cut inside the accepted drafts: the round ends at its last emitted token
            drafted = accepted = len(tokens)
        self.counts.record_round(drafted, accepted, len(tokens))
        self.out += tokens
        self.done |= len(self.out) >= self.max_new_tokens
        if self.observer is not None and self.observer(Round(drafted, accepted, tokens)):
            self.done = True
        return self.done


def _start(verifier_model, prompt_ids: list[int], max_new_tokens: int, options: dict, drafter=None, gamma: int = 0):
    """Check the request (``drafter`` None: AR) and build what both loops start from, given their keyword
    ``options`` (``Options``): the verifier, the sampler (None: greedy), the emission and the prompt on the device."""
    unknown = sorted(set(options) - {f.name for f in fields(Options)})
    if unknown:
        raise TypeError(
            f"unknown decoding option(s) {unknown}; the options: {', '.join(f.name for f in fields(Options))}"
        )
    opts = Options(**options)
    if drafter is None:
        check_request(verifier_model, len(prompt_ids), max_new_tokens)
        if opts.sampling is not None:
            check_sampling(verifier_model)
    else:
        check_speculative(drafter, verifier_model, len(prompt_ids), max_new_tokens, gamma, opts.sampling)
    sampler = None if opts.sampling is None else Sampler(opts.sampling)
    verifier = opts.verifier(verifier_model, opts.prefill_chunk, opts.prefilled, check_engine(opts.engine))
    counts = DecodeCounts(prompt_tokens=len(prompt_ids), engine=opts.engine)
    emitted = Emission(max_new_tokens, _eos_ids(verifier_model, opts.eos_token_id), counts, opts.observer)
    return verifier, sampler, emitted, ids_tensor(prompt_ids, verifier.device)


def _finish(emitted: Emission, verifier: Verifier) -> Generation:
    emitted.counts.new_tokens = len(emitted.out)
    emitted.counts.verifier_forwards = 1 + verifier.steps.forwards  # the prefill, then every step
    return Generation(emitted.out, emitted.counts)


@torch.no_grad()
def autoregressive(verifier_model, prompt_ids: list[int], max_new_tokens: int, **options) -> Generation:
    """AR decoding on a full pre-allocated cache: greedy, or each token drawn from the verifier's sampling
    distribution (``sampling``); ``options`` are ``Options``'s (``engine`` runs its steps, ``observer`` sees every
    token as it is decided and may stop the generation)."""
    verifier, sampler, emitted, prompt = _start(verifier_model, prompt_ids, max_new_tokens, options)
    token = verifier.prefill(prompt, len(prompt_ids) + max_new_tokens, sampler)
    ties = [top2(verifier.last_logits) if verifier.last_logits is not None else (-1, math.nan)]
    emitted(0, 0, [token])
    while not emitted.done:
        token, *tie = verifier.step(token, sampler)
        ties.append(tuple(tie))
        emitted(0, 0, [token])
    gen = _finish(emitted, verifier)
    if sampler is None:
        n = len(emitted.out)
        gen.runner_up, gen.margins = [t[0] for t in ties[:n]], [t[1] for t in ties[:n]]
    return gen


def check_speculative(drafter, verifier_model, prompt_len: int, max_new_tokens: int, gamma: int, sampling) -> None:
    """Refuse a request `speculative` cannot serve, before any forward."""
    if gamma < 1:
        raise ValueError(f"gamma (draft length) must be >= 1, got {gamma}")
    check_request(verifier_model, prompt_len, max_new_tokens)
    if sampling is not None:
        check_sampling(verifier_model, drafter)
    from budgetdraft.decoding.loading import check_pair

    check_pair(drafter.model, verifier_model)


@torch.no_grad()
def speculative(
    drafter: Drafter, verifier_model, prompt_ids: list[int], max_new_tokens: int, gamma: int, **options
) -> Generation:
    """Speculative decoding (Algorithm 2): ``drafter`` (``budgetdraft.decoding.drafter.Drafter``) proposes γ tokens, the
    verifier checks them in one forward on its full cache, the longest agreeing prefix is kept plus the verifier's
    own next token (the bonus). The drafter is prefilled after the verifier, with what it ``reads`` of the
    verifier's prefill. With ``sampling``: drafts drawn from q, kept by the speculative sampling rule
    (``Sampler.speculative_step``). ``options`` are ``Options``'s: ``engine`` runs the verifier's steps (a drafter
    is built with its own); ``observer`` sees every round as it is decided and may stop the generation."""
    verifier, sampler, emitted, prompt = _start(verifier_model, prompt_ids, max_new_tokens, options, drafter, gamma)
    capacity = max_new_tokens + gamma + 1  # the new tokens and one verify of γ + 1 past them
    first = verifier.prefill(prompt, len(prompt_ids) + capacity, sampler, drafter.reads)
    state = verifier.prefill_state(prompt, drafter.reads)  # not kept: its tensors go with the prefill
    drafter.prefill(prompt.to(drafter.device), capacity, state)
    del state
    emitted(0, 0, [first])
    pending = [first]  # emitted tokens the drafter has not seen yet
    while not emitted.done:
        g = min(gamma, max_new_tokens - len(emitted.out) - 1)  # never draft past the last token still wanted
        drafts, q = [], None  # the very last token (g = 0) is the verifier's alone
        if g and sampler is None:
            drafts = drafter.draft(pending, g)
        elif g:
            drafts, q = drafter.draft_sampled(pending, g, sampler)
        # a drafter that proposes nothing when asked for g > 0 tokens (prompt lookup finds nothing to copy) leaves
        # the verifier one step alone, as AR's; the last round (g = 0) keeps the verify's one shape, padded
        width = gamma if len(drafts) or not g else 0
        vout, drafts, k, bonus = verifier.check(emitted.out[-1], drafts, width, q, sampler, drafter.reads)
        if g:  # the last round drafted nothing: the drafter has no round to hear about
            drafter.after_verify(vout, k, bonus)
            if k < g:
                drafter.rollback(len(pending) + k)
                pending = [bonus]
            else:  # every draft accepted: the drafter has not yet seen the last draft
                pending = [drafts[-1], bonus]
        emitted(len(drafts), k, drafts[:k] + [bonus])
    return _finish(emitted, verifier)
