"""export-model refuses a checkpoint it would otherwise export wrong, in one line naming the file (issue 54): a floating
weight stored as integers, a hub cache blob that is not the file the hub named (zeroed in place, cut short), a
download cut off mid-transfer (not "offline"), a damaged safetensors header, a tokenizer.json that is no tokenizer, a
config transformers refuses, and a subfolder that leaves the checkpoint (the flag and the config key). Tiny random
checkpoints (conftest) and a hub cache laid out as huggingface_hub lays it out, read offline."""

import hashlib
import json
import shutil
import struct

import huggingface_hub.constants
import pytest
import torch
from conftest import ROOT
from safetensors.torch import load_file, save_file
from test_export import refused

from budgetdraft.decoding.export import export

UP = "model.layers.0.mlp.up_proj.weight"


def export_refused(spec, out, *flags: str) -> str:
    line = refused(["export-model", "--spec", str(spec), "--out", str(out), *flags])
    assert not out.exists()
    return line


def edit_weights(directory, edit) -> None:
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})


# ---------------------------------------------------------------------------------------- floating weights (item 3)


@pytest.mark.parametrize("dtype, name", [(torch.int8, "I8"), (torch.bool, "BOOL"), (torch.int64, "I64")])
def test_a_floating_weight_stored_as_integers_is_refused_naming_the_file_and_the_tensor(
    checkpoint, tmp_path, dtype, name
):
    edit_weights(checkpoint, lambda t: t.update({UP: t[UP].to(dtype)}))
    line = export_refused(checkpoint, tmp_path / "out")
    assert line.endswith(
        f"{checkpoint}/model.safetensors: {UP} is stored as {name}; a floating weight must be F32, F16, BF16 or F64"
    ), line


def test_a_weight_stored_in_another_floating_dtype_still_exports(checkpoint, tmp_path):
    edit_weights(checkpoint, lambda t: t.update({UP: t[UP].to(torch.bfloat16)}))
    assert (export(str(checkpoint), tmp_path / "out") / "model.safetensors").is_file()


# ---------------------------------------------------------------------------------- the hub cache, offline (item 4)


def hub_cache(cache, checkpoint, repo="org/tiny"):
    """``checkpoint``'s files in a hub cache as huggingface_hub lays one out: ``blobs/<name>`` (an LFS file, the
    weights, named by its sha256; the others by a git blob id), a snapshot of links to them, ``refs/main``. Returns
    the weights' blob."""
    root = cache / f"models--{repo.replace('/', '--')}"
    commit = hashlib.sha1(repo.encode()).hexdigest()
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    for d in ("blobs", f"snapshots/{commit}"):
        (root / d).mkdir(parents=True)
    for path in checkpoint.iterdir():
        data = path.read_bytes()
        if path.suffix == ".safetensors":
            name = hashlib.sha256(data).hexdigest()
        else:
            name = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (root / "blobs" / name).write_bytes(data)
        (root / "snapshots" / commit / path.name).symlink_to(f"../../blobs/{name}")
    return (root / "snapshots" / commit / "model.safetensors").resolve()


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """An offline hub cache of its own under tmp_path (read when export runs, so patched where the client reads)."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.mark.parametrize(
    "damage",
    [lambda b: b.write_bytes(bytes(b.stat().st_size)), lambda b: b.write_bytes(b.read_bytes()[:-1000])],
    ids=["zeroed", "cut-short"],
)
def test_an_offline_hub_blob_that_is_not_its_named_content_is_refused(checkpoint, offline, tmp_path, damage):
    blob = hub_cache(offline, checkpoint)
    assert (export("org/tiny", tmp_path / "whole") / "model.safetensors").is_file()  # the layout is read as it is
    damage(blob)
    line = export_refused("org/tiny", tmp_path / "out")
    assert line.endswith(
        "/model.safetensors is not the file the hub sent: the sha256 of its blob "
        f"{blob} is not the one it is named by (cut short or damaged since the download); delete it (rm {blob}) "
        "and download it again"
    ), line


def test_a_download_cut_off_mid_transfer_is_called_that_not_offline(checkpoint, tmp_path, monkeypatch):
    """A local hub (tests/localhub.py, the real client) that sends half of the weights and closes the connection:
    httpx2's RemoteProtocolError ("peer closed connection ..."), which the word "connection" had made offline."""
    from localhub import HubHandler, LocalHub

    send = HubHandler.send

    def half(self, status, body=b"", headers=None):
        if self.command != "GET" or not self.path.endswith(".safetensors"):
            return send(self, status, body, headers)
        self.send_response(status)
        for key, value in {**(headers or {}), "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.close_connection = True

    monkeypatch.setattr(HubHandler, "send", half)
    with LocalHub(tmp_path / "repos") as hub:
        hub.add("org/tiny", {p.name: p for p in checkpoint.iterdir()})
        env = hub.env(tmp_path / "home")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        constants = huggingface_hub.constants
        monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}")  # fmt: skip
        monkeypatch.setattr(constants, "HF_HUB_CACHE", env["HF_HUB_CACHE"])
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        line = export_refused("org/tiny", tmp_path / "out")
    assert "cannot be reached offline" not in line, line
    assert line.startswith("budgetdraft export-model: error: the download of 'org/tiny' was cut off mid-transfer "
                           "(RemoteProtocolError: peer closed connection without sending complete message body"), line  # fmt: skip
    assert line.endswith("the network dropped it; run the command again to resume it"), line


