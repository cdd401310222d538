"""Drafter training with L = L_A + lambda * L_C (Algorithm 1, steps 2-5).

One step (batch 1) on sequence x = input_ids[n] (P prefix + C continuation tokens) with teacher targets x*:

  2. drafter prefix prefill without gradient (chunked), scoring prefix tokens by the attention they receive;
  3. full-cache branch:   logits_A = M_S(x[P:P+C] | clone(K_full), positions P..P+C-1);  L_A = CE(logits_A, x*)
  4. sparse-cache branch: B ~ Cat(budgets, weights); keep the TopKChunks(B, s) positions of K_full (the same
     policy as at inference); logits_C = M_S(x[P:P+C] | K_sparse, real positions P..P+C-1); L_C = CE(., x*)
     (skipped entirely when lambda_c == 0);
  5. L = L_A + lambda_c * L_C, backprop through both branches (the prefix cache is detached, so gradients reach
     the weights through the continuation's own queries/keys/values), clip, AdamW, LambdaLR (warm-up + cosine).

Which sequence and which budget a step uses are pure functions of (seed, step), so a run killed and restarted
from its last checkpoint reproduces an uninterrupted run bit for bit (CPU).

Files (docs/architecture.md): the run works in ``OUT.tmp/`` (``hparams.json``, ``loss_log.csv``, ``eval_log.csv``
if heldout > 0, ``checkpoints/step_N/{model.safetensors,state.pt,run.json}``) and renames it to ``OUT/`` once the
final Hugging Face checkpoint (model + config + tokenizer) is written, so ``OUT/`` never exists half-written. A
restart resumes only a checkpoint whose ``run.json`` (the run identity) matches the new call
(`budgetdraft.training.checkpoints`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from budgetdraft.base.atomic import (
    check_out,
    mark_output,
    output_problem,
    publish_dir,
)
from budgetdraft.base.defaults import CHUNK_SIZE, POLICY, SCORE_WINDOW
from budgetdraft.training.checkpoints import (
    all_finite,
    hparams_diff,
    identity_changes,
    latest_checkpoint,
    load_checkpoint,
    run_identity,
    save_checkpoint,
)
from budgetdraft.training.hparams import TrainingHparams, resolve_hparams
from budgetdraft.training.targets import IGNORE

LOG_COLUMNS = ["step", "L_A", "L_C", "budget", "lr", "tokens_per_s", "seconds"]
EVAL_COLUMNS = ["step", "budget", "L_A", "L_C", "agree_A", "agree_C"]


# ------------------------------------------------------------------------------------------------------------
# Configuration


def lr_factor(step: int, warmup_steps: int, steps: int) -> float:
    """Linear warm-up over `warmup_steps`, then cosine decay reaching 0 at `steps` (multiplies hparams lr)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _generator(seed: int, stream: int, index: int) -> torch.Generator:
    # One independent seed per (seed, stream, index), taken modulo 2^64 (what manual_seed accepts: a seed up to 2^32
    # overflowed it); the same value as before below 2^64, so every seed the configs use keeps its data order.
    return torch.Generator().manual_seed(((seed * 1_000_003 + stream) * 1_000_000_007 + index) % 2**64)


def sequence_index(seed: int, step: int, num_seqs: int) -> int:
    """The sequence trained on at `step`: epoch e = step // N visits a fresh permutation of 0..N-1."""
    epoch, i = divmod(step, num_seqs)
    return int(torch.randperm(num_seqs, generator=_generator(seed, 1, epoch))[i])


def sample_budget(budgets: list[int], weights: list[float], seed: int, step: int) -> int:
    """B ~ Cat(budgets, weights), a pure function of (seed, step)."""
    w = torch.tensor(weights, dtype=torch.float64)
    return int(budgets[int(torch.multinomial(w, 1, generator=_generator(seed, 2, step)))])


# ------------------------------------------------------------------------------------------------------------
# The two branches


