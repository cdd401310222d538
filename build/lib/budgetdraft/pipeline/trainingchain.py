"""Where each drafter of a plan lives (the training chain base drafter -> variants, per replicate, and the drafters
made or given beside it), and what each training job is handed: a part of `budgetdraft.pipeline.plan.Plan`
(``plan.drafters``)."""

from __future__ import annotations

import functools
import json
import os
import shlex
from pathlib import Path
from typing import Protocol

from budgetdraft.base import methods, names, revisions
from budgetdraft.base.atomic import files_sha256
from budgetdraft.base.methods import Method
from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams

VERIFIER = "results/models/verifier"


class ChainLabels(Protocol):
    """What a training chain reads of its plan's labels (`budgetdraft.pipeline.plan.Labels` is one)."""

    methods: dict[str, Method]
    variants: list[str]
    given: dict[str, dict]
    trained: list[str]

    def method_of(self, label: str) -> Method: ...


class ChainPlan(Protocol):
    """What a training chain reads of its plan (`budgetdraft.pipeline.plan.Plan` is one). Named here, not imported:
    the plan imports this module to build its part, and an import back would close a circle."""

    config: dict
    labels: ChainLabels
    base: dict | None
    replicates: list[int]
    longest_context: str


class TrainingChain:
    """Where each drafter lives (the training chain base drafter -> variants, per replicate, and the drafters made or
    given beside it), and what each training job is handed."""

    def __init__(self, plan: ChainPlan):
        self.plan, self.labels, self.config = plan, plan.labels, plan.config
        self.base, self.replicates = plan.base, plan.replicates
        # Training stages, each with its own sequences and teacher targets: the base drafter (short full-cache
        # windows) and BudgetDraft's variants (long prefix + supervised continuation).
        self.training_stages = (["base"] if self.base else []) + ["budgetdraft"]
        # The device each kind of job runs on: model jobs on `device`; the training chain (targets, train_base,
        # train) on `training.device`, else `device`; EAGLE-3's head on `baselines.eagle3.training.device`.
        config = self.config
        self.training_device = config["training"].get("device", config["device"])
        self.eagle3_training = {
            "device": config["device"],
            **config["baselines"].get(methods.EAGLE3, {}).get("training", {}),
        }
        Eagle3Hparams.from_json(self.eagle3_training)  # the contract of train-eagle3 --hparams, at plan time

    def training_data(self, stage: str) -> dict:
        """Sequences of a training stage: `base_drafter.data` for the base drafter, `training_data` for the variants."""
        return self.base["data"] if stage == "base" else self.config["training_data"]

    def base_drafter_dir(self, replicate) -> str:
        """The drafter every other drafter of a replicate starts from: its base drafter when config `base_drafter`
        trains one (a directory() output of rule train_base), else the exported drafter untouched (the paper's
        llama-68m)."""
        if self.base:
            return f"results/models/drafter_base/r{replicate}"
        return "results/models/drafter_untrained"

    def drafter_dir(self, label, replicate=None) -> str | None:
        """The directory a cell label's drafter is read from (a directory() output; None for AR); ``replicate`` for
        the labels that are `replicated`. A drafter kind made by its own rule from the base drafter (`interpolated`, or
        any kind declared with `rules`) is the method's own (``own_dir``)."""
        method = self.labels.method_of(label)
        where = {
            methods.NONE: lambda: None,
            methods.BASE: lambda: self.base_drafter_dir(replicate),
            methods.HEAD: lambda: f"results/drafters/{method.label}",
            methods.TRAINED: lambda: f"results/drafters/r{replicate}/{method.label}",
            methods.GIVEN: lambda: f"results/drafters/given/{method.label}",
        }
        return where.get(method.drafter, lambda: self.own_dir(method.label, replicate))()

    def own_dir(self, label: str, replicate) -> str:
        """The drafter a method made from the base drafter of a replicate (or from the untrained one, shared) has of
        its own, e.g. PI's (rule interpolate: its positions interpolated to cover the longest context)."""
        return f"results/drafters/r{replicate}/{label}" if self.base else f"results/drafters/{label}"

    def made_from_base(self, kind: str) -> list[str]:
        """The labels this config runs whose drafter is of ``kind`` and made by its rule (`DrafterKind.rules`)."""
        return [label for label, m in self.labels.methods.items() if m.drafter == kind]

    def longest_tokens(self) -> int:
        """The longest context's prompt tokens: the positions an interpolated drafter is made to cover."""
        return self.config["contexts"][self.plan.longest_context]

    def profiled(self, replicate) -> dict[str, str]:
        """{label: drafter directory} of the positional profile of one replicate (rule positions): the base drafter
        (SD's) and every drafter a method has of its own (`DrafterKind.own`: PI's when it runs, every variant)."""
        own = [label for label, m in self.labels.methods.items() if methods.KINDS[m.drafter].own]
        return {label: self.drafter_dir(label, replicate) for label in [methods.SD, *own]}

    def trained_drafters(self) -> list[str]:
        """Every trained variant's directory, per replicate (their loss logs)."""
        return [self.drafter_dir(v, r) for r in self.replicates for v in self.labels.trained]

    def comparison_drafters(self) -> dict[str, list[str]]:
        """{label: [its model directories]} of the comparison table's rows, whose sizes the table counts from the
        weights (TriForce: its drafter + the verifier, its middle level); replicates have the same sizes: the
        first's."""
        first = self.replicates[0]
        models = {"drafter": lambda label: self.drafter_dir(label, first), "verifier": lambda label: VERIFIER}
        drafters = {
            label: [models[part](label) for part in m.comparison]
            for label, m in self.labels.methods.items()
            if m.comparison
        }
        bd = {names.BD: [self.drafter_dir(names.BD, first)]} if names.BD in self.labels.variants else {}
        return {methods.SD: drafters.pop(methods.SD), **bd, **drafters}

    def artifact_drafters(self, artifact: str) -> dict[str, list[str]]:
        """{label: [model directories]} whose sizes a table counts: the comparison table's drafters, else none."""
        return self.comparison_drafters() if artifact == "comparison" else {}

    def export_dtype(self, role: str) -> str:
        """The dtype a model is exported in: the verifier's `verifier_dtype`; the drafter's training dtype (the dtype
        it is trained and, with the paper's fp32 drafter, decoded in)."""
        if role == "verifier":
            return self.config["verifier_dtype"]
        return self.config["training"].get("dtype", self.config["drafter_dtype"])

    @staticmethod
    def seeded(hparams: dict, replicate) -> dict:
        """Training hparams of one replicate: seed + replicate (data order and budget sampling); replicate 0 trains
        exactly what a configuration without replicates trains."""
        return {**hparams, "seed": TrainingHparams.from_json(hparams).seed + int(replicate)}

    def base_hparams(self, replicate) -> str:
        """`training:` merged with `base_drafter.training`, L_A only (the full-cache windows have no prefix to
        sparsify), as handed to `budgetdraft train --hparams`."""
        hparams = {**self.config["training"], "device": self.training_device, **self.base["training"], "lambda_c": 0.0}
        return json.dumps(self.seeded(hparams, replicate), sort_keys=True)

    def variant_hparams(self, variant: str, replicate=0) -> str:
        """`training:` merged with the variant's overrides and the replicate's seed, as handed to `budgetdraft train
        --hparams`."""
        hparams = {**self.config["training"], "device": self.training_device, **self.config["variants"][variant]}
        return json.dumps(self.seeded(hparams, replicate), sort_keys=True)

    def eagle3_hparams(self) -> str:
        """`train-eagle3 --hparams`: `baselines.eagle3.training` on `device` unless it names its own."""
        return json.dumps(self.eagle3_training, sort_keys=True)

    def given_revision(self, variant: str) -> str:
        """The hub commit a given checkpoint is read at: its own `revision`, else the config's `revisions:` entry of
        its repository ('' for a local checkpoint, or a hub one left unpinned: warned about at plan time)."""
        given = self.labels.given[variant]
        return given.get("revision") or revisions.revision(self.config, revisions.hub_model(str(given["checkpoint"])))

    def given_files(self, variant: str) -> list[str]:
        """The files of a local checkpoint (inside its `subfolder`), the inputs of its export: a checkpoint replaced
        at the same path is exported and measured again. [] for a hub checkpoint (its revision says what it is)."""
        given = self.labels.given[variant]
        if revisions.hub_model(str(given["checkpoint"])):
            return []
        where = Path(os.path.expanduser(str(given["checkpoint"]))) / given.get("subfolder", "")
        return sorted(str(f) for f in where.iterdir() if f.is_file()) if where.is_dir() else []

    def given_digest(self, variant: str) -> str:
        """What a given checkpoint is, by content: the sha256 of its files (a local one) or its repository, subfolder
        and revision (a hub one); export_given's params, so that a checkpoint that changes is exported again even
        when its files keep an older modification time (copied with it)."""
        given = self.labels.given[variant]
        files = self.given_files(variant)
        if files:
            return _files_digest(tuple((f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files))
        return f"{given['checkpoint']}/{given.get('subfolder', '')}@{self.given_revision(variant)}"

    def export_given_flags(self, variant: str) -> str:
        """export-model's flags for a variant given as a checkpoint: the checkpoint, its subfolder and revision."""
        given, revision = self.labels.given[variant], self.given_revision(variant)
        flags = [f"--spec {shlex.quote(str(given['checkpoint']))}"]
        flags += [f"--subfolder {shlex.quote(given['subfolder'])}"] if given.get("subfolder") else []
        flags += [f"--revision {shlex.quote(revision)}"] if revision else []
        return " ".join(flags)


@functools.lru_cache(maxsize=32)
def _files_digest(files: tuple[tuple[str, int, int], ...]) -> str:
    """sha256 of files named with their size and modification time: read once per process while they stay so."""
    return files_sha256([f for f, _, _ in files])
