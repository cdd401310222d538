"""The positional profile's files (`budgetdraft.evaluation.profile` writes them, the claims read them): their columns,
sealed (`budgetdraft.evaluation.sealed`) and their rows checked on every read, so that an edited or damaged one is
refused by every reader, named, and set aside and measured again by the workflow. Only numpy, pandas and pyarrow:
the workflow imports this module at plan time.

- ``results/positions/verifier.parquet`` (``TARGET_COLUMNS``): the verifier's greedy next token at every position of
  every longest prompt;
- ``results/positions/rR.parquet`` (``COLUMNS``): one row per (drafter, prompt, bucket): ``agreed`` of ``total``
  positions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from budgetdraft.evaluation.sealed import Damaged, read_sealed, write_sealed

COLUMNS = ["label", "replicate", "dataset", "sample", "bucket_start", "bucket_end", "agreed", "total"]
TARGET_COLUMNS = ["dataset", "sample", "next_ids"]
TARGETS_NAME = "verifier.parquet"  # the workflow's file of the verifier's targets (results/positions/)


class BadProfile(Damaged):
    fix = "the workflow sets it aside and measures it again (budgetdraft positions)"


def check_rows(table: pa.Table, path, columns=COLUMNS) -> None:
    """A profile file's rows hold what `budgetdraft positions` writes: its columns, and for each bucket
    0 <= agreed <= total and 0 <= bucket_start < bucket_end (a hand edit that keeps the seal cannot publish an
    agreement past 0-100 %)."""
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise BadProfile(path, f"no column(s) {missing}: written by another version of `budgetdraft positions`")
    if columns is not COLUMNS:
        return
    agreed, total = (np.asarray(table[c].to_numpy(zero_copy_only=False)) for c in ("agreed", "total"))
    start, end = (np.asarray(table[c].to_numpy(zero_copy_only=False)) for c in ("bucket_start", "bucket_end"))
    for what, bad in (
        ("agreed < 0", agreed < 0),
        ("agreed > total", agreed > total),
        ("bucket_start < 0", start < 0),
        ("bucket_end <= bucket_start", end <= start),
    ):
        if bad.any():
            raise BadProfile(path, f"row {int(np.argmax(bad))}: {what}")


def save_rows(rows: pd.DataFrame, out: str | Path, columns=COLUMNS) -> None:
    """Write profile rows (or, ``columns`` = ``TARGET_COLUMNS``, the verifier's targets) sealed
    (`budgetdraft.evaluation.sealed`), checked first."""
    table = pa.Table.from_pandas(rows, preserve_index=False)
    check_rows(table, out, columns)
    write_sealed(table, out)


def read_rows(path: str | Path, columns=COLUMNS) -> pd.DataFrame:
    """A profile file's rows (``columns``: what it holds), its seal and its rows checked; a `BadProfile` names it."""
    table = read_sealed(path, BadProfile, "profile file")
    check_rows(table, path, columns)
    return table.to_pandas()


def problem(path: str | Path) -> str | None:
    """Why an existing profile file (rows or, results/positions/verifier.parquet, targets) cannot be used, or None."""
    columns = TARGET_COLUMNS if Path(path).name == TARGETS_NAME else COLUMNS
    try:
        read_rows(path, columns)
    except BadProfile as e:
        return e.reason
    return None
