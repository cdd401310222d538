"""Speculative decoding is lossless: its output equals the verifier's own greedy output, token for token."""

import json
import re

import pytest
import torch
from conftest import shakespeare_text, tiny_llama

from budgetdraft.decoding.draftvocab import ReducedHead, frequent_tokens, load_vocab, save_vocab
from budgetdraft.decoding.loading import EMBEDDED, EmbeddedGGUF, check_pair, embedded_gguf, load_model, resolve
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.decoding.verifier import Verifier, ids_tensor


@pytest.fixture(scope="module")
def pair():
    return tiny_llama(seed=0, layers=3), tiny_llama(seed=1, layers=1)  # verifier, (unrelated) drafter


@pytest.fixture(scope="module")
def prompt():
    torch.manual_seed(2)
    return torch.randint(0, 96, (45,)).tolist()


@pytest.fixture(scope="module")
def random_ar(pair, prompt):
    """The verifier's own greedy 30 tokens, once for every row of the grid below."""
    return autoregressive(pair[0], prompt, 30, eos_token_id=[]).tokens


@pytest.mark.parametrize("policy", ["topk_chunks", "streaming", "full"])
@pytest.mark.parametrize("budget", [4, 16, 45, 1000])  # B < chunk, B < P, B = P, B ≥ P
@pytest.mark.parametrize("gamma", [1, 3, 5, 8])
def test_sd_equals_ar_on_random_weights(pair, prompt, random_ar, policy, budget, gamma):
    verifier, drafter = pair
    sd = speculative(SparseDrafter(drafter, budget, policy, 8, 8), verifier, prompt, 30, gamma, eos_token_id=[])
    assert sd.tokens == random_ar
    assert sd.stats.new_tokens == 30
    assert 0 <= sd.stats.accepted <= sd.stats.drafted


@pytest.mark.parametrize("gamma", [1, 3, 5, 8])
def test_sd_stops_at_eos_like_ar(pair, prompt, gamma):
    verifier, drafter = pair
    free = autoregressive(verifier, prompt, 30, eos_token_id=[])
    eos = free.tokens[12]  # a token AR emits mid-way: both must stop right after its first occurrence
    ar = autoregressive(verifier, prompt, 30, eos_token_id=eos)
    assert ar.tokens[-1] == eos and len(ar.tokens) <= 13
    sd = speculative(SparseDrafter(drafter, 16), verifier, prompt, 30, gamma, eos_token_id=eos)
    assert sd.tokens == ar.tokens


@pytest.mark.parametrize("gamma", [4, 6])
def test_a_round_cut_at_eos_counts_only_the_drafts_it_emitted(pair, prompt, gamma):
    """Self-drafting accepts every draft; with EOS at the second or third of them the first round is cut there,
    and what is counted is what was emitted: no accepted draft beyond the tokens decoded (``decode`` stops at EOS;
    before the fix the round's γ accepted drafts were counted before the cut)."""
    verifier, _ = pair
    free = autoregressive(verifier, prompt, 12, eos_token_id=[]).tokens
    cut = next(i for i in (2, 3) if free[i] not in free[:i])  # EOS first occurs at the i-th draft of round 1
    sd = speculative(SparseDrafter(verifier, 10_000, "full"), verifier, prompt, 12, gamma, eos_token_id=free[cut])
    assert sd.tokens == free[: cut + 1] == autoregressive(verifier, prompt, 12, eos_token_id=free[cut]).tokens
    assert sd.stats.accepted == sd.stats.drafted == cut == sd.stats.new_tokens - 1  # the first token: the prefill's
    assert sd.stats.accept_by_position == [1.0] * cut
    assert sd.stats.draft_steps == gamma  # what the drafter ran


