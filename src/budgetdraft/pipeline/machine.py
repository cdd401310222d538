"""The machine a run is on, measured: what `estimate --gpu here` costs the jobs with, instead of constants taken on
another machine (a clean default run took 43 min on one 2-core CPU and 79 min on another of the same kind).

A probe of a few seconds times what the jobs do, on the run's own device and dtypes, with random-weight models of
the configured shapes (the verifier's width and vocabulary at up to ``PROBE_LAYERS`` layers, the drafter whole): our
decode loop's steps on each model, a prefill, and a model's load from disk. ``parallel`` copies run at once, as the
workflow runs that many jobs side by side on the machine, so memory bandwidth is shared as in the run. The roofline
constants the estimate uses (`budgetdraft.pipeline.roofline.Device`) are solved from the timings:

- bandwidth and the fixed cost per layer: a decode step takes ``layers × overhead + bytes / bandwidth`` (its weights
  and KV cache read once); the verifier's and the drafter's steps give two equations for the two unknowns;
- matmul throughput: a 256-token prefill, less its fixed cost, over its FLOPs;
- disk: the bytes of a model over the seconds ``from_pretrained`` takes to load it.

The result is cached per machine (CPU model, visible cores, torch, device, threads, parallel jobs, the shapes probed)
under ``$BUDGETDRAFT_CACHE/machine/``: measured once, reused, re-measured with ``--remeasure``. The file is written
whole, with a lock held, so two runs that start at once probe once (``base.atomic``), and read back only when it is
this machine's and every figure is one a probe gives (`measure_problem`): a file forged or damaged (a bandwidth of
-3, NaN, 1e300, a key of another CPU) is probed again, saying so in one line that names it.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from budgetdraft.pipeline.roofline import BYTES

PROBE_LAYERS = 16  # layers of the verifier's probe at most (its width, vocabulary and per-layer cost are the
# verifier's); a second probe at a quarter of them separates the per-layer cost from the head's, and the wider the
# gap the less a timing's noise grows when the step is extrapolated to the verifier's own layers
DECODE_TOKENS = 24  # steps timed per model (after 4 untimed)
PREFILL_TOKENS = 256
VERIFY_ROWS = 6
PROBE_CONTEXT = 512  # prompt tokens of the probe's decode steps at most (the shortest context, when shorter)


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
    verifier_step2_s: float = 0.0  # a step of the verifier's probe at a quarter of its layers: the head's share apart
    verify_rows_s: float = 0.0  # a step of VERIFY_ROWS tokens (a γ = 5 verify) of the verifier's probe
    train_steps_s: tuple = ()  # ((P, C, branches), seconds of one training step of the drafter), per recipe


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
    """A random-weight Llama of ``shape`` (budgetdraft.pipeline.roofline.Shape) at ``layers`` layers, as the
    pipeline loads a model (our attention, the decoding layout)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from budgetdraft.decoding import attention
    from budgetdraft.decoding.layout import decode_layout
    from budgetdraft.decoding.loading import torch_dtype

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


def rows_seconds(model, context: int, rows: int, repeats: int = 5) -> float:
    """Median seconds of one forward of ``rows`` tokens over a ``context``-token cache (a verify, or a step)."""
    import torch
    from transformers import DynamicCache

    ids = torch.arange(3, 3 + context + rows, device=model.device)[None]
    times = []
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(ids[:, :context], past_key_values=cache, logits_to_keep=1)
        for _ in range(repeats + 1):
            start = time.perf_counter()
            model(ids[:, context:], past_key_values=cache, logits_to_keep=rows)
            times.append(time.perf_counter() - start)
            cache.crop(-rows)
    return statistics.median(times[1:])


def train_step_seconds(drafter, hparams: dict, prefix: int, cont: int) -> float:
    """Seconds of one training step (`budgetdraft.training.train.train_step`, both branches when λ > 0) of
    ``drafter`` (trained in place: a probe) on random sequences of ``prefix`` + ``cont`` tokens, after one untimed."""
    import torch

    from budgetdraft.training.train import optimizer_and_schedule, resolve_hparams, train_step

    hp = resolve_hparams({**hparams, "steps": 4, "warmup_steps": 1, "checkpoint_every": 4})
    drafter.train()
    vocab = drafter.config.vocab_size
    g = torch.Generator().manual_seed(0)
    data = {
        "input_ids": torch.randint(3, vocab, (2, prefix + cont), generator=g),
        "targets": torch.randint(3, vocab, (2, cont), generator=g),
        "prefix_len": prefix,
    }
    optimizer, scheduler = optimizer_and_schedule(drafter, hp)
    train_step(drafter, optimizer, scheduler, data, 0, hp, 2)
    start = time.perf_counter()
    train_step(drafter, optimizer, scheduler, data, 1, hp, 2)
    return time.perf_counter() - start


