import pytest
import torch
from conftest import tiny_llama
from transformers import DynamicCache

from budgetdraft.decoding.kvcache import PreallocatedCache, gathered_cache, gathered_kv, prefill
from budgetdraft.decoding.policies import PolicyInputs, keep_indices, streaming, topk_chunks


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def ids():
    torch.manual_seed(1)
    return torch.randint(0, 96, (1, 70))


def forward(model, tokens, cache, start):
    positions = torch.arange(start, start + tokens.shape[1])[None]
    with torch.no_grad():
        return model(input_ids=tokens, past_key_values=cache, position_ids=positions).logits


def test_preallocated_cache_matches_a_full_forward_and_grows(model, ids):
    full = model(ids).logits
    cache = PreallocatedCache(2, capacity=8)  # smaller than needed: must grow, not fail
    logits, _ = prefill(model, ids[:, :40], cache, chunk_len=16)
    torch.testing.assert_close(logits, full[:, 39], rtol=0, atol=1e-5)
    out = forward(model, ids[:, 40:], cache, 40)
    torch.testing.assert_close(out, full[:, 40:], rtol=0, atol=1e-5)
    assert cache.get_seq_length() == 70


def test_rollback_equals_a_cache_that_never_saw_the_rejected_tokens(model, ids):
    rejected = torch.randint(0, 96, (1, 5))
    cache = PreallocatedCache(2)
    prefill(model, ids[:, :40], cache)
    forward(model, torch.cat([ids[:, 40:43], rejected], dim=1), cache, 40)  # 3 accepted + 5 rejected
    stale = PreallocatedCache.from_kv([cache.kv(i) for i in range(2)], capacity=8)
    cache.truncate(43)
    after = forward(model, ids[:, 43:50], cache, 43)
    clean = PreallocatedCache(2)
    prefill(model, ids[:, :43], clean)
    reference = forward(model, ids[:, 43:50], clean, 43)
    # Equal up to float noise from batching the accepted tokens differently (~1e-8) ...
    torch.testing.assert_close(after, reference, rtol=0, atol=1e-5)
    # ... while a cache that kept the rejected tokens is visibly wrong.
    assert not torch.allclose(forward(model, ids[:, 43:50], stale, 48), reference, atol=1e-3)


def test_kept_everything_sparse_cache_gives_the_full_cache_logits(model, ids):
    full_cache = DynamicCache()
    _, scores = prefill(model, ids[:, :48], full_cache, score_window=8)
    idx = keep_indices("topk_chunks", PolicyInputs(48, budget=48, chunk_size=8, num_layers=2, scores=scores))
    sparse = PreallocatedCache.from_kv(gathered_kv(full_cache, idx), capacity=30)
    reference = forward(model, ids[:, 48:], gathered_cache(full_cache, None), 48)
    assert torch.equal(forward(model, ids[:, 48:], sparse, 48), reference)


def test_sparse_cache_with_real_positions_equals_full_forward_masking_dropped_positions(model, ids):
    prefix, cont = ids[:, :48], ids[:, 48:56]
    full_cache = DynamicCache()
    _, scores = prefill(model, prefix, full_cache, score_window=8)
    idx = keep_indices("topk_chunks", PolicyInputs(48, budget=16, chunk_size=8, num_layers=2, scores=scores))
    # Reference: the full cache, with a 4D mask hiding the dropped prefix positions (same set in every layer).
    shared = [idx[0]] * 2
    sparse = PreallocatedCache.from_kv(gathered_kv(full_cache, shared), capacity=8)
    got = forward(model, cont, sparse, 48)
    allowed = torch.zeros(8, 56, dtype=torch.bool)
    allowed[:, idx[0]] = True
    allowed[:, 48:] = torch.tril(torch.ones(8, 8, dtype=torch.bool))
    mask = torch.zeros(1, 1, 8, 56).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():
        ref = model(
            input_ids=cont,
            past_key_values=gathered_cache(full_cache, None),
            position_ids=torch.arange(48, 56)[None],
            attention_mask=mask,
        ).logits
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    # ... and without the real positions the result is different (the reason they are passed explicitly).
    wrong = PreallocatedCache.from_kv(gathered_kv(full_cache, shared), capacity=8)
    assert not torch.allclose(forward(model, cont, wrong, 16), ref, atol=1e-3)


