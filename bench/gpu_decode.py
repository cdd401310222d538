"""One decode step of the paper's two models at full size on a GPU: our engines (eager, graphs) beside transformers'
``generate`` (dynamic cache; static cache + compile) and the memory-bandwidth bound, with the two ratios that decide
a speculative speedup: a verify of γ + 1 tokens and a drafter step, each per AR step (issue 28, item 5).

    python bench/gpu_decode.py                                  # 4K / 8K / 16K = 3,800 / 8,192 / 16,384 tokens
    python bench/gpu_decode.py --contexts 4096 8192 16384 --out gpu_decode.md
    python bench/gpu_decode.py --quick                          # 3 repeats of 16 steps (default 5 of 32)
    python bench/gpu_decode.py --smoke                          # tiny models on the CPU: the code path, no numbers
    python bench/gpu_decode.py --attentions sdpa flex           # our rows under each attention (the CUDA default)
    python bench/gpu_decode.py --capacities static dynamic      # graphs compiled per capacity, or once (the default)

Models: the published config.json of the paper's verifier (NousResearch/Yarn-Llama-2-7b-128k: hidden 4,096, 32
layers, 32 heads, MLP 11,008, vocabulary 32,000, YaRN x32 over 4,096 positions, 131,072 positions) in float16 and
of its drafter (JackFram/llama-68m: hidden 768, 2 layers, 12 heads, MLP 3,072, 2,048 positions) in float32, the
paper's dtypes, built with random weights straight on the device (no files, no hub; ``tests/paper_models.py``
holds both configs), with the attention ``load_model`` gives every model (``budgetdraft.decoding.attention.NAME``). One
drafter object per budget, so that each keeps its cache (and, under ``graphs``, its captured steps) from one
context to the next: its capacity depends on B alone.

Our rows run under each attention of ``--attentions`` (``budgetdraft.decoding.attention.ATTENTIONS``): ``sdpa``, the
default (rows "eager", "graphs"), and ``flex``, FlexAttention (rows "eager flex", "graphs flex"), set on the verifier
and the drafters alike; on CUDA its step runs the fused Triton kernel under both engines (``graphs`` compiles it with
the step, ``eager`` compiles it alone: ``attention.flex_kernel``).

Under ``graphs`` each attention's rows run twice (``--capacities``): compiled once per capacity, today's engine
(rows "graphs", "graphs flex"), and compiled once for every capacity, the capacity a dynamic dimension
(``budgetdraft.decoding.engine.DYNAMIC_CAPACITY``; rows "graphs any-capacity", "graphs flex any-capacity"). The
contexts run in ascending order, so the second context's warm-up shows what a new capacity costs each of them: a
compilation, or only a capture.

Per context (a prompt of random token ids), for each attention and engine (``budgetdraft.decoding.engine``) on a
cache of prompt + 256 + γ + 1 slots (a grid cell's: 256 new tokens, γ = 5):
- AR step: ``Verifier.hidden`` of one token + ``greedy_top2``, the body of ``decoding.autoregressive``'s loop
  (one read of the device a step), ``--steps`` steps a repeat, the cache rolled back to the prompt after each;
- verify: ``Verifier.check`` of the last token + γ random drafts (one step of γ + 1 tokens, the LM head, one read,
  the rollback), as ``speculative`` runs it; shown ÷ the AR step;
- c: ``SparseDrafter.draft`` of γ tokens (TopKChunks, B = 256 / 1,024 / 4,096 kept from the prompt), per drafter
  step ÷ the AR step of the same engine;
- peak: ``torch.cuda.max_memory_allocated`` from before the prefill to the end of that engine's measurements.
transformers' ``generate`` (greedy, EOS off, stock ``sdpa`` attention: what a user of plain transformers gets),
per step = (time of N tokens − time of 1 token) ÷ (N − 1), the pair timed in every repeat after a warm-up pair:
with its dynamic cache, and with ``cache_implementation="static"``, whose decode steps transformers compiles itself
on CUDA (``torch.compile`` mode reduce-overhead). The bound: bytes one AR step must read (the verifier's weights +
its KV of the prompt, as ``DecodeStats.record_bound``) ÷ the device's bandwidth (``measure.device_bandwidth``: best
of 5 copies of 1 GiB). Each number is the median of its repeats; the second table gives every one's repeats x
steps, min–max, and the seconds of its untimed warm-up (under ``graphs`` that includes compiling and capturing).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

GAMMA = 5
NEW_TOKENS = 256  # the paper's max_new_tokens: every cache holds prompt + 256 + γ + 1 slots, as a grid cell's
CONTEXTS = (3800, 8192, 16384)  # the paper's 4K is 3,800 prompt tokens
BUDGETS = (256, 1024, 4096)
SMOKE_CONTEXTS, SMOKE_BUDGETS = (64, 128), (16, 32, 64)
CAPACITIES = ("static", "dynamic")  # graphs compiled per capacity (today's engine), or once for every capacity
CAPACITY_WORDS = {"static": "per capacity", "dynamic": "once for every capacity (any-capacity)"}
NO_CUDA = "needs a CUDA device; --smoke runs a CPU smoke test"
TARGETS = (  # issue 55's, each a ratio of one run
    "graphs AR step >= 0.68 of the bandwidth bound at 4K and >= 0.6 beyond",
    "graphs AR step <= 0.8x HF generate's static + compile step at every context",
    "eager AR step <= HF generate's dynamic-cache step at every context",
    "verify of γ + 1 = 6 tokens <= 1.1 AR steps (both engines)",
    "c <= 0.03 under graphs and <= 0.06 under eager at B <= 1,024",
    "compile + capture <= 15 s per context (graphs: the untimed first runs of AR, verify and the drafts)",
)


@dataclass
class Sample:
    """Milliseconds per step, one value per timed repeat of ``steps`` steps; ``warmup_s``: the untimed first run."""

    values: list[float]
    steps: int
    warmup_s: float = math.nan

    @property
    def ms(self) -> float:
        return statistics.median(self.values)

    def spread(self) -> str:
        return f"{min(self.values):.3f}–{max(self.values):.3f}"


@dataclass
class Row:
    context: int
    bound_ms: float = math.nan
    ours: dict[str, dict[str, Sample]] = field(default_factory=dict)  # run (`run_name`) -> {"ar", "verify", "draft B"}
    hf: dict[str, Sample] = field(default_factory=dict)  # "dynamic", "static"
    peak_gb: dict[str, float] = field(default_factory=dict)  # each run ("eager", "graphs flex", ...), "HF dynamic", ...
    profiles: dict[str, dict] = field(default_factory=dict)  # "eager ar", ..., "HF dynamic": `per_step` (--profile)

    def ar(self, run: str) -> float:
        return self.ours[run]["ar"].ms if run in self.ours else math.nan

    def verify_ratio(self, run: str) -> float:
        return self.ours[run]["verify"].ms / self.ar(run) if run in self.ours else math.nan

    def c(self, run: str, budget: int) -> float:
        runs = self.ours.get(run, {})
        return runs[f"draft B={budget}"].ms / self.ar(run) if f"draft B={budget}" in runs else math.nan

    def hf_ms(self, cache: str) -> float:
        return self.hf[cache].ms if cache in self.hf else math.nan

    def warmup_s(self, run: str) -> float:
        """Seconds of the run's untimed first runs at this context (under graphs: compiling and capturing)."""
        runs = self.ours.get(run)
        return sum(s.warmup_s for s in runs.values()) if runs else math.nan

    def as_json(self) -> dict:
        def sample(s: Sample) -> dict:
            return {"ms": s.ms, "values_ms": s.values, "steps": s.steps, "warmup_s": s.warmup_s}

        ours = {engine: {what: sample(s) for what, s in runs.items()} for engine, runs in self.ours.items()}
        hf = {cache: sample(s) for cache, s in self.hf.items()}
        return {"context": self.context, "bound_ms": self.bound_ms, "ours": ours, "hf": hf, "peak_gb": self.peak_gb,
                "profiles": self.profiles}  # fmt: skip