def probe_once(verifier_shape, drafter_shape, verifier_dtype: str, drafter_dtype: str, device: str, threads: int,
               context: int, recipes: tuple = (), layers: int = PROBE_LAYERS) -> Probe:  # fmt: skip
    """One probe process's timings (its own torch threads) with the verifier at ``layers`` layers at most
    (``probe_layers``); ``recipes``: ((hparams JSON, P, C), ...) of the training steps to time on the drafter."""
    import torch
    from transformers import AutoModelForCausalLM

    from budgetdraft.decoding.loading import torch_dtype

    torch.set_num_threads(threads)
    layers = min(layers, PROBE_LAYERS, verifier_shape.layers)
    v = llama(verifier_shape, layers, verifier_dtype, device)
    d = llama(drafter_shape, drafter_shape.layers, drafter_dtype, device)
    verifier_step, drafter_step = step_seconds(v, context), step_seconds(d, context)
    quarter = llama(verifier_shape, max(1, layers // 4), verifier_dtype, device)
    verifier_step2 = step_seconds(quarter, context)
    del quarter
    verify = rows_seconds(v, context, VERIFY_ROWS) / rows_seconds(v, context, 1) * verifier_step
    trained = tuple(
        ((p, c, 1 + (float(json.loads(h).get("lambda_c", 0)) > 0)),
         train_step_seconds(llama(drafter_shape, drafter_shape.layers, "float32", device), json.loads(h), p, c))
        for h, p, c in recipes
    )  # fmt: skip
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
        sv.read * BYTES[verifier_dtype] + sv.kv_bytes(context, BYTES[verifier_dtype]),
        drafter_shape.read * BYTES[drafter_dtype] + drafter_shape.kv_bytes(context, BYTES[drafter_dtype]),
        2 * sv.body * PREFILL_TOKENS + 2 * sv.vocab * sv.hidden + 4 * layers * sv.hidden * PREFILL_TOKENS**2 / 2,
        verifier_step2, verify, trained,
    )  # fmt: skip


def solve(probes: list[Probe]) -> dict:
    """The roofline constants of the median probe: bandwidth and per-layer cost from the two decode steps, matmul
    throughput from the prefill, disk from the load."""
    p = {k: statistics.median(getattr(x, k) for x in probes) for k in asdict(probes[0]) if k != "train_steps_s"}
    trained = {}
    for probe in probes:
        for recipe, seconds in probe.train_steps_s:
            trained.setdefault(tuple(recipe), []).append(seconds)
    lv, ld, tv, td, bv, bd = (p[k] for k in ("verifier_layers", "drafter_layers", "verifier_step_s",
                                             "drafter_step_s", "verifier_bytes", "drafter_bytes"))  # fmt: skip
    # tv = lv·o + bv / w, td = ld·o + bd / w: solved for 1 / w and o
    det = lv * bd - ld * bv
    inv_bw = (lv * td - ld * tv) / det if det else 0.0
    overhead = (tv - bv * inv_bw) / lv if inv_bw > 0 else 0.0
    if inv_bw <= 0 or overhead < 0:  # the steps do not separate the two (one model's step is all fixed cost)
        overhead, inv_bw = 0.0, tv / bv
    flops = p["prefill_flops"] / max(p["prefill_s"] - lv * overhead, 1e-6)
    # a decode step of the verifier as an affine function of its layers (its head and embedding once, then each
    # layer): from the probe at its layers and at a quarter of them
    quarter = max(1, int(lv) // 4)
    per_layer = (tv - p["verifier_step2_s"]) / (lv - quarter) if lv > quarter else 0.0
    return {
        "bandwidth": 1 / inv_bw,
        "layer_overhead_s": overhead,
        "flops": flops,
        "disk": p["load_bytes"] / max(p["load_s"], 1e-6),
        "verifier_step": {"fixed_s": max(tv - lv * per_layer, 0.0), "per_layer_s": max(per_layer, 0.0)},
        "drafter_step_s": td,
        "verify_factor": p["verify_rows_s"] / tv if tv else 1.0,
        "train_step_s": {json.dumps(list(k)): statistics.median(v) for k, v in trained.items()},
        "timings": p,
    }


# Snakemake's own CPU per job, not probed: 13.2 s over 84 jobs, ~0.16 s (bench/README.md, "Pipeline overhead")
SNAKEMAKE_JOB_S = 0.2


def job_seconds(runs: int = 3) -> float:
    """A cell job's fixed seconds beyond its model work: `budgetdraft eval-cell` of a tiny model (2 new tokens of
    AR) started as a rule starts one (a shell, the Python client) and forked from a warm process that has imported
    everything, as the workflow runs cells (the median of ``runs``), plus Snakemake's own time per job."""
    import shutil
    import subprocess
    import sys

    import pandas as pd
    from transformers import LlamaConfig, LlamaForCausalLM

    from budgetdraft.pipeline.rendezvous import rendezvous
    from budgetdraft.pipeline.warm import ENV

    socket = rendezvous("probe")
    work = Path(os.path.dirname(socket))
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=128,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )
    ).save_pretrained(work / "v")
    pd.DataFrame({"dataset": ["d"], "context": ["c"], "sample": [0], "doc_id": ["probe"],
                  "input_ids": [list(range(3, 67))]}).to_parquet(work / "prompts.parquet")  # fmt: skip
    server = subprocess.Popen([sys.executable, "-m", "budgetdraft", "warm", "--socket", socket],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    cell = ("eval-cell --label ar --method ar --verifier v --prompts prompts.parquet --dataset d --context c "
            "--max-new-tokens 2 --warmup 0 --repeats 1 --out results/cells/ar/d/c/B0_g0.parquet")  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(socket) and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.1)
        env = {**os.environ, ENV: socket}
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run(["bash", "-c", f"{sys.executable} -m budgetdraft {cell} > /dev/null 2>&1"], env=env,
                           cwd=work, check=True)  # fmt: skip
            times.append(time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    return statistics.median(times) + SNAKEMAKE_JOB_S


def training_recipes(cfg: dict) -> tuple:
    """((hparams JSON, P, C), ...): each distinct training step the config runs (the variants at the training data's
    P and C, λ > 0 or not; the base drafter at its own), to time on the drafter's probe."""
    recipes = {}
    tr, data = cfg["training"], cfg["training_data"]
    for overrides in cfg.get("variants", {}).values():
        if "checkpoint" in overrides:
            continue
        hp = {**tr, **overrides, "device": cfg.get("device", "cpu")}
        key = (float(hp.get("lambda_c", 0)) > 0, data["prefix_len"], data["cont_len"])
        recipes.setdefault(key, (json.dumps(hp, sort_keys=True), data["prefix_len"], data["cont_len"]))
    if base := cfg.get("base_drafter"):
        hp = {**tr, **base["training"], "lambda_c": 0, "device": cfg.get("device", "cpu")}
        d = base["data"]
        recipes.setdefault((False, d["prefix_len"], d["cont_len"]), (json.dumps(hp, sort_keys=True), d["prefix_len"],
                                                                      d["cont_len"]))  # fmt: skip
    return tuple(recipes.values())


def key_of(cfg: dict, device: str, parallel: int) -> dict:
    import torch

    from budgetdraft.pipeline.roofline import shape

    return {
        "cpu": cpu_name(), "cores": cores(), "torch": torch.__version__, "device": device,
        "threads": cfg.get("threads", 1), "parallel": parallel, "verifier": asdict(shape(cfg["verifier"])),
        "drafter": asdict(shape(cfg["drafter"])), "dtypes": [cfg["verifier_dtype"], cfg["drafter_dtype"]],
        "recipes": [[json.loads(h).get("lambda_c", 0), p, c] for h, p, c in training_recipes(cfg)],
    }  # fmt: skip


def check_measurable(device: str) -> None:
    """A config's ``device`` this machine has, or an error that says how to estimate for another machine."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"device: {device} in the config, and this machine has no CUDA device to measure: run the estimate on "
            "the machine the run will use, or name one (--gpu a100-80g, h100-80g)"
        )


def device_memory_gb(device: str) -> float:
    import psutil
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(torch.device(device)).total_memory / 2**30
    return psutil.virtual_memory().total / 2**30


def probe_layers(verifier_shape, dtype: str, parallel: int, memory_bytes: float) -> int:
    """The verifier layers a probe builds (at most ``PROBE_LAYERS``) so that ``parallel`` probes fit in half of
    ``memory_bytes`` (each holds its verifier twice while it times a load): a 7B verifier's 16 layers in fp16 are
    6.5 GB, two probes and their reloads more than a 24 GB machine has (they were killed, after minutes). Raises
    ValueError when not even 2 layers fit (the per-layer cost is solved from two depths)."""
    from dataclasses import replace

    size = BYTES[dtype]
    layer = replace(verifier_shape, layers=1).body * size
    head = (1 if verifier_shape.tied else 2) * verifier_shape.vocab * verifier_shape.hidden * size
    fit = int((memory_bytes / 2 / parallel / 2 - head) // layer)
    if fit < 2:
        raise ValueError(
            f"a probe of the verifier's shape ({verifier_shape.hidden} wide, {dtype}) does not fit in this machine's "
            f"{memory_bytes / 2**30:.1f} GiB available with {parallel} at once: no measurement here (estimate it on a "
            "named device: python -m budgetdraft estimate --gpu NAME)"
        )
    return min(PROBE_LAYERS, verifier_shape.layers, fit)


def available_memory(device: str) -> float:
    """Bytes a probe may use on ``device``: a GPU's total memory, else the memory available now."""
    import psutil

    return device_memory_gb(device) * 2**30 if device.startswith("cuda") else psutil.virtual_memory().available


# Each figure of a cached measure (`probe`'s result) -> (the least, whether the least itself may be, the most) a
# probe gives: no step, load or job of a probe takes an hour, and the rates are far past any machine's (an H200
# reads 4.8e12 bytes/s), so a file past them was not written by a probe (a bandwidth of 1e300 predicted a run of a
# 300-digit number of hours; -3, a negative one)
SECONDS = (0.0, False, 3600.0)
FIGURES = {
    "bandwidth": (0.0, False, 1e16),  # bytes/s of memory a decode step reads
    "flops": (0.0, False, 1e20),
    "disk": (0.0, False, 1e16),  # bytes/s of a model's load
    "layer_overhead_s": (0.0, True, 3600.0),  # 0 where the two steps do not separate it (`solve`)
    "drafter_step_s": SECONDS,
    "verify_factor": (0.0, False, 1e3),
    "job_s": SECONDS,
    "probe_s": (0.0, False, 86400.0),
    "context": (0.0, False, PROBE_CONTEXT),
    "verifier_step.fixed_s": (0.0, True, 3600.0),
    "verifier_step.per_layer_s": (0.0, True, 3600.0),
    "timings.verifier_layers": (0.0, False, PROBE_LAYERS),
    "timings.verifier_step_s": SECONDS,
    "timings.drafter_step_s": SECONDS,
    "timings.prefill_s": SECONDS,
    "timings.load_s": SECONDS,
    "timings.load_bytes": (0.0, False, 1e15),
}


def figure_problem(name: str, value, bounds: tuple) -> str | None:
    """Why ``value`` is not the figure ``name`` a probe gives (None: it is), within ``bounds`` (`FIGURES`)."""
    least, inclusive, most = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} {value!r} is not a number"
    if not (value >= least if inclusive else value > least) or not math.isfinite(value):
        return f"{name} {value!r} is not " + ("a finite number >= 0" if inclusive else "a positive number")
    if value > most:
        return f"{name} {value!r} is more than {most:g}, which no probe measures"
    return None


