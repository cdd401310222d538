"""The positional profile: teacher-forced top-1 agreement of a drafter with the verifier, by position.

The paper argues about positions (its drafter runs far beyond its native range of 2,048, and its limitations name
that extrapolation as a cause of the collapse) without ever showing where a drafter stops agreeing. This measures
it on the evaluation's own longest prompts: one forward of the verifier and of each drafter over the whole prompt,
full cache, real positions 0 … T − 1, and at every position whether the two greedy next tokens agree (the raw
acceptance a drafter would get with every earlier token given). Positions are grouped in buckets of ``bucket``
positions (by default the first drafter's native range, so the first bucket is what the base drafter was trained
on and each later one a further multiple of it).

Two steps, as the workflow runs them: the verifier's greedy next tokens once (no ``--drafter``: one row per prompt;
the 30-layer verifier's forward with logits at every position is most of the work), then each replicate's drafters
against them (``--targets``):

    budgetdraft profile --verifier results/models/verifier --prompts results/data/prompts/*/1K.parquet \\
        --datasets gs longbench lwm --out results/profile/verifier.parquet
    budgetdraft profile --targets results/profile/verifier.parquet --prompts results/data/prompts/*/1K.parquet \\
        --datasets gs longbench lwm --drafter sd=results/models/drafter_base/r0 \\
        --drafter lambda0.5=results/drafters/r0/lambda0.5 --replicate 0 --out results/profile/r0.parquet

One row per (drafter, prompt, bucket): ``agreed`` of ``total`` positions.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from budgetdraft.base.atomic import atomic_path
from budgetdraft.decoding.flags import add_machine_flags
from budgetdraft.decoding.loading import load_model
from budgetdraft.decoding.positions import native_range

COLUMNS = ["label", "replicate", "dataset", "sample", "bucket_start", "bucket_end", "agreed", "total"]
TARGET_COLUMNS = ["dataset", "sample", "next_ids"]


@torch.inference_mode()
def greedy_next(model, ids: list[int]) -> torch.Tensor:
    """[T] the model's greedy next token at every position of ``ids``, full cache, positions 0 … T − 1."""
    input_ids = torch.tensor([ids], device=model.device)
    positions = torch.arange(len(ids), device=model.device)[None]
    return model(input_ids=input_ids, position_ids=positions).logits[0].argmax(-1).cpu()


def bucket_agreement(drafter_next: torch.Tensor, verifier_next: torch.Tensor, bucket: int) -> list[tuple[int, int, int]]:
    """(bucket start, agreed, total) for each bucket of ``bucket`` positions."""
    agree = (drafter_next == verifier_next).long()
    return [
        (start, int(agree[start : start + bucket].sum()), int(agree[start : start + bucket].numel()))
        for start in range(0, agree.numel(), bucket)
    ]


def verifier_targets(verifier, prompts: dict[str, list[list[int]]]) -> pd.DataFrame:
    """The verifier's greedy next token at every position of every prompt (``TARGET_COLUMNS``)."""
    rows = [
        (dataset, sample, greedy_next(verifier, ids).tolist())
        for dataset, samples in prompts.items()
        for sample, ids in enumerate(samples)
    ]
    return pd.DataFrame(rows, columns=TARGET_COLUMNS)


def profile(targets: pd.DataFrame, drafters: dict, prompts: dict[str, list[list[int]]], bucket: int, replicate: int):
    """The profile rows (``COLUMNS``) of every drafter ({label: model}) on ``prompts`` ({dataset: [ids, ...]}),
    against the verifier's next tokens ``targets`` (``verifier_targets``)."""
    wanted = {(d, s): torch.tensor(list(ids)) for d, s, ids in targets.itertuples(index=False)}
    rows = []
    for dataset, samples in prompts.items():
        for sample, ids in enumerate(samples):
            if (dataset, sample) not in wanted or len(wanted[dataset, sample]) != len(ids):
                raise ValueError(f"the verifier's targets have no prompt {dataset} {sample} of {len(ids)} tokens")
            for label, drafter in drafters.items():
                for start, agreed, total in bucket_agreement(greedy_next(drafter, ids), wanted[dataset, sample], bucket):
                    rows.append((label, replicate, dataset, sample, start, start + total, agreed, total))
    return pd.DataFrame(rows, columns=COLUMNS)


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
        type=int,
        help="positions per bucket (default: the first --drafter's native range, its max_position_embeddings)",
    )
    parser.add_argument("--replicate", type=int, default=0, help="the training replicate the drafters belong to")
    parser.add_argument("--out", required=True, help="output parquet")
    add_machine_flags(parser, ("--verifier-dtype", "--drafter-dtype"))


def drafter_dirs(specs: list[str]) -> dict[str, str]:
    """{label: directory} of the ``LABEL=DIR`` arguments; a ValueError names one that is not of that form."""
    out = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise ValueError(f"--drafter {spec!r}: expected LABEL=DIR")
        out[label] = path
    return out


def run(args) -> None:
    if len(args.prompts) != len(args.datasets):
        raise ValueError(f"--prompts gives {len(args.prompts)} files but --datasets {len(args.datasets)} names")
    if args.bucket is not None and args.bucket < 1:
        raise ValueError(f"--bucket {args.bucket}: must be a positive number of positions")
    if bool(args.drafter) == bool(args.verifier) or bool(args.drafter) != bool(args.targets):
        raise ValueError("give --verifier (its next tokens) or --targets with --drafter (the drafters against them)")
    torch.set_num_threads(args.threads)
    prompts = {d: [list(ids) for ids in pd.read_parquet(p)["input_ids"]] for d, p in zip(args.datasets, args.prompts)}
    if args.verifier:
        rows = verifier_targets(load_model(args.verifier, args.device, args.verifier_dtype), prompts)
    else:
        drafters = {
            label: load_model(path, args.device, args.drafter_dtype)
            for label, path in drafter_dirs(args.drafter).items()
        }
        bucket = args.bucket or native_range(next(iter(drafters.values())).config)
        rows = profile(pd.read_parquet(args.targets), drafters, prompts, bucket, args.replicate)
    with atomic_path(Path(args.out)) as tmp:
        rows.to_parquet(tmp, index=False)
    print(args.out)