def test_the_loop_holds_no_clock_and_reads_no_memory():
    """The loop decides tokens; timing and memory are its caller's (``budgetdraft.evaluation.measure``)."""
    import ast
    import inspect

    from budgetdraft.decoding import loop

    measuring = {
        "Clock", "Stopwatch", "synchronize", "perf_counter", "time", "cuda", "Event", "reset_peak_memory",
        "peak_memory", "max_memory_allocated", "record_memory", "record_bound", "device_bandwidth",
        "kv_bytes_per_token", "kv_bytes", "weight_bytes", "cache_bytes", "storage_bytes",
    }  # fmt: skip
    tree = ast.parse(inspect.getsource(loop))
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    used |= {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert used & measuring == set()


class StrictDrafter(SparseDrafter):
    """Fails if the decoder reports a verification or a rollback for a round the drafter did not draft."""

    def draft(self, pending, gamma):
        self.drafted = True
        return super().draft(pending, gamma)

    def after_verify(self, verifier_output, accepted, bonus):
        assert getattr(self, "drafted", False), "after_verify without a draft"

    def rollback(self, kept_new):
        assert self.drafted, "rollback without a draft"
        self.drafted = False
        super().rollback(kept_new)


@pytest.mark.parametrize("new_tokens", [1, 2, 3, 7])
def test_short_generations_never_report_undrafted_rounds(pair, prompt, new_tokens):
    verifier, drafter = pair
    sd = speculative(StrictDrafter(drafter, 16), verifier, prompt, new_tokens, 5, eos_token_id=[])
    assert sd.tokens == autoregressive(verifier, prompt, new_tokens, eos_token_id=[]).tokens


@pytest.mark.parametrize("agree", [0, 1, 3, 5])
def test_verify_accepts_the_longest_agreeing_prefix_and_the_verifiers_bonus(pair, prompt, agree):
    """``Verifier.verify`` runs the LM head lazily (first row, then the rest); its k and bonus equal those read
    off the full logits of the same forward."""
    verifier_model, _ = pair
    v = Verifier(verifier_model)
    last = v.prefill(ids_tensor(prompt, "cpu"), len(prompt) + 8)
    greedy = autoregressive(verifier_model, prompt, 7, eos_token_id=[]).tokens  # greedy[0] == last
    drafts = greedy[1 : 1 + agree] + [(t + 1) % 96 for t in greedy[1 + agree : 6]]  # first `agree` drafts right
    out = v.hidden(ids_tensor([last] + drafts, "cpu"))
    full = verifier_model.lm_head(out.last_hidden_state)[0].argmax(-1).tolist()
    assert full[:agree] == drafts[:agree] and (agree == 5 or full[agree] != drafts[agree])
    assert v.verify(out.last_hidden_state, torch.tensor(drafts)) == (drafts, agree, full[agree])


@pytest.mark.parametrize("gamma", [1, 4, 7])
def test_self_drafting_accepts_everything(pair, prompt, gamma):
    verifier, _ = pair
    sd = speculative(SparseDrafter(verifier, 10_000, "full"), verifier, prompt, 33, gamma, eos_token_id=[])
    assert sd.stats.acceptance == 1.0
    full_rounds = (33 - 1) // (gamma + 1)
    assert sd.stats.verifier_forwards <= full_rounds + 1 + (33 - 1) % (gamma + 1)
    assert sd.stats.accept_by_position[:gamma] == [1.0] * gamma


def test_metrics_are_consistent(pair, prompt):
    from budgetdraft.evaluation import measure

    verifier, drafter = pair
    assert autoregressive(verifier, prompt, 12, eos_token_id=[]).stats.tau == 1.0
    sd = measure.timed_speculative(SparseDrafter(drafter, 16), verifier, prompt, 20, 4, eos_token_id=[]).stats
    assert sd.total_s >= sd.verifier_prefill_s + sd.drafter_prefill_s
    assert sd.decode_s >= 0 and sd.peak_mem_mb > 0
    assert sd.tau == pytest.approx(20 / sd.verifier_forwards)
    assert sd.tok_per_s == pytest.approx(20 / sd.total_s)


# ---- bad input: a clear ValueError naming the value ----------------------------------------------------------


def test_gamma_below_one_is_rejected(pair, prompt):
    with pytest.raises(ValueError, match="gamma"):
        speculative(SparseDrafter(pair[1], 16), pair[0], prompt, 10, 0)


@pytest.mark.parametrize("budget,chunk,match", [(0, 8, "budget"), (-1, 8, "budget"), (16, 0, "chunk_size")])
def test_bad_budget_or_chunk_is_rejected(pair, budget, chunk, match):
    with pytest.raises(ValueError, match=match):
        SparseDrafter(pair[1], budget, "topk_chunks", chunk)


def test_prompt_longer_than_the_verifier_allows_is_rejected(pair):
    with pytest.raises(ValueError, match="max_position_embeddings 512"):
        autoregressive(pair[0], [1] * 500, 20)


def test_different_vocabularies_are_rejected(pair, prompt):
    other = tiny_llama(seed=3, vocab=100)
    with pytest.raises(ValueError, match="vocab_size 100 differs from verifier vocab_size 96"):
        check_pair(other, pair[0])
    with pytest.raises(ValueError, match="vocab_size"):
        speculative(SparseDrafter(other, 16), pair[0], prompt, 5, 2)


def test_missing_model_files_are_named(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        load_model(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="unknown embedded model"):
        load_model("embedded:gpt5")
    monkeypatch.setitem(EMBEDDED, "ghost", EmbeddedGGUF(("not-installed-pkg",), "x.gguf", "0", "x.gguf"))
    with pytest.raises(ValueError, match="'not-installed-pkg' is not installed"):
        embedded_gguf("ghost")


def test_a_missing_local_model_directory_is_not_taken_for_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for spec in ("/nowhere/model", "./nowhere", "../nowhere", "~/nowhere", "results/drafters"):
        named = spec.replace("~", str(tmp_path / "home"))
        with pytest.raises(FileNotFoundError, match=f"^{re.escape(f'no such model directory: {named}')}$"):
            load_model(spec)
    assert resolve("JackFram/llama-68m") == "JackFram/llama-68m"  # a hub id stays one


def test_cli_reports_bad_input_in_one_line(tmp_path):
    """`budgetdraft decode` on a missing model: its main() here (any exception but SystemExit fails the test)."""
    from budgetdraft.pipeline.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["decode", "--verifier", str(tmp_path / "nope")])
    assert "error: no such model directory" in stop.value.code and "\n" not in stop.value.code


# ---- the real embedded model pair (SmolLM2-135M-Instruct verifier, its 4-layer cut as drafter) ---------------


@pytest.mark.real
@pytest.mark.parametrize("budget", [4, 64, 400])
# the ends and the grid's γ: γ = 3 on the real model is proven by test_real_chat_prompt_that_ends_with_eos, and with
# every budget and policy on random weights by test_sd_equals_ar_on_random_weights (its row here: ~15 CPU-seconds)
@pytest.mark.parametrize("gamma", [1, 5, 8])
def test_sd_equals_ar_on_the_real_model(real_pair, real_prompt, real_ar, budget, gamma):
    verifier, drafter, _ = real_pair
    sd = speculative(SparseDrafter(drafter, budget), verifier, real_prompt, 24, gamma, eos_token_id=[])
    assert sd.tokens == real_ar


@pytest.mark.real
@pytest.mark.parametrize("policy", ["streaming", "full", "snapkv", "verifier_guided"])
def test_other_policies_are_lossless_on_the_real_model(real_pair, real_prompt, real_ar, policy):
    verifier, drafter, _ = real_pair
    sd = speculative(SparseDrafter(drafter, 64, policy), verifier, real_prompt, 24, 5, eos_token_id=[])
    assert sd.tokens == real_ar


@pytest.mark.real
@pytest.mark.parametrize("gamma", [3, 5])
def test_real_chat_prompt_that_ends_with_eos(real_pair, gamma):
    verifier, drafter, tokenizer = real_pair
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, return_dict=False
    )
    ar = autoregressive(verifier, ids, 60)
    assert ar.tokens[-1] == tokenizer.eos_token_id and len(ar.tokens) < 60  # the instruct model stops by itself
    sd = speculative(SparseDrafter(drafter, 16), verifier, ids, 60, gamma)
    assert sd.tokens == ar.tokens


