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

    budgetdraft positions --verifier results/models/verifier --prompts results/data/prompts/*/1K.parquet \\
        --datasets gs longbench lwm --out results/positions/verifier.parquet
    budgetdraft positions --targets results/positions/verifier.parquet --prompts results/data/prompts/*/1K.parquet \\
        --datasets gs longbench lwm --drafter sd=results/models/drafter_base/r0 \\
        --drafter lambda0.5=results/drafters/r0/lambda0.5 --replicate 0 --out results/positions/r0.parquet

One row per (drafter, prompt, bucket): ``agreed`` of ``total`` positions. Both files are sealed
(`budgetdraft.evaluation.sealed`) and their rows checked on every read (`read_rows`): an edited or damaged one is
refused, and the workflow sets it aside and measures it again.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from budgetdraft.decoding.loading import load_model
from budgetdraft.decoding.positions import native_range
from budgetdraft.evaluation.profilefile import COLUMNS, TARGET_COLUMNS, read_rows, save_rows


@torch.inference_mode()
def greedy_next(model, ids: list[int]) -> torch.Tensor:
    """[T] the model's greedy next token at every position of ``ids``, full cache, positions 0 … T − 1."""
    input_ids = torch.tensor([ids], device=model.device)
    positions = torch.arange(len(ids), device=model.device)[None]
    return model(input_ids=input_ids, position_ids=positions).logits[0].argmax(-1).cpu()


def bucket_agreement(
    drafter_next: torch.Tensor, verifier_next: torch.Tensor, bucket: int
) -> list[tuple[int, int, int]]:
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
                for start, agreed, total in bucket_agreement(
                    greedy_next(drafter, ids), wanted[dataset, sample], bucket
                ):
                    rows.append((label, replicate, dataset, sample, start, start + total, agreed, total))
    return pd.DataFrame(rows, columns=COLUMNS)


def read_prompts(files: dict[str, str]) -> dict[str, list[list[int]]]:
    """{dataset: [ids, ...]} of each dataset's prompts parquet file ({dataset: file})."""
    return {dataset: [list(ids) for ids in pd.read_parquet(path)["input_ids"]] for dataset, path in files.items()}


def write_verifier_targets(
    verifier: str, prompt_files: dict[str, str], out: str | Path, device: str, dtype: str
) -> None:
    """The first step: the verifier's next tokens on every prompt of ``prompt_files`` ({dataset: parquet file}), to
    ``out`` (``TARGET_COLUMNS``)."""
    prompts = read_prompts(prompt_files)
    save_rows(verifier_targets(load_model(verifier, device, dtype), prompts), out, TARGET_COLUMNS)


def write_profile(
    targets: str,
    drafters: dict[str, str],
    prompt_files: dict[str, str],
    out: str | Path,
    bucket: int | None,
    replicate: int,
    device: str,
    dtype: str,
) -> None:
    """The second step: each drafter ({label: directory}) of training replicate ``replicate`` against the verifier's
    next tokens in the file ``targets``, in buckets of ``bucket`` positions (None: the first drafter's native range),
    to ``out`` (``COLUMNS``)."""
    prompts = read_prompts(prompt_files)
    models = {label: load_model(path, device, dtype) for label, path in drafters.items()}
    bucket = bucket or native_range(next(iter(models.values())).config)
    save_rows(profile(read_rows(targets, TARGET_COLUMNS), models, prompts, bucket, replicate), out)
