"""The numbers of a table laid out as the paper's: read from LaTeX (`read_tex_tables`: the paper's own tables once,
into `paper_values.csv`, and this run's `results/tables/*.tex`, built with the paper's layout), each with its table,
panel, row and column (`Value`). `budgetdraft.report.paperdiff` sets them side by side.
"""

from __future__ import annotations

import csv
import re
from dataclasses import asdict, dataclass
from pathlib import Path

VALUES = Path(__file__).with_name("paper_values.csv")
# the paper's tables by LaTeX label -> our artifact key (budgetdraft.report.artifacts)
TABLES = {
    "tab:best_speedup_and_accept_per_budget": "main",
    "tab:comparison": "comparison",
    "tab:ablation_lc": "ablation_lc",
    "tab:lambda_sensitivity_full": "lambda",
    "tab:single_budget_ablation": "single_budget",
    "tab:peak_vram_gamma_full": "vram_gamma",
    "tab:peak_vram": "vram",
}
NUMBER = r"-?\d+(?:\.\d+)?"


@dataclass(frozen=True)
class Value:
    """One number of a table: where it is (panel, row and column index, their labels) and what it is."""

    table: str  # artifact key
    panel: int  # the tabular's index in the table (Table 1 has two: best speedup, best acceptance)
    row: int  # data row index within the panel
    column: int  # data column index within the row (after the row's label columns)
    row_label: str  # e.g. "4K / 256", "16K / BudgetDraft (B=256)", "γ 5"
    column_label: str  # e.g. "GS / SD (sparse/full)"
    metric: str  # acceptance (%), speedup (×), tok_s, peak_gb
    value: float


def cell_text(cell: str) -> str:
    """A table cell without colour, bold and box wrappers, math times and spacing."""
    for wrapper in (r"\\textcolor\{[^}]*\}", r"\\colorbox\{[^}]*\}", r"\\textbf", r"\\mathbf"):
        cell = re.sub(wrapper, "", cell)
    cell = cell.replace(r"$\times$", "×").replace(r"\mathcal", "").replace(r"\,", " ").replace(r"\gamma", "γ")
    cell = cell.replace("{", "").replace("}", "").replace("$", "")
    return re.sub(r"\s+", " ", cell).strip()


def cell_values(text: str, single_metric: str) -> list[tuple[str, float]]:
    """The numbers of one cell: ``1.05×/10.19`` or ``2.63/78.43`` (speedup, acceptance), ``1.00×`` (speedup), a
    plain number (``single_metric``: AR's tok/s, a memory in GB); ``--`` or text: none."""
    pair = re.fullmatch(rf"({NUMBER})×?/({NUMBER})", text)
    if pair:
        return [("speedup", float(pair.group(1))), ("acceptance", float(pair.group(2)))]
    times = re.fullmatch(rf"({NUMBER})×", text)
    if times:
        return [("speedup", float(times.group(1)))]
    if re.fullmatch(NUMBER, text):
        return [(single_metric, float(text))]
    return []


def rows_of(tabular: str) -> list[list[str]]:
    """The rows of a tabular body as lists of plain cells, rules dropped."""
    rows = []
    for line in tabular.split(r"\\"):
        line = re.sub(r"\\(toprule|midrule|bottomrule|hline|cmidrule\([a-z]*\)\{[^}]*\})", "", line).strip()
        if line:
            rows.append([c.strip() for c in line.split("&")])
    return rows


# label columns at the start of each data row (the rest are values): context and budget, γ, method, setting
LEAD = {"main": 2, "ablation_lc": 2, "lambda": 2, "vram": 2, "vram_gamma": 1, "comparison": 1, "single_budget": 1}
MULTICOLUMN = re.compile(r"\\multicolumn\{(\d+)\}\{[^}]*\}\{(.*)\}$")


def table_values(key: str, tex: str) -> list[Value]:
    """Every number of table ``key`` (artifact key) in LaTeX ``tex`` (ours or the paper's: the same layout)."""
    single, lead = ("peak_gb" if key.startswith("vram") else "tok_s"), LEAD[key]
    # a CPU run's memory tables are in MB (`Grid.memory`): compared in the paper's GB
    per_gb = 1024.0 if re.search(r"Peak memory[^(]*\(MB\)", tex) else 1.0
    values = []
    for panel, body in enumerate(re.findall(r"\\begin\{tabular\}\{[^}]*\}(.*?)\\end\{tabular\}", tex, flags=re.S)):
        groups, names, section, row = [], [], "", 0
        for cells in rows_of(body):
            spans = [m for c in cells if (m := MULTICOLUMN.match(c))]
            if len(cells) == 1 and spans:  # a panel title, or a section header (Table 2: "8K context (LWM, ...)")
                if " context" in spans[0].group(2):
                    section = cell_text(spans[0].group(2)).split(" context")[0]
                continue
            if spans:  # a group header: & & \multicolumn{3}{c}{GS} & ...
                groups = [(int(m.group(1)), cell_text(m.group(2))) for m in spans]
                continue
            context = re.match(r"\\multirow\{\d+\}\{\*\}\{(.*)\}$", cells[0])
            section = cell_text(context.group(1)) if context else section
            labels, data = [cell_text(c) for c in cells[:lead]], [cell_text(c) for c in cells[lead:]]
            if not any(cell_values(t, single) for t in data):  # the row of column names
                names = data
                continue
            row_label = " / ".join(filter(None, [section, *labels[1:]] if context or lead == 2 else [section, *labels]))
            for column, text in enumerate(data):
                name = names[column] if column < len(names) else ""
                column_label = " / ".join(filter(None, [group_of(groups, column, len(data)), name]))
                for metric, number in cell_values(text, single):
                    number = number / per_gb if metric == "peak_gb" else number
                    values.append(Value(key, panel, row, column, row_label, column_label, metric, number))
            row += 1
    return values


def group_of(groups: list[tuple[int, str]], column: int, width: int) -> str:
    """The group header (a dataset, a context) over data column ``column`` of a row ``width`` data columns wide."""
    spanned = sum(n for n, _ in groups)
    offset = column - (width - spanned)  # the groups sit over the rightmost columns
    for n, name in groups:
        if 0 <= offset < n:
            return name
        offset -= n
    return ""


def read_tex_tables(tex: str) -> list[Value]:
    """Every number of every paper table in one LaTeX document (the paper's source, or our tables concatenated)."""
    values = []
    for env in re.findall(r"\\begin\{table\*?\}.*?\\end\{table\*?\}", tex, flags=re.S):
        label = re.search(r"\\label\{(tab:[^}]*)\}", env)
        if label and label.group(1) in TABLES:
            values += table_values(TABLES[label.group(1)], env)
    return values


def write_values(values: list[Value], out: Path) -> None:
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(Value.__dataclass_fields__))
        writer.writeheader()
        writer.writerows(asdict(v) for v in values)


def paper_values(path: Path = VALUES) -> list[Value]:
    """The paper's reported values (`paper_values.csv`)."""
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [
        Value(r["table"], int(r["panel"]), int(r["row"]), int(r["column"]), r["row_label"], r["column_label"],
              r["metric"], float(r["value"]))
        for r in rows
    ]  # fmt: skip
