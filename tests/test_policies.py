"""The sparse-policy registry and its policies: what each keeps, per-head caches, the verifier-guided choice."""

from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_llama
from transformers import DynamicCache

from budgetdraft.decoding.kvcache import PreallocatedCache, gathered_kv, prefill, window_scores
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.policies import POLICIES, REGISTRY, PolicyInputs, keep_indices, snapkv, sparse_policy
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.decoding.verifier import Verifier, ids_tensor

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ("topk_chunks", "streaming", "full", "snapkv", "verifier_guided")


@pytest.fixture(scope="module")
def model():
    return tiny_llama(layers=2)  # 4 query heads on 2 KV heads


@pytest.fixture(scope="module")
def ids():
    torch.manual_seed(3)
    return torch.randint(0, 96, (1, 64))


def inputs_for(model, ids, budget, window=8, chunk=8):
    """Every observation a policy may need, from the drafter `model` (and the same model as the verifier)."""
    cache = PreallocatedCache(2)
    _, heads = prefill(model, ids, cache, score_window=window, per_head=True)
    verifier = torch.stack(window_scores(model, cache, ids, window)).sum(dim=0)
    return PolicyInputs(
        ids.shape[1], budget, chunk, 2, window, [h.sum(0) for h in heads], heads, verifier_scores=verifier
    )


def test_the_registry_holds_the_builtin_policies():
    assert set(BUILTIN) <= set(POLICIES)
    assert REGISTRY["snapkv"].needs == {"head_scores"}
    assert REGISTRY["verifier_guided"].needs == {"verifier_scores"}


def test_the_config_accepts_exactly_the_registered_policies():
    """The config's `policy` and `policies.names` accept what the registry knows, read from its source by the config
    check (torch-free); the schema lists none (a policy is one function in budgetdraft.decoding.policies)."""
    from budgetdraft.pipeline.configrefs import check_policies, registered_policies

    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    assert "enum" not in schema["definitions"]["policy"]
    assert list(registered_policies()) == list(POLICIES) and set(POLICIES) == set(BUILTIN)
    # read from the source, each policy's `budgeted` is the registry's (an unbudgeted policy's cells take no budget)
    assert registered_policies() == {name: REGISTRY[name].budgeted for name in POLICIES}
    assert [name for name, budgeted in registered_policies().items() if not budgeted] == ["full"]
    check_policies({"policy": "full", "policies": {"names": list(BUILTIN)}})
    with pytest.raises(ValueError, match=r"policies.names\[1\] = 'topk': not a sparse policy of budgetdraft"):
        check_policies({"policies": {"names": ["streaming", "topk"]}})
    assert schema["properties"]["policy"]["$ref"] == "#/definitions/policy"
    assert schema["properties"]["policies"]["properties"]["names"]["items"] == {"$ref": "#/definitions/policy"}


@pytest.mark.parametrize("policy", BUILTIN)
@pytest.mark.parametrize("budget", [8, 16, 40, 64, 100])
def test_each_policy_keeps_b_positions_or_all(model, ids, policy, budget):
    idx = keep_indices(policy, inputs_for(model, ids, budget))
    assert len(idx) == 2
    for layer in idx:
        rows = layer if layer.dim() == 2 else layer[None]
        for row in rows:
            want = 64 if policy == "full" or budget >= 64 else budget  # 64 and every B here split into chunks of 8
            assert row.tolist() == sorted(set(row.tolist())) and len(row) == want
            assert 0 <= row.min() and row.max() < 64


def test_snapkv_keeps_the_window_and_differs_across_heads(model, ids):
    idx = keep_indices("snapkv", inputs_for(model, ids, 24, window=8))
    for layer in idx:
        assert layer.shape == (2, 24)  # [H_kv, B]
        for row in layer:
            assert row[-8:].tolist() == list(range(56, 64))  # the observation window, in every head
    assert any(not torch.equal(layer[0], layer[1]) for layer in idx)


