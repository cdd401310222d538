"""The cluster path for real: config/ci.yaml's `comparison` table through `snakemake --profile profiles/slurm-local`
on the single-node SLURM cluster of profiles/slurm-local/cluster.sh (Debian's slurm-wlm + munge).

The SLURM run starts from the session's local run (tests/conftest.py `pipeline_run`, its results hard-linked), with
what `comparison` reads at dataset lwm and context 256 taken away: its cells and shared verifier prefill, and with
them one trained variant (lambda0.5 of replicate 1) and the EAGLE-3 head, whose cells at context 128 are then made
again too: 16 cells in one job group, 22 jobs. So every kind of job that runs a model goes through sbatch (a
variant's and the head's training, a prefill, AR / SD / BudgetDraft / TriForce / EAGLE-3 / copier cells)
without paying the training chain or the whole grid a second time; the stages before it (export, prompts, targets,
the base drafters) are the same rules the training jobs are, and the local run has just run them.

Every job goes through sbatch and completes; grid cells go in job groups (the profile's `groups:`), each run by
the resident process its first cell starts (`warm_start: resident`: the GPU path, here on device cpu), which loads
the verifier once for the group; the cells decode the same tokens, with the same acceptance, as the local run; a
cell job killed with `scancel` is CANCELLED, leaves no cell, and the next invocation submits exactly that cell and
makes again the table that reads it. Only the target, the rules that write a settings file from the config
(`settings`) and the table (workflow/rules/paper.smk: its rules are local rules) run in the submitting process.

Skipped when SLURM cannot be started here (not installed, not root); failed instead with
BUDGETDRAFT_REQUIRE_SLURM=1 (.ci/run sets it when it could install slurm-wlm).
"""

import os
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from conftest import CI_SNAKEMAKE, ROOT, ci_snakemake, planned_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.pipeline]

CLUSTER = ROOT / "profiles/slurm-local/cluster.sh"
STATE = Path(os.environ.get("BUDGETDRAFT_SLURM_STATE", "/tmp/budgetdraft-slurm"))
PROFILE = ("--profile", "profiles/slurm-local")
RESIDENT = ("--config", "warm_start=resident")  # last: --config takes every argument after it
SUBMITTED = re.compile(r"^Job [\w-]+ has been submitted with SLURM jobid (\d+)", re.M)  # a group job: a UUID
# what a cell decodes (not how long it took): equal in any two runs of the same config
DECODED = ["label", "method", "dataset", "context", "budget", "gamma", "sample", "doc_id", "repeat",
           "prompt_tokens", "new_tokens", "drafted", "accepted", "verifier_forwards", "output_ids"]  # fmt: skip
TARGET = "comparison"
CANCELLED_CELL = "results/cells/lambda0.5/r1/lwm/256/B32_g5.parquet"  # one replicate's cell of the comparison table
LOCAL_RULES = {TARGET, "settings", "table"}  # run in the submitting process: the target, the artifact's rules
CONTEXT = "256"  # the SLURM run's context: every lwm cell file at it is taken away (see the module's docstring)
# what the SLURM run makes again besides those cells
TAKEN = [
    f"results/prefill/lwm/{CONTEXT}.safetensors",
    "results/drafters/r1/lambda0.5",
    "results/drafters/eagle3",
    "results/tables",
    "results/settings",
]


@pytest.fixture(scope="module")
def slurm_env():
    """The environment of a SLURM run: the cluster is brought up (and down again after the module) unless it was."""
    require = os.environ.get("BUDGETDRAFT_REQUIRE_SLURM") == "1"
    started = False
    if subprocess.run(["bash", CLUSTER, "status"], capture_output=True).returncode != 0:
        up = subprocess.run(["bash", CLUSTER, "up"], capture_output=True, text=True, timeout=300)
        if up.returncode != 0:
            why = f"SLURM cannot be started here ({CLUSTER.name} up): {(up.stdout + up.stderr).strip()[-1500:]}"
            if require:
                pytest.fail(f"{why} (BUDGETDRAFT_REQUIRE_SLURM=1)")
            pytest.skip(why)
        started = True
    yield {**os.environ, "SLURM_CONF": str(STATE / "slurm.conf")}
    if started:
        subprocess.run(["bash", CLUSTER, "down"], capture_output=True)


