"""The FlexAttention decode path (``budgetdraft.decoding.attention.FLEX_NAME``) beside today's (``NAME``), on the CPU.

A fixed-shape decode step under flex gives today's logits (float32, MHA and grouped-query heads, one query and
γ + 1), with the cache's slots past the valid length full of garbage (the step's mask is applied); under engine
``graphs`` its step is captured whole and never recompiled; speculative decoding on a flex verifier stays lossless
on the real model.
"""

import json

import pytest
import torch
import torch._dynamo.utils
from conftest import shakespeare_text
from paper_models import yarn_llama_2_7b_128k
from test_bench import run_script
from transformers import LlamaConfig, LlamaForCausalLM

from budgetdraft.decoding import attention
from budgetdraft.decoding.engine import Steps
from budgetdraft.decoding.kvcache import prefill
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sparse_drafter import SparseDrafter

# Eager flex on the CPU is PyTorch's unfused reference (it says so once per process): what these tests check is its
# values, not its speed; compiled on CUDA it is the flash-decoding kernel (bench/gpu_decode.py --attentions)
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

PROMPT, CAPACITY = 40, 64  # a partly filled fixed-capacity cache: 40 of 64 slots valid before the step


def paper_llama(kv_heads: int) -> LlamaForCausalLM:
    """The paper verifier's architecture cut to 4 heads of its dimension 128 (YaRN rope), 2 layers; ``kv_heads``
    4 is its own MHA, 2 a grouped-query variant."""
    config = {k: v for k, v in yarn_llama_2_7b_128k(heads=4, layers=2).items() if k != "auto_map"}
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**config, "num_key_value_heads": kv_heads})).eval()


@pytest.fixture(scope="module", params=[4, 2], ids=["mha", "gqa"])
def model(request):
    return paper_llama(request.param)


class FlexCalls:
    """Counts the calls of ``flex_attention`` by the flex path, in a tensor: under ``graphs`` the count is an op of
    the captured step (a Python int would be a value the step is guarded on: a recompile each step)."""

    def __init__(self, monkeypatch):
        self.calls = torch.zeros((), dtype=torch.long)
        original = attention.flex_attention

        def counted(*args, **kwargs):
            self.calls.add_(1)
            return original(*args, **kwargs)

        monkeypatch.setattr(attention, "flex_attention", counted)

    @property
    def count(self) -> int:
        return int(self.calls)


def random_tokens(model, q: int) -> torch.Tensor:
    """[1, q] token ids, the same for every call with the same q."""
    return torch.randint(0, model.config.vocab_size, (1, q), generator=torch.Generator().manual_seed(q))


def step_logits(model, name: str, tokens: torch.Tensor, engine: str = "eager", garbage: bool = False, steps=None):
    """The logits [1, q, V] of one fixed-shape step of ``tokens`` [1, q] under attention ``name``, after a prefill of
    PROMPT tokens into a cache of CAPACITY slots, in chunks of 16 (the later ones pass boolean masks [1, 1, 16, 32]
    and [1, 1, 8, 40], today's path under flex too); ``garbage``: the slots past the prefill hold large random
    values."""
    model.set_attn_implementation(name)
    steps = steps or Steps(model, engine)
    cache = steps.start(CAPACITY)
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    prefill(model, ids, cache, chunk_len=16)
    if garbage:
        for layer in cache.layers:
            layer.keys[:, :, PROMPT:] = 1e3 * torch.randn_like(layer.keys[:, :, PROMPT:])
            layer.values[:, :, PROMPT:] = 1e3 * torch.randn_like(layer.values[:, :, PROMPT:])
    steps.fix()
    return model.lm_head(steps(tokens).last_hidden_state)


@pytest.mark.parametrize("q", [1, 6])  # an AR step or a drafter's, a verify of γ + 1
def test_a_flex_decode_step_gives_todays_logits_and_applies_the_mask(model, q, monkeypatch):
    tokens = random_tokens(model, q)
    today = step_logits(model, attention.NAME, tokens)
    calls = FlexCalls(monkeypatch)
    flex = step_logits(model, attention.FLEX_NAME, tokens, garbage=True)
    assert calls.count == model.config.num_hidden_layers  # the step ran flex in every layer, the prefill did not
    torch.testing.assert_close(flex, today, rtol=1e-5, atol=1e-5)


