"""Run-time failures that used to end in a traceback are one line naming the setting or the file and the fix:
a CUDA device on a torch without CUDA, a hub model offline, a model directory whose weights were deleted, a prompt
file that is not UTF-8, a full disk while a cell is written, decode's flags that cannot be meant."""

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from conftest import tiny_cell_args, tiny_cell_inputs, tiny_model_dir
from transformers import LlamaConfig

from budgetdraft.base.text import decode_text, read_text_file
from budgetdraft.decoding import loading as models
from budgetdraft.evaluation import cellfile
from budgetdraft.pipeline import cli, rendezvous, warm

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


def failing_write(error: OSError):
    """A parquet writer that leaves half a file where it writes, then fails with ``error`` (a disk filling up)."""

    def write(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half a cell")
        raise error

    return write


def test_a_full_disk_while_a_cell_is_written_is_one_line_naming_the_file(tmp_path, monkeypatch):
    tiny_cell_inputs(tmp_path, list(range(3, 20)))
    out = tmp_path / "results" / "cells" / "x" / "d" / "c" / "B16_g3.parquet"
    full = OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
    monkeypatch.setattr(pq, "write_table", failing_write(full))
    monkeypatch.delenv(warm.ENV, raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["eval-cell", *tiny_cell_args(tmp_path, out, new_tokens=4, extra=("--warmup", "0"))])
    said = f"budgetdraft eval-cell: error: no space left on device writing {out}: nothing was written"
    assert exit_.value.code == said  # one line, non-zero exit (SystemExit with a message)
    assert list(out.parent.iterdir()) == []  # no cell, no temporary beside it


@pytest.mark.parametrize(
    "error, said",
    [
        (PermissionError(errno.EACCES, "Permission denied"), "permission denied"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only file system"),
        (OSError("Error writing bytes to file"), "Error writing bytes to file"),  # no errno: pyarrow's first line
    ],
    ids=["permission", "read-only", "no-errno"],
)
def test_any_failed_write_of_a_cell_is_one_line_naming_the_file(tmp_path, monkeypatch, error, said):
    out = tmp_path / "cell.parquet"
    out.write_bytes(b"the cell measured before")
    monkeypatch.setattr(pq, "write_table", failing_write(error))
    frame = pd.DataFrame({"sample": [0], "new_tokens": [4], "drafted": [3], "accepted": [2]})
    with pytest.raises(ValueError) as err:
        cellfile.write_cell(frame, out)
    assert str(err.value) == f"{said} writing {out}: nothing was written"
    assert [p.name for p in tmp_path.iterdir()] == [out.name] and out.read_bytes() == b"the cell measured before"


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--threads", "-4"], "argument --threads: '-4' is not a positive number of threads"),
        (["--threads", "0"], "argument --threads: '0' is not a positive number of threads"),
        (["--prompt", ""], "argument --prompt: the prompt is empty: give the text to decode"),
        (["--prompt", " \n\t"], "argument --prompt: the prompt is empty: give the text to decode"),
    ],
    ids=["threads-negative", "threads-zero", "prompt-empty", "prompt-blank"],
)
def test_decode_refuses_a_flag_it_cannot_mean_in_one_line(argv, said, monkeypatch, capsys):
    monkeypatch.delenv(warm.ENV, raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["decode", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.splitlines()[-1] == f"budgetdraft decode: error: {said}", err
    assert "Traceback" not in err


COMMANDS_WITH_THREADS = {  # each command's other required flags (files need not exist: --threads is refused first)
    "decode": [],
    "eval-cell": "--label ar --decodes ar --verifier v --prompts p.parquet --dataset d --context c "
    "--max-new-tokens 1 --repeats 1 --out o.parquet".split(),
    "prefill": "--verifier v --prompts p.parquet --out o.safetensors".split(),
    "targets": "--verifier v --sequences s.parquet --prefix-len 4 --cont-len 2 --out o.safetensors".split(),
}


@pytest.mark.parametrize("threads", ["-4", "0", "two"])
@pytest.mark.parametrize("command", sorted(COMMANDS_WITH_THREADS))
def test_every_command_refuses_threads_it_cannot_run_in_one_line(command, threads, monkeypatch, capsys):
    """--threads is one flag (budgetdraft.pipeline.commands.flags): eval-cell, prefill and targets refuse a non-positive
    count as decode does, when parsed, instead of a traceback from torch.set_num_threads mid-run."""
    monkeypatch.delenv(warm.ENV, raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, *COMMANDS_WITH_THREADS[command], "--threads", threads])
    err = capsys.readouterr().err
    said = f"budgetdraft {command}: error: argument --threads: '{threads}' is not a positive number of threads"
    assert exit_.value.code == 2 and err.splitlines()[-1] == said, err
    assert "Traceback" not in err


def test_decode_refuses_an_empty_prompt_file_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "prompt.txt"
    path.write_text("\n  \n")
    monkeypatch.delenv(warm.ENV, raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["decode", "--prompt-file", str(path)])
    said = f"budgetdraft decode: error: --prompt-file {path}: the file holds no prompt (empty or blank)"
    assert exit_.value.code == said


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory) -> str:
    return str(tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model"))


def one_line(argv: list[str], monkeypatch) -> str:
    """What the command said as it stopped: its SystemExit's message (a traceback fails the test)."""
    monkeypatch.delenv(warm.ENV, raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert isinstance(exit_.value.code, str), exit_.value.code
    return exit_.value.code


def test_user_errors_that_were_tracebacks_are_one_line_naming_the_flag_or_the_path(tiny_spec, tmp_path, monkeypatch):
    """Issue 38: only ValueError and FileNotFoundError were turned into a line: a device string torch does not know
    (its RuntimeError), a --prompt-file that is a directory, any other OSError about a path the user gave (here an
    --out under a file), and files that are not safetensors (safetensors' own error names no file)."""
    decode = ["decode", "--verifier", tiny_spec, "--method", "ar", "--max-new-tokens", "2"]
    assert one_line([*decode, "--device", "garbage"], monkeypatch) == (
        "budgetdraft decode: error: device: 'garbage' is not a torch device: set device (training.device for "
        "training) to cpu, cuda, cuda:N or mps"
    )
    assert one_line([*decode, "--prompt-file", str(tmp_path)], monkeypatch) == (
        f"budgetdraft decode: error: --prompt-file {tmp_path} is a directory: name a UTF-8 text file that holds the "
        "prompt"
    )
    (tmp_path / "file").write_text("not a folder")
    said = one_line(["export-model", "--spec", tiny_spec, "--out", str(tmp_path / "file" / "model")], monkeypatch)
    assert said in {
        f"budgetdraft export-model: error: {tmp_path / 'file'}: {why}" for why in ("File exists", "Not a directory")
    }
    json_file = tmp_path / "s.json"
    json_file.write_text("{}")
    sd = [*decode, "--method", "sd", "--drafter", tiny_spec, "--budget", "8", "--gamma", "2"]
    assert one_line([*sd, "--draft-vocab", str(json_file)], monkeypatch) == (
        f"budgetdraft decode: error: --draft-vocab {json_file} is not a draft vocabulary file (Error while "
        "deserializing header: header too small): write one with `budgetdraft draft-vocab`"
    )
    said = one_line(
        ["train", "--init", tiny_spec, "--targets", str(json_file), "--out", str(tmp_path / "d")], monkeypatch
    )
    assert said == (
        f"budgetdraft train: error: targets file {json_file} cannot be read (Error while deserializing header: header "
        "too small): write it again with `budgetdraft targets`"
    )


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["--temperature", "inf"],
            "--temperature: sampling temperature must be at most 100, got inf: it would draw every token alike (random text)",
        ),
        (["--seed", str(10**30)], f"--seed: sampling seed must be in [0, 4294967295], got {10**30}"),
        (
            ["--budget", "12", "--chunk-size", "8"],
            "--budget = 12 is not a positive multiple of --chunk-size = 8: it would keep 8 prompt tokens, not 12; make "
            "the budget a multiple of --chunk-size, or --chunk-size a divisor of it",
        ),
    ],
    ids=["temperature-inf", "seed-1e30", "budget-not-whole-chunks"],
)
def test_decode_refuses_a_value_it_cannot_use_naming_the_flag_before_loading_a_model(argv, said, monkeypatch):
    """An infinite temperature sampled random text, a seed of 10^30 overflowed in torch's traceback, and a budget of
    12 with chunks of 8 decoded with 8 prompt tokens under the label 12."""
    monkeypatch.delenv(warm.ENV, raising=False)
    for loader in ("load_model", "load_tokenizer"):
        monkeypatch.setattr(models, loader, lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["decode", *argv])
    assert exit_.value.code == f"budgetdraft decode: error: {said}"


