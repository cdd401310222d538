"""Extending the grid costs one file, or two for a new kind of drafter: in a copy of the project, a control method of
a declared drafter kind is one `declare(Method(...))` in budgetdraft/base/methods.py; a new drafter kind is its
`kind(DrafterKind(...))` there (with a method of it) and the rule that makes its drafter in workflow/rules/train.smk;
a sparse policy is one `@sparse_policy` function in budgetdraft/decoding/policies.py; nothing else is edited. The
config check accepts them, the workflow plans each method's drafter (its kind's rule), its cells, its positional
profile and the claims that read it, and the policy's cells and the figure that compares policies; the cost estimate
costs them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("workflow", "config", "profiles", "src", "envs")
METHOD = """

PI_COPY = declare(
    Method(
        "pi_copy",
        "SD + PI (a second)",
        "sd",
        INTERPOLATED,
        enabled_by="controls",
        findings=("PI",),
        what="a throwaway control of tests/test_extension.py",
    )
)
RESCALED = kind(DrafterKind("rescaled", rules=("rescale",), cost=EXPORT, own=True, replicated=True))
RS = declare(Method("rs", "SD + a rescaled drafter", "sd", RESCALED, enabled_by="controls", findings=("PI",)))
"""
RULE = """

rule rescale:
    input:
        base=lambda wc: PLAN.drafters.base_drafter_dir(wc.replicate),
    output:
        directory("results/drafters/r{replicate}/{label}"),
    wildcard_constraints:
        replicate=r"\\d+",
        label="|".join(PLAN.drafters.made_from_base("rescaled")) or "(?!)",
    shell:
        "python -m budgetdraft export-model --spec {input.base} --out {output}"
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
    with open(work / "workflow/rules/train.smk", "a") as f:
        f.write(RULE)
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["controls"] = ["pi", "sd@full", "pi_copy", "rs"]
    cfg["policies"] = {**cfg.get("policies", {}), "names": ["topk_chunks", "first_chunks"]}
    (work / "config/ext.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    plan = run([sys.executable, "-m", "snakemake", "-n", "--forceall", "all", "policies", "--configfile",
                "config/ext.yaml", "--cores", "2"], work)  # fmt: skip
    assert "rule interpolate:" in plan and "output: results/drafters/r0/pi_copy\n" in plan  # its kind's rule
    assert "rule rescale:" in plan and "output: results/drafters/r1/rs\n" in plan  # the new kind's rule
    contexts = list(cfg["contexts"])
    for context in contexts:  # its cells, each replicate, at every dataset x context x budget, gamma_fixed
        for label in ("pi_copy", "rs"):
            assert f"output: results/cells/{label}/r1/lwm/{context}/B{cfg['budgets'][0]}_g5.parquet" in plan
        assert f"output: results/cells/sd@first_chunks/r0/gs/{context}/" in plan  # the policy's cells
    claims = plan.split("rule claims:")[1].split("output:")[0]
    assert "results/cells/pi_copy/r0/" in claims  # the claims read the new control (a method declared `claims`)
    profiles = [
        block.split("output:")[0] for block in plan.split("rule positions:")[1:]
    ]  # one per replicate, any order
    for r in (0, 1):  # profiled like PI's
        assert any(f"results/drafters/r{r}/pi_copy" in p and f"results/drafters/r{r}/rs" in p for p in profiles), r
    figure = next(block for block in plan.split("rule figure:")[1:] if "policies" in block.split("output:")[1][:80])
    assert "results/cells/sd@first_chunks/" in figure.split("output:")[0]  # the policies figure compares it

    costs = run([sys.executable, "-m", "budgetdraft", "estimate", "--configfile", "config/ext.yaml", "--gpu", "cpu",
                 "--target", "all"], work)  # fmt: skip
    assert f"| cells pi_copy {contexts[0]} |" in costs and f"| cells rs {contexts[-1]} |" in costs
    exports = next(line for line in costs.splitlines() if line.startswith("| exports |"))
    assert (
        int(exports.split("|")[2]) == 2 + 3 * 2
    )  # the two models, and PI's, pi_copy's and rs's drafters x 2 replicates