def test_snapkv_pools_neighbours_and_ranks_per_head():
    scores = torch.zeros(2, 40)
    scores[0, 10] = 5.0  # head 0 attends to position 10, head 1 to position 30
    scores[1, 30] = 5.0
    idx = snapkv(scores, 40, budget=11, window=4, kernel=7)
    assert idx[0, :7].tolist() == list(range(7, 14))  # the max-pool spreads 10 to its ±3 neighbours
    assert idx[1, :7].tolist() == list(range(27, 34))
    assert idx[:, 7:].tolist() == [[36, 37, 38, 39]] * 2
    assert snapkv(scores, 40, budget=40, window=4).shape == (2, 40)


def test_per_head_cache_equals_a_masked_full_forward(model, ids):
    """Each KV head attending to its own kept positions (real positions: keys were cached after RoPE) gives what
    the full model gives with every other position masked out for that head."""
    prefix, cont = ids[:, :48], ids[:, 48:56]
    full = DynamicCache()
    _, heads = prefill(model, prefix, full, score_window=8, per_head=True)
    idx = keep_indices("snapkv", PolicyInputs(48, 16, 8, 2, 8, head_scores=heads))
    idx = [idx[0]] * 2  # one per-head set for both layers: one mask per head describes it
    assert not torch.equal(idx[0][0], idx[0][1])
    sparse = PreallocatedCache.from_kv(gathered_kv(full, idx), capacity=8)
    with torch.no_grad():
        got = model(input_ids=cont, past_key_values=sparse, position_ids=torch.arange(48, 56)[None]).logits
    allowed = torch.zeros(4, 8, 56, dtype=torch.bool)  # query head h reads KV head h // 2
    for h in range(4):
        allowed[h][:, idx[0][h // 2]] = True
        allowed[h][:, 48:] = torch.tril(torch.ones(8, 8, dtype=torch.bool))
    mask = torch.zeros(1, 4, 8, 56).masked_fill(~allowed[None], float("-inf"))
    eager = tiny_llama(layers=2)
    eager.config._attn_implementation = "eager"
    with torch.no_grad():
        ref = eager(
            input_ids=cont,
            past_key_values=DynamicCache(gathered_kv(full, None)),
            position_ids=torch.arange(48, 56)[None],
            attention_mask=mask,
        ).logits
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)


def test_window_scores_equal_the_prefill_scores_and_leave_the_cache_untouched(model, ids):
    cache = PreallocatedCache(2)
    _, during = prefill(model, ids, cache, chunk_len=20, score_window=8)
    before = [(k.clone(), v.clone()) for k, v in (cache.kv(i) for i in range(2))]
    after = window_scores(model, cache, ids, 8)
    for a, b in zip(after, during):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert cache.get_seq_length() == 64
    for (k, v), (k0, v0) in zip((cache.kv(i) for i in range(2)), before):
        assert torch.equal(k, k0) and torch.equal(v, v0)


def test_verifier_guided_keeps_the_chunks_the_verifier_attends_to():
    """A verifier built to attend to token 0 only (its queries and keys read one embedding feature, +1 for token 0
    and −1 for every other token, through the slowest RoPE pair, so positions barely matter): its last queries
    look at chunk 2 (token 0 repeated) and the window (token 0 too), and the drafter keeps exactly those chunks."""
    verifier = tiny_llama(seed=5, layers=1)
    ids = torch.randint(1, 96, (1, 40), generator=torch.Generator().manual_seed(0))
    ids[0, 16:24] = 0  # chunk 2
    ids[0, 32:] = 0  # the observation window: its queries are token 0 too
    attn = verifier.model.layers[0].self_attn
    with torch.no_grad():
        verifier.model.embed_tokens.weight[:, 0] = -1.0
        verifier.model.embed_tokens.weight[0] = 0
        verifier.model.embed_tokens.weight[0, 0] = 1.0
        for proj, heads in ((attn.q_proj, 4), (attn.k_proj, 2)):
            proj.weight.zero_()
            for head in range(heads):
                proj.weight[head * 16 + 7, 0] = 1.0  # dim 7 of 16: the RoPE pair that turns slowest
    v = Verifier(verifier)
    v.prefill(ids, 50)
    scores = v.window_scores(ids, 8)
    assert scores[16:24].sum() > 0.9 * scores[:32].sum()
    drafter = tiny_llama(seed=1, layers=2)
    sd = SparseDrafter(drafter, 16, "verifier_guided", 8, 8)
    sd.prefill(ids, 10, verifier=v.prefill_state(ids, sd.reads))
    full = PreallocatedCache(2)
    prefill(drafter, ids, full)
    k, _ = full.kv(0)
    torch.testing.assert_close(sd.cache.kv(0)[0], k[:, :, list(range(16, 24)) + list(range(32, 40))])
    assert v.cache.get_seq_length() == 40 and v.length == 40
    with pytest.raises(ValueError, match="verifier"):
        SparseDrafter(drafter, 16, "verifier_guided").prefill(ids, 10)


@pytest.fixture()
def user_policy():
    """A policy a user adds in one function: the B positions with the largest ids (the most recent)."""

    @sparse_policy("most_recent_test")
    def most_recent(inputs: PolicyInputs) -> list[torch.Tensor]:
        n = min(inputs.budget, inputs.prefix_len)
        return [torch.arange(inputs.prefix_len - n, inputs.prefix_len)] * inputs.num_layers

    yield "most_recent_test"
    del REGISTRY["most_recent_test"]


def test_a_user_policy_defined_in_one_function_is_usable(user_policy, model, ids):
    assert user_policy in POLICIES
    assert keep_indices(user_policy, PolicyInputs(64, 16, 8, 2))[0].tolist() == list(range(48, 64))
    verifier, drafter = tiny_llama(seed=0, layers=3), tiny_llama(seed=1, layers=1)
    prompt = ids[0, :45].tolist()
    sd = speculative(SparseDrafter(drafter, 16, user_policy, 8, 8), verifier, prompt, 20, 4, eos_token_id=[])
    assert sd.tokens == autoregressive(verifier, prompt, 20, eos_token_id=[]).tokens


def test_a_policy_that_breaks_the_contract_is_refused(user_policy):
    @sparse_policy("too_many_test")
    def too_many(inputs):
        return [torch.arange(inputs.prefix_len)] * inputs.num_layers

    try:
        with pytest.raises(ValueError, match="over B"):
            keep_indices("too_many_test", PolicyInputs(64, 16, 8, 2))
        with pytest.raises(ValueError, match="registered already"):
            sparse_policy(user_policy)(too_many)
        with pytest.raises(ValueError, match="needs"):
            sparse_policy("x_test", needs=("gradients",))
        with pytest.raises(ValueError, match="needs scores"):
            keep_indices("topk_chunks", PolicyInputs(64, 16, 8, 2))
    finally:
        del REGISTRY["too_many_test"]


@pytest.mark.parametrize("policy", ["snapkv", "verifier_guided"])
@pytest.mark.parametrize("budget", [4, 16, 45, 1000])
@pytest.mark.parametrize("gamma", [1, 5])
def test_new_policies_are_lossless_on_random_weights(policy, budget, gamma):
    verifier, drafter = tiny_llama(seed=0, layers=3), tiny_llama(seed=1, layers=1)
    torch.manual_seed(2)
    prompt = torch.randint(0, 96, (45,)).tolist()
    ar = autoregressive(verifier, prompt, 30, eos_token_id=[])
    sd = speculative(SparseDrafter(drafter, budget, policy, 8, 8), verifier, prompt, 30, gamma, eos_token_id=[])
    assert sd.tokens == ar.tokens


def test_self_drafting_with_snapkv_keeps_the_verifier_at_full_budget(ids):
    """B ≥ P: every policy keeps everything, and a self-drafter then agrees with the verifier on every draft."""
    verifier = tiny_llama(seed=0, layers=2)
    prompt = ids[0, :40].tolist()
    for policy in ("snapkv", "verifier_guided"):
        sd = speculative(SparseDrafter(verifier, 64, policy, 8, 8), verifier, prompt, 12, 3, eos_token_id=[])
        assert sd.stats.accepted == sd.stats.drafted
    drafter = SparseDrafter(verifier, 64, "snapkv", 8, 8)
    drafter.prefill(ids_tensor(prompt, "cpu"), 4)
    assert drafter.cache.get_seq_length() == 40
