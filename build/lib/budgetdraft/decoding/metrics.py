"""What a generation decided, counted (``DecodeCounts``: acceptance by round, τ), and the bytes held in tensors and
caches. The loop (``budgetdraft.decoding.loop``) keeps the counts; what times a generation (the clock, the
``Stopwatch``, the device's bandwidth) and reads its memory is ``budgetdraft.evaluation.measure``: metrics counts,
measure times."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch

from budgetdraft.base.defaults import ENGINE


def kv_bytes_per_token(cache) -> int:
    """Bytes of keys + values one position takes over all layers of a ``transformers.Cache``."""
    return sum(
        t.element_size() * t.shape[1] * t.shape[-1] for layer in cache.layers for t in (layer.keys, layer.values)
    )


def storage_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind ``tensors``: a storage shared by several of them (tied embeddings,
    views) counts once, and in full (what is allocated, not what is valid); None (an unwritten layer) counts 0."""
    sizes = {}
    for t in tensors:
        if t is not None:
            storage = t.untyped_storage()
            sizes[storage.data_ptr()] = storage.nbytes()
    return sum(sizes.values())


def module_tensors(module: torch.nn.Module) -> Iterable[torch.Tensor]:
    return itertools.chain(module.parameters(), module.buffers())


def cache_bytes(cache) -> int:
    """Allocated bytes of a ``transformers.Cache`` (e.g. ``PreallocatedCache``: its whole buffers)."""
    return storage_bytes(t for layer in cache.layers for t in (layer.keys, layer.values))


ACCEPTED, REJECTED, UNDRAFTED = 1, 0, -1  # what became of the draft made for an emitted token (DecodeCounts.outcomes)


@dataclass
class DecodeCounts:
    """What one generation decided, counted by the loop as it emits each round (``budgetdraft.evaluation.measure``
    adds the clock and the memory: ``DecodeStats``)."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    drafted: int = 0  # drafts of the emitted rounds, up to the last emitted token (``Emission``)
    accepted: int = 0  # ... of which accepted and emitted
    verifier_forwards: int = 0
    reached_by_position: list[int] = field(default_factory=list)  # draft position i was verified
    accepted_by_position: list[int] = field(default_factory=list)  # ... and accepted
    draft_steps: int = 0  # drafter steps run: the tokens drafted (one forward each for SparseDrafter)
    engine: str = ENGINE  # how the decode steps ran (budgetdraft.decoding.engine)
    # per emitted token, what became of the draft made for it: ACCEPTED, REJECTED (the verifier's bonus replaced
    # it) or UNDRAFTED (no draft was judged for that position: the first token, a bonus after every draft held, AR)
    outcomes: list[int] = field(default_factory=list)

    def record_round(self, drafted: int, accepted: int, emitted: int | None = None) -> None:
        """One round of ``drafted`` draft tokens of which the first ``accepted`` matched (0 / 0: an AR step), of
        which ``emitted`` tokens were emitted (default: the accepted drafts and the bonus)."""
        emitted = accepted + 1 if emitted is None else emitted
        judged = [ACCEPTED] * accepted + [REJECTED if drafted > accepted else UNDRAFTED]
        self.outcomes += judged[:emitted]
        self.drafted += drafted
        self.accepted += accepted
        grow = drafted - len(self.reached_by_position)
        if grow > 0:
            self.reached_by_position += [0] * grow
            self.accepted_by_position += [0] * grow
        for i in range(drafted):
            self.reached_by_position[i] += 1
            self.accepted_by_position[i] += i < accepted

    @property
    def acceptance(self) -> float:
        """α = accepted draft tokens / drafted tokens (NaN when nothing was drafted, e.g. AR)."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tau(self) -> float:
        """Tokens produced per verifier forward, the prefill included (1 for AR; γ + 1 at most for SD)."""
        return self.new_tokens / self.verifier_forwards if self.verifier_forwards else float("nan")

    @property
    def accept_by_position(self) -> list[float]:
        return [a / r if r else float("nan") for a, r in zip(self.accepted_by_position, self.reached_by_position)]

    def as_dict(self) -> dict:
        row = asdict(self)
        row.update(acceptance=self.acceptance, tau=self.tau, accept_by_position=self.accept_by_position)
        return row
