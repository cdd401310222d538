"""The estimate's cost model (budgetdraft.pipeline.estimate): devices (`Device`, the named ones in `DEVICES`; this
machine's is measured by budgetdraft.pipeline.machine), model shapes (`Shape`: a local directory's config.json, the
config.json the hub serves when it can be read without the internet, else `MODELS`) and a forward's seconds on a
device (`Model`: the longer of its FLOPs at the device's throughput and its bytes at its memory bandwidth, plus a
fixed cost per layer)."""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from budgetdraft.base.defaults import EAGER, ENGINE, rounded_capacity
from budgetdraft.base.revisions import hub_model, revision
from budgetdraft.decoding.loading import parse_model_spec


@dataclass(frozen=True)
class Device:
    name: str
    memory_gb: float  # usable by one job
    flops: float  # matmul FLOP/s one job reaches in fp16 / bf16 (peak x efficiency)
    flops32: float  # ... in float32 (no TF32: PyTorch's default for matmuls)
    bandwidth: float  # memory bytes/s one job reaches
    layer_overhead_s: float  # fixed seconds per layer per forward (framework + launches)
    disk: float  # bytes/s a model is loaded at
    parallel: int  # jobs that run side by side
    basis: str  # where the numbers come from
    cuda: bool = True  # a CUDA device: what the graphs engine needs
    # measured on this machine (budgetdraft.pipeline.machine): the models' decode steps and the training steps
    measured: dict = field(default_factory=dict)
    job_s: float = 0.0  # fixed seconds of every job beyond its model work (the workflow's own, Snakemake's)


DEVICES = {
    "a100-80g": Device(
        name="NVIDIA A100 80GB",
        memory_gb=80,
        flops=0.5 * 312e12,
        flops32=0.5 * 19.5e12,
        bandwidth=0.8 * 2.04e12,
        # efficiencies (50 %, 80 %) are guesses; 0.44 ms is fitted to the paper's AR under DynamicCache traffic and
        # assumed, not measured, for our eager engine (bench/gpu_decode.py measures it)
        layer_overhead_s=0.44e-3,
        disk=2e9,  # a guess
        parallel=1,
        basis="fp16 312 and fp32 19.5 TFLOP/s at 50 %, 2.04 TB/s at 80 % (guessed efficiencies); 0.44 ms per layer "
        "per forward reproduces the paper's own AR throughput (38 / 30 / 19 tok/s at 4K / 8K / 16K on an A100) with "
        "HF eager decoding on DynamicCache, and is assumed for our eager engine (not yet measured on it)",
    ),
    "h100-80g": Device(
        name="NVIDIA H100 80GB SXM",
        memory_gb=80,
        flops=0.5 * 989e12,
        flops32=0.5 * 67e12,
        bandwidth=0.8 * 3.35e12,
        # efficiencies are guesses; the A100's per-layer cost, which with DynamicCache traffic gives HF generate's
        # dynamic-cache step measured on an H100 (24 / 28 / 36 ms at 4K / 8K / 16K, issue 28) within 25 %
        layer_overhead_s=0.44e-3,
        disk=2e9,  # a guess
        parallel=1,
        basis="fp16 989 and fp32 67 TFLOP/s at 50 %, 3.35 TB/s at 80 % (guessed efficiencies); per-layer overhead as "
        "on the A100 (host-bound), which with DynamicCache traffic matches HF generate's dynamic-cache step measured "
        "on an H100 (24 / 28 / 36 ms at 4K / 8K / 16K) within 25 %; our engines not yet measured there",
    ),
    "cpu": Device(
        name="this 2-core CPU (1 torch thread per job)",
        memory_gb=24,
        flops=9e10,
        flops32=9e10,
        bandwidth=1.0e10,
        layer_overhead_s=0.15e-3,
        disk=1e9,
        parallel=2,
        basis="calibrated on this machine before the fixed-shape engine: fp32 training steps ~90 GFLOP/s, a "
        "SmolLM2-135M decode step 53 ms at 1K (~10 GB/s), 2 jobs side by side",
        cuda=False,
    ),
}
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Shapes of the models the shipped configs name (their config.json as published): what a hub id costs when its hub
# cannot be read without the internet (`served_shape`); a local directory's own config.json wins.
MODELS = {
    "NousResearch/Yarn-Llama-2-7b-128k": dict(
        layers=32, hidden=4096, ffn=11008, heads=32, kv_heads=32, vocab=32000, tied=False
    ),
    "JackFram/llama-68m": dict(layers=2, hidden=768, ffn=3072, heads=12, kv_heads=12, vocab=32000, tied=False),
    "embedded:smollm2": dict(layers=30, hidden=576, ffn=1536, heads=9, kv_heads=3, vocab=49152, tied=True),
}


