"""One evaluation grid cell = (label, dataset, context, budget, γ) → one parquet file of per-sample rows.

The models are loaded once; one warm-up generation is discarded, then every prompt of the dataset × context is
decoded ``repeats`` times. Every run generates exactly ``max_new_tokens`` tokens (EOS does not stop it, as in
the paper), so all methods of a cell row decode the same tokens and aggregation can check losslessness.
A cell is a ``CellSpec`` (budgetdraft.evaluation.cellspec), recorded in every row's ``config``. In sampling mode
(``temperature`` > 0; a decoder declared to sample: ar and sd) every run draws from a stream seeded by ``seed``, so the
repeats of a prompt decode the same sample.
The file is written atomically: a killed or failed cell leaves no file, and re-running the target redoes it. It is
sealed (`budgetdraft.evaluation.cellfile`): a file whose bytes change afterwards, or whose rows are not the cell its path
names, is refused by every reader.
"""

from __future__ import annotations

import importlib
import sys

import pandas as pd
import torch

from budgetdraft.base.defaults import EAGER
from budgetdraft.base.jsonio import json_object
from budgetdraft.base.methods import DECODERS, MODEL_DRAFTER
from budgetdraft.decoding import sparse_drafter
from budgetdraft.decoding.baselines import lookup
from budgetdraft.decoding.loading import ModelStore, load_model
from budgetdraft.decoding.sampling import sampling_from_flags
from budgetdraft.decoding.verifier import prompt_key
from budgetdraft.evaluation.cellspec import CellSpec
from budgetdraft.evaluation.measure import timed_autoregressive, timed_speculative
from budgetdraft.evaluation.prefill import check_covers, load_prefills

COPY_NGRAMS = (
    2,
    3,
)  # the copier's n-gram sizes whose copy share every row records (budgetdraft.decoding.baselines.lookup)
CELL_COLUMNS = [
    "label",
    "method",
    "dataset",
    "context",
    "budget",
    "gamma",
    "policy",
    "replicate",  # training replicate of the drafter; SHARED (-1): a cell that no per-replicate training feeds
    "sample",
    "doc_id",
    "repeat",
    "prompt_tokens",
    "new_tokens",
    "verifier_prefill_s",
    "drafter_prefill_s",
    "decode_s",
    "total_s",
    "tok_per_s",
    "drafted",
    "accepted",
    "acceptance",
    "tau",
    "verifier_forwards",
    "accept_by_position",
    "peak_mem_mb",
    "mem_kind",
    "peak_tensor_mb",
    "drafter_kv_mb",
    "verifier_kv_mb",
    "draft_s",
    "draft_steps",
    "verify_s",
    "device",
    "engine",  # eager or graphs (budgetdraft.decoding.engine): every method of a run decodes on one engine
    "bandwidth_gbs",  # the device's memory bandwidth, measured once per process by a device copy (NaN on a CPU)
    "step_bytes",  # AR rows: bytes one decode step reads (verifier weights + its KV at the prompt length)
    "bound_fraction",  # AR rows: decode tok/s ÷ (bandwidth_gbs ÷ step_bytes), the step's share of the memory bound
    "output_ids",
    "runner_up_ids",  # greedy AR rows: the verifier's second choice at each token (empty in other rows)
    "top2_margins",  # greedy AR rows: its top-1 − top-2 logit margin there (the lossless check's near-ties)
    "draft_outcomes",  # per token: 1 its draft was accepted, 0 rejected (the verifier's replaced it), -1 undrafted
    *(f"copied_{n}" for n in COPY_NGRAMS),  # per token: the prompt-lookup copier (n-grams up to n) predicted it
    *(f"copy_share_{n}" for n in COPY_NGRAMS),  # ... the share of the generated tokens it predicted
    "config",  # the cell's CellSpec, versioned (budgetdraft.evaluation.cellspec.record)
]
NO_EOS: list[int] = []  # fixed-length generations