def run_name(engine: str, attention: str, capacity: str = "static") -> str:
    """The key of our rows under ``engine``, ``attention`` and (graphs) ``capacity``: the engine alone under the
    default attention (sdpa), "eager flex", "graphs flex" under another; "graphs any-capacity", "graphs flex
    any-capacity" compiled once for every capacity."""
    name = engine if attention == "sdpa" else f"{engine} {attention}"
    return f"{name} any-capacity" if engine == "graphs" and capacity == "dynamic" else name


def label(tokens: int) -> str:
    return f"{round(tokens / 1024)}K" if tokens >= 1024 else str(tokens)


# ------------------------------------------------------------------------------------------------------- models


def configs(smoke: bool, layers: int = 2) -> tuple[dict, dict]:
    """The verifier's and the drafter's config.json: published, or (``smoke``) cut to a few thousand parameters a
    layer (``layers`` of them) with everything else (rope, positions, vocabulary) as published."""
    from paper_models import LLAMA_68M, YARN_LLAMA_2_7B_128K, yarn_llama_2_7b_128k

    verifier = {k: v for k, v in YARN_LLAMA_2_7B_128K.items() if k != "auto_map"}
    drafter = dict(LLAMA_68M)
    if smoke:
        verifier = {k: v for k, v in yarn_llama_2_7b_128k(heads=1, layers=layers).items() if k != "auto_map"}
        drafter.update(hidden_size=64, intermediate_size=128, num_attention_heads=2)
    return verifier, drafter


