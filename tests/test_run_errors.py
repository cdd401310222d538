"""Run-time failures that used to end in a traceback are one line naming the setting or the file and the fix:
a CUDA device on a torch without CUDA, a hub model offline, a model directory whose weights were deleted, a prompt
file that is not UTF-8."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from budgetdraft import models
from budgetdraft.data import decode_text, read_text_file

SRC = Path(__file__).resolve().parents[1] / "src"


def test_cuda_on_a_torch_without_cuda_names_the_setting_and_the_fix(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    with pytest.raises(ValueError) as err:
        models.load_model("embedded:smollm2", "cuda", "float32")
    assert str(err.value).startswith(f"device: cuda, but this torch ({torch.__version__}) has no CUDA: ")
    assert "install the CUDA wheel (README, On a GPU) or set device" in str(err.value)


def test_cuda_without_a_visible_gpu_names_the_setting(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device: cuda:0, but no CUDA GPU is visible to this job .* set device"):
        models.load_model("embedded:smollm2", "cuda:0", "float32")
    models.check_device("cpu")  # nothing to say


def tiny_config_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2)\
        .to_json_file(path / "config.json")  # fmt: skip
    return path


def test_a_deleted_safetensors_names_the_file_and_the_target_that_recreates_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny_config_dir(tmp_path / "results" / "models" / "verifier")
    with pytest.raises(ValueError) as err:
        models.load_model("results/models/verifier")
    assert str(err.value) == (
        "cannot load model 'results/models/verifier': results/models/verifier/model.safetensors is missing: "
        "recreate it with `rm -r results/models/verifier && snakemake results/models/verifier` "
        "(with the run's --configfile)"
    )
    elsewhere = tiny_config_dir(tmp_path / "mine")
    with pytest.raises(ValueError, match=f"{elsewhere}/model.safetensors is missing: restore it, or export it again"):
        models.load_model(str(elsewhere))


def test_a_hub_model_offline_is_one_line_naming_it(tmp_path):
    """The export job's log: one line naming the model id and that it cannot be reached offline, no traceback."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "budgetdraft",
            "export-model",
            "--spec",
            "someone/tiny-model",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "budgetdraft export-model: error: model 'someone/tiny-model' cannot be reached offline" in proc.stderr
    assert "HF_HUB_OFFLINE=1" in proc.stderr.splitlines()[-1]


def test_a_prompt_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_bytes("café".encode("latin-1"))
    with pytest.raises(ValueError) as err:
        read_text_file(path)
    assert str(err.value).startswith(f"prompt file {path} is not UTF-8 text (byte 0xe9 at offset 3): save it as UTF-8")
    path.write_text("café", encoding="utf-8")
    assert read_text_file(path) == "café"
    with pytest.raises(ValueError, match="dataset file data.zip:qmsum.jsonl is not UTF-8"):
        decode_text(b"\xff", "data.zip:qmsum.jsonl", "dataset file")
