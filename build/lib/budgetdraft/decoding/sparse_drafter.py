"""The paper's drafter: a small causal LM whose prefix cache is cut to a budget of B tokens by a sparse policy
(a ``budgetdraft.decoding.drafter.Drafter``; the baselines' drafters live in ``budgetdraft.decoding.baselines``).

It prefills the whole prompt once, keeps the policy's positions (``budgetdraft.decoding.policies.keep_indices``) and then
drafts on fixed-shape steps (``budgetdraft.decoding.engine``): its cache slots are contiguous while their real positions
skip what was dropped, so each step passes real positions (slot + the prompt's dropped count), as in training.
Greedy drafts stay on the device: a round of γ drafts reads nothing back (``speculative`` reads drafts, verdict
and bonus token once a round).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from budgetdraft.base.defaults import CHUNK_SIZE, ENGINE, POLICY, SCORE_WINDOW
from budgetdraft.decoding.drafter import Reads, VerifierPrefill
from budgetdraft.decoding.draftspec import DraftSpec
from budgetdraft.decoding.draftvocab import ReducedHead, load_vocab
from budgetdraft.decoding.engine import check_engine, device_tokens, steps_for
from budgetdraft.decoding.kvcache import PreallocatedCache, gathered_kv, num_layers, prefill
from budgetdraft.decoding.metrics import cache_bytes, module_tensors
from budgetdraft.decoding.policies import PolicyInputs, check_budget, get_policy, keep_indices
from budgetdraft.decoding.sampling import Sampler
from budgetdraft.decoding.verifier import prompt_key


class SparseDrafter:
    """The paper's drafter: ``model`` with its prefix cache cut to ``budget`` tokens by ``policy``."""

    samples = True

    def __init__(
        self,
        model,
        budget: int,
        policy: str = POLICY,
        chunk_size: int = CHUNK_SIZE,
        score_window: int = SCORE_WINDOW,
        prefill_chunk: int | None = None,
        draft_vocab: torch.Tensor | None = None,
        engine: str = ENGINE,
        shared: dict[str, FullPrefill] | None = None,
    ):
        """``draft_vocab``: token ids the drafter may propose (`budgetdraft.decoding.draftvocab`); None = all of them.
        ``engine``: how its decode steps run (``budgetdraft.decoding.engine``), checked here, where the drafter's
        engine enters the library (the loop checks its own: a drafter is built with its own). ``shared``: this
        model's full prefills of prompts by ``prompt_key`` (``shared_prefills``), taken instead of recomputed."""
        self.shared, self.recorded_prefill_s = shared, None
        check_budget(budget, chunk_size, policy)
        self.needs = get_policy(policy).needs
        self.model, self.budget, self.policy = model, budget, policy
        self.chunk_size, self.score_window, self.prefill_chunk = chunk_size, score_window, prefill_chunk
        self.device = model.device
        self.engine = check_engine(engine)
        self.head = ReducedHead(model, draft_vocab) if draft_vocab is not None else model.get_output_embeddings()
        # a policy that ranks the prompt by the verifier's attention reads its window scores
        self.reads = Reads(window_scores=score_window if "verifier_scores" in self.needs else 0)

    def prefill(self, prompt: torch.Tensor, capacity: int, verifier: VerifierPrefill | None = None) -> None:
        """Prefill the full prompt once (or take it from ``shared``: ``recorded_prefill_s`` is then what it cost
        when it ran), then keep only the policy's positions in the step cache (room for ``capacity`` more tokens);
        ``verifier``: the verifier's prefill, for a policy that needs its scores."""
        prompt_len = prompt.shape[1]
        window, per_head = scored_window(self.policy, self.score_window)
        done = self.shared.get(prompt_key(prompt[0])) if self.shared else None
        if done is None:
            full, scores = full_prefill(self.model, prompt, window, per_head, self.prefill_chunk)
            self.recorded_prefill_s = None
        else:
            full, scores, self.recorded_prefill_s = done.cache, done.scores, done.seconds
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
        kept = idx[0].shape[-1]
        self.steps = steps_for(self.model, self.engine, "drafter")
        self.steps.start(kept + capacity).load(gathered_kv(full, idx))
        self.steps.fix(position_offset=prompt_len - kept)  # real position of slot s: s + the dropped positions

    @property
    def cache(self) -> PreallocatedCache:
        return self.steps.cache

    def logits(self, token: torch.Tensor) -> torch.Tensor:
        """Feed ``token`` [1, 1] at the next real position; the logits [V] of the token after it."""
        return self.head(self.steps(token).last_hidden_state[0, -1])

    @torch.no_grad()
    def draft(self, pending: list[int], gamma: int) -> torch.Tensor:
        """Feed the ``pending`` tokens, then propose ``gamma`` greedy tokens [gamma] (on the device, not read);
        the cache ends up holding pending + the first gamma − 1 drafts."""
        self.start = self.cache.get_seq_length()
        feed = device_tokens(pending, self.device)[:, None]  # [len(pending), 1]: one step each
        for token in feed[:-1]:
            self.steps(token[None])
        drafts = [self.logits(feed[-1:]).argmax()]
        for _ in range(gamma - 1):
            drafts.append(self.logits(drafts[-1].view(1, 1)).argmax())
        return torch.stack(drafts)

    @torch.no_grad()
    def draft_sampled(self, pending: list[int], gamma: int, sampler: Sampler) -> tuple[list[int], torch.Tensor]:
        """``draft`` for sampling mode: each draft drawn from q, the drafter's sampling distribution; returns the
        drafts and q [gamma, V]."""
        self.start = self.cache.get_seq_length()
        feed = device_tokens(pending, self.device)[:, None]
        for token in feed[:-1]:
            self.steps(token[None])
        drafts, dists, last = [], [], feed[-1:]
        for _ in range(gamma):
            token, dist = sampler.sample(self.logits(last))
            drafts.append(token)
            dists.append(dist)
            last = device_tokens([token], self.device)[None]
        return drafts, torch.stack(dists)

    def rollback(self, kept_new: int) -> None:
        """Keep only the first ``kept_new`` tokens fed during the last ``draft``."""
        self.cache.truncate(self.start + kept_new)

    def after_verify(self, verifier_output, accepted: int, bonus: int) -> None:
        """Hook for drafters that read the verifier's decoder output (EAGLE-3, TriForce); this one needs nothing."""

    def kv_bytes(self) -> int:
        """Allocated bytes of the sparse cache (the full prefill cache it was cut from is freed in ``prefill``)."""
        return cache_bytes(self.cache)

    def weight_tensors(self):
        head = [self.head.weight] if isinstance(self.head, ReducedHead) else []
        return [*module_tensors(self.model), *head]


