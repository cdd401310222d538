"""`python -m budgetdraft eval-cell`: one evaluation grid cell (``budgetdraft.evaluation.cells``) written to its
sealed parquet file; and what a forking warm process preloads for one (``preload``)."""

from __future__ import annotations

import argparse

import torch

from budgetdraft.base import methods
from budgetdraft.base.names import SHARED
from budgetdraft.decoding.loading import ModelStore
from budgetdraft.evaluation.cellfile import write_cell
from budgetdraft.evaluation.cells import cell_models, prefill_once, run_cell, warm_up_once
from budgetdraft.evaluation.cellspec import CellSpec
from budgetdraft.pipeline.commands.flags import add_decode_flags, count, refuse_long_draft


def configure_parser(parser) -> None:
    parser.add_argument("--label", required=True, help="row label in the tables: ar, sd, lambda0.5, ...")
    parser.add_argument(
        "--decodes", required=True, help="the decoder (decoding algorithm) it runs: " + ", ".join(methods.DECODERS)
    )
    parser.add_argument("--verifier", required=True)
    parser.add_argument("--drafter", help="drafter model (sd, triforce) or EAGLE-3 head directory (eagle3)")
    parser.add_argument("--prompts", required=True, help="prompts parquet of one dataset x context")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--context", required=True)
    parser.add_argument("--budget", type=count(0), default=0, help="drafter KV budget B in tokens (0 for AR)")
    parser.add_argument("--gamma", type=count(0), default=0, help="draft length γ (0 for AR)")
    parser.add_argument("--max-new-tokens", type=count(1), required=True, help="tokens generated per prompt and run")
    parser.add_argument("--warmup", type=count(0), default=1, help="discarded warm-up generations")
    parser.add_argument(
        "--warmup-tokens", type=count(0), default=0, help="new tokens of a warm-up generation (0 = --max-new-tokens)"
    )
    parser.add_argument(
        "--warmup-prompt-tokens",
        type=int,
        default=0,
        help="warm up on the last N tokens of the first prompt (0 = the whole prompt)",
    )
    parser.add_argument("--repeats", type=count(1), required=True, help="timed runs of every prompt")
    add_decode_flags(parser)  # --policy --chunk-size --score-window --draft-vocab --device --*-dtype --threads
    #                           --engine and sampling's, each default from budgetdraft.base.defaults
    parser.add_argument(
        "--verifier-prefill",
        default="",
        help="the prompts' verifier prefills from `budgetdraft prefill`: copied in, their recorded "
        "seconds charged, instead of recomputed in every run",
    )
    parser.add_argument("--extra", default="", help="JSON of the decoder's own settings (triforce, eagle3, lookup)")
    parser.add_argument(
        "--replicate",
        type=int,
        default=SHARED,
        help=f"training replicate of --drafter, recorded in the rows ({SHARED}: trained once or not at all)",
    )
    parser.add_argument("--out", required=True)


def preload(argv: list[str], models: ModelStore) -> list[str]:
    """Preload into ``models`` the verifier and drafter an ``eval-cell`` command line names (``ModelStore.preload``)
    and run the cell's warm-up with them once (``cells.warm_up_once``) and its drafter's full prefills
    (``cells.prefill_once``): the forking warm process calls this before it forks the cell, so the cells of one
    model share one read of it, one warm-up and one prefill of each prompt. Returns what it did now."""
    parser = argparse.ArgumentParser(add_help=False)
    configure_parser(parser)
    spec = cell_spec(parser.parse_known_args(argv)[0])
    wanted = cell_models(spec)
    done = [f"preloaded {name}" for name, dtype in wanted if models.preload(name, spec.device, dtype)]
    if warm_up_once(spec, models):
        done.append(f"warmed up {spec.decodes} with {' + '.join(name for name, _ in wanted)}")
    if prefilled := prefill_once(spec, models):
        done.append(f"prefilled {prefilled} prompts of {spec.prompts} with {spec.drafter}")
    return done


def cell_spec(args: argparse.Namespace) -> CellSpec:
    """The cell eval-cell's flags name (every flag but --out is a field of ``CellSpec``)."""
    return CellSpec.of(vars(args))


def run(args, models: ModelStore | None = None) -> None:
    refuse_long_draft("--gamma", args.gamma, "--max-new-tokens", args.max_new_tokens)
    torch.set_num_threads(args.threads)
    write_cell(run_cell(cell_spec(args), models), args.out)
