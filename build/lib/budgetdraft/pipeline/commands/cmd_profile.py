"""`python -m budgetdraft positions`: the positional profile (``budgetdraft.evaluation.profile``) in its two steps,
the verifier's next tokens (``--verifier``) or each replicate's drafters against them (``--targets``,
``--drafter LABEL=DIR``)."""

from __future__ import annotations

import torch

from budgetdraft.evaluation.profile import read_prompts, write_profile, write_verifier_targets
from budgetdraft.pipeline.commands.flags import add_machine_flags, count


def configure_parser(parser) -> None:
    parser.add_argument("--verifier", help="verifier model spec or directory: write its next tokens (no --drafter)")
    parser.add_argument("--targets", help="the verifier's next tokens (written without --drafter) to compare with")
    parser.add_argument("--prompts", nargs="+", required=True, help="prompts parquet files, one per dataset")
    parser.add_argument(
        "--datasets", nargs="+", required=True, help="the dataset of each --prompts file, in the same order"
    )
    parser.add_argument("--drafter", action="append", default=[], metavar="LABEL=DIR", help="a drafter (repeatable)")
    parser.add_argument(
        "--bucket",
        type=count(1),
        help="positions per bucket (default: the first --drafter's native range, its max_position_embeddings)",
    )
    parser.add_argument("--replicate", type=count(0), default=0, help="the training replicate the drafters belong to")
    parser.add_argument("--out", required=True, help="output parquet")
    add_machine_flags(parser, ("--verifier-dtype", "--drafter-dtype"))


def drafter_dirs(specs: list[str]) -> dict[str, str]:
    """{label: directory} of the ``LABEL=DIR`` arguments; a ValueError names one that is not of that form."""
    out = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise ValueError(f"--drafter {spec!r}: expected LABEL=DIR")
        if label in out:
            raise ValueError(f"--drafter {spec!r}: label {label!r} is given twice ({out[label]} and {path}); one each")
        out[label] = path
    return out


def prompt_files(prompts: list[str], datasets: list[str]) -> dict[str, str]:
    """{dataset: prompts file} of ``--prompts`` and ``--datasets`` paired in order; a ValueError when they do not
    pair up, or a dataset is named twice (one of its files would be dropped without a word)."""
    if len(prompts) != len(datasets):
        raise ValueError(f"--prompts gives {len(prompts)} files but --datasets {len(datasets)} names")
    files = {}
    for dataset, path in zip(datasets, prompts):
        if dataset in files:
            raise ValueError(
                f"--datasets names {dataset!r} twice ({files[dataset]} and {path}): each --prompts file is one "
                "dataset's; name each dataset once"
            )
        files[dataset] = path
    return files


def check_bucket(bucket: int | None, files: dict[str, str]) -> None:
    """A ``--bucket`` shorter than the longest prompt of ``files``: a bucket as long puts every position into one
    (``--bucket 10**12`` did), and the profile has nothing to compare by position."""
    if bucket is None:
        return
    longest = max((len(ids) for samples in read_prompts(files).values() for ids in samples), default=0)
    if bucket >= longest:
        raise ValueError(
            f"--bucket {bucket} is not shorter than the longest prompt of --prompts ({longest} tokens): every position "
            f"would fall in the first bucket; give fewer than {longest}"
        )


def run(args) -> None:
    prompts = prompt_files(args.prompts, args.datasets)
    if bool(args.drafter) == bool(args.verifier) or bool(args.drafter) != bool(args.targets):
        raise ValueError("give --verifier (its next tokens) or --targets with --drafter (the drafters against them)")
    drafters = drafter_dirs(args.drafter)
    check_bucket(args.bucket, prompts)
    torch.set_num_threads(args.threads)
    if args.verifier:
        write_verifier_targets(args.verifier, prompts, args.out, args.device, args.verifier_dtype)
    else:
        write_profile(
            args.targets, drafters, prompts, args.out, args.bucket, args.replicate, args.device, args.drafter_dtype
        )
    print(args.out)