@pytest.mark.real
def test_self_drafting_on_the_real_model(real_pair, real_prompt, real_ar):
    verifier, _, _ = real_pair
    sd = speculative(SparseDrafter(verifier, 64), verifier, real_prompt, 24, 5, eos_token_id=[])
    assert sd.tokens == real_ar
    assert sd.stats.tau > 2  # a sparse copy of the verifier still agrees with it most of the time


@pytest.mark.real
def test_ar_records_the_verifiers_runner_up_and_margin_at_every_token(real_pair, real_prompt):
    """What the lossless check's near-tie rule reads: per token, AR's second choice and top-1 − top-2 logit gap."""
    verifier, _, _ = real_pair
    ar = autoregressive(verifier, real_prompt, 12, eos_token_id=[])
    assert len(ar.runner_up) == len(ar.margins) == len(ar.tokens) == 12
    assert all(r != t for r, t in zip(ar.runner_up, ar.tokens)) and all(m >= 0 for m in ar.margins)
    with torch.no_grad():
        logits = verifier(torch.tensor([real_prompt + ar.tokens[:5]])).logits[0, -1]
    top = logits.topk(2)
    assert ar.runner_up[5] == int(top.indices[1])
    assert ar.margins[5] == pytest.approx(float(top.values[0] - top.values[1]), abs=1e-3)