def job_states(ids: list[str], wait_s: float = 30) -> dict[str, str]:
    """{SLURM job id: final state} of the given jobs, from the jobcomp file (one line per finished job)."""
    deadline = time.time() + wait_s
    while True:
        text = (STATE / "jobcomp.txt").read_text()
        states = dict(re.findall(r"^JobId=(\d+) .*?JobState=(\S+)", text, re.M))
        if all(i in states for i in ids) or time.time() > deadline:
            return {i: states.get(i, "not in jobcomp") for i in ids}
        time.sleep(1)


def jobs_of(log: str) -> tuple[Counter, Counter, list[str]]:
    """(remote jobs by rule, grouped ones included, local jobs by rule, SLURM job ids submitted) of a Snakemake
    log (a job group's jobs are listed indented under "Group job ...")."""
    remote = Counter(re.findall(r"^\s*rule (\w+):$", log, re.M))
    local = Counter(re.findall(r"^localrule (\w+):$", log, re.M))
    return remote, local, SUBMITTED.findall(log)


def groups_of(log: str) -> int:
    return len(re.findall(r"Group job cells \(jobs in lexicogr\. order\):", log))


def decoded(path: Path) -> list[dict]:
    rows = pd.read_parquet(path).sort_values(["sample", "repeat"])[DECODED]
    return [{k: v.tolist() if hasattr(v, "tolist") else v for k, v in row.items()} for row in rows.to_dict("records")]


def lwm_cells(work: Path, context: str = "*") -> list[Path]:
    return sorted(p.relative_to(work) for p in (work / "results/cells").rglob(f"lwm/{context}/*.parquet"))


@pytest.fixture(scope="module")
def slurm_run(slurm_env, pipeline_run, tmp_path_factory):
    """config/ci.yaml's TARGET through SLURM from the local run less what it reads at lwm: (work directory, log)."""
    work = tmp_path_factory.mktemp("slurm")
    # Snakemake's own folder and the code are copied (written to); results are linked (every writer replaces a file
    # whole); logs are not taken, so that each cell's log is the SLURM job's
    shutil.copytree(
        pipeline_run, work, dirs_exist_ok=True, symlinks=True, ignore=shutil.ignore_patterns("results", "logs")
    )
    shutil.copytree(pipeline_run / "results", work / "results", copy_function=os.link)
    for path in [*TAKEN, *map(str, lwm_cells(work, CONTEXT))]:
        target = work / path
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    start = time.time()
    run = ci_snakemake(work, *PROFILE, TARGET, *RESIDENT, env=slurm_env)
    log = run.stdout + run.stderr
    print(f"SLURM run of config/ci.yaml {TARGET}: {time.time() - start:.0f} s")
    assert run.returncode == 0, log[-5000:]
    return work, log


def test_every_job_went_through_sbatch_and_completed(slurm_run):
    _, log = slurm_run
    remote, local, ids = jobs_of(log)
    planned = planned_jobs(log)
    assert set(local) == LOCAL_RULES and local[TARGET] == 1, local  # the rest runs through sbatch
    assert remote + local == Counter(planned), (remote, local, planned)
    kinds = {"train", "train_eagle3", "verifier_prefill", "eval_cell", "eval_replicate_cell"}
    assert kinds <= set(remote), remote  # every kind of job that runs a model
    cells = remote["eval_cell"] + remote["eval_replicate_cell"]
    grouped = remote.total() - cells + groups_of(log)  # one submission a job group
    assert len(ids) == len(set(ids)) == grouped and groups_of(log) < cells, (len(ids), grouped, cells)
    states = job_states(ids)
    assert set(states.values()) == {"COMPLETED"}, {i: s for i, s in states.items() if s != "COMPLETED"}


