"""What a configuration will cost before it runs: a roofline model of every stage on a named device.

    python -m budgetdraft estimate --configfile config/paper.yaml --gpu a100-80g
    python -m budgetdraft estimate --configfile config/config.yaml --gpu cpu

The jobs are the workflow's own: a forced dry run (`snakemake -n --forceall`) of the target lists every job and
output, so the grid has one home (budgetdraft.pipeline.plan). Each job is then costed from the models' shapes
(`MODELS`, or a local directory's config.json) and the config: a forward pass takes the longer of its FLOPs at the
device's throughput and its bytes (weights and KV cache read) at its memory bandwidth, plus a fixed cost per layer
(Python and kernel launches). A decode step is what our engine runs (`budgetdraft.decoding.engine`): a fixed-shape step over
the whole pre-allocated cache (prompt + new tokens + γ + 1, rounded up to 16 slots) with a mask, so it reads that
capacity's KV once and copies nothing; under the `eager` engine it pays the per-layer cost, under `graphs` (one CUDA
graph a step) none (`--engine`, default the config's `engine`). HF's `DynamicCache` traffic (the step reads the
cache and `torch.cat` rewrites it: 3x its bytes), the decoding the paper's own timings come from, is kept as
``Model(cache="dynamic")``: the per-layer cost is calibrated on it. A job loads its models from disk
once, except grid cells on a GPU, which share the resident process's models (`--cells-per-process`: one process for
the whole grid on one GPU, or a SLURM job group). Speculative cells assume one acceptance rate (`--alpha`). Every assumption is printed with the table. A
context whose verifier weights + KV cache + the drafter's full prefix cache cannot fit the device is refused,
naming the context.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from budgetdraft.base.defaults import EAGER, ENGINE, ENGINES, GRAPHS, PREFILL_RUNS, SLOT_ROUNDING, rounded_capacity
from budgetdraft.base.names import AR, LOOKUP, split_length_label
from budgetdraft.decoding.loading import parse_spec
from budgetdraft.evaluation.cellfile import path_key
from budgetdraft.training.hparams import TrainingHparams


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
# Shapes of the models the shipped configs name (their config.json); a local directory's own config.json wins.
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


def shape(spec: str) -> Shape:
    """The shape of model ``spec``: a local directory's config.json, else `MODELS` (an embedded spec's ``layers=k``
    cuts layers; ``positions=N`` changes no shape)."""
    base, options = parse_spec(spec)
    layers = options.get("layers")
    config = Path(spec) / "config.json"
    if config.is_file():
        c = json.loads(config.read_text())
        known = dict(
            layers=c["num_hidden_layers"], hidden=c["hidden_size"], ffn=c["intermediate_size"],
            heads=c["num_attention_heads"], kv_heads=c.get("num_key_value_heads", c["num_attention_heads"]),
            vocab=c["vocab_size"], tied=bool(c.get("tie_word_embeddings", False)),
        )  # fmt: skip
    elif base in MODELS:
        known = dict(MODELS[base])
    else:
        raise ValueError(f"model {spec!r}: its shape is unknown offline; give a local directory with a config.json")
    if layers:
        known["layers"] = int(layers)
    return Shape(**known)


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


# ------------------------------------------------------------------------------------------------------ the jobs


def planned_jobs(configfile: str, target: str = "all") -> list[tuple[str, list[str]]]:
    """(rule, outputs) of every job of ``target`` as if nothing existed (`snakemake -n --forceall`)."""
    proc = subprocess.run(  # --nolock: a run asks this from its onstart, while it holds the folder's lock
        [sys.executable, "-m", "snakemake", "-n", "--forceall", "--nolock", target, "--configfile", configfile],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise ValueError(f"snakemake -n {target} --configfile {configfile} failed:\n{proc.stdout[-2000:]}{proc.stderr}")
    jobs, rule = [], None
    for line in proc.stdout.splitlines():
        if line.startswith("rule ") or line.startswith("localrule "):
            rule = line.split()[1].rstrip(":")
        elif line.strip().startswith("output:") and rule:
            jobs.append((rule, [o.strip() for o in line.split(":", 1)[1].split(",")]))
    return jobs


@dataclass
class Cost:
    jobs: int = 0
    generations: int = 0
    prefilled: float = 0
    decoded: float = 0
    loads: int = 0
    seconds: float = 0

    def add(self, other: Cost) -> None:
        for key in vars(self):
            setattr(self, key, getattr(self, key) + getattr(other, key))


class Estimator:
    def __init__(
        self,
        cfg: dict,
        device: Device,
        alpha: float,
        cells_per_process: int = 0,
        engine: str = ENGINE,
        cache: str = "preallocated",
    ):
        """``engine``: how the cells' decode steps run (our engine: one of ``ENGINES``, checked where it is read,
        ``run``); ``cache="dynamic"``: as HF's DynamicCache decoding instead (the paper's own timings, what the
        per-layer cost is calibrated on)."""
        if engine == GRAPHS and not device.cuda:
            raise ValueError(
                f"--engine graphs: CUDA graphs need a GPU, and {device.name} is none (the pipeline refuses "
                "engine: graphs off CUDA); estimate it with --engine eager"
            )
        self.cfg, self.device, self.alpha, self.engine = cfg, device, alpha, engine
        v, d = device.measured.get("verifier"), device.measured.get("drafter")
        self.verifier = Model(shape(cfg["verifier"]), BYTES[cfg["verifier_dtype"]], device, engine, cache, v)
        self.drafter = Model(shape(cfg["drafter"]), BYTES[cfg["drafter_dtype"]], device, engine, cache, d)
        self.trainee = Model(self.drafter.shape, BYTES[cfg["training"].get("dtype", "float32")], device)
        # which process loads a cell's models (workflow/rules/warm.smk): on the CPU the forking warm process, once
        # for all cells; on a GPU the resident process, once per `cells_per_process` cells (0: all of them); with
        # warm_start false, every cell its own
        self.cold = cfg.get("warm_start", True) is False
        self.cells_per_process = 1 if self.cold else cells_per_process
        self.loads_per_cell = 1 if self.cold or device.parallel == 1 else 0
        # forked from the warm process on one thread (evaluation.cells.warm_key): it ran the warm-up once for the
        # models and each drafter's full prefill of a prompt once for all that drafter's cells of the prompt
        self.forked = not self.loads_per_cell and cfg.get("threads", 1) == 1

    def generation(
        self, label: str, context: int, budget: int, gamma: int, new: int, shared: bool, drafter_shared: bool = False
    ) -> tuple:
        """(seconds, tokens prefilled) of one generation of ``new`` tokens after a ``context``-token prompt
        (``shared``: the verifier's prefill copied in; ``drafter_shared``: the drafter's full prefill too)."""
        v, d = self.verifier, self.drafter
        prefill = 0.0 if shared else v.prefill(context)
        if label == AR:  # the verifier's cache holds prompt + new tokens (decoding.autoregressive)
            return prefill + new * v.step(1, context + new / 2, context + new), context
        rounds = new / tokens_per_round(self.alpha, gamma)
        verify = v.step(gamma + 1, context + new / 2, context + new + gamma + 1)
        if label == LOOKUP:  # the copier: no model of its own, its lookups cost next to nothing
            return prefill + rounds * verify, context
        kept = min(budget, context) if budget else context  # the drafter's sparse prefix (B), or all of it
        # each cache holds its prefix + new tokens + γ + 1 (decoding.speculative, drafters.SparseDrafter)
        draft = gamma * d.step(1, kept + new / 2, kept + new + gamma + 1)
        own = 0.0 if drafter_shared else d.prefill(context)
        return prefill + own + rounds * (draft + verify), (1 if drafter_shared else 2) * context

    def samples(self, dataset: str) -> int:
        return self.cfg["datasets"][dataset].get("samples", self.cfg["samples"])

    def cell(self, label: str, dataset: str, context: int, budget: int, gamma: int, first: bool = True) -> Cost:
        """One cell; ``first``: the first of its drafter's cells of these prompts (forked: it pays their full
        prefills in the warm process, the others cut them)."""
        c = self.cfg
        label, tokens = split_length_label(label)  # LABEL~N: the long-generation control, N new tokens
        new = tokens or c["max_new_tokens"]
        shared = bool(c.get("share_verifier_prefill"))
        runs = self.samples(dataset) * c.get("repeats", 1)
        ours = label not in self.cfg.get("baselines", {}).get("enabled", [])  # AR or the paper's drafter
        drafter_shared = self.forked and ours and label != AR
        timed, prefilled = self.generation(label, context, budget, gamma, new, shared, drafter_shared)
        if drafter_shared and first:
            timed += self.drafter.prefill(context)
            prefilled += context
        warmups = 0 if self.forked and ours else c.get("warmup", 1)  # forked: once for the models, in the warm process
        warm_len = c.get("warmup_prompt_tokens") or context
        warm, _ = self.generation(label, warm_len, budget, gamma, c.get("warmup_tokens") or c["max_new_tokens"], False)
        loads = self.loads_per_cell * (0 if label == "ar" else 1)  # a drafter per cell: the verifier per process
        load_s = loads * self.drafter.load_s
        return Cost(
            jobs=1,
            generations=runs + warmups,
            prefilled=runs * prefilled,
            decoded=runs * new,
            loads=loads,
            seconds=runs * timed + warmups * warm + load_s,
        )

    def verifier_loads(self, cells: int) -> Cost:
        """The verifier loads of ``cells`` grid cells: one per process that runs them (none on the CPU, where the
        forking warm process loaded it)."""
        if not self.loads_per_cell or not cells:
            return Cost()
        loads = math.ceil(cells / (self.cells_per_process or cells))
        return Cost(0, 0, 0, 0, loads, loads * self.verifier.load_s)

    def prefill_job(self, dataset: str, context: int) -> Cost:
        runs = self.samples(dataset) * PREFILL_RUNS  # timed runs of each prompt (budgetdraft prefill --repeats)
        return Cost(1, runs, runs * context, 0, 1, runs * self.verifier.prefill(context) + self.verifier.load_s)

    def targets(self, stage: str) -> Cost:
        data = self.cfg["base_drafter"]["data"] if stage == "base" else self.cfg["training_data"]
        if stage == "base" and self.cfg["base_drafter"].get("teacher", "text") == "text":
            return Cost(jobs=1)
        length = data["prefix_len"] + data["cont_len"]
        per = self.verifier.prefill(length, logits=data["cont_len"])
        n = data["sequences"]
        return Cost(1, n, n * length, 0, 1, n * per + self.verifier.load_s)

    def training(self, hparams: dict, data: dict) -> Cost:
        p, c = data["prefix_len"], data["cont_len"]
        branches = 1 + (float(hparams.get("lambda_c", TrainingHparams.lambda_c)) > 0)  # L_C's branch when λ > 0
        measured = self.device.measured.get("train_step_s", {}).get(json.dumps([p, c, branches]))
        step = measured or self.trainee.prefill(p) + branches * self.trainee.forward(c, p, logits=c, train=True)
        steps = int(hparams["steps"])
        return Cost(1, 0, steps * (p + c), 0, 1, steps * step + self.trainee.load_s)

    def profile(self, drafters: int) -> Cost:
        """One positional profile job: ``drafters`` drafters (or, with 0, the verifier) over every longest prompt,
        full cache, logits at every position (budgetdraft.evaluation.profile)."""
        longest = max(self.cfg["contexts"].values())
        prompts = sum(self.samples(d) for d in self.cfg["datasets"])
        model, n = (self.drafter, drafters) if drafters else (self.verifier, 1)
        return Cost(
            1, 0, prompts * n * longest, 0, n, prompts * n * model.prefill(longest, logits=longest) + model.load_s
        )

    def eagle3(self) -> Cost:
        hp = self.cfg["baselines"].get("eagle3", {}).get("training", {})
        data = self.cfg["training_data"]
        length = data["prefix_len"] + data["cont_len"]
        steps = int(hp.get("steps", 0))
        per = self.verifier.prefill(length, logits=0) + self.drafter.forward(data["cont_len"], 0, train=True)
        return Cost(1, 0, steps * length, 0, 1, steps * per + self.verifier.load_s)


def costs(cfg: dict, jobs, est: Estimator) -> dict[str, Cost]:
    """Per stage (cells by label and context), the summed cost of the planned jobs."""
    out: dict[str, Cost] = defaultdict(Cost)
    tr = cfg["training"]
    cells = sum(rule in ("eval_cell", "eval_replicate_cell") for rule, _ in jobs)
    if loads := est.verifier_loads(cells):
        out["cells: verifier loads"] = loads
    prefilled = set()  # (label, replicate, dataset, context): a drafter whose full prefills of the prompts are made
    for rule, outputs in jobs:
        path = outputs[0]
        if rule in ("eval_cell", "eval_replicate_cell"):
            m = path_key(path)  # the cell a path names, read where the path is formatted (evaluation.cellfile)
            context = cfg["contexts"][m["context"]]
            group = (m["label"], m["replicate"], m["dataset"], m["context"])
            first = group not in prefilled
            prefilled.add(group)
            out[f"cells {m['label'].split('@')[0]} {m['context']}"].add(
                est.cell(m["label"], m["dataset"], context, m["budget"], m["gamma"], first)
            )
        elif rule == "verifier_prefill":
            dataset, context = Path(path).parent.name, Path(path).stem
            out["verifier prefills"].add(est.prefill_job(dataset, cfg["contexts"][context]))
        elif rule == "targets":
            out["targets"].add(est.targets(Path(path).stem))
        elif rule == "train_base":
            hp = {**tr, **cfg["base_drafter"]["training"], "lambda_c": 0}
            out["base drafters"].add(est.training(hp, cfg["base_drafter"]["data"]))
        elif rule == "train":
            variant = Path(path).name
            out["variants"].add(est.training({**tr, **cfg["variants"][variant]}, cfg["training_data"]))
        elif rule == "train_eagle3":
            out["EAGLE-3 head"].add(est.eagle3())
        elif rule == "export_model":
            model = est.verifier if path.endswith("verifier") else est.drafter
            out["exports"].add(Cost(1, 0, 0, 0, 1, 2 * model.load_s))
        elif rule in ("interpolate", "interpolate_shared"):  # PI's drafter: the base drafter re-exported
            out["exports"].add(Cost(1, 0, 0, 0, 1, 2 * est.drafter.load_s))
        elif rule == "profile_targets":
            out["positional profiles"].add(est.profile(0))
        elif rule == "profile":
            drafters = 1 + len(cfg["variants"]) + ("pi" in cfg.get("controls", []))
            out["positional profiles"].add(est.profile(drafters))
    for stage in out.values():  # every job's fixed cost beyond its model work (measured here; 0 for a named device)
        stage.seconds += stage.jobs * est.device.job_s
    return dict(out)


def peak_gb(cfg: dict, est: Estimator, context: int) -> dict:
    """Peak memory of a cell at ``context`` tokens: both models' weights, the verifier's KV cache, the drafter's full
    prefix cache (built before it is sparsified), and the verifier's widest prefill activation (the MLP's)."""
    v, d = est.verifier, est.drafter
    new = cfg["max_new_tokens"]
    parts = {
        "verifier weights": v.shape.params * v.dtype_bytes,
        "verifier KV cache": v.shape.kv_bytes(context + new, v.dtype_bytes),
        "drafter weights + prefix cache": d.shape.params * d.dtype_bytes + d.shape.kv_bytes(context, d.dtype_bytes),
        "prefill activations": 3 * context * v.shape.ffn * v.dtype_bytes,
    }
    return {k: b / 2**30 for k, b in parts.items()}


def check_fits(cfg: dict, est: Estimator, gpu: str) -> None:
    for label, context in cfg["contexts"].items():
        parts = peak_gb(cfg, est, context)
        if sum(parts.values()) > est.device.memory_gb:
            detail = " + ".join(f"{k} {v:.1f} GB" for k, v in parts.items())
            raise ValueError(
                f"contexts.{label} = {context}: {detail} = {sum(parts.values()):.1f} GB does not fit {gpu}'s "
                f"{est.device.memory_gb:g} GB"
            )


# ------------------------------------------------------------------------------------------------------ report


def report(cfg: dict, stages: dict[str, Cost], est: Estimator, gpu: str) -> str:
    dev = est.device
    lines = [
        f"Estimate for {gpu} ({dev.name}), engine {est.engine}; acceptance α = {est.alpha} in every speculative cell",
        "",
        "| stage | jobs | generations | tokens prefilled | tokens decoded | model loads | hours |",
        "|---|---|---|---|---|---|---|",
    ]
    total = Cost()
    for name, c in sorted(stages.items(), key=lambda kv: (kv[0].startswith("cells"), kv[0])):
        total.add(c)
        lines.append(
            f"| {name} | {c.jobs:,} | {c.generations:,} | {c.prefilled:,.0f} | {c.decoded:,.0f} | {c.loads:,} | "
            f"{c.seconds / 3600:.2f} |"
        )
    wall = total.seconds / dev.parallel
    largest = max(cfg["contexts"], key=cfg["contexts"].get)
    peak = peak_gb(cfg, est, cfg["contexts"][largest])
    lines += [
        f"| **total** | {total.jobs:,} | {total.generations:,} | {total.prefilled:,.0f} | {total.decoded:,.0f} | "
        f"{total.loads:,} | {total.seconds / 3600:.2f} |",
        "",
        f"Wall time: {wall / 3600:.2f} h ({dev.parallel} job(s) at a time; "
        + (
            f"each job's fixed {dev.job_s:.2f} s measured here, Snakemake's own 0.2 s included)."
            if dev.job_s
            else "Snakemake's own time not included)."
        ),
        f"Peak memory of the largest cell ({largest}): {sum(peak.values()):.1f} GB = "
        + " + ".join(f"{k} {v:.1f}" for k, v in peak.items()),
        "",
        "Assumptions:",
        f"- {dev.basis}.",
        f"- matmul {dev.flops / 1e12:.2f} TFLOP/s in fp16 / bf16, {dev.flops32 / 1e12:.2f} in fp32, memory {dev.bandwidth / 1e9:.0f} GB/s, "
        f"{dev.layer_overhead_s * 1e3:.2f} ms per layer per forward, models loaded at {dev.disk / 1e9:.1f} GB/s.",
        "- a forward takes max(FLOPs / throughput, bytes / bandwidth) + layers x overhead; its bytes are the weights "
        "and the KV cache it attends over, read once (pre-allocated: written in place, never copied); training steps "
        "cost 3x a forward.",
        f"- engine {est.engine}: a decode step is one fixed shape over the whole pre-allocated cache (prompt + new "
        f"tokens + γ + 1, rounded up to {SLOT_ROUNDING} slots, masked), "
        + (
            "with the per-layer overhead (eager: op by op)."
            if est.engine == EAGER
            else "without the per-layer overhead (graphs: one CUDA graph a step; compiling and capturing each "
            "shape in a cell's warm-up is not costed); prefills and training run eagerly."
        ),
        "- a speculative round: γ drafter steps on its sparse cache (B kept + new tokens + γ + 1 slots) and one "
        "verifier step of γ + 1 tokens, (1 − α^(γ+1)) / (1 − α) tokens per round; TriForce and EAGLE-3 cells are costed as SD.",
        (
            "- grid cells: on the CPU the forking warm process loads each model once; on a GPU each cell loads its "
            "drafter and the resident process loads the verifier once "
            + (f"per {est.cells_per_process} cells" if est.cells_per_process else "for the whole grid")
            + (" (warm_start: false: once per cell)" if est.cold else "")
            + "."
        ),
    ]
    return "\n".join(lines) + "\n"


HERE = "here"  # --gpu here: this machine, measured (budgetdraft.pipeline.machine)
PROFILE_CORES = 2  # profiles/default's cores: the jobs a local run runs side by side


def default_parallel(cfg: dict) -> int:
    """Jobs a local run runs side by side on this machine: profiles/default's cores, at most the cores visible, each
    job its config's threads."""
    from budgetdraft.pipeline.machine import cores

    return max(1, min(cores(), PROFILE_CORES) // max(1, int(cfg.get("threads", 1))))


def prediction(configfile: str, target: str = "all") -> str:
    """One line: the wall time of ``target`` from scratch under ``configfile`` on this machine, measured here (the
    line `snakemake all` prints before its first job)."""
    cfg = yaml.safe_load(Path(configfile).read_text())
    from budgetdraft.pipeline.machine import here

    parallel = default_parallel(cfg)
    device = here(cfg, parallel, say=lambda line: print(f"budgetdraft: {line}", file=sys.stderr, flush=True))
    est = Estimator(cfg, device, float(cfg.get("expected_acceptance", 0.3)), 0, cfg.get("engine", ENGINE))
    seconds = sum(c.seconds for c in costs(cfg, planned_jobs(configfile, target), est).values()) / device.parallel
    return (
        f"budgetdraft: `snakemake {target}` of {configfile} from scratch on {device.name}, {parallel} job(s) at a "
        f"time: about {seconds / 3600:.2f} h ({seconds / 60:.0f} min), predicted from this machine's own timings "
        f"(python -m budgetdraft estimate --configfile {configfile}: the table and every assumption)"
    )


def cost_report(
    configfile: str,
    gpu: str,
    alpha: float,
    engine: str | None,
    target: str,
    cells_per_process: int,
    parallel: int = 0,
    remeasure: bool = False,
) -> str:
    """The cost of the jobs of ``target`` under the config ``configfile`` on the device ``gpu`` (one of ``DEVICES``,
    or ``here``: this machine, measured, with ``parallel`` jobs side by side, 0: `default_parallel`), each stage's
    row and every assumption: speculative cells accept at rate ``alpha``, decode steps run on ``engine`` (None: the
    config's), one resident process runs ``cells_per_process`` GPU cells (0: all)."""
    cfg = yaml.safe_load(Path(configfile).read_text())
    alpha = float(cfg.get("expected_acceptance", 0.3)) if alpha is None else alpha
    if not 0 <= alpha <= 1:
        raise ValueError(f"--alpha {alpha}: an acceptance rate is between 0 and 1")
    if cells_per_process < 0:
        raise ValueError(f"--cells-per-process {cells_per_process}: must be >= 0")
    engine = engine or cfg.get("engine", ENGINE)  # --engine is checked when parsed, the config's here
    if engine not in ENGINES:
        raise ValueError(f"engine = {engine!r} in {configfile}: one of {', '.join(ENGINES)}")
    if gpu == HERE:
        from budgetdraft.pipeline.machine import here

        device = here(cfg, parallel or default_parallel(cfg), remeasure, say=lambda line: print(line, file=sys.stderr))
    else:
        device = DEVICES[gpu]
    est = Estimator(cfg, device, alpha, cells_per_process, engine)
    check_fits(cfg, est, gpu)
    stages = costs(cfg, planned_jobs(configfile, target), est)
    if math.isnan(sum(c.seconds for c in stages.values())):
        raise ValueError("the estimate is undefined (NaN): check the config's lengths and steps")
    return report(cfg, stages, est, gpu)
