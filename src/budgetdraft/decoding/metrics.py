"""What a generation decided, counted (``DecodeCounts``: acceptance by round, τ), and the device-level tools a caller
measures one with: a synchronised ``Stopwatch``, the device's memory bandwidth, the bytes held in tensors and caches.
The loop (``budgetdraft.decoding.loop``) keeps the counts and calls none of the tools; who times a generation and
reads its memory is ``budgetdraft.evaluation.measure``."""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch

from budgetdraft.base.defaults import ENGINE


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Wall-clock seconds between ``start`` and ``stop`` (or over a ``with`` block), with the device synchronised
    at both ends."""

    def __init__(self, device: torch.device | str):
        self.device = device

    def start(self) -> None:
        synchronize(self.device)
        self.t0 = time.perf_counter()

    def stop(self) -> float:
        synchronize(self.device)
        self.seconds = time.perf_counter() - self.t0
        return self.seconds

    def __enter__(self) -> Stopwatch:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@functools.cache
def device_bandwidth(device: torch.device | str) -> float:
    """The device's memory bandwidth in GB/s (read + write), measured once per process: the best of 5 copies of
    a 1 GiB buffer on the device. NaN on a CPU (its bound is not what the GPU figures compare against)."""
    device = torch.device(device)
    if device.type != "cuda":
        return math.nan
    src = torch.empty(2**30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(6):  # the first one warms up
        with Stopwatch(device) as t:
            dst.copy_(src)
        best = min(best, t.seconds)
    del src, dst
    return 2 * 2**30 / best / 1e9


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

    def record_round(self, drafted: int, accepted: int) -> None:
        """One round of ``drafted`` draft tokens of which the first ``accepted`` matched (0 / 0: an AR step)."""
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
