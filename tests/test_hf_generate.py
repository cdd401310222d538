"""Sparse speculative decoding through transformers' own `generate(custom_generate=...)` (budgetdraft.decoding.hf_generate)."""

import pytest
import torch
from conftest import shakespeare_text, tiny_llama
from transformers.generation import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from budgetdraft.decoding import hf_generate as hf
from budgetdraft.decoding.loop import speculative
from budgetdraft.decoding.policies import POLICIES
from budgetdraft.decoding.sampling import Sampling
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.pipeline.cli import main as cli_main

NEW = 24


class Recorder(BaseStreamer):
    """What a streamer is handed: every `put` (the prompt first, from generate itself) and the `end` calls."""

    def __init__(self):
        self.puts, self.ends = [], 0

    def put(self, value):
        self.puts.append(value.tolist())

    def end(self):
        self.ends += 1

    def generated(self) -> list[int]:
        return [tok for put in self.puts[1:] for tok in put]


class StopAt(StoppingCriteria):
    """Stops once ``length`` tokens of sequence exist (any stopping criterion a user writes)."""

    def __init__(self, length: int):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)


@pytest.fixture(scope="module")
def real_ids(real_pair):
    _, _, tokenizer = real_pair
    return torch.tensor([tokenizer(shakespeare_text()[30000:45000])["input_ids"][:300]])


@pytest.fixture(scope="module")
def plain_greedy(real_pair, real_ids):
    verifier, _, _ = real_pair
    return verifier.generate(real_ids, do_sample=False, max_new_tokens=NEW)


def ours(pair, ids, **kwargs):
    """``generate`` through our loop with the pair's verifier and drafter (the real pair, or the tiny one)."""
    verifier, drafter = pair[:2]
    kwargs = {"kv_budget": 64, "max_new_tokens": NEW, **kwargs}
    return verifier.generate(ids, custom_generate=hf.generate, drafter=drafter, **kwargs)


@pytest.mark.real
def test_custom_generate_greedy_equals_plain_generate_and_streams_every_token(real_pair, real_ids, plain_greedy):
    streamer = Recorder()
    out = ours(real_pair, real_ids, kv_policy="topk_chunks", gamma=5, token_streamer=streamer)
    assert out.tolist() == plain_greedy.tolist() and out.shape[1] == real_ids.shape[1] + NEW
    assert streamer.puts[0] == real_ids.tolist()  # the loop put the prompt first
    assert streamer.generated() == out[0, real_ids.shape[1] :].tolist() and streamer.ends == 1


@pytest.mark.real
def test_eos_ends_the_generation_as_in_plain_generate(real_pair):
    verifier, _, tokenizer = real_pair
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, return_dict=False
    )
    ids = torch.tensor([ids])
    plain = verifier.generate(ids, do_sample=False, max_new_tokens=60)
    out = ours(real_pair, ids, kv_budget=16, max_new_tokens=60)
    assert out.tolist() == plain.tolist()
    assert out[0, -1] == tokenizer.eos_token_id and out.shape[1] < ids.shape[1] + 60


@pytest.mark.real
def test_a_stopping_criterion_ends_the_loop_where_plain_generate_stops(real_pair, real_ids):
    verifier, _, _ = real_pair
    stop = StoppingCriteriaList([StopAt(real_ids.shape[1] + 3)])
    plain = verifier.generate(real_ids, do_sample=False, max_new_tokens=NEW, stopping_criteria=stop)
    calls = []
    hook = verifier.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        out = ours(real_pair, real_ids, stopping_criteria=stop, gamma=1)
    finally:
        hook.remove()
    assert out.tolist() == plain.tolist() and out.shape[1] == real_ids.shape[1] + 3
    assert len(calls) <= 3  # the prefill and the rounds up to the third token (γ = 1: one new token per round at α ≈ 0)


@pytest.mark.real
def test_sampling_is_the_librarys_speculative_sampling(real_pair, real_ids):
    verifier, drafter, _ = real_pair
    out = ours(real_pair, real_ids, max_new_tokens=8, do_sample=True, temperature=0.8, top_p=0.95, top_k=40, seed=3)
    direct = speculative(
        SparseDrafter(drafter, 64), verifier, real_ids[0].tolist(), 8, 5, sampling=Sampling(0.8, 0.95, 40, 3)
    )
    assert out[0, real_ids.shape[1] :].tolist() == direct.tokens
    runs = []
    for _ in range(2):  # no seed: drawn from torch's generator, so torch.manual_seed reproduces the generation
        torch.manual_seed(7)
        runs.append(ours(real_pair, real_ids, max_new_tokens=8, do_sample=True, temperature=1.0).tolist())
    assert runs[0] == runs[1]


