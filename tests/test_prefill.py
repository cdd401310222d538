"""A shared verifier prefill (`budgetdraft prefill`) changes what is computed, never what is decoded: the same
tokens as a run that prefills itself, and the recorded prefill seconds charged in place of the copy's."""

from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import tiny_llama

from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.decoding.verifier import prompt_key
from budgetdraft.evaluation.measure import (  # a shared prefill's seconds are charged there
    timed_autoregressive,
    timed_speculative,
)
from budgetdraft.evaluation.prefill import check_covers, load_prefills, record_prefills, save_prefills


@pytest.fixture(scope="module")
def prompts():
    torch.manual_seed(3)
    # 48 and 64 fill the 16-slot rounding of the verifier's cache exactly
    return [torch.randint(0, 96, (n,)).tolist() for n in (48, 64, 57)]


@pytest.fixture(scope="module")
def shared(tmp_path_factory, prompts):
    verifier = tiny_llama(seed=0, layers=3)
    with torch.no_grad():
        tensors, meta = record_prefills(verifier, prompts, repeats=2, warmup_tokens=8)
    path = tmp_path_factory.mktemp("prefill") / "p.safetensors"
    save_prefills(tensors, meta, path)
    return verifier, path, meta


def test_the_file_holds_each_prompt_with_its_median_time(shared, prompts):
    _, path, meta = shared
    prefilled = load_prefills(path)
    assert set(prefilled) == {prompt_key(p) for p in prompts}
    for p in prompts:
        m = meta[prompt_key(p)]
        assert m["prompt_tokens"] == len(p) and len(m["runs_s"]) == 2
        assert prefilled[prompt_key(p)].seconds == pytest.approx(sum(m["runs_s"]) / 2)  # the median of 2
        assert prefilled[prompt_key(p)].kv[0][0].shape[-2] == len(p)


@pytest.mark.parametrize("gamma", [1, 4])
def test_decoding_from_a_shared_prefill_gives_the_same_tokens_and_charges_its_time(shared, prompts, gamma):
    verifier, path, _ = shared
    prefilled = load_prefills(path)
    drafter = tiny_llama(seed=1, layers=1)
    for p in prompts:
        ar = timed_autoregressive(verifier, p, 20, eos_token_id=[])
        for run in (
            timed_autoregressive(verifier, p, 20, eos_token_id=[], prefilled=prefilled),
            timed_speculative(SparseDrafter(drafter, 16), verifier, p, 20, gamma, eos_token_id=[], prefilled=prefilled),
        ):
            assert run.tokens == ar.tokens
            assert run.stats.verifier_prefill_s == prefilled[prompt_key(p)].seconds
            assert run.stats.total_s == pytest.approx(
                run.stats.verifier_prefill_s + run.stats.drafter_prefill_s + run.stats.decode_s
            )


def test_a_prompt_missing_from_the_file_is_an_error_that_names_it(shared, prompts):
    _, path, _ = shared
    with pytest.raises(ValueError, match=r"p\.safetensors: 1 of 2 prompts are not in it"):
        check_covers(load_prefills(path), [prompts[0], prompts[1][:-1]], path)


def test_a_file_that_is_not_a_sealed_prefill_file_is_refused(shared, tmp_path):
    """Another safetensors file (no seal), a prefill file cut short, and one with a flipped bit are refused, each
    naming the file and what is wrong with it, by the reader and by the workflow's check alike (`check_tensors`)."""
    from safetensors.torch import save_file

    from budgetdraft.evaluation.sealed import check_tensors

    save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    _, path, _ = shared
    whole = Path(path).read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(whole[: len(whole) // 2])
    flipped = bytearray(whole)
    flipped[-100] ^= 0x10
    (tmp_path / "flipped.safetensors").write_bytes(bytes(flipped))
    for name, said in [
        ("other", "no integrity digest"),
        ("cut", "not a whole safetensors file"),
        ("flipped", "its tensors do not match the digest written with them"),
    ]:
        with pytest.raises(ValueError, match=f"{name}.safetensors: {said}"):
            load_prefills(tmp_path / f"{name}.safetensors")
        with pytest.raises(ValueError, match=said):
            check_tensors(tmp_path / f"{name}.safetensors")
    assert check_tensors(path)  # the file prefill wrote holds its seal


@pytest.mark.real
def test_a_cell_with_a_shared_prefill_decodes_what_the_real_verifier_decodes(real_pair, tmp_path):
    """The command line end to end on the real model: `prefill`, then `eval-cell --verifier-prefill`."""
    from conftest import shakespeare_text

    from budgetdraft.pipeline.cli import main

    verifier, _, tokenizer = real_pair
    ids = tokenizer(shakespeare_text()[50000:60000])["input_ids"][:160]
    prompts = tmp_path / "prompts.parquet"
    pd.DataFrame({"sample": [0], "doc_id": ["hamlet"], "input_ids": [ids]}).to_parquet(prompts)
    main(
        [
            "prefill",
            "--verifier",
            "embedded:smollm2",
            "--prompts",
            str(prompts),
            "--repeats",
            "1",
            "--out",
            str(tmp_path / "p.safetensors"),
        ]
    )
    args = [
        "eval-cell",
        "--label",
        "sd",
        "--decodes",
        "sd",
        "--verifier",
        "embedded:smollm2",
        "--drafter",
        "embedded:smollm2:layers=4",
        "--prompts",
        str(prompts),
        "--dataset",
        "gs",
        "--context",
        "160",
        "--budget",
        "32",
        "--gamma",
        "3",
        "--max-new-tokens",
        "12",
        "--repeats",
        "1",
        "--warmup-tokens",
        "2",
        "--warmup-prompt-tokens",
        "16",
    ]
    main(args + ["--verifier-prefill", str(tmp_path / "p.safetensors"), "--out", str(tmp_path / "shared.parquet")])
    main(args + ["--out", str(tmp_path / "own.parquet")])
    shared, own = pd.read_parquet(tmp_path / "shared.parquet"), pd.read_parquet(tmp_path / "own.parquet")
    assert list(shared.columns) == list(own.columns)
    assert (
        list(shared.output_ids[0])
        == list(own.output_ids[0])
        == timed_autoregressive(verifier, ids, 12, eos_token_id=[]).tokens
    )
    recorded = next(iter(load_prefills(tmp_path / "p.safetensors").values())).seconds
    assert shared.verifier_prefill_s[0] == recorded
