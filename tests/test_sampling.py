"""Sampling mode is lossless in distribution: speculative sampling emits tokens with the verifier's own sampling
distribution (exactly, for the rule; by a chi-square test, end to end), and at temperature 0 it is greedy decoding.

The end-to-end tests compare the empirical distribution of the first generated tokens over a fixed set of seeds
with the exact one, computed from the verifier's logits by enumerating every prefix in the top-k support, and
show that the same test rejects a broken acceptance rule."""

import argparse
import json
import re
import subprocess
import sys
from collections import Counter

import pandas as pd
import pytest
import torch
from conftest import shakespeare_text, tiny_llama

from budgetdraft.base.defaults import GAMMA
from budgetdraft.decoding import sampling as sampling_module
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sampling import (
    Sampler,
    Sampling,
    acceptance_probability,
    residual,
    sampling_distribution,
    sampling_from_flags,
)
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.decoding.verifier import SharedPrefill, Verifier, ids_tensor, prompt_key
from budgetdraft.evaluation import cells, grid
from budgetdraft.evaluation.prefill import load_prefills, record_prefills, save_prefills
from budgetdraft.pipeline.commands import cmd_eval_cell

LEVEL = 1e-3  # chi-square test level: a correct rule passes above it; a broken one falls far below
# Draws of the tiny pair's end-to-end tests. The level, not the count, sets a correct rule's false-alarm rate (1e-3
# per test); the count sets the power, which the broken-rule tests show at half of it: resampling from p instead of
# the residual gives p = 4e-13 at 150 draws (1e-10 at 100, 9e-20 at 300), accepting every draft an outcome of
# probability 0, while the correct rules gave p = 0.40 to 0.93 at 300 draws (measured on these seeds).
TINY_DRAWS = 300


# ---- the chi-square goodness-of-fit test ------------------------------------------------------------------------