@pytest.mark.real
def test_a_reduced_draft_vocabulary_drafts_only_its_tokens_and_stays_lossless(real_pair, real_prompt, real_ar):
    """The 2,048 most frequent tokens of another play: drafts come from them only, the output is AR's (the
    untrained 4-layer drafter accepts nothing on this prompt, with or without the reduced vocabulary)."""
    verifier, drafter, tokenizer = real_pair
    vocab = frequent_tokens([tokenizer(shakespeare_text("macbeth_gut.txt")[:60000])["input_ids"]], 2048)
    sparse = SparseDrafter(drafter, 64, draft_vocab=vocab)
    sparse.prefill(torch.tensor([real_prompt]), capacity=16)
    assert set(sparse.draft([real_prompt[-1]], 8).tolist()) <= set(vocab.tolist())
    sd = speculative(SparseDrafter(drafter, 64, draft_vocab=vocab), verifier, real_prompt, 24, 5, eos_token_id=[])
    assert sd.tokens == real_ar
    # the verifier drafting for itself from the reduced vocabulary: accepted wherever its token is in it
    own = speculative(SparseDrafter(verifier, 64, draft_vocab=vocab), verifier, real_prompt, 24, 5, eos_token_id=[])
    assert own.tokens == real_ar and own.stats.tau > 2


def test_frequent_tokens_and_the_reduced_head(pair, tmp_path):
    vocab = frequent_tokens([[5, 5, 7, 7, 3, 9, 9, 9], [3, 1]], 3)
    assert vocab.tolist() == [3, 5, 9]  # 9 ×3, then 3 / 5 / 7 ×2: ties go to the smaller ids
    save_vocab(vocab, tmp_path / "v.safetensors")
    assert torch.equal(load_vocab(tmp_path / "v.safetensors"), vocab)
    with pytest.raises(ValueError, match="exceeds the 5 distinct tokens"):
        frequent_tokens([[5, 5, 7, 7, 3, 9, 9, 9], [3, 1]], 6)
    _, drafter = pair
    head = ReducedHead(drafter, torch.tensor([2, 40, 95]))
    hidden = torch.randn(drafter.config.hidden_size)
    full = drafter.get_output_embeddings()(hidden)
    logits = head(hidden)
    assert torch.allclose(logits[[2, 40, 95]], full[[2, 40, 95]], atol=1e-6)
    assert torch.isinf(logits).sum() == drafter.config.vocab_size - 3
    with pytest.raises(ValueError, match="must lie in"):
        ReducedHead(drafter, torch.tensor([drafter.config.vocab_size]))


