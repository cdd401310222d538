"""Prompt lookup: a drafter with no parameters that copies. It looks up the last n tokens of the text so far (the
prompt and the tokens emitted) earlier in that text and proposes the γ tokens that followed them there: the rule of
transformers' `prompt_lookup_num_tokens` (``PromptLookupCandidateGenerator``: the n-gram of the largest size up to
``ngram`` that occurs earlier, its first occurrence from the left whose continuation is not empty, up to γ tokens of
that continuation; none when nothing matches). The verifier checks every proposal, so decoding stays lossless.

Greedy continuations of base models repeat themselves, and a drafter that can copy gets that acceptance for free,
whatever its budget or training. This copier measures how much: as a method of the grid (eval-cell ``--method
lookup``, label ``lookup``), and, for every row of every cell, which of its generated tokens the copier would have
predicted (`copied`: the copy share of a continuation).
"""

from __future__ import annotations

import numpy as np
import torch

from budgetdraft.decoding.drafter import READS_NOTHING, GreedyDrafter, VerifierPrefill
from budgetdraft.decoding.draftspec import DraftSpec

NGRAM = 2  # transformers' default max_matching_ngram_size


def propose(history: list[int] | np.ndarray, gamma: int, ngram: int = NGRAM) -> list[int]:
    """Up to ``gamma`` tokens copied from ``history``: after the first (leftmost) earlier occurrence of its last
    ``n`` tokens, for n = ``ngram`` down to 1, whose continuation is not empty (transformers' rule); [] when none."""
    h = np.asarray(history, dtype=np.int64)
    length = len(h)
    for n in range(min(ngram, length - 1), 0, -1):
        tail = h[length - n :]
        match = np.ones(length - n, dtype=bool)  # windows starting before the tail's own position
        for i in range(n):
            match &= h[i : length - n + i] == tail[i]
        starts = np.flatnonzero(match)
        if len(starts):  # a window before the tail always has a continuation: its start + n < length
            begin = int(starts[0]) + n
            return h[begin : begin + gamma].tolist()
    return []


def copied(prompt: list[int], tokens: list[int], ngram: int) -> list[bool]:
    """For each generated token, whether the copier (n-grams up to ``ngram``) would have predicted it: its first
    proposal from the prompt and the tokens before it."""
    history = np.asarray(list(prompt) + list(tokens), dtype=np.int64)
    start = len(prompt)
    return [propose(history[: start + t], 1, ngram)[:1] == [tokens[t]] for t in range(len(tokens))]


class LookupDrafter(GreedyDrafter):
    """Prompt lookup as a drafter of `budgetdraft.decoding.speculative` (``budgetdraft.decoding.drafter.Drafter``):
    its text is the prompt and every token it is fed; it may propose fewer than γ tokens, or none (then the
    verifier takes one step alone). Its `model` is the verifier (the vocabulary it copies from)."""

    reads = READS_NOTHING

    def __init__(self, verifier, ngram: int = NGRAM):
        if ngram < 1:
            raise ValueError(f"prompt lookup: ngram must be >= 1, got {ngram}")
        self.model, self.device, self.ngram = verifier, verifier.device, ngram
        self.text: list[int] = []
        self.fed_from = 0  # where the tokens fed by the last draft start

    def prefill(self, prompt: torch.Tensor, capacity: int, verifier: VerifierPrefill) -> None:
        self.text = prompt[0].tolist()

    def draft(self, pending: list[int], gamma: int) -> list[int]:
        """The tokens fed are ``pending`` and, as a model drafter feeds its own drafts, the proposals but the last
        when all γ are proposed (the loop hands that one back when every draft is accepted)."""
        self.fed_from = len(self.text)
        drafts = propose(self.text + list(pending), gamma, self.ngram)
        self.text += list(pending) + (drafts[:-1] if len(drafts) == gamma else drafts)
        return drafts

    def rollback(self, kept_new: int) -> None:
        del self.text[self.fed_from + kept_new :]

    def after_verify(self, verifier_output, accepted: int, bonus: int) -> None:
        pass

    def kv_bytes(self) -> int:
        return 0

    def weight_tensors(self):
        return []


def drafter_factory(verifier, draft: DraftSpec, extra: dict, load=None):
    """``eval-cell`` method lookup (no model of its own: ``load`` is not asked): ``extra`` may set ``ngram``."""
    unknown = set(extra) - {"ngram"}
    if unknown:
        raise ValueError(f"lookup takes --extra ngram only, got {sorted(unknown)}")
    ngram = int(extra.get("ngram", NGRAM))
    return lambda: LookupDrafter(verifier, ngram)
