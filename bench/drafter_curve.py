"""Greedy speculative-decoding acceptance of a drafter *during* training: the curve that picks a recipe.

    python bench/drafter_curve.py --init results/models/drafter_untrained --targets results/targets/base.safetensors \\
        --hparams '{"lr": 3e-4, "lambda_c": 0, "steps": 600}' --eval-at 0 100 200 400 600 \\
        --prompts results/data/prompts/*/0.5K.parquet --num-prompts 2 --budgets 16 0 --gamma 5 --new-tokens 32

Trains exactly as `budgetdraft train` does (`training.train_step`, same schedule and sampling), and at each
step of ``--eval-at`` decodes the first ``--num-prompts`` prompts of every ``--prompts`` file with greedy SD at
each budget (0 = the drafter's full cache), printing acceptance α (accepted / drafted), τ and the drafted-token
count behind α. Every SD output is checked against the verifier's own greedy output.
"""

from __future__ import annotations

import argparse
import json
import time

import pandas as pd
import torch

from budgetdraft.decoding.loading import load_model
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.training.targets import load_targets
from budgetdraft.training.train import optimizer_and_schedule, resolve_hparams, train_step


def read_prompts(paths: list[str], count: int) -> list[list[int]]:
    prompts = []
    for path in paths:
        rows = pd.read_parquet(path, columns=["input_ids"])["input_ids"].iloc[:count]
        prompts += [list(map(int, r)) for r in rows]
    return prompts


def acceptance(drafter, verifier, prompts, references, budget: int, gamma: int, new_tokens: int) -> dict:
    accepted = drafted = forwards = 0
    for prompt, ref in zip(prompts, references):
        policy = "full" if budget == 0 else "topk_chunks"
        gen = speculative(
            SparseDrafter(drafter, max(budget, 1), policy), verifier, prompt, new_tokens, gamma, eos_token_id=[]
        )
        assert gen.tokens == ref, "speculative decoding differs from the verifier's greedy output"
        accepted, drafted, forwards = (
            accepted + gen.stats.accepted,
            drafted + gen.stats.drafted,
            forwards + gen.stats.verifier_forwards,
        )
    return {
        "alpha": accepted / max(1, drafted),
        "tau": len(prompts) * new_tokens / max(1, forwards),
        "drafted": drafted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="embedded:smollm2")
    parser.add_argument("--init", required=True)
    parser.add_argument("--targets", required=True)
    parser.add_argument("--hparams", default="{}")
    parser.add_argument("--eval-at", type=int, nargs="+", required=True)
    parser.add_argument("--prompts", nargs="+", required=True)
    parser.add_argument("--num-prompts", type=int, default=2)
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 0])
    parser.add_argument("--gamma", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    hp = resolve_hparams({**json.loads(args.hparams), "steps": max(args.eval_at)})
    data = load_targets(args.targets)
    verifier = load_model(args.verifier)
    drafter = load_model(args.init)
    prompts = read_prompts(args.prompts, args.num_prompts)
    references = [autoregressive(verifier, p, args.new_tokens, eos_token_id=[]).tokens for p in prompts]
    optimizer, scheduler = optimizer_and_schedule(drafter, hp)  # as `budgetdraft train` makes them
    settings = f"{args.new_tokens} new tokens, gamma {args.gamma}; hparams {json.dumps(hp.to_json())}"
    print(f"{len(prompts)} prompts x {settings}")
    print(f"{'step':>5} {'budget':>6} {'alpha':>6} {'tau':>5} {'drafted':>7} {'train s':>7}", flush=True)
    start, losses = time.perf_counter(), []
    for step in range(hp["steps"] + 1):
        if step in args.eval_at:
            drafter.eval()
            with torch.no_grad():
                for budget in args.budgets:
                    r = acceptance(drafter, verifier, prompts, references, budget, args.gamma, args.new_tokens)
                    print(
                        f"{step:>5} {budget or 'full':>6} {r['alpha']:>6.3f} {r['tau']:>5.2f} {r['drafted']:>7} "
                        f"{time.perf_counter() - start:>7.0f}  L_A(last 50) "
                        f"{sum(losses[-50:]) / max(1, len(losses[-50:])):.3f}",
                        flush=True,
                    )
            drafter.train()
        if step < hp["steps"]:
            losses.append(train_step(drafter, optimizer, scheduler, data, step, hp, data["input_ids"].shape[0])["L_A"])


if __name__ == "__main__":
    main()
