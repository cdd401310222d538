"""The one home of the names the library and the workflow share: cell labels, methods, the paper's artifacts.

No imports beyond the standard library: the workflow (`workflow/rules/common.smk`) reads this module too, before any
job runs and without the heavy dependencies of the other modules.
"""

# Cell labels: methods without a trained drafter, and the trained variants the tables read.
AR, SD, TRIFORCE, EAGLE3 = "ar", "sd", "triforce", "eagle3"
BD, LA_ONLY, LAMBDA1, SINGLE = "lambda0.5", "la_only", "lambda1.0", "single_budget"
METHODS = (AR, SD, TRIFORCE, EAGLE3)  # how `eval-cell --method` decodes; a trained variant decodes as SD
BASELINES = (TRIFORCE, EAGLE3)
METHOD_NAMES = {AR: "AR", SD: "SD (sparse/full)", TRIFORCE: "TriForce", EAGLE3: "EAGLE-3", BD: "BudgetDraft"}
REQUIRED_VARIANTS = {  # trained variant (cell label) -> the artifacts that read its cells
    BD: "the BudgetDraft drafter of every table",
    LA_ONLY: "the L_C ablation table and claim F4",
    LAMBDA1: "the lambda table and claim F6",
    SINGLE: "the single-budget table and claim F5",
}

# The `replicate` of a cell that no per-replicate training feeds (AR, a drafter trained once or not at all); cells of
# a drafter trained once per training replicate (config `replicates`) carry 0, 1, ...
SHARED = -1

# The paper's artifacts: tables (results/tables/NAME.tex) and figures (results/figures/STEM.pdf and .png).
TABLES = {  # artifact -> LaTeX label
    "main": "tab:best_speedup_and_accept_per_budget",
    "comparison": "tab:comparison",
    "ablation_lc": "tab:ablation_lc",
    "lambda": "tab:lambda_sensitivity_full",
    "single_budget": "tab:single_budget_ablation",
    "vram_gamma": "tab:peak_vram_gamma_full",
    "vram": "tab:peak_vram",
}
FIGURES = {  # artifact -> LaTeX label
    "fig_collapse": "fig:collapse",
    "fig_gamma": "fig:gamma_sensitivity_budget_avg",
    "fig_errorbar": "fig:errorbar",
}
FIGURE_STEMS = {"fig_collapse": "collapse", "fig_gamma": "gamma_sensitivity", "fig_errorbar": "errorbar"}
# Figures beyond the paper's, each its own named target and not in `all`: artifact -> label, artifact -> file stem.
EXTRA_FIGURES = {"fig_policies": "fig:policies"}
EXTRA_FIGURE_STEMS = {"fig_policies": "policies"}
ARTIFACTS = {**TABLES, **FIGURES, **EXTRA_FIGURES}

# A drafter decoded with a sparse policy other than the config's `policy` has its own cell label, LABEL@POLICY
# (results/cells/sd@snapkv/...); under the config's policy it keeps its plain label, so the grid's paths stay put.
POLICY_SEP = "@"


def policy_label(label: str, policy: str, default: str) -> str:
    """The cell label of drafter ``label`` decoded with sparse ``policy`` (``default``: the config's policy)."""
    return label if policy == default else f"{label}{POLICY_SEP}{policy}"


def label_policy(label: str, default: str) -> tuple[str, str]:
    """(drafter label, sparse policy) of a cell label: the inverse of ``policy_label``."""
    base, sep, policy = label.partition(POLICY_SEP)
    return base, policy if sep else default


# With `engine: graphs` the run also decodes AR, SD and BudgetDraft eagerly, at γ_fixed on the comparison dataset,
# under labels LABEL+eager (results/cells/ar+eager/...): their speedups beside the graphs ones say how much of a
# speedup survives a fast baseline (claims, finding E1). Each speedup divides by the AR of its own engine.
ENGINE_SEP = "+"
EAGER = "eager"


def engine_label(label: str, engine: str, default: str) -> str:
    """The cell label of ``label`` decoded on ``engine`` (``default``: the config's engine)."""
    return label if engine == default else f"{label}{ENGINE_SEP}{engine}"


def label_engine(label: str, default: str) -> tuple[str, str]:
    """(label, engine) of a cell label: the inverse of ``engine_label``."""
    base, sep, engine = label.partition(ENGINE_SEP)
    return base, engine if sep else default


def ar_label(label: str) -> str:
    """The AR cell label a cell of ``label`` divides by: AR on the same engine."""
    _, sep, engine = label.partition(ENGINE_SEP)
    return AR + sep + engine
