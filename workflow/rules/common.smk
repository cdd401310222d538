"""The plan of the config, one step before any job is planned, and the input functions that wire the plan to the rules.

The plan (budgetdraft.pipeline.plan.Plan, tested in process by tests/test_plan.py) owns the grid (which cells each
artifact reads), the drafters, the hyper-parameters, the settings, the cells' flags and every stage's code; the rules
read it as PLAN. No input function here moves or writes a file.
"""

import json
import re
import shlex
import sys
from pathlib import Path

# src/ is on sys.path (Snakefile): the workflow runs the library it declares as code inputs.
from budgetdraft.base import defaults, names, revisions
from budgetdraft.pipeline.plan import Plan, runs_no_job, set_aside_unreadable

PLAN = Plan(config)

# A warning, not an error: pinning needs the hub once (budgetdraft.base.revisions).
if unpinned := revisions.unpinned(config):
    print(
        f"budgetdraft: hub repositories read at no pinned revision: {', '.join(unpinned)}"
        " (python -m budgetdraft pin --configfile CONFIG prints the `revisions:` block)",
        file=sys.stderr,
    )


# ---------------------------------------------------------------- unreadable cell files, once, before any job
# An existing cell file that cannot be used (cut short, damaged, or not the cell its path names:
# budgetdraft.pipeline.plan.set_aside_unreadable) is moved to FILE.unreadable (never deleted), saying so, here and
# before Snakemake plans a job: its cell is then missing and is measured again. Checked: every cell file a target can
# ask for (PLAN.every_cell) and any cell file named on the command line. A dry run (-n), --touch (-t, -pt), --lint,
# --unlock and --list-rules only name each file a run would move. A cluster job's own Snakemake checks nothing: the
# Snakemake that submitted it did, and each job would pay the check again. Its cost (pyarrow reads each file, its digest
# is recomputed), measured with config/config.yaml's 893 cell files present (677 of `all`, 216 of `policies`):
# 3.8-8.3 s, 5 s of CPU, on the shared 2-core CPU at load 3.5-5 (the input function it replaces paid as much per cell
# job it planned: `snakemake -n all` took 14-15 s before, 8-15 s after); none present: 13 ms.
if workflow.is_main_process:
    asked = PLAN.every_cell() + [a for a in sys.argv[1:] if PLAN.is_cell(a)]
    no_run = workflow.output_settings.dryrun or runs_no_job(sys.argv[1:])
    for line in set_aside_unreadable(asked, dry_run=no_run):
        print(line, file=sys.stderr)


# ---------------------------------------------------------------- input functions and params


def cell_replicate(wildcards):
    """The replicate of a cell job (None for a shared cell, whose path has no rR)."""
    return int(wildcards.replicate) if "replicate" in wildcards.keys() else None


def cell_inputs(wildcards):
    """The verifier, the prompts, the code, the shared prefill (`share_verifier_prefill`) and the drafter (not AR)."""
    return PLAN.cell_inputs(
        wildcards.label, wildcards.dataset, wildcards.context, cell_replicate(wildcards)
    )


def cell_drafter_flag(wildcards, input):
    """`--drafter DIR`, or nothing for AR."""
    return f"--drafter {input.drafter}" if "drafter" in input.keys() else ""


def cell_prefill_flag(wildcards, input):
    """`--verifier-prefill FILE` when the verifier's prefills are shared (`share_verifier_prefill`)."""
    return f"--verifier-prefill {input.prefill}" if "prefill" in input.keys() else ""


def artifact_drafter_dirs(wildcards):
    """The model directories whose sizes a table counts (PLAN.artifact_drafters), as the table rule's inputs."""
    drafters = PLAN.artifact_drafters(wildcards.artifact)
    return sorted({d for dirs in drafters.values() for d in dirs})


def drafters_flag(wildcards):
    """`--drafters JSON` for a table that counts drafter sizes, nothing for the others."""
    drafters = PLAN.artifact_drafters(wildcards.artifact)
    return f"--drafters {shlex.quote(json.dumps(drafters))}" if drafters else ""


def model_revision_flag(wildcards):
    """`--revision SHA` of the hub model an exported role reads, when `revisions:` pins it."""
    spec = config["verifier" if wildcards.role == "verifier" else "drafter"]
    return PLAN.revision_flag(revisions.hub_model(spec))


def data_revision_flag(source):
    """`--revision SHA` of the hub dataset behind a data source, when `revisions:` pins it."""
    return PLAN.revision_flag(revisions.HUB_DATASETS.get(source))