def branch_logits(
    drafter,
    input_ids: torch.Tensor,
    prefix_len: int,
    budget: int | None,
    *,
    chunk_size: int = CHUNK_SIZE,
    score_window: int = SCORE_WINDOW,
    prefill_chunk: int | None = None,
):
    """Continuation logits [C, V] of the full-cache branch and of the sparse branch (None when budget is None)
    on one sequence input_ids [P+C]. Gradients flow when grad is enabled (the prefix prefill never tracks them)."""
    from transformers import DynamicCache

    from budgetdraft.decoding.kvcache import gathered_cache, prefill
    from budgetdraft.decoding.policies import PolicyInputs, keep_indices

    P, T = prefix_len, input_ids.shape[0]
    device = drafter.device
    ids = input_ids.to(device)[None]  # [1, P+C]
    position_ids = torch.arange(P, T, device=device)[None]  # [1, C] real positions
    cont = ids[:, P:]  # [1, C]

    # Step 2: drafter prefix prefill, no gradient, with the attention scores TopKChunks ranks chunks by.
    full = DynamicCache(config=drafter.config)
    _, scores = prefill(
        drafter, ids[:, :P], full, chunk_len=prefill_chunk, score_window=score_window if budget is not None else 0
    )

    # Step 3: full-cache branch on a clone of the prefix cache.
    logits_a = drafter(input_ids=cont, past_key_values=gathered_cache(full, None), position_ids=position_ids).logits
    if budget is None:
        return logits_a[0], None

    # Step 4: sparse-cache branch under budget B (the inference policy), with real position ids.
    layers = drafter.config.num_hidden_layers
    keep = keep_indices(POLICY, PolicyInputs(P, budget, chunk_size, layers, score_window, scores=scores))
    logits_c = drafter(input_ids=cont, past_key_values=gathered_cache(full, keep), position_ids=position_ids).logits
    return logits_a[0], logits_c[0]


def top1_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """CE against the teacher's tokens (L_A / L_C of one sequence, mean over the C positions; IGNORE ones skipped)."""
    return F.cross_entropy(logits.float(), targets.to(logits.device), ignore_index=IGNORE)