def chi_square_p_value(observed: Counter, expected: dict, n: int, min_expected: float = 5.0) -> float:
    """P-value of the observed counts of n draws against the exact probabilities ``expected`` (outcome -> p).
    An observed outcome of probability 0 gives p-value 0; outcomes expected fewer than ``min_expected`` times are
    pooled in one bin."""
    if any(expected.get(k, 0.0) == 0.0 for k in observed):
        return 0.0
    bins = [(observed.get(k, 0), n * p) for k, p in expected.items() if n * p >= min_expected]
    rest_observed = n - sum(o for o, _ in bins)
    rest_expected = n - sum(e for _, e in bins)
    if rest_expected > 1e-9:
        bins.append((rest_observed, rest_expected))
    if len(bins) < 2:
        raise ValueError(f"{n} draws give fewer than 2 bins with {min_expected} expected: nothing to test")
    stat = sum((o - e) ** 2 / e for o, e in bins)
    dof = torch.tensor((len(bins) - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(dof, torch.tensor(stat / 2, dtype=torch.float64)))


def exact_prefix_distribution(verifier, prompt: list[int], length: int, sampling: Sampling) -> dict:
    """P(first ``length`` new tokens = t) under plain sampling from the verifier, for every t in the support
    (full forwards, no cache: independent of the decoding code under test)."""
    probs = {(): 1.0}
    for _ in range(length):
        nxt = {}
        for prefix, mass in probs.items():
            with torch.no_grad():
                logits = verifier(input_ids=ids_tensor(prompt + list(prefix), verifier.device)).logits[0, -1]
            p = sampling_distribution(logits, sampling)
            for tok in p.nonzero().flatten().tolist():
                nxt[prefix + (tok,)] = mass * float(p[tok])
        probs = nxt
    return probs


def first_tokens(decode, seeds, length: int, sampling: Sampling) -> Counter:
    """Counts of the first ``length`` tokens of ``decode(Sampling with seed s)`` over ``seeds``."""
    return Counter(
        tuple(decode(Sampling(sampling.temperature, sampling.top_p, sampling.top_k, s)).tokens[:length]) for s in seeds
    )


def accept_every_draft(monkeypatch):
    """A broken acceptance rule: every draft is kept (the min(1, p/q) test is skipped)."""
    monkeypatch.setattr(Sampler, "accepts", lambda self, p_x, q_x: True)


def resample_from_p(monkeypatch):
    """A broken rejection rule: a rejected draft is replaced by a draw from p instead of norm(max(0, p − q))."""
    monkeypatch.setattr(sampling_module, "residual", lambda p, q: p)


# ---- the rule, exactly -------------------------------------------------------------------------------------------


def one_step_marginal(p: torch.Tensor, q: torch.Tensor, accept=acceptance_probability, resample=residual):
    """P(emitted token = y) of one speculative step: x ~ q, kept with probability accept(p(x), q(x)), else
    replaced by a draw from norm(resample(p, q))."""
    r = resample(p, q)
    r = r / r.sum()
    out = torch.zeros_like(p)
    for x in q.nonzero().flatten().tolist():
        a = accept(float(p[x]), float(q[x]))
        out[x] += q[x] * a
        out += q[x] * (1 - a) * r
    return out


def synthetic_pairs():
    g = torch.Generator().manual_seed(0)
    pairs = [
        (torch.rand(7, generator=g, dtype=torch.float64), torch.rand(7, generator=g, dtype=torch.float64))
        for _ in range(20)
    ]
    pairs.append((torch.tensor([0.5, 0.5, 0, 0]), torch.tensor([0, 0, 0.3, 0.7])))  # disjoint supports
    pairs.append((torch.tensor([0.2, 0.3, 0.5, 0]), torch.tensor([0.2, 0.3, 0.5, 0])))  # p = q
    pairs.append((torch.tensor([0.0, 1.0, 0, 0]), torch.tensor([0.1, 0.2, 0.3, 0.4])))  # one-hot p
    return [(p.double() / p.sum(), q.double() / q.sum()) for p, q in pairs]


@pytest.mark.parametrize("p,q", synthetic_pairs())
def test_one_speculative_step_emits_exactly_p(p, q):
    assert torch.allclose(one_step_marginal(p, q), p, atol=1e-12)


def test_the_exact_check_fails_for_broken_rules():
    broken = {
        "accept every draft": dict(accept=lambda p_x, q_x: 1.0),
        "accept with probability p(x)": dict(accept=lambda p_x, q_x: p_x),
        "resample from p": dict(resample=lambda p, q: p),
    }
    pairs = synthetic_pairs()[:20]
    for name, rule in broken.items():
        worst = max(float((one_step_marginal(p, q, **rule) - p).abs().max()) for p, q in pairs)
        assert worst > 0.02, name


def test_speculative_step_draws_chains_of_drafts_from_p():
    """Two drafts per round, each x ~ q (drafted here with a separate stream), verified by ``speculative_step``: the
    first emitted token (draft 1 or its resample) has distribution p[0]; given draft 1 was kept, the second has
    p[1] (here p[1] and q[1] do not depend on draft 1)."""
    g = torch.Generator().manual_seed(1)
    p = torch.rand(3, 6, generator=g, dtype=torch.float64) ** 3
    q = torch.rand(2, 6, generator=g, dtype=torch.float64) ** 3
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    draft_stream, verify = Sampler(Sampling(seed=5)), Sampler(Sampling(seed=6))
    first, second, n = Counter(), Counter(), 20_000
    for _ in range(n):
        drafts = [draft_stream.draw(q[0]), draft_stream.draw(q[1])]
        k, nxt = verify.speculative_step(p, q, drafts)
        emitted = drafts[:k] + [nxt]
        first[emitted[0]] += 1
        if k >= 1:
            second[emitted[1]] += 1
    assert chi_square_p_value(first, dict(enumerate(p[0].tolist())), n) > LEVEL
    assert chi_square_p_value(second, dict(enumerate(p[1].tolist())), sum(second.values())) > LEVEL


# ---- the sampling distribution -----------------------------------------------------------------------------------


def test_temperature_top_k_and_top_p():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0])
    assert torch.allclose(sampling_distribution(logits, Sampling(0.7)), (logits.double() / 0.7).softmax(-1))
    top2 = sampling_distribution(logits, Sampling(1.0, top_k=2))
    assert top2.nonzero().flatten().tolist() == [0, 4]
    assert torch.allclose(top2[[0, 4]], logits[[0, 4]].double().softmax(-1))
    full = logits.double().softmax(-1)  # sorted: 4 (0.63), 0 (0.23), 1 (0.09), ...
    nucleus = sampling_distribution(logits, Sampling(1.0, top_p=0.8))
    assert nucleus.nonzero().flatten().tolist() == [0, 4]  # 0.63 < 0.8 <= 0.63 + 0.23
    assert torch.allclose(nucleus[[0, 4]], full[[0, 4]] / full[[0, 4]].sum())
    assert sampling_distribution(logits, Sampling(1.0, top_p=0.5)).nonzero().flatten().tolist() == [4]
    assert sampling_distribution(logits, Sampling(0.0)).tolist() == [0, 0, 0, 0, 1]
    assert torch.allclose(sampling_distribution(logits[None].repeat(3, 1), Sampling(1.0, top_k=2))[2], top2)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("temperature", -0.5, "temperature must be >= 0, got -0.5"),
        ("temperature", float("nan"), "temperature must be >= 0"),
        ("top_p", 0.0, r"top_p must be in \(0, 1\], got 0.0"),
        ("top_p", 1.5, r"top_p must be in \(0, 1\], got 1.5"),
        ("top_k", -1, "top_k must be an integer >= 0, got -1"),
        ("top_k", 2.5, "top_k must be an integer >= 0, got 2.5"),
        ("seed", 0.5, "seed must be an integer, got 0.5"),
        ("temperature", float("inf"), "temperature must be at most 100, got inf"),
        ("temperature", 1e308, r"temperature must be at most 100, got 1e\+308"),
        ("seed", 2**32, r"seed must be in \[0, 4294967295\], got 4294967296"),
        ("seed", -1, r"seed must be in \[0, 4294967295\], got -1"),
    ],
)
def test_bad_sampling_settings_are_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        Sampling(**{field: value})