def make_decoder(spec: CellSpec, verifier, prefilled=None, load=load_model, drafter_prefills=None):
    """A function (prompt_ids, new_tokens) -> Generation for the cell's decoder, measured (``stats``: the row's
    timings and memory, ``budgetdraft.evaluation.measure``; ``prefilled``: shared verifier prefills, see
    ``budgetdraft.evaluation.prefill``; ``load``: what loads the drafter, a warm process's ``ModelStore.load``;
    ``drafter_prefills``: the paper's drafter's shared full prefills, ``prefill_once``). What it runs is the
    decoder's declared traits (budgetdraft.base.methods.Decoder): whether it samples, drafts, needs --drafter, and
    its factory."""
    decoder = spec.decoder
    sampling = sampling_from_flags(spec.temperature, spec.top_p, spec.top_k, spec.seed)
    if sampling is not None and not decoder.samples:
        sampled = [name for name, d in DECODERS.items() if d.samples]
        raise ValueError(
            f"--temperature {spec.temperature}: decoder {spec.decodes!r} decodes greedily only; sampling "
            f"runs with decoders {', '.join(sampled)}"
        )
    if not decoder.drafts:
        return lambda ids, n: timed_autoregressive(
            verifier, ids, n, eos_token_id=NO_EOS, prefilled=prefilled, sampling=sampling, engine=spec.engine
        )
    if spec.gamma < 1:
        raise ValueError(f"--gamma must be >= 1 for decoder {spec.decodes!r}, got {spec.gamma}")
    if not spec.drafter and decoder.drafter:
        raise ValueError(f"decoder {spec.decodes!r} needs --drafter")
    extra = json_object(spec.extra, "--extra")
    # the paper's drafter or a decoder's module: drafter_factory(verifier, draft, extra, load) -> () -> a new drafter
    if decoder.factory:
        new_drafter = importlib.import_module(decoder.factory).drafter_factory(verifier, spec.draft, extra, load)
    else:
        new_drafter = sparse_drafter.drafter_factory(verifier, spec.draft, extra, load, shared=drafter_prefills)
    return lambda ids, n: timed_speculative(
        new_drafter(),
        verifier,
        ids,
        n,
        spec.gamma,
        eos_token_id=NO_EOS,
        prefilled=prefilled,
        sampling=sampling,
        engine=spec.engine,
    )


def warm_up(spec: CellSpec, decode, first_prompt) -> None:
    """``spec.warmup`` discarded generations, paying the first-call costs of this process (allocator, kernels, lazy
    imports; on the graphs engine the timed runs' shapes, compiled and captured here, so it decodes the first
    prompt whole); on the eager engine a short one, ``warmup_tokens`` from the prompt's last
    ``warmup_prompt_tokens``."""
    prompt, tokens = [int(t) for t in first_prompt], spec.max_new_tokens
    if spec.engine == EAGER:
        prompt = prompt[-spec.warmup_prompt_tokens :] if spec.warmup_prompt_tokens else prompt
        tokens = spec.warmup_tokens or tokens
    for _ in range(spec.warmup):
        decode(prompt, tokens)


def warm_key(spec: CellSpec) -> tuple | None:
    """What a warm-up decodes with, where a forking warm process can run it once for every cell it forks
    (``CellSpec.shares_warm_up``), every model a local directory (``ModelStore.key``: as its files stand); None
    elsewhere: each such cell warms itself up."""
    if not spec.shares_warm_up():
        return None
    verifier = ModelStore.key(spec.verifier, spec.device, spec.verifier_dtype)
    drafter = ModelStore.key(spec.drafter, spec.device, spec.drafter_dtype) if spec.drafter else ()
    return None if verifier is None or drafter is None else (spec.decodes, verifier, drafter)


def warm_up_once(spec: CellSpec, models: ModelStore) -> bool:
    """In a forking warm process, before it forks the cell of ``spec``: the cell's warm-up, run here once for its
    models (``warm_key``), so that every cell forked from this process afterwards starts with its first-call costs
    paid and decodes its prompts at once (bench/README.md, "Pipeline overhead"). The models are the ones this
    process holds (``ModelStore.held``, not handed out); nothing is kept but the key. True when it ran now."""
    key = warm_key(spec)
    if not spec.warmup or key is None or key in models.warmed:
        return False
    held = {name: models.held(name, spec.device, dtype) for name, dtype in cell_models(spec)}
    if any(model is None for model in held.values()):
        return False
    prompts = pd.read_parquet(spec.prompts, columns=["input_ids"])
    decode = make_decoder(spec, held[spec.verifier], None, lambda name, device, dtype: held[name])
    warm_up(spec, decode, prompts.iloc[0]["input_ids"])
    models.warmed.add(key)
    return True


def prefill_once(spec: CellSpec, models: ModelStore) -> int:
    """In a forking warm process, before it forks the cell of ``spec``: its drafter's full prefill of each of its
    prompts, computed here once (``sparse_drafter.shared_prefills``) for every cell of that drafter and those
    prompts forked afterwards (the budgets, γ and the full-cache control), each of which cuts it to its own budget
    and is charged the recorded seconds, as a shared verifier prefill is (``CellSpec.shares_drafter_prefill``).
    Returns how many prompts it prefilled now."""
    key = shared_prefill_key(spec)
    model = models.held(spec.drafter, spec.device, spec.drafter_dtype) if key else None
    if model is None:
        return 0
    held = models.prefills.get(key, {})
    prompts = [[int(t) for t in ids] for ids in pd.read_parquet(spec.prompts, columns=["input_ids"])["input_ids"]]
    todo = [ids for ids in prompts if prompt_key(ids) not in held]
    models.keep_prefills(key, sparse_drafter.shared_prefills(model, todo, *key[1:]))
    return len(todo)


def shared_prefill_key(spec: CellSpec) -> tuple | None:
    """The drafter's files (the last part of ``warm_key``) with what its policy scores
    (``sparse_drafter.scored_window``), or None for a cell that prefills its drafter itself."""
    return _prefill_key(spec, warm_key(spec))