def agreement(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of the (non-IGNORE) positions whose greedy token is the teacher's."""
    keep = targets != IGNORE
    return (logits.argmax(-1).cpu()[keep] == targets[keep]).float().mean().item()


def train_step(drafter, optimizer, scheduler, data: dict, step: int, hp: TrainingHparams, num_train: int) -> dict:
    """One optimisation step (Algorithm 1) on the sequence chosen by (seed, step); returns the loss-log row."""
    start = time.perf_counter()
    n = sequence_index(hp.seed, step, num_train)
    budget = sample_budget(hp.budgets, hp.budget_weights, hp.seed, step)
    use_c = hp.lambda_c > 0
    logits_a, logits_c = branch_logits(
        drafter,
        data["input_ids"][n],
        data["prefix_len"],
        budget if use_c else None,
        chunk_size=hp.chunk_size,
        score_window=hp.score_window,
        prefill_chunk=hp.prefill_chunk,
    )
    loss_a = top1_ce(logits_a, data["targets"][n])
    loss_c = top1_ce(logits_c, data["targets"][n]) if use_c else None
    loss = loss_a + hp.lambda_c * loss_c if use_c else loss_a  # Step 5

    lr = optimizer.param_groups[0]["lr"]
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(drafter.parameters(), hp.grad_clip)
    optimizer.step()
    scheduler.step()

    # The one host sync of a step (the log row needs the losses anyway) also reads what check_finite needs.
    nan = torch.tensor(float("nan"), device=loss.device)
    parts = [loss_a, loss_c if use_c else nan, loss, grad_norm]
    l_a, l_c, total, norm = torch.stack([t.detach().float() for t in parts]).tolist()
    weighted = f" = L_A {l_a:.4g} + {hp.lambda_c:g} * L_C {l_c:.4g}" if use_c else ""
    check_finite(step, hp.steps, total, norm, weighted)
    seconds = time.perf_counter() - start
    return {
        "step": step,
        "L_A": l_a,
        "L_C": l_c,
        "budget": budget if use_c else 0,
        "lr": lr,
        "tokens_per_s": data["input_ids"].shape[1] / seconds,
        "seconds": seconds,
    }


class Diverged(ValueError):
    """Training reached a non-finite loss, gradient or weight. The run stops and saves nothing from then on: a NaN
    drafter would otherwise be measured and published as if it were trained."""


def check_finite(step: int, steps: int, loss: float, grad_norm: float, detail: str = "") -> None:
    """Raise Diverged unless step ``step``'s loss and total gradient norm (the one clipping computes) are finite."""
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        values = f"loss {loss:.4g}{detail}, gradient norm {grad_norm:.4g}"
        raise Diverged(f"the loss is not finite at step {step + 1} of {steps} ({values})")


def check_weights(model, done: int, steps: int) -> None:
    """Raise Diverged when a weight is not finite (an update can overflow after a finite loss): checked before every
    checkpoint and the final save, so that neither a resumed run nor the published model starts from one
    (`checkpoints.all_finite`, which a resumed checkpoint is checked with too)."""
    if not all_finite(model.parameters()):
        raise Diverged(f"a weight is not finite after step {done} of {steps}")


def stopped(label: str, err: Diverged, out) -> ValueError:
    """The one error line of a run that diverged: which run, where, and that ``out`` was not written."""
    return ValueError(f"{label}: {err}; training stopped, nothing written to {out}")


@torch.no_grad()
def evaluate(
    drafter,
    data: dict,
    budget: int,
    *,
    chunk_size: int = CHUNK_SIZE,
    score_window: int = SCORE_WINDOW,
    prefill_chunk: int | None = None,
) -> dict:
    """Held-out check, no gradient: mean L_A and L_C(budget) over the sequences of `data`, and the top-1
    agreement with the teacher targets (the greedy acceptance proxy) under the full and the sparse cache.
    Returns {"L_A", "L_C", "agree_A", "agree_C"}."""
    was_training = drafter.training
    drafter.eval()
    sums = dict.fromkeys(("L_A", "L_C", "agree_A", "agree_C"), 0.0)
    n = data["input_ids"].shape[0]
    for i in range(n):
        targets = data["targets"][i]
        logits_a, logits_c = branch_logits(
            drafter,
            data["input_ids"][i],
            data["prefix_len"],
            budget,
            chunk_size=chunk_size,
            score_window=score_window,
            prefill_chunk=prefill_chunk,
        )
        sums["L_A"] += top1_ce(logits_a, targets).item()
        sums["L_C"] += top1_ce(logits_c, targets).item()
        sums["agree_A"] += agreement(logits_a, targets)
        sums["agree_C"] += agreement(logits_c, targets)
    drafter.train(was_training)
    return {k: v / n for k, v in sums.items()}


def trainable_parameters(drafter, freeze_embeddings: bool) -> list:
    """Every parameter, or all but the token embedding and the LM head (one tensor when tied) when frozen."""
    drafter.requires_grad_(True)
    if freeze_embeddings:
        for embedding in (drafter.get_input_embeddings(), drafter.get_output_embeddings()):
            embedding.weight.requires_grad_(False)
    return [p for p in drafter.parameters() if p.requires_grad]


def subset(data: dict, rows) -> dict:
    return {**data, "input_ids": data["input_ids"][rows], "targets": data["targets"][rows]}


# ------------------------------------------------------------------------------------------------------------
# Logs and the final directory


def _open_log(path: Path, columns: list[str], keep_until: int):
    """Append to a CSV log, first dropping rows of steps >= keep_until (they are redone after a restart)."""
    rows = []
    if path.is_file():
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if int(r["step"]) < keep_until]
    f = open(path, "w", newline="")
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    f.flush()
    return f, writer


