"""`export-model`: a model spec materialised as a self-contained Hugging Face directory (config + safetensors +
tokenizer), after its checkpoint has been checked: the pipeline exports the verifier, the untrained drafter, PI's
interpolated drafter and every drafter given as a checkpoint (the authors' release) this way, and every later job
loads those directories.

A checkpoint is refused, naming it and the tensor, before anything is written:

- when its config's sizes disagree with its weights (`check_headers`: read from the safetensors headers, before the
  model is built, so that ``num_hidden_layers: 100000`` is a line, not a model growing without bound, and a wrong
  width is a line, not transformers' traceback);
- when a weight the model needs is not in it, or it holds one the model has no place for (`check_loaded`:
  transformers would otherwise initialise the missing one at random: a partial download becomes a partly random
  drafter);
- when a tensor is not finite (NaN or ±inf);
- when it does not share the verifier's vocabulary (a drafter given as a checkpoint: `vocabulary_problem`).

A hub repository is read through the hub's own client (``huggingface_hub.snapshot_download``, only the model's
folder and one weight format), so its files are checked like a local directory's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from budgetdraft.base.atomic import atomic_path, check_out
from budgetdraft.base.defaults import DTYPE
from budgetdraft.base.revisions import hub_model
from budgetdraft.decoding import positions
from budgetdraft.decoding.loading import (
    load_error,
    load_tokenizer,
    max_positions,
    offline_text,
    resolve,
    torch_dtype,
    unreachable,
)

# what a model's folder in a hub repository holds besides its weights: config, generation config, tokenizer files
MODEL_FILES = ("*.json", "*.model", "*.txt", "*.tiktoken")
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def checkpoint_dir(spec: str, revision: str = "", subfolder: str = "") -> Path:
    """The local directory holding the model ``spec`` names, inside ``subfolder``: an embedded model's converted
    cache, a local directory, or a hub repository's snapshot at ``revision`` (downloaded through the hub's client,
    only ``subfolder`` and one weight format: safetensors where the repository has them). Refused naming the path
    when it holds no config.json; ``revision`` is refused for anything but a hub repository."""
    repo = hub_model(spec)
    if revision and repo is None:
        raise ValueError(f"--revision {revision}: {spec!r} is not a hub repository (a revision pins a hub commit)")
    if repo is None:
        root = Path(resolve(spec, subfolder))
    else:
        root = hub_snapshot(repo, revision, subfolder)
    where = root / subfolder
    if not (where / "config.json").is_file():
        raise ValueError(f"{spec}{'/' + subfolder if subfolder else ''}: no config.json in {where}")
    return where


def hub_snapshot(repo: str, revision: str, subfolder: str) -> Path:
    """A snapshot of hub repository ``repo`` (its ``subfolder`` only), with safetensors weights where it has them,
    else its PyTorch ones (read with ``weights_only``); a ValueError says which repository and revision failed."""
    from huggingface_hub import HfApi, snapshot_download

    prefix = f"{subfolder.strip('/')}/" if subfolder else ""
    try:
        files = HfApi().list_repo_files(repo, revision=revision or None)
    except Exception as err:  # offline (then the cache is used as it is), no such repository or revision
        if not os.environ.get("HF_HUB_OFFLINE"):
            raise ValueError(hub_error(repo, revision, err)) from None
        files = []
    weights = ["*.safetensors", "*.safetensors.index.json"]
    if files and not any(f.startswith(prefix) and f.endswith(".safetensors") for f in files):
        weights = ["*.bin", "*.bin.index.json"]
    patterns = [prefix + p for p in (*MODEL_FILES, *weights)]
    try:
        return Path(snapshot_download(repo, revision=revision or None, allow_patterns=patterns))
    except Exception as err:
        raise ValueError(hub_error(repo, revision, err)) from None


def hub_error(repo: str, revision: str, err: Exception) -> str:
    if unreachable(err):
        return offline_text(repo)
    at = f" at revision {revision}" if revision else ""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"cannot read the hub repository {repo}{at}: {first}"


def weight_shapes(directory: Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of the safetensors files in ``directory``, read from their headers (no weight read);
    empty when it has none (PyTorch weights: checked once loaded)."""
    from safetensors import safe_open

    shapes = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            shapes.update({key: tuple(f.get_slice(key).get_shape()) for key in f.keys()})
    return shapes


