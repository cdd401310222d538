"""A cell is used only when its record is the cell the plan measures at its path (budgetdraft.evaluation.cellfile.problem
with the plan's CellSpec, budgetdraft.evaluation.cellspec.record_difference): a whole, sealed cell copied in from
another checkout or config (another budget, drafter or number of new tokens) is named when Snakemake plans, moved aside
by rule set_aside's job, which checks it the same way, and measured again; a record this code cannot read (a newer
cell_schema) is refused there and by every reader of the reports. A cell of an earlier record schema equal to the
plan's, or measured on other threads, is kept. In process below (as tests/test_unreadable_cells.py calls guard and
set_aside), then once through Snakemake, which wires the plan's spec to both (workflow/rules/common.smk)."""

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
from conftest import ci_snakemake as snakemake
from conftest import copy_project, planned_jobs
from test_cell_integrity import SETTINGS, rows, sealed_copy
from test_cellspec import BEFORE_CELLSPEC, default_plan
from test_plan import plan

from budgetdraft.base.names import SHARED, SHARED_DRAFTER_PREFILL
from budgetdraft.evaluation import cellfile, grid
from budgetdraft.evaluation.cellspec import CELL_SCHEMA, SAMPLING_FIELDS, SCHEMA_KEY, read_record, record_difference
from budgetdraft.pipeline import cli, setaside, warm
from budgetdraft.pipeline.setaside import guard, set_aside

CELL = ("lambda0.5", "gs", "128", 16, 5, 1)  # a replicate's cell of config/ci.yaml's grid: (label, dataset, ..., rR)


def planned_cells(p):
    """A cell file's path -> the CellSpec plan ``p`` measures there, as the workflow's planned_cell renders it."""

    def planned(path):
        key = cellfile.path_key(path)
        replicate = None if key["replicate"] == SHARED else key["replicate"]
        return p.jobs.spec(key["label"], key["dataset"], key["context"], key["budget"], key["gamma"], replicate)

    return planned


def write(cell, record: str, seal=cellfile.write_cell) -> str:
    """The cell's file at its path under results/cells/ (the working directory), its rows recording ``record``."""
    path = cellfile.cell_path(*cell)
    seal(rows(*cell).assign(config=record), Path(path))
    return path