def _log_heldout(drafter, heldout: dict | None, hp: TrainingHparams, step: int, writer, f) -> None:
    if heldout is None:
        return
    for budget in hp.budgets:
        res = evaluate(
            drafter,
            heldout,
            budget,
            chunk_size=hp.chunk_size,
            score_window=max(1, hp.score_window),
            prefill_chunk=hp.prefill_chunk,
        )
        writer.writerow({"step": step, "budget": budget, **res})
        print(
            f"held-out step {step}: L_A {res['L_A']:.4f} (agree {res['agree_A']:.3f})  "
            f"L_C(B={budget}) {res['L_C']:.4f} (agree {res['agree_C']:.3f})"
        )
    f.flush()


def _copy_tokenizer(init: str, out: Path) -> None:
    from budgetdraft.decoding.loading import resolve

    src = Path(resolve(init))
    if not src.is_dir():
        return
    for path in src.iterdir():
        if path.is_file() and (
            path.name.startswith("tokenizer")
            or path.name
            in (
                "special_tokens_map.json",
                "vocab.json",
                "merges.txt",
                "added_tokens.json",
                "chat_template.jinja",
                "chat_template.json",
            )
        ):
            shutil.copy2(path, out / path.name)


def split_heldout(data: dict, hp: TrainingHparams) -> tuple[int, dict | None]:
    """(sequences trained on, the held-out last ``heldout`` sequences or None)."""
    num_seqs = data["input_ids"].shape[0]
    num_train = num_seqs - hp.heldout
    if num_train < 1:
        raise ValueError(f"heldout={hp.heldout} leaves no training sequences out of {num_seqs}")
    return num_train, subset(data, slice(num_train, None)) if hp.heldout else None


def optimizer_and_schedule(drafter, hp: TrainingHparams):
    """AdamW over the trainable parameters, with the linear warm-up + cosine schedule (``lr_factor``)."""
    optimizer = torch.optim.AdamW(
        trainable_parameters(drafter, hp.freeze_embeddings), lr=hp.lr, weight_decay=hp.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, partial(lr_factor, warmup_steps=hp.warmup_steps, steps=hp.steps)
    )
    return optimizer, scheduler


def resume(work: Path, identity: dict, drafter, optimizer, scheduler, steps: int) -> int:
    """The step to start from: that of the last checkpoint in ``work`` when the run identity is unchanged (its
    states restored), else 0 with ``work`` emptied (a line on stderr says what changed)."""
    checkpoint = latest_checkpoint(work)
    changed = identity_changes(checkpoint, identity) if checkpoint is not None else []
    if changed:
        detail = f" ({hparams_diff(checkpoint, identity)})" if "hparams" in changed else ""
        print(
            f"{', '.join(changed)} changed since the checkpoint {checkpoint}{detail}: restarting from step 0",
            file=sys.stderr,
        )
        checkpoint = None
    if checkpoint is not None:
        start = load_checkpoint(checkpoint, drafter, optimizer, scheduler)
        print(f"resuming from {checkpoint} (step {start} of {steps})")
        return start
    if work.exists():  # a stale run of ours (check_paths), or one killed before its first checkpoint: start over
        shutil.rmtree(work)
    work.mkdir(parents=True)
    mark_output(work, "train")  # ours from now on: a restart may resume or discard it
    return 0


def work_dir(out: Path) -> Path:
    """``OUT.tmp``, beside ``out``: where a run works and keeps its checkpoints until it publishes ``out``."""
    out = Path(os.path.abspath(out))
    return out.with_name(out.name + ".tmp")


def check_paths(out: Path, work: Path) -> None:
    """Refuse, before any work, an ``out`` that is not an earlier output of ``train`` and a work folder ``work``
    that this command did not make (a user's ``OUT.tmp``): neither is ever removed (``base.atomic.check_out``)."""
    check_out(out, "train")
    if problem := output_problem(work, "train"):
        raise ValueError(f"--out {out}: its work folder {work} {problem}")


def publish(work: Path, out: Path, drafter, init: str) -> Path:
    """The finished drafter (and its tokenizer) saved in ``work``, which then becomes ``out`` by a rename (an
    earlier output of train there is replaced, nothing else: ``base.atomic.publish_dir``)."""
    drafter.save_pretrained(work, safe_serialization=True)
    _copy_tokenizer(init, work)
    publish_dir(work, out, "train")
    return out


