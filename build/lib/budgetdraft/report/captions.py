"""What every table's caption says beside its numbers, from the cells it was built from: how many prompts, runs and
drafted tokens stand behind each entry (`evidence_text`), the training replicates pooled (`replicate_text`), the
decode engine (`engine_text`), how times were taken (`timing_text`) and where the cells came from
(`provenance_text`); `budgetdraft.report.paper` adds them to the tables of `budgetdraft.report.tables`, and the claims
report shows some of them too.
"""

from __future__ import annotations

import numpy as np

from budgetdraft.base.methods import AR
from budgetdraft.base.names import METHOD_NAMES, SHARED, SHARED_DRAFTER_PREFILL
from budgetdraft.evaluation.cellspec import read_record
from budgetdraft.evaluation.grid import Grid
from budgetdraft.report.settings import Settings
from budgetdraft.report.tables import Table, latex_text, names_text


def span(values) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}--{high:,}"


def evidence_text(grid: Grid) -> str:
    """How much stands behind each entry: prompts and timed runs per cell, drafted tokens per speculative cell, and
    the training replicates it pools with their spread."""
    cells = [rows for key, rows in grid.rows.items() if key[0] != AR]
    if not cells:
        return ""
    drafted = sorted(int(rows["drafted"].sum()) for rows in cells)
    return (
        f" Behind each entry: {span([rows['sample'].nunique() for rows in cells])} prompt(s) $\\times$ "
        f"{span([rows['repeat'].nunique() for rows in cells])} timed run(s); drafted tokens per speculative cell "
        f"{span(drafted)} (median {int(np.median(drafted)):,})." + replicate_text(grid)
    )


def replicate_text(grid: Grid) -> str:
    """What the training replicates add to a caption: how many each trained entry pools (its value is their pooled
    mean), and how far one replicate's acceptance strays: the median and largest standard deviation over them."""
    keys = [k for k in grid.rows if k[0] != AR and len(grid.replicates(k)) > 1]
    if not keys:
        return " Trained drafters: one training run each."
    sd = np.array([np.nanstd(grid.replicate_acceptance(k).to_numpy(dtype=float), ddof=1) for k in keys])
    once = sorted({METHOD_NAMES.get(k[0], k[0]) for k in grid.rows if k[0] != AR and grid.replicates(k) == [SHARED]})
    return (
        f" Entries of trained drafters pool {span([len(grid.replicates(k)) for k in keys])} training replicates; "
        f"their acceptance varies across replicates by a standard deviation of {np.nanmedian(sd):.1f} pp (median "
        f"over entries; largest {np.nanmax(sd):.1f} pp)."
        + (f" Trained once or not at all: {names_text(once)}." if once else "")
    )


def engine_text(grid: Grid) -> str:
    """Which decode engine (``budgetdraft.decoding.engine``) and device measured the cells: every speedup is a ratio on it."""
    df = grid.df
    if "engine" not in df or df["engine"].isna().all():
        return " Decode engine not recorded in these cells."
    engines = ", ".join(sorted(df["engine"].dropna().astype(str).unique()))
    devices = ", ".join(sorted(df["device"].dropna().astype(str).unique())) if "device" in df else "?"
    return (
        f" Decoded on the {engines} engine ({devices}); every speedup is a ratio of times on it."
        + shared_drafter_text(df)
    )


def shared_drafter_text(df) -> str:
    """Whether drafters' full prefills were made once for all their cells (``evaluation.cells.prefill_once``): the
    rows that cut one record it in their ``config``."""
    if "config" not in df or not any(read_record(c).get(SHARED_DRAFTER_PREFILL) for c in df["config"].unique()):
        return ""
    return (
        " Each drafter's full prefill of a prompt was timed once (one run) and cut to every budget of its cells, each"
        " charged its recorded seconds."
    )


def timing_text(settings: Settings) -> str:
    """What the times include when the verifier's prefills were shared (``budgetdraft.evaluation.prefill``)."""
    runs = int(settings.verifier_prefill_runs)
    if not runs:
        return ""
    return (
        f" Times include the verifier's prefill, computed once per prompt (median of {runs} timed runs) and"
        " charged to every method that decodes the prompt."
    )


def provenance_text(settings: Settings) -> str:
    """Which drafters were given as checkpoints (one external draw each, not trained here) and which were left out
    ("--" in the table), with why."""
    given = [label for label, v in settings.variants.items() if v.checkpoint and label not in settings.not_run]
    text = ""
    if given:
        text += (
            f" Given as checkpoints, not trained here (one external draw each, no training replicate): "
            f"{names_text(latex_text(g) for g in given)}."
        )
    if settings.not_run:
        text += " Not run (--): " + "; ".join(f"{latex_text(v)}: {latex_text(w)}" for v, w in settings.not_run.items())
        text += "."
    return text


def add_to_caption(table: Table, text: str) -> None:
    """Append ``text`` inside the table's ``\\caption{...}``."""
    i = next(i for i, line in enumerate(table.lines) if line.startswith(r"\caption{"))
    table.lines[i] = table.lines[i][:-1] + text + "}"
