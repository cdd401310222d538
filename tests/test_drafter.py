"""One drafter interface (budgetdraft.decoding.drafter.Drafter): every drafter has all of it, and the verifier's prefill is
handed over explicitly, with nothing left registered on the verifier between runs."""

import inspect

import pytest
import torch
from conftest import tiny_llama

from budgetdraft.decoding.baselines.eagle3 import Eagle3Drafter, Eagle3Head, head_config
from budgetdraft.decoding.baselines.triforce import TriForceDrafter
from budgetdraft.decoding.drafter import Drafter, GreedyDrafter
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sampling import Sampling
from budgetdraft.decoding.sparse_drafter import SparseDrafter

torch.set_num_threads(1)
TINY = {"vocab": 64, "tie_word_embeddings": True, "initializer_range": 0.3}


@pytest.fixture(scope="module")
def tiny():
    prompt = torch.randint(0, 64, (60,), generator=torch.Generator().manual_seed(4)).tolist()
    return tiny_llama(0, 4, **TINY), tiny_llama(1, 2, **TINY), prompt


def drafters(verifier, small):
    torch.manual_seed(0)
    return [
        SparseDrafter(small, 16, "topk_chunks", 8, 8),
        SparseDrafter(small, 16, "verifier_guided", 8, 8),
        TriForceDrafter(verifier, small, retrieval_budget=16),
        Eagle3Drafter(verifier, Eagle3Head(head_config(verifier)).eval()),
    ]


def hooks(model) -> int:
    """Forward hooks of budgetdraft's on the model (transformers installs its own output recorders, for good)."""
    registered = [h for m in model.modules() for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())]
    return sum(getattr(h, "__module__", "").startswith("budgetdraft") for h in registered)


def test_every_drafter_has_the_whole_protocol(tiny):
    members = set(Drafter.__annotations__) | {n for n, _ in inspect.getmembers(Drafter, inspect.isfunction)}
    assert {"reads", "samples", "prefill", "draft", "draft_sampled", "after_verify", "kv_bytes"} <= members
    for drafter in drafters(*tiny[:2]):
        assert all(hasattr(drafter, name) for name in members), type(drafter).__name__
        assert drafter.samples == (not isinstance(drafter, GreedyDrafter))


def test_the_verifier_carries_no_hooks_between_runs(tiny):
    """Building a drafter arms nothing on the verifier (the old PrefillTap did, until the drafter's prefill), and a
    run leaves nothing registered."""
    verifier, small, prompt = tiny
    ref = autoregressive(verifier, prompt, 12, eos_token_id=[]).tokens
    for drafter in drafters(verifier, small):
        assert hooks(verifier) == 0
        assert speculative(drafter, verifier, prompt, 12, 3, eos_token_id=[]).tokens == ref
        assert hooks(verifier) == 0


def test_greedy_drafters_are_refused_in_sampling_mode_by_what_they_declare(tiny):
    verifier, small, prompt = tiny
    with pytest.raises(ValueError, match="the TriForceDrafter drafter drafts greedily only"):
        speculative(TriForceDrafter(verifier, small), verifier, prompt, 5, 2, sampling=Sampling(1.0))


@pytest.mark.parametrize("policy", ["topk_chunks", "snapkv", "streaming", "full"])
def test_a_shared_full_prefill_drafts_what_its_own_prefill_drafts_at_every_budget(tiny, policy):
    """Cells of one drafter and prompt cut one full prefill (``shared_prefills``) to their budgets, one after
    another: each drafts and accepts exactly what a drafter prefilling on its own does (no cut changes the shared
    cache or scores), and reports what that prefill cost when it ran."""
    from budgetdraft.decoding.sparse_drafter import scored_window, shared_prefills

    verifier, small, prompt = tiny
    shared = shared_prefills(small, [prompt], *scored_window(policy, 8))
    (done,) = shared.values()
    for budget in [0] if policy == "full" else [16, 32, 8, 16]:
        own = speculative(SparseDrafter(small, budget, policy, 8, 8), verifier, prompt, 12, 3, eos_token_id=[])
        cut = SparseDrafter(small, budget, policy, 8, 8, shared=shared)
        took = speculative(cut, verifier, prompt, 12, 3, eos_token_id=[])
        assert took.tokens == own.tokens and took.stats.accepted == own.stats.accepted, budget
        assert took.stats.drafted == own.stats.drafted and cut.recorded_prefill_s == done.seconds > 0
    other = SparseDrafter(small, 16, policy, 8, 8, shared=shared)
    speculative(other, verifier, prompt[:-1], 4, 3, eos_token_id=[])  # another prompt: prefilled on its own
    assert other.recorded_prefill_s is None
