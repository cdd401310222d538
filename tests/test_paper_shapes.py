"""config/paper.yaml's code path on CPU, offline, with random-weight models of the paper's architectures.

The drafter is llama-68m as published (2,048 positions), the verifier Yarn-Llama-2-7b-128k's config.json scaled
down in width and depth only (tests/paper_models.py). The pipeline config is config/paper.yaml with only what a
CPU run of a few minutes must change overridden (``paper_cpu_config``): local model directories, embedded text
sources instead of the hub datasets, one context of 2,304 tokens (beyond the drafter's 2,048 positions), tiny
budgets, one prompt, few tokens and steps, CPU and one thread. Everything else — no base drafter (llama-68m is
used untouched), no shared verifier prefill, the fp16 verifier with ``lossless_check: near_tie``, the bf16 EAGLE-3
verifier, a training prefix beyond 2,048 prefilled in chunks of 2,048 — is the paper's.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import paper_models
import pytest
import torch
import yaml

from budgetdraft.report import paper

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = 2304  # prompt tokens: beyond llama-68m's max_position_embeddings (2,048)
PREFIX = 2176  # training prefix P, also beyond 2,048 (and prefilled in two chunks of 2,048 + 128)
TABLES = ["main", "comparison", "ablation_lc", "lambda", "single_budget", "vram_gamma", "vram"]


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


def paper_cpu_config(paper_cfg: dict, verifier: str, drafter: str) -> dict:
    """config/paper.yaml with only what a minutes-long offline CPU run must change."""
    cfg = json.loads(json.dumps(paper_cfg))  # a deep copy
    label = str(CONTEXT)
    budgets = [256, 1024]
    cfg.update(
        verifier=verifier,
        drafter=drafter,
        datasets={
            key: {**d, "source": source}
            for (key, d), source in zip(paper_cfg["datasets"].items(), ("shakespeare_plays", "sotu_summary", "kjv_lwm"))
        },
        samples=1,
        contexts={label: CONTEXT},
        budgets=budgets,
        gammas={label: [5]},
        max_new_tokens=8,
        repeats=1,
        warmup_tokens=2,
        warmup_prompt_tokens=32,
        device="cpu",
        threads=1,
        training_data={"source": "embedded_rest", "sequences": 2, "prefix_len": PREFIX, "cont_len": 16},
    )
    cfg["comparison"]["contexts"] = [label]
    cfg["single_budget"].update(context=label, gamma=5, trained_budget=budgets[-1])
    cfg["training"].update(
        steps=1, warmup_steps=1, checkpoint_every=1, budgets=budgets, budget_weights=[0.6, 0.4], device="cpu", threads=1
    )
    cfg["baselines"]["triforce"].update(retrieval_budget=1024)
    cfg["baselines"]["eagle3"]["training"].update(steps=1, warmup_steps=1, device="cpu", threads=1)
    return cfg


def test_paper_cpu_config_keeps_the_papers_settings():
    """The overrides are only the listed ones: every other key of config/paper.yaml is kept as it is."""
    paper_cfg = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    cfg = paper_cpu_config(paper_cfg, "V", "D")
    changed = {k for k in paper_cfg if cfg[k] != paper_cfg[k]}
    assert changed == {
        "verifier",
        "drafter",
        "datasets",
        "samples",
        "contexts",
        "budgets",
        "gammas",
        "max_new_tokens",
        "repeats",
        "device",
        "threads",
        "training_data",
        "comparison",
        "single_budget",
        "training",
        "baselines",
    }, changed
    assert set(cfg) - set(paper_cfg) == {"warmup_tokens", "warmup_prompt_tokens"}  # a short warm-up run
    for key in (
        "share_verifier_prefill",
        "verifier_dtype",
        "lossless_check",
        "drafter_dtype",
        "policy",
        "chunk_size",
        "score_window",
        "gamma_fixed",
        "verifier_max_positions",
        "warmup",
        "collapse",
    ):
        assert cfg[key] == paper_cfg[key], key
    assert "base_drafter" not in cfg  # llama-68m is used untouched
    assert [d["name"] for d in cfg["datasets"].values()] == [d["name"] for d in paper_cfg["datasets"].values()]
    assert {k: cfg["training"][k] for k in ("lr", "lambda_c", "grad_clip", "weight_decay", "dtype")} == {
        k: paper_cfg["training"][k] for k in ("lr", "lambda_c", "grad_clip", "weight_decay", "dtype")
    }
    assert cfg["baselines"]["eagle3"]["training"]["verifier_dtype"] == "bfloat16"
    assert CONTEXT > paper_models.LLAMA_68M["max_position_embeddings"] < PREFIX


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


@pytest.mark.pipeline
def test_paper_config_runs_offline_to_the_tables(paper_dirs, tmp_path, monkeypatch):
    """export -> prompts -> training data -> verifier targets -> 4 variants + EAGLE-3 trained at a 2,176-token
    prefix -> every grid cell at 2,304 tokens -> every table, figure and the claims report, with the hub off."""
    work = tmp_path
    for name in ("Snakefile", "workflow", "config", "profiles", "src", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    paper_cfg = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    cfg = paper_cpu_config(paper_cfg, str(paper_dirs["verifier"]), str(paper_dirs["drafter"]))
    # one variant given, not trained (issue 40): a local checkpoint, exported once and measured as one draw
    release = shutil.copytree(paper_dirs["drafter"], tmp_path / "release" / "tinydraft_1024only" / "final")
    cfg["variants"]["single_budget"] = {"checkpoint": str(release), "lambda_c": 0.5, "budgets": [1024]}
    (work / "config/paper_cpu.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "RAYON_NUM_THREADS": "1",
    }
    start = time.time()
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "all", "--configfile", "config/paper_cpu.yaml", "--cores", "2"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
    )
    print(f"paper-shaped pipeline: {time.time() - start:.0f} s")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    exported = json.loads((work / "results/models/verifier/config.json").read_text())
    assert (work / "results/models/verifier/tokenizer.json").is_file()  # converted once, at export
    assert exported["max_position_embeddings"] == 131072
    assert (exported.get("rope_parameters") or exported["rope_scaling"])["rope_type"] == "yarn"
    for name in TABLES:
        text = (work / "results/tables" / f"{name}.tex").read_text()
        assert "\\begin{tabular}" in text, name
        with monkeypatch.context() as m:
            m.chdir(work)  # provenance names cells relative to the workflow directory
            assert all(src for _, src in paper.trace_file(f"results/tables/{name}.tex")), name
    assert "TriForce" in (work / "results/tables/comparison.tex").read_text()

    import pyarrow.parquet as pq

    cells = sorted((work / "results/cells").rglob("*.parquet"))
    assert {c.relative_to(work / "results/cells").parts[0] for c in cells} == {
        "ar",
        "sd",
        "la_only",
        "lambda0.5",
        "lambda1.0",
        "single_budget",
        "triforce",
        "eagle3",
        "pi",  # llama-68m interpolated to 2,304 positions (factor 1.125), not trained
        "sd@full",  # SD with its whole prompt cache
    }
    given = [c for c in cells if c.relative_to(work / "results/cells").parts[0] == "single_budget"]
    assert given and all(c.parent.parent.parent.name == "single_budget" for c in given)  # shared: no rR
    assert (work / "results/drafters/given/single_budget/config.json").is_file()
    assert not (work / "results/drafters/r0/single_budget").exists()  # not trained
    assert "Given as checkpoints, not trained here" in (work / "results/tables/single_budget.tex").read_text()
    interpolated = json.loads((work / "results/drafters/pi/config.json").read_text())
    assert interpolated["rope_parameters"]["factor"] == pytest.approx(CONTEXT / 2048)
    assert (
        (work / "results/paper_diff.md")
        .read_text()
        .startswith("# The paper, number by number: **This run is not a rerun")
    )
    for path in cells:  # every cell decoded at positions 2,304 and beyond, with the paper's fp16 verifier
        for row in pq.read_table(path).to_pylist():
            assert row["prompt_tokens"] == CONTEXT and row["new_tokens"] >= 1, path
            assert json.loads(row["config"])["verifier_dtype"] == "float16", path
    train = pq.read_table(work / "results/data/train/budgetdraft.parquet").column("input_ids")
    assert {len(ids) for ids in train.to_pylist()} == {PREFIX + 16}
    for variant in ("la_only", "lambda0.5", "lambda1.0"):
        trained = work / "results/drafters/r0" / variant  # the paper trained once: replicates 1
        log = (trained / "loss_log.csv").read_text().splitlines()
        assert len(log) == 1 + cfg["training"]["steps"], variant
        assert json.loads((trained / "hparams.json").read_text())["prefill_chunk"] < PREFIX  # a chunked prefill
        assert json.loads((trained / "config.json").read_text())["max_position_embeddings"] == 2048
