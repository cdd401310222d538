"""Tables and figures of the paper, aggregated from measured grid cells (never re-measured, never typed).

`python -m budgetdraft paper --artifact NAME --out PATH --settings JSON --cells FILE [FILE ...]`

Cells are loaded into a `budgetdraft.grid.Grid` (which also checks that decoding was lossless: every row's
`output_ids` equals the AR output of its dataset, context and sample); `budgetdraft.tables` lays out the tables,
`budgetdraft.figures` draws the figures. Every number written to a table is recorded with the cells it comes from;
`trace()` re-derives a table from the cells and maps each number in the written file to its source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from budgetdraft.atomic import atomic_write_text
from budgetdraft.grid import Grid, Settings, load_cells, parse_settings, settings_dict
from budgetdraft.names import ARTIFACTS, TABLES
from budgetdraft.tables import TABLE_BUILDERS, add_to_caption, evidence_text, timing_text


def build(artifact: str, cells, settings, out) -> list[Path]:
    """Build one artifact from cell files (paths) or a loaded DataFrame / Grid; return the files written."""
    if artifact not in ARTIFACTS:
        raise ValueError(f"unknown artifact {artifact!r}; choose from {sorted(ARTIFACTS)}")
    s = settings if isinstance(settings, Settings) else parse_settings(settings)
    grid = cells if isinstance(cells, Grid) else Grid(
        cells if isinstance(cells, pd.DataFrame) else load_cells(cells), lossless=s.raw.get("lossless_check", "error"))
    out = Path(out)
    if artifact in TABLE_BUILDERS:
        table = TABLE_BUILDERS[artifact](grid, s)
        add_to_caption(table, evidence_text(grid) + timing_text(s))
        atomic_write_text(out, "\n".join(table.lines) + "\n")
        if not isinstance(cells, (Grid, pd.DataFrame)) and not isinstance(settings, Settings):  # provenance: which cells and settings made the table
            sources = {"settings": settings_dict(settings), "cells": [str(c) for c in cells]}
            atomic_write_text(sources_path(out), json.dumps(sources, indent=1) + "\n")
            return [out, sources_path(out)]
        return [out]
    from budgetdraft import figures
    return figures.FIGURE_BUILDERS[artifact](grid, s, out)


NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")


def trace(table_path, cells, settings) -> list[tuple[str, str]]:
    """Re-derive the table at `table_path` from `cells` and map each decimal number in it to its source cells.

    Raises ValueError if a number in the file is not one the cells give (e.g. typed in or stale)."""
    text = Path(table_path).read_text()
    label = re.search(r"\\label\{([^}]*)\}", text)
    artifact = {v: k for k, v in TABLES.items()}.get(label.group(1) if label else None)
    if artifact is None:
        raise ValueError(f"{table_path}: no known table \\label")
    s = settings if isinstance(settings, Settings) else parse_settings(settings)
    grid = cells if isinstance(cells, Grid) else Grid(load_cells(cells), lossless=s.raw.get("lossless_check", "error"))
    table = TABLE_BUILDERS[artifact](grid, s)
    expected = [(v, src) for v, src in table.sources if v != "--"]  # in order of appearance
    bodies = re.findall(r"\\begin\{tabular\}.*?\\end\{tabular\}", text, flags=re.S)
    data_lines = [line for body in bodies for line in body.splitlines()
                  if "&" in line and "\\mathcal" not in line and "\\multicolumn" not in line]  # not headers
    found = [n for line in data_lines for n in NUMBER.findall(line)]
    if len(found) != len(expected):
        raise ValueError(f"{table_path}: has {len(found)} numbers, the cells give {len(expected)}")
    wrong = [(n, v, src) for n, (v, src) in zip(found, expected) if n != v]
    if wrong:
        raise ValueError(f"{table_path}: numbers not derived from the cells (found, derived, source): {wrong[:5]}")
    return expected


def sources_path(table_path) -> Path:
    table_path = Path(table_path)
    return table_path.with_name(table_path.stem + ".sources.json")


def trace_file(table_path) -> list[tuple[str, str]]:
    """``trace`` a generated table against the cells and settings recorded next to it by ``build``."""
    recorded = sources_path(table_path)
    if not recorded.is_file():
        raise ValueError(f"{table_path}: no provenance file {recorded}")
    sources = json.loads(recorded.read_text())
    return trace(table_path, sources["cells"], sources["settings"])


# ------------------------------------------------------------------------------------------------- CLI


def configure_parser(parser) -> None:
    parser.add_argument("--artifact", required=True, choices=sorted(ARTIFACTS),
                        help="which table/figure: " + ", ".join(f"{k} ({v})" for k, v in ARTIFACTS.items()))
    parser.add_argument("--out", required=True, type=Path,
                        help="output .tex (tables) or .pdf (figures; a .png with the same stem is written too)")
    parser.add_argument("--settings", required=True,
                        help="JSON object (or a JSON file): datasets, contexts, budgets, gamma_fixed, collapse, "
                             "comparison, single_budget; optional gammas {context: [gamma, ...]}")
    parser.add_argument("--cells", required=True, nargs="+", help="cell parquet files the artifact reads")


def run(args) -> None:
    for path in build(args.artifact, args.cells, args.settings, args.out):
        print(path)
