"""The typed settings contract: every setting the pipeline hands the library, declared once with its default.

The pipeline (``workflow/rules/common.smk``) passes JSON on the command line; each entry point parses it once
with ``from_json`` (unknown keys and missing required ones are errors naming them) and reads attributes after
that; ``to_json`` gives back the plain JSON dict.

  PaperSettings     what tables, figures and claims lay out where (``budgetdraft paper`` / ``claims --settings``)
  TrainingHparams   ``budgetdraft train --hparams`` (the paper's §3.5 plus the machine knobs)
  Eagle3Hparams     ``budgetdraft train-eagle3 --hparams`` (the EAGLE-3 head baseline)

The config schema (``workflow/schemas/config.schema.yaml``) checks types and ranges of the config; the checks
here are the ones the library needs when it is called without the pipeline. Standard library only: this module
imports nothing from budgetdraft.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import MISSING, dataclass, field, fields


def _required(cls) -> list[str]:
    return [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]


def _checked_keys(cls, data, what: str, where: str = "") -> dict:
    """``data`` as a dict of ``cls``'s fields: an error names unknown keys, or the first missing required one."""
    if not isinstance(data, dict):
        raise ValueError(f"{what} {where or 'settings'} must be a JSON object, got {type(data).__name__}")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} key(s) {unknown}{' in ' + where if where else ''}; known: {', '.join(known)}")
    missing = [name for name in _required(cls) if name not in data]
    if missing:
        raise ValueError(f"settings: missing key '{where + '.' if where else ''}{missing[0]}'")
    return dict(data)