ROUND_FOUR = {  # an attempt of the hostile rounds (issue 46) -> the one line it now gets, naming the flag or key
    "decode-device-meta": (["decode", "--device", "meta"], "device: 'meta' is no device a model decodes on"),
    "decode-gamma-past-new-tokens": (
        ["decode", "--gamma", "50", "--max-new-tokens", "2"],
        "--gamma = 50 drafts more tokens a round than --max-new-tokens = 2 generates",
    ),
    "decode-temperature-1e308": (["decode", "--temperature", "1e308"], "temperature must be at most 100, got 1e+308"),
    "targets-save-every-0": (
        [
            "targets",
            "--verifier",
            "v",
            "--sequences",
            "s",
            "--prefix-len",
            "8",
            "--cont-len",
            "8",
            "--out",
            "o",
            "--save-every",
            "0",
        ],
        "argument --save-every: 0: must be >= 1",
    ),  # fmt: skip
    "prepare-sequences-negative": (
        [
            "prepare",
            "train",
            "--source",
            "embedded_rest",
            "--length",
            "64",
            "--sequences",
            "-2",
            "--tokenizer",
            "t",
            "--out",
            "o",
        ],
        "argument --sequences: -2: must be >= 1",
    ),  # fmt: skip
    "eval-cell-warmup-negative": (
        [
            "eval-cell",
            "--label",
            "ar",
            "--decodes",
            "ar",
            "--verifier",
            "v",
            "--prompts",
            "p",
            "--dataset",
            "d",
            "--context",
            "c",
            "--max-new-tokens",
            "4",
            "--repeats",
            "1",
            "--out",
            "o",
            "--warmup",
            "-5",
        ],
        "argument --warmup: -5: must be >= 0",
    ),  # fmt: skip
    "warm-idle-negative": (["warm", "--socket", "s", "--idle", "-1"], "argument --idle: '-1' is not a finite number"),
    "warm-owner-2**40": (["warm", "--socket", "s", "--owner", str(2**40)], f"argument --owner: {2**40}: must be <="),
    "profile-one-label-twice": (
        [
            "positions",
            "--targets",
            "t",
            "--prompts",
            "p",
            "--datasets",
            "d",
            "--drafter",
            "a=x",
            "--drafter",
            "a=y",
            "--out",
            "o",
        ],
        "--drafter 'a=y': label 'a' is given twice (x and y); one each",
    ),  # fmt: skip
    "spec-option-twice": (
        ["export-model", "--spec", "embedded:smollm2:layers=4:layers=2", "--out", "o"],
        "model spec 'embedded:smollm2:layers=4:layers=2': option 'layers' is given twice",
    ),
    "spec-option-not-ascii": (
        ["export-model", "--spec", "embedded:smollm2:layers=4:positions=١٢٨", "--out", "o"],
        "positions must be a whole number >= 1, got '١٢٨'",
    ),
}


