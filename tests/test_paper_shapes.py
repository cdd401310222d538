"""The paper's architectures on CPU with random weights (tests/paper_models.py): the verifier's YaRN rope loaded
natively, llama-68m at real positions beyond its 2,048, weights placed on their device as they load, and the
SentencePiece-only tokenizer. The whole pipeline on them, through the hub's own clients against a local hub, is
tests/test_paper_hub.py.
"""

import json
import sys
from pathlib import Path

import paper_models
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def paper_dirs(tmp_path_factory):
    """{"verifier": dir, "drafter": dir}: the paper's two architectures with random weights and one tokenizer."""
    root = tmp_path_factory.mktemp("paper_models")
    tokenizer = paper_models.llama2_like_tokenizer()
    return {
        "verifier": paper_models.write_model(
            paper_models.yarn_llama_2_7b_128k(), root / "yarn-llama-2-7b-128k", tokenizer, seed=1
        ),
        "drafter": paper_models.write_model(paper_models.LLAMA_68M, root / "llama-68m", tokenizer, seed=2),
    }


def test_paper_models_load_natively(paper_dirs):
    """transformers loads the verifier's yarn rope_scaling itself (no remote code, auto_map ignored), and the
    drafter with 2,048 positions computes at explicit real positions beyond them."""
    from budgetdraft.decoding.kvcache import PreallocatedCache, prefill
    from budgetdraft.decoding.loading import load_model, load_tokenizer

    published = json.loads((paper_dirs["verifier"] / "config.json").read_text())
    assert published["auto_map"] and published["rope_scaling"]["type"] == "yarn"
    verifier = load_model(str(paper_dirs["verifier"]))
    assert type(verifier).__module__ == "transformers.models.llama.modeling_llama"
    assert verifier.model.rotary_emb.rope_type == "yarn"
    assert verifier.model.rotary_emb.attention_scaling == pytest.approx(0.1 * torch.log(torch.tensor(32.0)).item() + 1)
    assert verifier.config.max_position_embeddings == 131072 and verifier.config.head_dim == 128

    drafter = load_model(str(paper_dirs["drafter"]))
    assert drafter.config.max_position_embeddings == 2048 and drafter.num_parameters() > 60e6
    assert not (paper_dirs["drafter"] / "tokenizer.json").exists()  # SentencePiece only, converted on load
    tokenizer = load_tokenizer(str(paper_dirs["drafter"]))
    assert len(tokenizer) == 32000 and tokenizer("x")["input_ids"][0] == tokenizer.bos_token_id == 1
    text = "Mr. Speaker, the state of the Union is strong: 1,234 Zürich"
    import sentencepiece

    spm = sentencepiece.SentencePieceProcessor(model_file=str(paper_dirs["drafter"] / "tokenizer.model"))
    assert tokenizer(text)["input_ids"] == [1] + spm.encode(text)

    ids = torch.randint(3, 32000, (1, 2200), generator=torch.Generator().manual_seed(0))
    cache = PreallocatedCache(2, 2200)
    prefill(drafter, ids[:, :2100], cache, chunk_len=2048)  # positions 0..2099, in two chunks
    with torch.no_grad():
        at_real = drafter(
            input_ids=ids[:, 2100:2101], past_key_values=cache, position_ids=torch.tensor([[2100]])
        ).logits
        cache.truncate(2100)
        at_cap = drafter(input_ids=ids[:, 2100:2101], past_key_values=cache, position_ids=torch.tensor([[2047]])).logits
    assert torch.isfinite(at_real).all() and not torch.allclose(at_real, at_cap)  # position 2100 is not clamped


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
def test_weights_are_placed_on_their_device_as_they_load(paper_dirs, device, monkeypatch):
    """The verifier's load names its device to from_pretrained (device_map): on a GPU no CPU copy of the whole
    model is made first, and on the CPU the same call runs (a real load below; the GPU calls are recorded)."""
    from transformers import AutoModelForCausalLM

    from budgetdraft.decoding import loading as models

    seen = {}
    real = AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, path, **kwargs):
        seen.update(kwargs)
        return real(cls, path, **{**kwargs, "device_map": "cpu"})  # no GPU here: the same load, on the CPU

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    model = models._load(str(paper_dirs["verifier"]), device, "float16")
    assert seen["device_map"] == device and seen["dtype"] == torch.float16 and seen["trust_remote_code"] is False
    assert {p.dtype for p in model.parameters()} == {torch.float16} and not model.training


def test_sentencepiece_only_tokenizer_without_protobuf_is_a_clear_error(tmp_path, monkeypatch):
    """The paper's hub drafter ships its tokenizer as a SentencePiece tokenizer.model: without protobuf,
    transformers 5 falls back to tiktoken and fails about tiktoken; load_tokenizer names what is missing."""
    from budgetdraft.decoding.loading import load_tokenizer

    (tmp_path / "config.json").write_text(json.dumps(paper_models.LLAMA_68M))
    (tmp_path / "tokenizer.model").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "google.protobuf", None)  # import google.protobuf -> ImportError
    with pytest.raises(ValueError, match="SentencePiece tokenizer.model.*needs protobuf"):
        load_tokenizer(str(tmp_path))