def check_headers(directory: Path, name: str) -> None:
    """Refuse, before the model is built, a config whose sizes disagree with the weights' headers: its layer count
    first (the model would be built with that many layers), then every tensor's shape against the one the config
    gives it (the model built on the meta device: no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shapes = weight_shapes(directory)
    if not shapes:
        return
    config = AutoConfig.from_pretrained(directory, trust_remote_code=False)
    text = config.get_text_config()
    layers = {int(m.group(1)) for key in shapes if (m := LAYER.search(key))}
    stored = max(layers) + 1 if layers else 0
    declared = getattr(text, "num_hidden_layers", None)
    if declared is not None and declared != stored:
        raise ValueError(
            f"checkpoint {name}: config.json says num_hidden_layers = {declared}, its weights hold {stored} layers"
        )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    for key, tensor in model.state_dict().items():
        if key in shapes and tuple(tensor.shape) != shapes[key]:
            raise ValueError(
                f"checkpoint {name}: tensor {key} has shape {list(shapes[key])} in the weights, the config gives it "
                f"{list(tensor.shape)}: config.json does not describe these weights"
            )


def check_loaded(model, info: dict, name: str) -> None:
    """Refuse a loaded checkpoint that left a weight to random initialisation (missing), held one the model has no
    place for (unexpected), or holds a tensor that is not finite, naming the checkpoint and the tensor."""
    import torch

    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = sorted(str(k if isinstance(k, str) else k[0]) for k in info.get(kind) or ())
        if keys:
            more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
            what = {
                "missing_keys": "is missing from the weights (it would be initialised at random)",
                "unexpected_keys": "is in the weights but not in the model its config describes",
                "mismatched_keys": "has another shape in the weights than the config gives it",
            }[kind]
            raise ValueError(f"checkpoint {name}: tensor {keys[0]}{more} {what}")
    for key, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise ValueError(f"checkpoint {name}: tensor {key} holds {bad:,} values that are not finite (NaN or inf)")


def export(
    spec: str,
    out: str | Path,
    dtype: str = DTYPE,
    revision: str = "",
    cover: int | None = None,
    subfolder: str = "",
    verifier: str | Path | None = None,
) -> Path:
    """Materialise ``spec`` as a self-contained Hugging Face directory ``out`` (config + safetensors + tokenizer), its
    weights stored in ``dtype``: the dtype the run uses, so that a 7B fp16 verifier is written (and read by every
    job) as 13.5 GB, not as a 27 GB float32 copy. ``revision``: the hub commit of a hub id (budgetdraft.base.revisions).
    ``cover``: rescale its rotary positions so that this many positions span its native range (position
    interpolation, ``budgetdraft.decoding.positions.cover``); the weights are unchanged. ``subfolder``: the model's
    folder inside a hub repository or a directory. ``verifier``: a verifier directory whose vocabulary the model
    must share (a drafter given as a checkpoint), refused naming both when it does not. The checkpoint is checked
    first (the module's doc); nothing is written for one that is refused.
    An existing ``out`` is replaced only when it is an earlier export (``base.atomic.check_out``): a folder of the
    user's, the working directory or $HOME is refused, never emptied."""
    from transformers import AutoModelForCausalLM

    check_out(out, "export-model")  # before any work; an earlier export there is replaced only once this one is whole
    source = checkpoint_dir(spec, revision, subfolder)
    name = f"{spec}{'/' + subfolder if subfolder else ''}"
    if cover is not None:
        limit = max_positions(str(verifier)) if verifier is not None else None
        positions.check_cover(cover, max_positions(str(source)) or 1, limit)
    check_headers(source, name)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch_dtype(dtype), trust_remote_code=False, output_loading_info=True
        )
    except OSError as err:
        raise ValueError(load_error(spec, str(source), err)) from None
    check_loaded(model, info, name)
    if cover is not None:
        positions.cover(model.config, cover)
    tokenizer = load_tokenizer(str(source))
    with atomic_path(out, command="export-model") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if verifier is not None and (why := vocabulary_problem(tmp, verifier, spec, str(verifier))):
            raise ValueError(why)  # before the export is published: nothing is written
    return Path(out)


def vocabulary(directory: str | Path) -> tuple[int | None, str | None]:
    """(vocab_size of its config.json, sha256 of its tokenizer.json's token -> id map) of a model directory, read
    without loading it; None where a file is absent (a SentencePiece tokenizer.model has no map to compare here)."""
    directory = Path(directory)
    size = None
    if (directory / "config.json").is_file():
        size = json.loads((directory / "config.json").read_text()).get("vocab_size")
    digest = None
    if (directory / "tokenizer.json").is_file():
        model = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8")).get("model") or {}
        vocab = model.get("vocab")
        if vocab is not None:
            digest = hashlib.sha256(json.dumps(vocab, sort_keys=True).encode()).hexdigest()
    return size, digest


def vocabulary_problem(drafter: str | Path, verifier: str | Path, drafter_name: str, verifier_name: str) -> str | None:
    """Why a drafter directory cannot draft for a verifier directory (another vocabulary size, or another tokenizer
    map), naming both; None where they agree or a file to compare is absent."""
    (ds, dt), (vs, vt) = vocabulary(drafter), vocabulary(verifier)
    if ds is not None and vs is not None and ds != vs:
        return (
            f"{drafter_name} has a vocabulary of {ds:,} tokens and the verifier {verifier_name} of {vs:,}: speculative "
            "decoding compares token ids, so the drafter must share the verifier's tokenizer"
        )
    if dt is not None and vt is not None and dt != vt:
        return (
            f"{drafter_name}'s tokenizer (token map sha256 {dt[:12]}) is not the verifier {verifier_name}'s "
            f"({vt[:12]}): the same ids would be other tokens; use a drafter trained with the verifier's tokenizer"
        )
    return None
