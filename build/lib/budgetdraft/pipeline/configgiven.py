"""A variant given as a checkpoint, not trained here (config `variants.X.checkpoint`, the authors' release): what it
may say beside its checkpoint, where its files are, the revision it is read at, and that it shares the verifier's
vocabulary (called by `budgetdraft.pipeline.configcheck.check_consistency`).
"""

from __future__ import annotations

import os
from pathlib import Path

from budgetdraft.base import revisions

GIVEN_KEYS = ("checkpoint", "subfolder", "revision", "lambda_c", "budgets", "budget_weights", "not_run")  # not how


def check_given(config: dict) -> None:
    """A variant given as a checkpoint is not trained here: a training key beside `checkpoint` would have no effect
    (refused, naming it), a revision pins only a hub checkpoint, and a local checkpoint must exist and share the
    verifier's vocabulary (refused naming both; a hub checkpoint is checked when exported, the verifier too when it
    is a hub id)."""
    from budgetdraft.decoding.export import subfolder_problem, vocabulary_problem

    for label, given in config["variants"].items():
        if "checkpoint" not in given:
            continue
        for key in given:
            if key not in GIVEN_KEYS:
                raise ValueError(
                    f"variants.{label}.{key}: {label} is given as a checkpoint, not trained here, so {key} has no "
                    f"effect; remove it (with checkpoint, only {', '.join(GIVEN_KEYS[1:])} say what it is)"
                )
        if why := subfolder_problem(str(given.get("subfolder") or "")):
            raise ValueError(f"variants.{label}.subfolder = {given['subfolder']!r}: {why}")
        where = Path(os.path.expanduser(str(given["checkpoint"] or ""))) / given.get("subfolder", "")
        checkpoint = str(given["checkpoint"] or "")
        if given.get("not_run") and checkpoint:
            raise ValueError(
                f"variants.{label}.not_run = {given['not_run']!r} says why it is not run, but it has a checkpoint: "
                "remove one of them"
            )
        if given.get("revision") and checkpoint and revisions.hub_model(checkpoint) is None:
            raise ValueError(
                f"variants.{label}.revision = {given['revision']!r}: {checkpoint!r} is a local checkpoint, and a "
                "revision pins a hub repository's commit; remove it"
            )
        # a path (not a hub id, revisions.hub_model; "/" in it: neither an embedded spec nor a bare name) that is missing
        if "/" in checkpoint and revisions.hub_model(checkpoint) is None and not where.is_dir():
            raise ValueError(
                f"variants.{label}.checkpoint = {str(where)!r}: no such directory (a local checkpoint; a hub "
                "repository is written owner/name)"
            )
        if checkpoint and where.is_dir() and not (where / "config.json").is_file():
            subfolders = sorted(p.parent.name for p in where.glob("*/config.json"))
            hint = f": it holds the models {subfolders}, name one as subfolder" if subfolders else ""
            raise ValueError(
                f"variants.{label}.checkpoint = {str(where)!r}: no config.json there, so not a Hugging Face model "
                f"directory{hint}"
            )
        verifier = verifier_directory(config)
        if given["checkpoint"] and where.is_dir() and verifier is not None:
            name = f"variants.{label}.checkpoint = {str(where)!r}"
            if why := vocabulary_problem(where, verifier, name, config["verifier"]):
                raise ValueError(why)


def verifier_directory(config: dict) -> Path | None:
    """The verifier's files where they can be read at plan time: a local directory, or an embedded model's converted
    cache (once converted); None for a hub id (a results/ export may be another config's: never read as this one's)."""
    from budgetdraft.base.cache import cache_root
    from budgetdraft.decoding.loading import parse_model_spec

    base, _ = parse_model_spec(config["verifier"])
    path = Path(os.path.expanduser(config["verifier"]))
    if base.startswith("embedded:"):
        path = cache_root() / "models" / base.split(":", 1)[1]
    return path if (path / "config.json").is_file() else None
