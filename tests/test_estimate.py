"""`budgetdraft estimate`: the cost of a configuration before it runs (roofline model over the workflow's own jobs)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from budgetdraft import estimate

ROOT = Path(__file__).resolve().parents[1]


def paper_estimator(device="a100-80g", alpha=0.5, **changes):
    cfg = {**yaml.safe_load((ROOT / "config/paper.yaml").read_text()), **changes}
    return cfg, estimate.Estimator(cfg, estimate.DEVICES[device], alpha)


def test_the_a100_model_reproduces_the_papers_own_ar_throughput():
    """The paper's AR (Table 1): 38.10 / 30.40 / 19.41 tok/s at 4K / 8K / 16K, 256 new tokens, prefill included."""
    _, est = paper_estimator()
    paper = {3800: 38.10, 8192: 30.40, 16384: 19.41}
    for context, tok_s in paper.items():
        seconds, _ = est.generation("ar", context, 0, 0, 256, shared=False)
        assert 0.75 < (256 / seconds) / tok_s < 1.25, (context, 256 / seconds)


def test_acceptance_and_a_faster_device_shorten_speculative_cells():
    _, a100 = paper_estimator()
    _, h100 = paper_estimator("h100-80g")
    _, sure = paper_estimator(alpha=0.9)
    cell = ("lambda0.5", "lwm", 8192, 256, 5)
    assert h100.cell(*cell).seconds < a100.cell(*cell).seconds
    assert sure.cell(*cell).seconds < a100.cell(*cell).seconds
    assert estimate.tokens_per_round(0.0, 5) == 1 and estimate.tokens_per_round(1.0, 5) == 6


def test_a_context_that_does_not_fit_is_refused_naming_it():
    cfg, est = paper_estimator(contexts={"4K": 3800, "128K": 131072})
    with pytest.raises(ValueError, match=r"contexts\.128K = 131072: verifier weights 12\.6 GB \+ verifier KV cache"):
        estimate.check_fits(cfg, est, "a100-80g")
    estimate.check_fits(*paper_estimator()[:2], "a100-80g")  # the paper's 16K fits: 22 GB


@pytest.mark.pipeline
def test_the_command_costs_every_planned_job(tmp_path):
    """On config/ci.yaml: one row per stage, and as many cell jobs as the workflow plans."""
    for name in ("Snakefile", "workflow", "config", "profiles", "envs", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    proc = subprocess.run(
        [sys.executable, "-m", "budgetdraft", "estimate", "--configfile", "config/ci.yaml", "--gpu", "cpu"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path / "src"), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    cells = sum(int(line.split("|")[2].replace(",", "")) for name, line in rows.items() if name.startswith("cells"))
    assert cells == 8 + 76 * 2  # the shared cells and two replicates of the rest (tests/test_workflow.py)
    assert {"base drafters", "variants", "targets", "EAGLE-3 head", "**total**"} <= set(rows)
    assert "Wall time:" in proc.stdout and "Assumptions:" in proc.stdout


def test_gpu_cells_load_the_verifier_once_per_resident_process():
    _, grid = paper_estimator()
    cfg, _ = paper_estimator()
    groups = estimate.Estimator(cfg, estimate.DEVICES["a100-80g"], 0.5, cells_per_process=16)
    _, cold = paper_estimator(warm_start=False)
    _, cpu = paper_estimator("cpu")
    assert grid.verifier_loads(693).loads == 1  # one local GPU: one resident process for the whole grid
    assert groups.verifier_loads(693).loads == 44  # SLURM job groups of 16 cells
    assert cold.verifier_loads(693).loads == 693  # warm_start: false: every cell its own process
    assert cpu.verifier_loads(693).loads == 0  # the forking warm process loaded it before the cells
    assert groups.verifier_loads(693).seconds == 44 * groups.verifier.load_s
