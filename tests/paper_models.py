"""Random-weight local models with the paper's architectures (config/paper.yaml), for CPU runs without the hub.

- ``LLAMA_68M``: the ``config.json`` of JackFram/llama-68m, the paper's drafter, as published (2 layers, hidden
  768, 2,048 positions, vocabulary 32,000).
- ``yarn_llama_2_7b_128k(...)``: the ``config.json`` of NousResearch/Yarn-Llama-2-7b-128k, the paper's verifier,
  as published (llama, ``rope_scaling`` yarn x32 over 4,096 original positions, 131,072 positions, its
  ``auto_map`` to remote code that ``trust_remote_code=False`` ignores) with only its width and depth scaled down.
  The head dimension stays 128, so its rotary embedding (YaRN's frequencies and attention scaling) is the 7B's.
- ``llama2_like_tokenizer(...)``: no Llama-2 tokenizer ships offline in an installed package, so one with the
  same layout is trained here: vocabulary 32,000 = ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, the 256 byte-fallback
  tokens ``<0x00>``..``<0xFF>`` (3..258), then BPE pieces learned on the embedded State-of-the-Union texts;
  Metaspace ``▁`` word boundaries; BOS added to every encoding. Its ids are not Llama 2's. Both models ship it as
  those repositories do, a SentencePiece ``tokenizer.model`` without ``tokenizer.json``
  (``write_sentencepiece_tokenizer``), which transformers converts when it loads it (that needs protobuf).

``write_model`` saves random weights (seeded, safetensors) next to the given ``config.json`` exactly as written,
with that tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

VOCAB = 32000

LLAMA_68M = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 0,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 12,
    "num_hidden_layers": 2,
    "pad_token_id": 1,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "transformers_version": "4.30.0.dev0",
    "use_cache": True,
    "vocab_size": VOCAB,
}

YARN_LLAMA_2_7B_128K = {
    "architectures": ["LlamaForCausalLM"],
    "auto_map": {
        "AutoConfig": "configuration_llama.LlamaConfig",
        "AutoModelForCausalLM": "modeling_llama_together_yarn.LlamaForCausalLM",
    },
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "pad_token_id": 0,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "original_max_position_embeddings": 4096, "type": "yarn", "finetuned": True},
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.32.0.dev0",
    "use_cache": True,
    "use_flash_attention_2": False,
    "vocab_size": VOCAB,
}


def yarn_llama_2_7b_128k(heads: int = 2, layers: int = 2) -> dict:
    """The verifier's config.json with `heads` heads of the 7B's dimension 128 (hidden 128 * heads) and `layers`
    layers; the MLP keeps the 7B's 11008/4096 ratio. Everything else (rope, positions, vocabulary) is the 7B's."""
    big = YARN_LLAMA_2_7B_128K
    head_dim = big["hidden_size"] // big["num_attention_heads"]
    hidden = head_dim * heads
    return {
        **big,
        "hidden_size": hidden,
        "intermediate_size": big["intermediate_size"] * hidden // big["hidden_size"],
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "num_hidden_layers": layers,
    }


def llama2_like_tokenizer():
    """A LlamaTokenizer (tokenizers backend) with Llama 2's vocabulary layout and size, trained on embedded text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizer

    from budgetdraft.training.data import sotu_texts

    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials, limit_alphabet=200, show_progress=False)
    bpe.train_from_iterator(sotu_texts().values(), trainer=trainer)  # enough words for 32,000 pieces, in ~3 s
    learned = json.loads(bpe.to_str())["model"]
    if len(learned["vocab"]) != VOCAB:
        raise RuntimeError(f"the SOTU texts gave a vocabulary of {len(learned['vocab'])}, not {VOCAB}")
    return LlamaTokenizer(
        vocab=learned["vocab"], merges=[tuple(m) for m in learned["merges"]], add_bos_token=True, add_eos_token=False
    )


def sentencepiece_model(tokenizer) -> bytes:
    """`tokenizer` (``llama2_like_tokenizer``) as a SentencePiece BPE ``tokenizer.model``, the form the Llama-2-era
    hub repositories ship: ``<unk>``/``<s>``/``</s>`` then byte pieces, then every other piece scored by its rank
    (SentencePiece merges the best-scored pair first; tokenizers numbers pieces in merge order). Needs protobuf."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError as err:
        raise RuntimeError(f"a tokenizer.model needs protobuf (pinned in envs/requirements.txt): {err}") from None

    model = pb.ModelProto()
    spec = model.trainer_spec
    spec.model_type, spec.vocab_size, spec.byte_fallback = pb.TrainerSpec.BPE, VOCAB, True
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = 0, 1, 2, -1
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = True
    model.normalizer_spec.remove_extra_whitespaces = False
    model.normalizer_spec.escape_whitespaces = True
    kinds = {
        "<unk>": pb.ModelProto.SentencePiece.UNKNOWN,
        "<s>": pb.ModelProto.SentencePiece.CONTROL,
        "</s>": pb.ModelProto.SentencePiece.CONTROL,
    }
    for piece, index in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        byte = len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")
        kind = kinds.get(piece, pb.ModelProto.SentencePiece.BYTE if byte else pb.ModelProto.SentencePiece.NORMAL)
        normal = kind == pb.ModelProto.SentencePiece.NORMAL
        model.pieces.add(piece=piece, score=-float(index) if normal else 0.0, type=kind)
    if len(model.pieces) != VOCAB:
        raise RuntimeError(f"{len(model.pieces)} pieces, not {VOCAB}")
    return model.SerializeToString()


def write_sentencepiece_tokenizer(tokenizer, out: Path) -> None:
    """What a Llama-2-era hub repository ships: tokenizer.model, tokenizer_config.json, special_tokens_map.json
    (no tokenizer.json: transformers converts the SentencePiece model when it loads it)."""
    out = Path(out)
    (out / "tokenizer.model").write_bytes(sentencepiece_model(tokenizer))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "add_bos_token": True,
                "add_eos_token": False,
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "clean_up_tokenization_spaces": False,
                "legacy": False,
                "model_max_length": 1000000000000000019884624838656,
                "pad_token": None,
                "sp_model_kwargs": {},
                "tokenizer_class": "LlamaTokenizer",
            },
            indent=2,
        )
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, indent=2)
    )


def write_model(config_json: dict, out: Path, tokenizer, seed: int = 0) -> Path:
    """A model directory: random weights (seed) as model.safetensors, `config_json` verbatim and `tokenizer` as
    ``write_sentencepiece_tokenizer`` writes it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(out)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config_json, indent=2))
    config = AutoConfig.from_pretrained(out, trust_remote_code=False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    (out / "config.json").write_text(json.dumps(config_json, indent=2))  # the published file, not the re-save
    write_sentencepiece_tokenizer(tokenizer, out)
    return out