# ---- on tiny random models: what the wrapper passes on, and wrong requests -------------------------------------------


@pytest.fixture(scope="module")
def tiny_pair():
    return tiny_llama(seed=0, layers=2), tiny_llama(seed=1, layers=1)


PROMPT = torch.tensor([list(range(5, 45))])


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"drafter": None}, "needs drafter="),
        ({"drafter": "JackFram/llama-68m"}, "drafter= must be a causal LM"),
        ({"kv_budget": None}, "kv_budget= is required"),
        ({"kv_budget": 0}, "kv_budget= must be a positive number of tokens, got 0"),
        ({"kv_policy": "top_chunks"}, "kv_policy='top_chunks' is no sparse policy"),
        ({"gamma": 0}, "gamma= (draft length)"),
        ({"inputs": PROMPT.repeat(2, 1)}, "a batch of 2 prompts"),
        ({"num_beams": 2}, "num_beams=2"),
        ({"repetition_penalty": 1.3}, "RepetitionPenaltyLogitsProcessor"),
        ({"return_dict_in_generate": True, "output_scores": True}, "output_scores"),
    ],
)
def test_a_wrong_argument_is_refused_by_name(tiny_pair, kwargs, named):
    verifier, drafter = tiny_pair
    request = {"inputs": PROMPT, "drafter": drafter, "kv_budget": 16, "max_new_tokens": 4, **kwargs}
    with pytest.raises(ValueError) as err:
        verifier.generate(custom_generate=hf.generate, **request)
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("policy", "budget"),
    [(p, 16) for p in POLICIES if p != "topk_chunks"] + [("topk_chunks", 4), ("topk_chunks", 400)],
)
def test_every_policy_and_budget_below_and_above_the_prompt_is_lossless(tiny_pair, policy, budget, monkeypatch):
    """`generate` decodes with the drafter at the policy and budget it is given (budgets below and above the 100-token
    prompt), emitting plain greedy's tokens. On the tiny random pair: the wrapper passes both through to the library's
    loop, whose every policy and budget is lossless on the real model (tests/test_decoding.py,
    test_other_policies_are_lossless_on_the_real_model and test_sd_equals_ar_on_the_real_model)."""
    verifier, drafter = tiny_pair
    built = []
    monkeypatch.setattr(hf, "SparseDrafter", lambda *a, **k: built.append(SparseDrafter(*a, **k)) or built[-1])
    prompt = torch.tensor([[5 + (7 * i) % 90 for i in range(100)]])
    out = ours(tiny_pair, prompt, kv_budget=budget, kv_policy=policy, gamma=3)
    assert out.tolist() == verifier.generate(prompt, do_sample=False, max_new_tokens=NEW).tolist()
    assert [(d.model, d.budget, d.policy) for d in built] == [(drafter, budget, policy)]


def test_return_dict_in_generate(tiny_pair):
    verifier, _ = tiny_pair
    out = ours(tiny_pair, PROMPT, kv_budget=16, return_dict_in_generate=True)
    plain = verifier.generate(PROMPT, do_sample=False, max_new_tokens=NEW)
    assert type(out).__name__ == "GenerateDecoderOnlyOutput" and out.sequences.tolist() == plain.tolist()


def test_a_drafter_published_with_its_loop_runs_from_a_local_directory(tiny_pair, tmp_path):
    """The published-repository route (`custom_generate="DIR"`), which executes DIR/custom_generate/generate.py:
    the one place trust_remote_code=True is set, as a user of that repository sets it."""
    verifier, drafter = tiny_pair
    repo = tmp_path / "my_drafter"
    drafter.save_pretrained(repo)
    cli_main(["export-hf-generate", "--out", str(repo)])
    assert {p.name for p in (repo / "custom_generate").iterdir()} == {"generate.py", "requirements.txt"}
    plain = verifier.generate(PROMPT, do_sample=False, max_new_tokens=12)
    streamer = Recorder()
    out = verifier.generate(
        PROMPT, custom_generate=str(repo), trust_remote_code=True, kv_budget=16, max_new_tokens=12, streamer=streamer
    )
    assert out.tolist() == plain.tolist()
    assert streamer.generated() == out[0, PROMPT.shape[1] :].tolist() and streamer.ends == 1


def test_export_refuses_a_directory_that_is_no_checkpoint(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        cli_main(["export-hf-generate", "--out", str(tmp_path)])
    assert "holds no config.json" in str(err.value)