def _prefill_key(spec: CellSpec, warm: tuple | None) -> tuple | None:
    """``shared_prefill_key`` from the cell's ``warm_key`` (its models' files, read once)."""
    if warm is None or not spec.shares_drafter_prefill():
        return None
    return (warm[-1], *sparse_drafter.scored_window(spec.policy, spec.score_window))


def inherited(spec: CellSpec, models: ModelStore | None) -> tuple[bool, dict | None]:
    """What a cell forked from the warm process takes from it, said in its log: whether it ran the cell's warm-up
    with the same models (``warm_up_once``), and its drafter's full prefills of the prompts (``prefill_once``)."""
    if models is None:
        return False, None
    key = warm_key(spec)
    warmed = key in models.warmed
    if warmed:
        print("warm-up: run once by the warm process, with these models, before it forked this cell", file=sys.stderr)
    prefill_key = _prefill_key(spec, key)
    shared = models.prefills.get(prefill_key) if prefill_key else None
    if shared:
        print(f"drafter prefill: {len(shared)} prompts' full prefills shared by the warm process", file=sys.stderr)
    return warmed, shared


def cell_models(spec: CellSpec) -> list[tuple[str, str]]:
    """(spec, dtype) of the causal LMs a cell loads: the verifier and, where its decoder's drafter is a model (not
    EAGLE-3's head directory, which its factory reads), the drafter."""
    wanted = [(spec.verifier, spec.verifier_dtype)]
    model = spec.drafter and spec.decoder.drafter == MODEL_DRAFTER
    return wanted + [(spec.drafter, spec.drafter_dtype)] if model else wanted


def device_name(device: str) -> str:
    dev = torch.device(device)
    return f"cuda:{torch.cuda.get_device_name(dev)}" if dev.type == "cuda" else "cpu"


def cell_row(spec: CellSpec, sample, repeat: int, ids: list[int], gen, config: str) -> dict:
    """One measured decode as a row of the cell file (``CELL_COLUMNS``), with how much of its output the
    prompt-lookup copier predicts (``copied_N`` / ``copy_share_N``, budgetdraft.decoding.baselines.lookup)."""
    stats = gen.stats.as_dict()
    copies = {n: lookup.copied(ids, gen.tokens, n) for n in COPY_NGRAMS}
    return {
        "label": spec.label,
        "method": spec.decodes,  # the row's decoder, as the column has always been named (a cell file's format)
        "dataset": spec.dataset,
        "context": spec.context,
        "budget": spec.budget,
        "gamma": spec.gamma,
        "policy": spec.policy,
        "replicate": spec.replicate,
        "sample": int(sample.sample),
        "doc_id": str(sample.doc_id),
        "repeat": repeat,
        "device": device_name(spec.device),
        "engine": spec.engine,
        "output_ids": gen.tokens,
        "runner_up_ids": gen.runner_up,
        "top2_margins": gen.margins,
        "draft_outcomes": stats["outcomes"],
        **{f"copied_{n}": flags for n, flags in copies.items()},
        **{f"copy_share_{n}": sum(flags) / len(flags) if flags else float("nan") for n, flags in copies.items()},
        "config": config,
        **{k: stats[k] for k in CELL_COLUMNS if k in stats},
    }


def run_cell(spec: CellSpec, models: ModelStore | None = None) -> pd.DataFrame:
    """The cell's rows: every prompt decoded ``repeats`` times after ``warmup`` discarded runs, measured. ``models``:
    the warm process's models (budgetdraft.pipeline.warm), else each is read from its files."""
    if spec.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {spec.repeats}")
    prompts = pd.read_parquet(spec.prompts)
    if prompts.empty:
        raise ValueError(f"no prompts in {spec.prompts}")
    load = models.load if models is not None else load_model
    verifier = load(spec.verifier, spec.device, spec.verifier_dtype)
    prefilled = None
    if spec.verifier_prefill:
        prefilled = load_prefills(spec.verifier_prefill, spec.device)
        check_covers(prefilled, [list(ids) for ids in prompts["input_ids"]], spec.verifier_prefill)
    warmed, shared = inherited(spec, models)
    decode = make_decoder(spec, verifier, prefilled, load, shared)
    config = spec.record(drafter_prefill_shared=bool(shared))
    if not warmed:
        warm_up(spec, decode, prompts.iloc[0]["input_ids"])
    rows = []
    for sample in prompts.itertuples():
        ids = [int(t) for t in sample.input_ids]
        for repeat in range(spec.repeats):
            gen = decode(ids, spec.max_new_tokens)
            row = cell_row(spec, sample, repeat, ids, gen, config)
            print(
                f"sample {sample.sample} repeat {repeat}: {row['tok_per_s']:.2f} tok/s, "
                f"acceptance {row['acceptance']:.3f}, tau {row['tau']:.2f}",
                file=sys.stderr,
            )
            rows.append(row)
    return pd.DataFrame(rows, columns=CELL_COLUMNS)
