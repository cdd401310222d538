"""The verifier: the big model on its full, pre-allocated cache, prefilled once and stepped in fixed shapes; one
verify round reads the device once (drafts, accepted count and bonus token together)."""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass

import torch

from budgetdraft.base.defaults import ENGINE
from budgetdraft.decoding.drafter import READS_NOTHING, Drafter, PrefillCapture, Reads, VerifierPrefill
from budgetdraft.decoding.engine import device_tokens, steps_for
from budgetdraft.decoding.kvcache import PreallocatedCache, num_layers, prefill, window_scores
from budgetdraft.decoding.metrics import (
    cache_bytes,
    module_tensors,
    storage_bytes,
)
from budgetdraft.decoding.sampling import Sampler


def top2(logits: torch.Tensor) -> tuple[int, float]:
    """The runner-up token of ``logits`` [V] and the top-1 − top-2 margin (taken on the host, as ``greedy_top2``)."""
    values, ids = logits.float().topk(2)
    best, second = values.double().tolist()
    return int(ids[1]), best - second


def position_range(start: int, length: int, device) -> torch.Tensor:
    return torch.arange(start, start + length, device=device)[None]  # [1, q]


def ids_tensor(tokens: list[int], device) -> torch.Tensor:
    return device_tokens(tokens, device)[None]  # [1, q], copied without waiting for the device


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


class Verifier:
    """The big model on its full, pre-allocated cache, decoding in fixed-shape steps (``budgetdraft.decoding.engine``).

    ``prefilled`` (prompt_key -> SharedPrefill) holds prefills computed once for many runs: a prompt found there
    is not recomputed, its cache is copied in and ``recorded_prefill_s`` says what the prefill cost when it ran."""

    def __init__(
        self,
        model,
        prefill_chunk: int | None = None,
        prefilled: dict[str, SharedPrefill] | None = None,
        engine: str = ENGINE,
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
        first, runner_up, best, second = torch.cat([ids.double(), values.double()]).tolist()
        return int(first), int(runner_up), best - second  # the margin on the host: no kernel a step for it

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

    def step(self, token: int, sampler: Sampler | None) -> tuple[int, int, float]:
        """One AR step: ``token`` fed at the next position, then the verifier's next token with its runner-up and
        their logit margin (``greedy_top2``; one read of the device), or drawn by ``sampler`` (runner-up −1, NaN)."""
        hidden = self.hidden(ids_tensor([token], self.device)).last_hidden_state
        if sampler is None:
            return self.greedy_top2(hidden)
        return self.sample(hidden, sampler), -1, math.nan

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
        feed = device_tokens([last], self.device)  # queued behind the drafter's steps, not waiting for them
        drafts = drafts.to(self.device, torch.long) if torch.is_tensor(drafts) else device_tokens(drafts, self.device)
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
