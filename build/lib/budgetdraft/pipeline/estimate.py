"""What a configuration will cost before it runs: a roofline model of every stage on a named device.

    python -m budgetdraft estimate --configfile config/paper.yaml --gpu a100-80g
    python -m budgetdraft estimate --configfile config/config.yaml --gpu cpu

The jobs are the workflow's own: a forced dry run (`snakemake -n --forceall`) of the target lists every job and
output, so the grid has one home (budgetdraft.pipeline.plan). The workflow is the config's own (`Workflow`: the
folder above the config file that holds a Snakefile, else the working directory's), and so is its schema, else the
one the package ships; the dry run runs in the background while this machine's probe imports what it needs. Each
job is then costed from the models' shapes (a local directory's config.json, a hub's when readable offline, else
`MODELS`: budgetdraft.pipeline.roofline) and the config: a forward pass takes the longer of its FLOPs at the
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
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import yaml

from budgetdraft.base import methods
from budgetdraft.base.defaults import EAGER, ENGINE, ENGINES, GRAPHS, PREFILL_RUNS, SLOT_ROUNDING
from budgetdraft.base.names import SHARED
from budgetdraft.evaluation.cellfile import path_key
from budgetdraft.evaluation.cellspec import CellSpec
from budgetdraft.pipeline import gpusteps
from budgetdraft.pipeline.configcheck import check_config
from budgetdraft.pipeline.plan import Plan
from budgetdraft.pipeline.roofline import BYTES, DEVICES, Device, Model, served_shape, tokens_per_round
from budgetdraft.training.hparams import TrainingHparams

# the rules that make a drafter by exporting another again (budgetdraft.base.methods: a drafter kind's cost line)
EXPORTED_DRAFTERS = {rule for kind in methods.KINDS.values() if kind.cost == methods.EXPORT for rule in kind.rules}
# the config schema as the package ships it (a link to workflow/schemas/config.schema.yaml, its one home, which the
# wheel holds as a file): the schema of a config whose workflow has none of its own
PACKAGED_SCHEMA = Path(__file__).with_name("config.schema.yaml")
SNAKEFILES = ("Snakefile", "workflow/Snakefile")  # where Snakemake looks for a workflow's Snakefile
WORKFLOW_SCHEMA = "workflow/schemas/config.schema.yaml"  # a workflow's config schema, which its Snakefile reads
DRY_RUN_S = 300  # seconds the workflow's dry run may take (the paper grid's: 9 s on a 2-core CPU) before it is ended

# ------------------------------------------------------------------------------------------------------ the jobs


@dataclass(frozen=True)
class Workflow:
    """The workflow a config belongs to: ``root`` the folder holding its Snakefile (None: none was found, as in a
    wheel install run outside a checkout) and the schema its config is checked against."""

    root: Path | None
    schema: Path

    @classmethod
    def of(cls, configfile: str) -> Workflow:
        """The first folder from ``configfile``'s own upwards that holds a Snakefile, else the working directory
        when it holds one (where Snakemake itself looks); its schema, else the package's (`PACKAGED_SCHEMA`)."""
        folders = [*Path(configfile).resolve().parents, Path.cwd()]
        root = next((f for f in folders if any((f / name).is_file() for name in SNAKEFILES)), None)
        own = root / WORKFLOW_SCHEMA if root else None
        return cls(root, own if own and own.is_file() else PACKAGED_SCHEMA)