def measure_problem(found, key: dict) -> str | None:
    """Why ``found``, a cached measure, is not this machine's measure under ``key`` (None: it is): not a JSON
    object, a figure missing or not one a probe gives (`FIGURES`, and the training steps' seconds), or measured
    under another key (another CPU, core count, torch, config shapes: a file copied or forged)."""
    if not isinstance(found, dict):
        return f"holds {type(found).__name__}, not a measure (a JSON object)"
    for name, bounds in FIGURES.items():
        value = found
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return f"{name} is missing"
        if why := figure_problem(name, value, bounds):
            return why
    steps = found.get("train_step_s")
    if not isinstance(steps, dict):
        return f"train_step_s {steps!r} is not a mapping of training steps to seconds"
    for recipe, seconds in steps.items():
        if why := figure_problem(f"train_step_s[{recipe}]", seconds, SECONDS):
            return why
    if not isinstance(found.get("measured"), str):
        return f"measured {found.get('measured')!r} is not a date"
    ours = json.loads(json.dumps(key))
    theirs = found.get("key") if isinstance(found.get("key"), dict) else {}
    for field, value in ours.items():
        if theirs.get(field) != value:
            return f"it was measured with {field} {theirs.get(field)!r}, and this machine and config have {value!r}"
    return None


def read_measure(path: Path, key: dict) -> tuple[dict | None, str | None]:
    """(the measure cached at ``path``, None) when it is this machine's under ``key``, else (None, why not)."""
    try:
        found = json.loads(path.read_text())
    except UnicodeDecodeError:
        return None, "is not text"
    except ValueError as err:
        return None, f"is not JSON ({err})"
    why = measure_problem(found, key)
    return (None, why) if why else (found, None)


