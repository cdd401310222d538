"""The steps that change files before any job is planned, apart from the plan (which writes nothing): a cell file
that cannot be used is set aside (FILE.unreadable, never deleted) so that its cell is measured again, and a settings
file that is not what the config plans is removed so that it is written again. The workflow runs both once, when
Snakemake is about to run jobs and before it plans them (workflow/rules/common.smk), over the files the plan can ask
for (`CellGrid.every_cell`, `SettingsFiles.files`) and those named on the command line (`asked_cells`), and prints
what each did.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from budgetdraft.base.jsonio import first_difference
from budgetdraft.evaluation import cellfile


def asked_cells(targets) -> list[str]:
    """The cell files among command-line ``targets``, each as its path under results/cells/ once resolved ('..'
    and symbolic links followed): ``results/cells/../../elsewhere/sd/gs/1K/B16_g3.parquet`` is no cell."""
    return [str(cell) for cell in map(cell_under_results, targets) if cell is not None]


# ---------------------------------------------------------------------------------------------------- unreadable
# A cell file cut short (a full disk, a killed copy or sync; the cell rule itself writes atomically), damaged (a
# flipped bit) or that lies (edited by hand, copied to another cell's path) would stop every table that reads it, or
# worse be published; Snakemake would delete the previous table when that job fails. So when Snakemake is about to
# run jobs, before it plans them, each existing cell file is checked as every reader checks it
# (budgetdraft.evaluation.cellfile.problem: a whole parquet file, the digest written with it, page checksums, its
# invariants, its rows the cell its path names), and so is whatever else sits at a cell path (a directory, a FIFO, a
# file the user cannot read). One that fails is moved aside (FILE.unreadable, never deleted) and named with the
# reason, so the cell is measured again like a missing one; a dry run or --touch only names it, and a command that
# runs no job (--summary, --report, -D, --filegraph, ...) never gets here.


def aside_name(path: Path) -> Path:
    """FILE.unreadable, or FILE.unreadable.N when an earlier one is kept there."""
    aside, n = path.with_name(f"{path.name}.unreadable"), 1
    while aside.exists():
        aside, n = path.with_name(f"{path.name}.unreadable.{n}"), n + 1
    return aside


def cell_under_results(path) -> Path | None:
    """``path`` as a cell file's path under results/cells/ (LABEL[/rR]/DATASET/CONTEXT/B_g.parquet), its folder
    resolved ('..' and symbolic links followed; the file itself is not, so a link is what a step moves), or None when
    it resolves elsewhere or names no cell."""
    path = Path(path)
    root = Path(cellfile.CELLS).resolve()
    where = path.parent.resolve() / path.name
    if not where.is_relative_to(root):
        return None
    inside = where.relative_to(root)
    return Path(cellfile.CELLS) / inside if cellfile.path_key(inside) else None


def thing_problem(path: Path) -> str | None:
    """Why what is at a cell path cannot be used as that cell (None: nothing is there, or a whole cell): not a
    regular file (a directory, a FIFO, which a reader would wait on for ever: never opened), a file the user cannot
    read, or one a reader refuses (`cellfile.problem`)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    if not stat.S_ISREG(mode):
        kind = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
        return f"{kind.get(stat.S_IFMT(mode), 'a device')}, not a cell file"
    try:
        return cellfile.problem(path)
    except OSError as e:
        return f"cannot be read: {e.strerror}"


def set_aside_unreadable(paths, dry_run: bool) -> list[str]:
    """Move everything at a cell path of ``paths`` that a reader could not use (`thing_problem`) aside
    (FILE.unreadable, never deleted), so that its cell is measured again; with ``dry_run`` move nothing. Only a path
    that resolves inside results/cells/ is looked at (`cell_under_results`). One line per such path, saying what was
    done (or what a run would do)."""
    lines = []
    for path in dict.fromkeys(filter(None, map(cell_under_results, paths))):
        if (problem := thing_problem(path)) is None:
            continue
        aside = aside_name(path)
        if dry_run:
            lines.append(
                f"unreadable cell file {path} ({problem}): a run will move it to {aside} "
                "and measure the cell again (this dry run plans as if it were whole)"
            )
            continue
        try:
            os.replace(path, aside)
        except OSError as e:
            raise ValueError(
                f"unreadable cell file {path} ({problem}) cannot be moved to {aside} ({e.strerror}): move or "
                "remove it, and the cell is measured again"
            ) from None
        lines.append(f"unreadable cell file {path} ({problem}): moved to {aside}, measuring the cell again")
    return lines


# ---------------------------------------------------------------------------------------------------- stale settings
# A settings file (rule settings: results/settings/NAME.json) decides a table's column titles and each variant's λ;
# the run record (rule run_record: results/report/run.json) the report's configuration page. Their rules have no
# input, so Snakemake writes one again only when its params (the plan's JSON) change: a file edited by hand would be
# read by the next job that reads it and published. So when Snakemake is about to run jobs, before it plans
# them, each existing one is compared with the JSON the plan writes there; one that differs is removed, named with
# its first difference, so rule settings writes it again and every artifact that reads it is built again.


def drop_stale_settings(planned: dict[str, str], dry_run: bool) -> list[str]:
    """Remove every existing file of ``planned`` ({path: the JSON the plan writes there}) whose JSON is not that
    (`jsonio.first_difference`); with ``dry_run`` remove nothing. One line per such file, naming the difference and
    what was done (or what a run would do)."""
    lines = []
    for path, text in planned.items():
        try:
            found = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            difference = f"not readable: {getattr(e, 'strerror', None) or e}"
        else:
            try:
                difference = first_difference(json.loads(found), json.loads(text))
            except json.JSONDecodeError:
                difference = "not JSON"
        if difference is None:
            continue
        said = f"{path} is not what the config plans ({difference})"
        if dry_run:
            lines.append(f"{said}: a run will write it again and rebuild what reads it (this dry run plans as it is)")
            continue
        os.remove(path)
        lines.append(f"{said}: removed, writing it again and rebuilding what reads it")
    return lines