@pytest.fixture()
def ci(tmp_path, monkeypatch):
    """config/ci.yaml's plan, and its cell files' planned specs, in an empty working directory (each file's problem
    said again: guard says it once per process)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(setaside, "_said", set())
    p = plan("ci")
    return p, planned_cells(p)


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("budget", 32, "its record says budget 32, the plan wants 16"),
        ("max_new_tokens", 64, "its record says max_new_tokens 64, the plan wants 6"),
        (
            "drafter",
            "results/drafters/r1/sd",
            "its record says drafter 'results/drafters/r1/sd', the plan wants 'results/drafters/r1/lambda0.5'",
        ),
    ],
)
def test_a_resealed_cell_of_another_measurement_is_set_aside_naming_the_field(ci, capsys, field, value, said):
    """A whole cell whose record says another budget, new tokens or drafter (its rows the path's cell: re-sealed, as
    a copy from another checkout would be) gets a marker when Snakemake plans, in one line naming the field; the set_aside job checks it again, against the same spec, and moves it aside; the plan's own cell, made
    again, is whole."""
    p, planned = ci
    spec = p.jobs.spec(*CELL[:-1], CELL[-1])
    seal = sealed_copy if field == "budget" else cellfile.write_cell  # write_cell refuses another budget's record
    path = write(CELL, dataclasses.replace(spec, **{field: value}).record(), seal)
    (marker,) = guard(path, {}, cells=planned)
    assert capsys.readouterr().err == (
        f"cell file {path} ({said}): job set_aside moves it to {path}.unreadable ({marker}), and it is made again\n"
    )
    assert cellfile.problem(path, spec) == said
    assert (
        set_aside(marker, {}, cells=planned)
        == f"cell file {path} ({said}): moved to {path}.unreadable, making it again"
    )
    assert not os.path.exists(path) and os.path.exists(f"{path}.unreadable")
    write(CELL, spec.record())  # its rule measures it again
    assert guard(path, {}, cells=planned) == [marker]  # its marker, its input from now on: nothing reruns twice


def test_the_reports_refuse_a_record_of_another_cell_than_its_rows(ci):
    """Without the plan, a reader of the reports still refuses a record whose identity (here its budget) is not its
    rows' and path's, in one line naming the file."""
    p, _ = ci
    spec = p.jobs.spec(*CELL[:-1], CELL[-1])
    path = write(CELL, dataclasses.replace(spec, budget=32).record(), seal=sealed_copy)
    with pytest.raises(
        cellfile.BadCell, match="^" + re.escape(f"{path}: its record (config) is another cell (budget 32)")
    ):
        grid.load_cells([path])
    with pytest.raises(cellfile.BadCell, match="than its rows"):  # eval-cell never writes it
        write(CELL, dataclasses.replace(spec, budget=32).record())


def newer(record: str) -> str:
    return json.dumps({**json.loads(record), SCHEMA_KEY: CELL_SCHEMA + 1})


UNREADABLE = [  # (a record this code cannot read, given the plan's own record; what is said of it)
    (newer, f"its record (config) has cell_schema {CELL_SCHEMA + 1}; this code reads versions 1 to {CELL_SCHEMA}"),
    (lambda r: json.dumps({**json.loads(r), SCHEMA_KEY: "2"}), "its record (config) has cell_schema '2'; this code"),
    (lambda r: r[:-1], "its record (config) is not JSON"),
    (lambda r: json.dumps([r]), "its record (config) is a JSON list, not an object"),
]


@pytest.mark.parametrize("damage, said", UNREADABLE, ids=["newer-schema", "schema-text", "not-json", "not-object"])
def test_a_record_this_code_cannot_read_is_refused_when_planned_and_by_the_reports(
    ci, capsys, monkeypatch, damage, said
):
    """A cell of a newer cell_schema (or a record that is no JSON object) is never misread: Snakemake's plan sets it
    aside, and `paper`, `claims` and every reader of cells refuse it in one line naming the file; eval-cell's writer
    refuses to write it."""
    p, planned = ci
    record = damage(p.jobs.spec(*CELL[:-1], CELL[-1]).record())
    path = write(CELL, record, seal=sealed_copy)
    (marker,) = guard(path, {}, cells=planned)
    line = capsys.readouterr().err
    assert line.startswith(f"cell file {path} ({said}") and line.count("\n") == 1, line
    assert guard(path, {}) == [marker]  # the readers' own check, without the plan, refuses it too
    for read in (grid.read_cell, lambda f: grid.load_cells([f]), cellfile.read_frame):
        with pytest.raises(cellfile.BadCell) as refused:
            read(path)
        assert str(refused.value).startswith(f"{path}: {said}") and "\n" not in str(refused.value)
    monkeypatch.delenv(warm.ENV, raising=False)
    argv = ["claims", "--settings", json.dumps(SETTINGS), "--cells", path, "--out", "o.md"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code.startswith(f"budgetdraft claims: error: {path}: {said}") and "\n" not in exit_.value.code
    with pytest.raises(cellfile.BadCell, match=re.escape(said)):
        write(CELL, record)
    assert set_aside(marker, {}, cells=planned).endswith("moved to " + path + ".unreadable, making it again")


def test_a_cell_whose_rows_hold_two_records_is_refused(ci):
    """One cell, one record: rows of two measurements under one seal are no cell."""
    p, planned = ci
    spec = p.jobs.spec(*CELL[:-1], CELL[-1])
    path = cellfile.cell_path(*CELL)
    frame = rows(*CELL).assign(config=spec.record())
    frame.loc[frame.index[-1], "config"] = dataclasses.replace(spec, seed=1).record()
    sealed_copy(frame, Path(path))
    with pytest.raises(cellfile.BadCell, match="^" + re.escape(f"{path}: its rows hold more than one record")):
        grid.read_cell(path)
    assert cellfile.problem(path, planned(path)).startswith("its rows hold more than one record")


def test_a_cell_of_an_earlier_record_schema_equal_to_the_plan_is_kept(tmp_path, monkeypatch, capsys):
    """A record of schema 1 (eval-cell's flags, no version key: BEFORE_CELLSPEC, from a clean run of
    config/config.yaml) and one that predates sampling mode (no sampling flags: their defaults) are the plan's cell:
    kept, not set aside for being older. One of them that measured other new tokens is set aside."""
    monkeypatch.chdir(tmp_path)
    planned = planned_cells(default_plan())
    cell = ("lambda0.5", "gs", "1K", 64, 5, 0)
    path = write(cell, BEFORE_CELLSPEC)
    assert guard(path, {}, cells=planned) == [] and capsys.readouterr().err == ""
    before_sampling = json.dumps({k: v for k, v in json.loads(BEFORE_CELLSPEC).items() if k not in SAMPLING_FIELDS})
    assert record_difference(read_record(before_sampling), planned(path)) is None
    os.remove(path)
    path = write(cell, before_sampling)
    assert guard(path, {}, cells=planned) == [] and len(grid.read_cell(path)) == len(rows(*cell))
    os.remove(path)
    path = write(cell, BEFORE_CELLSPEC.replace('"max_new_tokens": 16', '"max_new_tokens": 32'))
    assert cellfile.problem(path, planned(path)) == "its record says max_new_tokens 32, the plan wants 16"


@pytest.mark.parametrize("record", ["", "{}"], ids=["empty", "no-fields"])
def test_a_cell_without_a_record_cannot_show_it_is_the_plans(ci, record):
    """No eval-cell ever wrote a cell without a record (it has recorded its flags since its first version), so a
    record that names no cell is set aside when planned, naming the first field it lacks that has no default; the
    reports, without the plan, read its rows (the checks they can make hold)."""
    p, planned = ci
    path = write(CELL, record)
    assert cellfile.problem(path, planned(path)) == "its record says no label, the plan wants 'lambda0.5'"
    assert cellfile.problem(path) is None


def test_a_cell_measured_on_other_threads_is_kept(ci, capsys):
    """`threads` is how many threads a run gave the job (config `threads`, capped at --cores), not what it measured:
    a cell measured under --cores 1 is not measured again under --cores 2. Nor is the shared drafter prefill (how
    the process ran) compared."""
    p, planned = ci
    spec = p.jobs.spec(*CELL[:-1], CELL[-1])
    path = write(CELL, dataclasses.replace(spec, threads=spec.threads + 1).record(drafter_prefill_shared=True))
    assert guard(path, {}, cells=planned) == [] and capsys.readouterr().err == ""
    assert cellfile.problem(path, planned(path)) is None
    marker = f"results/setaside/{path.removeprefix('results/')}.1"
    assert set_aside(marker, {}, cells=planned) == f"cell file {path}: found whole when this job ran; nothing moved"
    assert json.loads(cellfile.read_frame(path)["config"][0])[SHARED_DRAFTER_PREFILL] is True


@pytest.mark.parametrize("sampling", [None, {"temperature": 0, "top_p": 0.5, "top_k": 3, "seed": 7}])
def test_every_cell_eval_cell_records_is_the_plans(sampling):
    """What eval-cell records for every cell of config/ci.yaml, from the command line the plan renders (on another
    number of threads) is the plan's cell, so that no cell it measures is set aside again at the next plan. In greedy
    mode the other sampling settings are not on its command line, so they are not compared."""
    import argparse
    import shlex

    from budgetdraft.pipeline.commands.cmd_eval_cell import cell_spec, configure_parser

    p = plan("ci") if sampling is None else plan("ci", sampling=sampling)
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    planned = planned_cells(p)
    for path in p.cells.every_cell():
        spec = planned(path)
        argv = [*shlex.split(p.jobs.eval_cell_flags(dataclasses.replace(spec, threads=3))), "--out", path]
        recorded = read_record(cell_spec(parser.parse_args(argv)).record(drafter_prefill_shared=True))
        assert record_difference(recorded, spec) is None, path
    if sampling is not None:
        assert (
            record_difference({**recorded, "temperature": 0.5}, spec)
            == "its record says temperature 0.5, the plan wants 0"
        )


BAD = "results/cells/lambda0.5/r1/gs/128/B16_g5.parquet"  # a cell of config/ci.yaml copied in: its record's budget 32
KEPT = "results/cells/lambda0.5/r1/gs/128/B32_g5.parquet"  # the plan's cell, measured with 2 threads
CUT_SHORT = "results/cells/lambda0.5/r0/gs/128/B16_g5.parquet"  # a cell file cut short (tests/test_unreadable_cells.py)
OUTSIDE = "elsewhere/lambda0.5/r0/gs/128/B16_g5.parquet"  # cut short too, outside results/, with a cell's last segments


@pytest.mark.workflow
def test_snakemake_compares_each_cell_with_its_plan_and_its_job_moves_it(tmp_path):
    """Through Snakemake: when it plans the cells (a dry run), the cell whose record is another budget is named, with
    its marker, and the cell measured on other threads is named nowhere; a run of those markers alone (only rule
    set_aside's jobs: nothing of what the cells' own jobs need) moves the first aside, its job comparing it with the
    same spec, and moves a cell cut short too, saying so, writing its marker. The file outside results/ with a cell's
    last segments is no output of any rule and stays (the run that tests/test_unreadable_cells.py's in-process tests
    of `guard` and `set_aside` are wired to). (`--until set_aside` ran the models' export and two drafters' training
    too, ~30 CPU-seconds: Snakemake still runs what the targets' other inputs need.)"""
    copy_project(tmp_path)
    p = plan("ci")
    for path in (BAD, KEPT):
        key = cellfile.path_key(path)
        cell = tuple(key[c] for c in cellfile.IDENTITY)
        spec = planned_cells(p)(path)
        record = dataclasses.replace(spec, budget=32) if path == BAD else dataclasses.replace(spec, threads=2)
        seal = sealed_copy if path == BAD else cellfile.write_cell
        seal(rows(*cell).assign(config=record.record()), tmp_path / path)
    for path in (CUT_SHORT, OUTSIDE):
        os.makedirs(tmp_path / os.path.dirname(path))
        (tmp_path / path).write_bytes(b"PAR1 cut short")
    planned = snakemake(tmp_path, "-n", BAD, KEPT, CUT_SHORT)
    assert planned.returncode == 0, planned.stderr[-3000:]
    said = "its record says budget 32, the plan wants 16"
    named = re.findall(r"^cell file (\S+) \((.+?)\): job set_aside moves it to (\S+) \((\S+)\), and it is made again$",
                       planned.stderr, re.M)  # fmt: skip
    assert {path: (why, aside) for path, why, aside, _ in named} == {
        BAD: (said, f"{BAD}.unreadable"), CUT_SHORT: ("not a whole parquet file", f"{CUT_SHORT}.unreadable"),
    }, planned.stderr[-3000:]  # fmt: skip
    assert f"cell file {KEPT}" not in planned.stderr and "elsewhere" not in planned.stderr
    markers = {path: marker for path, *_, marker in named}
    done = snakemake(tmp_path, *markers.values(), "--config", "warm_start=false")  # no job here runs a model
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(planned_jobs(done.stdout + done.stderr)) == {"set_aside"}
    assert f"cell file {BAD} ({said}): moved to {BAD}.unreadable, making it again" in done.stderr
    assert (tmp_path / f"{BAD}.unreadable").is_file() and not (tmp_path / BAD).exists()
    assert f"cell file {KEPT}" not in done.stderr and (tmp_path / KEPT).is_file()
    cut = f"cell file {CUT_SHORT} (not a whole parquet file): moved to {CUT_SHORT}.unreadable, making it again"
    assert cut in done.stderr, done.stderr[-3000:]
    (marker,) = (tmp_path / "results/setaside" / os.path.dirname(CUT_SHORT).removeprefix("results/")).iterdir()
    assert str(marker.relative_to(tmp_path)) == markers[CUT_SHORT] and marker.read_text() == cut + "\n"
    assert (tmp_path / f"{CUT_SHORT}.unreadable").read_bytes() == b"PAR1 cut short"
    assert (tmp_path / OUTSIDE).read_bytes() == b"PAR1 cut short" and "elsewhere" not in done.stderr