def test_a_hub_that_refuses_the_connection_is_still_unreachable(tmp_path, monkeypatch):
    """The other side of the type check: nothing listens at the endpoint (httpx2's ConnectError). huggingface_hub
    retries a refused connection 5 times, 23 s of backoff it sleeps through ``time.sleep`` in its ``utils._http``
    (no setting shortens it): the test skips the sleeps, not the attempts, so the error is the one after the last."""
    from types import SimpleNamespace

    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http, "time", SimpleNamespace(sleep=lambda seconds: None))
    constants = huggingface_hub.constants
    monkeypatch.setenv("HF_HUB_OFFLINE", "")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    line = export_refused("org/tiny", tmp_path / "out")
    assert "model 'org/tiny' cannot be reached offline" in line, line


# ------------------------------------------------------------------------------ damaged files, one line (item 6)


def safetensors_file(path, header: str, data: bytes) -> None:
    text = header.encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize(
    "header, data, said",
    [
        ("TOO LARGE", b"", "not a whole safetensors file (header too large): it is damaged or cut short"),
        (
            '{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
            '"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}',
            bytes(16),
            "tensor x is named twice in its header: the file is damaged",
        ),
        (
            '{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
            '"y":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}',
            bytes(16),
            "not a whole safetensors file (invalid offset for tensor `",  # x or y: safetensors reads a hash map
        ),
    ],
    ids=["too-large", "named-twice", "same-bytes"],
)
def test_a_damaged_safetensors_header_is_one_line_naming_the_file(checkpoint, tmp_path, header, data, said):
    extra = checkpoint / "model-00002.safetensors"
    if header == "TOO LARGE":
        extra.write_bytes(struct.pack("<Q", 2**40) + b"{}")
    else:
        safetensors_file(extra, header, data)
    line = export_refused(checkpoint, tmp_path / "out")
    assert f"{extra}: {said}" in line, line


def test_a_weight_cut_short_is_one_line_naming_the_file(checkpoint, tmp_path):
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    line = export_refused(checkpoint, tmp_path / "out")
    assert line.endswith(f"{weights}: not a whole safetensors file (incomplete metadata, file not fully covered): it "
                         "is damaged or cut short; restore it or download it again"), line  # fmt: skip


def empty_vocabulary(path) -> None:
    tokenizer = json.loads(path.read_text())
    tokenizer["model"]["vocab"] = {}
    path.write_text(json.dumps(tokenizer))


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda p: p.write_text("not json {"), "not a tokenizer: it is not JSON (Expecting value: line 1 column 1"),
        (lambda p: p.write_text("[1, 2]"), "not a tokenizer: it holds no JSON object with a model in it"),
        (empty_vocabulary, "not a tokenizer: its vocabulary (model.vocab) is empty or not a map of tokens"),
    ],
    ids=["garbage", "list", "empty-vocabulary"],
)
@pytest.mark.parametrize("verifier", [False, True], ids=["alone", "with-verifier"])
def test_a_tokenizer_json_that_is_no_tokenizer_is_one_line_naming_it(checkpoint, tmp_path, damage, said, verifier):
    clean = shutil.copytree(checkpoint, tmp_path / "verifier")
    damage(checkpoint / "tokenizer.json")
    flags = ("--verifier", str(clean)) if verifier else ()
    line = export_refused(checkpoint, tmp_path / "out", *flags)
    assert f"{checkpoint}/tokenizer.json: {said}" in line, line


def test_a_config_whose_heads_do_not_divide_its_width_is_one_line_naming_config_json(checkpoint, tmp_path):
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "num_attention_heads": 3}))
    line = export_refused(checkpoint, tmp_path / "out")
    assert line.endswith(
        f"{checkpoint}/config.json: transformers cannot build a model from it: The hidden size (64) is not a "
        "multiple of the number of attention heads (3)."
    ), line


# ------------------------------------------------------------------------ a subfolder inside the checkpoint (item 7)


@pytest.mark.parametrize("subfolder", ["../outside", "final/../../outside", "/abs/outside"])
def test_a_subfolder_that_leaves_the_checkpoint_is_refused(checkpoint, tmp_path, subfolder):
    root = tmp_path / "ckpts"
    shutil.copytree(checkpoint, root / "final")
    shutil.copytree(checkpoint, tmp_path / "outside")  # a model is there: exported before
    if subfolder.startswith("/"):
        subfolder = str(tmp_path / "outside")
    line = export_refused(root, tmp_path / "out", "--subfolder", subfolder)
    assert line.endswith(f"{root}: subfolder {subfolder!r}: a subfolder is a relative path inside the checkpoint, "
                         + ("not an absolute one" if subfolder.startswith("/") else
                            "with no '..' segment that leaves it")), line  # fmt: skip


def test_the_config_check_refuses_a_variant_subfolder_that_leaves_its_checkpoint():
    import yaml

    from budgetdraft.pipeline.configcheck import check_config

    release = yaml.safe_load((ROOT / "config" / "paper_release.yaml").read_text())
    release["variants"]["lambda0.5"]["subfolder"] = "main/../../outside"
    with pytest.raises(ValueError) as err:
        check_config(release)
    assert str(err.value) == (
        "variants.lambda0.5.subfolder = 'main/../../outside': a subfolder is a relative path inside the checkpoint, "
        "with no '..' segment that leaves it"
    )
