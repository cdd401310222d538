"""A cell file cut short (a full disk, a killed copy), damaged (a flipped bit) or that lies (rows no decoder writes,
another cell's rows) is treated as missing: named with the reason, moved aside, measured again
(budgetdraft.evaluation.cellfile; tests/test_cell_integrity.py tests the checks themselves). The step that moves it
(budgetdraft.pipeline.plan.set_aside_unreadable) runs once, before any job is planned, never in an input function:
in process below, then in real runs of the pipeline."""

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ci_snakemake as snakemake
from conftest import copy_project, planned_jobs

from budgetdraft.base.names import SHARED
from budgetdraft.evaluation import cellfile
from budgetdraft.pipeline.setaside import asked_cells, set_aside_unreadable


def test_the_step_moves_only_what_fails_and_says_so(tmp_path, monkeypatch):
    """Whole cells stay; a bad one is named with its reason and moved to FILE.unreadable (FILE.unreadable.N beside an
    earlier one), never deleted; a dry run moves nothing and says what a run would do; a missing file is no problem."""
    from test_cell_integrity import rows

    monkeypatch.chdir(tmp_path)
    whole = cellfile.cell_path("sd", "gs", "1K", 32, 5, 1)
    bad = cellfile.cell_path("sd", "gs", "1K", 64, 5, SHARED)
    cellfile.write_cell(rows("sd", "gs", "1K", 32, 5, 1), whole)
    cellfile.write_cell(rows("sd", "gs", "1K", 64, 5, SHARED), bad)
    data = open(bad, "rb").read()
    open(bad, "wb").write(data[: len(data) // 2])
    asked = [whole, bad, bad, cellfile.cell_path("ar", "gs", "1K", 0, 0)]  # twice; and one not measured yet
    (dry,) = set_aside_unreadable(asked, dry_run=True)
    assert dry == (
        f"unreadable cell file {bad} (not a whole parquet file): a run will move it to {bad}.unreadable "
        "and measure the cell again (this dry run plans as if it were whole)"
    )
    assert open(bad, "rb").read() == data[: len(data) // 2]
    (moved,) = set_aside_unreadable(asked, dry_run=False)
    assert (
        moved
        == f"unreadable cell file {bad} (not a whole parquet file): moved to {bad}.unreadable, measuring the cell again"
    )
    assert open(f"{bad}.unreadable", "rb").read() == data[: len(data) // 2] and cellfile.problem(whole) is None
    open(bad, "wb").write(b"PAR1")
    assert set_aside_unreadable(asked, dry_run=False)[0].endswith(
        f"moved to {bad}.unreadable.1, measuring the cell again"
    )
    assert set_aside_unreadable(asked, dry_run=False) == []


def test_what_is_no_readable_cell_file_is_set_aside_without_stopping_the_plan(tmp_path, monkeypatch):
    """A directory or a FIFO at a cell path (never opened: a reader would wait on a FIFO for ever) and a file the user
    cannot read (mode 000) are named and moved aside as a damaged file is, never a PermissionError that stops every
    target, dry runs included. (As root every file reads: the file's refusal is then the one the kernel would give.)"""
    monkeypatch.chdir(tmp_path)
    folder = cellfile.cell_path("sd", "gs", "1K", 32, 5, 1)
    fifo = cellfile.cell_path("sd", "gs", "1K", 64, 5, 1)
    locked = cellfile.cell_path("sd", "gs", "1K", 128, 5, 1)
    os.makedirs(folder)
    os.mkfifo(fifo)
    open(locked, "wb").write(b"PAR1")
    os.chmod(locked, 0)
    if os.geteuid() == 0:
        problem = cellfile.problem

        def refused(path):
            if str(path) == locked:
                raise PermissionError(13, "Permission denied", str(path))
            return problem(path)

        monkeypatch.setattr(cellfile, "problem", refused)
    dry = set_aside_unreadable([folder, fifo, locked], dry_run=True)
    assert [line.split(": a run will", 1)[0] for line in dry] == [
        f"unreadable cell file {folder} (a directory, not a cell file)",
        f"unreadable cell file {fifo} (a FIFO, not a cell file)",
        f"unreadable cell file {locked} (cannot be read: Permission denied)",
    ]
    moved = set_aside_unreadable([folder, fifo, locked], dry_run=False)
    assert all(line.endswith(".unreadable, measuring the cell again") for line in moved), moved
    assert not any(map(os.path.lexists, (folder, fifo, locked)))
    assert all(os.path.lexists(f"{path}.unreadable") for path in (folder, fifo, locked))


def test_only_a_path_that_resolves_inside_results_cells_is_a_cell(tmp_path, monkeypatch):
    """A target written with '..' names a file outside results/ with a cell's last segments: it is no cell, and
    the step never moves it."""
    from test_cell_integrity import rows

    monkeypatch.chdir(tmp_path)
    outside = "elsewhere/lambda0.5/r1/gs/128/B16_g5.parquet"
    os.makedirs(os.path.dirname(outside))
    open(outside, "wb").write(b"not a cell")
    dotted = f"results/cells/../../{outside}"
    inside = "results/cells/sd/../lambda0.5/r1/gs/128/B16_g5.parquet"
    assert asked_cells([dotted, inside]) == ["results/cells/lambda0.5/r1/gs/128/B16_g5.parquet"]
    assert set_aside_unreadable([dotted], dry_run=False) == [] and open(outside, "rb").read() == b"not a cell"
    cellfile.write_cell(rows("lambda0.5", "gs", "128", 16, 5, 1), "results/cells/lambda0.5/r1/gs/128/B16_g5.parquet")
    assert set_aside_unreadable([inside], dry_run=False) == []


BAD_CELL = "results/cells/lambda0.5/r1/gs/128/B16_g5.parquet"
OUTSIDE = "elsewhere/lambda0.5/r1/gs/128/B16_g5.parquet"
NO_JOB = {  # what a command adds to `snakemake --configfile config/ci.yaml --cores 2`, and the environment it adds
    "summary": (["--summary"], {}),
    "detailed-summary": (["-D"], {}),
    "filegraph": (["--filegraph"], {}),
    "report": (["--report", "report.html"], {}),
    "list-changes": (["--list-changes", "input"], {}),
    "cleanup-metadata": (["--cleanup-metadata", BAD_CELL], {}),
    "touch-profile": (["--profile", "touching", BAD_CELL], {}),
    "touch-profile-env": ([BAD_CELL], {"SNAKEMAKE_PROFILE": "touching"}),
}


@pytest.fixture()
def bad_cell_copy(tmp_path):
    """The workflow copied with one cut-short cell file, a cut-short file outside results/ with a cell's last
    segments, and a profile that sets `touch: true`."""
    copy_project(tmp_path)
    for path in (BAD_CELL, OUTSIDE):
        os.makedirs(tmp_path / os.path.dirname(path))
        (tmp_path / path).write_bytes(b"PAR1 cut short")
    (tmp_path / "touching").mkdir()
    (tmp_path / "touching" / "config.yaml").write_text("touch: true\n")
    return tmp_path


@pytest.mark.workflow
@pytest.mark.parametrize("command", list(NO_JOB))
def test_a_command_that_runs_no_job_moves_no_cell(bad_cell_copy, command):
    """A summary, a graph, a report, listing changes, cleaning metadata or touching (from a profile too) measures
    nothing, so it moves nothing: only the Snakemake that runs jobs sets a cell aside, and only inside
    results/cells/."""
    args, env = NO_JOB[command]
    done = snakemake(bad_cell_copy, *args, env={**os.environ, **env})
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "moved to" not in done.stderr, done.stderr[-2000:]
    for path in (BAD_CELL, OUTSIDE):
        assert (bad_cell_copy / path).read_bytes() == b"PAR1 cut short", (path, done.stderr[-2000:])
        assert not (bad_cell_copy / f"{path}.unreadable").exists()


@pytest.mark.workflow
def test_a_run_moves_the_cell_it_will_measure_again_and_nothing_outside_results(bad_cell_copy):
    """The same cell, asked of a run (no job allowed to start here: the step comes first), is moved aside, saying
    so; the file outside results/ that a target reaches with '..' stays."""
    done = snakemake(bad_cell_copy, "--allowed-rules", "all", BAD_CELL, f"results/cells/../../{OUTSIDE}")
    assert f"unreadable cell file {BAD_CELL} (not a whole parquet file): moved to {BAD_CELL}.unreadable" in done.stderr
    assert (bad_cell_copy / f"{BAD_CELL}.unreadable").read_bytes() == b"PAR1 cut short"
    assert (bad_cell_copy / OUTSIDE).read_bytes() == b"PAR1 cut short", done.stderr[-2000:]
    assert (
        not (bad_cell_copy / f"{OUTSIDE}.unreadable").exists() and "elsewhere" not in done.stderr.split("SNAKEMAKE")[0]
    )


@pytest.fixture()
def finished_run(pipeline_run, tmp_path):
    """A copy of the finished config/ci.yaml run to damage (its results hard-linked: every writer replaces files
    whole, and the test replaces the one it truncates), so the session's run stays as it was."""
    work = tmp_path / "run"
    shutil.copytree(pipeline_run, work, ignore=shutil.ignore_patterns("results", "*.sock"), symlinks=True)
    shutil.copytree(pipeline_run / "results", work / "results", copy_function=os.link)
    return work


def truncated(cell, whole):
    return whole[: len(whole) // 2]


def flipped(cell, whole):
    """One bit flipped in the middle of the file: in the data of output_ids' column chunk (header, footer intact)."""
    chunk = pq.ParquetFile(cell).metadata.row_group(0)
    column = next(
        chunk.column(i) for i in range(chunk.num_columns) if chunk.column(i).path_in_schema.startswith("output_ids")
    )
    damaged = bytearray(whole)
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    damaged[start + column.total_compressed_size // 2] ^= 0x10
    return bytes(damaged)


def forged(cell, whole):
    """accepted = -7 with acceptance recomputed to match, sealed again with a digest of the forged rows."""
    df = pq.read_table(cell).to_pandas()
    df["accepted"] = -7
    df["acceptance"] = -7 / df["drafted"]
    out = pa.BufferOutputStream()
    pq.write_table(cellfile.seal(pa.Table.from_pandas(df, preserve_index=False)), out)
    return out.getvalue().to_pybytes()


def another_cell(cell, whole):
    """A whole, sealed cell of another budget, copied to this cell's path."""
    budget = int(cell.name[1:].split("_")[0])
    other = next(p for p in cell.parent.glob("B*_g*.parquet") if not p.name.startswith(f"B{budget}_"))
    return other.read_bytes()


DAMAGES = [  # (damage, what the line says of it)
    (truncated, "not a whole parquet file"),
    (flipped, ""),  # the page checksum's or the digest's words, whichever pyarrow reaches first
    (forged, "row 0: accepted = -7 is negative"),
    (another_cell, "its rows are another cell (budget "),
]


@pytest.mark.pipeline
def test_bad_cells_are_set_aside_and_measured_again(finished_run):
    """Each damage on a cell of its own (in four folders: another_cell's source stays whole), in one run: a dry run
    and a touch (`-pt`) name each with its reason and move nothing; a run moves each aside, keeps its bytes and measures it again,
    and nothing else."""
    folders = sorted({p.parent for p in (finished_run / "results/cells/lambda0.5/r1").rglob("B*_g*.parquet")})
    damaged = []  # (cell, its name, its bad bytes, reason)
    for folder, (damage, reason) in zip(folders, DAMAGES, strict=False):
        cell = next(p for p in sorted(folder.glob("B*_g*.parquet")) if "B0_" not in p.name)
        whole = cell.read_bytes()
        bad = damage(cell, whole)
        assert bad != whole
        cell.unlink()  # a new inode: the session's run keeps its file
        cell.write_bytes(bad)
        damaged.append((cell, str(cell.relative_to(finished_run)), bad, reason))
    assert len(damaged) == len(DAMAGES)
    for no_run in (["-n"], ["-pt"]):  # a dry run; touch, in a cluster of short options
        dry = snakemake(finished_run, *no_run, "main")
        assert dry.returncode == 0, dry.stderr[-2000:]
        for cell, name, bad, reason in damaged:
            assert f"unreadable cell file {name} ({reason}" in dry.stderr, (no_run, name, dry.stderr[-2000:])
            assert cell.read_bytes() == bad  # only says so
    run = snakemake(finished_run, "main")
    assert run.returncode == 0, run.stderr[-3000:]
    for cell, name, bad, reason in damaged:
        said = [line for line in run.stderr.splitlines() if line.startswith(f"unreadable cell file {name} (")]
        assert len(said) == 1 and said[0].endswith(f": moved to {name}.unreadable, measuring the cell again"), said
        assert reason in said[0]
        assert cell.with_name(cell.name + ".unreadable").read_bytes() == bad  # kept, never deleted
        assert cellfile.problem(cell) is None
    assert (finished_run / "results/tables/main.tex").is_file()
    assert set(planned_jobs(snakemake(finished_run, "-n", "main").stdout)) == {"table", "main"}  # nothing else