def test_cells_decode_what_the_local_run_decodes(slurm_run, request):
    work, _ = slurm_run
    local = request.getfixturevalue("pipeline_run")
    made = [c for c in lwm_cells(work) if (work / c).stat().st_ino != (local / c).stat().st_ino]  # not a link
    # at lwm/256: AR, EAGLE-3, the copier (shared) and, in each of the 2 replicates, TriForce, SD and BudgetDraft
    # (x 2 B); at lwm/128, the cells of what was trained again: EAGLE-3's and replicate 1's BudgetDraft (x 2 B)
    assert len(made) == 3 + 2 * (1 + 2 + 2) + 1 + 2, made
    assert {c for c in made if c.parts[-2] == CONTEXT} == set(lwm_cells(work, CONTEXT))
    different = [str(c) for c in made if decoded(local / c) != decoded(work / c)]
    assert not different, different


def test_each_job_group_loads_the_verifier_once(slurm_run):
    """The first cell of a group starts the resident process and loads the verifier; the others are handed it."""
    work, log = slurm_run
    said = [line for p in (work / "logs/cells").rglob("*.log") for line in p.read_text().splitlines()]
    loaded = sum("loaded results/models/verifier " in line for line in said)
    kept = sum("results/models/verifier (cpu, float32) is resident: not loaded again" in line for line in said)
    assert loaded == groups_of(log) and loaded + kept == len(list((work / "logs/cells").rglob("*.log"))), (
        loaded,
        kept,
        groups_of(log),
    )
    assert kept > loaded  # groups of up to 8 cells


# Each phase of the cancelled-cell test is bounded: one of five runs once took 344 s where the others took about
# 100 (then three Snakemake plans of ~20 s, now two: the rerun's own plan is read instead of a dry run's; a group
# job started, cancelled and resubmitted); now the phase that hangs fails the test by name instead of stretching
# the suite.
PHASE_S = 180


def test_a_cancelled_cell_is_resubmitted_alone_with_its_table(slurm_run, slurm_env, request):
    """scancel of a running cell job: CANCELLED, no cell left, and the next invocation submits exactly that cell and
    makes again the table that reads it (a local rule); each phase within PHASE_S seconds."""
    work, _ = slurm_run
    cell = work / CANCELLED_CELL
    cell.unlink()
    log_path = work / "cancelled.log"
    with open(log_path, "w") as out:
        run = subprocess.Popen(
            [*CI_SNAKEMAKE, *PROFILE, TARGET, *RESIDENT],
            cwd=work,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=slurm_env,
        )
    try:
        job, state, deadline = None, "", time.time() + PHASE_S
        while state != "RUNNING" and time.time() < deadline and run.poll() is None:
            job = job or next(iter(SUBMITTED.findall(log_path.read_text())), None)
            if job:
                squeue = ["squeue", "-h", "-j", job, "-o", "%T"]
                state = subprocess.run(squeue, capture_output=True, text=True, env=slurm_env).stdout.strip()
            time.sleep(0.2)
        assert state == "RUNNING", (
            f"no cell job running within {PHASE_S} s (job {job}: {state!r}):\n{log_path.read_text()[-3000:]}"
        )
        subprocess.run(["scancel", job], check=True, env=slurm_env)
        assert run.wait(timeout=PHASE_S) != 0  # keep-going: the run ends, reporting the failed cell
    finally:
        if run.poll() is None:
            run.kill()
    log = log_path.read_text()
    # a group job's failure: "Error in group cells", its cell listed under it, SLURM's own word on the job
    assert "Error in group cells" in log and "rule eval_replicate_cell:" in log, log[-3000:]
    assert f"JOB {job} ON" in log and "CANCELLED" in log, log[-3000:]
    assert job_states([job]) == {job: "CANCELLED"}
    assert not cell.exists()

    # the next invocation's plan (its "Job stats", printed before it submits anything) and what it submitted
    rerun = ci_snakemake(work, *PROFILE, TARGET, *RESIDENT, env=slurm_env, timeout=PHASE_S)
    log = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, log[-3000:]
    assert planned_jobs(log) == {"eval_replicate_cell": 1, "table": 1, TARGET: 1}, log[-3000:]
    remote, local, ids = jobs_of(log)
    assert remote == {"eval_replicate_cell": 1} and len(ids) == 1, (remote, ids)  # a group of one
    assert local == {"table": 1, TARGET: 1}, local
    assert set(job_states(ids).values()) == {"COMPLETED"}
    assert decoded(cell) == decoded(request.getfixturevalue("pipeline_run") / CANCELLED_CELL)
