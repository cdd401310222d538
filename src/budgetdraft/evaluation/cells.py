"""One evaluation grid cell = (label, dataset, context, budget, γ) → one parquet file of per-sample rows.

The models are loaded once; one warm-up generation is discarded, then every prompt of the dataset × context is
decoded ``repeats`` times. Every run generates exactly ``max_new_tokens`` tokens (EOS does not stop it, as in
the paper), so all methods of a cell row decode the same tokens and aggregation can check losslessness.
In sampling mode (``--temperature`` > 0; methods ar and sd) every run draws from a stream seeded by ``--seed``, so
the repeats of a prompt decode the same sample; the flags are recorded in the rows' ``config``.
The file is written atomically: a killed or failed cell leaves no file, and re-running the target redoes it. It is
sealed (`budgetdraft.evaluation.cellfile`): a file whose bytes change afterwards, or whose rows are not the cell its path
names, is refused by every reader.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import pandas as pd
import torch

from budgetdraft.base import methods
from budgetdraft.base.defaults import EAGER
from budgetdraft.base.jsonio import json_object
from budgetdraft.base.names import EAGLE3, SHARED
from budgetdraft.decoding import sparse_drafter
from budgetdraft.decoding.flags import add_decode_flags
from budgetdraft.decoding.loading import ModelStore, load_model
from budgetdraft.decoding.sampling import sampling_from_args
from budgetdraft.evaluation.cellfile import write_cell
from budgetdraft.evaluation.measure import timed_autoregressive, timed_speculative
from budgetdraft.evaluation.prefill import check_covers, load_prefills

CELL_COLUMNS = [
    "label",
    "method",
    "dataset",
    "context",
    "budget",
    "gamma",
    "policy",
    "replicate",  # training replicate of the drafter; SHARED (-1): a cell that no per-replicate training feeds
    "sample",
    "doc_id",
    "repeat",
    "prompt_tokens",
    "new_tokens",
    "verifier_prefill_s",
    "drafter_prefill_s",
    "decode_s",
    "total_s",
    "tok_per_s",
    "drafted",
    "accepted",
    "acceptance",
    "tau",
    "verifier_forwards",
    "accept_by_position",
    "peak_mem_mb",
    "mem_kind",
    "peak_tensor_mb",
    "drafter_kv_mb",
    "verifier_kv_mb",
    "draft_s",
    "draft_steps",
    "verify_s",
    "device",
    "engine",  # eager or graphs (budgetdraft.decoding.engine): every method of a run decodes on one engine
    "bandwidth_gbs",  # the device's memory bandwidth, measured once per process by a device copy (NaN on a CPU)
    "step_bytes",  # AR rows: bytes one decode step reads (verifier weights + its KV at the prompt length)
    "bound_fraction",  # AR rows: decode tok/s ÷ (bandwidth_gbs ÷ step_bytes), the step's share of the memory bound
    "output_ids",
    "runner_up_ids",  # greedy AR rows: the verifier's second choice at each token (empty in other rows)
    "top2_margins",  # greedy AR rows: its top-1 − top-2 logit margin there (the lossless check's near-ties)
    "config",
]
SAMPLING_METHODS = ("ar", "sd")  # the baselines draft greedily only
NO_EOS: list[int] = []  # fixed-length generations


def make_decoder(args, verifier, prefilled=None, load=load_model):
    """A function (prompt_ids, new_tokens) -> Generation for the cell's method, measured (``stats``: the row's
    timings and memory, ``budgetdraft.evaluation.measure``; ``prefilled``: shared verifier prefills, see
    ``budgetdraft.evaluation.prefill``; ``load``: what loads the drafter, a warm process's ``ModelStore.load``)."""
    sampling = sampling_from_args(args)
    if sampling is not None and args.method not in SAMPLING_METHODS:
        raise ValueError(
            f"--temperature {args.temperature}: method {args.method!r} decodes greedily only; sampling "
            f"runs with methods {', '.join(SAMPLING_METHODS)}"
        )
    if args.method == "ar":
        return lambda ids, n: timed_autoregressive(
            verifier, ids, n, eos_token_id=NO_EOS, prefilled=prefilled, sampling=sampling, engine=args.engine
        )
    if args.gamma < 1:
        raise ValueError(f"--gamma must be >= 1 for method {args.method!r}, got {args.gamma}")
    if not args.drafter:
        raise ValueError(f"method {args.method!r} needs --drafter")
    extra = json_object(args.extra, "--extra")
    # the paper's drafter or a baseline's module: drafter_factory(verifier, args, extra, load) -> () -> a fresh drafter
    factory = next(m.factory for m in methods.REGISTRY.values() if m.decodes == args.method)
    module = importlib.import_module(factory) if factory else sparse_drafter
    new_drafter = module.drafter_factory(verifier, args, extra, load)
    return lambda ids, n: timed_speculative(
        new_drafter(),
        verifier,
        ids,
        n,
        args.gamma,
        eos_token_id=NO_EOS,
        prefilled=prefilled,
        sampling=sampling,
        engine=args.engine,
    )


def device_name(device: str) -> str:
    dev = torch.device(device)
    return f"cuda:{torch.cuda.get_device_name(dev)}" if dev.type == "cuda" else "cpu"


