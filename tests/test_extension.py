"""Extending the grid costs one file: in a copy of the project, a control method of a declared drafter kind is one
`declare(Method(...))` in budgetdraft/base/methods.py, a sparse policy one `@sparse_policy` function in
budgetdraft/decoding/policies.py, and nothing else is edited. The config check accepts both, the workflow plans the
method's drafter (its kind's rule), its cells, its positional profile and the claims that read it, and the policy's
cells and the figure that compares policies; the cost estimate costs them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("Snakefile", "workflow", "config", "profiles", "src", "envs")
METHOD = """

PI_COPY = declare(
    Method(
        "pi_copy",
        "SD + PI (a second)",
        "sd",
        INTERPOLATED,
        enabled_by="controls",
        claims=True,
        what="a throwaway control of tests/test_extension.py",
    )
)
"""
POLICY = '''

@sparse_policy("first_chunks")
def first_chunks_policy(inputs: PolicyInputs) -> list[torch.Tensor]:
    """A throwaway policy of tests/test_extension.py: the first B prefix positions."""
    kept = torch.arange(min(inputs.budget, inputs.prefix_len))
    return [kept] * inputs.num_layers
'''

pytestmark = pytest.mark.workflow


def run(cmd: list[str], work: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(work / "src")}  # the copy's package, not the checkout's
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_a_method_and_a_policy_are_one_file_each(tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    for name in PROJECT:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, work / name)
    with open(work / "src/budgetdraft/base/methods.py", "a") as f:
        f.write(METHOD)
    with open(work / "src/budgetdraft/decoding/policies.py", "a") as f:
        f.write(POLICY)
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["controls"] = ["pi", "sd@full", "pi_copy"]
    cfg["policies"] = {**cfg.get("policies", {}), "names": ["topk_chunks", "first_chunks"]}
    (work / "config/ext.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    plan = run([sys.executable, "-m", "snakemake", "-n", "--forceall", "all", "policies", "--configfile",
                "config/ext.yaml", "--cores", "2"], work)  # fmt: skip
    assert "rule interpolate:" in plan and "output: results/drafters/r0/pi_copy\n" in plan  # its kind's rule
    contexts = list(cfg["contexts"])
    for context in contexts:  # its cells, each replicate, at every dataset x context x budget, gamma_fixed
        assert f"output: results/cells/pi_copy/r1/lwm/{context}/B{cfg['budgets'][0]}_g5.parquet" in plan
        assert f"output: results/cells/sd@first_chunks/r0/gs/{context}/" in plan  # the policy's cells
    claims = plan.split("rule claims:")[1].split("output:")[0]
    assert "results/cells/pi_copy/r0/" in claims  # the claims read the new control (a method declared `claims`)
    profile = plan.split("rule profile:")[1].split("output:")[0]
    assert "results/drafters/r0/pi_copy" in profile  # its drafter is profiled like PI's
    figure = next(block for block in plan.split("rule figure:")[1:] if "policies" in block.split("output:")[1][:80])
    assert "results/cells/sd@first_chunks/" in figure.split("output:")[0]  # the policies figure compares it

    costs = run([sys.executable, "-m", "budgetdraft", "estimate", "--configfile", "config/ext.yaml", "--gpu", "cpu",
                 "--target", "all"], work)  # fmt: skip
    assert f"| cells pi_copy {contexts[0]} |" in costs and "| exports |" in costs
