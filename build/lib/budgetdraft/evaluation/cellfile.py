"""A cell file proves its integrity and its identity: what `budgetdraft.evaluation.cells` writes and everything that reads one
(`budgetdraft.evaluation.grid.read_cell`, the workflow's plan-time check of an existing cell) go through here.

Integrity: the file is sealed when written (`budgetdraft.evaluation.sealed`: a sha256 digest of its rows in the
parquet footer, a CRC on every data page), and a file whose bytes changed after it was written (a flipped bit, a
hand edit, a half-finished copy) no longer gives its digest, or no longer parses, and is refused. Identity: its rows
hold one cell, the one its path names (results/cells/LABEL[/rR]/DATASET/CONTEXT/B{B}_g{γ}.parquet, `cell_parts`).
Invariants: counts are non-negative, `accepted` ≤ `drafted` and `accepted` < `new_tokens` (`check_rows`),
`new_tokens` ≥ 1, times are non-negative, and the derived columns (`REDUNDANT`) are what their inputs give. Its
record (the `config` column: `budgetdraft.evaluation.cellspec.CellSpec.record`) is one for all its rows, of a version
this code reads, and names the cell its rows are (`check_record`). Every reader verifies all of it (`read_checked`):
a file without a digest is refused. The workflow's plan-time check (`problem`) also compares the record with the
spec the plan measures at the file's path (`budgetdraft.evaluation.cellspec.record_difference`): a cell copied in
from another checkout, of another budget, drafter or number of new tokens, is measured again.

Every refusal is a `BadCell` (a ValueError) naming the file and the reason in one line; a write that fails (a full
disk) is a ValueError naming the file, with nothing left behind (`write_cell`). Only the standard library, numpy,
pandas and pyarrow (and `cellspec`, which needs no more): the workflow imports this module at plan time.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from budgetdraft.base.jsonio import first_difference
from budgetdraft.base.names import SHARED
from budgetdraft.evaluation.cellspec import CellSpec, UnknownRecord, read_record, record_difference
from budgetdraft.evaluation.sealed import Damaged, read_sealed, write_sealed

FIX = "delete it and re-run to re-measure it"  # the workflow sets such a file aside by itself (docs/pipeline.md)

# The one home of a cell file's path, ROOT/LABEL[/rR]/DATASET/CONTEXT/B{B}_g{γ}.parquet: formatted here (`cell_path`,
# `cell_parts`; `cell_pattern`: the workflow's eval rules' patterns, tests/test_plan.py holds them to it) and parsed
# here (`path_key`, `CELL_NAME`), from these segments. The segment `r{replicate}` is there only for a cell of one
# training replicate (replicate >= 0; a shared cell's replicate is SHARED).
CELLS = "results/cells"  # where the workflow keeps them
SEGMENTS = ("{label}", "r{replicate}", "{dataset}", "{context}", "B{budget}_g{gamma}.{ext}")
NUMBER = r"\d+"  # a replicate, B and γ in a path (the eval rules' wildcard constraints)


def _parser(segment: str, ext: str = "parquet") -> re.Pattern:
    """A regex of one numbered segment, its numbers (replicate, budget, gamma) as groups in order."""
    text = re.escape(segment.replace("{ext}", ext))
    for field in ("replicate", "budget", "gamma"):
        text = text.replace(re.escape("{" + field + "}"), f"({NUMBER})")
    return re.compile(text)


CELL_NAME, REPLICATE_DIR = _parser(SEGMENTS[-1]), _parser(SEGMENTS[1])

COUNTS = ("sample", "repeat", "prompt_tokens", "drafted", "accepted", "verifier_forwards", "draft_steps")
TIMES = ("verifier_prefill_s", "drafter_prefill_s", "decode_s", "total_s", "draft_s", "verify_s")
NON_NEGATIVE = (  # besides COUNTS and TIMES; NaN allowed (a measure a device or method does not give)
    "tok_per_s",
    "acceptance",
    "tau",
    "peak_mem_mb",
    "peak_tensor_mb",
    "drafter_kv_mb",
    "verifier_kv_mb",
    "bandwidth_gbs",
    "step_bytes",
    "bound_fraction",
    "budget",
    "gamma",
)
REDUNDANT = {  # a column the decoder derives from others: (its inputs, how)
    "acceptance": (("accepted", "drafted"), lambda a, d: np.where(d > 0, a / np.where(d > 0, d, 1), np.nan)),
    "tok_per_s": (("new_tokens", "total_s"), lambda n, t: np.where(t > 0, n / np.where(t > 0, t, 1), np.nan)),
}


class BadCell(Damaged):
    """A cell file that is not what it must be: ``str()`` is one line, ``PATH: REASON: delete it and re-run``."""

    fix = FIX


def write_cell(frame: pd.DataFrame, out: str | Path) -> None:
    """Write a cell's rows to ``out`` atomically, sealed (`budgetdraft.evaluation.sealed.write_sealed`); rows that
    break a cell's invariants, that are not the cell ``out`` names, or whose record a reader refuses
    (`check_record`), are refused before anything is written."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    check_rows(table, out)
    check_identity(table, out)
    check_record(table, out)
    write_sealed(table, out)


