"""The paper's tables and figures (and ours beyond them), each declared once, on its builder: its key, LaTeX label,
name in the paper, file, whether `all` builds it, and the cells it reads in the plan's terms (`Cells`).

    @table("ablation_lc", "tab:ablation_lc", "Table 3", cells=(Cells((AR,)), Cells((LA_ONLY, BD))))
    def table_ablation_lc(grid, s): ...

`budgetdraft.report.paper` collects them (`ARTIFACTS`, once `tables` and `figures` are imported) and builds each with
its declared builder, `budgetdraft.pipeline.plan` turns each `Cells` into cell files for a config, and the workflow's
targets and the report's labels are read from the same declarations: adding an artifact is one decorated builder,
never an entry in three lists in three layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# which γ a `Cells` takes: γ_fixed (or its `where` section's γ), or each context's γ sweep (config `gammas`)
FIXED, SWEEP = "fixed", "sweep"
# groups of labels a `Cells` may name, resolved by the plan of a config
GROUPS = ("baselines", "lambda_variants", "other_variants", "policy_labels")
# config sections that fix the dataset(s), contexts and γ of a `Cells` ("" = every dataset and context, γ_fixed)
WHERE = ("", "comparison", "single_budget", "collapse", "policies")
# when `all` builds an artifact
ALWAYS, NEVER, OTHER_VARIANTS = "always", "never", "other_variants"


@dataclass(frozen=True)
class Cells:
    """Cells an artifact reads: each label (or group, `GROUPS`) at every dataset × context of ``where`` × the
    budgets its method takes × ``gamma``; AR's cells are B0_g0."""

    labels: tuple[str, ...]
    gamma: str = FIXED
    where: str = ""

    def __post_init__(self):
        if self.gamma not in (FIXED, SWEEP) or self.where not in WHERE:
            raise ValueError(f"Cells({self.labels}): gamma {self.gamma!r} / where {self.where!r} unknown")


@dataclass(frozen=True)
class Artifact:
    key: str  # the artifact's name: `paper --artifact KEY`, its settings file, its report entry
    kind: str  # "table" (results/tables/KEY.tex) or "figure" (results/figures/STEM.pdf and .png)
    label: str  # its LaTeX label
    paper: str  # its name in the paper ("not in the paper" for ours)
    cells: tuple[Cells, ...]
    build: Callable
    stem: str = ""  # a figure's file stem
    in_all: str = ALWAYS  # ALWAYS, NEVER (its own target only) or OTHER_VARIANTS (when the config has such variants)

    @property
    def files(self) -> list[str]:
        if self.kind == "table":
            return [f"results/tables/{self.key}.tex"]
        return [f"results/figures/{self.stem}.{ext}" for ext in ("pdf", "png")]


REGISTRY: dict[str, Artifact] = {}


def _declare(artifact: Artifact) -> Callable:
    if artifact.key in REGISTRY:
        raise ValueError(f"artifact {artifact.key!r} is declared twice")
    REGISTRY[artifact.key] = artifact
    return artifact.build


def table(key: str, label: str, paper: str, cells: tuple[Cells, ...], in_all: str = ALWAYS):
    """Declare the table ``key`` built by the decorated ``builder(grid, settings) -> Table``."""
    return lambda build: _declare(Artifact(key, "table", label, paper, cells, build, in_all=in_all))


def figure(key: str, stem: str, label: str, paper: str, cells: tuple[Cells, ...], in_all: str = ALWAYS):
    """Declare the figure ``key`` (files results/figures/STEM.pdf / .png) drawn by the decorated
    ``builder(grid, settings) -> (figure, plotted values)``."""
    return lambda build: _declare(Artifact(key, "figure", label, paper, cells, build, stem=stem, in_all=in_all))


def label_of(key: str) -> str:
    """The LaTeX label of an artifact being built (its builder's own declaration)."""
    return REGISTRY[key].label
