"""`python -m budgetdraft targets`: the teacher targets of the training sequences (Algorithm 1, step 1:
``budgetdraft.training.targets``), resumable from ``OUT.partial``."""

from __future__ import annotations

import torch

from budgetdraft.pipeline.commands.flags import add_machine_flags, count
from budgetdraft.training.targets import TEACHERS, write_targets


def configure_parser(parser) -> None:
    parser.add_argument(
        "--teacher",
        choices=TEACHERS,
        default="verifier",
        help="verifier: its greedy tokens (L_A); text: the sequence's own next tokens (plain LM)",
    )
    parser.add_argument("--verifier", required=True, help="verifier model spec or Hugging Face directory")
    parser.add_argument("--sequences", required=True, help="training sequences parquet (column input_ids, P+C tokens)")
    parser.add_argument("--prefix-len", type=int, required=True, help="P: prefix tokens")
    parser.add_argument("--cont-len", type=int, required=True, help="C: continuation tokens (supervised)")
    parser.add_argument("--num-seqs", type=count(1), default=None, help="use only the first N sequences")
    parser.add_argument("--out", required=True, help="output .safetensors")
    add_machine_flags(parser)  # --device --dtype --threads (a positive count)
    parser.add_argument("--prefill-chunk", type=count(1), default=2048, help="prefix tokens per prefill forward")
    parser.add_argument(
        "--save-every", type=count(1), default=16, help="rewrite OUT.partial every k sequences (resume)"
    )


def run(args) -> None:
    torch.set_num_threads(args.threads)
    write_targets(
        args.verifier,
        args.sequences,
        args.prefix_len,
        args.cont_len,
        args.out,
        teacher=args.teacher,
        num_seqs=args.num_seqs,
        device=args.device,
        dtype=args.dtype,
        prefill_chunk=args.prefill_chunk,
        save_every=args.save_every,
    )