# ------------------------------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @property
    def body(self) -> float:
        """Parameters of the layers (attention + MLP)."""
        kv = self.hidden * self.kv_heads // self.heads
        return self.layers * (2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.ffn)

    @property
    def params(self) -> float:
        """Parameters stored: the layers, the embedding and (untied) the LM head."""
        return self.body + (1 if self.tied else 2) * self.vocab * self.hidden

    @property
    def read(self) -> float:
        """Parameters one forward reads: the layers and the LM head (the embedding: one row per token)."""
        return self.body + self.vocab * self.hidden

    def kv_bytes(self, tokens: float, dtype_bytes: int) -> float:
        return 2 * self.layers * self.hidden * self.kv_heads / self.heads * tokens * dtype_bytes


def config_shape(c: dict) -> dict:
    """A Hugging Face config.json's shape fields as `Shape`'s."""
    return dict(
        layers=c["num_hidden_layers"], hidden=c["hidden_size"], ffn=c["intermediate_size"],
        heads=c["num_attention_heads"], kv_heads=c.get("num_key_value_heads", c["num_attention_heads"]),
        vocab=c["vocab_size"], tied=bool(c.get("tie_word_embeddings", False)),
    )  # fmt: skip


def shape(model_spec: str, served: dict | None = None) -> Shape:
    """The shape of model ``model_spec``: a local directory's config.json, else ``served`` (a hub's config.json for it:
    `served_shape`), else `MODELS`, the published shape (an embedded spec's ``layers=k`` cuts layers;
    ``positions=N`` changes no shape)."""
    base, options = parse_model_spec(model_spec)
    layers = options.get("layers")
    config = Path(model_spec) / "config.json"
    if config.is_file():
        known = config_shape(json.loads(config.read_text()))
    elif served is not None:
        known = config_shape(served)
    elif base in MODELS:
        known = dict(MODELS[base])
    else:
        raise ValueError(
            f"model {model_spec!r}: its shape is unknown offline; give a local directory with a config.json"
        )
    if layers:
        known["layers"] = int(layers)
    return Shape(**known)


def local_endpoint() -> bool:
    """Whether ``HF_ENDPOINT`` names a hub on this machine (a local hub: tests/localhub.py, a mirror on loopback),
    which the estimate may ask without the internet."""
    host = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", "")).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def hub_config(repo: str, rev: str = "") -> dict | None:
    """The config.json the hub serves for ``repo`` at ``rev`` ('' its main branch) when it is readable without the
    internet: in the Hugging Face cache, or from a hub on this machine (`local_endpoint`); None when it is not (the
    real hub is never asked: an estimate answers in seconds, offline too) or is no JSON object of a model's shape."""
    import huggingface_hub

    try:
        path = huggingface_hub.try_to_load_from_cache(repo, "config.json", revision=rev or None)
        if not isinstance(path, str) and local_endpoint():
            path = huggingface_hub.hf_hub_download(repo, "config.json", revision=rev or None, etag_timeout=5)
        found = json.loads(Path(path).read_text()) if isinstance(path, str) else None
        return found if isinstance(found, dict) and config_shape(found) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def served_shape(cfg: dict, key: str) -> Shape:
    """The shape of the config's model ``key`` (verifier, drafter) as it will be loaded: a hub id's config.json as
    its hub serves it at the config's pinned revision when readable offline (`hub_config`: a local hub of tiny
    models is priced at its tiny models, not at the ids' published 7B shapes), else `shape`'s."""
    model_spec = cfg[key]
    repo = hub_model(parse_model_spec(model_spec)[0])
    return shape(model_spec, hub_config(repo, revision(cfg, repo)) if repo else None)


