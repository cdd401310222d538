"""What each artifact of a plan (and the claims, and the paper diff) lays out where: the JSON files rule settings
writes to results/settings/, a part of `budgetdraft.pipeline.plan.Plan` (``plan.settings``)."""

from __future__ import annotations

import json
from functools import cached_property
from typing import Protocol

from budgetdraft.base import defaults, names
from budgetdraft.pipeline.trainingchain import TrainingChain
from budgetdraft.report.settings import PaperSettings, Variant

SETTINGS_FILE = "results/settings/{name}.json"  # rule settings' output: what `paper` and `claims` lay out where
PAPER_DIFF = "paper_diff"  # the settings file of the paper diff: the claims' settings and the run's `measurement`


class SettingsLabels(Protocol):
    """What the settings files read of their plan's labels (`budgetdraft.pipeline.plan.Labels` is one)."""

    baselines: list[str]
    lambda_variants: list[str]
    other_variants: list[str]
    not_run: dict[str, str]
    policy: str
    policies: dict


class SettingsCells(Protocol):
    """What the settings files read of their plan's cells (`budgetdraft.pipeline.plan.CellPlan` is one)."""

    all_tables: list[str]
    all_figures: dict[str, str]

    def budgets_of(self, label: str) -> list[int]: ...


class SettingsPlan(Protocol):
    """What the settings files read of their plan (`budgetdraft.pipeline.plan.Plan` is one). Named here, not
    imported: the plan imports this module to build its part, and an import back would close a circle."""

    config: dict
    labels: SettingsLabels
    cells: SettingsCells
    drafters: TrainingChain
    contexts: list[str]
    budgets: list[int]
    base: dict | None
    replicates: list[int]


class SettingsFiles:
    """What each artifact (and the claims) lays out where: the JSON rule settings writes to results/settings/."""

    def __init__(self, plan: SettingsPlan):
        self.plan, self.labels, self.config = plan, plan.labels, plan.config

    def samples(self, dataset: str) -> int:
        return self.config["datasets"][dataset].get("samples", self.config["samples"])

    def variant_settings(self, variant: str) -> dict:
        """What the tables say of a variant: its λ, budgets and steps as trained here, or, given as a checkpoint, the
        λ and budgets its config says it was trained with, and the checkpoint."""
        overrides = self.config["variants"][variant]
        if "checkpoint" in overrides:
            return Variant.of_checkpoint({**overrides, "checkpoint": str(overrides["checkpoint"] or "")}).to_json()
        return Variant.of_hparams(json.loads(self.plan.drafters.variant_hparams(variant))).to_json()

    @cached_property
    def paper_settings(self) -> dict:
        """The settings of `budgetdraft paper` and `claims` (what to lay out where), built from the config once and
        checked against their contract (`budgetdraft.report.settings.PaperSettings`)."""
        config, cmp, plan, ls = self.config, self.config["comparison"], self.plan, self.labels
        settings = {
            "datasets": {key: d["name"] for key, d in config["datasets"].items()},
            "contexts": plan.contexts,
            "context_tokens": config["contexts"],
            "budgets": plan.budgets,
            "gammas": config["gammas"],
            "gamma_fixed": config["gamma_fixed"],
            "collapse": config["collapse"],
            "comparison": {
                "dataset": cmp["dataset"],
                "contexts": cmp["contexts"],
                "gamma": cmp["gamma"],
                "baselines": ls.baselines,
                "budgets": {label: plan.cells.budgets_of(label)[0] for label in ls.baselines},
            },
            "single_budget": config["single_budget"],
            "lossless_check": config["lossless_check"],
            "near_tie_margin": config["near_tie_margin"],
            "verifier_prefill_runs": defaults.PREFILL_RUNS if config["share_verifier_prefill"] else 0,
            "variants": {v: self.variant_settings(v) for v in config["variants"]},
            "not_run": ls.not_run,
            "base_drafter_steps": plan.base["training"]["steps"] if plan.base else 0,
            "replicates": len(plan.replicates),
            "base_drafter_teacher": plan.base["teacher"] if plan.base else "",
        }
        PaperSettings.from_json(settings)
        return settings

    RECIPE = (
        "steps",
        "lr",
        "weight_decay",
        "warmup_steps",
        "grad_clip",
        "budgets",
        "budget_weights",
        "chunk_size",
        "lambda_c",
        "freeze_embeddings",
    )  # the training keys that define a drafter's recipe (the paper diff)

    def measurement(self) -> dict:
        """What defines this run's measurement, in the terms `budgetdraft.report.paperdiff` compares with the paper's
        (models, dataset sources, lengths, the γ sweep, samples, repeats, dtypes, each drafter's training recipe or
        checkpoint): a run is a rerun of the paper only where every one of them is the paper's."""
        c, drafters = self.config, self.plan.drafters
        variants = {}
        for v, overrides in c["variants"].items():
            if "checkpoint" in overrides:
                if overrides["checkpoint"]:  # a checkpoint not given: its rows are "not run", nothing measured
                    variants[v] = {k: str(overrides.get(k) or "") for k in ("checkpoint", "subfolder", "revision")}
            else:
                hparams = json.loads(drafters.variant_hparams(v))
                variants[v] = {k: hparams[k] for k in self.RECIPE if k in hparams}
        return {
            "verifier": c["verifier"],
            "drafter": c["drafter"],
            "base_drafter_steps": self.plan.base["training"]["steps"] if self.plan.base else 0,
            "verifier_dtype": c["verifier_dtype"],
            "drafter_dtype": c["drafter_dtype"],
            "datasets": {k: d["source"] for k, d in c["datasets"].items()},
            "samples": {k: self.samples(k) for k in c["datasets"]},
            "context_tokens": dict(c["contexts"]),
            "budgets": list(c["budgets"]),
            "gammas": {k: list(v) for k, v in c["gammas"].items()},
            "chunk_size": c["chunk_size"],
            "max_new_tokens": c["max_new_tokens"],
            "warmup": c["warmup"],
            "repeats": c["repeats"],
            "training_data": {k: c["training_data"][k] for k in ("source", "prefix_len", "cont_len")},
            "variants": variants,
        }

    def artifact_settings(self, artifact: str) -> str:
        """The settings JSON of one artifact (or of the claims): `paper_settings`, for the policies figure with its
        `policies:` too, for the λ and `variants` tables with only the extra variants each shows (lambda_variants,
        other_variants)."""
        settings, ls = dict(self.paper_settings), self.labels
        shown = {"lambda": ls.lambda_variants, "variants": ls.other_variants}.get(artifact)
        if shown is not None:
            settings["variants"] = {
                v: x for v, x in settings["variants"].items() if v in names.REQUIRED_VARIANTS or v in shown
            }
        if artifact == "fig_policies":
            settings["policies"] = {**ls.policies, "default": ls.policy}
            PaperSettings.from_json(settings)
        if artifact == PAPER_DIFF:
            settings["measurement"] = self.measurement()
        return json.dumps(settings)

    def files(self) -> dict[str, str]:
        """{results/settings/NAME.json: the JSON rule settings writes there} of every artifact and of the claims."""
        cells = self.plan.cells
        names_ = [*cells.all_tables, *cells.all_figures.values(), "claims", PAPER_DIFF]
        return {SETTINGS_FILE.format(name=name): self.artifact_settings(name) for name in names_}