def build(config: dict, dtype, device, seed: int):
    """A random-weight LlamaForCausalLM of ``config`` created on ``device`` itself (no CPU copy, no files)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from budgetdraft.decoding import attention

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(LlamaConfig(**config), dtype=dtype)
    model.eval()
    model.set_attn_implementation(attention.NAME)  # what load_model gives every model
    model.generation_config.eos_token_id = None  # every run generates exactly what it is asked for
    return model


@contextlib.contextmanager
def stock_attention(model):
    """transformers' own ``sdpa`` for the HF rows (what a user of plain transformers gets), the model's own
    afterwards."""
    own = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        yield
    finally:
        model.set_attn_implementation(own)


def use_attention(models, attention: str) -> None:
    """Our rows' ``attention`` (a key of ``budgetdraft.decoding.attention.ATTENTIONS``) on every model."""
    from budgetdraft.decoding.attention import ATTENTIONS

    for model in models:
        model.set_attn_implementation(ATTENTIONS[attention])


# ------------------------------------------------------------------------------------------------------ timing


def timed(device, run, repeats: int, steps: int) -> Sample:
    """``run()`` (``steps`` steps) once untimed (warm-up: compilation, capture, allocator), then ``repeats`` times
    with the device synchronised at both ends of each."""
    from budgetdraft.evaluation.measure import Stopwatch

    with Stopwatch(device) as warm:
        run()
    values = []
    for _ in range(repeats):
        with Stopwatch(device) as watch:
            run()
        values.append(watch.seconds * 1e3 / steps)
    return Sample(values, steps, warm.seconds)


def profiled(device, run) -> dict:
    """``run()`` once under ``torch.profiler`` (after ``timed`` warmed it up): the aten ops the host dispatched (all,
    and top-level: those no other aten op called), the device kernels launched (CUDA), and {name: [count, µs]} of the
    kernels by device time (on a CPU: the aten ops by self CPU time)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    events = prof.events()
    aten = [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith("aten::")]

    def top_level(e) -> bool:
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        return parent is None

    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    ops: dict[str, list[float]] = {}
    for e in kernels or aten:
        entry = ops.setdefault(e.name, [0, 0.0])
        entry[0] += 1
        entry[1] += e.time_range.elapsed_us() if kernels else e.self_cpu_time_total
    counts = {"aten_ops": len(aten), "top_level_aten_ops": sum(map(top_level, aten)), "kernels": len(kernels)}
    return {**counts, "ops": ops, "by": "device time" if kernels else "self CPU time"}


def per_step(prof: dict, steps: int, minus: dict | None = None, top: int = 8) -> dict:
    """A ``profiled`` run's counts per step of its ``steps``; ``minus``: a run whose counts are taken away first (HF
    generate's prefill and set-up: its 1-token run). ``top``: the kernels (CPU: aten ops) taking most time a step."""
    minus = minus or {"ops": {}}
    out = {k: (prof[k] - minus.get(k, 0)) / steps for k in ("aten_ops", "top_level_aten_ops", "kernels")}
    ops = {}
    for name, (n, us) in prof["ops"].items():
        n0, us0 = minus["ops"].get(name, (0, 0.0))
        ops[name] = ((n - n0) / steps, (us - us0) / 1e3 / steps)
    ranked = sorted(ops.items(), key=lambda kv: -kv[1][1])[:top]
    out["top"] = [{"name": name, "per_step": n, "ms_per_step": ms} for name, (n, ms) in ranked]
    return {**out, "by": prof["by"]}


def peak_gb(device) -> float:
    import torch

    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else math.nan


