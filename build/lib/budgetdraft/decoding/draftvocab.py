"""A reduced draft vocabulary (EAGLE-3 / FR-Spec style): the drafter scores only the ``size`` most frequent tokens
of its training data, the verifier still scores all of them, so the output stays the verifier's own.

On a small drafter the LM head is most of a draft step (SmolLM2's 49,152 × 576 head is ~10 of ~18 ms on one CPU
thread, bench/README.md); a head of 8K rows cuts that to a sixth. A token outside the reduced vocabulary can never
be drafted: it is never accepted from the drafter but comes from the verifier (its bonus or correction token),
exactly as any rejected draft. In sampling mode the drafter's q is zero outside the vocabulary, and the standard
rule (accept with min(1, p/q), resample from norm(max(0, p − q))) stays exact for any q.

    python -m budgetdraft draft-vocab --data results/data/train/budgetdraft.parquet --size 8192 --out vocab.safetensors
    python -m budgetdraft decode --draft-vocab vocab.safetensors ...
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from budgetdraft.base.atomic import atomic_path


def frequent_tokens(sequences: Iterable[Sequence[int]], size: int) -> torch.Tensor:
    """The ``size`` most frequent token ids of ``sequences`` (ties: the smaller id), sorted by id."""
    if size < 1:
        raise ValueError(f"draft vocabulary size must be >= 1, got {size}")
    ids = torch.cat([torch.as_tensor(list(s), dtype=torch.long) for s in sequences])
    counts = torch.bincount(ids)
    seen = int((counts > 0).sum())
    if size > seen:
        raise ValueError(f"draft vocabulary size {size} exceeds the {seen} distinct tokens of the data")
    return torch.argsort(-counts, stable=True)[:size].sort().values


def save_vocab(ids: torch.Tensor, path: Path) -> None:
    with atomic_path(Path(path)) as tmp:
        save_file({"ids": ids.contiguous()}, str(tmp))


def load_vocab(path: Path) -> torch.Tensor:
    """The token ids of a draft vocabulary file (``--draft-vocab``); one that is no such file is a ValueError naming
    it (safetensors' own error names no file, and a directory is an OSError "No such device")."""
    try:
        return load_file(str(path))["ids"].long()
    except (SafetensorError, OSError, KeyError) as err:
        raise ValueError(
            f"--draft-vocab {path} is not a draft vocabulary file ({err}): write one with `budgetdraft draft-vocab`"
        ) from None


class ReducedHead:
    """The drafter's LM head restricted to ``ids``: full-vocabulary logits, −inf outside ``ids``."""

    def __init__(self, model, ids: torch.Tensor):
        head = model.get_output_embeddings()
        vocab = head.weight.shape[0]
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise ValueError(f"draft vocabulary ids must lie in [0, {vocab}) (the drafter's vocabulary)")
        self.ids = ids.to(head.weight.device)
        self.weight = head.weight.detach()[self.ids].clone()
        self.bias = None if head.bias is None else head.bias.detach()[self.ids].clone()
        self.vocab = vocab

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` [H] (the decoder's normed last hidden state) -> logits [V]."""
        logits = hidden.new_full((self.vocab,), float("-inf"))
        logits[self.ids] = torch.nn.functional.linear(hidden, self.weight, self.bias)
        return logits