def run_cell(args, models: ModelStore | None = None) -> pd.DataFrame:
    """The cell's rows: every prompt decoded ``repeats`` times after ``warmup`` discarded runs, measured. ``models``:
    the warm process's models (budgetdraft.pipeline.warm), else each is read from its files."""
    if args.method not in methods.DECODES:
        raise ValueError(f"--method {args.method!r} is not one of {', '.join(methods.DECODES)}")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    prompts = pd.read_parquet(args.prompts)
    if prompts.empty:
        raise ValueError(f"no prompts in {args.prompts}")
    load = models.load if models is not None else load_model
    verifier = load(args.verifier, args.device, args.verifier_dtype)
    prefilled = None
    if args.verifier_prefill:
        prefilled = load_prefills(args.verifier_prefill, args.device)
        check_covers(prefilled, [list(ids) for ids in prompts["input_ids"]], args.verifier_prefill)
    decode = make_decoder(args, verifier, prefilled, load)
    config = json.dumps({k: v for k, v in sorted(vars(args).items())})
    warm_prompt, warm_tokens = list(prompts.iloc[0]["input_ids"]), args.max_new_tokens
    if args.engine == EAGER:  # graphs: the timed runs' shapes (prompt, tokens) are compiled and captured here
        warm_prompt = warm_prompt[-args.warmup_prompt_tokens :] if args.warmup_prompt_tokens else warm_prompt
        warm_tokens = args.warmup_tokens or warm_tokens
    for _ in range(args.warmup):  # discarded: first-call costs (allocator, kernels, lazy imports, compilation)
        decode(warm_prompt, warm_tokens)
    rows = []
    for sample in prompts.itertuples():
        ids = [int(t) for t in sample.input_ids]
        for repeat in range(args.repeats):
            gen = decode(ids, args.max_new_tokens)
            stats = gen.stats.as_dict()
            print(
                f"sample {sample.sample} repeat {repeat}: {stats['tok_per_s']:.2f} tok/s, "
                f"acceptance {stats['acceptance']:.3f}, tau {stats['tau']:.2f}",
                file=sys.stderr,
            )
            rows.append(
                {
                    "label": args.label,
                    "method": args.method,
                    "dataset": args.dataset,
                    "context": args.context,
                    "budget": args.budget,
                    "gamma": args.gamma,
                    "policy": args.policy,
                    "replicate": args.replicate,
                    "sample": int(sample.sample),
                    "doc_id": str(sample.doc_id),
                    "repeat": repeat,
                    "device": device_name(args.device),
                    "engine": args.engine,
                    "output_ids": gen.tokens,
                    "runner_up_ids": gen.runner_up,
                    "top2_margins": gen.margins,
                    "config": config,
                    **{k: stats[k] for k in CELL_COLUMNS if k in stats},
                }
            )
    return pd.DataFrame(rows, columns=CELL_COLUMNS)


def write_atomically(frame: pd.DataFrame, out: str | Path) -> None:
    """Write the cell's rows to ``out`` sealed (`budgetdraft.evaluation.cellfile.write_cell`: a digest of its rows and page
    checksums that every reader verifies), refusing rows that break a cell's invariants or are not the cell that
    ``out`` names; a write that fails (a full disk) is one line naming ``out``, and leaves nothing behind."""
    write_cell(frame, out)


def configure_parser(parser) -> None:
    parser.add_argument("--label", required=True, help="row label in the tables: ar, sd, lambda0.5, ...")
    parser.add_argument("--method", required=True, help="decoding algorithm: " + ", ".join(methods.DECODES))
    parser.add_argument("--verifier", required=True)
    parser.add_argument("--drafter", help="drafter model (sd, triforce) or EAGLE-3 head directory (eagle3)")
    parser.add_argument("--prompts", required=True, help="prompts parquet of one dataset x context")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--context", required=True)
    parser.add_argument("--budget", type=int, default=0, help="drafter KV budget B in tokens (0 for AR)")
    parser.add_argument("--gamma", type=int, default=0, help="draft length γ (0 for AR)")
    parser.add_argument("--max-new-tokens", type=int, required=True, help="tokens generated per prompt and run")
    parser.add_argument("--warmup", type=int, default=1, help="discarded warm-up generations")
    parser.add_argument(
        "--warmup-tokens", type=int, default=0, help="new tokens of a warm-up generation (0 = --max-new-tokens)"
    )
    parser.add_argument(
        "--warmup-prompt-tokens",
        type=int,
        default=0,
        help="warm up on the last N tokens of the first prompt (0 = the whole prompt)",
    )
    parser.add_argument("--repeats", type=int, required=True, help="timed runs of every prompt")
    add_decode_flags(parser)  # --policy --chunk-size --score-window --draft-vocab --device --*-dtype --threads
    #                           --engine and sampling's, each default from budgetdraft.base.defaults
    parser.add_argument(
        "--verifier-prefill",
        default="",
        help="the prompts' verifier prefills from `budgetdraft prefill`: copied in, their recorded "
        "seconds charged, instead of recomputed in every run",
    )
    parser.add_argument("--extra", default="", help="JSON of method-specific settings (triforce, eagle3)")
    parser.add_argument(
        "--replicate",
        type=int,
        default=SHARED,
        help=f"training replicate of --drafter, recorded in the rows ({SHARED}: trained once or not at all)",
    )
    parser.add_argument("--out", required=True)


def preload_models(argv: list[str], models: ModelStore) -> list[str]:
    """Preload into ``models`` the verifier and drafter an ``eval-cell`` command line names (``ModelStore.preload``):
    the forking warm process calls this before it forks the cell, so the cells of one model share one read of it.
    Returns the models it loaded now."""
    parser = argparse.ArgumentParser(add_help=False)
    configure_parser(parser)
    args, _ = parser.parse_known_args(argv)
    wanted = [(args.verifier, args.verifier_dtype)]
    if args.drafter and args.method != EAGLE3:  # an EAGLE-3 drafter is a head directory, not a causal LM
        wanted.append((args.drafter, args.drafter_dtype))
    return [spec for spec, dtype in wanted if models.preload(spec, args.device, dtype)]


def run(args, models: ModelStore | None = None) -> None:
    torch.set_num_threads(args.threads)
    write_atomically(run_cell(args, models), args.out)
