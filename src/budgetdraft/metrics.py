"""Per-sample decoding metrics: timings (CUDA-synchronised), acceptance, τ, peak memory."""

from __future__ import annotations

import resource
import time
from dataclasses import asdict, dataclass, field

import torch


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Wall-clock seconds between ``start`` and ``stop``, with the device synchronised at both ends."""

    def __init__(self, device: torch.device | str):
        self.device = device

    def __enter__(self) -> "Stopwatch":
        synchronize(self.device)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.seconds = time.perf_counter() - self.t0


def reset_peak_memory(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device | str) -> float:
    """CUDA: ``max_memory_allocated`` since the last reset. CPU: the process's peak resident set size."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


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
    peak_mem_mb: float = 0.0

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
        row.update(acceptance=self.acceptance, tau=self.tau, tok_per_s=self.tok_per_s,
                   accept_by_position=self.accept_by_position)
        return row
