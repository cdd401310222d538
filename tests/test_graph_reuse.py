"""Captures that pay for themselves (``budgetdraft.decoding.engine``): a capacity met again in the same process
reuses its cache buffers, so its captured graphs replay instead of compiling or re-recording; the caches kept for
other capacities stay within a limit and give way to a new one; a round waits for the device once.

On the CPU the ``graphs`` engine's AOT-traced steps are guarded on shapes, not addresses, so a capacity met again
compiled nothing even when its buffers were new; on CUDA a new static address re-records the graph. What CUDA needs
is therefore checked directly: the same tensor objects (hence the same addresses) as the first generation's.
"""

import pytest
import torch
import torch._dynamo.utils
from conftest import HOST_READS, tiny_llama

from budgetdraft.decoding import engine
from budgetdraft.decoding.engine import Steps, rounded_capacity, steps_for
from budgetdraft.decoding.kvcache import PreallocatedCache, prefill
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.decoding.verifier import Verifier

GAMMA = 4


@pytest.fixture(scope="module")
def pair():
    return tiny_llama(seed=2, layers=2), tiny_llama(seed=3, layers=1)  # verifier, drafter: this module's own


def prompt(length: int = 40, seed: int = 0) -> list[int]:
    return torch.randint(0, 96, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def buffers(steps: Steps) -> list[torch.Tensor]:
    return [t for layer in steps.cache.layers for t in (layer.keys, layer.values)]


def sd(pair, budget: int, new: int, engine_name: str, seed: int = 0):
    verifier, drafter = pair
    gen = speculative(
        SparseDrafter(drafter, budget, "topk_chunks", 8, 8, engine=engine_name), verifier, prompt(seed=seed), new,
        GAMMA, eos_token_id=[], engine=engine_name,
    )  # fmt: skip
    return gen.tokens


def test_a_capacity_met_again_reuses_its_buffers_and_compiles_nothing(pair):
    """Cells A, B, A (the drafter's budget 16, 32, 16; the verifier's context 33 and 65 new tokens): the third
    runs on the first one's very buffers (static addresses: a CUDA graph replays) and compiles nothing, and every
    cell decodes the verifier's greedy tokens."""
    verifier, drafter = pair
    cells = [(16, 33), (32, 65), (16, 33)]
    assert len({rounded_capacity(40 + new + GAMMA + 1) for _, new in cells}) == 2  # the verifier alternates too
    sd(pair, *cells[0], "graphs")
    first = {
        role: buffers(steps_for(model, "graphs", role))
        for role, model in (("verifier", verifier), ("drafter", drafter))
    }
    sd(pair, *cells[1], "graphs")
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        tokens = sd(pair, *cells[2], "graphs", seed=1)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    for role, model in (("verifier", verifier), ("drafter", drafter)):
        again = buffers(steps_for(model, "graphs", role))
        assert all(a is b for a, b in zip(again, first[role], strict=True)), role
    assert (
        tokens
        == sd(pair, *cells[2], "eager", seed=1)
        == autoregressive(verifier, prompt(seed=1), 33, eos_token_id=[]).tokens
    )


def test_a_tiny_limit_evicts_and_the_evicted_capacity_is_rebuilt_correctly(pair, monkeypatch):
    """With no bytes allowed for kept caches, a cell of another budget drops the first budget's cache; the first
    budget met again builds a new one and still decodes the verifier's greedy tokens."""
    verifier, drafter = pair
    monkeypatch.setattr(engine, "KEPT_BYTES", 0)
    steps = steps_for(drafter, "eager", "drafter")
    sd(pair, 16, 33, "eager")
    first = buffers(steps)
    sd(pair, 32, 33, "eager")
    assert set(steps.caches) == {steps.cache.capacity}  # the budget-16 cache is gone
    tokens = sd(pair, 16, 33, "eager", seed=1)
    assert buffers(steps)[0] is not first[0]
    assert tokens == autoregressive(verifier, prompt(seed=1), 33, eos_token_id=[]).tokens


def started(steps: Steps, model, capacity: int) -> PreallocatedCache:
    cache = steps.start(capacity)
    prefill(model, torch.tensor([prompt(8)]), cache)
    return cache


def test_kept_caches_go_least_recently_used_first(pair, monkeypatch):
    """Room for one kept cache: after capacities A, B, A, C the kept one is A (started after B), B went first."""
    _, drafter = pair
    steps = Steps(drafter, "eager")
    a = started(steps, drafter, 16)
    monkeypatch.setattr(engine, "KEPT_BYTES", engine.cache_bytes(a))
    started(steps, drafter, 32)
    assert steps.start(16) is a  # reused, and already allocated: a new capacity's buffers come at start
    c = steps.start(48)
    assert c.layers[0].is_initialized and c.layers[0].keys.shape[2] == 48
    assert set(steps.caches) == {16, 48}


def test_out_of_memory_drops_the_kept_caches_and_tries_once_more(pair, monkeypatch):
    _, drafter = pair
    steps = Steps(drafter, "eager")
    started(steps, drafter, 16)
    allocate, failures = PreallocatedCache.allocate, []

    def fails_once(cache, shapes):
        if not failures:
            failures.append(cache.capacity)
            raise torch.OutOfMemoryError("out of memory (simulated)")
        return allocate(cache, shapes)

    monkeypatch.setattr(PreallocatedCache, "allocate", fails_once)
    cache = steps.start(32)
    assert failures == [32] and cache.layers[0].keys.shape[2] == 32
    assert set(steps.caches) == {32}  # the kept capacity-16 cache was dropped to make room


class HostTraffic:
    """Counts what makes a GPU's host wait for the device: reads of a tensor's value (``tolist``, ``item``, ``int``
    ...) and blocking host→device copies (``torch.tensor(data, device=...)``, or ``.to(device)`` of a host tensor
    without ``non_blocking``: PyTorch copies pageable memory and then synchronises the stream)."""

    def __init__(self, monkeypatch):
        self.reads = self.copies = 0
        self.host: dict[int, torch.Tensor] = {}  # by id, the tensors made from host data (held: ids stay unique)
        for name in HOST_READS:
            monkeypatch.setattr(torch.Tensor, name, self.read(getattr(torch.Tensor, name)))
        for name in ("tensor", "as_tensor"):
            monkeypatch.setattr(torch, name, self.made(getattr(torch, name)))
        monkeypatch.setattr(torch.Tensor, "to", self.moved(torch.Tensor.to))

    def read(self, original):
        def counted(tensor, *args, **kwargs):
            self.reads += 1
            return original(tensor, *args, **kwargs)

        return counted

    def made(self, original):
        def counted(data, *args, **kwargs):
            tensor = original(data, *args, **kwargs)
            if not torch.is_tensor(data):  # host data: a copy to the device if one is named, else a host tensor
                self.copies += kwargs.get("device") is not None
                self.host[id(tensor)] = tensor
            return tensor

        return counted

    def moved(self, original):
        def counted(tensor, *args, **kwargs):
            device, _, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
            self.copies += id(tensor) in self.host and device is not None and not non_blocking
            return original(tensor, *args, **kwargs)

        return counted

    def per_round(self, run) -> list[tuple[int, int]]:
        """(reads, copies) of each round after the first (the prefill's token), counted between observer calls."""
        marks = []
        run(lambda round: marks.append((self.reads, self.copies)))
        return [(r1 - r0, c1 - c0) for (r0, c0), (r1, c1) in zip(marks, marks[1:])]


def gpu_verifier(*args):
    """The verifier as a GPU runs it: the LM head over the whole verify at once (on a CPU it runs lazily, a second
    read where the first draft holds, which costs nothing there)."""
    verifier = Verifier(*args)
    verifier.lazy_head = False
    return verifier


def test_a_round_waits_for_the_device_once(pair, monkeypatch):
    """A greedy round (γ drafter steps, the verify, the accept) reads the device once, drafts, verdict and bonus
    together: the host must know them to emit the round, roll the caches back and stop at EOS, so one is the
    minimum. Its token ids go to the device without a blocking copy (the verify's would wait for the drafts)."""
    verifier, drafter = pair
    p = prompt()
    traffic = HostTraffic(monkeypatch)
    rounds = traffic.per_round(
        lambda observer: speculative(
            SparseDrafter(drafter, 16, "topk_chunks", 8, 8),
            verifier,
            p,
            33,
            GAMMA,
            eos_token_id=[],
            observer=observer,
            verifier=gpu_verifier,
        )  # fmt: skip
    )
    assert len(rounds) >= 33 // (GAMMA + 1) and set(rounds) == {(1, 0)}
    steps = traffic.per_round(lambda observer: autoregressive(verifier, p, 17, eos_token_id=[], observer=observer))
    assert steps == [(1, 0)] * 16  # an AR step: its token and runner-up read together, its input queued