class Planning:
    """The jobs of ``target`` as if nothing existed (`snakemake -n --forceall` of the config's `Workflow`), planned
    in a process started at once, so that the caller works beside it; `jobs` waits for it and reads them."""

    def __init__(self, configfile: str, target: str = "all"):
        self.configfile, self.target = configfile, target
        self.workflow = Workflow.of(configfile)
        root = self.workflow.root
        if root is None:
            raise ValueError(
                f"--configfile {configfile}: no Snakefile in its folder, a folder above it or the working directory: "
                "the estimate plans the workflow's jobs with a dry run of it (snakemake -n), and an installed package "
                "ships no workflow; run it in a checkout of the workflow (Snakefile, workflow/, config/)"
            )
        self.output = tempfile.TemporaryFile("w+")  # a file, not a pipe: nobody reads it while the caller works
        self.proc = subprocess.Popen(  # --nolock: a run asks this from its onstart, while it holds the folder's lock
            [sys.executable, "-m", "snakemake", "-n", "--forceall", "--nolock", target,
             "--configfile", os.path.abspath(configfile)],
            cwd=root, stdout=self.output, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def wait(self) -> None:
        """Wait for the dry run, at most `DRY_RUN_S`: one that has not planned by then is ended and refused in one
        line, instead of an estimate (or the `snakemake all` that asked for it) waiting on it for ever."""
        try:
            self.proc.wait(timeout=DRY_RUN_S)
        except subprocess.TimeoutExpired:
            self.stop()
            raise ValueError(
                f"snakemake -n {self.target} --configfile {self.configfile} (in {self.workflow.root}) had planned no "
                f"jobs after {DRY_RUN_S:g} s and was ended: run it yourself to see where it stops"
            ) from None

    def stop(self) -> None:
        """End the dry run if it is still running (the estimate failed before it needed it)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.output.close()

    def jobs(self) -> list[tuple[str, list[str]]]:
        """(rule, outputs) of every planned job; a failed dry run is refused with Snakemake's own words."""
        self.wait()
        self.output.seek(0)
        text = self.output.read()
        if self.proc.returncode != 0:
            raise ValueError(f"snakemake -n {self.target} --configfile {self.configfile} failed:\n{text[-3000:]}")
        jobs, rule = [], None
        for line in text.splitlines():
            if line.startswith("rule ") or line.startswith("localrule "):
                rule = line.split()[1].rstrip(":")
            elif line.strip().startswith("output:") and rule:
                jobs.append((rule, [o.strip() for o in line.split(":", 1)[1].split(",")]))
        return jobs


def planned_jobs(configfile: str, target: str = "all") -> list[tuple[str, list[str]]]:
    """(rule, outputs) of every job of ``target`` as if nothing existed (`Planning`, waited for)."""
    planning = Planning(configfile, target)
    try:
        return planning.jobs()
    finally:
        planning.stop()


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
        gpu_measured: bool = True,
        schema: Path = PACKAGED_SCHEMA,
    ):
        """``engine``: how the cells' decode steps run (our engine: one of ``ENGINES``, checked where it is read,
        ``run``); ``cache="dynamic"``: as HF's DynamicCache decoding instead (the paper's own timings, what the
        per-layer cost is calibrated on); ``gpu_measured``: on a GPU, our engine's steps as bench/gpu_decode.py
        measured them where it measured these models (`budgetdraft.pipeline.gpusteps`), else the roofline's;
        ``schema``: the config's workflow's (`Workflow`), which the plan checks the config against."""
        if engine == GRAPHS and not device.cuda:
            raise ValueError(
                f"--engine graphs: CUDA graphs need a GPU, and {device.name} is none (the pipeline refuses "
                "engine: graphs off CUDA); estimate it with --engine eager"
            )
        self.cfg, self.device, self.alpha, self.engine, self.schema = cfg, device, alpha, engine, schema
        v, d = device.measured.get("verifier"), device.measured.get("drafter")
        self.verifier = Model(served_shape(cfg, "verifier"), BYTES[cfg["verifier_dtype"]], device, engine, cache, v)
        self.drafter = Model(served_shape(cfg, "drafter"), BYTES[cfg["drafter_dtype"]], device, engine, cache, d)
        # on a GPU our engine's steps cost what bench/gpu_decode.py measured, where it measured these models
        dtypes = (cfg["verifier_dtype"], cfg["drafter_dtype"])
        found = None
        if gpu_measured and device.cuda and cache == "preallocated":
            found = gpusteps.applying(self.verifier.shape, self.drafter.shape, dtypes, engine)
        self.gpu_steps = found[0] if found else None
        if self.gpu_steps:
            self.verifier = replace(self.verifier, slowdown=found[1])
            self.drafter = replace(self.drafter, slowdown=found[2]) if found[2] else self.drafter
        self.trainee = Model(self.drafter.shape, BYTES[cfg["training"].get("dtype", "float32")], device)
        # which process loads a cell's models (workflow/rules/warm.smk): on the CPU the forking warm process, once
        # for all cells; on a GPU the resident process, once per `cells_per_process` cells (0: all of them); with
        # warm_start false, every cell its own
        self.cold = cfg.get("warm_start", True) is False
        self.cells_per_process = 1 if self.cold else cells_per_process
        self.loads_per_cell = 1 if self.cold or device.parallel == 1 else 0
        # the forking warm process runs the cells (the CPU, warm_start on): the cells it may share a warm-up and a
        # drafter's full prefill with are the ones CellSpec says (the rule the warm process itself follows)
        self.forking = not self.loads_per_cell

    @cached_property
    def plan(self) -> Plan:
        """The plan of the config (checked as the Snakefile checks it: the schema's defaults filled in)."""
        checked = json.loads(json.dumps(self.cfg))
        check_config(checked, schema=self.schema)
        return Plan(checked)

    def spec(self, label: str, dataset: str, context: str, budget: int, gamma: int, replicate=None) -> CellSpec:
        """The plan's CellSpec of a cell (``context``: its label, e.g. "1K"), on the estimate's engine unless the
        label names its own (LABEL+ENGINE)."""
        spec = self.plan.jobs.spec(label, dataset, context, budget, gamma, replicate)
        return replace(spec, engine=self.plan.labels.part(label).engine or self.engine)

    def generation(
        self, cost: str, context: int, budget: int, gamma: int, new: int, shared: bool, drafter_shared: bool = False
    ) -> tuple:
        """(seconds, tokens prefilled) of one generation of ``new`` tokens after a ``context``-token prompt, on the
        cost line ``cost`` of its decoder (``Decoder.cost``, budgetdraft.base.methods.COSTS; ``shared``: the
        verifier's prefill copied in; ``drafter_shared``: the drafter's full prefill too)."""
        v, d = self.verifier, self.drafter
        prefill = 0.0 if shared else v.prefill(context)
        if cost == methods.VERIFIER_STEPS:  # the verifier's cache holds prompt + new tokens (decoding.autoregressive)
            return prefill + new * v.step(1, context + new / 2, context + new), context
        rounds = new / tokens_per_round(self.alpha, gamma)
        verify = v.step(gamma + 1, context + new / 2, context + new + gamma + 1)
        if cost == methods.FREE_DRAFTS:  # the copier: no model of its own, its lookups cost next to nothing
            return prefill + rounds * verify, context
        kept = min(budget, context) if budget else context  # the drafter's sparse prefix (B), or all of it
        # each cache holds its prefix + new tokens + γ + 1 (decoding.speculative, drafters.SparseDrafter)
        draft = gamma * d.step(1, kept + new / 2, kept + new + gamma + 1)
        own = 0.0 if drafter_shared else d.prefill(context)
        return prefill + own + rounds * (draft + verify), (1 if drafter_shared else 2) * context

    def samples(self, dataset: str) -> int:
        return self.cfg["datasets"][dataset].get("samples", self.cfg["samples"])

    def cell(self, spec: CellSpec, first: bool = True) -> Cost:
        """One cell; ``first``: the first of its drafter's cells of these prompts (forked: it pays their full
        prefills in the warm process, the others cut them)."""
        context, new, cost = self.cfg["contexts"][spec.context], spec.max_new_tokens, spec.decoder.cost
        runs = self.samples(spec.dataset) * spec.repeats
        forked = self.forking and spec.shares_warm_up()  # its warm-up run once for the models, in the warm process
        drafter_shared = forked and spec.shares_drafter_prefill()
        budget, gamma = spec.budget, spec.gamma
        timed, prefilled = self.generation(
            cost, context, budget, gamma, new, bool(spec.verifier_prefill), drafter_shared
        )
        if drafter_shared and first:
            timed += self.drafter.prefill(context)
            prefilled += context
        warmups = 0 if forked else spec.warmup
        eager = spec.engine == EAGER  # as evaluation.cells.warm_up: a short warm-up on the eager engine
        warm_len = (spec.warmup_prompt_tokens if eager else 0) or context
        warm_new = (spec.warmup_tokens if eager else 0) or new
        warm, _ = self.generation(cost, warm_len, budget, gamma, warm_new, False)
        loads = self.loads_per_cell * (spec.drafter is not None)  # a drafter per cell: the verifier per process
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
            replicate = None if m["replicate"] == SHARED else m["replicate"]
            spec = est.spec(m["label"], m["dataset"], m["context"], m["budget"], m["gamma"], replicate)
            group = (m["label"], m["replicate"], m["dataset"], m["context"])
            first = group not in prefilled
            prefilled.add(group)
            out[f"cells {m['label'].split('@')[0]} {m['context']}"].add(est.cell(spec, first))
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
        elif rule in EXPORTED_DRAFTERS:  # a drafter kind made by exporting the base drafter again (e.g. PI's)
            out["exports"].add(Cost(1, 0, 0, 0, 1, 2 * est.drafter.load_s))
        elif rule == "positions_targets":
            out["positional profiles"].add(est.profile(0))
        elif rule == "positions":  # results/positions/rR.parquet: the drafters the plan profiles in replicate R
            drafters = est.plan.drafters.profiled(int(Path(path).stem.removeprefix("r")))
            out["positional profiles"].add(est.profile(len(drafters)))
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


