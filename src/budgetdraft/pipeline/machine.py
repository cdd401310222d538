"""The machine a run is on, measured: what `estimate --gpu here` costs the jobs with, instead of constants taken on
another machine (a clean default run took 43 min on one 2-core CPU and 79 min on another of the same kind).

A probe of a few seconds times what the jobs do, on the run's own device and dtypes, with random-weight models of
the configured shapes (the verifier's width and vocabulary at up to ``PROBE_LAYERS`` layers, the drafter whole): our
decode loop's steps on each model, a prefill, and a model's load from disk. ``parallel`` copies run at once, as the
workflow runs that many jobs side by side on the machine, so memory bandwidth is shared as in the run. The roofline
constants the estimate uses (`budgetdraft.pipeline.estimate.Device`) are solved from the timings:

- bandwidth and the fixed cost per layer: a decode step takes ``layers × overhead + bytes / bandwidth`` (its weights
  and KV cache read once); the verifier's and the drafter's steps give two equations for the two unknowns;
- matmul throughput: a 256-token prefill, less its fixed cost, over its FLOPs;
- disk: the bytes of a model over the seconds ``from_pretrained`` takes to load it.

The result is cached per machine (CPU model, visible cores, torch, device, threads, parallel jobs, the shapes probed)
under ``$BUDGETDRAFT_CACHE/machine/``: measured once, reused, re-measured with ``--remeasure``.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PROBE_LAYERS = 4  # layers of the verifier's probe: its width, vocabulary and per-layer cost are the verifier's
DECODE_TOKENS = 24  # steps timed per model (after 4 untimed)
PREFILL_TOKENS = 256


@dataclass(frozen=True)
class Probe:
    """What one probe process measured (seconds), and the shapes it measured them on."""

    verifier_step_s: float
    drafter_step_s: float
    prefill_s: float
    load_s: float
    load_bytes: int
    verifier_layers: int
    drafter_layers: int
    verifier_bytes: float  # weights + KV a verifier step reads
    drafter_bytes: float
    prefill_flops: float


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def llama(shape, layers: int, dtype: str, device: str):
    """A random-weight Llama of ``shape`` (budgetdraft.pipeline.estimate.Shape) at ``layers`` layers, as the
    pipeline loads a model (our attention, the decoding layout)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from budgetdraft.decoding import attention
    from budgetdraft.decoding.loading import decode_layout, torch_dtype

    config = LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn, num_hidden_layers=layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, tie_word_embeddings=shape.tied,
        max_position_embeddings=8192, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype=torch_dtype(dtype)).eval()
    model.set_attn_implementation(attention.NAME)
    return decode_layout(model.to(device), device, dtype)


def step_seconds(model, context: int) -> float:
    """Seconds of one decode step of our loop (`autoregressive`) after a ``context``-token prompt: the median over
    DECODE_TOKENS steps of two generations' difference (their lengths differ by that many steps)."""
    from budgetdraft.decoding.loop import autoregressive

    prompt = list(range(3, 3 + context))
    runs = {}
    for new in (4, 4 + DECODE_TOKENS):
        times = []
        for _ in range(2):
            start = time.perf_counter()
            autoregressive(model, prompt, new, eos_token_id=[])
            times.append(time.perf_counter() - start)
        runs[new] = min(times)
    return max(runs[4 + DECODE_TOKENS] - runs[4], 1e-6) / DECODE_TOKENS


def probe_once(verifier_shape, drafter_shape, verifier_dtype: str, drafter_dtype: str, device: str, threads: int,
               context: int) -> Probe:  # fmt: skip
    """One probe process's timings (its own torch threads)."""
    import torch
    from transformers import AutoModelForCausalLM

    from budgetdraft.decoding.loading import torch_dtype

    torch.set_num_threads(threads)
    layers = min(PROBE_LAYERS, verifier_shape.layers)
    bytes_of = {"float32": 4, "float16": 2, "bfloat16": 2}
    v = llama(verifier_shape, layers, verifier_dtype, device)
    d = llama(drafter_shape, drafter_shape.layers, drafter_dtype, device)
    verifier_step, drafter_step = step_seconds(v, context), step_seconds(d, context)
    ids = torch.arange(3, 3 + PREFILL_TOKENS, device=device)[None]
    with torch.no_grad():
        v(ids, logits_to_keep=1)
        start = time.perf_counter()
        v(ids, logits_to_keep=1)
        prefill = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        v.save_pretrained(tmp)
        size = sum(f.stat().st_size for f in Path(tmp).glob("*.safetensors"))
        start = time.perf_counter()
        AutoModelForCausalLM.from_pretrained(tmp, dtype=torch_dtype(verifier_dtype), device_map=device)
        load = time.perf_counter() - start
    sv = verifier_shape.__class__(**{**asdict(verifier_shape), "layers": layers})
    return Probe(
        verifier_step, drafter_step, prefill, load, size, layers, drafter_shape.layers,
        sv.read * bytes_of[verifier_dtype] + sv.kv_bytes(context, bytes_of[verifier_dtype]),
        drafter_shape.read * bytes_of[drafter_dtype] + drafter_shape.kv_bytes(context, bytes_of[drafter_dtype]),
        2 * sv.body * PREFILL_TOKENS + 2 * sv.vocab * sv.hidden + 4 * layers * sv.hidden * PREFILL_TOKENS**2 / 2,
    )  # fmt: skip