def test_temperature_zero_is_the_greedy_code_path():
    assert sampling_from_flags(0.0, 0.9, 5, 3) is None
    assert sampling_from_flags(0.8, 0.9, 5, 3) == Sampling(0.8, 0.9, 5, 3)
    with pytest.raises(ValueError, match="top_p"):
        sampling_from_flags(0.0, 2.0)


# ---- the decoders on tiny random models --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    """Verifier and drafter, both random with tied embeddings: under a top-3 cut they agree on about a third of
    the drafts, so rejections, accepted chains and bonus tokens all occur."""
    return tiny_llama(seed=0, layers=3, tie_word_embeddings=True), tiny_llama(
        seed=0, layers=2, tie_word_embeddings=True
    )


@pytest.fixture(scope="module")
def prompt():
    torch.manual_seed(2)
    return torch.randint(0, 96, (45,)).tolist()


@pytest.mark.parametrize("budget", [8, 45])
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_temperature_zero_reproduces_greedy_token_for_token(tiny, prompt, budget, gamma):
    verifier, drafter = tiny
    greedy = autoregressive(verifier, prompt, 30, eos_token_id=[])
    cold = Sampling(temperature=0.0, top_p=0.9, top_k=5, seed=1)
    assert autoregressive(verifier, prompt, 30, eos_token_id=[], sampling=cold).tokens == greedy.tokens
    sd = speculative(SparseDrafter(drafter, budget), verifier, prompt, 30, gamma, eos_token_id=[], sampling=cold)
    assert sd.tokens == greedy.tokens
    sd_greedy = speculative(SparseDrafter(drafter, budget), verifier, prompt, 30, gamma, eos_token_id=[])
    assert (sd.stats.accepted, sd.stats.drafted) == (sd_greedy.stats.accepted, sd_greedy.stats.drafted)


def test_a_seed_reproduces_its_generation(tiny, prompt):
    verifier, drafter = tiny
    hot = Sampling(temperature=1.2, top_k=10, seed=7)

    def run(s):
        return speculative(SparseDrafter(drafter, 8), verifier, prompt, 25, 3, eos_token_id=[], sampling=s)

    a, b = run(hot), run(hot)
    assert a.tokens == b.tokens and (a.stats.accepted, a.stats.drafted) == (b.stats.accepted, b.stats.drafted)
    assert 0 < a.stats.accepted < a.stats.drafted  # acceptance is counted as in greedy mode; both outcomes occur
    others = {tuple(run(Sampling(1.2, top_k=10, seed=s)).tokens) for s in range(8, 12)}
    assert len(others | {tuple(a.tokens)}) == 5  # other seeds, other samples
    ar = [autoregressive(verifier, prompt, 25, eos_token_id=[], sampling=hot).tokens for _ in range(2)]
    assert ar[0] == ar[1] and ar[0] != a.tokens  # AR draws from the same stream differently


TINY_SETTINGS = [Sampling(1.0, top_k=3), Sampling(0.8, top_p=0.6, top_k=4)]


@pytest.mark.parametrize("setting", TINY_SETTINGS, ids=["T1_k3", "T0.8_k4_p0.6"])
def test_speculative_sampling_matches_the_verifiers_distribution_tiny(tiny, prompt, setting):
    """First 3 of 4 tokens, γ = 3 (round 1 drafts 2: both draft positions and the bonus are exercised), over
    ``TINY_DRAWS`` seeds (600 until the broken-rule tests showed the power the test needs at 150)."""
    verifier, drafter = tiny
    exact = exact_prefix_distribution(verifier, prompt, 3, setting)
    n = TINY_DRAWS
    sd = first_tokens(
        lambda s: speculative(SparseDrafter(drafter, 8), verifier, prompt, 4, 3, eos_token_id=[], sampling=s),
        range(n),
        3,
        setting,
    )
    assert chi_square_p_value(sd, exact, n) > LEVEL
    ar = first_tokens(lambda s: autoregressive(verifier, prompt, 3, eos_token_id=[], sampling=s), range(n), 3, setting)
    assert chi_square_p_value(ar, exact, n) > LEVEL


def test_speculative_sampling_from_a_reduced_draft_vocabulary_matches_the_verifiers_distribution(tiny, prompt):
    """The drafter proposes only the even token ids (its q is 0 elsewhere): the output is still drawn from p.
    Top-3 puts 70%, 58% and 53% of p's mass at tokens 1, 2 and 3 on odd ids the drafter cannot propose, and its 27
    outcomes each get a bin of their own at ``TINY_DRAWS`` draws (top-6 at 600 draws had 40% / 37% / 37% there,
    and pooled 204 of its 216 outcomes into one bin)."""
    verifier, drafter = tiny
    setting, n, vocab = Sampling(1.0, top_k=3), TINY_DRAWS, torch.arange(0, 96, 2)
    exact = exact_prefix_distribution(verifier, prompt, 3, setting)

    def decode(s):
        return speculative(
            SparseDrafter(drafter, 8, draft_vocab=vocab), verifier, prompt, 4, 3, eos_token_id=[], sampling=s
        )

    assert chi_square_p_value(first_tokens(decode, range(n), 3, setting), exact, n) > LEVEL


@pytest.mark.parametrize("breakage", [accept_every_draft, resample_from_p])
def test_the_distribution_test_rejects_a_broken_rule_tiny(tiny, prompt, monkeypatch, breakage):
    verifier, drafter = tiny
    setting = TINY_SETTINGS[0]
    exact = exact_prefix_distribution(verifier, prompt, 3, setting)
    breakage(monkeypatch)
    n = TINY_DRAWS // 2  # the power shown at half the draws the tests above take holds at their count too
    sd = first_tokens(
        lambda s: speculative(SparseDrafter(drafter, 8), verifier, prompt, 4, 3, eos_token_id=[], sampling=s),
        range(n),
        3,
        setting,
    )
    assert chi_square_p_value(sd, exact, n) < 1e-6


# ---- shared prefills, unsupported drafters, the command line -----------------------------------------------------


def test_a_shared_prefill_draws_the_same_tokens(tiny, prompt, tmp_path):
    verifier, drafter = tiny
    with torch.no_grad():
        tensors, meta = record_prefills(verifier, [prompt], repeats=1, warmup_tokens=8)
    save_prefills(tensors, meta, tmp_path / "p.safetensors")
    prefilled = load_prefills(tmp_path / "p.safetensors")
    hot = Sampling(1.3, top_k=20, seed=4)
    for decode in (
        lambda **kw: autoregressive(verifier, prompt, 12, eos_token_id=[], sampling=hot, **kw),
        lambda **kw: speculative(
            SparseDrafter(drafter, 8), verifier, prompt, 12, 3, eos_token_id=[], sampling=hot, **kw
        ),
    ):
        assert decode(prefilled=prefilled).tokens == decode().tokens
    old = {k: SharedPrefill(v.kv, v.first_token, v.seconds) for k, v in prefilled.items()}  # a file without logits
    assert (
        autoregressive(verifier, prompt, 5, eos_token_id=[], prefilled=old).tokens
        == autoregressive(verifier, prompt, 5, eos_token_id=[]).tokens
    )  # greedy needs none
    with pytest.raises(ValueError, match="no first-token logits.*rebuild it with `budgetdraft prefill`"):
        autoregressive(verifier, prompt, 5, eos_token_id=[], prefilled=old, sampling=hot)


def test_greedy_only_drafters_and_rescaled_logits_are_refused(tiny, prompt):
    verifier, drafter = tiny

    class GreedyOnly:  # a drafter that does not sample its drafts (as TriForce's and EAGLE-3's)
        samples = False

        def __init__(self, model):
            self.model = model

    with pytest.raises(ValueError, match="the GreedyOnly drafter drafts greedily only"):
        speculative(GreedyOnly(drafter), verifier, prompt, 5, 2, sampling=Sampling(1.0))
    capped = tiny_llama(seed=0, layers=1)
    capped.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="rescales its logits after the LM head"):
        autoregressive(capped, prompt, 5, sampling=Sampling(1.0))


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--temperature", "-1", "--temperature: sampling temperature must be >= 0, got -1.0"),
        ("--top-p", "0", r"--top-p: sampling top_p must be in \(0, 1\], got 0.0"),
        ("--top-k", "-2", "--top-k: sampling top_k must be an integer >= 0, got -2"),
    ],
)
def test_cli_names_a_bad_sampling_flag(flag, value, message, capsys):
    """`python -m budgetdraft decode FLAG VALUE` ends in one line naming the flag, no traceback: its main() in this
    process (an exception other than SystemExit fails the test; tests/test_sampling.py's
    test_cli_decode_samples_reproducibly starts the command in a process of its own)."""
    from budgetdraft.pipeline.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["decode", flag, value])
    said = capsys.readouterr().err + (stop.value.code if isinstance(stop.value.code, str) else "")
    assert stop.value.code not in (0, None) and "Traceback" not in said
    assert re.search(message, said), said


# ---- the real embedded verifier (SmolLM2-135M-Instruct) with its 4-layer cut as a sparse drafter at B = 16 ---------


@pytest.fixture(scope="module")
def real_setup(real_pair):
    """A 40-token prompt, its verifier prefill shared by every run (each run still drafts from its own sparse
    drafter prefill), and the sampling setting: temperature 2, top-3 (the untrained drafter mostly disagrees, so
    drafts are rejected and resampled often)."""
    verifier, drafter, tokenizer = real_pair
    ids = tokenizer(shakespeare_text()[30000:45000])["input_ids"][:40]
    v = Verifier(verifier)
    first = v.prefill(ids_tensor(ids, verifier.device), len(ids))
    shared = {
        prompt_key(ids): SharedPrefill([v.cache.kv(i) for i in range(len(v.cache.layers))], first, 0.0, v.last_logits)
    }
    setting = Sampling(temperature=2.0, top_k=3)
    return ids, shared, setting, exact_prefix_distribution(verifier, ids, 2, setting)


def real_sd(real_pair, real_setup):
    verifier, drafter, _ = real_pair
    ids, shared, _, _ = real_setup
    # The first 2 new tokens: the first from the prefill, the second from the one draft of round 1 (kept or
    # resampled; max_new_tokens 3 leaves room for one draft and its bonus). The observer ends the generation after
    # that round: a rejected draft's next round (a verify of its own) decides nothing counted.
    return lambda s: speculative(
        SparseDrafter(drafter, 16), verifier, ids, 3, 2, eos_token_id=[], sampling=s, prefilled=shared,
        observer=lambda round_: round_.drafted > 0,
    )  # fmt: skip


@pytest.mark.real
def test_speculative_sampling_matches_the_verifiers_distribution_real(real_pair, real_setup):
    _, _, setting, exact = real_setup
    n = 150
    counts = first_tokens(real_sd(real_pair, real_setup), range(n), 2, setting)
    assert chi_square_p_value(counts, exact, n) > LEVEL


@pytest.mark.real
def test_the_distribution_test_rejects_accepting_every_draft_real(real_pair, real_setup, monkeypatch):
    _, _, setting, exact = real_setup
    accept_every_draft(monkeypatch)
    n = 40
    counts = first_tokens(real_sd(real_pair, real_setup), range(n), 2, setting)
    assert chi_square_p_value(counts, exact, n) < 1e-6


@pytest.mark.real
def test_temperature_zero_reproduces_greedy_on_the_real_model(real_pair):
    verifier, drafter, tokenizer = real_pair
    ids = tokenizer(shakespeare_text()[30000:45000])["input_ids"][:200]
    greedy = autoregressive(verifier, ids, 20, eos_token_id=[])
    cold = Sampling(temperature=0.0, seed=3)
    assert (
        speculative(SparseDrafter(drafter, 16), verifier, ids, 20, 5, eos_token_id=[], sampling=cold).tokens
        == greedy.tokens
    )
    assert autoregressive(verifier, ids, 20, eos_token_id=[], sampling=cold).tokens == greedy.tokens


# ---- grid cells and aggregation in sampling mode -----------------------------------------------------------------


@pytest.fixture(scope="module")
def cell_inputs(tiny, prompt, tmp_path_factory):
    root = tmp_path_factory.mktemp("cells")
    for name, model in zip(("verifier", "drafter"), tiny):
        model.save_pretrained(root / name)
    pd.DataFrame({"sample": [0, 1], "doc_id": ["a", "b"], "input_ids": [prompt, prompt[5:]]}).to_parquet(
        root / "prompts.parquet"
    )
    return root


def cell(cell_inputs, method, *flags):
    """One grid cell's rows (2 prompts x 2 repeats, 10 new tokens) on the tiny pair."""
    parser = argparse.ArgumentParser()
    cmd_eval_cell.configure_parser(parser)
    budget, gamma = ("0", "0") if method == "ar" else ("8", "3")
    args = parser.parse_args(
        [
            "--label",
            method,
            "--decodes",
            method,
            "--verifier",
            str(cell_inputs / "verifier"),
            "--drafter",
            str(cell_inputs / "drafter"),
            "--prompts",
            str(cell_inputs / "prompts.parquet"),
            "--dataset",
            "d",
            "--context",
            "c",
            "--budget",
            budget,
            "--gamma",
            gamma,
            "--max-new-tokens",
            "10",
            "--repeats",
            "2",
            "--warmup",
            "0",
            "--out",
            "unused",
            *flags,
        ]
    )
    return cells.run_cell(cmd_eval_cell.cell_spec(args))