def engine_line(est: Estimator) -> str:
    """The report's assumption about the decode steps: our engine's fixed shape, and whose steps cost it (measured
    on a GPU: `gpusteps`; else the roofline's, its per-layer cost under eager)."""
    line = (
        f"- engine {est.engine}: a decode step is one fixed shape over the whole pre-allocated cache (prompt + new "
        f"tokens + γ + 1, rounded up to {SLOT_ROUNDING} slots, masked), "
    )
    if est.gpu_steps:
        return line + est.gpu_steps.says(est.engine) + " (compiling and capturing in a cell's warm-up not costed)."
    if est.engine == EAGER:
        line += "with the per-layer overhead (eager: op by op)."
    else:
        line += (
            "without the per-layer overhead (graphs: one CUDA graph a step; compiling and capturing each shape in a "
            "cell's warm-up is not costed); prefills and training run eagerly."
        )
    return line + (" No GPU measurement of these models: guessed efficiencies." if est.device.cuda else "")


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
        engine_line(est),
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


def default_parallel(cfg: dict, given: int | None = None) -> int:
    """Jobs a local run runs side by side on this machine: its ``--cores`` (``given``; default profiles/default's),
    at most the cores visible, each job its config's threads."""
    from budgetdraft.pipeline.machine import cores

    return max(1, min(cores(), given or PROFILE_CORES) // max(1, int(cfg.get("threads", 1))))


# How old a cached probe of this machine the prediction before a run trusts (seconds): an older one is probed again
# (~16 s on 2 cores). A VM's speed moves 10-30 % within a day: a probe cached that morning predicted 65 min for a run
# of 48.8 (0.75), one taken after it 59 (bench/README.md, "The 45 minutes again"). `estimate` itself keeps any age
# (--remeasure probes again).
PREDICTION_MAX_AGE_S = 3600


def prediction(configfile: str, target: str = "all", cores: int | None = None) -> str:
    """One line: the wall time of ``target`` from scratch under ``configfile`` on this machine with ``cores`` (the
    run's ``--cores``), measured here with a probe at most `PREDICTION_MAX_AGE_S` old (the line `snakemake all`
    prints before its first job)."""
    cfg = yaml.safe_load(Path(configfile).read_text())
    parallel = default_parallel(cfg, cores)
    alpha, engine = float(cfg.get("expected_acceptance", 0.3)), cfg.get("engine", ENGINE)
    est, stages = planned_costs(
        configfile, target, lambda device, schema: Estimator(cfg, device, alpha, 0, engine, schema=schema),
        cfg, parallel, say=lambda line: print(f"budgetdraft: {line}", file=sys.stderr, flush=True),
        max_age_s=PREDICTION_MAX_AGE_S,
    )  # fmt: skip
    seconds = sum(c.seconds for c in stages.values()) / est.device.parallel
    return (
        f"budgetdraft: `snakemake {target}` of {configfile} from scratch on {est.device.name}, {parallel} job(s) at a "
        f"time: about {seconds / 3600:.2f} h ({seconds / 60:.0f} min), predicted from this machine's own timings "
        f"(python -m budgetdraft estimate --configfile {configfile}: the table and every assumption)"
    )


def planned_costs(configfile: str, target: str, estimator, cfg: dict, parallel: int, device: Device | None = None,
                  remeasure: bool = False, say=print,
                  max_age_s: float | None = None) -> tuple[Estimator, dict[str, Cost]]:  # fmt: skip
    """(the estimator, each stage's cost) of the jobs of ``target`` under ``configfile`` (``cfg``, as read), the
    estimator ``estimator(device, schema)`` of ``device`` or, None, of this machine, measured with ``parallel`` jobs
    side by side (`budgetdraft.pipeline.machine.here`) while the workflow's dry run plans the jobs (`Planning`): the
    probe imports and starts its warm process beside the dry run, and times nothing until the dry run is done."""
    from budgetdraft.pipeline.machine import check_measurable, here

    if device is None:
        check_measurable(cfg.get("device", "cpu"))  # before the dry run: a config this machine cannot measure
    planning = Planning(configfile, target)
    try:
        device = device or here(cfg, parallel, remeasure, say, quiet=planning.wait, max_age_s=max_age_s)
        est = estimator(device, planning.workflow.schema)
        return est, costs(cfg, planning.jobs(), est)
    finally:
        planning.stop()


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

    def estimator(device: Device, schema: Path) -> Estimator:
        est = Estimator(cfg, device, alpha, cells_per_process, engine, schema=schema)
        check_fits(cfg, est, gpu)
        return est

    est, stages = planned_costs(
        configfile, target, estimator, cfg, parallel or default_parallel(cfg), None if gpu == HERE else DEVICES[gpu],
        remeasure, say=lambda line: print(line, file=sys.stderr),
    )  # fmt: skip
    if math.isnan(sum(c.seconds for c in stages.values())):
        raise ValueError("the estimate is undefined (NaN): check the config's lengths and steps")
    return report(cfg, stages, est, gpu)
