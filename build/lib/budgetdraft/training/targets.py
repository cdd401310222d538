"""Teacher targets (Algorithm 1, step 1): the verifier's greedy tokens, or the text's own next tokens.

``--teacher verifier`` (BudgetDraft's L_A): for every training sequence x (P + C tokens) the frozen verifier reads
the prefix with a chunked prefill (so a 16K prefix fits), then the C continuation tokens in one forward on top of
that full cache, and keeps its greedy token at every continuation position:

    targets[n, i] = argmax p_L(. | x[:P+i+1]; K_L^full)        i = 0..C-1   (the prediction for token P+i+1)

``--teacher text`` (a base drafter trained as a plain language model, as llama-68m was, before any alignment to
the verifier): targets[n, i] = x[P+i+1], the last position (no next token) set to IGNORE, which the losses skip.

The file (docs/architecture.md): safetensors with ``input_ids`` int64 [N, P+C] and ``targets`` int64 [N, C],
metadata ``prefix_len``, ``cont_len``, ``verifier`` (the spec), ``teacher`` and ``verifier_sha256`` (its
``weights_digest``). A partial file next to the output (``OUT.partial``) is rewritten every ``--save-every``
sequences, so a killed run resumes if the teacher, the verifier's weights, P, C and the sequences are unchanged
(else it starts over); the final file appears atomically.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from budgetdraft.base.atomic import atomic_path

PARTIAL_SUFFIX = ".partial"
IGNORE = -100  # a target position no loss reads (torch's cross-entropy default ignore_index)
TEACHERS = ("verifier", "text")


def text_targets(input_ids: torch.Tensor, prefix_len: int) -> torch.Tensor:
    """The text's next token at every continuation position: [N, P+C] -> [N, C], the last one IGNORE."""
    targets = torch.full((input_ids.shape[0], input_ids.shape[1] - prefix_len), IGNORE, dtype=torch.int64)
    targets[:, :-1] = input_ids[:, prefix_len + 1 :]
    return targets


@torch.no_grad()
def sequence_targets(verifier, input_ids: torch.Tensor, prefix_len: int, prefill_chunk: int | None = None):
    """Greedy verifier tokens over the continuation of one sequence. input_ids: [P+C] -> [C] int64."""
    from transformers import DynamicCache

    from budgetdraft.decoding.kvcache import prefill

    P, T = prefix_len, input_ids.shape[0]
    device = verifier.device
    ids = input_ids.to(device)[None]  # [1, P+C]
    cache = DynamicCache(config=verifier.config)
    prefill(verifier, ids[:, :P], cache, chunk_len=prefill_chunk)
    position_ids = torch.arange(P, T, device=device)[None]  # [1, C]
    logits = verifier(input_ids=ids[:, P:], past_key_values=cache, position_ids=position_ids).logits  # [1, C, V]
    return logits[0].argmax(-1).to("cpu", torch.int64)


def teacher_targets(
    verifier,
    input_ids: torch.Tensor,
    prefix_len: int,
    prefill_chunk: int | None = None,
    done: torch.Tensor | None = None,
    on_progress=None,
    progress: bool = True,
) -> torch.Tensor:
    """Targets for every row of input_ids [N, P+C] -> [N, C]. ``done`` holds rows already computed (resume);
    ``on_progress(targets_so_far)`` is called after every sequence (the caller decides when to write)."""
    from tqdm import tqdm

    verifier.requires_grad_(False)  # frozen teacher: never part of any graph
    N, T = input_ids.shape
    targets = torch.empty(N, T - prefix_len, dtype=torch.int64)
    start = 0 if done is None else done.shape[0]
    if start:
        targets[:start] = done
    for n in tqdm(range(start, N), initial=start, total=N, desc="teacher targets", disable=not progress):
        targets[n] = sequence_targets(verifier, input_ids[n], prefix_len, prefill_chunk)
        if on_progress is not None:
            on_progress(targets[: n + 1])
    return targets


def save_targets(
    path: str | Path,
    input_ids: torch.Tensor,
    targets: torch.Tensor,
    prefix_len: int,
    verifier: str,
    teacher: str = "verifier",
    verifier_sha256: str = "",
):
    """Write the targets file atomically (``atomic_path``)."""
    from safetensors.torch import save_file

    metadata = {
        "prefix_len": str(prefix_len),
        "cont_len": str(targets.shape[1]),
        "verifier": verifier,
        "teacher": teacher,
        "verifier_sha256": verifier_sha256,
    }
    with atomic_path(path) as tmp:
        save_file({"input_ids": input_ids.contiguous(), "targets": targets.contiguous()}, str(tmp), metadata=metadata)