def _plain(value):
    """JSON value of a field: dataclasses as their own ``to_json``, containers element-wise."""
    if dataclasses.is_dataclass(value):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class _Json:
    """``to_json`` for the frozen dataclasses below: the fields in declaration order."""

    def to_json(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


# ------------------------------------------------------------------------------------------- paper settings


@dataclass(frozen=True)
class Collapse(_Json):
    """Figure fig_collapse: SD's acceptance vs context on one dataset at one γ."""

    dataset: str
    gamma: int

    @classmethod
    def from_json(cls, data: dict) -> Collapse:
        d = _checked_keys(cls, data, "settings", "collapse")
        return cls(dataset=d["dataset"], gamma=int(d["gamma"]))


@dataclass(frozen=True)
class Comparison(_Json):
    """Table comparison: the baselines vs BudgetDraft on one dataset, some contexts, one γ."""

    dataset: str
    contexts: list
    gamma: int
    baselines: list | None = None  # the baselines that were run, each then required; None: those with cells
    budgets: dict = field(default_factory=dict)  # baseline label -> the budget of its cells
    drafter_sizes: dict = field(default_factory=dict)  # method label -> parameter count text

    @classmethod
    def from_json(cls, data: dict) -> Comparison:
        d = _checked_keys(cls, data, "settings", "comparison")
        return cls(**{**d, "contexts": [str(c) for c in d["contexts"]], "gamma": int(d["gamma"])})

    def budget_of(self, label: str) -> int | None:
        fixed = self.budgets.get(label)
        return None if fixed is None else int(fixed)


@dataclass(frozen=True)
class SingleBudget(_Json):
    """Table single_budget and finding F5: the drafter trained at one budget, on one dataset / context / γ."""

    dataset: str
    context: str
    gamma: int
    trained_budget: int

    @classmethod
    def from_json(cls, data: dict) -> SingleBudget:
        d = _checked_keys(cls, data, "settings", "single_budget")
        return cls(d["dataset"], str(d["context"]), int(d["gamma"]), int(d["trained_budget"]))


@dataclass(frozen=True)
class Variant(_Json):
    """What the paper says of a trained variant (its --hparams' λ, budgets and steps); None: not given."""

    lambda_c: float | None = None
    budgets: list | None = None
    steps: int | None = None

    @classmethod
    def from_json(cls, data: dict) -> Variant:
        return cls(**_checked_keys(cls, data, "settings", "variants"))

    @classmethod
    def of_hparams(cls, hparams: dict) -> Variant:
        """What the paper says of a variant trained with `budgetdraft train --hparams` JSON ``hparams`` (its
        values as given: the settings JSON then says what the command line said)."""
        TrainingHparams.from_json(hparams)  # the contract: unknown keys, unpaired budgets fail here
        return cls(**{f.name: hparams[f.name] for f in fields(cls)})

    def to_json(self) -> dict:
        return {k: v for k, v in super().to_json().items() if v is not None}


@dataclass(frozen=True)
class Policies(_Json):
    """Figure fig_policies: acceptance / speedup vs budget under each sparse policy, on one dataset at one γ."""

    names: list
    dataset: str
    gamma: int
    default: str  # the config's policy: its cells have the plain labels

    @classmethod
    def from_json(cls, data: dict) -> Policies:
        d = _checked_keys(cls, data, "settings", "policies")
        return cls(list(d["names"]), d["dataset"], int(d["gamma"]), d["default"])


@dataclass(frozen=True)
class PaperSettings(_Json):
    """What `budgetdraft paper` and `budgetdraft claims` lay out where (built by common.smk's paper_settings)."""

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

    @classmethod
    def from_json(cls, data: dict) -> PaperSettings:
        d = _checked_keys(cls, data, "settings")
        parts = {"collapse": Collapse, "comparison": Comparison, "single_budget": SingleBudget, "policies": Policies}
        for key, part in parts.items():
            if d.get(key) is not None:
                d[key] = part.from_json(d[key])
        d["variants"] = {label: Variant.from_json(v or {}) for label, v in (d.get("variants") or {}).items()}
        d["contexts"] = [str(c) for c in d["contexts"]]
        d["budgets"] = [int(b) for b in d["budgets"]]
        d["gamma_fixed"] = int(d["gamma_fixed"])
        d["datasets"] = dict(d["datasets"])
        return cls(**d)

    @property
    def lossless(self) -> dict:
        """`Grid`'s keyword arguments for the lossless check (`lossless_check`, `near_tie_margin`)."""
        return {"lossless": self.lossless_check, "near_tie_margin": self.near_tie_margin}

    def given_gammas(self, context: str) -> list[int] | None:
        """`gammas[context]` (sorted) when the settings fix the sweep there, else None."""
        given = self.gammas.get(context) if isinstance(self.gammas, dict) else None
        return None if given is None else sorted(int(g) for g in given)

    def variant(self, label: str) -> Variant:
        """The variant's settings; an empty Variant when `variants` does not list it."""
        return self.variants.get(label) or Variant()

    def sweep(self, grid, label, dataset, context, budgets=None) -> list[int]:
        """The gamma sweep at (dataset, context) of a `budgetdraft.grid.Grid`: `gammas[context]` if given (then
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


def with_drafter_sizes(settings: dict, sizes: dict) -> dict:
    """The settings JSON with `comparison.drafter_sizes` set (``budgetdraft paper --drafters``)."""
    return {**settings, "comparison": {**settings["comparison"], "drafter_sizes": sizes}}


# ------------------------------------------------------------------------------------------------ hparams


class _Hparams(_Json):
    """Read-only mapping access (``hp["lr"]``, ``{**hp}``) for callers outside the library (tests, bench/)."""

    def keys(self):
        return [f.name for f in fields(self)]

    def items(self):
        return self.to_json().items()

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)


def _non_finite(value) -> bool:
    """NaN or ±inf, or text that ``float`` reads as one ("nan", "inf"); never a name or a boolean."""
    try:
        return not math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):
        return False


def _refuse_non_finite(data: dict, what: str) -> None:
    """An error naming the first key whose number (or a number in its list) is NaN or infinite: NaN passes every
    bound check (``lambda_c > 0`` and ``< 0`` are both False: "L_A only" without a word), and an infinite lr or
    lambda_c makes the training loss NaN from its first step."""
    for key, value in data.items():
        if any(_non_finite(v) for v in (value if isinstance(value, (list, tuple)) else [value])):
            raise ValueError(f"{what} key '{key}' must be a finite number, got {value!r}")


# Defaults that several entry points share, each in one place: the config schema's defaults, the command-line
# parsers (eval-cell, decode, prefill, targets) and the hparams below read these (tests/test_defaults.py checks
# the schema against them).
CHUNK_SIZE = 8  # s: prefix tokens per chunk of the sparse cache (the paper's)
SCORE_WINDOW = 32  # last prefill queries whose attention scores the prefix chunks (TopKChunks)
THREADS = 1  # torch CPU threads of one job: Snakemake runs jobs side by side, each its share of the cores


@dataclass(frozen=True)
class TrainingHparams(_Hparams):
    """`budgetdraft train --hparams`: the paper's §3.5, plus the machine knobs. A variant (L_A only, λ = 1,
    single budget) is nothing but these: the pipeline merges `training:` with the config's `variants:`."""

    steps: int = 5000
    lr: float = 1e-5
    weight_decay: float = 0.01
    warmup_steps: int = 150
    grad_clip: float = 1.0
    budgets: list = field(default_factory=lambda: [256, 512, 1024, 2048])
    budget_weights: list = field(default_factory=lambda: [0.4, 0.3, 0.2, 0.1])
    chunk_size: int = CHUNK_SIZE
    score_window: int = SCORE_WINDOW
    lambda_c: float = 0.5
    seed: int = 0
    checkpoint_every: int = 250
    dtype: str = "float32"
    device: str = "cpu"
    threads: int = THREADS  # torch CPU threads; 0 leaves torch's default
    prefill_chunk: int = 2048  # prefix tokens per prefill forward (no grad)
    heldout: int = 0  # the last `heldout` sequences are not trained on; L_A/L_C on them go to eval_log.csv
    freeze_embeddings: bool = False  # keep the token embedding and LM head fixed: on CPU they are 2/3 of a small
    #                                  drafter's parameters and most of its optimizer's time (bench/README.md)

    @classmethod
    def from_json(cls, data: dict | None = None) -> TrainingHparams:
        d = _checked_keys(cls, dict(data or {}), "hparams")
        _refuse_non_finite(d, "hparams")
        hp = {**TrainingHparams().to_json(), **d}
        counts = ("steps", "warmup_steps", "chunk_size", "score_window", "seed", "checkpoint_every", "threads")
        for name in (*counts, "prefill_chunk", "heldout"):
            hp[name] = int(hp[name])
        for name in ("lr", "weight_decay", "grad_clip", "lambda_c"):
            hp[name] = float(hp[name])
        hp["budgets"] = [int(b) for b in hp["budgets"]]
        hp["budget_weights"] = [float(w) for w in hp["budget_weights"]]
        return cls(**hp)

    def __post_init__(self):
        """What the schema cannot check (budgets and weights pair up; λ > 0 needs attention scores), and what it
        does, for calls without the pipeline."""
        b, w = self.budgets, self.budget_weights
        if len(b) != len(w) or not b:
            raise ValueError(f"budgets {b} and budget_weights {w} must pair up")
        if not all(x >= 0 for x in w) or not sum(w) > 0:  # so that NaN fails too
            raise ValueError(f"budget_weights must be non-negative with a positive sum: {w}")
        if any(x < 1 for x in b):
            raise ValueError(f"budgets must be positive: {b}")
        if not isinstance(self.freeze_embeddings, bool):
            raise ValueError(f"freeze_embeddings must be true or false, got {self.freeze_embeddings!r}")
        if self.steps < 1 or self.checkpoint_every < 1 or self.chunk_size < 1 or self.prefill_chunk < 1:
            raise ValueError("steps, checkpoint_every, chunk_size and prefill_chunk must be >= 1")
        if not self.lambda_c >= 0:  # NaN too: it must not read as lambda_c == 0
            raise ValueError(f"lambda_c must be >= 0, got {self.lambda_c}")
        if self.lambda_c > 0 and self.score_window < 1:
            raise ValueError("TopKChunks needs attention scores: score_window must be >= 1 when lambda_c > 0")


