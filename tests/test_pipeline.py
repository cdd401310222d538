"""The whole pipeline, for real, on config/ci.yaml: models -> data -> targets -> train -> grid -> every artifact."""

import json
import re

import pyarrow.parquet as pq
import pytest
from conftest import ci_snakemake as snakemake
from conftest import planned_jobs

from budgetdraft.report import artifacts, paper

PAPER = {key: a for key, a in paper.ARTIFACTS.items() if a.in_all == artifacts.ALWAYS}  # `all` builds them
TABLES = [key for key, a in PAPER.items() if a.kind == "table"]
FIGURES = [a.stem for a in PAPER.values() if a.kind == "figure"]


@pytest.mark.pipeline
def test_every_artifact_is_produced(pipeline_run):
    for name in TABLES:
        text = (pipeline_run / "results/tables" / f"{name}.tex").read_text()
        assert "\\begin{tabular}" in text and "\\label{tab:" in text
    for name in FIGURES:
        for ext in ("pdf", "png"):
            assert (pipeline_run / "results/figures" / f"{name}.{ext}").stat().st_size > 1000


@pytest.mark.pipeline
def test_the_run_predicts_its_time_before_its_first_job(pipeline_run):
    """`snakemake all` prints its predicted wall time from this machine's own timings (config estimate_before_run,
    workflow/rules/common.smk print_prediction) before any job starts: the probe behind it ran, its line is no excuse."""
    log = (pipeline_run / "snakemake.log").read_text()
    said = re.search(r"^budgetdraft: `snakemake all` of \S+ from scratch on this machine .* about [\d.]+ h", log, re.M)
    assert said and log.index(said.group()) < log.index("Finished jobid"), log[:3000]


@pytest.mark.pipeline
def test_the_warm_process_starts_with_glibcs_heap_in_huge_pages(pipeline_run):
    """Snakemake, started without GLIBC_TUNABLES, gives its warm process glibc.malloc.hugetlb=1 (rules/warm.smk,
    base.defaults.CPU_ALLOCATOR_ENV): the server's first line says what glibc read at its start."""
    log = (pipeline_run / "logs/warm.log").read_text()
    started = re.search(r"^budgetdraft warm: serving on .* \(forking, .*, malloc glibc\.malloc\.hugetlb=1, ", log, re.M)
    assert started, log


@pytest.mark.pipeline
def test_every_table_number_traces_to_a_cell_file(pipeline_run, monkeypatch):
    monkeypatch.chdir(pipeline_run)  # the provenance files name cells relative to the workflow directory
    for path in [f"results/tables/{name}.tex" for name in TABLES] + [f"results/figures/{name}.pdf" for name in FIGURES]:
        traced = paper.trace_file(path)  # cells and outputs unchanged by content, every number / point re-derived
        assert traced, path
        assert all(src for _, src in traced)


@pytest.mark.pipeline
def test_claims_report_covers_every_finding(pipeline_run):
    text = (pipeline_run / "results/claims.md").read_text()
    findings = json.loads((pipeline_run / "results/claims.json").read_text())["findings"]
    ids = {re.match(r"F\d", f["id"]).group() for f in findings if f["id"][0] == "F"}  # F2/1K, F8b-B -> F2, F8
    assert {f"F{i}" for i in range(1, 9)} <= ids, ids
    ours = {f["id"].split("/")[0]: f for f in findings if f["id"][0] != "F"}  # the controls (issue 39)
    assert {"PI", "C-pos", "C-sparse"} <= set(ours) and ours["C-pos"]["verdict"] == "diagnostic", sorted(ours)
    assert "## Positional profile" in text and "(native)" in text
    assert (pipeline_run / "results/figures/positions.png").stat().st_size > 1000
    verdicts = {"holds", "does not hold", "not resolved", "not run", "not measured", "diagnostic"}
    assert all(f["verdict"] in verdicts for f in findings), [f["verdict"] for f in findings]
    assert "Evidence behind each number" in text
    assert "**R = 2**" in text and "the interval's spread comes from" in text  # config/ci.yaml: replicates 2
    replicates = {
        r
        for cell in (pipeline_run / "results/cells/lambda0.5").rglob("*.parquet")
        for r in pq.read_table(cell).column("replicate").to_pylist()
    }
    assert replicates == {0, 1}


@pytest.mark.pipeline
def test_comparison_has_the_baselines(pipeline_run):
    text = (pipeline_run / "results/tables/comparison.tex").read_text()
    assert "TriForce" in text and "EAGLE-3" in text


@pytest.mark.pipeline
def test_a_deleted_cell_reruns_alone_with_its_tables(pipeline_run):
    # a finished run plans nothing but the re-aggregation of tables and figures (profiles/default: forcerun) and
    # the paper diff, which reads the tables
    planned = set(planned_jobs(snakemake(pipeline_run, "-n", "all").stdout))
    assert planned == {"table", "figure", "paper_diff", "all"}, planned
    cell = next((pipeline_run / "results/cells/lambda0.5/r1").rglob("*.parquet"))  # one replicate's cell
    cell.unlink()
    by_file = planned_jobs(snakemake(pipeline_run, "-n", str(cell.relative_to(pipeline_run))).stdout)
    assert by_file == {"eval_replicate_cell": 1}, by_file  # requested by its file: that cell alone
    jobs = planned_jobs(snakemake(pipeline_run, "-n", "main").stdout)
    assert jobs == {"eval_replicate_cell": 1, "table": 1, "main": 1}, jobs  # no data, targets, training or other cells
    run = snakemake(pipeline_run, "main")
    assert run.returncode == 0 and cell.is_file(), run.stderr[-2000:]
    assert set(pq.read_table(cell, columns=["replicate"]).column("replicate").to_pylist()) == {1}