def read_table(path: str | Path) -> pa.Table:
    """A cell file's whole table, its seal checked (`budgetdraft.evaluation.sealed.read_sealed`): a file cut short, or
    without a digest (written before cells were sealed, or by hand), is refused."""
    return read_sealed(path, BadCell, "cell file")


# ---------------------------------------------------------------------------------------------------- contents


def _numbers(table: pa.Table, column: str) -> np.ndarray:
    """A column as floats (NaN for a null; NaN everywhere for a column that holds no numbers)."""
    values = table.column(column)
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type) or pa.types.is_boolean(values.type)):
        return np.full(len(values), np.nan)
    return np.asarray(values.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False), dtype=float)


def check_rows(table: pa.Table, path) -> None:
    """Refuse rows that no decoder writes: no rows, a count that is negative or no number, a negative time,
    `accepted` beyond `drafted` or not below `new_tokens`, `new_tokens` below 1, a replicate
    below `SHARED`, or a derived column (`REDUNDANT`) that is not what its inputs give (edited by hand, mixed from
    two runs, or damaged)."""
    if table.num_rows == 0:
        raise BadCell(path, "cell file has no rows")
    names = set(table.column_names)
    v = {c: _numbers(table, c) for c in (*COUNTS, *TIMES, *NON_NEGATIVE, "new_tokens", "replicate") if c in names}

    def refuse(column, bad, what):
        i = int(np.flatnonzero(bad)[0])
        raise BadCell(path, f"row {i}: {column} = {table.column(column)[i].as_py()!r} {what}")

    for column, x in v.items():
        number = np.isfinite(x) | (np.isnan(x) & (column not in COUNTS))
        if not number.all():
            refuse(column, ~number, "is not a finite number")
        if (x < 0).any() and column != "replicate":
            refuse(column, x < 0, "is negative")
    for column, least in (("new_tokens", 1), ("replicate", SHARED)):
        if column in v and not (v[column] >= least).all():
            refuse(column, ~(v[column] >= least), f"is below {least}")
    # an accepted draft was drafted, and is emitted (cells decode without EOS) after the first new token, which is
    # the prefill's: accepted <= drafted and accepted < new_tokens
    for bound, sign, over in (("drafted", ">", np.greater), ("new_tokens", ">=", np.greater_equal)):
        if "accepted" in v and bound in v and (bad := over(v["accepted"], v[bound])).any():
            i = int(np.flatnonzero(bad)[0])
            accepted, most = (table.column(c)[i].as_py() for c in ("accepted", bound))
            raise BadCell(path, f"row {i}: accepted {accepted} {sign} {bound} {most}")
    for column, (inputs, derive) in REDUNDANT.items():
        if column not in names or not all(c in names for c in inputs):
            continue
        expected = derive(*(_numbers(table, c) for c in inputs))
        got = _numbers(table, column)
        bad = ~np.isclose(got, expected, rtol=1e-6, atol=1e-9, equal_nan=True)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise BadCell(
                path,
                f"row {i}: {column} = {got[i]:.6g} but {' / '.join(inputs)} give {expected[i]:.6g}: the cell "
                "contradicts itself (edited by hand?)",
            )


IDENTITY = ("label", "dataset", "context", "budget", "gamma", "replicate")


def cell_parts(label, dataset, context, budget, gamma, replicate=SHARED) -> tuple[str, ...]:
    """The trailing path segments of a cell's file under results/cells/ (`SEGMENTS`)."""
    replicate = int(replicate)
    values = dict(label=label, replicate=replicate, dataset=dataset, context=context, ext="parquet")
    values.update(budget=int(budget), gamma=int(gamma))
    return tuple(s.format(**values) for s in SEGMENTS if replicate != SHARED or "{replicate}" not in s)


def cell_path(label, dataset, context, budget, gamma, replicate=SHARED, root: str = CELLS) -> str:
    """A cell's file: ROOT/LABEL[/rR]/DATASET/CONTEXT/B{B}_g{γ}.parquet (`cell_parts`), as the workflow names it."""
    return "/".join((root, *cell_parts(label, dataset, context, budget, gamma, replicate)))


def cell_pattern(replicated: bool, root: str = CELLS, ext: str = "parquet") -> str:
    """Every cell's file as a Snakemake pattern (wildcards label, replicate when ``replicated``, dataset, context,
    budget, gamma): the eval rules' output, and with another ``root`` and ``ext`` their log and benchmark (their
    constraints: budgetdraft.pipeline.plan.CellPlan.cell_wildcards)."""
    parts = (s for s in SEGMENTS if replicated or "{replicate}" not in s)
    return "/".join((root, *parts)).replace("{ext}", ext)


