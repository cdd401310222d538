"""A drafter's positional range (`budgetdraft.decoding.positions`): the embedded default's short native range, position
interpolation (method `pi`), and the positional profile (`budgetdraft.evaluation.profile`)."""

import pytest
import torch
from conftest import tiny_llama

from budgetdraft.decoding import positions
from budgetdraft.decoding.export import export
from budgetdraft.decoding.loading import load_model
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.evaluation.profile import bucket_agreement, profile, verifier_targets


def test_cover_multiplies_positions_and_sets_the_native_range():
    """A model of 512 positions made to cover 128: every position × 4 (linear factor 1/4); then interpolated to
    cover 1,024 from those 128: factor 1/4 × 8 = 2. inv_freq follows, against the model's own default."""
    model = tiny_llama(max_positions=512)
    default = model.model.rotary_emb.inv_freq.clone()
    short = positions.cover(model.config, 128)
    assert short.max_position_embeddings == 128 and short.rope_parameters["factor"] == pytest.approx(0.25)
    assert torch.allclose(type(model)(short).model.rotary_emb.inv_freq, default * 4)
    wide = positions.cover(short, 1024)
    assert wide.rope_parameters == {"rope_type": "linear", "factor": pytest.approx(2.0), "rope_theta": 10000.0}
    assert torch.allclose(type(model)(wide).model.rotary_emb.inv_freq, default / 2)
    assert positions.native_range(wide) == 1024


@pytest.mark.parametrize("rope", [{"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}, {"rope_type": "dynamic"}])
def test_cover_refuses_a_rope_it_cannot_rescale_naming_it(rope):
    config = tiny_llama().config
    config.rope_parameters = rope
    with pytest.raises(ValueError, match=f"rope_type '{rope['rope_type']}' cannot be rescaled"):
        positions.cover(config, 64)


def test_cover_refuses_a_count_that_is_not_positions():
    with pytest.raises(ValueError, match="positions must be a whole number >= 1"):
        positions.cover(tiny_llama().config, 0)


def test_agreement_buckets_count_every_position():
    drafted, target = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([1, 0, 3, 0, 5])
    assert bucket_agreement(drafted, target, 2) == [(0, 1, 2), (2, 1, 2), (4, 1, 1)]


def test_a_drafter_that_is_the_verifier_agrees_everywhere():
    verifier, other = tiny_llama(seed=0), tiny_llama(seed=1)
    prompts = {"d": [list(range(1, 41))]}
    rows = profile(verifier_targets(verifier, prompts), {"same": verifier, "other": other}, prompts, 16, 0)
    same = rows[rows["label"] == "same"]
    assert list(same["bucket_start"]) == [0, 16, 32] and list(same["total"]) == [16, 16, 8]
    assert (same["agreed"] == same["total"]).all()
    assert rows[rows["label"] == "other"]["agreed"].sum() < 40


@pytest.mark.real
def test_the_spec_option_rescales_the_real_drafter_s_rotary_positions(tmp_path):
    """embedded:smollm2:layers=4:positions=128: the 4-layer cut's weights, its inv_freq × 64 (128 positions span
    the 8,192 SmolLM2 knows), native range 128; exported with --cover 1024, × 8 (position interpolation)."""
    cut, short = load_model("embedded:smollm2:layers=4"), load_model("embedded:smollm2:layers=4:positions=128")
    assert short.config.max_position_embeddings == 128
    assert torch.allclose(short.model.rotary_emb.inv_freq, cut.model.rotary_emb.inv_freq * 64)
    assert all(torch.equal(a, b) for a, b in zip(cut.state_dict().values(), short.state_dict().values()))
    export("embedded:smollm2:layers=4:positions=128", tmp_path / "pi", cover=1024)
    pi = load_model(str(tmp_path / "pi"))
    assert pi.config.max_position_embeddings == 1024
    assert torch.allclose(pi.model.rotary_emb.inv_freq, cut.model.rotary_emb.inv_freq * 8)
    assert all(torch.equal(a, b) for a, b in zip(cut.state_dict().values(), pi.state_dict().values()))


@pytest.mark.real
@pytest.mark.parametrize("cover", [None, 1024])
def test_a_short_range_and_an_interpolated_drafter_are_lossless_on_the_real_model(
    real_pair, real_prompt, real_ar, tmp_path, cover
):
    """SD with the default's drafter (native range 128) and with its interpolated copy (method pi) at a 300-token
    prompt, far past 128: the verifier's own greedy tokens (conftest.py's real_ar)."""
    export("embedded:smollm2:layers=4:positions=128", tmp_path / "d", cover=cover)
    drafter = load_model(str(tmp_path / "d"))
    for budget in (16, 64):
        sd = speculative(SparseDrafter(drafter, budget), real_pair[0], real_prompt, 24, 5, eos_token_id=[])
        assert sd.tokens == real_ar


def test_sd_with_a_full_drafter_cache_takes_no_budget_and_is_lossless():
    """The collapse's control `sd@full`: policy full at B = 0 (no budget) keeps every prompt position; any other
    policy still refuses B = 0."""
    verifier, drafter = tiny_llama(seed=0, layers=2), tiny_llama(seed=1, layers=1)
    prompt = list(range(3, 83))
    ar = autoregressive(verifier, prompt, 12, eos_token_id=[])
    sd = speculative(SparseDrafter(drafter, 0, "full"), verifier, prompt, 12, 3, eos_token_id=[])
    assert sd.tokens == ar.tokens
    with pytest.raises(ValueError, match="0 only with policy full"):
        SparseDrafter(drafter, 0, "topk_chunks")