def test_the_flex_step_is_captured_whole_and_never_recompiled(model, monkeypatch):
    """Engine ``graphs`` on the CPU (AOT-traced, ``fullgraph``: a graph break raises): the first steps of each
    shape compile, later steps (the slot moved on: the mask is data) compile nothing, and give eager's logits."""
    calls = FlexCalls(monkeypatch)
    steps = Steps(model, "graphs")
    tokens = [random_tokens(model, q) for q in (1, 6)]
    first = [step_logits(model, attention.FLEX_NAME, t, steps=steps) for t in tokens]
    assert calls.count == 2 * model.config.num_hidden_layers  # the captured steps run flex in every layer
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for t, logits in zip(tokens, first):
            for _ in range(3):  # the slot moves on: 41, 42, ... (or 46, 52, ...)
                steps(t)
            torch.testing.assert_close(step_logits(model, attention.FLEX_NAME, t, steps=steps, garbage=True), logits)
            torch.testing.assert_close(logits, step_logits(model, attention.NAME, t), rtol=1e-5, atol=1e-5)
            model.set_attn_implementation(attention.FLEX_NAME)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


def test_the_gpu_benchmark_runs_our_rows_under_each_attention(tmp_path):
    """bench/gpu_decode.py --attentions sdpa flex (its CPU smoke run): one run gives both attentions' rows. Run in
    this process as ``python bench/gpu_decode.py`` would run (tests/test_bench.py's ``run_script``: a fresh process
    imports torch and transformers for ~7 s; tests/test_bench_gpu_decode.py runs the script as one)."""
    flags = ["--smoke", "--contexts", "32", "--budgets", "16", "--no-hf", "--steps", "2", "--repeats", "1"]
    out = tmp_path / "report.md"
    run = run_script("gpu_decode.py", *flags, "--attentions", "sdpa", "flex", "--out", str(out), cwd=tmp_path)
    lines = run.stdout.splitlines()
    header, row = (next(line for line in lines if line.startswith(start)) for start in ("| context |", "| 32 (32) |"))
    cells = dict(zip((c.strip() for c in header.strip("|").split("|")), row.strip("|").split("|")))
    assert float(cells["AR eager ms"]) > 0 and float(cells["AR eager flex ms"]) > 0
    assert cells["AR graphs flex ms"].strip() == "—"  # the smoke test's engine is eager
    assert "Targets (issue 55), attention sdpa:" in run.stdout and "Targets (issue 55), attention flex:" in run.stdout
    record = json.loads(out.with_suffix(".json").read_text())
    assert list(record["rows"][0]["ours"]) == ["eager", "eager flex"] and list(record["targets"]) == ["sdpa", "flex"]
    wrong = run_script("gpu_decode.py", *flags, "--attentions", "flash", cwd=tmp_path, check=False)
    assert wrong.returncode == 2 and wrong.stderr.splitlines()[-1].endswith("--attentions flash: not one of sdpa, flex")


# ---- the real embedded model ------------------------------------------------------------------------------------

NEW = 16


@pytest.mark.real
def test_speculative_on_a_flex_verifier_is_lossless_on_the_real_model(monkeypatch):
    """The real verifier's first 4 decoder layers (``embedded:smollm2:layers=4``) under flex drafting for itself from
    a sparse cache (B = 32 of the prompt: some drafts kept, some rejected): SD's tokens are AR's and transformers'
    greedy generate's. Not all 30 layers: an eager CPU step runs FlexAttention's unfused reference, ~4x today's
    time, and the untrained drafter accepts nothing on the full verifier (~30 s, every verify rejected)."""
    from budgetdraft.decoding.loading import load_model, load_tokenizer

    tokenizer = load_tokenizer("embedded:smollm2")
    verifier = load_model("embedded:smollm2:layers=4")  # its own object: the session's real_pair keeps today's
    verifier.set_attn_implementation(attention.FLEX_NAME)
    prompt = tokenizer(shakespeare_text()[30000:45000])["input_ids"][:120]
    calls = FlexCalls(monkeypatch)
    ar = autoregressive(verifier, prompt, NEW, eos_token_id=[])
    assert calls.count == (NEW - 1) * verifier.config.num_hidden_layers  # every step after the prefill ran flex
    sd = speculative(SparseDrafter(verifier, 32), verifier, prompt, NEW, 5, eos_token_id=[])
    plain = verifier.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=NEW, eos_token_id=None)
    assert sd.tokens == ar.tokens == plain[0, len(prompt) :].tolist()
    assert 0 < sd.stats.accepted < sd.stats.drafted
