"""The settings that lay the paper's cells out: what `budgetdraft paper` and `budgetdraft claims` read
(`--settings`), typed once, each with its default; built by the workflow's plan from the config."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from budgetdraft.base.jsonio import JsonRecord, checked_keys, json_object
from budgetdraft.training.hparams import TrainingHparams


@dataclass(frozen=True)
class Collapse(JsonRecord):
    """Figure fig_collapse: SD's acceptance vs context on one dataset at one γ."""

    dataset: str
    gamma: int

    @classmethod
    def from_json(cls, data: dict) -> Collapse:
        d = checked_keys(cls, data, "settings", "collapse")
        return cls(dataset=d["dataset"], gamma=int(d["gamma"]))


@dataclass(frozen=True)
class Comparison(JsonRecord):
    """Table comparison: the baselines vs BudgetDraft on one dataset, some contexts, one γ."""

    dataset: str
    contexts: list
    gamma: int
    baselines: list | None = None  # the baselines that were run, each then required; None: those with cells
    budgets: dict = field(default_factory=dict)  # baseline label -> the budget of its cells
    drafter_sizes: dict = field(default_factory=dict)  # method label -> parameter count text

    @classmethod
    def from_json(cls, data: dict) -> Comparison:
        d = checked_keys(cls, data, "settings", "comparison")
        return cls(**{**d, "contexts": [str(c) for c in d["contexts"]], "gamma": int(d["gamma"])})

    def budget_of(self, label: str) -> int | None:
        fixed = self.budgets.get(label)
        return None if fixed is None else int(fixed)


@dataclass(frozen=True)
class SingleBudget(JsonRecord):
    """Table single_budget and finding F5: the drafter trained at one budget, on one dataset / context / γ."""

    dataset: str
    context: str
    gamma: int
    trained_budget: int

    @classmethod
    def from_json(cls, data: dict) -> SingleBudget:
        d = checked_keys(cls, data, "settings", "single_budget")
        return cls(d["dataset"], str(d["context"]), int(d["gamma"]), int(d["trained_budget"]))


@dataclass(frozen=True)
class Variant(JsonRecord):
    """What the paper says of a trained variant (its --hparams' λ, budgets and steps); None: not given."""

    lambda_c: float | None = None
    budgets: list | None = None
    steps: int | None = None
    checkpoint: str | None = None  # given as this checkpoint (not trained here: one external draw); None: trained

    @classmethod
    def from_json(cls, data: dict) -> Variant:
        return cls(**checked_keys(cls, data, "settings", "variants"))

    @classmethod
    def of_hparams(cls, hparams: dict) -> Variant:
        """What the paper says of a variant trained with `budgetdraft train --hparams` JSON ``hparams`` (its
        values as given: the settings JSON then says what the command line said)."""
        TrainingHparams.from_json(hparams)  # the contract: unknown keys, unpaired budgets fail here
        return cls(**{f.name: hparams[f.name] for f in fields(cls) if f.name != "checkpoint"})

    @classmethod
    def of_checkpoint(cls, given: dict) -> Variant:
        """A variant given as a checkpoint (config `variants.X`: checkpoint, its λ and budgets as it was trained)."""
        return cls(lambda_c=given.get("lambda_c"), budgets=given.get("budgets"), checkpoint=given["checkpoint"])

    def to_json(self) -> dict:
        return {k: v for k, v in super().to_json().items() if v is not None}


@dataclass(frozen=True)
class Policies(JsonRecord):
    """Figure fig_policies: acceptance / speedup vs budget under each sparse policy, on one dataset at one γ."""

    names: list
    dataset: str
    gamma: int
    default: str  # the config's policy: its cells have the plain labels

    @classmethod
    def from_json(cls, data: dict) -> Policies:
        d = checked_keys(cls, data, "settings", "policies")
        return cls(list(d["names"]), d["dataset"], int(d["gamma"]), d["default"])


