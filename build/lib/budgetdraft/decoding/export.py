"""`export-model`: a model spec materialised as a self-contained Hugging Face directory (config + safetensors +
tokenizer), after its checkpoint has been checked: the pipeline exports the verifier, the untrained drafter, PI's
interpolated drafter and every drafter given as a checkpoint (the authors' release) this way, and every later job
loads those directories.

A checkpoint is refused, naming it and the tensor, before anything is written:

- when its ``subfolder`` leaves it (``..``, an absolute path: `subfolder_problem`);
- when a hub file in the local cache is not the file the hub named (its blob's sha256 is not its name: damaged or
  cut short since the download, `check_hub_blobs`);
- when a safetensors file is damaged (a header too large or cut short, a tensor named twice, two tensors on the same
  bytes: `stored_tensors`), or its config is one transformers refuses (``hidden_size`` not a multiple of
  ``num_attention_heads``);
- when its config's sizes disagree with its weights (`check_headers`: read from the safetensors headers, before the
  model is built, so that ``num_hidden_layers: 100000`` is a line, not a model growing without bound, and a wrong
  width is a line, not transformers' traceback), or a floating weight is stored in an integer dtype (it would be
  cast, rc 0, to a weight of whole numbers);
- when a weight the model needs is not in it, or it holds one the model has no place for (`check_loaded`:
  transformers would otherwise initialise the missing one at random: a partial download becomes a partly random
  drafter);
- when a tensor is not finite (NaN or ±inf);
- when its tokenizer.json is not a tokenizer (not JSON, not an object, an empty vocabulary: `tokenizer_json`);
- when it does not share the verifier's vocabulary (a drafter given as a checkpoint: `vocabulary_problem`).

A hub repository is read through the hub's own client (``huggingface_hub.snapshot_download``, only the model's
folder and one weight format), so its files are checked like a local directory's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from budgetdraft.base.atomic import atomic_path, check_out, file_sha256
from budgetdraft.base.defaults import DTYPE
from budgetdraft.base.revisions import hub_model
from budgetdraft.decoding import positions
from budgetdraft.decoding.loaderrors import dropped_text, hub_failure, load_error, offline_text, unreachable
from budgetdraft.decoding.loading import load_tokenizer, max_positions, resolve, torch_dtype

# what a model's folder in a hub repository holds besides its weights: config, generation config, tokenizer files
MODEL_FILES = ("*.json", "*.model", "*.txt", "*.tiktoken")
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# safetensors' names of the floating dtypes a floating weight may be stored in (an integer one would be cast)
FLOATING = ("F32", "F16", "BF16", "F64")
# the name of a blob in the hub cache that the hub named by its content: the sha256 of an LFS file
CONTENT_NAME = re.compile(r"[0-9a-f]{64}")


def subfolder_problem(subfolder: str) -> str | None:
    """Why ``subfolder`` cannot name a model's folder inside a checkpoint (an absolute path, or a ``..`` segment that
    leaves it: the model exported would be whatever is there); None where it is a relative path inside it."""
    if not subfolder:
        return None
    if PurePosixPath(subfolder).is_absolute():
        return "a subfolder is a relative path inside the checkpoint, not an absolute one"
    if ".." in PurePosixPath(subfolder).parts:
        return "a subfolder is a relative path inside the checkpoint, with no '..' segment that leaves it"
    return None


def checkpoint_dir(model_spec: str, revision: str = "", subfolder: str = "") -> Path:
    """The local directory holding the model ``model_spec`` names, inside ``subfolder``: an embedded model's converted
    cache, a local directory, or a hub repository's snapshot at ``revision`` (downloaded through the hub's client,
    only ``subfolder`` and one weight format: safetensors where the repository has them). Refused naming the path
    when it holds no config.json; ``revision`` is refused for anything but a hub repository."""
    if why := subfolder_problem(subfolder):
        raise ValueError(f"{model_spec}: subfolder {subfolder!r}: {why}")
    repo = hub_model(model_spec)
    if revision and repo is None:
        raise ValueError(
            f"--revision {revision}: {model_spec!r} is not a hub repository (a revision pins a hub commit)"
        )
    if repo is None:
        root = Path(resolve(model_spec, subfolder))
    else:
        root = hub_snapshot(repo, revision, subfolder)
    where = root / subfolder
    if not (where / "config.json").is_file():
        raise ValueError(f"{model_spec}{'/' + subfolder if subfolder else ''}: no config.json in {where}")
    if repo is not None:
        check_hub_blobs(where)
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


def check_hub_blobs(where: Path) -> None:
    """Refuse a file of a hub snapshot's folder ``where`` whose blob is not the file the hub named: the hub cache
    keeps an LFS file (weights, most often) as ``blobs/<its sha256>`` and the snapshot links to it, and nothing
    compares them again after the download (offline, or online once cached), so a blob zeroed in place or cut short
    would load. One line names the file and says to delete the blob and download it again. Blobs named otherwise
    (a git file's sha1) and copies that are not links are left to the checks after."""
    for path in sorted(where.iterdir()):
        if not path.is_symlink():
            continue
        blob = path.resolve()
        if not (CONTENT_NAME.fullmatch(blob.name) and blob.parent.name == "blobs" and blob.is_file()):
            continue
        if file_sha256(blob) != blob.name:
            raise ValueError(
                f"hub cache file {path} is not the file the hub sent: the sha256 of its blob {blob} is not the one "
                f"it is named by (cut short or damaged since the download); delete it (rm {shlex.quote(str(blob))}) "
                "and download it again"
            )


def hub_error(repo: str, revision: str, err: Exception) -> str:
    if unreachable(err):
        return offline_text(repo)
    if hub_failure(err) == "dropped":
        return dropped_text(repo, err)
    at = f" at revision {revision}" if revision else ""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"cannot read the hub repository {repo}{at}: {first}"


@dataclass(frozen=True)
class Stored:
    """A tensor as a safetensors header declares it: the file holding it, its shape and its dtype (``F32``, ``I8``)."""

    path: Path
    shape: tuple[int, ...]
    dtype: str


def stored_tensors(directory: Path) -> dict[str, Stored]:
    """{tensor name: Stored} of the safetensors files in ``directory``, read from their headers (no weight read);
    empty when it has none (PyTorch weights: checked once loaded). A file safetensors cannot open (a header too
    large, cut short, two tensors on the same bytes), a tensor named twice in one header (safetensors keeps the
    last) or in two files is a ValueError naming the file and the tensor."""
    from safetensors import SafetensorError, safe_open

    stored: dict[str, Stored] = {}
    for path in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt") as f:
                here = {key: Stored(path, tuple(f.get_slice(key).get_shape()), f.get_slice(key).get_dtype())
                        for key in f.keys()}  # fmt: skip
        except SafetensorError as err:
            why = str(err).removeprefix("Error while deserializing header: ")
            raise ValueError(
                f"{path}: not a whole safetensors file ({why}): it is damaged or cut short; restore it or download "
                "it again"
            ) from None
        if twice := named_twice(path):
            raise ValueError(f"{path}: tensor {twice} is named twice in its header: the file is damaged")
        if elsewhere := next((key for key in here if key in stored), None):
            raise ValueError(f"{path}: tensor {elsewhere} is also in {stored[elsewhere].path}: one of them is stray")
        stored.update(here)
    return stored


def named_twice(path: Path) -> str | None:
    """The first tensor name a safetensors header (read whole by safetensors already) gives twice, or None."""
    with open(path, "rb") as f:
        header = f.read(int.from_bytes(f.read(8), "little"))
    objects: list[list[str]] = []  # the names of each JSON object, inner ones first: the header's is the last
    json.loads(header, object_pairs_hook=lambda pairs: objects.append([k for k, _ in pairs]) or dict(pairs))
    seen: set[str] = set()
    return next((name for name in objects[-1] if name in seen or seen.add(name)), None)


def check_headers(directory: Path, name: str) -> None:
    """Refuse, before the model is built, a config whose sizes disagree with the weights' headers: its layer count
    first (the model would be built with that many layers), then every tensor's shape against the one the config
    gives it and its dtype against the model's (the model built on the meta device: no memory): a floating weight
    stored as integers (I8, BOOL, I64) would be cast to a weight of whole numbers and exported."""
    import torch
    from transformers import AutoModelForCausalLM

    stored = stored_tensors(directory)
    config = model_config(directory)
    if not stored:
        return
    text = config.get_text_config()
    shapes = {key: entry.shape for key, entry in stored.items()}
    layers = {int(m.group(1)) for key in shapes if (m := LAYER.search(key))}
    held = max(layers) + 1 if layers else 0
    declared = getattr(text, "num_hidden_layers", None)
    if declared is not None and declared != held:
        raise ValueError(
            f"checkpoint {name}: config.json says num_hidden_layers = {declared}, its weights hold {held} layers"
        )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    for key, tensor in model.state_dict().items():
        if key in shapes and tuple(tensor.shape) != shapes[key]:
            raise ValueError(
                f"checkpoint {name}: tensor {key} has shape {list(shapes[key])} in the weights, the config gives it "
                f"{list(tensor.shape)}: config.json does not describe these weights"
            )
        if key in stored and tensor.is_floating_point() and stored[key].dtype not in FLOATING:
            raise ValueError(
                f"{stored[key].path}: {key} is stored as {stored[key].dtype}; a floating weight must be "
                f"{', '.join(FLOATING[:-1])} or {FLOATING[-1]}"
            )


def model_config(directory: Path):
    """transformers' config of a model directory; one it refuses (``hidden_size`` not a multiple of
    ``num_attention_heads``, a file that is not JSON) is a ValueError naming config.json and the last line of
    transformers' reason (its validators' errors come as several lines, the validator's name first)."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(directory, trust_remote_code=False)
    except (ValueError, OSError, StrictDataclassError) as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
        why = lines[-1].removeprefix("ValueError: ")
        raise ValueError(f"{directory / 'config.json'}: transformers cannot build a model from it: {why}") from None


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
    model_spec: str,
    out: str | Path,
    dtype: str = DTYPE,
    revision: str = "",
    cover: int | None = None,
    subfolder: str = "",
    verifier: str | Path | None = None,
) -> Path:
    """Materialise ``model_spec`` as a self-contained Hugging Face directory ``out`` (config + safetensors + tokenizer), its
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
    source = checkpoint_dir(model_spec, revision, subfolder)
    name = f"{model_spec}{'/' + subfolder if subfolder else ''}"
    if cover is not None:
        limit = max_positions(str(verifier)) if verifier is not None else None
        positions.check_cover(cover, max_positions(str(source)) or 1, limit)
    check_headers(source, name)
    tokenizer_json(source)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch_dtype(dtype), trust_remote_code=False, output_loading_info=True
        )
    except OSError as err:
        raise ValueError(load_error(model_spec, str(source), err)) from None
    check_loaded(model, info, name)
    if cover is not None:
        positions.cover(model.config, cover)
    tokenizer = load_tokenizer(str(source))
    with atomic_path(out, command="export-model") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if verifier is not None and (why := vocabulary_problem(tmp, verifier, model_spec, str(verifier))):
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
    if (tokenizer := tokenizer_json(directory)) is not None:
        vocab = tokenizer["model"].get("vocab")
        if vocab is not None:
            digest = hashlib.sha256(json.dumps(vocab, sort_keys=True).encode()).hexdigest()
    return size, digest


def tokenizer_json(directory: str | Path) -> dict | None:
    """The tokenizer.json of a model directory, read as JSON (None where there is none); one that is not a
    tokenizer (not JSON, not an object, a ``model`` that is no object, an empty vocabulary) is a ValueError naming
    the file: the tokenizers library says only "expected value at line 1" or exports a model that knows no token."""
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        tokenizer = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a tokenizer: it is not JSON ({err})") from None
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("model"), dict):
        raise ValueError(f"{path}: not a tokenizer: it holds no JSON object with a model in it")
    vocab = tokenizer["model"].get("vocab")
    if vocab is not None and (not isinstance(vocab, dict | list) or not vocab):
        raise ValueError(f"{path}: not a tokenizer: its vocabulary (model.vocab) is empty or not a map of tokens")
    return tokenizer


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