def train(
    init: str,
    targets_file: str | Path,
    out: str | Path,
    hparams: dict | None = None,
    *,
    stop_after: int | None = None,
    progress: bool = True,
    label: str = "training",
) -> Path | None:
    """Train the drafter `init` on `targets_file`, writing the Hugging Face checkpoint `out`.

    Restarting the same call after a kill resumes from the last checkpoint in `out`.tmp/checkpoints if the run
    identity (``run_identity``: hparams, contents of targets and init, the ``step_code``) is unchanged; otherwise
    the stale work directory is discarded, with a line on stderr naming what changed, and training starts over.
    A non-finite loss, gradient norm or weight stops the run with a ValueError starting with `label` (which names
    the run in messages only): `out` is not written, `out`.tmp keeps the checkpoints of the steps before (all
    finite), so a restart with the same identity fails again at the same step and one with new hparams starts over.
    `stop_after=k` returns (None) after step k without finishing, like a kill (tests)."""
    try:
        return _train(init, targets_file, Path(out), resolve_hparams(hparams), stop_after, progress)
    except Diverged as err:
        raise stopped(label, err, out) from None


def _train(init: str, targets_file, out: Path, hp: TrainingHparams, stop_after, progress: bool) -> Path | None:
    from budgetdraft.decoding.loading import load_model
    from budgetdraft.training.targets import load_targets

    if hp.threads > 0:
        torch.set_num_threads(hp.threads)
    work = work_dir(out)
    check_paths(out, work)
    data = load_targets(targets_file)
    drafter = load_model(init, device=hp.device, dtype=hp.dtype, trainable=True)
    drafter.train()
    optimizer, scheduler = optimizer_and_schedule(drafter, hp)
    identity = run_identity(hp, targets_file, init)
    start = resume(work, identity, drafter, optimizer, scheduler, hp.steps)
    (work / "hparams.json").write_text(
        json.dumps({**hp.to_json(), "init": init, "targets": str(targets_file)}, indent=1)
    )
    if not _steps(work, start, drafter, optimizer, scheduler, data, hp, identity, stop_after, progress):
        return None
    return publish(work, out, drafter, init)


def _steps(work: Path, start: int, drafter, optimizer, scheduler, data, hp, identity, stop_after, progress) -> bool:
    """Steps ``start`` .. ``hp.steps`` with their logs and checkpoints; False when stopped early (``stop_after``)."""
    from tqdm import tqdm

    num_train, heldout = split_heldout(data, hp)
    log_file, log = _open_log(work / "loss_log.csv", LOG_COLUMNS, start)
    eval_file, eval_log = _open_log(work / "eval_log.csv", EVAL_COLUMNS, start + 1) if heldout else (None, None)
    if start == 0:
        _log_heldout(drafter, heldout, hp, 0, eval_log, eval_file)
    bar = tqdm(range(start, hp.steps), initial=start, total=hp.steps, desc="train", disable=not progress)
    try:
        for step in bar:
            row = train_step(drafter, optimizer, scheduler, data, step, hp, num_train)
            log.writerow(row)
            log_file.flush()
            bar.set_postfix(L_A=f"{row['L_A']:.3f}", L_C=f"{row['L_C']:.3f}", B=row["budget"])
            done = step + 1
            if done % hp.checkpoint_every == 0 and done < hp.steps:
                check_weights(drafter, done, hp.steps)
                save_checkpoint(work, done, drafter, optimizer, scheduler, identity)
                _log_heldout(drafter, heldout, hp, done, eval_log, eval_file)
            if stop_after is not None and done >= stop_after and done < hp.steps:
                return False
        check_weights(drafter, hp.steps, hp.steps)
        _log_heldout(drafter, heldout, hp, hp.steps, eval_log, eval_file)
    finally:
        bar.close()
        for f in (log_file, eval_file):
            f and f.close()
    return True
