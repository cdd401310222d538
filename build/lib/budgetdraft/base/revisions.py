"""Hub revisions: which Hugging Face repositories a config reads, and the commit each one is pinned to.

A config's `revisions:` maps a hub repository to the commit it is read at (40 hex digits): the verifier and
drafter when they are hub ids, and the repositories behind the paper's data sources (`HUB_DATASETS`). Jobs pass it
on (`export-model --revision`, `prepare --revision`), so a rerun a year later reads the same weights and texts.
A repository is pinned once, with internet, by

    python -m budgetdraft pin --configfile config/paper.yaml     # prints the `revisions:` block to paste

which asks the hub for each repository's current commit. The workflow warns at plan time about every hub
repository the config reads without a revision.
"""

from __future__ import annotations

import os
import re

# data source (budgetdraft.training.data) -> the hub dataset repository it reads
HUB_DATASETS = {
    "pg19_test": "emozilla/pg19",
    "pg19_train": "emozilla/pg19",
    "longbench_qmsum": "THUDM/LongBench",
    "narrativeqa_lwm": "deepmind/narrativeqa",
}
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def hub_model(model_spec: str) -> str | None:
    """The hub repository a model spec names (``owner/name`` that is not a local path), else None."""
    local = (
        model_spec.startswith(("embedded:", "/", ".", "~")) or "results/" in model_spec or os.path.exists(model_spec)
    )
    return None if local or model_spec.count("/") != 1 else model_spec


def given_checkpoints(cfg: dict) -> dict[str, dict]:
    """The variants of ``cfg`` given as a checkpoint in a hub repository (`variants.X.checkpoint` = owner/name)."""
    variants = cfg.get("variants") or {}
    return {v: o for v, o in variants.items() if isinstance(o, dict) and hub_model(str(o.get("checkpoint") or ""))}


def hub_repos(cfg: dict) -> dict[str, str]:
    """Every hub repository ``cfg`` reads -> "model" or "dataset": the verifier's and drafter's, a given
    checkpoint's and the data sources'."""
    repos = {}
    for key in ("verifier", "drafter"):
        if repo := hub_model(cfg.get(key, "")):
            repos[repo] = "model"
    repos.update({str(o["checkpoint"]): "model" for o in given_checkpoints(cfg).values()})
    stages = [cfg.get("training_data", {}), (cfg.get("base_drafter") or {}).get("data", {})]
    sources = [d.get("source") for d in cfg.get("datasets", {}).values()] + [s.get("source") for s in stages]
    repos.update({HUB_DATASETS[s]: "dataset" for s in sources if s in HUB_DATASETS})
    return repos


def unpinned(cfg: dict) -> list[str]:
    """The hub repositories ``cfg`` reads without a revision in its `revisions:` (a given checkpoint's own
    `revision` pins its repository too)."""
    pinned = set(cfg.get("revisions") or {})
    pinned |= {str(o["checkpoint"]) for o in given_checkpoints(cfg).values() if o.get("revision")}
    return sorted(repo for repo in hub_repos(cfg) if repo not in pinned)


def revision(cfg: dict, repo: str | None) -> str:
    """The pinned revision of ``repo`` ('' when there is none)."""
    return (cfg.get("revisions") or {}).get(repo, "") if repo else ""


def current_commits(repos: dict[str, str]) -> dict[str, str]:  # pragma: no cover - needs the Hugging Face hub
    """Each repository's commit on the hub now."""
    from huggingface_hub import HfApi

    api = HfApi()
    info = {"model": api.model_info, "dataset": api.dataset_info}
    return {repo: info[kind](repo).sha for repo, kind in sorted(repos.items())}


def block(commits: dict[str, str]) -> str:
    """The `revisions:` YAML block of ``commits``."""
    lines = ["revisions:  # python -m budgetdraft pin: each hub repository's commit"]
    lines += [f'  "{repo}": "{sha}"' for repo, sha in sorted(commits.items())]
    return "\n".join(lines) + "\n"


def pinned_block(cfg: dict) -> str | None:
    """The `revisions:` block of the hub repositories the config ``cfg`` reads, at their current commits (None when
    it reads none); a ValueError names them when the hub cannot say."""
    repos = hub_repos(cfg)
    if not repos:
        return None
    try:
        commits = current_commits(repos)
    except Exception as err:  # offline, a gated repository, no such repository
        raise ValueError(f"cannot read the hub's current commits of {', '.join(sorted(repos))}: {err}") from None
    return block(commits)