@pytest.mark.parametrize("attempt", list(ROUND_FOUR))
def test_each_attempt_of_round_four_gets_one_line_before_any_work(attempt, tmp_path, monkeypatch, capsys):
    """Each command line the fourth hostile round tried ended in a traceback or was accepted silently; now it is
    refused in one line naming the flag, when parsed or before any model is loaded."""
    argv, said = ROUND_FOUR[attempt]
    monkeypatch.delenv(warm.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    for loader in ("load_model", "load_tokenizer"):
        monkeypatch.setattr(models, loader, lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    line = exit_.value.code if isinstance(exit_.value.code, str) else capsys.readouterr().err.strip().splitlines()[-1]
    assert said in line, line
    assert os.listdir(tmp_path) == []  # nothing written


def test_a_warm_autostart_that_names_no_process_runs_the_command_here(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(warm.ENV, str(tmp_path / "private" / rendezvous.SOCKET_NAME))
    monkeypatch.setenv(warm.AUTOSTART, "abc")
    assert warm.delegate(["eval-cell", "--help"]) is None
    assert (
        capsys.readouterr().err
        == "budgetdraft: BUDGETDRAFT_WARM_AUTOSTART='abc' is not a process id; running eval-cell here\n"
    )


def test_a_missing_prompts_file_is_named_with_what_it_lacks(tmp_path):
    """pyarrow raises FileNotFoundError with the path as its only text: the line still says what is wrong."""
    from budgetdraft.pipeline.cli import error_text, main

    assert error_text(FileNotFoundError("p")) == "p: No such file or directory"
    missing = tmp_path / "prompts.parquet"
    with pytest.raises(SystemExit) as stop:  # the command's main() here: any other exception fails the test
        main(["eval-cell", "--label", "ar", "--decodes", "ar", "--verifier", "x", "--prompts", str(missing),
              "--dataset", "d", "--context", "c", "--max-new-tokens", "2", "--repeats", "1",
              "--out", str(tmp_path / "c.parquet")])  # fmt: skip
    assert stop.value.code == f"budgetdraft eval-cell: error: {missing}: No such file or directory"


def test_a_checkpoint_folder_without_a_tokenizer_is_named(tmp_path):
    """Weights and config.json but no tokenizer file: one line naming the folder, not transformers' advice to install
    sentencepiece or tiktoken."""
    from transformers import LlamaForCausalLM

    from budgetdraft.decoding.export import export

    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(tmp_path / "ckpt" / "main")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'ckpt' / 'main'} holds no tokenizer (tokenizer.json")):
        export(str(tmp_path / "ckpt"), tmp_path / "out", subfolder="main")
    assert not (tmp_path / "out").exists()
