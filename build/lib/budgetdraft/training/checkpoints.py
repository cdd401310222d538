"""A drafter training run's checkpoints: ``checkpoints/step_N/{model.safetensors,state.pt,run.json}`` under the run's
work directory (tensors, dicts and numbers only: loadable with ``torch.load(weights_only=True)``), and the run
identity (``run_identity``) a restart must match to resume one (`budgetdraft.training.train`).
"""

from __future__ import annotations

import json
import random
import re
import shlex
import shutil
from pathlib import Path

import torch

from budgetdraft.base.atomic import atomic_path, file_sha256, files_sha256
from budgetdraft.training.hparams import TrainingHparams, resolve_hparams

# Keys that may change between a killed run and its restart without changing the result.
RESTART_FREE_KEYS = ("threads", "checkpoint_every")


def _python_rng_state() -> dict:
    version, state, gauss_next = random.getstate()
    return {"version": version, "state": torch.tensor(state, dtype=torch.int64), "gauss_next": gauss_next}


def _set_python_rng_state(saved: dict) -> None:
    random.setstate((saved["version"], tuple(int(x) for x in saved["state"].tolist()), saved["gauss_next"]))


def step_code() -> list[Path]:
    """The sources a training run executes: the modules of command `train` (``budgetdraft.base.importgraph``, as the
    workflow's train rules declare them), part of the run identity."""
    from budgetdraft.base.importgraph import command_imports, module_files

    package = Path(__file__).parents[1]
    files = module_files(package)
    return [files[name] for name in command_imports("train", package=package)]


def run_identity(hp: TrainingHparams, targets_file, init: str) -> dict:
    """What must be equal for a restart to continue the same run: the hparams (less RESTART_FREE_KEYS) and the
    sha256 of the targets file, of the init drafter's weights (``weights_digest``) and of the ``step_code`` sources.
    Paths are not part of it: the same path may hold other contents after the kill."""
    from budgetdraft.decoding.loading import weights_digest

    return {
        "hparams": {k: v for k, v in resolve_hparams(hp).to_json().items() if k not in RESTART_FREE_KEYS},
        "targets": file_sha256(targets_file),
        "init": weights_digest(init),
        "code": files_sha256(step_code()),
    }


def identity_changes(checkpoint: Path, identity: dict) -> list[str]:
    """The parts of `identity` (hparams, targets, init, code) that differ from the run.json of `checkpoint`."""
    saved = saved_identity(checkpoint)
    current = json.loads(json.dumps(identity, sort_keys=True))  # as saved: tuples become lists
    return [key for key in current if saved.get(key) != current[key]]


def hparams_diff(checkpoint: Path, identity: dict) -> str:
    """The hparams keys that differ from the run.json of `checkpoint`, with their values then and now."""
    then = saved_identity(checkpoint).get("hparams") or {}
    now = json.loads(json.dumps(identity["hparams"], sort_keys=True))
    keys = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
    return ", ".join(f"{k}: {then.get(k, 'unset')!r} -> {now.get(k, 'unset')!r}" for k in keys)


def save_checkpoint(work: Path, step: int, drafter, optimizer, scheduler, identity: dict) -> Path:
    """checkpoints/step_N/ written atomically (``atomic_path``); older checkpoints, and what a killed write left,
    are removed afterwards."""
    from safetensors.torch import save_model

    root = work / "checkpoints"
    final = root / f"step_{step}"
    with atomic_path(final, command="train") as tmp:
        tmp.mkdir()
        save_model(drafter, str(tmp / "model.safetensors"))
        torch.save(
            {
                "step": step,
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "python_rng": _python_rng_state(),
            },
            tmp / "state.pt",
        )
        (tmp / "run.json").write_text(json.dumps(identity, indent=1, sort_keys=True))
    for old in root.iterdir():
        if old != final and old.is_dir():
            shutil.rmtree(old)
    return final


def latest_checkpoint(work: Path) -> Path | None:
    root = work / "checkpoints"
    if not root.is_dir():
        return None
    done = [
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := re.fullmatch(r"step_(\d+)", p.name)) and (p / "state.pt").is_file()
    ]
    return max(done)[1] if done else None


def damaged(checkpoint: Path, why: str) -> ValueError:
    """The one line of a checkpoint a restart cannot resume: which, why, and that deleting it lets the run go on
    (from the checkpoint before it, or step 0) instead of every restart failing the same way."""
    return ValueError(
        f"the checkpoint {checkpoint} is damaged ({why}): delete it (rm -r {shlex.quote(str(checkpoint))}) and run "
        "again to resume from the checkpoint before it, or from step 0"
    )


def saved_identity(checkpoint: Path) -> dict:
    """The run identity saved in ``checkpoint`` (its run.json); a damaged one is a ``damaged`` error."""
    try:
        saved = json.loads((checkpoint / "run.json").read_text())
    except (OSError, ValueError) as err:
        raise damaged(checkpoint, f"run.json: {err}") from None
    if not isinstance(saved, dict):
        raise damaged(checkpoint, "run.json is not a JSON object")
    return saved


def load_checkpoint(path: Path, drafter, optimizer, scheduler) -> int:
    """Restore the weights, optimizer, scheduler and RNG states saved in `path`; returns its step. A checkpoint
    that cannot be read (cut short, overwritten) or holds a non-finite weight or optimizer state (which would stop
    every restart at its first step) is a ``damaged`` error naming it."""
    import pickle

    from safetensors import SafetensorError
    from safetensors.torch import load_model

    try:
        load_model(drafter, str(path / "model.safetensors"), strict=True, device=str(drafter.device))
    except (SafetensorError, OSError, RuntimeError) as err:
        raise damaged(path, f"model.safetensors: {(str(err).strip() or type(err).__name__).splitlines()[0]}") from None
    try:
        state = torch.load(path / "state.pt", weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        _set_python_rng_state(state["python_rng"])
        step = int(state["step"])
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as err:
        # its type only: torch's text advises weights_only=False, which must not be followed on a damaged file
        raise damaged(path, f"state.pt cannot be restored: {type(err).__name__}") from None
    tensors = [*drafter.parameters(), *(t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t))]
    if not all_finite(tensors):
        raise damaged(path, "a weight or an optimizer state is not finite")
    return step


def all_finite(tensors) -> bool:
    """Whether every floating-point tensor of ``tensors`` holds no NaN and no infinity. A tensor whose sum is finite
    holds neither (either makes the sum one), so only a tensor whose sum is not (a value that is not finite, or finite
    ones overflowing float32) is checked element by element: the same answer, without a boolean copy of every
    tensor (a drafter's 28M-weight embedding: 0.15 s on a 2-core EPYC), and one read back from the device."""
    floating = [t.detach() for t in tensors if t.is_floating_point()]
    if not floating:
        return True
    sums = torch.stack([t.sum(dtype=torch.float32) for t in floating]).isfinite().tolist()
    return all(bool(torch.isfinite(t).all()) for t, finite in zip(floating, sums) if not finite)
