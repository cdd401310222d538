"""`python -m budgetdraft decode`: decode one prompt with AR or speculative decoding, print the text, its counts
(drafted, accepted, τ) and its end-to-end time (a cell times each phase: ``budgetdraft.evaluation.measure``)."""

from __future__ import annotations

import argparse
import json

import torch

from budgetdraft.base.defaults import GAMMA
from budgetdraft.base.methods import AR, SD
from budgetdraft.decoding.draftspec import DraftSpec
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.sparse_drafter import drafter_factory
from budgetdraft.evaluation.measure import Stopwatch
from budgetdraft.pipeline.commands.flags import (
    add_decode_flags,
    count,
    refuse_long_draft,
    refuse_partial_chunk,
    sampling_from_args,
)

DEFAULT_PROMPT = "Once upon a time"


def prompt_text(text: str) -> str:
    """--prompt as given: an empty one is refused rather than silently decoding another prompt."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the prompt is empty: give the text to decode")
    return text


def configure_parser(parser) -> None:
    parser.add_argument("--verifier", default="embedded:smollm2", help="verifier model spec")
    parser.add_argument("--drafter", default="embedded:smollm2:layers=4", help="drafter model spec (sd)")
    parser.add_argument(  # a method (a row of the grid), as a user names it: decode runs these two only
        "--method",
        choices=[AR, SD],
        default=SD,
        help="ar: the verifier alone; sd: the paper's drafter drafts, the verifier checks",
    )
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=prompt_text, default=DEFAULT_PROMPT, help=f"prompt text ({DEFAULT_PROMPT!r})")
    src.add_argument("--prompt-file", help="file holding the prompt text")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    parser.add_argument("--max-new-tokens", type=count(1), default=64)
    parser.add_argument("--gamma", type=count(1), default=GAMMA, help=f"draft length γ ({GAMMA})")
    parser.add_argument("--budget", type=count(0), default=256, help="drafter KV budget B (tokens of the prompt kept)")
    add_decode_flags(parser)  # --policy --chunk-size --score-window --draft-vocab --device --*-dtype --threads
    #                           --engine and sampling's, each default from budgetdraft.base.defaults


def run(args) -> None:
    from budgetdraft.base.text import read_text_file
    from budgetdraft.decoding.loading import check_device, load_model, load_tokenizer

    sampling = sampling_from_args(args)
    check_device(args.device)
    if args.method == SD:
        refuse_partial_chunk("--budget", args.budget, "--chunk-size", args.chunk_size)
        refuse_long_draft("--gamma", args.gamma, "--max-new-tokens", args.max_new_tokens)
    torch.set_num_threads(args.threads)
    text = args.prompt
    if args.prompt_file:
        text = read_text_file(args.prompt_file, "--prompt-file")
        if not text.strip():
            raise ValueError(f"--prompt-file {args.prompt_file}: the file holds no prompt (empty or blank)")
    tokenizer = load_tokenizer(args.verifier)
    if args.chat:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, return_dict=False
        )
    else:
        ids = tokenizer(text)["input_ids"]
    verifier = load_model(args.verifier, args.device, args.verifier_dtype)
    drafter = None if args.method == AR else drafter_factory(verifier, DraftSpec.of(vars(args)), {})()
    with Stopwatch(verifier.device) as watch:  # the loop decides the tokens; its caller times them, end to end
        if drafter is None:
            gen = autoregressive(verifier, ids, args.max_new_tokens, sampling=sampling, engine=args.engine)
        else:
            gen = speculative(
                drafter, verifier, ids, args.max_new_tokens, args.gamma, sampling=sampling, engine=args.engine
            )
    print(tokenizer.decode(gen.tokens, skip_special_tokens=True))
    counts = gen.stats.as_dict()
    del counts["reached_by_position"], counts["accepted_by_position"]
    counts.update(total_s=watch.seconds, tok_per_s=len(gen.tokens) / watch.seconds)
    print(json.dumps(counts, indent=1))