def measure(cfg: dict, parallel: int, remeasure: bool = False, say=print) -> dict:
    """This machine's constants for ``cfg`` (its models' shapes, dtypes, device and threads) with ``parallel``
    jobs side by side: from the cache when it holds this machine's measure (`read_measure`), else probed now
    (``parallel`` processes at once) and cached; a cached file that cannot be used is named, with why, by ``say``."""
    from budgetdraft.base.atomic import atomic_write_text, file_lock
    from budgetdraft.base.cache import cache_root

    device = cfg.get("device", "cpu")
    check_measurable(device)
    key = key_of(cfg, device, parallel)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cached = cache_root() / "machine" / f"{digest}.json"
    with file_lock(cached):  # a second run started beside this one waits, then reads what this one measured
        if not remeasure and cached.is_file():
            found, problem = read_measure(cached, key)
            if problem is None:
                return found
            say(f"{cached}: {problem}; probing again")
        result = probe(cfg, device, key, parallel, say)
        atomic_write_text(cached, json.dumps(result, indent=1))
    return result


def probe(cfg: dict, device: str, key: dict, parallel: int, say=print) -> dict:
    """This machine's constants for ``cfg``, probed now (``parallel`` processes at once), under its ``key``."""
    from concurrent.futures import ProcessPoolExecutor

    from budgetdraft.pipeline.roofline import shape

    context = min(min(cfg["contexts"].values()), PROBE_CONTEXT)
    verifier = shape(cfg["verifier"])
    layers = probe_layers(verifier, cfg["verifier_dtype"], parallel, available_memory(device))
    args = (verifier, shape(cfg["drafter"]), cfg["verifier_dtype"], cfg["drafter_dtype"], device,
            cfg.get("threads", 1), context, training_recipes(cfg), layers)  # fmt: skip
    say(f"measuring this machine ({key['cpu']}, {key['cores']} cores, {parallel} probe(s) at once) ...")
    start = time.perf_counter()
    if device == "cpu" and parallel > 1:  # fresh processes (spawn): no fork of a process that runs torch
        with ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
            probes = list(pool.map(probe_once, *zip(*[args] * parallel)))
    else:
        probes = [probe_once(*args)]
    result = {**solve(probes), "context": context, "job_s": job_seconds(), "key": key}
    result.update(probe_s=time.perf_counter() - start, measured=time.strftime("%F %T"))
    return result