def load_targets(path: str | Path) -> dict:
    """{"input_ids": [N, P+C], "targets": [N, C], "prefix_len": P, "cont_len": C, "verifier": str, "teacher": str,
    "verifier_sha256": str} (the last two "" in files written before they were recorded)."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"targets file not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            data = {name: f.get_tensor(name) for name in ("input_ids", "targets")}
    except (SafetensorError, OSError) as err:  # not a safetensors file, or one cut short
        raise ValueError(
            f"targets file {path} cannot be read ({err}): write it again with `budgetdraft targets`"
        ) from None
    data["prefix_len"] = int(meta["prefix_len"])
    data["cont_len"] = int(meta["cont_len"])
    for key in ("verifier", "teacher", "verifier_sha256"):
        data[key] = meta.get(key, "")
    if data["input_ids"].shape[1] != data["prefix_len"] + data["cont_len"]:
        raise ValueError(f"{path}: input_ids width {data['input_ids'].shape[1]} != prefix_len + cont_len")
    return data


def read_sequences(path: str | Path, prefix_len: int, cont_len: int, num_seqs: int | None = None) -> torch.Tensor:
    """The parquet column ``input_ids`` (each row exactly P + C tokens) as int64 [N, P+C]."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training sequences not found: {path}")
    column = pd.read_parquet(path, columns=["input_ids"])["input_ids"]
    if num_seqs is not None:
        column = column.iloc[:num_seqs]
    if len(column) == 0:
        raise ValueError(f"{path}: no training sequences")
    T = prefix_len + cont_len
    lengths = {len(row) for row in column}
    if lengths != {T}:
        raise ValueError(f"{path}: rows have {sorted(lengths)} tokens, expected exactly P + C = {T}")
    return torch.tensor([list(row) for row in column], dtype=torch.int64)


def _partial_mismatch(
    old: dict, input_ids: torch.Tensor, teacher: str, prefix_len: int, cont_len: int, verifier_sha256: str
) -> list[str]:
    """What differs between a partial targets file and this call (teacher, verifier weights, P/C, sequences)."""
    n = old["targets"].shape[0]
    checks = {
        "teacher": old["teacher"] == teacher,
        "verifier weights": old["verifier_sha256"] == verifier_sha256,
        "prefix/continuation lengths": (old["prefix_len"], old["cont_len"]) == (prefix_len, cont_len),
        "sequences": n <= input_ids.shape[0] and torch.equal(old["input_ids"], input_ids[:n]),
    }
    return [name for name, same in checks.items() if not same]


def resumed_targets(partial: Path, input_ids: torch.Tensor, teacher: str, prefix_len: int, cont_len: int, digest: str):
    """The targets a partial file ``partial`` already holds, when it was made from the same inputs (else None, and
    the run starts over)."""
    if not partial.is_file():
        return None
    old = load_targets(partial)
    changed = _partial_mismatch(old, input_ids, teacher, prefix_len, cont_len, digest)
    if changed:
        print(f"{partial}: {', '.join(changed)} differ: restarting from zero", file=sys.stderr)
        return None
    print(f"resuming teacher targets from {partial}: {old['targets'].shape[0]} of {input_ids.shape[0]} sequences done")
    return old["targets"]


def write_targets(
    verifier: str,
    sequences: str | Path,
    prefix_len: int,
    cont_len: int,
    out: str | Path,
    *,
    teacher: str,
    num_seqs: int | None,
    device: str,
    dtype: str,
    prefill_chunk: int,
    save_every: int,
) -> None:
    """The targets file ``out`` of the first ``num_seqs`` (None: all) training sequences in the parquet file
    ``sequences`` (P = ``prefix_len``, C = ``cont_len``), by ``teacher`` (one of ``TEACHERS``): the verifier's
    (``verifier`` on ``device`` in ``dtype``, its prefix read ``prefill_chunk`` tokens per forward) resumes from
    ``OUT.partial``, rewritten every ``save_every`` sequences."""
    from budgetdraft.decoding.loading import load_model, weights_digest

    if prefix_len < 1 or cont_len < 1:
        raise ValueError("--prefix-len and --cont-len must be positive")
    input_ids = read_sequences(sequences, prefix_len, cont_len, num_seqs)
    out = Path(out)
    if teacher == "text":
        save_targets(out, input_ids, text_targets(input_ids, prefix_len), prefix_len, "text", "text")
        print(f"{out}: {input_ids.shape[0]} sequences x {cont_len} next-token targets of the text")
        return
    partial = out.with_name(out.name + PARTIAL_SUFFIX)
    digest = weights_digest(verifier)
    done = resumed_targets(partial, input_ids, teacher, prefix_len, cont_len, digest)
    model = load_model(verifier, device=device, dtype=dtype)

    def write_partial(targets_so_far):
        n = targets_so_far.shape[0]
        if n % save_every == 0 and n < input_ids.shape[0]:
            save_targets(partial, input_ids[:n], targets_so_far, prefix_len, verifier, teacher, digest)

    targets = teacher_targets(model, input_ids, prefix_len, prefill_chunk, done, write_partial)
    save_targets(out, input_ids, targets, prefix_len, verifier, teacher, digest)
    partial.unlink(missing_ok=True)
    print(f"{out}: {targets.shape[0]} sequences x {targets.shape[1]} targets")
