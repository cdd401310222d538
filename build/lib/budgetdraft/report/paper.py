"""Tables and figures of the paper, aggregated from measured grid cells (never re-measured, never typed).

`python -m budgetdraft paper --artifact NAME --out PATH --settings JSON --cells FILE [FILE ...]`

Cells are loaded into a `budgetdraft.evaluation.grid.Grid` (which also checks that decoding was lossless: every row's
`output_ids` equals the AR output of its dataset, context and sample); `budgetdraft.report.tables` lays out the tables,
`budgetdraft.report.figures` draws the figures. Every number written to a table is recorded with the cells it comes from;
`trace()` re-derives a table from the cells and maps each number in the written file to its source; every
artifact's provenance file records its cells and outputs by sha256 (and a figure's plotted values), which
`trace_file()` checks before re-deriving.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from budgetdraft.base.atomic import atomic_write_text, file_sha256
from budgetdraft.evaluation.grid import Grid, load_cells
from budgetdraft.report import figures
from budgetdraft.report.artifacts import REGISTRY, Artifact
from budgetdraft.report.captions import add_to_caption, engine_text, evidence_text, provenance_text, timing_text
from budgetdraft.report.settings import Settings, parse_settings, settings_dict
from budgetdraft.report.tables import laid_out

# every declared table, then every figure (budgetdraft.report.artifacts: each on its builder in tables / figures)
ARTIFACTS = dict(sorted(REGISTRY.items(), key=lambda item: item[1].kind != "table"))


def declared(key: str) -> Artifact:
    if key not in ARTIFACTS:
        raise ValueError(f"unknown artifact {key!r}; choose from {', '.join(ARTIFACTS)}")
    return ARTIFACTS[key]


def as_grid(cells, s: Settings) -> Grid:
    """A Grid of cell files (paths) or of a DataFrame, lossless-checked as settings say; a Grid as it is."""
    if isinstance(cells, Grid):
        return cells
    return Grid(cells if isinstance(cells, pd.DataFrame) else load_cells(cells), **s.lossless)


def build(artifact: str, cells, settings, out) -> list[Path]:
    """Build one artifact from cell files (paths) or a loaded DataFrame / Grid; return the files written.

    From cell files and plain settings it also writes the artifact's provenance (``sources_path``): the settings,
    the sha256 of every cell and of every file written, and for a figure the values it plots."""
    kind = declared(artifact).kind
    s = settings if isinstance(settings, Settings) else parse_settings(settings)
    grid = as_grid(cells, s)
    out = Path(out)
    if kind == "table":
        atomic_write_text(out, table_text(render_table(artifact, grid, s)))
        written, values = [out], None
    else:
        written, values = figures.draw(artifact, grid, s, out)
    if isinstance(cells, (Grid, pd.DataFrame)) or isinstance(settings, Settings):
        return written
    record = provenance(artifact, cells, settings, written, values, grid.divergences)
    atomic_write_text(sources_path(out), json.dumps(record, indent=1) + "\n")
    return written + [sources_path(out)]


def render_table(artifact: str, grid: Grid, s: Settings):
    """The table with its caption completed by what stands behind it (prompts, drafted tokens, timing)."""
    table = laid_out(artifact, grid, s)
    add_to_caption(table, evidence_text(grid) + engine_text(grid) + timing_text(s) + provenance_text(s))
    return table


def table_text(table) -> str:
    return "\n".join(table.lines) + "\n"


def provenance(artifact: str, cells, settings, written, values=None, divergences=()) -> dict:
    """What an artifact was made from, by content: cells and written files with their sha256, and every output
    that differs from AR's (allowed near-ties only: any other fails the build)."""
    record = {
        "artifact": artifact,
        "settings": settings_dict(settings),
        "cells": [{"path": str(c), "sha256": file_sha256(c)} for c in cells],
        "outputs": {Path(p).name: file_sha256(p) for p in written},
        "near_tie_divergences": list(divergences),
    }
    if values is not None:
        record["values"] = values
    return record


NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")