def here(cfg: dict, parallel: int, remeasure: bool = False, say=print):
    """This machine as an estimate `Device`, measured (`measure`) for ``cfg`` with ``parallel`` jobs at a time."""
    from budgetdraft.pipeline.roofline import Device

    m = measure(cfg, parallel, remeasure, say)
    k, t = m["key"], m["timings"]
    basis = (
        f"measured on this machine ({k['cpu']}, {k['cores']} cores, torch {k['torch']}) on {m['measured']}, "
        f"{parallel} probe(s) at once in {m['probe_s']:.0f} s: a verifier step of {t['verifier_layers']:.0f} layers "
        f"{t['verifier_step_s'] * 1e3:.1f} ms, a drafter step {t['drafter_step_s'] * 1e3:.1f} ms, a "
        f"{PREFILL_TOKENS}-token prefill {t['prefill_s']:.2f} s, a {t['load_bytes'] / 1e6:.0f} MB load "
        f"{t['load_s']:.2f} s (cached: --remeasure probes again)"
    )
    memory = device_memory_gb(k["device"])
    step = {"context": m["context"], "verify_factor": m["verify_factor"], "verify_rows": VERIFY_ROWS}
    measured = {
        "verifier": {**step, **m["verifier_step"]},
        "drafter": {**step, "fixed_s": m["drafter_step_s"], "per_layer_s": 0.0},
        "train_step_s": m["train_step_s"],
    }
    return Device(
        name=f"this machine ({k['cpu']}, {k['cores']} cores), measured", memory_gb=memory, flops=m["flops"],
        flops32=m["flops"], bandwidth=m["bandwidth"], layer_overhead_s=m["layer_overhead_s"], disk=m["disk"],
        parallel=parallel, basis=basis, cuda=k["device"].startswith("cuda"), measured=measured,
        job_s=m["job_s"],
    )  # fmt: skip