@dataclass(frozen=True)
class Eagle3Hparams(_Hparams):
    """`budgetdraft train-eagle3 --hparams`: the EAGLE-3 head's training (values kept as given)."""

    steps: int = 100
    lr: float = 1.0e-3
    weight_decay: float = 0.0
    warmup_steps: int = 10
    grad_clip: float = 1.0
    ttt_steps: int = 7  # training-time-test unroll depth
    step_decay: float = 0.8  # loss weight of unroll step j = step_decay^j
    ttt_window: int = 64  # last base positions unrolled for steps j >= 1
    step0_positions: int = 128  # positions scored at unroll step 0
    layer_ids: list | None = None  # verifier layers whose outputs are the features; None: EAGLE-3's low/mid/high
    seed: int = 0
    dtype: str = "float32"
    verifier_dtype: str = "float32"
    device: str = "cpu"
    threads: int = THREADS
    feature_cache_mb: int = 2048
    log_every: int = 10

    @classmethod
    def from_json(cls, data: dict | None = None) -> Eagle3Hparams:
        d = _checked_keys(cls, dict(data or {}), "train-eagle3 hparams")
        _refuse_non_finite(d, "train-eagle3 hparams")
        return cls(**d)

    def __post_init__(self):
        for name in ("steps", "ttt_steps", "ttt_window", "step0_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"train-eagle3 hparam {name} must be >= 1, got {getattr(self, name)}")
