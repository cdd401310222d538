"""The plan of the config, one step before any job is planned, and the input functions that wire the plan to the rules.

The plan (budgetdraft.pipeline.plan.Plan, tested in process by tests/test_plan.py) is a front over its parts, which
the rules read as PLAN.labels, PLAN.cells (which cells each artifact reads), PLAN.drafters (the training chain),
PLAN.settings, PLAN.jobs (a cell's inputs and flags) and PLAN.code (each stage's code digest). No input function here
moves or writes a file: the steps that do are budgetdraft.pipeline.setaside's, run once, below.
"""

import functools
import inspect
import json
import re
import shlex
import sys
from pathlib import Path

# src/ is on sys.path (Snakefile): the workflow runs the library it declares as code inputs.
from budgetdraft.base import defaults, names, revisions
from budgetdraft.pipeline.plan import Plan
from budgetdraft.pipeline.setaside import (
    asked_cells,
    drop_stale_settings,
    set_aside_unreadable,
)

PLAN = Plan(config)

# A warning, not an error: pinning needs the hub once (budgetdraft.base.revisions).
if unpinned := revisions.unpinned(config):
    print(
        f"budgetdraft: hub repositories read at no pinned revision: {', '.join(unpinned)}"
        " (python -m budgetdraft pin --configfile CONFIG prints the `revisions:` block)",
        file=sys.stderr,
    )


# ---------------------------------------------------------------- unreadable cells and stale settings, before any job
# An existing cell file that cannot be used (cut short, damaged, not the cell its path names, unreadable, or a
# directory or FIFO at a cell path: budgetdraft.pipeline.setaside.set_aside_unreadable) is moved to FILE.unreadable (never
# deleted), saying so, before Snakemake plans a job: its cell is then missing and is measured again. Only when a job
# will measure it: Snakemake runs jobs through one method, workflow.execute, handed the executor it resolved from the
# command line and every profile (--profile, $SNAKEMAKE_PROFILE, profiles/default); the step runs first in that call
# and asks that executor. A dry run (-n) or touch (-t, `touch: true` in a profile) only names each file a run would
# move; a command that runs no job (--summary, -D, --report, --filegraph, --list-changes, --cleanup-metadata, --lint,
# --unlock ...) never calls execute and moves nothing. A cluster job's own Snakemake checks nothing: the Snakemake that
# submitted it did, and each job would pay the check again. Checked: every cell file a target can ask for
# (PLAN.cells.every_cell) and any cell file among the targets, resolved inside results/cells/ (asked_cells). Its cost
# (pyarrow reads each file, its digest is recomputed), measured with config/config.yaml's 893 cell files present (677
# of `all`, 216 of `policies`): 3.8-8.3 s, 5 s of CPU, on the shared 2-core CPU at load 3.5-5; none present: 13 ms.
# In the same step, a settings file or the run record that is not what the plan writes there (edited by hand, or
# written from another config: budgetdraft.pipeline.setaside.drop_stale_settings) is removed, naming its first difference,
# so the job that makes it writes it again and every job that reads it runs again: a hand edit is never published.


RUN_RECORD = "results/report/run.json"


def run_record_json():
    """What the run_record job (paper.smk) writes, the configuration, its files and the benchmark files of every job
    (STAGE_BENCHMARKS, paper.smk); also what the step before any job compares the file with.
    """
    return json.dumps(
        {
            "config": config,
            "configfiles": [str(f) for f in workflow.configfiles],
            "benchmarks": {k: f() for k, f in STAGE_BENCHMARKS.items()},
        }
    )


def planned_files():
    """{path: JSON} of the files written from the plan alone (their jobs have no input, only params, which rerun them),
    which the step compares: every artifact's settings and the report's run record (run_record_json).
    """
    return {**PLAN.settings.files(), RUN_RECORD: run_record_json()}


def files_checked_first(execute):
    """``workflow.execute`` that first sets aside the cell files no reader could use (set_aside_unreadable) and
    removes the files written from the plan that are not what it writes (drop_stale_settings), doing either only when
    the executor Snakemake hands it runs jobs (neither a dry run nor touch), naming them otherwise.
    """
    signature = inspect.signature(execute)

    @functools.wraps(execute)
    def execute_after_the_checks(*args, **kwargs):
        executor = signature.bind(*args, **kwargs).arguments["executor_plugin"]
        if workflow.is_main_process:
            no_job = (
                executor.common_settings.dryrun_exec
                or executor.common_settings.touch_exec
            )
            asked = PLAN.cells.every_cell() + asked_cells(workflow.dag_settings.targets)
            lines = set_aside_unreadable(asked, dry_run=no_job)
            lines += drop_stale_settings(planned_files(), dry_run=no_job)
            for line in lines:
                print(line, file=sys.stderr)
        return execute(*args, **kwargs)

    return execute_after_the_checks


workflow.execute = files_checked_first(workflow.execute)


# ---------------------------------------------------------------- input functions and params


def cell_replicate(wildcards):
    """The replicate of a cell job (None for a shared cell, whose path has no rR)."""
    return int(wildcards.replicate) if "replicate" in wildcards.keys() else None


def cell_inputs(wildcards):
    """The verifier, the prompts, the code, the shared prefill (`share_verifier_prefill`) and the drafter (not AR)."""
    return PLAN.jobs.cell_inputs(
        wildcards.label, wildcards.dataset, wildcards.context, cell_replicate(wildcards)
    )


def cell_drafter_flag(wildcards, input):
    """`--drafter DIR`, or nothing for AR."""
    return f"--drafter {input.drafter}" if "drafter" in input.keys() else ""


def cell_prefill_flag(wildcards, input):
    """`--verifier-prefill FILE` when the verifier's prefills are shared (`share_verifier_prefill`)."""
    return f"--verifier-prefill {input.prefill}" if "prefill" in input.keys() else ""


def artifact_drafter_dirs(wildcards):
    """The model directories whose sizes a table counts (PLAN.drafters.artifact_drafters), as the table rule's inputs."""
    drafters = PLAN.drafters.artifact_drafters(wildcards.artifact)
    return sorted({d for dirs in drafters.values() for d in dirs})


def drafters_flag(wildcards):
    """`--drafters JSON` for a table that counts drafter sizes, nothing for the others."""
    drafters = PLAN.drafters.artifact_drafters(wildcards.artifact)
    return f"--drafters {shlex.quote(json.dumps(drafters))}" if drafters else ""


def model_revision_flag(wildcards):
    """`--revision SHA` of the hub model an exported role reads, when `revisions:` pins it."""
    spec = config["verifier" if wildcards.role == "verifier" else "drafter"]
    return PLAN.jobs.revision_flag(revisions.hub_model(spec))


def data_revision_flag(source):
    """`--revision SHA` of the hub dataset behind a data source, when `revisions:` pins it."""
    return PLAN.jobs.revision_flag(revisions.HUB_DATASETS.get(source))


def write_code_digest(paths, out):
    """Rule code's digest: "sha256  path" per module, written whole (budgetdraft.base.atomic)."""
    from budgetdraft.base.atomic import atomic_write_text, file_sha256

    atomic_write_text(out, "".join(f"{file_sha256(p)}  {p}\n" for p in paths))