def test_cells_record_the_sampling_and_aggregation_checks_one_decoding_per_group(cell_inputs, capsys):
    hot = ["--temperature", "1.2", "--top-k", "10", "--seed", "3"]
    greedy_ar, greedy_sd = cell(cell_inputs, "ar"), cell(cell_inputs, "sd")
    sampled_ar, sampled_sd = cell(cell_inputs, "ar", *hot), cell(cell_inputs, "sd", *hot)
    assert json.loads(greedy_sd["config"][0])["temperature"] == 0.0
    recorded = json.loads(sampled_sd["config"][0])
    assert (recorded["temperature"], recorded["top_p"], recorded["top_k"], recorded["seed"]) == (1.2, 1.0, 10, 3)
    for frame in (sampled_ar, sampled_sd):  # the repeats of a prompt decode the same sample
        assert frame.groupby("sample")["output_ids"].agg(lambda s: len({tuple(x) for x in s})).eq(1).all()
    assert list(sampled_sd["output_ids"][0]) != list(greedy_sd["output_ids"][0])
    assert sampled_sd["drafted"].sum() > 0 and 0 <= sampled_sd["accepted"].sum() <= sampled_sd["drafted"].sum()

    grid.check_lossless(pd.concat([greedy_ar, greedy_sd], ignore_index=True))  # greedy: token for token
    assert "skipped" not in capsys.readouterr().err
    grid.check_lossless(pd.concat([sampled_ar, sampled_sd], ignore_index=True))
    assert "d/c was decoded by sampling (temperature=1.2, top_p=1.0, top_k=10, seed=3)" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"cells of d/c were decoded differently \(greedy; temperature=1.2"):
        grid.check_lossless(pd.concat([greedy_ar, sampled_sd], ignore_index=True))


def test_a_greedy_only_decoder_refuses_sampling_naming_the_flag(cell_inputs):
    refused = "--temperature 0.9: decoder 'triforce' decodes greedily only; sampling runs with decoders ar, sd"
    with pytest.raises(ValueError, match=refused):
        cell(cell_inputs, "triforce", "--temperature", "0.9")


@pytest.mark.real
def test_cli_decode_samples_reproducibly(real_pair):
    """`budgetdraft decode` with a seed samples what the library samples with that seed, in another process: the
    same text."""
    verifier, drafter, tokenizer = real_pair
    prompt, hot = "To be, or not to be", Sampling(temperature=1.5, top_k=20, seed=11)
    flags = ["--temperature", "1.5", "--top-k", "20", "--seed", "11", "--budget", "16", "--max-new-tokens", "6"]
    run = subprocess.run(
        [sys.executable, "-m", "budgetdraft", "decode", "--method", "sd", "--threads", "1", "--prompt", prompt, *flags],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    ids = tokenizer(prompt)["input_ids"]
    here = speculative(SparseDrafter(drafter, 16), verifier, ids, 6, GAMMA, sampling=hot)
    assert run.stdout.split("\n{", 1)[0] == tokenizer.decode(here.tokens, skip_special_tokens=True)
