"""A cell file cut short (a full disk, a killed copy) is treated as missing: named, moved aside, measured again."""

import os
import shutil

import pyarrow.parquet as pq
import pytest
from conftest import ci_snakemake as snakemake
from conftest import planned_jobs


@pytest.fixture()
def finished_run(pipeline_run, tmp_path):
    """A copy of the finished config/ci.yaml run to damage (its results hard-linked: every writer replaces files
    whole, and the test replaces the one it truncates), so the session's run stays as it was."""
    work = tmp_path / "run"
    shutil.copytree(pipeline_run, work, ignore=shutil.ignore_patterns("results", "*.sock"), symlinks=True)
    shutil.copytree(pipeline_run / "results", work / "results", copy_function=os.link)
    return work


@pytest.mark.pipeline
def test_a_truncated_cell_is_set_aside_and_measured_again(finished_run):
    cell = next((finished_run / "results/cells/lambda0.5/r1").rglob("*.parquet"))
    name = str(cell.relative_to(finished_run))
    whole = cell.read_bytes()
    cell.unlink()  # a new inode: the session's run keeps its file
    cell.write_bytes(whole[: len(whole) // 2])
    dry = snakemake(finished_run, "-n", "main")
    assert dry.returncode == 0 and f"unreadable cell file {name}" in dry.stderr, dry.stderr[-2000:]
    assert cell.stat().st_size == len(whole) // 2  # a dry run only says so
    run = snakemake(finished_run, "main")
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"unreadable cell file {name} (not a whole parquet file): moved to {name}.unreadable" in run.stderr
    assert cell.with_name(cell.name + ".unreadable").read_bytes() == whole[: len(whole) // 2]  # kept, never deleted
    assert pq.read_table(cell).num_rows > 0 and (finished_run / "results/tables/main.tex").is_file()
    assert set(planned_jobs(snakemake(finished_run, "-n", "main").stdout)) == {"table", "main"}  # nothing else