def solve(probes: list[Probe]) -> dict:
    """The roofline constants of the median probe: bandwidth and per-layer cost from the two decode steps, matmul
    throughput from the prefill, disk from the load."""
    p = {k: statistics.median(getattr(x, k) for x in probes) for k in asdict(probes[0])}
    lv, ld, tv, td, bv, bd = (p[k] for k in ("verifier_layers", "drafter_layers", "verifier_step_s",
                                             "drafter_step_s", "verifier_bytes", "drafter_bytes"))  # fmt: skip
    # tv = lv·o + bv / w, td = ld·o + bd / w: solved for 1 / w and o
    det = lv * bd - ld * bv
    inv_bw = (lv * td - ld * tv) / det if det else 0.0
    overhead = (tv - bv * inv_bw) / lv if inv_bw > 0 else 0.0
    if inv_bw <= 0 or overhead < 0:  # the steps do not separate the two (one model's step is all fixed cost)
        overhead, inv_bw = 0.0, tv / bv
    flops = p["prefill_flops"] / max(p["prefill_s"] - lv * overhead, 1e-6)
    return {
        "bandwidth": 1 / inv_bw,
        "layer_overhead_s": overhead,
        "flops": flops,
        "disk": p["load_bytes"] / max(p["load_s"], 1e-6),
        "timings": p,
    }


def key_of(cfg: dict, device: str, parallel: int) -> dict:
    import torch

    from budgetdraft.pipeline.estimate import shape

    return {
        "cpu": cpu_name(), "cores": cores(), "torch": torch.__version__, "device": device,
        "threads": cfg.get("threads", 1), "parallel": parallel, "verifier": asdict(shape(cfg["verifier"])),
        "drafter": asdict(shape(cfg["drafter"])), "dtypes": [cfg["verifier_dtype"], cfg["drafter_dtype"]],
    }  # fmt: skip


def measure(cfg: dict, parallel: int, remeasure: bool = False, say=print) -> dict:
    """This machine's constants for ``cfg`` (its models' shapes, dtypes, device and threads) with ``parallel``
    jobs side by side: from the cache, or probed now (``parallel`` processes at once) and cached."""
    from concurrent.futures import ProcessPoolExecutor

    from budgetdraft.decoding.loading import cache_root
    from budgetdraft.pipeline.estimate import shape

    device = cfg.get("device", "cpu")
    key = key_of(cfg, device, parallel)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cached = cache_root() / "machine" / f"{digest}.json"
    if cached.is_file() and not remeasure:
        return json.loads(cached.read_text())
    context = min(min(cfg["contexts"].values()), 512)
    args = (shape(cfg["verifier"]), shape(cfg["drafter"]), cfg["verifier_dtype"], cfg["drafter_dtype"], device,
            cfg.get("threads", 1), context)  # fmt: skip
    say(f"measuring this machine ({key['cpu']}, {key['cores']} cores, {parallel} probe(s) at once) ...")
    start = time.perf_counter()
    if device == "cpu" and parallel > 1:  # fresh processes (spawn): no fork of a process that runs torch
        with ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
            probes = list(pool.map(probe_once, *zip(*[args] * parallel)))
    else:
        probes = [probe_once(*args)]
    result = {**solve(probes), "key": key, "probe_s": time.perf_counter() - start, "measured": time.strftime("%F %T")}
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(result, indent=1))
    return result


def here(cfg: dict, parallel: int, remeasure: bool = False, say=print):
    """This machine as an estimate `Device`, measured (`measure`) for ``cfg`` with ``parallel`` jobs at a time."""
    import psutil

    from budgetdraft.pipeline.estimate import Device

    m = measure(cfg, parallel, remeasure, say)
    k, t = m["key"], m["timings"]
    basis = (
        f"measured on this machine ({k['cpu']}, {k['cores']} cores, torch {k['torch']}) on {m['measured']}, "
        f"{parallel} probe(s) at once in {m['probe_s']:.0f} s: a verifier step of {t['verifier_layers']:.0f} layers "
        f"{t['verifier_step_s'] * 1e3:.1f} ms, a drafter step {t['drafter_step_s'] * 1e3:.1f} ms, a "
        f"{PREFILL_TOKENS}-token prefill {t['prefill_s']:.2f} s, a {t['load_bytes'] / 1e6:.0f} MB load "
        f"{t['load_s']:.2f} s (cached: --remeasure probes again)"
    )
    memory = psutil.virtual_memory().total / 2**30 if k["device"] == "cpu" else 80
    return Device(
        name=f"this machine ({k['cpu']}, {k['cores']} cores), measured", memory_gb=memory, flops=m["flops"],
        flops32=m["flops"], bandwidth=m["bandwidth"], layer_overhead_s=m["layer_overhead_s"], disk=m["disk"],
        parallel=parallel, basis=basis, cuda=k["device"].startswith("cuda"),
    )  # fmt: skip
