"""A cell's timings and memory, measured from outside the loop (``budgetdraft.evaluation.measure``): every column
filled with sane values on the CPU, the loop's tokens and counts unchanged, and on CUDA a clock of events that
synchronises the device only at the two ends of a generation (faked here: the phases' bookkeeping is the same)."""

import math
import time
from dataclasses import asdict

import pytest
import torch
from conftest import tiny_llama

from budgetdraft.decoding import loop
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.evaluation import measure
from budgetdraft.evaluation.cells import CELL_COLUMNS, COPY_NGRAMS

NEW, GAMMA = 24, 4
ROW_ONLY = {  # a cell row's columns that run_cell writes itself, not the generation's stats
    "label", "method", "dataset", "context", "budget", "gamma", "policy", "replicate", "sample", "doc_id", "repeat",
    "device", "output_ids", "runner_up_ids", "top2_margins", "config",
    "draft_outcomes",  # the stats' `outcomes`, renamed
    *(f"{c}_{n}" for c in ("copied", "copy_share") for n in COPY_NGRAMS),  # the copier's, from the output
}  # fmt: skip


@pytest.fixture(scope="module")
def pair():
    return tiny_llama(seed=0, layers=3), tiny_llama(seed=1, layers=2)  # verifier, drafter


def prompt(length: int = 64) -> list[int]:
    return torch.randint(0, 96, (length,), generator=torch.Generator().manual_seed(length)).tolist()


def measured(pair, method: str):
    verifier, drafter = pair
    if method == "ar":
        return lambda decode: decode(verifier, prompt(), NEW, eos_token_id=[])
    return lambda decode: decode(SparseDrafter(drafter, 16, "topk_chunks", 8, 8), verifier, prompt(), NEW, GAMMA,
                                 eos_token_id=[])  # fmt: skip


@pytest.mark.parametrize("method", ["ar", "sd"])
def test_a_measured_generation_fills_every_column_with_sane_values(pair, method):
    run = measured(pair, method)
    plain = run(getattr(loop, "autoregressive" if method == "ar" else "speculative"))
    t0 = time.perf_counter()
    gen = run(getattr(measure, "timed_autoregressive" if method == "ar" else "timed_speculative"))
    wall = time.perf_counter() - t0
    s = gen.stats
    row = s.as_dict()
    assert set(CELL_COLUMNS) - ROW_ONLY <= set(row), set(CELL_COLUMNS) - ROW_ONLY - set(row)
    assert len(row["outcomes"]) == s.new_tokens and row["outcomes"].count(1) == s.accepted  # one per token
    # the measured run decides what the plain loop decides, and counts it the same
    assert gen.tokens == plain.tokens and gen.runner_up == plain.runner_up
    assert {k: row[k] for k in asdict(plain.stats)} == asdict(plain.stats)
    # timings: the phases inside the whole, the whole inside the call, prefill + decode = total
    assert 0 < s.total_s <= wall
    assert s.verifier_prefill_s > 0 and s.decode_s > 0 and s.verify_s > 0
    assert s.verifier_prefill_s + s.drafter_prefill_s + s.decode_s == pytest.approx(s.total_s)
    assert s.draft_s + s.verify_s <= s.decode_s
    assert s.draft_s + s.verify_s >= 0.5 * s.decode_s  # the decode is its steps, not the loop's bookkeeping
    assert s.tok_per_s == pytest.approx(NEW / s.total_s)
    if method == "ar":
        assert s.drafter_prefill_s == s.draft_s == 0 and s.draft_steps == 0
        assert math.isnan(s.bandwidth_gbs) and s.step_bytes > 0 and math.isnan(s.bound_fraction)  # no bound on a CPU
    else:
        assert s.drafter_prefill_s > 0 and s.draft_s > 0 and s.draft_steps == s.drafted > 0
        assert math.isnan(s.step_bytes)
    # memory: counted from the tensors on a CPU
    assert s.mem_kind == "cpu_tensor_bytes" and s.peak_mem_mb == s.peak_tensor_mb > s.verifier_kv_mb > 0
    assert (s.drafter_kv_mb > 0) == (method == "sd")


def test_a_shared_prefill_is_charged_its_recorded_seconds(pair, monkeypatch):
    """``_close``'s rule, now the measure's: a prefill copied in is charged the seconds it took when computed, in
    ``verifier_prefill_s`` and in ``total_s`` (in place of the copy's)."""
    verifier, drafter = pair
    p = prompt()
    recorded = 3.0  # far above anything the copy takes
    real_prefill = loop.Verifier.prefill

    def prefill(self, *args, **kwargs):  # the prefill runs, but reports itself shared
        token = real_prefill(self, *args, **kwargs)
        self.recorded_prefill_s = recorded
        return token

    monkeypatch.setattr(loop.Verifier, "prefill", prefill)
    s = measure.timed_speculative(SparseDrafter(drafter, 16), verifier, p, NEW, GAMMA, eos_token_id=[]).stats
    assert s.verifier_prefill_s == recorded and recorded < s.total_s < recorded + 60
    assert s.verifier_prefill_s + s.drafter_prefill_s + s.decode_s == pytest.approx(s.total_s)


class FakeEvents:
    """Stands in for CUDA: events that record the host clock, a ``synchronize`` that logs when it runs, and a log
    of when each event was read (``elapsed_time``)."""

    def __init__(self):
        self.log: list[str] = []
        events = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.t = None

            def record(self, stream=None):
                events.log.append("record")
                self.t = time.perf_counter()

            def elapsed_time(self, end) -> float:
                events.log.append("read")
                return (end.t - self.t) * 1e3

        self.Event = Event

    def synchronize(self, device):
        self.log.append("sync")


@pytest.mark.parametrize("method", ["ar", "sd"])
def test_on_cuda_the_phases_are_events_read_once_after_the_one_synchronisation_at_the_end(pair, method, monkeypatch):
    fake = FakeEvents()

    class CudaClock(measure.Clock):
        def __init__(self, device):
            super().__init__(device)
            self.cuda = True

    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    monkeypatch.setattr(measure, "synchronize", fake.synchronize)  # what the clock's Stopwatch calls
    monkeypatch.setattr(measure, "Clock", CudaClock)
    s = measured(pair, method)(
        getattr(measure, "timed_autoregressive" if method == "ar" else "timed_speculative")
    ).stats
    log = fake.log
    assert log.count("sync") == 2 and log[0] == "sync"  # the start of the generation ...
    end = log.index("sync", 1)
    assert set(log[1:end]) == {"record"}  # ... then only events recorded on the stream, no synchronisation ...
    assert set(log[end + 1 :]) == {"read"} and log.count("read") == log.count("record") // 2  # ... read after it
    verifies = s.verifier_forwards - 1  # AR: its steps
    drafting = 0 if method == "ar" else 2 + s.reached_by_position[0]  # its prefill (2 phases), the rounds it drafted
    assert log.count("record") == 2 * (1 + verifies + drafting)  # a start and an end event per phase
    assert s.verifier_prefill_s > 0 and s.verify_s > 0 and (s.draft_s > 0) == (method == "sd")
    assert s.verifier_prefill_s + s.drafter_prefill_s + s.decode_s == pytest.approx(s.total_s)