def reset_peak(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def ours(plan, verifier, drafters: dict, prompt, engine: str, row: Row, attention: str = "sdpa",
         capacity: str = "static") -> None:  # fmt: skip
    """AR step, verify and drafter steps of one engine at one context, under the models' attention and (graphs) the
    engine's ``DYNAMIC_CAPACITY`` (``attention`` and ``capacity`` name them in the row's keys: `run_name`)."""
    import torch

    from budgetdraft.decoding.drafter import READS_NOTHING
    from budgetdraft.decoding.engine import steps_for
    from budgetdraft.decoding.metrics import kv_bytes_per_token
    from budgetdraft.decoding.sparse_drafter import SparseDrafter
    from budgetdraft.decoding.verifier import Verifier, ids_tensor, weight_bytes
    from budgetdraft.evaluation.measure import device_bandwidth

    device, runs, name = plan.device, {}, run_name(engine, attention, capacity)
    reset_peak(device)
    v = Verifier(verifier, engine=engine)
    first = v.prefill(prompt, prompt.shape[1] + NEW_TOKENS + GAMMA + 1)
    base = v.length

    def ar():
        token = first
        for _ in range(plan.steps):
            hidden = v.hidden(ids_tensor([token], device)).last_hidden_state
            token, *_ = v.greedy_top2(hidden)
        v.rollback(base)

    drafts = torch.randint(verifier.config.vocab_size, (GAMMA,), generator=torch.Generator().manual_seed(1))
    drafts = drafts.to(device)  # a drafter leaves its drafts on the device

    def verify():
        for _ in range(plan.steps):
            v.check(first, drafts, GAMMA, None, None, READS_NOTHING)
            v.rollback(base)

    runs["ar"] = timed(device, ar, plan.repeats, plan.steps)
    runs["verify"] = timed(device, verify, plan.repeats, plan.steps)
    if plan.profile:
        row.profiles[f"{name} ar"] = per_step(profiled(device, ar), plan.steps)
        row.profiles[f"{name} verify"] = per_step(profiled(device, verify), plan.steps)
    if math.isnan(row.bound_ms):
        step_bytes = weight_bytes(verifier) + kv_bytes_per_token(v.cache) * prompt.shape[1]
        row.bound_ms = step_bytes / (device_bandwidth(device) * 1e9) * 1e3
    drafts_per_repeat = max(1, plan.steps // GAMMA)
    for budget, model in drafters.items():
        d = SparseDrafter(model, budget, engine=engine)
        d.prefill(prompt.to(d.device), NEW_TOKENS + GAMMA + 1)

        def draft(d=d):
            for _ in range(drafts_per_repeat):
                d.draft([first], GAMMA)  # γ steps, the drafts left on the device as in `speculative`
                d.rollback(0)

        runs[f"draft B={budget}"] = timed(device, draft, plan.repeats, drafts_per_repeat * GAMMA)
        if plan.profile and budget == min(drafters):
            row.profiles[f"{name} draft B={budget}"] = per_step(profiled(device, draft), drafts_per_repeat * GAMMA)
    row.ours[name] = runs
    row.peak_gb[name] = peak_gb(device)
    steps_for(verifier, engine, "verifier").cache = None  # the next context allocates its own; drop this one


def our_runs(plan, verifier, drafters: dict, prompt, row: Row) -> None:
    """Our rows at one context: under each attention of the plan (set on every model), each engine's; graphs'
    under each of the plan's capacities (the engine's ``DYNAMIC_CAPACITY``, as it was afterwards)."""
    from budgetdraft.decoding import engine as engines

    default = engines.DYNAMIC_CAPACITY
    for attention in plan.attentions:
        use_attention([verifier, *drafters.values()], attention)
        for engine in plan.engines:
            for capacity in plan.capacities if engine == "graphs" else ("static",):
                engines.DYNAMIC_CAPACITY = capacity == "dynamic"
                try:
                    ours(plan, verifier, drafters, prompt, engine, row, attention, capacity)
                finally:
                    engines.DYNAMIC_CAPACITY = default


def hf(plan, verifier, prompt, cache: str, row: Row) -> None:
    """transformers' greedy ``generate`` per step: (N tokens − 1 token) ÷ (N − 1), both timed in every repeat."""
    from budgetdraft.evaluation.measure import Stopwatch

    device, n = plan.device, plan.steps + 1
    kwargs = {}
    if cache == "static":
        from transformers import CompileConfig

        # transformers compiles the static cache's decode step itself (CUDA; mode reduce-overhead). dynamic=False:
        # each context gets the fixed-shape graph a user decoding at that one length gets; the default (None)
        # would switch to a dynamic-shape graph at this sweep's second context
        kwargs = {"cache_implementation": "static", "compile_config": CompileConfig(dynamic=False)}

    def generate(tokens: int) -> float:
        with Stopwatch(device) as watch:
            out = verifier.generate(input_ids=prompt, max_new_tokens=tokens, do_sample=False, pad_token_id=0, **kwargs)
        if out.shape[1] != prompt.shape[1] + tokens:
            raise RuntimeError(f"HF generate stopped after {out.shape[1] - prompt.shape[1]} of {tokens} tokens")
        return watch.seconds

    reset_peak(device)
    with stock_attention(verifier):
        start = time.perf_counter()
        generate(n), generate(1)  # warm-up: the static cache's decode step is compiled and captured here
        warm = time.perf_counter() - start
        values = []
        for _ in range(plan.repeats):
            values.append((generate(n) - generate(1)) * 1e3 / (n - 1))
        if plan.profile:
            long, short = profiled(device, lambda: generate(n)), profiled(device, lambda: generate(1))
            row.profiles[f"HF {cache}"] = per_step(long, n - 1, minus=short)
    row.hf[cache] = Sample(values, n - 1, warm)
    row.peak_gb[f"HF {cache}"] = peak_gb(device)


# ------------------------------------------------------------------------------------------------------ report


def fmt(x: float, digits: int = 2) -> str:
    return "—" if x is None or math.isnan(x) else f"{x:.{digits}f}"


ENGINES = ("eager", "graphs")  # every table has both engines' columns ("—" where one was not run)


def run_names(attentions, capacities=("static",)) -> list[str]:
    """Our runs' keys in the table's order: both engines under each attention, graphs under each of ``capacities``
    ("eager", "graphs", "graphs any-capacity", "eager flex", ...)."""
    return [
        run_name(engine, attention, capacity)
        for attention in attentions
        for engine in ENGINES
        for capacity in (capacities if engine == "graphs" else ("static",))
    ]


def table(rows: list[Row], budgets, attentions=("sdpa",), capacities=("static",)) -> list[str]:
    """One row a context: our runs under each of ``attentions`` (graphs: each of ``capacities``) beside HF's and
    the bound."""
    b, runs = "/".join(f"{x:,}" for x in budgets), run_names(attentions, capacities)
    graphs = [run for run in runs if run.startswith("graphs")]
    head = ["context", *(f"AR {run} ms" for run in runs), "HF dynamic ms", "HF static ms", "bound ms",
            *(f"bound ÷ {run}" for run in runs), "bound ÷ HF static", *(f"verify(6) ÷ AR {run}" for run in runs),
            *(f"c {run} B={b}" for run in runs), *(f"{run} warm-up s" for run in graphs),
            f"peak GB {' / '.join(runs)} / HF dyn / HF static"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        hf_ms = {k: s.ms for k, s in r.hf.items()}
        cells = [
            f"{label(r.context)} ({r.context:,})",
            *(fmt(r.ar(run)) for run in runs),
            fmt(hf_ms.get("dynamic", math.nan)),
            fmt(hf_ms.get("static", math.nan)),
            fmt(r.bound_ms),
            *(fmt(r.bound_ms / r.ar(run)) for run in runs),
            fmt(r.bound_ms / hf_ms.get("static", math.nan)),
            *(fmt(r.verify_ratio(run)) for run in runs),
            *(" / ".join(fmt(r.c(run, x), 3) for x in budgets) for run in runs),
            *(fmt(r.warmup_s(run), 1) for run in graphs),
            " / ".join(fmt(r.peak_gb.get(k, math.nan), 1) for k in (*runs, "HF dynamic", "HF static")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def details(rows: list[Row]) -> list[str]:
    lines = [
        "| context | measurement | median ms a step | min–max | repeats x steps | warm-up s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        named = [(f"ours {engine}: {what}", s) for engine, runs in r.ours.items() for what, s in runs.items()]
        named += [(f"HF generate {cache}", s) for cache, s in r.hf.items()]
        for name, s in named:
            lines.append(
                f"| {label(r.context)} | {name} | {s.ms:.3f} | {s.spread()} | {len(s.values)} x {s.steps} | "
                f"{s.warmup_s:.2f} |"
            )
    return lines


def verdicts(rows: list[Row], budgets, device, attention: str = "sdpa", capacity: str = "static") -> list[str]:
    """Each target (`TARGETS`) against what was measured under ``attention`` (graphs: compiled as ``capacity``
    says): "met", "NOT met" with the worst value, or "not measured"."""
    if device.type != "cuda":
        return [f"- {target}: not judged (a CPU smoke test)" for target in TARGETS]
    small = [b for b in budgets if b <= 1024]
    at_most, at_least = (lambda x, t: x <= t), (lambda x, t: x >= t)
    eager, graphs = run_name("eager", attention), run_name("graphs", attention, capacity)
    checks = [  # per target: (value, threshold) pairs and the comparison
        ([(r.bound_ms / r.ar(graphs), 0.68 if label(r.context) == "4K" else 0.6) for r in rows], at_least),
        ([(r.ar(graphs) / r.hf_ms("static"), 0.8) for r in rows], at_most),
        ([(r.ar(eager) / r.hf_ms("dynamic"), 1.0) for r in rows], at_most),
        ([(r.verify_ratio(e), 1.1) for r in rows for e in (eager, graphs)], at_most),
        ([(r.c(e, b), 0.03 if e == graphs else 0.06) for r in rows for e in (eager, graphs) for b in small],
         at_most),
        ([(r.warmup_s(graphs), 15.0) for r in rows], at_most),
    ]  # fmt: skip
    lines = []
    for target, (pairs, ok) in zip(TARGETS, checks):
        pairs = [(x, t) for x, t in pairs if not math.isnan(x)]
        failed = [f"{x:.3g} (target {t:g})" for x, t in pairs if not ok(x, t)]
        verdict = "not measured" if not pairs else "met" if not failed else "NOT met: " + ", ".join(failed)
        lines.append(f"- {target}: {verdict}")
    return lines


def judged_targets(rows: list[Row], plan) -> dict[str, list[str]]:
    """The verdicts under each attention of the plan ("sdpa", "flex") and, where graphs compiled once for every
    capacity ran, under each with those rows as graphs' ("sdpa any-capacity", ...)."""
    capacities = plan.capacities if "graphs" in plan.engines else ("static",)
    return {
        a if c == "static" else f"{a} any-capacity": verdicts(rows, plan.budgets, plan.device, a, c)
        for a in plan.attentions
        for c in capacities
    }


def kernel_table(rows: list[Row]) -> list[str]:
    """--profile: per step, the aten ops the host dispatched (all / top-level) and the device kernels launched."""
    lines = ["| context | step | aten ops | top-level aten ops | kernels |", "|---|---|---|---|---|"]
    for r in rows:
        for name, p in r.profiles.items():
            lines.append(
                f"| {label(r.context)} | {name} | {p['aten_ops']:.0f} | {p['top_level_aten_ops']:.0f} | "
                f"{fmt(p['kernels'], 0)} |"
            )
    return lines


def top_kernels(rows: list[Row]) -> list[str]:
    """--profile: the kernels (CPU: aten ops) that take most of each step's time."""
    lines = []
    for r in rows:
        for name, p in r.profiles.items():
            lines += ["", f"{label(r.context)} {name}, by {p['by']} (ms a step, calls a step):", ""]
            lines += [f"- {t['ms_per_step']:.3f} ms, {t['per_step']:g}x: {t['name'][:110]}" for t in p["top"]]
    return lines


def identity(plan) -> dict:
    """What the json names the run by (what `estimate` reads, budgetdraft.pipeline.gpusteps): the device, the UTC
    date, the measured bandwidth and where the numbers come from."""
    import torch
    import transformers

    from budgetdraft.evaluation.measure import device_bandwidth

    cuda = plan.device.type == "cuda"
    return {
        "device": torch.cuda.get_device_name(plan.device) if cuda else "CPU (smoke test)",
        "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}",
        "bandwidth_gbs": device_bandwidth(plan.device),
        "source": f"bench/gpu_decode.py {' '.join(sys.argv[1:])} (torch {torch.__version__}"
        + (f" + CUDA {torch.version.cuda}" if cuda else "")
        + f", transformers {transformers.__version__})",
    }


def header(plan, verifier, drafter) -> list[str]:
    import torch
    import transformers

    from budgetdraft.decoding.verifier import weight_bytes
    from budgetdraft.evaluation.measure import device_bandwidth

    device = plan.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (smoke test: no timing is meaningful)"
    bandwidth = device_bandwidth(device)
    params = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    cuda = f", CUDA {torch.version.cuda}" if device.type == "cuda" else ""
    words = " and ".join(CAPACITY_WORDS[c] for c in plan.capacities)
    compiled = f"graphs compiled {words}; " if "graphs" in plan.engines else ""
    return [
        "# GPU decode engine (bench/gpu_decode.py)",
        "",
        f"- {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {name}; torch {torch.__version__}{cuda}, "
        f"transformers {transformers.__version__}",
        f"- memory bandwidth (best of 5 copies of 1 GiB, read + write): {fmt(bandwidth, 0)} GB/s",
        f"- verifier: Yarn-Llama-2-7B-128K's config{' (cut: smoke)' if plan.smoke else ''}, random weights, "
        f"{verifier.dtype}, {params(verifier) / 1e9:.3f} B parameters ({weight_bytes(verifier) / 1e9:.2f} GB); "
        f"drafter: llama-68m's config{' (cut: smoke)' if plan.smoke else ''}, {drafter.dtype}, "
        f"{params(drafter) / 1e6:.1f} M parameters, one per budget",
        f"- engines: {', '.join(plan.engines)}; attentions: {', '.join(plan.attentions)}; {compiled}γ = {GAMMA}; "
        f"caches of prompt + {NEW_TOKENS} + γ + 1 slots; "
        f"each number the median of {plan.repeats} repeats of {plan.steps} steps ({max(1, plan.steps // GAMMA)} "
        f"drafts of γ for c; HF: {plan.repeats} pairs of {plan.steps + 1}- and 1-token generates), min–max below",
        "- HF generate: greedy, stock sdpa; static = cache_implementation='static'"
        + (
            ", its decode step compiled by transformers (reduce-overhead)"
            if device.type == "cuda"
            else ", not compiled (CPU)"
        ),
    ]


# ------------------------------------------------------------------------------------------------------- main


@dataclass
class Plan:
    device: object
    smoke: bool
    contexts: tuple
    budgets: tuple
    engines: tuple
    steps: int
    repeats: int
    hf: bool
    max_s: float = math.inf
    profile: bool = False
    layers: int = 2  # the verifier's layers in a smoke test
    attentions: tuple = ("sdpa",)  # keys of budgetdraft.decoding.attention.ATTENTIONS: our rows run under each
    capacities: tuple = ("static",)  # of CAPACITIES: our graphs rows run under each


def parse(argv=None) -> tuple[Plan, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", help=f"prompt tokens (default {CONTEXTS})")
    parser.add_argument("--budgets", type=int, nargs="+", help=f"drafter KV budgets B (default {BUDGETS})")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, help="default both (--smoke: eager)")
    parser.add_argument("--attentions", nargs="+", help="sdpa and/or flex for our rows (default both; --smoke: sdpa)")
    parser.add_argument("--capacities", nargs="+", choices=CAPACITIES, help="graphs compiled per capacity and/or once")
    parser.add_argument("--steps", type=int, help="steps a timed repeat (default 32; --quick 16; --smoke 4)")
    parser.add_argument("--repeats", type=int, help="timed repeats (default 5; --quick 3; --smoke 2)")
    parser.add_argument("--quick", action="store_true", help="3 repeats of 16 steps")
    parser.add_argument("--no-hf", action="store_true", help="skip transformers' generate")
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU, eager: the code path only")
    parser.add_argument(
        "--layers", type=int, default=2, help="--smoke: the verifier's layers (two runs give the per-layer op count)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("gpu_decode.md"), help="the report (markdown), and beside it its json copy"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also count the aten ops and kernels of each step and list the kernels taking most of its time",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=7.5,
        help="a context is skipped (and said so) when the previous one's seconds would take the run past this "
        "(0: no limit)",
    )
    args = parser.parse_args(argv)
    import torch

    if not args.smoke and not torch.cuda.is_available():
        sys.exit(NO_CUDA)
    from budgetdraft.decoding.attention import ATTENTIONS

    unknown = [a for a in args.attentions or () if a not in ATTENTIONS]
    if unknown:
        parser.error(f"--attentions {' '.join(unknown)}: not one of {', '.join(ATTENTIONS)}")
    steps, repeats = (4, 2) if args.smoke else (16, 3) if args.quick else (32, 5)
    plan = Plan(
        device=torch.device("cpu" if args.smoke else "cuda"),
        smoke=args.smoke,
        # ascending: HF's static cache takes the longest context's size: a shorter one after it reads a longer cache
        contexts=tuple(sorted(args.contexts or (SMOKE_CONTEXTS if args.smoke else CONTEXTS))),
        budgets=tuple(args.budgets or (SMOKE_BUDGETS if args.smoke else BUDGETS)),
        engines=tuple(args.engines or (("eager",) if args.smoke else ENGINES)),
        attentions=tuple(dict.fromkeys(args.attentions or (("sdpa",) if args.smoke else tuple(ATTENTIONS)))),
        capacities=tuple(dict.fromkeys(args.capacities or (("static",) if args.smoke else CAPACITIES))),
        steps=args.steps or steps,
        repeats=args.repeats or repeats,
        hf=not args.no_hf,
        max_s=args.max_minutes * 60 if args.max_minutes > 0 else math.inf,
        profile=args.profile,
        layers=args.layers,
    )
    if plan.steps < 2 or plan.repeats < 1:
        parser.error("--steps must be >= 2 and --repeats >= 1")
    return plan, args.out


def main(argv=None) -> None:
    plan, out = parse(argv)
    import torch

    torch.set_grad_enabled(False)
    if plan.smoke:
        torch.set_num_threads(1)  # a shared CPU: more threads than free cores slows a tiny step a hundredfold
    begun = time.perf_counter()
    v_cfg, d_cfg = configs(plan.smoke, plan.layers)
    verifier = build(v_cfg, torch.float16 if not plan.smoke else torch.float32, plan.device, seed=0)
    drafters = {b: build(d_cfg, torch.float32, plan.device, seed=1) for b in plan.budgets}
    limit = verifier.config.max_position_embeddings
    if max(plan.contexts) + NEW_TOKENS + GAMMA + 1 > limit:
        sys.exit(
            f"--contexts: {max(plan.contexts)} + {NEW_TOKENS + GAMMA + 1} exceeds the verifier's {limit} positions"
        )
    lines = header(plan, verifier, next(iter(drafters.values())))
    progress(f"models built in {time.perf_counter() - begun:.0f} s")
    rows = [Row(context) for context in plan.contexts]
    # our engines (and HF's dynamic cache, no compilation) at every context first; then HF's static cache, whose
    # compilation per context is what a time limit cuts: the longest context is never the one our rows skip
    stages = [("ours", lambda row, prompt: our_runs(plan, verifier, drafters, prompt, row))]
    if plan.hf:
        stages.append(("HF dynamic", lambda row, prompt: hf(plan, verifier, prompt, "dynamic", row)))
        stages.append(("HF static", lambda row, prompt: hf(plan, verifier, prompt, "static", row)))
    skipped = []
    for stage, run in stages:
        last_s = 0.0
        for row in rows:
            started = time.perf_counter()
            if last_s and started - begun + last_s > plan.max_s:  # as long as the last context: past the limit
                skipped.append(f"{stage} at {label(row.context)} ({row.context:,})")
                progress(f"{label(row.context)} {stage} skipped: the last context took {last_s:.0f} s")
                continue
            run(row, prompt_of(verifier, row.context, plan.device))
            last_s = time.perf_counter() - started
            progress(f"{label(row.context)} {stage} done at {time.perf_counter() - begun:.0f} s")
    rows = [r for r in rows if r.ours or r.hf]  # a context every stage skipped is named below, not a row of dashes
    lines += ["", *table(rows, plan.budgets, plan.attentions, plan.capacities)]
    if skipped:
        lines.append(f"\nNot measured, to stay within --max-minutes {plan.max_s / 60:g}: {', '.join(skipped)}.")
    judged = judged_targets(rows, plan)
    for attention, verdict in judged.items():
        lines += ["", "Targets (issue 55)" + (f", attention {attention}:" if len(judged) > 1 else ":"), *verdict]
    lines.append("")
    if plan.profile:
        lines += ["Kernels a step (--profile; HF: its N-token generate less its 1-token one, per step):", ""]
        lines += [*kernel_table(rows), *top_kernels(rows), ""]
    lines += ["Every measurement:", "", *details(rows), ""]
    lines.append(f"Total {time.perf_counter() - begun:.0f} s (models built, warm-ups and compilation included).")
    report = "\n".join(lines) + "\n"
    print(report, end="")
    out.write_text(report, encoding="utf-8")
    record = {**identity(plan), "header": lines[: lines.index("")], "targets": judged, "skipped": skipped,
              "rows": [r.as_json() for r in rows]}  # fmt: skip
    out.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    progress(f"wrote {out} and {out.with_suffix('.json')}")


def prompt_of(verifier, context: int, device):
    """The prompt of one context: random token ids, the same for every stage (seeded by the context)."""
    import torch

    ids = torch.randint(verifier.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(context))
    return ids.to(device)


def progress(message: str) -> None:
    print(f"[gpu_decode] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