def check_identity(table: pa.Table, path) -> None:
    """Refuse rows of more than one cell, and rows of another cell than the one the file's path names when the
    file is named like a cell (B{B}_g{γ}.parquet: its path ends LABEL[/rR]/DATASET/CONTEXT/B{B}_g{γ}.parquet)."""
    row, names = {}, set(table.column_names)
    for column in IDENTITY:
        if column in names:
            values = pc.unique(table.column(column)).to_pylist()
            if len(values) > 1:
                raise BadCell(path, f"its rows hold more than one cell ({column} {values[0]!r} and {values[1]!r})")
            row[column] = values[0] if values else None
    if table.num_rows == 0 or not CELL_NAME.fullmatch(Path(path).name):
        return
    try:
        parts = cell_parts(*(row.get(c, SHARED) for c in IDENTITY))
    except (TypeError, ValueError):
        raise BadCell(path, f"its rows name no cell ({row})") from None
    if Path(path).parts[-len(parts) :] != parts:
        named = path_key(path)
        differ = [c for c in IDENTITY if str(named.get(c)) != str(row.get(c, SHARED))] or list(row)
        said = ", ".join(f"{c} {row.get(c, SHARED)!r}" for c in differ)
        raise BadCell(
            path, f"its rows are another cell ({said}: {'/'.join(parts)}) than its path names ({path_text(named)})"
        )


def path_key(path) -> dict:
    """The cell a path names, read from its last segments (LABEL[/rR]/DATASET/CONTEXT/B{B}_g{γ}.parquet)."""
    parts = Path(path).parts
    match = CELL_NAME.fullmatch(parts[-1]) if parts else None
    if match is None or len(parts) < 4:
        return {}
    key = {"dataset": parts[-3], "context": parts[-2], "budget": int(match[1]), "gamma": int(match[2])}
    replicate = REPLICATE_DIR.fullmatch(parts[-4])
    if replicate and len(parts) >= 5:
        return {"label": parts[-5], **key, "replicate": int(replicate[1])}
    return {"label": parts[-4], **key, "replicate": SHARED}


def path_text(key: dict) -> str:
    return ", ".join(f"{c} {key[c]!r}" for c in IDENTITY if c in key)


RECORD = "config"  # the column holding a cell's record (CellSpec.record), the same in every row


def check_record(table: pa.Table, path, planned: CellSpec | None = None) -> dict:
    """A cell file's record as {field: value} (`read_record`: any version written so far; {} for a file without
    one, which no eval-cell wrote: it has recorded its flags since its first version), refused when its rows hold
    more than one, when it is not text, of a version this code does not know or no JSON object, when it is not the
    cell ``planned`` (`record_difference`; None: not compared), or when an identity field it holds (label, dataset,
    context, B, γ, replicate) is not its rows' (that is, its path's)."""
    if RECORD not in table.column_names:
        return {}
    texts = pc.unique(table.column(RECORD)).to_pylist()
    if len(texts) > 1:
        raise BadCell(path, f"its rows hold more than one record ({RECORD} {texts[0]!r:.80} and {texts[1]!r:.80})")
    text = texts[0] if texts else ""
    if text is not None and not isinstance(text, str):
        raise BadCell(path, f"its record ({RECORD}) is {type(text).__name__} {text!r:.80}, not text")
    try:
        record = read_record(text or "")
    except UnknownRecord as e:
        raise BadCell(path, f"its record ({RECORD}) {e.reason}") from None
    if planned is not None and (difference := record_difference(record, planned)) is not None:
        raise BadCell(path, difference)
    names = set(table.column_names)
    cell = {**path_key(path), **{c: table.column(c)[0].as_py() for c in IDENTITY if c in names}}
    cell.setdefault("replicate", SHARED)
    for column in IDENTITY:
        if column in record and column in cell and first_difference(record[column], cell[column]) is not None:
            found, rows = f"{column} {record[column]!r}", f"{column} {cell[column]!r}"
            raise BadCell(path, f"its record ({RECORD}) is another cell ({found}) than its rows ({rows})")
    return record


def read_checked(path: str | Path, planned: CellSpec | None = None) -> pa.Table:
    """A cell file's table once it has proven its integrity (`read_table`), its invariants (`check_rows`), its
    identity (`check_identity`) and that its record is one this code reads, of that cell (`check_record`): what
    every reader of a cell reads (the tables', the claims', the workflow's), so none uses a file that the others
    would refuse; the workflow also gives the cell it plans there (``planned``). Any failure is a `BadCell` naming
    the file."""
    table = read_table(path)
    check_rows(table, path)
    check_identity(table, path)
    check_record(table, path, planned)
    return table


def read_frame(path: str | Path, columns=None) -> pd.DataFrame:
    """A cell file's rows (all its columns, or those of ``columns``), checked (`read_checked`)."""
    table = read_checked(path)
    try:
        return (table if columns is None else table.select(list(columns))).to_pandas()
    except Exception as e:
        raise BadCell(path, f"its rows do not decode ({type(e).__name__}: {str(e)[:200]})") from None


def problem(path: str | Path, planned: CellSpec | None = None) -> str | None:
    """Why an existing cell file cannot be used, or None when it can: the workflow's plan-time check (and its
    set_aside job's), which sets such a file aside to measure the cell again. A cell is used when it passes every
    reader's check (`read_checked`) and its record is the cell ``planned``, the spec the plan measures at its path
    (`record_difference`: every field that defines the measurement; None: the checks alone)."""
    try:
        read_checked(path, planned)
    except BadCell as e:
        return e.reason
    return None
