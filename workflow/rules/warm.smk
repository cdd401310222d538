# Warm start for local runs (src/budgetdraft/warm.py): one pre-imported process forks a child per job, so
# hundreds of short eval-cell jobs do not each pay seconds of imports. Jobs find it through BUDGETDRAFT_WARM and
# run in their own process when it is absent (dry runs, cluster executors, warm_start: false, and --sdm conda /
# apptainer: the warm process runs in Snakemake's environment, not the one the rule deploys).
import os
import signal
import subprocess
import sys
import time

WARM_SOCKET = os.path.abspath(".snakemake/budgetdraft-warm.sock")
WARM = {}


onstart:
    if (
        config["warm_start"]
        and workflow.local_exec
        and not workflow.deployment_settings.deployment_method
    ):
        os.makedirs("logs", exist_ok=True)
        path = os.pathsep.join(["src", os.environ.get("PYTHONPATH", "")])
        env = dict(os.environ, PYTHONPATH=path)
        WARM["process"] = subprocess.Popen(
            [sys.executable, "-m", "budgetdraft", "warm", "--socket", WARM_SOCKET],
            env=env,
            stdout=open("logs/warm.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # wait for its imports (a few seconds), or jobs would start before it listens and run cold
        for _ in range(600):
            if os.path.exists(WARM_SOCKET) or WARM["process"].poll() is not None:
                break
            time.sleep(0.1)
        # read by the jobs' budgetdraft command line, not by this Snakefile
        os.environ.update(BUDGETDRAFT_WARM=WARM_SOCKET)


def stop_warm():
    if "process" in WARM:
        WARM["process"].send_signal(signal.SIGTERM)


onsuccess:
    stop_warm()


onerror:
    stop_warm()
