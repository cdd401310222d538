# Warm start (src/budgetdraft/pipeline/warm.py): on the CPU one pre-imported process forks a child per job, so hundreds of
# short eval-cell jobs do not each pay seconds of imports; on an accelerator one resident process runs the cells
# itself and keeps their models loaded (no fork after CUDA), locally and inside cluster job groups. Jobs find it
# through BUDGETDRAFT_WARM and run in their own process when it is absent (dry runs, warm_start: false, cluster
# jobs other than a resident group's, and jobs deployed in a conda environment or a container, --sdm conda /
# apptainer: the warm process runs in Snakemake's environment, not the rule's; the Snakefile's shell prefix).
# Which process this is, is read from the environment, as Snakemake's public API says nothing of it: the run's own
# Snakemake (onstart, which runs only there) exports BUDGETDRAFT_SNAKEMAKE, its process id, to every job it starts;
# a Snakemake that finds another's id there and SLURM_JOB_ID, which SLURM sets in a job, runs a cluster job.
# Its socket lives in a private directory (mode 0700, a name no other user can guess or take first) that this
# Snakemake makes and removes; both ends refuse a peer of another uid (budgetdraft.pipeline.warm, "Whom it trusts").
import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from budgetdraft.pipeline.rendezvous import rendezvous

WARM = {}


def warm_mode():
    """How jobs share a pre-imported process (schema: warm_start): "fork", "resident" or None (each on its own)."""
    mode = config["warm_start"]
    if mode is True:
        return "fork" if config["device"] == "cpu" else "resident"
    return mode or None


def cluster_job():
    """Whether this Snakemake runs a job of a run on a SLURM cluster (the job's outermost Snakemake or one that runs a
    cell of its group below it): the run's Snakemake exported its id (onstart) and SLURM started this process in a
    job. Not a local job that Snakemake spawns (no SLURM_JOB_ID), nor a run started inside a SLURM allocation (its
    own Snakemake: the id is its own, or none yet)."""
    run = os.environ.get("BUDGETDRAFT_SNAKEMAKE")
    return bool(run) and run != str(os.getpid()) and "SLURM_JOB_ID" in os.environ


if cluster_job() and "BUDGETDRAFT_WARM_AUTOSTART" not in os.environ:
    # a cluster job's outermost Snakemake (no onstart runs there). A warm process of the submitting Snakemake runs on
    # another machine: its socket is no use here. In resident mode the job's first cell starts a resident server
    # that its job group's other cells share, with the cell's own Python (a conda environment's too). This
    # Snakemake sets these, with the socket in a private directory of its own under $TMPDIR (never a predictable
    # name in a shared /tmp) that it removes when it exits; each cell of a group runs in a Snakemake of its own
    # below it (srun), which keeps them. The server exits with this outermost Snakemake.
    os.environ.pop("BUDGETDRAFT_WARM", None)
    if warm_mode() == "resident":
        job_socket = rendezvous(f"job{os.environ.get('SLURM_JOB_ID')}")
        os.environ.update(
            BUDGETDRAFT_WARM=job_socket, BUDGETDRAFT_WARM_AUTOSTART=str(os.getpid())
        )
        atexit.register(shutil.rmtree, os.path.dirname(job_socket), True)


onstart:
    # this run's own Snakemake (onstart runs in no job): the jobs it starts, here or through a cluster, know it by
    # its id (cluster_job)
    print_prediction()
    os.environ.update(BUDGETDRAFT_SNAKEMAKE=str(os.getpid()))
    # a warm process here even when the jobs run on a cluster (whether they do is no part of Snakemake's public API):
    # it then idles until the run ends, and each cluster job drops its socket (above)
    if warm_mode():
        from budgetdraft.pipeline.machine import package_env

        os.makedirs("logs", exist_ok=True)
        # this budgetdraft first on PYTHONPATH, and the jobs' allocator: glibc's heap in huge pages too
        # (base.defaults), which glibc reads at the server's start
        env = package_env()
        resident = ["--resident"] if warm_mode() == "resident" else []
        WARM["socket"] = rendezvous("warm")
        WARM["process"] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "budgetdraft",
                "warm",
                "--socket",
                WARM["socket"],
                "--owner",
                str(os.getpid()),
                *resident,
            ],
            env=env,
            stdout=open("logs/warm.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # wait for its imports (a few seconds), or jobs would start before it listens and run cold
        for _ in range(600):
            if os.path.exists(WARM["socket"]) or WARM["process"].poll() is not None:
                break
            time.sleep(0.1)
        # read by the jobs' budgetdraft command line, not by this Snakefile
        os.environ.update(BUDGETDRAFT_WARM=WARM["socket"])


def stop_warm():
    if "process" in WARM:
        WARM["process"].send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            WARM["process"].wait(30)
        shutil.rmtree(os.path.dirname(WARM["socket"]), ignore_errors=True)


def cancel_scheduling_timers():
    """Snakemake's pending re-evaluation timers (one per scheduling round, profiles/default/config.yaml) are
    threads it does not stop: at the end of a run they would hold its exit for up to one timespan.
    """
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()


onsuccess:
    stop_warm()
    cancel_scheduling_timers()


onerror:
    stop_warm()
    cancel_scheduling_timers()