def trace(table_path, cells, settings) -> list[tuple[str, str]]:
    """Re-derive the table at `table_path` from `cells` and map each decimal number in it to its source cells.

    Raises ValueError if a number in the file is not one the cells give (e.g. typed in or stale), or if any other
    line (header, caption, evidence) differs from what the cells and settings give."""
    text = Path(table_path).read_text()
    label = re.search(r"\\label\{([^}]*)\}", text)
    tables = {a.label: key for key, a in ARTIFACTS.items() if a.kind == "table"}
    artifact = tables.get(label.group(1) if label else None)
    if artifact is None:
        raise ValueError(f"{table_path}: no known table \\label")
    s = settings if isinstance(settings, Settings) else parse_settings(settings)
    grid = as_grid(cells, s)
    table = render_table(artifact, grid, s)
    expected = [(v, src) for v, src in table.sources if v != "--"]  # in order of appearance
    bodies = re.findall(r"\\begin\{tabular\}.*?\\end\{tabular\}", text, flags=re.S)
    data_lines = [
        line
        for body in bodies
        for line in body.splitlines()
        if "&" in line and "\\mathcal" not in line and "\\multicolumn" not in line
    ]  # not headers
    found = [n for line in data_lines for n in NUMBER.findall(line)]
    if len(found) != len(expected):
        raise ValueError(f"{table_path}: has {len(found)} numbers, the cells give {len(expected)}")
    wrong = [(n, v, src) for n, (v, src) in zip(found, expected) if n != v]
    if wrong:
        raise ValueError(f"{table_path}: numbers not derived from the cells (found, derived, source): {wrong[:5]}")
    check_same_lines(table_path, text, table_text(table))
    return expected


def check_same_lines(path, text: str, derived: str) -> None:
    """Raise naming the first line of ``text`` that is not the ``derived`` one."""
    if text == derived:
        return
    have, want = text.splitlines(), derived.splitlines()
    i = next((i for i, (a, b) in enumerate(zip(have, want)) if a != b), min(len(have), len(want)))
    raise ValueError(
        f"{path}: line {i + 1} is not what the cells and settings give: "
        f"{have[i] if i < len(have) else '<end of file>'!r} vs {want[i] if i < len(want) else '<end>'!r}"
    )


def trace_figure(figure_path, artifact: str, cells, settings, recorded: dict) -> list[tuple[str, str]]:
    """Re-derive the values figure `artifact` (written to `figure_path`) plots from `cells`; they must equal the
    `recorded` ones."""
    s = settings if isinstance(settings, Settings) else parse_settings(settings)
    grid = as_grid(cells, s)
    derived = figures.plotted_values(artifact, grid, s)
    wrong = sorted(k for k in set(derived) | set(recorded) if canon(derived.get(k)) != canon(recorded.get(k)))
    if wrong:
        raise ValueError(f"{figure_path}: plotted values not derived from the cells, series {wrong[:5]}")
    return [(series, canon(v)) for series, v in derived.items()]


def canon(values) -> str:
    """JSON text of ``values`` with sorted keys: what two sets of plotted values are compared by (NaN == NaN)."""
    return json.dumps(values, sort_keys=True)


def sources_path(table_path) -> Path:
    table_path = Path(table_path)
    return table_path.with_name(table_path.stem + ".sources.json")


def trace_file(path) -> list[tuple[str, str]]:
    """``trace`` a generated table or figure against the cells and settings recorded next to it by ``build``.

    First checks by content that neither the cells nor the written files changed since the build."""
    recorded = sources_path(path)
    if not recorded.is_file():
        raise ValueError(f"{path}: no provenance file {recorded}")
    sources = json.loads(recorded.read_text())
    for cell in sources["cells"]:
        if not Path(cell["path"]).is_file():
            raise ValueError(f"{path}: its cell {cell['path']} no longer exists")
        if file_sha256(cell["path"]) != cell["sha256"]:
            raise ValueError(f"{path}: its cell {cell['path']} changed since the artifact was built (sha256 differs)")
    for name, digest in sources["outputs"].items():
        if file_sha256(Path(path).with_name(name)) != digest:
            raise ValueError(f"{Path(path).with_name(name)} changed since it was built (sha256 differs)")
    cells = [c["path"] for c in sources["cells"]]
    if "values" in sources:
        return trace_figure(path, sources["artifact"], cells, sources["settings"], sources["values"])
    return trace(path, cells, sources["settings"])


def drafter_sizes(drafters: dict) -> dict:
    """{label: parameter counts of its directories, as '42.5M' or '42.5M+135.0M'}."""
    from budgetdraft.decoding.loading import parameter_count, size_text

    return {label: "+".join(size_text(parameter_count(d)) for d in dirs) for label, dirs in drafters.items()}
