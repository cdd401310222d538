"""Per-sample decoding metrics: timings (CUDA-synchronised), acceptance, τ, peak memory, and the memory-bandwidth
bound of a decode step (how close to the hardware's limit the clock says we are)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import time
from collections import defaultdict
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


class Clock:
    """Seconds per phase of one generation without stopping the device in between: on CUDA each phase is a pair
    of events, resolved once at the end of ``total``; on a CPU the host clock. ``total()`` times the whole
    generation, the device synchronised at both ends (``Stopwatch``)."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._seconds: dict[str, float] = defaultdict(float)
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self.total_s = math.nan

    @contextlib.contextmanager
    def __call__(self, phase: str):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events.append((phase, start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._seconds[phase] += time.perf_counter() - t0

    @contextlib.contextmanager
    def total(self):
        with Stopwatch(self.device) as watch:
            yield
        self.total_s = watch.seconds
        for phase, start, end in self._events:  # all recorded, the device synchronised: no wait
            self._seconds[phase] += start.elapsed_time(end) / 1000
        self._events = []

    def seconds(self, phase: str) -> float:
        return self._seconds.get(phase, 0.0)


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
    engine: str = "eager"  # how the decode steps ran (budgetdraft.decoding.engine)
    bandwidth_gbs: float = math.nan  # the device's memory bandwidth (device_bandwidth; NaN on a CPU)
    step_bytes: float = math.nan  # AR: bytes one decode step must read, verifier weights + its KV at the prompt

    def record_memory(self, weight_bytes: int, verifier_kv: int, drafter_kv: int = 0) -> None:
        """One sample of the bytes held in tensors; the fields keep their maxima over the run."""
        mb = 2**-20
        self.peak_tensor_mb = max(self.peak_tensor_mb, (weight_bytes + verifier_kv + drafter_kv) * mb)
        self.verifier_kv_mb = max(self.verifier_kv_mb, verifier_kv * mb)
        self.drafter_kv_mb = max(self.drafter_kv_mb, drafter_kv * mb)

    def record_bound(self, bandwidth_gbs: float, weight_bytes: int, kv_per_token: int) -> None:
        """What bounds an AR step from below: the bytes it must read (weights, and the KV of the prompt) at the
        device's bandwidth."""
        self.bandwidth_gbs = bandwidth_gbs
        self.step_bytes = float(weight_bytes + kv_per_token * self.prompt_tokens)

    @property
    def bound_fraction(self) -> float:
        """AR: decode tok/s (the steps after the prefill) ÷ the bandwidth bound's bandwidth ÷ step_bytes; NaN where
        either is unknown."""
        steps = self.new_tokens - 1
        if not steps or not self.verify_s or math.isnan(self.bandwidth_gbs) or math.isnan(self.step_bytes):
            return math.nan
        return (steps / self.verify_s) / (self.bandwidth_gbs * 1e9 / self.step_bytes)

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
            bound_fraction=self.bound_fraction,
        )
        return row
