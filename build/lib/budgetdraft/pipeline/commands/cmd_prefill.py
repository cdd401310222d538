"""`python -m budgetdraft prefill`: the verifier's prefill of every prompt of one dataset x context, timed and saved
once for every grid cell that decodes it (``budgetdraft.evaluation.prefill``)."""

from __future__ import annotations

import pandas as pd
import torch

from budgetdraft.base.defaults import PREFILL_RUNS
from budgetdraft.decoding.loading import load_model
from budgetdraft.evaluation.prefill import record_prefills, save_prefills
from budgetdraft.pipeline.commands.flags import add_machine_flags


def configure_parser(parser) -> None:
    parser.add_argument("--verifier", required=True)
    parser.add_argument("--prompts", required=True, help="prompts parquet of one dataset x context")
    parser.add_argument(
        "--repeats", type=int, default=PREFILL_RUNS, help="timed prefills per prompt (the median is charged)"
    )
    add_machine_flags(parser)  # --device --dtype --threads
    parser.add_argument("--out", required=True, help="output .safetensors")


def run(args, models=None) -> None:
    """``models``: the resident warm process's (``ModelStore``), else the verifier is read from its files."""
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    torch.set_num_threads(args.threads)
    prompts = [[int(t) for t in ids] for ids in pd.read_parquet(args.prompts, columns=["input_ids"])["input_ids"]]
    if not prompts:
        raise ValueError(f"no prompts in {args.prompts}")
    with torch.no_grad():
        load = models.load if models is not None else load_model
        tensors, meta = record_prefills(load(args.verifier, args.device, args.dtype), prompts, args.repeats)
    save_prefills(tensors, meta, args.out)
    for m in meta.values():
        print(f"{m['prompt_tokens']} tokens: prefill {m['seconds']:.3f} s (runs {m['runs_s']})")
