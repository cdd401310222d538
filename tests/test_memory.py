"""Per-run memory counted from the tensors (weights + KV caches) and the drafter/verifier step timings, as a cell
measures them (``budgetdraft.evaluation.measure``)."""

import pytest
import torch
from conftest import tiny_cell_args, tiny_cell_inputs, tiny_llama

from budgetdraft.decoding.baselines.eagle3 import Eagle3Drafter, Eagle3Head, head_config
from budgetdraft.decoding.baselines.triforce import TriForceDrafter
from budgetdraft.decoding.engine import rounded_capacity
from budgetdraft.decoding.metrics import module_tensors, storage_bytes
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.decoding.verifier import weight_bytes
from budgetdraft.evaluation.measure import timed_autoregressive as autoregressive
from budgetdraft.evaluation.measure import timed_speculative as speculative

NEW, GAMMA = 8, 3
KV_TOKEN_BYTES = 2 * 2 * 16 * 4  # keys + values, 2 KV heads of dim 16, float32: per token and layer
MB = 2**20


@pytest.fixture(scope="module")
def pair():
    return tiny_llama(seed=0, layers=3), tiny_llama(seed=1, layers=2)  # verifier, drafter


def prompt(length: int) -> list[int]:
    return torch.randint(0, 96, (length,), generator=torch.Generator().manual_seed(length)).tolist()


def sd(pair, length: int, budget: int):
    verifier, drafter = pair
    return speculative(
        SparseDrafter(drafter, budget, "topk_chunks", 8, 8), verifier, prompt(length), NEW, GAMMA, eos_token_id=[]
    ).stats


def test_storage_bytes_counts_each_storage_once():
    w = torch.zeros(4, 8)
    assert storage_bytes([w, w.view(-1), w[:2], None]) == w.nbytes  # views: the whole storage, once
    tied = tiny_llama(seed=0, layers=1, tie_word_embeddings=True)
    weights = tied.state_dict()  # lists the tied LM head and the embedding, one storage
    assert weights["lm_head.weight"].data_ptr() == weights["model.embed_tokens.weight"].data_ptr()
    assert storage_bytes(weights.values()) == sum(t.nbytes for t in weights.values()) - weights["lm_head.weight"].nbytes


def test_self_drafting_adds_no_weights(pair):
    verifier, _ = pair
    assert weight_bytes(verifier, SparseDrafter(verifier, 16)) == weight_bytes(verifier)


@pytest.mark.parametrize("budget", [8, 16, 32])
def test_drafter_kv_grows_with_budget_not_with_prompt(pair, budget):
    """P a multiple of the chunk size, so TopKChunks keeps exactly B prompt tokens; the cache then has room for
    the new tokens and one draft round (rounded up, as every fixed-shape cache is: ``engine.rounded_capacity``)."""
    expected = 2 * rounded_capacity(budget + NEW + GAMMA + 1) * KV_TOKEN_BYTES / MB  # 2 drafter layers
    assert sd(pair, 64, budget).drafter_kv_mb == expected
    assert sd(pair, 128, budget).drafter_kv_mb == expected


def test_peak_counts_weights_and_grows_with_the_prompt(pair):
    verifier, drafter = pair
    weights = weight_bytes(verifier, SparseDrafter(drafter, 16)) / MB
    short, long = sd(pair, 64, 16), sd(pair, 128, 16)
    for stats, length in ((short, 64), (long, 128)):
        assert stats.verifier_kv_mb == 3 * rounded_capacity(length + NEW + GAMMA + 1) * KV_TOKEN_BYTES / MB
        assert stats.peak_tensor_mb == pytest.approx(weights + stats.verifier_kv_mb + stats.drafter_kv_mb)
        assert stats.peak_mem_mb == stats.peak_tensor_mb and stats.mem_kind == "cpu_tensor_bytes"
    assert long.peak_tensor_mb > short.peak_tensor_mb > weights


def test_ar_has_no_drafter_memory_or_draft_time(pair):
    verifier, _ = pair
    stats = autoregressive(verifier, prompt(64), NEW, eos_token_id=[]).stats
    assert stats.drafter_kv_mb == 0 and stats.draft_s == 0 and stats.draft_steps == 0
    assert stats.verifier_kv_mb == 3 * rounded_capacity(64 + NEW) * KV_TOKEN_BYTES / MB
    assert stats.peak_tensor_mb == pytest.approx(weight_bytes(verifier) / MB + stats.verifier_kv_mb)
    assert stats.verify_s > 0 and stats.verify_s <= stats.decode_s


def test_draft_steps_and_times(pair):
    stats = sd(pair, 64, 16)
    assert stats.draft_steps == stats.drafted > 0
    assert stats.draft_s > 0 and stats.verify_s > 0
    assert stats.draft_s + stats.verify_s <= stats.decode_s


def test_triforce_counts_its_own_caches_not_the_verifiers(pair):
    verifier, small = pair
    drafter = TriForceDrafter(verifier, small, retrieval_budget=16, streaming_budget=8, sinks=2, chunk_size=8)
    stats = speculative(drafter, verifier, prompt(64), NEW, GAMMA, eos_token_id=[]).stats
    retrieval = 3 * (16 + NEW + GAMMA + 1 + 1 + 1) * KV_TOKEN_BYTES  # prefix + capacity + gamma_inner + 1
    streaming = 2 * (8 + NEW + GAMMA + 1 + 1 + 1) * KV_TOKEN_BYTES
    assert not drafter.owns_full and stats.drafter_kv_mb == (retrieval + streaming) / MB
    assert stats.draft_steps == stats.drafted


def test_eagle3_counts_its_head(pair):
    verifier, _ = pair
    torch.manual_seed(0)
    head = Eagle3Head(head_config(verifier)).eval()
    stats = speculative(Eagle3Drafter(verifier, head), verifier, prompt(64), NEW, GAMMA, eos_token_id=[]).stats
    assert stats.drafter_kv_mb == (64 + NEW + GAMMA + 1 + 1) * KV_TOKEN_BYTES / MB  # one layer
    head_bytes = storage_bytes(module_tensors(head))
    assert stats.peak_tensor_mb == pytest.approx(
        (weight_bytes(verifier) + head_bytes) / MB + stats.verifier_kv_mb + stats.drafter_kv_mb
    )


def test_cell_rows_carry_the_new_columns(tmp_path):
    import argparse

    import pandas as pd

    from budgetdraft.evaluation import cellfile, cells, grid
    from budgetdraft.pipeline.commands import cmd_eval_cell

    tiny_cell_inputs(tmp_path, prompt(40))
    parser = argparse.ArgumentParser()
    cmd_eval_cell.configure_parser(parser)
    args = parser.parse_args(tiny_cell_args(tmp_path, tmp_path / "cell.parquet", label="sd", extra=("--warmup", "0")))
    cellfile.write_cell(cells.run_cell(cmd_eval_cell.cell_spec(args)), args.out)
    row = pd.read_parquet(args.out).iloc[0]
    assert row.mem_kind == "cpu_tensor_bytes" and row.peak_mem_mb == row.peak_tensor_mb
    assert row.drafter_kv_mb > 0 and row.verifier_kv_mb > 0 and row.draft_steps == row.drafted
    assert row.draft_s > 0 and row.verify_s > 0
    assert len(grid.load_cells([args.out])) == 1  # aggregation reads the wider cell files as before
