"""A cell file cut short (a full disk, a killed copy), damaged (a flipped bit) or that lies (rows no decoder writes,
another cell's rows) is named with the reason when Snakemake plans, moved aside by a job (rule set_aside, under
Snakemake's lock) and measured again (budgetdraft.pipeline.setaside; tests/test_cell_integrity.py tests the checks
themselves): in process below, then in real runs of the pipeline."""

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import ci_snakemake as snakemake
from conftest import copy_project, planned_jobs

from budgetdraft.base.names import SHARED
from budgetdraft.evaluation import cellfile, sealed
from budgetdraft.pipeline import setaside
from budgetdraft.pipeline.setaside import guard, set_aside


def test_a_bad_cell_gets_a_marker_and_its_job_moves_it_aside(tmp_path, monkeypatch, capsys):
    """When Snakemake plans (`guard`, reading only): a whole cell never set aside has no marker; a bad one is named
    with its reason and gets a marker named by its modification time, and nothing moves. The marker's job (`set_aside`) moves it to
    FILE.unreadable (FILE.unreadable.N beside an earlier one), never deleted, and writes the marker saying so; the
    re-made cell keeps that marker as its input; damaged again, it gets another one."""
    from test_cell_integrity import rows

    monkeypatch.chdir(tmp_path)
    whole = cellfile.cell_path("sd", "gs", "1K", 32, 5, 1)
    bad = cellfile.cell_path("sd", "gs", "1K", 64, 5, SHARED)
    cellfile.write_cell(rows("sd", "gs", "1K", 32, 5, 1), whole)
    cellfile.write_cell(rows("sd", "gs", "1K", 64, 5, SHARED), bad)
    data = open(bad, "rb").read()
    open(bad, "wb").write(data[: len(data) // 2])
    assert guard(whole, {}) == [] and guard(cellfile.cell_path("ar", "gs", "1K", 0, 0), {}) == []  # not measured yet
    marker = f"results/setaside/{bad.removeprefix('results/')}.{os.stat(bad).st_mtime_ns}"
    assert guard(bad, {}) == [marker] == guard(bad, {})  # said once
    assert capsys.readouterr().err == (
        f"cell file {bad} (not a whole parquet file): job set_aside moves it to {bad}.unreadable ({marker}), and it "
        "is made again\n"
    )
    assert open(bad, "rb").read() == data[: len(data) // 2]  # planning moves nothing
    line = set_aside(marker, {})
    assert line == f"cell file {bad} (not a whole parquet file): moved to {bad}.unreadable, making it again"
    assert open(marker).read() == line + "\n"
    assert open(f"{bad}.unreadable", "rb").read() == data[: len(data) // 2] and not os.path.exists(bad)
    cellfile.write_cell(rows("sd", "gs", "1K", 64, 5, SHARED), bad)  # its rule makes it again
    assert guard(bad, {}) == [marker]  # its input from now on: nothing reruns twice
    open(bad, "wb").write(b"PAR1")
    again = f"results/setaside/{bad.removeprefix('results/')}.{os.stat(bad).st_mtime_ns}"
    assert again != marker and guard(bad, {}) == [again]
    assert set_aside(again, {}).endswith(f"moved to {bad}.unreadable.1, making it again")
    assert set_aside(again + "0", {}) == f"cell file {bad}: found whole when this job ran; nothing moved"


def test_what_is_no_readable_cell_file_is_set_aside_without_stopping_the_plan(tmp_path, monkeypatch, capsys):
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

        monkeypatch.setitem(setaside.KINDS, "cells/", ("cell file", refused, "unreadable"))
    markers = [m for path in (folder, fifo, locked) for m in guard(path, {})]
    assert [line.split(": job set_aside", 1)[0] for line in capsys.readouterr().err.splitlines()] == [
        f"cell file {folder} (a directory, not a file)",
        f"cell file {fifo} (a FIFO, not a file)",
        f"cell file {locked} (cannot be read: Permission denied)",
    ]
    moved = [set_aside(m, {}) for m in markers]
    assert all(line.endswith(".unreadable, making it again") for line in moved), moved
    assert not any(map(os.path.lexists, (folder, fifo, locked)))
    assert all(os.path.lexists(f"{path}.unreadable") for path in (folder, fifo, locked))


def test_a_settings_file_that_is_not_the_plans_is_named_and_removed(tmp_path, monkeypatch, capsys):
    """A settings file whose JSON is the plan's stays (1 and 1.0 are one number); one that differs is named with its
    first difference and its job removes it (made from the config alone: nothing to keep); a missing one is no
    problem."""
    from test_plan import plan

    monkeypatch.chdir(tmp_path)
    planned = plan("ci").settings.files()
    os.makedirs("results/settings")
    same = json.loads(planned["results/settings/main.json"])
    same["variants"]["lambda1.0"]["lambda_c"] = 1
    edits = {
        "results/settings/main.json": json.dumps(same),
        "results/settings/lambda.json": planned["results/settings/lambda.json"].replace('"LWM"', '"FORGED-NAME"'),
        "results/settings/claims.json": planned["results/settings/claims.json"].replace(
            '"base_drafter_steps"', '"extra": 1, "base_drafter_steps"'
        ),
        "results/settings/vram.json": "{not json",
    }
    for path, text in edits.items():
        open(path, "w").write(text)
    markers = {path: guard(path, planned) for path in planned}
    said = [line.split(": job set_aside removes it")[0] for line in capsys.readouterr().err.splitlines()]
    assert sorted(said) == [
        "settings file results/settings/claims.json (not what the config plans: extra = 1 is not planned)",
        "settings file results/settings/lambda.json (not what the config plans: datasets.lwm = 'FORGED-NAME', not "
        "'LWM')",
        "settings file results/settings/vram.json (not JSON)",
    ]
    assert markers["results/settings/main.json"] == [] and len([m for m in markers.values() if m]) == 3
    assert all(open(path).read() == text for path, text in edits.items())  # planning moves nothing
    for (marker,) in (m for m in markers.values() if m):
        assert set_aside(marker, planned).endswith(": removed, writing it again")
    assert sorted(os.listdir("results/settings")) == ["main.json"]


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


# A run that moves a cut-short cell by a job (and nothing outside results/) is tests/test_cell_plan.py's
# test_snakemake_compares_each_cell_with_its_plan_and_its_job_moves_it: one run of the set-aside jobs for both.


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
    """One bit flipped in the data of output_ids' column chunk (header, footer intact): the first from its middle on
    that damages the file (a bit of a page's unused padding changes nothing: tests/test_cell_integrity.py)."""
    chunk = pq.ParquetFile(cell).metadata.row_group(0)
    column = next(
        chunk.column(i) for i in range(chunk.num_columns) if chunk.column(i).path_in_schema.startswith("output_ids")
    )
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    cell.unlink()  # tried at its own path (a cell is read as the cell its path names), a new inode: see the caller
    for offset in range(start + column.total_compressed_size // 2, start + column.total_compressed_size):
        damaged = bytearray(whole)
        damaged[offset] ^= 0x10
        cell.write_bytes(damaged)
        if cellfile.problem(cell) is not None:
            return bytes(damaged)
    raise AssertionError(f"no flipped bit of {cell}'s output_ids damages it")


def forged(cell, whole):
    """accepted = -7 with acceptance recomputed to match, sealed again with a digest of the forged rows."""
    df = pq.read_table(cell).to_pandas()
    df["accepted"] = -7
    df["acceptance"] = -7 / df["drafted"]
    out = pa.BufferOutputStream()
    pq.write_table(sealed.seal(pa.Table.from_pandas(df, preserve_index=False)), out)
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
            assert f"cell file {name} ({reason}" in dry.stderr, (no_run, name, dry.stderr[-2000:])
            assert cell.read_bytes() == bad  # only says so
    run = snakemake(finished_run, "main")
    assert run.returncode == 0, run.stderr[-3000:]
    for cell, name, bad, reason in damaged:
        # what the job did, in its marker (the same line the job writes to stderr, which its thread shares with
        # Snakemake's own logging)
        done = f"cell file {name} ({reason}"
        (marker,) = (finished_run / "results/setaside" / Path(name).parent.relative_to("results")).glob(
            cell.name + ".*"
        )
        assert marker.read_text().startswith(done) and marker.read_text().endswith(
            f": moved to {name}.unreadable, making it again\n"
        )
        assert cell.with_name(cell.name + ".unreadable").read_bytes() == bad  # kept, never deleted
        assert cellfile.problem(cell) is None
    assert (finished_run / "results/tables/main.tex").is_file()
    # nothing else (the forced tables aside): a marker, the cell's input from now on, reruns nothing twice
    assert set(planned_jobs(snakemake(finished_run, "-n", "main").stdout)) == {"table", "main"}


@pytest.mark.pipeline
def test_a_run_refused_by_the_lock_changes_nothing_of_the_running_one(finished_run):
    """Two `snakemake` in one folder: the second, with another config (its settings and run record differ from the
    running one's, so its plan sets them aside), is refused by Snakemake's lock and has changed nothing, the first
    finishes. The first is held still (SIGSTOP) once it holds the lock, so the second always meets it there."""
    import signal
    import subprocess
    import time

    from conftest import CI_SNAKEMAKE

    def files():  # every file of results/ as it stands: a file changed or replaced has another stat
        return {
            p: (s.st_ino, s.st_size, s.st_mtime_ns) for p in (finished_run / "results").rglob("*") if (s := p.lstat())
        }

    first = subprocess.Popen(
        [*CI_SNAKEMAKE, "main"], cwd=finished_run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    locks = finished_run / ".snakemake" / "locks"
    deadline = time.monotonic() + 120
    while not (locks.is_dir() and any(locks.iterdir())) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.poll() is None, first.communicate()
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        before = files()
        second = snakemake(finished_run, "main", "--config", "datasets={gs: {name: OTHER}}")
        assert second.returncode != 0 and "Directory cannot be locked" in second.stdout + second.stderr, (
            second.stdout[-2000:] + second.stderr[-2000:]
        )
        assert "settings file results/settings/main.json (not what the config plans" in second.stderr
        assert files() == before  # not a byte of the running run's results changed
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    assert not (finished_run / "results/setaside").exists()


def test_an_edited_or_damaged_profile_or_prefill_file_is_named_and_set_aside(tmp_path, monkeypatch, capsys):
    """The positional profile and the shared prefills are sealed as cells are: a profile edited and sealed again
    (an agreement below 0, as a hand edit published one) and a prefill with a flipped bit are named when Snakemake
    plans and moved aside by their job; the claims' reader refuses the edited profile, naming it."""
    from safetensors.torch import save_file

    from budgetdraft.evaluation import profilefile
    from budgetdraft.evaluation.sealed import sealed_metadata
    from budgetdraft.report.profiles import load_profile

    monkeypatch.chdir(tmp_path)
    os.makedirs("results/positions")
    os.makedirs("results/prefill/gs")
    rows = pd.DataFrame(
        [("sd", 0, "gs", 0, 0, 128, 40, 128)], columns=profilefile.COLUMNS
    )  # one bucket: 40 of 128 positions agreed
    profilefile.save_rows(rows, "results/positions/r0.parquet")
    assert guard("results/positions/r0.parquet", {}) == [] and len(load_profile(["results/positions/r0.parquet"])) == 1
    edited = rows.assign(agreed=-100)
    pq.write_table(sealed.seal(pa.Table.from_pandas(edited, preserve_index=False)), "results/positions/r0.parquet")
    with pytest.raises(ValueError, match=r"results/positions/r0.parquet: row 0: agreed < 0"):
        load_profile(["results/positions/r0.parquet"])
    tensors = {"a.0.k": torch.arange(6.0).reshape(2, 3)}
    save_file(tensors, "results/prefill/gs/1K.safetensors", metadata=sealed_metadata(tensors, {"x": "1"}))
    assert guard("results/prefill/gs/1K.safetensors", {}) == []
    data = bytearray(open("results/prefill/gs/1K.safetensors", "rb").read())
    data[-4] ^= 0x01
    open("results/prefill/gs/1K.safetensors", "wb").write(bytes(data))
    (profile,) = guard("results/positions/r0.parquet", {})
    (prefill,) = guard("results/prefill/gs/1K.safetensors", {})
    said = capsys.readouterr().err
    assert "positional profile file results/positions/r0.parquet (row 0: agreed < 0): job set_aside moves it to" in said
    assert "verifier prefill file results/prefill/gs/1K.safetensors (its tensors do not match the digest" in said
    for marker, path in ((profile, "results/positions/r0.parquet"), (prefill, "results/prefill/gs/1K.safetensors")):
        assert set_aside(marker, {}).endswith(f"moved to {path}.unreadable, making it again")
        assert not os.path.exists(path) and os.path.exists(f"{path}.unreadable")
