"""The converted-model cache is trusted only as far as the record of its conversion (issue 38): each converted file's
sha256 is recorded when it is written and checked on use, so a file changed, swapped in or added afterwards (a
shared cache, a copied home) is refused in one line that says to delete the directory; an empty or relative
BUDGETDRAFT_CACHE (the working directory as the cache) is refused."""

import shutil

import pytest
from conftest import tiny_llama, tiny_tokenizer

from budgetdraft.decoding import loading as models
from budgetdraft.pipeline import cli, warm


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache whose 'conversion' saves a tiny random model the way a GGUF's is saved, counting them."""
    conversions = []

    def convert(name, out):
        conversions.append(name)
        return models._save_dir_atomically(tiny_llama(seed=0, layers=2), tiny_tokenizer(), out)

    monkeypatch.setenv("BUDGETDRAFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_convert_gguf", convert)
    return tmp_path / "cache" / "models", conversions


@pytest.mark.parametrize("setting", ["", "cache"])
def test_an_empty_or_relative_cache_setting_is_refused_in_one_line(tmp_path, monkeypatch, setting):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BUDGETDRAFT_CACHE", setting)
    monkeypatch.setattr(models, "_convert_gguf", lambda *a: pytest.fail("converted into the working directory"))
    monkeypatch.delenv(warm.ENV, raising=False)
    with pytest.raises(SystemExit) as stop:
        cli.main(["decode", "--prompt", "hello"])
    said = (
        "BUDGETDRAFT_CACHE is set but empty, which would make the working directory the cache"
        if not setting
        else "BUDGETDRAFT_CACHE=cache is a relative path (the cache would move with the working directory)"
    )
    assert stop.value.code == (
        f"budgetdraft decode: error: {said}: unset it (the cache is then ~/.cache/budgetdraft) or set it to an "
        "absolute path"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_converted_file_changed_afterwards_is_refused_naming_it_and_the_fix(cache):
    root, conversions = cache
    full = models.resolve("embedded:smollm2")
    assert models.resolve("embedded:smollm2") == full and conversions == ["smollm2"]  # converted once, then checked
    tiny_llama(seed=7, layers=2).save_pretrained(full)  # same names and shapes, other weights
    with pytest.raises(ValueError) as err:
        models.resolve("embedded:smollm2")
    assert str(err.value) == (
        f"cached model file {root / 'smollm2' / 'model.safetensors'} changed since it was converted: delete the "
        f"directory (rm -r {root / 'smollm2'}): it is converted again from the packaged GGUF on next use"
    )
    shutil.rmtree(full)  # the fix the line gives
    assert models.resolve("embedded:smollm2") == full and conversions == ["smollm2", "smollm2"]


def test_a_layer_cut_and_a_file_added_to_it_are_checked_too(cache):
    root, _ = cache
    cut = models.resolve("embedded:smollm2:layers=1")
    assert (
        cut == str(root / "smollm2-layers1")
        and models.load_model("embedded:smollm2:layers=1").config.num_hidden_layers == 1
    )
    (root / "smollm2-layers1" / "adapter_config.json").write_text("{}")  # transformers would load an adapter
    with pytest.raises(ValueError, match=r"adapter_config.json is not one of the files converted: delete the direct"):
        models.load_model("embedded:smollm2:layers=1")


def test_a_cache_directory_without_the_record_of_its_conversion_is_refused(cache):
    root, conversions = cache
    tiny_llama(seed=7, layers=2).save_pretrained(root / "smollm2")  # put there by someone else, or by an old version
    tiny_tokenizer().save_pretrained(root / "smollm2")
    with pytest.raises(ValueError) as err:
        models.load_model("embedded:smollm2")
    assert str(err.value).startswith(
        f"cached model {root / 'smollm2'} has no readable record of its conversion (budgetdraft-cache.json): delete "
        "the directory"
    )
    assert conversions == []