@dataclass
class FullPrefill:
    """The drafter's full-cache prefill of one prompt, read-only, with the scores its policy ranks positions by
    (``full_prefill``) and the seconds it took, which every run that takes it instead of prefilling is charged."""

    cache: PreallocatedCache
    scores: list[torch.Tensor] | None
    seconds: float

    @property
    def nbytes(self) -> int:
        return cache_bytes(self.cache) + sum(s.nbytes for s in self.scores or [])


def full_prefill(model, prompt: torch.Tensor, window: int, per_head: bool, chunk: int | None = None):
    """The full cache of ``prompt`` [1, P] and the scores of its last ``window`` queries (per KV head with
    ``per_head``; None without a window), as ``SparseDrafter.prefill`` cuts them to a budget."""
    full = PreallocatedCache(num_layers(model), prompt.shape[1])
    _, scores = prefill(model, prompt, full, chunk_len=chunk, score_window=window, per_head=per_head)
    return full, scores


def scored_window(policy: str, score_window: int) -> tuple[int, bool]:
    """What the full prefill records for ``policy`` to rank by: the window of last queries whose attention it scores
    (0: none) and whether per KV head."""
    needs = get_policy(policy).needs
    per_head = "head_scores" in needs
    return (score_window if per_head or "scores" in needs else 0), per_head


@torch.no_grad()
def shared_prefills(model, prompts: list[list[int]], window: int, per_head: bool) -> dict[str, FullPrefill]:
    """``model``'s full prefill of each prompt, timed, for every cell of the model to cut to its own budget instead
    of prefilling again: a forking warm process computes them once for the cells it forks (``ModelStore``)."""
    out = {}
    for ids in prompts:
        prompt = torch.tensor([ids], device=model.device)
        start = time.perf_counter()
        full, scores = full_prefill(model, prompt, window, per_head)
        out[prompt_key(ids)] = FullPrefill(full, scores, time.perf_counter() - start)
    return out


def drafter_factory(verifier, draft: DraftSpec, extra: dict, load=None, shared: dict[str, FullPrefill] | None = None):
    """``eval-cell`` / ``decode`` method sd: the drafter ``draft`` (its model, budget, policy, chunk size, score
    window, draft vocabulary and engine), its model loaded once by ``load`` (spec, device, dtype; default
    ``load_model``); returns () -> a fresh drafter per run, as a baseline module's ``drafter_factory`` does
    (``extra``: no settings of its own)."""
    from budgetdraft.decoding.loading import load_model

    if extra:
        raise ValueError(f"method sd takes no --extra settings, got {sorted(extra)}")
    model = (load or load_model)(draft.drafter, draft.device, draft.drafter_dtype)
    vocab = load_vocab(draft.draft_vocab) if draft.draft_vocab else None
    return lambda: SparseDrafter(
        model,
        draft.budget,
        draft.policy,
        draft.chunk_size,
        draft.score_window,
        draft_vocab=vocab,
        engine=draft.engine,
        shared=shared,
    )
