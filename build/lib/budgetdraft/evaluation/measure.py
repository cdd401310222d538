"""How long a generation took and what memory it held: the decode loop measured from outside.

The loop (``budgetdraft.decoding.loop``) decides tokens and reads no clock and no memory; a cell's timing and memory
columns are measured here, through the two seams the loop offers: the drafter it is handed (``TimedDrafter``: its
``prefill``, ``draft`` and ``draft_sampled``) and the ``Verifier`` its ``Options.verifier`` builds
(``TimedVerifier``: ``prefill``, ``prefill_state``, ``check``, ``step``). Each of those calls is a phase of one
``Clock``: on CUDA a pair of events recorded on the stream, resolved once after the generation, when the device is
synchronised for its end-to-end time; on a CPU the host clock. Nothing synchronises mid-loop, so a round on the
graphs engine still reads the device once. Around the call: the peak memory counter reset before, read after; the
bytes held in weights and KV caches (``DecodeStats.record_memory``); for AR the memory-bandwidth bound.

``timed_autoregressive`` and ``timed_speculative`` here take the loop's arguments and return its ``Generation`` with
``stats`` a ``DecodeStats``: the loop's counts plus the columns below (docs/architecture.md, the cell's columns):

- ``verifier_prefill_s``: the verifier's prefill; with a shared prefill (``evaluation.prefill``) the seconds it
  took when computed, charged in place of the copy's (``total_s`` likewise);
- ``drafter_prefill_s``: what the drafter reads of the verifier's prefill (``Verifier.prefill_state``) and its own
  prefill; with a shared full prefill (``sparse_drafter.shared_prefills``) the seconds it took when computed, plus
  cutting it to the budget; ``draft_s``: its drafting; ``verify_s``: the verifier's steps after the prefill (AR:
  every step);
- ``total_s``: from the verifier's prefill to the end of the last round, the device synchronised at both ends;
  ``decode_s`` = ``total_s`` − both prefills.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections import defaultdict
from dataclasses import asdict, dataclass

import torch

from budgetdraft.decoding import loop
from budgetdraft.decoding.metrics import DecodeCounts, kv_bytes_per_token
from budgetdraft.decoding.verifier import Verifier, weight_bytes


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


class Clock:
    """Seconds per phase of one generation without stopping the device in between: on CUDA each phase is a pair
    of events, resolved once at ``stop``; on a CPU the host clock. ``start`` / ``stop`` bound the whole generation,
    the device synchronised at both (its only synchronisations)."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._seconds: dict[str, float] = defaultdict(float)
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._watch = Stopwatch(self.device)
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

    def start(self) -> None:
        self._watch.start()

    def stop(self) -> None:
        self.total_s = self._watch.stop()
        for phase, start, end in self._events:  # all recorded, the device synchronised: no wait
            self._seconds[phase] += start.elapsed_time(end) / 1000
        self._events = []

    def seconds(self, phase: str) -> float:
        return self._seconds.get(phase, 0.0)


class TimedVerifier(Verifier):
    """The loop's ``Verifier`` with its phases on ``clock``; its prefill starts the generation's clock."""

    def __init__(self, clock: Clock, *args):
        super().__init__(*args)
        self.clock = clock

    def prefill(self, *args, **kwargs):
        self.clock.start()
        with self.clock("verifier_prefill"):
            return super().prefill(*args, **kwargs)

    def prefill_state(self, *args, **kwargs):
        with self.clock("drafter_prefill"):  # what the drafter reads of the prefill is the drafter's cost
            return super().prefill_state(*args, **kwargs)

    def check(self, *args, **kwargs):
        with self.clock("verify"):
            return super().check(*args, **kwargs)

    def step(self, *args, **kwargs):
        with self.clock("verify"):
            return super().step(*args, **kwargs)


class TimedDrafter:
    """A drafter (``budgetdraft.decoding.drafter.Drafter``) with its prefill and drafting on ``clock``; every other
    member is the drafter's own."""

    def __init__(self, drafter, clock: Clock):
        self.drafter, self.clock = drafter, clock

    def __getattr__(self, name: str):
        return getattr(self.drafter, name)

    def prefill(self, *args, **kwargs):
        with self.clock("drafter_prefill"):
            return self.drafter.prefill(*args, **kwargs)

    def draft(self, *args, **kwargs):
        with self.clock("draft"):
            return self.drafter.draft(*args, **kwargs)

    def draft_sampled(self, *args, **kwargs):
        with self.clock("draft"):
            return self.drafter.draft_sampled(*args, **kwargs)


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


