"""Extending the grid costs one file, or two for a new kind of drafter or a new decoder: in a copy of the project, a
control method of a declared drafter kind is one `declare(Method(...))` in budgetdraft/base/methods.py; a new drafter
kind is its `kind(DrafterKind(...))` there (with a method of it) and the rule that makes its drafter in
workflow/rules/train.smk; a new decoder is its `decoder(Decoder(...))` there (with a method that runs it) and its
factory module; a sparse policy is one `@sparse_policy` function in budgetdraft/decoding/policies.py; nothing else is
edited. The config check accepts them, the workflow plans each method's drafter (its kind's rule), its cells (with its
decoder's flag and code, a γ as it drafts), its positional profile and the claims that read it, and the policy's
cells and the figure that compares policies; the cost estimate costs them (a decoder by its declared cost line);
eval-cell runs the new decoder, and it and the config check refuse it sampling, as declared."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import tiny_cell_inputs

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
UNIGRAM = decoder(Decoder("unigram", FREE_DRAFTS, "budgetdraft.decoding.baselines.unigram", NO_DRAFTER))
UNI = declare(Method("uni", "Unigram copier", UNIGRAM, NONE, NO_BUDGET, enabled_by="controls", findings=("CP",)))
"""
FACTORY = '''"""A throwaway decoder of tests/test_extension.py: the prompt-lookup copier on 1-grams."""

from budgetdraft.decoding.baselines.lookup import LookupDrafter


def drafter_factory(verifier, draft, extra, load=None):
    return lambda: LookupDrafter(verifier, 1)
'''
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


def run(cmd: list[str], work: Path, ok: bool = True) -> str:
    """``cmd``'s stdout in the copy ``work`` (its package, not the checkout's); with ``ok`` False, its stderr, once
    it has failed."""
    env = {**os.environ, "PYTHONPATH": str(work / "src")}  # the copy's package, not the checkout's
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    assert (done.returncode == 0) == ok, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout if ok else done.stderr


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
    (work / "src/budgetdraft/decoding/baselines/unigram.py").write_text(FACTORY)
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["controls"] = ["pi", "sd@full", "pi_copy", "rs", "uni"]
    cfg["policies"] = {**cfg.get("policies", {}), "names": ["topk_chunks", "first_chunks"]}
    (work / "config/ext.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    plan = run([sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "all", "policies", "--configfile",
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
    assert "results/cells/uni/lwm/" in claims  # ... and the new decoder's method's cells (findings CP)
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
    rows = {line.split("|")[1].strip(): line.split("|")[2:] for line in costs.splitlines() if line.startswith("|")}
    for context in contexts:  # costed by its cost line and traits as the copier's: its prefill alone, no fork
        assert rows[f"cells uni {context}"] == rows[f"cells lookup {context}"], context
    exports = next(line for line in costs.splitlines() if line.startswith("| exports |"))
    assert (
        int(exports.split("|")[2]) == 2 + 3 * 2
    )  # the two models, and PI's, pi_copy's and rs's drafters x 2 replicates

    decoder_traits_in_the_plan_and_the_cell(plan, cfg, work, tmp_path)


def decoder_traits_in_the_plan_and_the_cell(plan: str, cfg: dict, work: Path, tmp_path: Path) -> None:
    """The new decoder in the copy's plan (its cells' flag, γ and code input), run by eval-cell, and refused sampling
    by eval-cell and the config check (it is not declared to sample)."""
    dataset, context, gamma = "lwm", list(cfg["contexts"])[0], cfg["gamma_fixed"]
    job = plan.split(f"output: results/cells/uni/{dataset}/{context}/B0_g{gamma}.parquet")[1].split("\n\n")[0]
    assert "--label uni --decodes unigram " in job and "--drafter " not in job  # it drafts (γ), with no drafter
    code = plan.split("output: results/code/cell-unigram.sha256")[0].rsplit("rule code:", 1)[1]
    assert "src/budgetdraft/decoding/baselines/unigram.py" in code  # its factory is its cells' code

    tiny_cell_inputs(tmp_path, [5, 6, 7, 8] * 8)
    cell = [sys.executable, "-m", "budgetdraft", "eval-cell", "--label", "uni", "--decodes", "unigram", "--verifier",
            str(tmp_path / "v"), "--prompts", str(tmp_path / "p.parquet"), "--dataset", "d", "--context", "c",
            "--gamma", "3", "--max-new-tokens", "8", "--repeats", "1", "--warmup", "0"]  # fmt: skip
    run([*cell, "--out", str(tmp_path / "uni.parquet")], work)
    rows = pd.read_parquet(tmp_path / "uni.parquet")
    assert set(rows["method"]) == {"unigram"} and rows["drafted"].sum() > 0  # its factory's drafter drafted
    assert json.loads(rows["config"][0])["decodes"] == "unigram"
    refused = run([*cell, "--temperature", "0.9", "--out", str(tmp_path / "sampled.parquet")], work, ok=False)
    assert refused.splitlines()[-1] == (
        "budgetdraft eval-cell: error: --temperature 0.9: decoder 'unigram' decodes greedily only; sampling runs "
        "with decoders ar, sd"
    )
    sampled = {**cfg, "sampling": {"temperature": 0.5}, "baselines": {**cfg["baselines"], "enabled": []}}
    sampled["long_generation"] = {**cfg["long_generation"], "methods": ["ar", "sd"]}  # no copier: it is a baseline
    (work / "config/sampled.yaml").write_text(yaml.safe_dump(sampled, sort_keys=False))
    check = (
        "import yaml; from budgetdraft.pipeline.configcheck import check_config; "
        "check_config(yaml.safe_load(open('config/sampled.yaml')), schema='workflow/schemas/config.schema.yaml')"
    )
    assert "controls = ['pi', 'sd@full', 'pi_copy', 'rs', 'uni']: uni decode greedily only" in run(
        [sys.executable, "-c", check], work, ok=False
    )