@dataclass(frozen=True)
class PaperSettings(JsonRecord):
    """What `budgetdraft paper` and `budgetdraft claims` lay out where (built by budgetdraft.pipeline.plan.Plan's
    `paper_settings`, one per artifact by its `artifact_settings`)."""

    datasets: dict  # dataset key -> the name the paper prints
    contexts: list  # context labels, in the paper's order
    budgets: list  # drafter KV budgets B
    gamma_fixed: int  # γ_f of the fixed-γ tables and findings
    collapse: Collapse
    comparison: Comparison
    single_budget: SingleBudget
    context_tokens: dict = field(default_factory=dict)  # context label -> prompt tokens
    gammas: dict | None = None  # context label -> the γ sweep (then every cell is required); None: what was run
    lossless_check: str = "error"
    near_tie_margin: float = 0.0
    verifier_prefill_runs: int = 0  # timed runs of a shared verifier prefill; 0: prefills not shared
    variants: dict = field(default_factory=dict)  # trained variant label -> Variant
    base_drafter_steps: int = 0  # 0: SD decodes with the untrained drafter
    replicates: int = 1
    base_drafter_teacher: str = ""
    policies: Policies | None = None
    not_run: dict = field(default_factory=dict)  # label -> why its cells were left out (a checkpoint not given)
    measurement: dict = field(default_factory=dict)  # what defines the run's measurement (the paper diff compares it)

    @classmethod
    def from_json(cls, data: dict) -> PaperSettings:
        d = checked_keys(cls, data, "settings")
        parts = {"collapse": Collapse, "comparison": Comparison, "single_budget": SingleBudget, "policies": Policies}
        for key, part in parts.items():
            if d.get(key) is not None:
                d[key] = part.from_json(d[key])
        d["variants"] = {label: Variant.from_json(v or {}) for label, v in (d.get("variants") or {}).items()}
        d["contexts"] = [str(c) for c in d["contexts"]]
        if d.get("context_tokens"):  # shortest first, whatever order the file lists them in: `contexts[0]` is read
            d["contexts"] = shortest_first(d["contexts"], d["context_tokens"])  # as the shortest everywhere
            comparison = d["comparison"]
            d["comparison"] = replace(comparison, contexts=shortest_first(comparison.contexts, d["context_tokens"]))
        d["budgets"] = [int(b) for b in d["budgets"]]
        d["gamma_fixed"] = int(d["gamma_fixed"])
        d["datasets"] = dict(d["datasets"])
        return cls(**d)

    @property
    def lossless(self) -> dict:
        """`Grid`'s keyword arguments: the lossless check (`lossless_check`, `near_tie_margin`) and the labels left
        out on purpose (`not_run`)."""
        return {"lossless": self.lossless_check, "near_tie_margin": self.near_tie_margin, "not_run": self.not_run}

    def given_gammas(self, context: str) -> list[int] | None:
        """`gammas[context]` (sorted) when the settings fix the sweep there, else None."""
        given = self.gammas.get(context) if isinstance(self.gammas, dict) else None
        return None if given is None else sorted(int(g) for g in given)

    def variant(self, label: str) -> Variant:
        """The variant's settings; an empty Variant when `variants` does not list it."""
        return self.variants.get(label) or Variant()

    def sweep(self, grid, label, dataset, context, budgets=None) -> list[int]:
        """The gamma sweep at (dataset, context) of a `budgetdraft.evaluation.grid.Grid`: `gammas[context]` if given (then
        every cell is required), else every gamma present for `label` at any budget; each gamma needs every
        budget."""
        budgets = self.budgets if budgets is None else budgets
        gammas = self.given_gammas(context)
        if gammas is None:
            gammas = sorted({g for b in budgets for g in grid.gammas(label, dataset, context, b)})
            if not gammas:
                grid.need(label, dataset, context, budgets[0], "any")
        for g in gammas:
            for b in budgets:
                grid.need(label, dataset, context, b, g)
        return gammas


def shortest_first(contexts, tokens: dict) -> list[str]:
    """The context labels ``contexts`` ordered by their prompt tokens (``tokens``: label -> tokens), shortest first:
    every finding that compares a short context with a long one reads the first as the shortest."""
    missing = [c for c in contexts if c not in tokens]
    if missing:
        raise ValueError(f"settings: context_tokens has no entry for {', '.join(missing)}")
    return sorted(contexts, key=lambda c: int(tokens[c]))


def with_drafter_sizes(settings: dict, sizes: dict) -> dict:
    """The settings JSON with `comparison.drafter_sizes` set (``budgetdraft paper --drafters``)."""
    return {**settings, "comparison": {**settings["comparison"], "drafter_sizes": sizes}}


Settings = PaperSettings  # the name the report modules use


def parse_settings(text_or_path) -> Settings:
    """The typed settings, parsed once, from a dict, a JSON string or a JSON file."""
    return PaperSettings.from_json(settings_dict(text_or_path))


def settings_dict(text_or_path) -> dict:
    """The settings as a plain dict, from a dict, a JSON string or a JSON file."""
    return json_object(text_or_path, "--settings")


def with_dataset_names(builder, write):
    """``builder`` (grid, settings) -> artifact, handed the datasets' display names as ``write`` gives them: they are
    plain text in the config (LaTeX text for a table, text matplotlib prints as written for a figure)."""

    def build(grid, s: Settings):
        return builder(grid, replace(s, datasets={k: write(v) for k, v in s.datasets.items()}))

    build.__name__, build.__doc__ = builder.__name__, builder.__doc__
    return build