@pytest.mark.real
def test_a_cpu_float32_model_decodes_in_this_machines_layout_and_trains_in_transformers_own(tmp_path, monkeypatch):
    """load_model lays the weights out as this machine decodes fastest (measured once per linear shapes and cached,
    budgetdraft.decoding.layout): column-major, the same values, the tied embedding sharing the LM head's tensor;
    column-major and, but the LM head, packed for oneDNN's product of several rows; or transformers' own. A model to train keeps transformers'
    layout. All compute the same logits (packed: to float32 rounding, the same greedy tokens). (The converted models
    are this session's cache, linked: converting the GGUF again is no part of the claim.)"""
    from budgetdraft.decoding import layout
    from budgetdraft.decoding.loading import embedded_dir
    from budgetdraft.decoding.packed import PackedLinear

    models = embedded_dir("smollm2", {"layers": "4"}).parent  # converted once per cache, as every real test finds it
    monkeypatch.setenv("BUDGETDRAFT_CACHE", str(tmp_path))  # a machine that has measured nothing yet
    (tmp_path / "models").symlink_to(models)
    train = load_model("embedded:smollm2:layers=4", trainable=True)
    laid = {
        name: layout.decode_layout(load_model("embedded:smollm2:layers=4", trainable=True), "cpu", "float32", name)
        for name in layout.candidates()
    }
    assert set(laid) == set(layout.LAYOUTS), "this x86 torch wheel has oneDNN's packed linear"
    for name, model in laid.items():
        linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        assert len(linears) == 4 * 7 + 1, name  # q k v o gate up down per layer, and the LM head
        for n, module in linears:
            head = module is model.get_output_embeddings()
            assert isinstance(module, PackedLinear) == (name == layout.PACKED and not head), (name, n)
            column = name != layout.ROW
            assert module.weight.t().is_contiguous() == column and module.weight.is_contiguous() != column, (name, n)
            assert torch.equal(module.weight, train.get_submodule(n).weight), (name, n)
        assert model.config.tie_word_embeddings
        assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert all(p.is_contiguous() for p in train.parameters())
    ids = torch.tensor([[1, 42, 300, 7, 9000, 12]])
    with torch.no_grad():
        expected = train(ids).logits
        for name, model in laid.items():
            for rows in (ids, ids[:, :1]):  # packed: six rows through oneDNN, one through MKL
                logits = model(rows).logits
                assert torch.allclose(logits, expected[:, : rows.shape[1]], atol=1e-3), name
                assert torch.equal(logits.argmax(-1), expected[:, : rows.shape[1]].argmax(-1)), name
    decode = load_model("embedded:smollm2:layers=4")  # measures this machine, once
    (record,) = (tmp_path / "machine").glob("layout-*.json")
    measured = json.loads(record.read_text())
    assert set(measured["seconds"]) == set(layout.LAYOUTS) and measured["key"]["layouts"] == list(layout.LAYOUTS)
    packed = isinstance(decode.model.layers[0].mlp.up_proj, PackedLinear)
    assert (decode.lm_head.weight.is_contiguous(), packed) == {
        layout.ROW: (True, False),
        layout.COLUMN: (False, False),
        layout.PACKED: (False, True),
    }[measured["choice"]]
    for choice in (layout.COLUMN, layout.PACKED):  # the cached choice is what every later load takes
        record.write_text(json.dumps({"choice": choice}))
        again = load_model("embedded:smollm2:layers=4")
        assert not again.lm_head.weight.is_contiguous()
        assert isinstance(again.model.layers[0].mlp.up_proj, PackedLinear) == (choice == layout.PACKED)
