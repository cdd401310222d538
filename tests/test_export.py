"""export-model checks a checkpoint before it writes anything (`budgetdraft.decoding.export`): a tensor missing or
unexpected, a tensor that is not finite, a config whose sizes disagree with the weights' headers (before the model
is built), --cover out of bounds, a revision on a local path; a local checkpoint with a subfolder exports; a model
from `load_model` (column-major weights on the CPU) saves with save_pretrained. Tiny random models (conftest)."""

import json
import shutil

import pytest
import torch
from conftest import tiny_llama
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from budgetdraft.decoding.export import export
from budgetdraft.decoding.loading import load_model
from budgetdraft.pipeline import cli


def refused(argv) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert isinstance(stop.value.code, str), stop.value.code
    assert "\n" not in stop.value.code, stop.value.code  # one line
    return stop.value.code


def edit_weights(directory, edit) -> None:
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})


def edit_config(directory, **fields) -> None:
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **fields}))


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), "tensor model.layers.1.mlp.up_proj.weight is missing"),
        (lambda t: t.update(extra=torch.zeros(3)), "tensor extra is in the weights but not in the model"),
        (
            lambda t: t["model.layers.0.self_attn.q_proj.weight"].view(-1)[7].fill_(float("nan")),
            "tensor model.layers.0.self_attn.q_proj.weight holds 1 values that are not finite",
        ),
    ],
    ids=["missing", "unexpected", "nan"],
)
def test_a_damaged_checkpoint_is_refused_naming_the_tensor_and_nothing_is_written(checkpoint, tmp_path, damage, said):
    edit_weights(checkpoint, damage)
    out = tmp_path / "out"
    line = refused(["export-model", "--spec", str(checkpoint), "--out", str(out)])
    assert f"checkpoint {checkpoint}: {said}" in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    "fields, said",
    [
        ({"num_hidden_layers": 100000}, "config.json says num_hidden_layers = 100000, its weights hold 2 layers"),
        ({"intermediate_size": 96}, "has shape [128, 64] in the weights, the config gives it [96, 64]"),
    ],
    ids=["layers", "width"],
)
def test_a_config_that_does_not_describe_its_weights_is_refused_before_the_model_is_built(
    checkpoint, tmp_path, monkeypatch, fields, said
):
    edit_config(checkpoint, **fields)

    def never(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", never)
    line = refused(["export-model", "--spec", str(checkpoint), "--out", str(tmp_path / "out")])
    assert said in line, line


def test_a_local_checkpoint_in_a_subfolder_exports_and_a_revision_on_it_is_refused(checkpoint, tmp_path):
    """The layout `hf download REPO --local-dir ./ckpts` gives: ckpts/main/config.json."""
    root = tmp_path / "ckpts"
    shutil.copytree(checkpoint, root / "main")
    out = export(str(root), tmp_path / "out", subfolder="main")
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    line = refused(["export-model", "--spec", str(root), "--subfolder", "main", "--revision", "a" * 40, "--out",
                    str(tmp_path / "again")])  # fmt: skip
    assert "is not a hub repository (a revision pins a hub commit)" in line


def test_cover_is_bounded_by_the_native_range_and_the_verifiers_positions(checkpoint, tmp_path):
    """tiny_llama's native range is 512: --cover 256 would contract it; a verifier of 512 positions bounds it."""
    assert "must be at least the model's native range (512" in refused(
        ["export-model", "--spec", str(checkpoint), "--cover", "256", "--out", str(tmp_path / "a")]
    )
    assert "at most 1,048,576" in refused(
        ["export-model", "--spec", str(checkpoint), "--cover", str(10**20), "--out", str(tmp_path / "b")]
    )
    line = refused(["export-model", "--spec", str(checkpoint), "--cover", "1024", "--verifier", str(checkpoint),
                    "--out", str(tmp_path / "c")])  # fmt: skip
    assert "at most the verifier's 512 positions" in line
    assert (
        json.loads((export(str(checkpoint), tmp_path / "d", cover=512) / "config.json").read_text())[
            "max_position_embeddings"
        ]
        == 512
    )


@pytest.mark.parametrize("layout", ["column", "packed"])
def test_a_loaded_model_saves_as_transformers_own(tmp_path, layout):
    """A model in the column or the packed layout (what load_model gives on a CPU that decodes fastest so);
    save_pretrained works, the tied embedding saved once, no packed copy saved, and the saved model computes what
    the loaded one does."""
    from budgetdraft.decoding.layout import decode_layout

    source = tmp_path / "tied"
    tiny_llama(layers=1, tie_word_embeddings=True).save_pretrained(source)
    model = decode_layout(load_model(str(source), trainable=True), "cpu", "float32", layout)
    assert not model.lm_head.weight.is_contiguous()
    model.save_pretrained(tmp_path / "saved")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, model(ids).logits)
    saved = load_file(tmp_path / "saved" / "model.safetensors")
    assert "lm_head.weight" not in saved
    assert set(saved) == set(AutoModelForCausalLM.from_pretrained(source).state_dict()) - {"lm_head.weight"}
