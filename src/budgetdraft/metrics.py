"""Per-sample decoding metrics: timings (CUDA-synchronised), acceptance, τ, peak memory."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Wall-clock seconds between ``start`` and ``stop``, with the device synchronised at both ends."""

    def __init__(self, device: torch.device | str):
        self.device = device

    def __enter__(self) -> Stopwatch:
        synchronize(self.device)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.seconds = time.perf_counter() - self.t0


def reset_peak_memory(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device | str, tensor_mb: float) -> tuple[float, str]:
    """The run's peak memory in MB and what it measures. CUDA: ``max_memory_allocated`` since the last reset
    (activations included). CPU: ``tensor_mb``, the weights + KV caches counted from the tensors, since the
    process's peak RSS includes model loading and earlier runs and cannot isolate the caches."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    return tensor_mb, "cpu_tensor_bytes"


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
class DecodeStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    verifier_prefill_s: float = 0.0
    drafter_prefill_s: float = 0.0
    decode_s: float = 0.0
    total_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    verifier_forwards: int = 0
    reached_by_position: list[int] = field(default_factory=list)  # draft position i was verified
    accepted_by_position: list[int] = field(default_factory=list)  # ... and accepted
    peak_mem_mb: float = 0.0  # see mem_kind
    mem_kind: str = ""  # "cuda_max_allocated" or "cpu_tensor_bytes" (``peak_memory``)
    peak_tensor_mb: float = 0.0  # max over the run of weights + all KV caches, counted from the tensors
    drafter_kv_mb: float = 0.0  # max of the drafter's KV caches (0 for AR)
    verifier_kv_mb: float = 0.0  # max of the verifier's KV cache
    draft_s: float = 0.0  # seconds in drafter.draft
    draft_steps: int = 0  # drafter steps: the tokens drafted (one forward each for SparseDrafter)
    verify_s: float = 0.0  # seconds in verifier forwards + verify after the prefill (AR: its decode steps)

    def record_memory(self, weight_bytes: int, verifier_kv: int, drafter_kv: int = 0) -> None:
        """One sample of the bytes held in tensors; the fields keep their maxima over the run."""
        mb = 2**-20
        self.peak_tensor_mb = max(self.peak_tensor_mb, (weight_bytes + verifier_kv + drafter_kv) * mb)
        self.verifier_kv_mb = max(self.verifier_kv_mb, verifier_kv * mb)
        self.drafter_kv_mb = max(self.drafter_kv_mb, drafter_kv * mb)

    def record_round(self, drafted: int, accepted: int) -> None:
        """One verification of ``drafted`` draft tokens of which the first ``accepted`` matched."""
        self.verifier_forwards += 1
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
    def tok_per_s(self) -> float:
        return self.new_tokens / self.total_s if self.total_s else float("nan")

    @property
    def accept_by_position(self) -> list[float]:
        return [a / r if r else float("nan") for a, r in zip(self.accepted_by_position, self.reached_by_position)]

    def as_dict(self) -> dict:
        row = asdict(self)
        row.update(
            acceptance=self.acceptance,
            tau=self.tau,
            tok_per_s=self.tok_per_s,
            accept_by_position=self.accept_by_position,
        )
        return row