# ------------------------------------------------------------------------------------------------ the roofline


@dataclass(frozen=True)
class Model:
    """A model on ``device``, decoding on our engine (``engine``: eager or graphs; ``cache="preallocated"``), or
    with ``cache="dynamic"`` as HF decodes on a ``DynamicCache`` (the paper's own timings; calibration only)."""

    shape: Shape
    dtype_bytes: int
    device: Device
    engine: str = ENGINE
    cache: str = "preallocated"
    # measured on this machine (`budgetdraft.pipeline.machine`): a decode step's seconds, fixed + per layer, at the
    # probe's context, and a verify of `verify_rows` tokens as a multiple of a step; None: the roofline's
    measured: dict | None = None
    # measured on a GPU by bench/gpu_decode.py (`budgetdraft.pipeline.gpusteps.Slowdown`): a step's time ÷ its
    # bandwidth bound, which a step here costs on top of its own bound; None: the roofline's
    slowdown: object = None

    def forward(
        self, tokens: float, context: float, logits: float = 1, train: bool = False, overhead: bool = True
    ) -> float:
        """Seconds of one forward over ``tokens`` new tokens attending over ``context`` cached ones (x3 with a
        backward), the per-layer cost included unless ``overhead`` is off. Its bytes: the weights and the KV of the
        context, read once (a pre-allocated cache is written in place); a DynamicCache's ``torch.cat`` also copies
        the cache every forward (3x its bytes)."""
        s = self.shape
        flops = 2 * s.body * tokens + 2 * s.vocab * s.hidden * logits + 4 * s.layers * s.hidden * tokens * context
        weights = s.read * self.dtype_bytes
        cache = (3 if self.cache == "dynamic" else 1) * s.kv_bytes(context, self.dtype_bytes)
        rate = self.device.flops32 if self.dtype_bytes == 4 else self.device.flops
        seconds = max(flops / rate, (weights + cache) / self.device.bandwidth)
        return (3 if train else 1) * seconds + overhead * s.layers * self.device.layer_overhead_s

    def step(self, tokens: int, cached: float, capacity: float) -> float:
        """Seconds of one decode step of ``tokens`` queries with ``cached`` tokens in a cache allocated for
        ``capacity``. Our engine: a fixed shape over all of the rounded capacity (masked), whatever ``cached``; the
        per-layer cost under eager, none under graphs (the step is one CUDA graph). DynamicCache: over ``cached``."""
        if self.cache == "dynamic":
            return self.forward(tokens, cached)
        if self.slowdown is not None:  # the bench's bound (stored weights + the KV held) x its measured slowdown
            s, b = self.shape, self.dtype_bytes
            return self.slowdown.seconds((s.params * b + s.kv_bytes(cached, b)) / self.device.bandwidth, cached, tokens)
        if self.measured:  # the measured step, its KV beyond the probe's context read at the measured bandwidth
            m = self.measured
            step = m["fixed_s"] + self.shape.layers * m["per_layer_s"]
            extra_kv = self.shape.kv_bytes(max(rounded_capacity(capacity) - m["context"], 0), self.dtype_bytes)
            rows = 1 + (tokens - 1) * (m["verify_factor"] - 1) / (m["verify_rows"] - 1)
            return step * rows + extra_kv / self.device.bandwidth
        return self.forward(tokens, rounded_capacity(capacity), overhead=self.engine == EAGER)

    def prefill(self, tokens: float, logits: float = 1) -> float:
        """A prompt's forward (runs eagerly under both engines: its shape is the prompt's)."""
        return self.forward(tokens, tokens / 2, logits)

    @property
    def load_s(self) -> float:
        return self.shape.params * self.dtype_bytes / self.device.disk


def tokens_per_round(alpha: float, gamma: int) -> float:
    """Expected tokens one speculative round yields: (1 − α^(γ+1)) / (1 − α)."""
    return gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
