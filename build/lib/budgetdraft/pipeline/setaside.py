"""A file the workflow made that can no longer be used is set aside (never deleted) and made again, by a job, under
Snakemake's lock: a grid cell, a positional profile or a shared verifier prefill that is cut short, damaged or
edited (each is sealed: budgetdraft.evaluation.sealed), a grid cell whose record is not the cell the plan measures
at its path (copied in from another checkout or config: budgetdraft.evaluation.cellfile.problem), and a settings
file or the run record that is not what the plan writes there (edited by hand). Unchecked, such a file would stop
every job that reads it, or be published.

How, with Snakemake's own means (no step before its lock, no patch of its internals):

- **When Snakemake plans** (`guard`, called by the input function of the rule that makes the file): the file is
  checked, read only. A file with a problem gets a new *marker* as an extra input of its rule,
  ``results/setaside/PATH.N`` (N: the damaged file's modification time in ns, `damage_id`), and the line saying so is
  printed. The rule's job then has an input it did not have: Snakemake plans it again, after the marker's job.
- **When it runs** (rule set_aside, `set_aside`): the marker's job, like every job, runs under Snakemake's lock, so
  a second `snakemake` in the same folder changes nothing of a running one's (Snakemake refuses it before any job).
  It checks the file again, moves it to FILE.unreadable (.N beside an earlier one; a settings file, made from the
  config alone, is removed) and writes the marker, which says what was done and why. The file's rule makes it again, and every job
  that reads it runs again.
- A marker stays: it is the file's input from then on, so nothing reruns twice, and ``results/setaside/`` keeps a
  record of every file set aside. A dry run (``-n``) plans the marker's job and prints the line, and moves nothing;
  so do touch (``-t``) and every command that runs no job (``--summary``, ``-D``, ``--report``, ...).

Snakemake decides that a job whose input list changed runs again from its record of that job (``.snakemake/
metadata``): where it has none (results/ copied without .snakemake/, or ``--drop-metadata``), a damaged file is
named when Snakemake plans, but not made again, and its readers refuse it, naming it: move it away yourself.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

from budgetdraft.base.jsonio import first_difference
from budgetdraft.evaluation import cellfile, profilefile, sealed

ROOT = "results"
MARKERS = f"{ROOT}/setaside"  # results/setaside/PATH.N: the record of each file set aside
MARKER = re.compile(r"\.(\d+)$")


# ---------------------------------------------------------------------------------------------------- what is wrong


def thing_problem(path: Path, check) -> str | None:
    """Why what is at ``path`` cannot be used (None: nothing is there, or a usable file): not a regular file (a
    directory, a FIFO, which a reader would wait on for ever: never opened), a file the user cannot read, or one
    ``check`` (a file's own reader check: a reason or None) refuses."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    if not stat.S_ISREG(mode):
        kind = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
        return f"{kind.get(stat.S_IFMT(mode), 'a device')}, not a file"
    try:
        return check(path)
    except OSError as e:
        return f"cannot be read: {e.strerror}"


def prefill_problem(path: Path) -> str | None:
    try:
        sealed.check_tensors(path)
    except sealed.Damaged as e:
        return e.reason
    return None


def stale_problem(planned: str):
    """A check of a file written from the plan alone: the JSON ``planned`` is what it must hold."""

    def check(path: Path) -> str | None:
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return "not JSON"
        difference = first_difference(found, json.loads(planned))
        return None if difference is None else f"not what the config plans: {difference}"

    return check


# what a file of each kind must be (its readers' check), and the name its set-aside copy takes
KINDS = {  # path prefix under results/ -> (what it is, its check, the set-aside suffix)
    "cells/": ("cell file", cellfile.problem, "unreadable"),
    "positions/": ("positional profile file", profilefile.problem, "unreadable"),
    "prefill/": ("verifier prefill file", prefill_problem, "unreadable"),
}


def kind_of(path: str, planned: dict[str, str], cells=None) -> tuple[str, object, str | None]:
    """(what it is, its check, the suffix of its set-aside copy, None: removed) of a file the workflow guards: a file
    written from the plan alone (``planned``: {path: JSON}) must hold that JSON, and a cell file must be the cell
    that ``cells`` (a cell file's path -> the CellSpec the plan measures there, or None: its checks alone) gives for
    its path, asked only of a file that is there."""
    if path in planned:  # made from the config alone: nothing to keep, removed (its marker names the difference)
        return "settings file", stale_problem(planned[path]), None
    inside = path.removeprefix(f"{ROOT}/")
    for prefix, (what, check, suffix) in KINDS.items():
        if inside.startswith(prefix):
            if prefix == "cells/" and cells is not None:
                return what, lambda p, check=check: check(p, cells(path)), suffix
            return what, check, suffix
    raise ValueError(f"{path}: not a file the workflow sets aside")


# ---------------------------------------------------------------------------------------------------- markers


def markers(path: str) -> list[int]:
    """The numbers N of the markers results/setaside/PATH.N of ``path``, oldest first (none: never set aside)."""
    folder = Path(MARKERS) / Path(path).relative_to(ROOT).parent
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    head = f"{Path(path).name}."
    return sorted(int(n[len(head) :]) for n in names if n.startswith(head) and n[len(head) :].isdigit())


def damage_id(path: Path) -> int:
    """The number of the marker a file with a problem gets: its modification time in ns. Another damage, or the same
    file touched (``snakemake -t`` records the marker as its input without making it), is another marker, so
    Snakemake sees a new input and plans the file again."""
    return os.lstat(path).st_mtime_ns


def marker_path(path: str, n: int) -> str:
    return f"{MARKERS}/{Path(path).relative_to(ROOT)}.{n}"


_said: set[str] = set()


def guard(path: str, planned: dict[str, str], say=None, cells=None) -> list[str]:
    """The marker input of the job that makes ``path`` (in its rule's input function): the latest marker of a file
    set aside before (its input ever since), a new one (`damage_id`) when the file has a problem now, else none.
    Reads only; a problem is said once per process (``say``: where, default stderr). ``planned`` and ``cells``: what
    the plan writes there (`kind_of`)."""
    what, check, suffix = kind_of(path, planned, cells)
    done = markers(path)
    problem = thing_problem(Path(path), check)
    if problem is None:
        return [marker_path(path, done[-1])] if done else []
    marker = marker_path(path, damage_id(Path(path)))
    if path not in _said:
        _said.add(path)
        where = f"moves it to {aside_name(Path(path), suffix)}" if suffix else "removes it"
        print(
            f"{what} {path} ({problem}): job set_aside {where} ({marker}), and it is made again", file=say or sys.stderr
        )
    return [marker]


def aside_name(path: Path, suffix: str) -> Path:
    """FILE.SUFFIX, or FILE.SUFFIX.N when an earlier one is kept there."""
    aside, n = path.with_name(f"{path.name}.{suffix}"), 1
    while os.path.lexists(aside):
        aside, n = path.with_name(f"{path.name}.{suffix}.{n}"), n + 1
    return aside


def guarded_path(marker: str) -> str:
    """The file a marker results/setaside/PATH.N is of: results/PATH."""
    inside = Path(marker).relative_to(MARKERS)
    return str(Path(ROOT) / MARKER.sub("", str(inside)))


def set_aside(marker: str, planned: dict[str, str], cells=None) -> str:
    """Rule set_aside's job: check the file of ``marker`` again, as `guard` did (``planned`` and ``cells`` the
    same), move it aside when it still has a problem (never delete it), and write the marker saying what was done;
    returns that line."""
    path = guarded_path(marker)
    what, check, suffix = kind_of(path, planned, cells)
    problem = thing_problem(Path(path), check)
    if problem is None:
        line = f"{what} {path}: found whole when this job ran; nothing moved"
    elif suffix is None:
        os.remove(path)
        line = f"{what} {path} ({problem}): removed, writing it again"
    else:
        aside = aside_name(Path(path), suffix)
        try:
            os.replace(path, aside)
        except OSError as e:
            raise ValueError(
                f"{what} {path} ({problem}) cannot be moved to {aside} ({e.strerror}): move or remove it, and it is "
                "made again"
            ) from None
        line = f"{what} {path} ({problem}): moved to {aside}, making it again"
    Path(marker).parent.mkdir(parents=True, exist_ok=True)
    Path(marker).write_text(line + "\n", encoding="utf-8")
    return line
