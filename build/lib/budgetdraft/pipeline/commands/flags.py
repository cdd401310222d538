"""The command-line flags several commands share, each added by one function here with its default read from its
one home (``budgetdraft.base.defaults``, ``budgetdraft.decoding.sampling.Sampling``): ``add_decode_flags`` (eval-cell,
decode), ``add_machine_flags`` (prefill, targets, profile: --device, --dtype, --threads), ``add_engine_flag``
(estimate, whose default is the config's), ``add_sampling_flags`` (read back by ``sampling_from_args``); and the rule
a drafter budget and its chunk size follow wherever both are given (``refuse_partial_chunk``: decode's flags, the
config's keys in ``budgetdraft.pipeline.configcheck``).

A flag's value is checked once, when it is parsed (``choices``, ``positive_threads``): a command that takes
--threads refuses a non-positive count in argparse's one line, never in torch's traceback mid-run.
Imports no torch at import time: the cost estimate (torch-free) and the config check read this module.
"""

from __future__ import annotations

import argparse
import math
import re

from budgetdraft.base.defaults import CHUNK_SIZE, DEVICE, DTYPE, ENGINE, ENGINES, POLICY, SCORE_WINDOW, THREADS

ENGINE_HELP = "decode steps op by op (eager) or as CUDA graphs (graphs)"


def positive_threads(text: str) -> int:
    """--threads as a count of threads: a non-positive one is refused when parsed, not by torch mid-run."""
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of threads")
    return threads


def count(minimum: int = 0, maximum: int | None = None):
    """An argparse ``type``: a whole number (ASCII digits) in [``minimum``, ``maximum``], refused when parsed in
    argparse's one line naming the flag (``argument --save-every: 0: must be >= 1``), not mid-run."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text}: must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{text}: must be <= {maximum}")
        return value

    parse.__name__ = "whole number"  # what argparse calls it in its own "invalid ... value" line
    return parse


def seconds(text: str) -> float:
    """An argparse ``type``: a finite, non-negative number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds >= 0")
    return value


def add_engine_flag(parser, default: str | None = ENGINE, help: str = ENGINE_HELP) -> None:
    """--engine, one of ``ENGINES`` (``default`` None: the caller supplies its own, e.g. a config's)."""
    parser.add_argument("--engine", default=default, choices=ENGINES, help=help)


def add_machine_flags(parser, dtypes: tuple[str, ...] = ("--dtype",)) -> None:
    """--device, the ``dtypes`` flags (one per model loaded) and --threads, where a job runs."""
    parser.add_argument("--device", default=DEVICE, help=f"torch device ({DEVICE})")
    for flag in dtypes:
        parser.add_argument(flag, default=DTYPE, help=f"float32 | bfloat16 | float16 ({DTYPE})")
    parser.add_argument("--threads", type=positive_threads, default=THREADS, help=f"torch CPU threads ({THREADS})")


def add_decode_flags(parser) -> None:
    """The flags of a decoding with a sparse drafter (eval-cell, decode): its policy, chunk size, score window and
    draft vocabulary, the device, both models' dtypes and the threads, the engine, and sampling mode's flags.
    A command adds its own --gamma and --budget (eval-cell's 0 for AR; decode's ``GAMMA``)."""
    from budgetdraft.decoding.policies import POLICIES

    parser.add_argument("--policy", default=POLICY, choices=POLICIES, help=f"sparse policy of the drafter ({POLICY})")
    parser.add_argument("--chunk-size", type=int, default=CHUNK_SIZE, help="prefix tokens per chunk (sparse cache)")
    parser.add_argument("--score-window", type=int, default=SCORE_WINDOW, help="last prefill queries that score chunks")
    parser.add_argument("--draft-vocab", help=".safetensors of the token ids the drafter may draft (draft-vocab)")
    add_machine_flags(parser, ("--verifier-dtype", "--drafter-dtype"))
    add_engine_flag(parser)
    add_sampling_flags(parser)


def add_sampling_flags(parser) -> None:
    """--temperature (default greedy) and ``Sampling``'s other fields, with its defaults."""
    from dataclasses import fields

    from budgetdraft.decoding.sampling import GREEDY, Sampling

    default = {f.name: f.default for f in fields(Sampling)}
    parser.add_argument(
        "--temperature",
        type=float,
        default=GREEDY,
        help="sampling temperature (0 = greedy decoding, the paper's setting)",
    )
    parser.add_argument(
        "--top-p", type=float, default=default["top_p"], help="nucleus sampling mass in (0, 1] (1 = off)"
    )
    parser.add_argument("--top-k", type=int, default=default["top_k"], help="keep the k most likely tokens (0 = off)")
    parser.add_argument("--seed", type=int, default=default["seed"], help="seed of each generation's random stream")


def sampling_from_args(args):
    """The ``Sampling`` of ``add_sampling_flags``'s flags (None: greedy); a bad value is named by its flag."""
    from budgetdraft.decoding.sampling import sampling_from_flags

    return sampling_from_flags(args.temperature, args.top_p, args.top_k, args.seed)


def refuse_partial_chunk(key: str, budget: int, chunk_key: str, chunk: int) -> None:
    """A ValueError naming ``key`` (a config key or a flag) when ``budget`` is not a positive multiple of the chunk
    size ``chunk`` (named ``chunk_key``): TopKChunks keeps whole chunks, ⌊B / chunk⌋ of them, so such a budget would
    decode with fewer prompt tokens than its label B says (0 when the chunk is larger than B)."""
    if budget < chunk or budget % chunk:
        kept = budget // chunk * chunk
        raise ValueError(
            f"{key} = {budget} is not a positive multiple of {chunk_key} = {chunk}: it would keep {kept} prompt "
            f"tokens, not {budget}; make the budget a multiple of {chunk_key}, or {chunk_key} a divisor of it"
        )


def refuse_long_draft(key: str, gamma: int, new_key: str, max_new_tokens: int) -> None:
    """A ValueError naming ``key`` when a draft of ``gamma`` tokens is longer than the ``max_new_tokens`` (named
    ``new_key``) a generation emits: every round would draft tokens no generation could use."""
    if gamma > max_new_tokens:
        raise ValueError(
            f"{key} = {gamma} drafts more tokens a round than {new_key} = {max_new_tokens} generates: at most "
            f"{max_new_tokens} of them could ever be used; lower {key} or raise {new_key}"
        )
