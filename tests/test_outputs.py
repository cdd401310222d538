"""`--out` of export-model, train and train-eagle3 never removes what the command did not write (issue 38): the
working directory, a folder above it, $HOME and a folder of the user's are refused in one line that says how to
replace them; an earlier output of the same command is replaced by a rename, once the new one is whole."""

import json
import os

import pytest
from conftest import tiny_model_dir
from transformers import PreTrainedTokenizerFast

from budgetdraft import models
from budgetdraft.pipeline import cli, warm

OUTPUT_MARKER = ".budgetdraft-output.json"  # what a command writes into its output: {"command": NAME}


@pytest.fixture(autouse=True)
def cold(monkeypatch):
    monkeypatch.delenv(warm.ENV, raising=False)  # every command here runs in this process


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny local model directory with a tokenizer: a spec export-model can copy."""
    return tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")


def refusal(argv: list[str]) -> str:
    """The one line a command refused with (its SystemExit)."""
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert isinstance(stop.value.code, str), stop.value.code
    return stop.value.code


def user_folder(path):
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("mine")
    return path


@pytest.mark.parametrize("where", [".", "..", "home"])
def test_export_never_touches_the_working_directory_a_folder_above_it_or_home(tiny, tmp_path, monkeypatch, where):
    cwd, home = user_folder(tmp_path / "top" / "work"), user_folder(tmp_path / "home")
    (tmp_path / "top" / "keep.txt").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    out = str(home) if where == "home" else where
    said = refusal(["export-model", "--spec", str(tiny), "--out", out])
    what = {".": "the working directory", "..": f"a folder above the working directory ({cwd})"}
    what = what.get(where, "your home directory")
    assert said.startswith(f"budgetdraft export-model: error: --out {out} is {what}, which budgetdraft never replaces")
    assert os.listdir(cwd) == os.listdir(home) == ["notes.txt"]
    assert sorted(os.listdir(tmp_path / "top")) == ["keep.txt", "work"]


def test_export_refuses_a_users_folder_and_says_how_to_replace_it(tiny, tmp_path):
    mine = user_folder(tmp_path / "my models")
    said = refusal(["export-model", "--spec", str(tiny), "--out", str(mine)])
    assert said == (
        f"budgetdraft export-model: error: --out {mine} exists and is not an earlier output of budgetdraft "
        f"export-model (no {OUTPUT_MARKER}: not a folder budgetdraft wrote): it is never replaced; choose another path"
    )
    assert os.listdir(mine) == ["notes.txt"]
    # a mistyped path to a file of the user's: no advice to delete it (it was `rm -r /etc/hostname`)
    note = tmp_path / "hostname"
    note.write_text("mine")
    said = refusal(["export-model", "--spec", str(tiny), "--out", str(note)])
    assert said.endswith(f"--out {note} is a file, not a folder budgetdraft export-model wrote: it is never replaced; "
                         "choose another path") and "rm" not in said  # fmt: skip
    assert note.read_text() == "mine"


def test_export_replaces_its_own_output_by_a_rename_and_a_failed_export_keeps_it(tiny, tmp_path, monkeypatch):
    out = tmp_path / "verifier"
    cli.main(["export-model", "--spec", str(tiny), "--out", str(out)])
    assert json.loads((out / OUTPUT_MARKER).read_text()) == {"command": "export-model"}
    (out / "stale.txt").write_text("from an earlier export")
    cli.main(["export-model", "--spec", str(tiny), "--out", str(out)])  # a re-run replaces its own output, whole
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").is_file()
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        models.export(str(tiny), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the earlier export, as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verifier"]  # no temporary left
    said = refusal(["train", "--init", str(tiny), "--targets", "none", "--out", str(out)])
    assert "exists and is not an earlier output of budgetdraft train (the output of budgetdraft export-model)" in said


def test_train_refuses_a_users_out_and_a_users_work_folder_before_any_work(tmp_path):
    args = ["train", "--init", "nowhere/model", "--targets", str(tmp_path / "none.safetensors")]
    mine = user_folder(tmp_path / "drafter")
    said = refusal([*args, "--out", str(mine)])
    assert said.startswith(f"budgetdraft train: error: --out {mine} exists and is not an earlier output of budgetdraft")
    out = tmp_path / "fresh"
    work = user_folder(tmp_path / "fresh.tmp")
    said = refusal([*args, "--out", str(out)])
    assert said.startswith(
        f"budgetdraft train: error: --out {out}: its work folder {work} exists and is not an earlier output of "
        "budgetdraft train"
    )
    assert os.listdir(mine) == ["notes.txt"] and os.listdir(work) == ["notes.txt"]


def test_train_eagle3_refuses_a_users_out_before_any_work(tmp_path):
    mine = user_folder(tmp_path / "head")
    said = refusal(["train-eagle3", "--verifier", "nowhere/v", "--targets", "none", "--out", str(mine)])
    assert said.startswith(f"budgetdraft train-eagle3: error: --out {mine} exists and is not an earlier output of")
    assert os.listdir(mine) == ["notes.txt"]
