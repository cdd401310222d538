"""`python -m budgetdraft decode`: decode one prompt with AR or speculative decoding, print the text and metrics."""

from __future__ import annotations

import argparse
import json

import torch

from budgetdraft.base.defaults import CHUNK_SIZE, SCORE_WINDOW, THREADS
from budgetdraft.decoding.engine import ENGINES
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.policies import POLICIES
from budgetdraft.decoding.sampling import add_sampling_flags, sampling_from_args
from budgetdraft.decoding.sparse_drafter import drafter_factory

DEFAULT_PROMPT = "Once upon a time"


def positive_threads(text: str) -> int:
    """--threads as a count of threads: a non-positive one is refused when parsed, not by torch mid-run."""
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of threads")
    return threads


def prompt_text(text: str) -> str:
    """--prompt as given: an empty one is refused rather than silently decoding another prompt."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the prompt is empty: give the text to decode")
    return text


def configure_parser(parser) -> None:
    parser.add_argument("--verifier", default="embedded:smollm2", help="verifier model spec")
    parser.add_argument("--drafter", default="embedded:smollm2:layers=4", help="drafter model spec (sd)")
    parser.add_argument("--method", choices=["ar", "sd"], default="sd")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=prompt_text, default=DEFAULT_PROMPT, help=f"prompt text ({DEFAULT_PROMPT!r})")
    src.add_argument("--prompt-file", help="file holding the prompt text")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=5, help="draft length γ")
    parser.add_argument("--budget", type=int, default=256, help="drafter KV budget B (tokens of the prompt kept)")
    parser.add_argument("--policy", default="topk_chunks", choices=POLICIES, help="sparse policy of the drafter")
    parser.add_argument("--chunk-size", type=int, default=CHUNK_SIZE)
    parser.add_argument("--score-window", type=int, default=SCORE_WINDOW, help="last prefill queries that score chunks")
    parser.add_argument("--draft-vocab", help=".safetensors of the token ids the drafter may draft (draft-vocab)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--verifier-dtype", default="float32")
    parser.add_argument("--drafter-dtype", default="float32")
    parser.add_argument("--threads", type=positive_threads, default=THREADS, help="torch CPU threads")
    parser.add_argument(
        "--engine", default="eager", choices=ENGINES, help="decode steps op by op (eager) or as CUDA graphs (graphs)"
    )
    add_sampling_flags(parser)


def run(args) -> None:
    from budgetdraft.base.text import read_text_file
    from budgetdraft.decoding.models import load_model, load_tokenizer

    torch.set_num_threads(args.threads)
    sampling = sampling_from_args(args)
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
    if args.method == "ar":
        gen = autoregressive(verifier, ids, args.max_new_tokens, sampling=sampling, engine=args.engine)
    else:
        drafter = drafter_factory(verifier, args, {})()
        gen = speculative(
            drafter, verifier, ids, args.max_new_tokens, args.gamma, sampling=sampling, engine=args.engine
        )
    print(tokenizer.decode(gen.tokens, skip_special_tokens=True))
    print(
        json.dumps(
            {k: v for k, v in gen.stats.as_dict().items() if k not in ("reached_by_position", "accepted_by_position")},
            indent=1,
        )
    )