@dataclass
class DecodeStats(DecodeCounts):
    """One measured generation: the loop's counts, its timings (seconds) and its memory (MB), a cell's row."""

    verifier_prefill_s: float = 0.0
    drafter_prefill_s: float = 0.0
    decode_s: float = 0.0
    total_s: float = 0.0
    draft_s: float = 0.0  # seconds in drafter.draft
    verify_s: float = 0.0  # seconds in verifier forwards + verify after the prefill (AR: its decode steps)
    peak_mem_mb: float = 0.0  # see mem_kind
    mem_kind: str = ""  # "cuda_max_allocated" or "cpu_tensor_bytes" (``peak_memory``)
    peak_tensor_mb: float = 0.0  # max over the run of weights + all KV caches, counted from the tensors
    drafter_kv_mb: float = 0.0  # max of the drafter's KV caches (0 for AR)
    verifier_kv_mb: float = 0.0  # max of the verifier's KV cache
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

    @property
    def tok_per_s(self) -> float:
        return self.new_tokens / self.total_s if self.total_s else float("nan")

    def as_dict(self) -> dict:
        row = super().as_dict()
        row.update(tok_per_s=self.tok_per_s, bound_fraction=self.bound_fraction)
        return row


class Measurement:
    """One measured generation: its clock, the timed verifier the loop builds through it, and the stats."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.clock = Clock(self.device)
        self.verifier: TimedVerifier | None = None

    def build_verifier(self, *args) -> TimedVerifier:  # the loop's Options.verifier
        self.verifier = TimedVerifier(self.clock, *args)
        return self.verifier

    def run(self, decode, *args, **options) -> loop.Generation:
        reset_peak_memory(self.device)
        gen = decode(*args, verifier=self.build_verifier, **options)
        self.clock.stop()
        return gen

    def stats(
        self, gen: loop.Generation, weights: int, drafter_kv: int = 0, drafter_recorded: float | None = None
    ) -> DecodeStats:
        """The generation's counts with its clock and memory: a shared prefill is charged the seconds it took when
        computed (the verifier's; the drafter's full prefill, ``drafter_recorded``, on top of cutting it)."""
        stats, clock, verifier = DecodeStats(**asdict(gen.stats)), self.clock, self.verifier
        stats.record_memory(weights, verifier.kv_bytes(), drafter_kv)
        recorded, spent = verifier.recorded_prefill_s, clock.seconds("verifier_prefill")
        stats.verifier_prefill_s = spent if recorded is None else recorded
        stats.drafter_prefill_s = clock.seconds("drafter_prefill") + (drafter_recorded or 0.0)
        stats.total_s = clock.total_s + stats.verifier_prefill_s - spent + (drafter_recorded or 0.0)
        stats.draft_s, stats.verify_s = clock.seconds("draft"), clock.seconds("verify")
        stats.decode_s = stats.total_s - stats.verifier_prefill_s - stats.drafter_prefill_s
        stats.peak_mem_mb, stats.mem_kind = peak_memory(self.device, stats.peak_tensor_mb)
        return stats


def timed_autoregressive(verifier_model, prompt_ids: list[int], max_new_tokens: int, **options) -> loop.Generation:
    """``budgetdraft.decoding.loop.autoregressive``, measured (``stats``: a ``DecodeStats``, the bound included)."""
    run = Measurement(verifier_model.device)
    gen = run.run(loop.autoregressive, verifier_model, prompt_ids, max_new_tokens, **options)
    weights = weight_bytes(verifier_model)
    gen.stats = run.stats(gen, weights)
    # after the peak is read: the first measure of the bandwidth allocates 2 GiB on the device
    gen.stats.record_bound(device_bandwidth(run.device), weights, kv_bytes_per_token(run.verifier.cache))
    return gen


def timed_speculative(
    drafter, verifier_model, prompt_ids: list[int], max_new_tokens: int, gamma: int, **options
) -> loop.Generation:
    """``budgetdraft.decoding.loop.speculative``, measured (``stats``: a ``DecodeStats``)."""
    # refused before anything is timed, naming the drafter itself rather than its timed proxy
    loop.check_speculative(drafter, verifier_model, len(prompt_ids), max_new_tokens, gamma, options.get("sampling"))
    run = Measurement(verifier_model.device)
    timed = TimedDrafter(drafter, run.clock)
    gen = run.run(loop.speculative, timed, verifier_model, prompt_ids, max_new_tokens, gamma, **options)
    recorded = getattr(drafter, "recorded_prefill_s", None)  # a drafter that took a shared full prefill
    gen.stats = run.stats(gen, weight_bytes(verifier_model, drafter), drafter.kv_bytes(), recorded)
    return gen
