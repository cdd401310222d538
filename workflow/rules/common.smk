"""The plan of the config, one step before any job is planned, and the input functions that wire the plan to the rules.

The plan (budgetdraft.pipeline.plan.Plan, tested in process by tests/test_plan.py) is a front over its parts, which
the rules read as PLAN.labels, PLAN.cells (which cells each artifact reads), PLAN.drafters (the training chain),
PLAN.settings, PLAN.jobs (a cell's inputs and flags) and PLAN.code (each stage's code digest). No input function here
moves or writes a file: only jobs do (rule set_aside's, budgetdraft.pipeline.setaside).
"""

import dataclasses
import functools
import json
import re
import shlex
import sys
from pathlib import Path

# src/ is on sys.path (Snakefile): the workflow runs the library it declares as code inputs.
from budgetdraft.base import defaults, methods, names, revisions
from budgetdraft.evaluation.cellfile import cell_path
from budgetdraft.pipeline.plan import Plan
from budgetdraft.pipeline.setaside import guard, set_aside

PLAN = Plan(config)

# A warning, not an error: pinning needs the hub once (budgetdraft.base.revisions).
if unpinned := revisions.unpinned(config):
    print(
        f"budgetdraft: hub repositories read at no pinned revision: {', '.join(unpinned)}"
        " (python -m budgetdraft pin --configfile CONFIG prints the `revisions:` block)",
        file=sys.stderr,
    )


# ---------------------------------------------------------------- files set aside, by a job under Snakemake's lock
# A grid cell, a positional profile or a shared prefill that is cut short, damaged or edited (each is sealed), or a
# settings file or the run record that is not what the plan writes there, is found when Snakemake plans (the input
# functions below call set_aside_marker: they read, never write) and given a new marker input; rule set_aside's job
# (setaside.smk), under Snakemake's lock like every job, moves it aside and its rule makes it again
# (budgetdraft.pipeline.setaside). A dry run, touch and every command that runs no job move nothing.


RUN_RECORD = "results/report/run.json"


def run_record_json():
    """What the run_record job (paper.smk) writes, the configuration, its files and the benchmark files of every job
    (STAGE_BENCHMARKS, paper.smk); also what set_aside compares the file with.
    """
    return json.dumps(
        {
            "config": config,
            "configfiles": [str(f) for f in workflow.configfiles],
            "benchmarks": {k: f() for k, f in STAGE_BENCHMARKS.items()},
        }
    )


@functools.cache
def planned_files():
    """{path: JSON} of the files written from the plan alone (their jobs have no input, only params, which rerun them),
    which set_aside compares: every artifact's settings and the report's run record (run_record_json).
    """
    return {**PLAN.settings.files(), RUN_RECORD: run_record_json()}


def planned_cell(path):
    """The CellSpec the plan measures at cell file ``path`` (PLAN.jobs.at: looked up, or a budget or γ of the
    user's own), which the file's record must be (budgetdraft.evaluation.cellfile.problem) when Snakemake plans,
    in rule set_aside's job and in the cell's job; None for a file that is no cell of the plan.
    """
    return PLAN.jobs.at(path)


def set_aside_marker(path):
    """The marker input of the job that makes ``path`` (budgetdraft.pipeline.setaside.guard): [] for a whole file
    never set aside."""
    return guard(path, planned_files(), cells=planned_cell)


# ---------------------------------------------------------------- input functions and params


def cell_replicate(wildcards):
    """The replicate of a cell job (None for a shared cell, whose path has no rR)."""
    return int(wildcards.replicate) if "replicate" in wildcards.keys() else None


def cell_file(wildcards):
    """The cell file of a cell job: its output, formatted from its wildcards (an input function has no output)."""
    w, replicate = wildcards, cell_replicate(wildcards)
    shared = names.SHARED if replicate is None else replicate
    return cell_path(w.label, w.dataset, w.context, w.budget, w.gamma, shared)


def cell_spec(wildcards, threads=None):
    """The CellSpec of a cell job: its file's planned cell (``planned_cell``). ``threads``: what Snakemake gives the
    job (config `threads`, at most --cores)."""
    spec = planned_cell(cell_file(wildcards))
    return dataclasses.replace(spec, threads=threads) if threads else spec


def cell_inputs(wildcards):
    """The verifier, the prompts, the code, the shared prefill (`share_verifier_prefill`), the drafter (not AR) and
    the cell file's set-aside marker, if any."""
    inputs = PLAN.jobs.cell_inputs(cell_spec(wildcards))
    if marker := set_aside_marker(cell_file(wildcards)):
        inputs["setaside"] = marker
    return inputs


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


# the named targets (rules of workflow/Snakefile) whose job this Snakemake planned
TARGETS_PLANNED = set()


def target_planned(name):
    """An input function for the target rule ``name`` that adds nothing to its inputs and records that its job was
    planned: Snakemake calls it only for a job it plans, so after planning `TARGETS_PLANNED` holds the named targets
    of this run (Snakemake's list of targets is no part of its public API)."""

    def planned(wildcards):
        TARGETS_PLANNED.add(name)
        return []

    return planned


def print_prediction():
    """Before the first job of `snakemake all` (or of the default target, `all`): its wall time from scratch on this
    machine, predicted from this machine's own timings (budgetdraft.pipeline.estimate.prediction; config
    `estimate_before_run`). Printed only when `all` is the one named target this run planned (`TARGETS_PLANNED`): a
    run of another target, or of `all` beside another named target, would not be what the line predicts. A file
    given beside `all` (`snakemake all results/figures/policies.pdf`) is not seen: the line still predicts `all`
    alone. A prediction that cannot be made says why and stops nothing.
    """
    from budgetdraft.pipeline.estimate import prediction

    if not (
        config["estimate_before_run"]
        and TARGETS_PLANNED == {"all"}
        and workflow.configfiles
    ):
        return
    try:
        cores = workflow.cores  # --cores (the profile's, or the command line's)
    except Exception:  # none given (a cluster run): the profile's default
        cores = None
    try:
        line = prediction(str(workflow.configfiles[0]), cores=cores)
    except Exception as err:  # the run goes on: a prediction is advice
        line = f"budgetdraft: no prediction of this run's time ({type(err).__name__}: {err})"
    print(line, file=sys.stderr, flush=True)