def test_scores_are_the_eager_attention_of_the_last_queries(model, ids):
    _, scores = prefill(model, ids[:, :40], DynamicCache(), chunk_len=16, score_window=8)
    eager = tiny_llama()
    eager.config._attn_implementation = "eager"
    with torch.no_grad():
        attentions = eager(ids[:, :40], output_attentions=True).attentions
    for got, att in zip(scores, attentions):
        torch.testing.assert_close(got, att[0, :, -8:, :].sum(dim=(0, 1)), rtol=0, atol=1e-5)


def test_topk_chunks_keeps_the_best_chunks_in_order():
    scores = torch.zeros(30)
    scores[8:16] = 1.0  # chunk 1
    scores[0:8] = 0.5  # chunk 0
    idx = topk_chunks(scores, 30, budget=16, chunk_size=8)
    # the trailing partial chunk [24, 30) is always kept (equal length in every layer) + the best full chunk
    assert idx.tolist() == list(range(8, 16)) + list(range(24, 30))
    longer = torch.cat([scores, torch.zeros(2)])  # P = 32: no partial chunk, the two best full chunks
    assert topk_chunks(longer, 32, budget=16, chunk_size=8).tolist() == list(range(0, 16))
    assert topk_chunks(scores, 30, budget=30, chunk_size=8).tolist() == list(range(30))
    assert topk_chunks(scores, 30, budget=4, chunk_size=8).numel() == 0  # B < s keeps no whole chunk


def test_streaming_keeps_sinks_and_recent_window():
    assert streaming(20, 8).tolist() == [0, 1, 2, 3, 16, 17, 18, 19]
    assert streaming(6, 8).tolist() == list(range(6))


@pytest.mark.parametrize(
    "policy,budget,chunk,message",
    [
        ("topk_chunks", 0, 8, "budget"),
        ("topk_chunks", -5, 8, "budget"),
        ("topk_chunks", 16, 0, "chunk_size"),
        ("h2o", 16, 8, "policy"),
    ],
)
def test_bad_sparse_settings_name_the_value(policy, budget, chunk, message):
    with pytest.raises(ValueError, match=message):
        keep_indices(policy, PolicyInputs(20, budget, chunk, 1, scores=[torch.ones(20)]))


@pytest.mark.parametrize("chunk", [1, 5, 8])
def test_grouped_query_attention_equals_sdpa_with_repeated_kv_heads(model, ids, chunk):
    """The verify / chunked-prefill path (several queries, a mask, 2 query heads per KV head) packs query heads
    instead of repeating KV heads; logits and gradients equal transformers' own ``sdpa``."""
    from budgetdraft.decoding import attention

    outputs = {}
    for impl in ("sdpa", attention.NAME):
        model.set_attn_implementation(impl)
        model.zero_grad()
        cache = PreallocatedCache(2)
        prefill(model, ids[:, :40], cache)
        positions = torch.arange(40, 40 + chunk)[None]
        logits = model(input_ids=ids[:, 40 : 40 + chunk], past_key_values=cache, position_ids=positions).logits
        logits.square().sum().backward()
        outputs[impl] = (logits.detach(), model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    model.zero_grad()
    assert model.config._attn_implementation == attention.NAME
    torch.testing.assert_close(outputs[attention.NAME], outputs["sdpa"], rtol=0, atol=1e-6)


@pytest.mark.real
def test_grouped_query_attention_on_the_real_model(real_pair):
    from budgetdraft.decoding import attention

    verifier, _, _ = real_pair
    torch.manual_seed(0)
    ids = torch.randint(0, verifier.config.vocab_size, (1, 300))
    logits = {}
    try:
        for impl in ("sdpa", attention.NAME):
            verifier.set_attn_implementation(impl)
            cache = PreallocatedCache(verifier.config.num_hidden_layers)
            prefill(verifier, ids[:, :294], cache, chunk_len=100)  # chunked: several queries on a longer cache
            with torch.no_grad():
                logits[impl] = verifier(
                    input_ids=ids[:, 294:], past_key_values=cache, position_ids=torch.arange(294, 300)[None]
                ).logits
    finally:
        verifier.set_attn_implementation(attention.NAME)
    assert verifier.config.num_attention_heads == 3 * verifier.config.num_key_value_heads
    torch.testing.assert_close(logits[attention.NAME], logits["sdpa"], rtol=0, atol=1e-4)
