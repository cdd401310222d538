"""The decode engine on the CPU: what a CUDA graph needs, proved where there is no GPU (``budgetdraft.decoding.engine``).

Every decode step has one shape whatever the step number; the compiled (``graphs``) steps are captured once per
shape and never recompiled; both engines decode the same tokens; a speculative round reads the device once.
"""

import pytest
import torch
import torch._dynamo.utils
from conftest import HOST_READS, tiny_llama

from budgetdraft.decoding import loop
from budgetdraft.decoding.engine import rounded_capacity
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.decoding.verifier import Verifier
from budgetdraft.evaluation import measure

NEW, GAMMA = 33, 4  # 32 decode steps after the prefill's token


@pytest.fixture(scope="module")
def pair():
    return tiny_llama(seed=0, layers=2), tiny_llama(seed=1, layers=1)  # verifier, drafter


def prompt(length: int = 40, seed: int = 0) -> list[int]:
    return torch.randint(0, 96, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


class Shapes:
    """The (queries, keys) shapes every attention call of ``model`` sees after its prefill, and the mask's."""

    def __init__(self, model):
        self.seen: list[tuple] = []
        self.handles = [
            layer.self_attn.register_forward_hook(self.hook, with_kwargs=True) for layer in model.model.layers
        ]

    def hook(self, module, args, kwargs, output):
        mask = kwargs.get("attention_mask")
        self.seen.append((kwargs["hidden_states"].shape[1], None if mask is None else tuple(mask.shape)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()


def test_every_ar_step_has_one_shape(pair):
    verifier, _ = pair
    p = prompt()
    with Shapes(verifier) as shapes:
        autoregressive(verifier, p, NEW, eos_token_id=[])
    steps = shapes.seen[len(verifier.model.layers) :]  # after the prefill's forward
    assert len(steps) == 32 * len(verifier.model.layers)
    assert set(steps) == {(1, (1, 1, 1, rounded_capacity(len(p) + NEW)))}


def test_every_speculative_step_has_one_shape_per_model(pair):
    """The verifier's verify is always γ + 1 queries (the last round padded), the drafter's step always one."""
    verifier, drafter = pair
    p = prompt()
    with Shapes(verifier) as v_shapes, Shapes(drafter) as d_shapes:
        gen = speculative(SparseDrafter(drafter, 16, "topk_chunks", 8, 8), verifier, p, NEW, GAMMA, eos_token_id=[])
    v_steps = v_shapes.seen[len(verifier.model.layers) :]
    assert set(v_steps) == {(GAMMA + 1, (1, 1, GAMMA + 1, rounded_capacity(len(p) + NEW + GAMMA + 1)))}
    assert len(v_steps) == (gen.stats.verifier_forwards - 1) * len(verifier.model.layers)
    d_steps = [s for s in d_shapes.seen if s[1] is not None]  # the prefill of the full prompt has no mask
    assert set(d_steps) == {(1, (1, 1, 1, rounded_capacity(16 + NEW + GAMMA + 1)))}
    assert len(d_steps) >= gen.stats.draft_steps * len(drafter.model.layers)


@pytest.mark.parametrize("budget", [16, 10_000])
def test_graphs_engine_equals_eager_token_for_token_and_never_recompiles(pair, budget):
    """The compiled steps (captured whole with fixed shapes) decode the eager steps' tokens; after the first
    generation compiled them, generations of other prompts of the same length compile nothing new."""
    verifier, drafter = pair

    def run(engine, seed, timed=False):
        p = prompt(seed=seed)
        autoregressive = measure.timed_autoregressive if timed else loop.autoregressive
        ar = autoregressive(verifier, p, NEW, eos_token_id=[], engine=engine)
        sd = (measure.timed_speculative if timed else loop.speculative)(
            SparseDrafter(drafter, budget, "topk_chunks", 8, 8, engine=engine), verifier, p, NEW, GAMMA,
            eos_token_id=[], engine=engine,
        )  # fmt: skip
        return ar.tokens, sd.tokens, sd.stats

    run("graphs", seed=0)  # compiles: the AR step, the verify step, the drafter step
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for seed in (1, 2, 3):
            ar_g, sd_g, stats = run("graphs", seed)
            ar_e, sd_e, _ = run("eager", seed)
            assert ar_g == ar_e and sd_g == sd_e == ar_e
            assert stats.engine == "graphs"
        ar_m, sd_m, stats = run("graphs", 1, timed=True)  # measured (a cell's run): the same steps, timed from outside
        assert ar_m == sd_m == run("eager", 1)[0] and stats.verify_s > 0
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


def test_a_dynamic_capacity_compiles_once_per_query_length_for_every_capacity(pair, monkeypatch):
    """``DYNAMIC_CAPACITY``: the first context compiles three steps (the verifier's AR step and verify, the drafter's
    step), whatever the drafter's budget; longer contexts and other budgets compile nothing more (today's engine
    compiles one step per capacity); every generation decodes the eager tokens."""
    from budgetdraft.decoding import engine

    verifier, drafter = pair
    monkeypatch.setattr(engine, "DYNAMIC_CAPACITY", True)

    def run(length: int, budget: int, engine_name: str):
        p = prompt(length, seed=length)
        ar = loop.autoregressive(verifier, p, NEW, eos_token_id=[], engine=engine_name)
        sd = loop.speculative(
            SparseDrafter(drafter, budget, "topk_chunks", 8, 8, engine=engine_name), verifier, p, NEW, GAMMA,
            eos_token_id=[], engine=engine_name,
        )  # fmt: skip
        return ar.tokens, sd.tokens

    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    first = [run(40, budget, "graphs") for budget in (16, 48)]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 3
    assert len({rounded_capacity(n + NEW + GAMMA + 1) for n in (40, 200, 400)}) == 3  # the verifier's capacities
    with torch._dynamo.config.patch(error_on_recompile=True):
        later = [run(length, budget, "graphs") for length in (200, 400) for budget in (16, 48, 128)]
    eager = [run(40, budget, "eager") for budget in (16, 48)]
    eager += [run(length, budget, "eager") for length in (200, 400) for budget in (16, 48, 128)]
    for (ar_g, sd_g), (ar_e, sd_e) in zip(first + later, eager, strict=True):
        assert ar_g == sd_g == ar_e == sd_e


class Reads:
    """Counts the calls that read a tensor's value back to the host (on a GPU: a device synchronisation)."""

    def __init__(self, monkeypatch):
        self.count = 0
        for name in HOST_READS:
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self.counting(original))

    def counting(self, original):
        def read(tensor, *args, **kwargs):
            self.count += 1
            return original(tensor, *args, **kwargs)

        return read


def test_a_round_reads_the_device_once(pair, monkeypatch):
    """Greedy drafting reads nothing back; the verify reads drafts, verdict and bonus token in one go (on a GPU;
    on a CPU the LM head runs lazily, a second read where the first draft holds)."""
    verifier_model, drafter_model = pair
    p = prompt()
    verifier = Verifier(verifier_model)
    verifier.lazy_head = False  # what a GPU runs
    verifier.prefill(torch.tensor([p]), len(p) + 64)
    drafter = SparseDrafter(drafter_model, 16, "topk_chunks", 8, 8)
    drafter.prefill(torch.tensor([p]), 64)
    reads = Reads(monkeypatch)
    drafts = drafter.draft([p[-1]], GAMMA)
    assert reads.count == 0 and drafts.shape == (GAMMA,)
    verifier.check(p[-1], drafts, GAMMA, None, None, drafter.reads)
    assert reads.count == 1


def test_an_ar_step_reads_the_device_once(pair, monkeypatch):
    verifier_model, _ = pair
    p = prompt()
    verifier = Verifier(verifier_model)
    verifier.prefill(torch.tensor([p]), len(p) + 8)
    reads = Reads(monkeypatch)
    hidden = verifier.hidden(torch.tensor([[p[-1]]])).last_hidden_state
    verifier.greedy_top2(hidden)
    assert reads.count == 1
    verifier.step(p[-1], None)  # the loop's AR step: the same, in one call
    assert reads.count == 2


def test_timed_phases_read_nothing_more(pair, monkeypatch):
    """What a cell runs (``evaluation.measure``): the timed drafter's draft reads nothing, the timed verify once."""
    verifier_model, drafter_model = pair
    p = prompt()
    clock = measure.Clock("cpu")
    verifier = measure.TimedVerifier(clock, verifier_model)
    verifier.lazy_head = False  # what a GPU runs
    verifier.prefill(torch.tensor([p]), len(p) + 64)
    drafter = measure.TimedDrafter(SparseDrafter(drafter_model, 16, "topk_chunks", 8, 8), clock)
    drafter.prefill(torch.tensor([p]), 64, verifier.prefill_state(torch.tensor([p]), drafter.reads))
    reads = Reads(monkeypatch)
    drafts = drafter.draft([p[-1]], GAMMA)
    assert reads.count == 0 and drafts.shape == (GAMMA,)
    verifier.check(p[-1], drafts, GAMMA, None, None, drafter.reads)
    assert reads.count == 1
    assert clock.seconds("draft") > 0 and clock.seconds("verify") > 0 and clock.seconds("drafter_prefill") > 0
