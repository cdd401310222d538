"""HTML pages of the Snakemake report (`snakemake --report report.html`), each derived from a file the pipeline
already wrote, never typed in:

    table    results/tables/X.tex -> X.html: the LaTeX table rendered (rows, spans, rules, caption)
    markdown results/claims.md -> claims.html (the report's first page)
    cells    the cells behind an artifact (its .sources.json, or cell files) -> one row per cell file
    runtimes Snakemake's benchmark files (`benchmark:`) -> seconds per stage and per cell label
    config   the run's configuration (with the schema's defaults) -> YAML

Usage: python workflow/report/render.py KIND ... (see `main`). Run by the rules of workflow/rules/paper.smk.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import re
import sys
from pathlib import Path

STYLE = """<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 14px; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; }
th, td { padding: 0.2em 0.6em; text-align: center; }
td.l, th.l { text-align: left; } td.r, th.r { text-align: right; }
tr.top > * { border-top: 2px solid #222; } tr.bottom > * { border-bottom: 2px solid #222; }
tr.mid > * { border-top: 1px solid #222; } td.end { border-bottom: 2px solid #222; } td.rule, th.rule { border-bottom: 1px solid #888; }
td.bar, th.bar { border-right: 1px solid #222; }
.caption { max-width: 60em; line-height: 1.45; } .label { color: #777; font-size: 12px; }
table.data th { cursor: pointer; background: #f3f3f3; position: sticky; top: 0; }
table.data td, table.data th { border: 1px solid #ddd; font-size: 12px; }
pre { background: #f6f6f6; padding: 1em; overflow: auto; }
</style>"""


def page(title: str, body: str, script: str = "") -> str:
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"{STYLE}</head>\n<body>\n{body}\n{script}</body></html>\n"
    )


def write(path: str, text: str) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)


# ------------------------------------------------------------------------------------ LaTeX -> HTML

MATH = {r"\times": "×", r"\gamma": "γ", r"\lambda": "λ", r"\alpha": "α", r"\in": "∈", r"\cdot": "·", r"\pm": "±"}
MATH.update({r"\leq": "≤", r"\geq": "≥", r"\le": "≤", r"\ge": "≥", r"\approx": "≈", r"\,": "\u2009", r"\;": " "})


def braced(text: str, start: int) -> tuple[str, int]:
    """The {...} group opening at text[start] (nested braces kept, escaped ones \\{ \\} not counted) and the index
    after it."""
    assert text[start] == "{", text[start:]
    depth, i = 0, start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i], i + 1
        i += 1
    raise ValueError(f"unbalanced braces: {text[start:]}")


def math_html(tex: str) -> str:
    """The inside of $...$: the symbols the tables use, \\mathcal, sub- and superscripts."""
    out, i = [], 0
    while i < len(tex):
        m = re.match(r"\\(mathcal|mathrm|text)\{", tex[i:])
        if m:
            arg, i = braced(tex, i + len(m.group()) - 1)
            out.append("ℒ" if m.group(1) == "mathcal" and arg == "L" else math_html(arg))
            continue
        if tex[i] in "_^":
            tag = "sub" if tex[i] == "_" else "sup"
            if tex[i + 1] == "{":
                arg, i = braced(tex, i + 1)
            else:
                arg, i = tex[i + 1], i + 2
            out.append(f"<{tag}>{math_html(arg)}</{tag}>")
            continue
        m = re.match(r"\\[a-zA-Z]+|\\.", tex[i:])
        if m:
            out.append(MATH.get(m.group(), html.escape(m.group()[1:])))
            i += len(m.group())
            continue
        if tex[i] not in "{}":
            out.append(html.escape(tex[i]))
        i += 1
    return "".join(out)


# LaTeX's escaped characters (budgetdraft.report.tables.latex_text writes dataset names so) -> their HTML
TEXT_ESCAPES = {r"\%": "%", r"\&": "&amp;", r"\_": "_", r"\#": "#", r"\,": "\u2009", r"\$": "$", r"\{": "{", r"\}": "}"}
TEXT_ESCAPES.update({r"\textbackslash": "\\", r"\textasciitilde": "~", r"\textasciicircum": "^"})


def inline_html(tex: str) -> str:
    """A table entry or caption: text with $math$, \\% and friends, -- as an en dash."""
    out, i = [], 0
    while i < len(tex):
        if tex[i] == "$" and "$" in tex[i + 1 :]:
            j = tex.index("$", i + 1)
            out.append(math_html(tex[i + 1 : j]))
            i = j + 1
            continue
        m = re.match(r"\\(textbf|emph|textit|texttt)\{", tex[i:])
        if m:
            arg, i = braced(tex, i + len(m.group()) - 1)
            tag = {"textbf": "b", "texttt": "code"}.get(m.group(1), "i")
            out.append(f"<{tag}>{inline_html(arg)}</{tag}>")
            continue
        m = re.match(r"\\[a-zA-Z]+|\\.", tex[i:])
        if m:
            out.append(TEXT_ESCAPES.get(m.group(), ""))
            i += len(m.group())
            continue
        if tex.startswith("---", i) or tex.startswith("--", i):
            n = 3 if tex.startswith("---", i) else 2
            out.append("—" if n == 3 else "–")
            i += n
            continue
        out.append({"~": "\u00a0", "{": "", "}": ""}.get(tex[i], html.escape(tex[i])))
        i += 1
    return "".join(out)


def split_cells(row: str) -> list[str]:
    """A tabular row's entries: split on & that is not \\& and not inside braces."""
    cells, depth, start, escaped = [], 0, 0, False
    for i, ch in enumerate(row):
        if escaped or ch == "\\":  # \\& \\{ \\}: a character, not a column or a group
            escaped = not escaped
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "&" and depth == 0:
            cells.append(row[start:i])
            start = i + 1
    return cells + [row[start:]]


def tabular_html(spec: str, lines: list[str]) -> str:
    """One tabular: booktabs rules as row borders, \\cmidrule as underlined spans, \\multicolumn as colspan,
    \\multirow as rowspan."""
    align = [c for c in re.sub(r"\{[^}]*\}|[|@ ]", "", spec)]
    rows, pending, rowspan = [], set(), {}  # rowspan: rows left to skip in column 0
    multirow = None
    for line in lines:
        line = line.strip()
        if not line or line.startswith((r"\vspace", "%")):
            continue
        if line in (r"\toprule", r"\midrule", r"\bottomrule", r"\hline"):
            if line == r"\bottomrule" and rows:
                rows[-1]["classes"].add("bottom")
            else:
                pending.add("top" if line == r"\toprule" else "mid")
            continue
        if line.startswith(r"\cmidrule"):
            for a, b in re.findall(r"\{(\d+)-(\d+)\}", line):
                rows[-1]["rules"].update(range(int(a) - 1, int(b)))
            continue
        m = re.fullmatch(r"\\multirow\{(\d+)\}\{[^}]*\}\{(.*)\}", line)
        if m:
            multirow = (int(m.group(1)), m.group(2))
            continue
        entries = split_cells(re.sub(r"\\\\\s*$", "", line))
        cells, col = [], 0
        for k, entry in enumerate(entries):
            entry = entry.strip()
            span, al = 1, align[col] if col < len(align) else "c"
            m = re.fullmatch(r"\\multicolumn\{(\d+)\}\{([^}]*)\}\{(.*)\}", entry, re.S)
            if m:
                span, al, entry = int(m.group(1)), m.group(2), m.group(3)
            cell = {"text": inline_html(entry), "span": span, "align": al.replace("|", ""), "col": col}
            cell["bar"] = al.endswith("|")
            if k == 0 and multirow and not entry:
                cell.update(text=inline_html(multirow[1]), rowspan=multirow[0])
                rowspan[0], multirow = multirow[0] - 1, None
            elif k == 0 and rowspan.get(0) and not entry:
                rowspan[0] -= 1
                col += span
                continue
            cells.append(cell)
            col += span
        rows.append({"cells": cells, "classes": pending, "rules": set()})
        pending = set()
    for i, row in enumerate(rows):  # a \\multirow cell that reaches the \\bottomrule carries it
        for cell in row["cells"]:
            last = i + cell.get("rowspan", 1) - 1
            cell["bottom"] = last > i and last < len(rows) and "bottom" in rows[last]["classes"]
    out = ["<table>"]
    for row in rows:
        classes = " ".join(sorted(row["classes"]))
        out.append(f'<tr class="{classes}">' if classes else "<tr>")
        for cell in row["cells"]:
            cls = {"l": "l", "r": "r"}.get(cell["align"], "")
            if set(range(cell["col"], cell["col"] + cell["span"])) & row["rules"]:
                cls += " rule"
            if cell["bar"]:
                cls += " bar"
            if cell["bottom"]:
                cls += " end"
            attrs = f' class="{cls.strip()}"' if cls.strip() else ""
            attrs += f' colspan="{cell["span"]}"' if cell["span"] > 1 else ""
            attrs += f' rowspan="{cell["rowspan"]}"' if cell.get("rowspan", 1) > 1 else ""
            out.append(f"<td{attrs}>{cell['text']}</td>")
        out.append("</tr>")
    return "\n".join(out + ["</table>"])


def table_page(tex: str, name: str) -> str:
    """Every tabular of a LaTeX table (main.tex has two panels) in order, then its caption and label."""
    parts = []
    for m in re.finditer(r"\\begin\{tabular\}\{((?:[^{}]|\{[^}]*\})*)\}(.*?)\\end\{tabular\}", tex, re.S):
        parts.append(tabular_html(m.group(1), m.group(2).splitlines()))
    at = tex.find(r"\caption{")
    caption = braced(tex, at + len(r"\caption"))[0] if at >= 0 else ""
    label = re.search(r"\\label\{([^}]*)\}", tex)
    body = "\n".join(parts) + f'\n<p class="caption"><b>{html.escape(name)}.</b> {inline_html(caption)}</p>'
    if label:
        body += f'\n<p class="label">LaTeX label <code>{html.escape(label.group(1))}</code></p>'
    return page(name, body)


# ------------------------------------------------------------------------------------ markdown

CLAIMS_STYLE = """<style>
.budgetdraft-claims { font-size: 14px; } .budgetdraft-claims table { border-collapse: collapse; margin: 0.6em 0; }
.budgetdraft-claims th, .budgetdraft-claims td { border: 1px solid #ccc; padding: 0.15em 0.45em; }
.budgetdraft-claims th { background: #f3f3f3; }
</style>"""


def markdown_fragment(text: str) -> str:
    """Markdown (GitHub tables) as an HTML fragment, wrapped for the report's first page."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough").render(text)
    return f'{CLAIMS_STYLE}\n<div class="budgetdraft-claims">\n{body}</div>\n'


# ------------------------------------------------------------------------------------ cells

CELL_COLUMNS = ["label", "method", "dataset", "context", "budget", "gamma", "policy", "replicate", "sample", "repeat"]
CELL_COLUMNS += ["new_tokens", "drafted", "accepted", "tok_per_s", "total_s", "peak_mem_mb", "device"]

SORT_SCRIPT = """<script>
function filterRows(q) {
  q = q.toLowerCase();
  for (const tr of document.querySelectorAll("table.data tbody tr"))
    tr.style.display = tr.textContent.toLowerCase().includes(q) ? "" : "none";
}
document.querySelectorAll("table.data th").forEach((th, i) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], up = th.dataset.up !== "1";
  const key = tr => { const t = tr.cells[i].textContent, x = parseFloat(t); return isNaN(x) ? t : x; };
  [...body.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (up ? 1 : -1))
    .forEach(tr => body.appendChild(tr));
  th.dataset.up = up ? "1" : "0";
}));
</script>"""


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cells_page(title: str, cells: list[dict]) -> str:
    """One row per cell file: what it measured (pooled over its rows) and its sha256, filterable and sortable. Each file
    is read as every reader reads a cell (`budgetdraft.evaluation.cellfile.read_frame`: its digest, invariants and identity)."""
    import pandas as pd

    from budgetdraft.evaluation.cellfile import read_frame

    rows = []
    for cell in cells:
        df = read_frame(cell["path"], CELL_COLUMNS)
        first = df.iloc[0]
        drafted, accepted = int(df["drafted"].sum()), int(df["accepted"].sum())
        rows.append(
            {
                "label": first["label"],
                "method": first["method"],
                "dataset": first["dataset"],
                "context": first["context"],
                "B": int(first["budget"]),
                "γ": int(first["gamma"]),
                "policy": first["policy"],
                "replicate": int(first["replicate"]),
                "prompts": df["sample"].nunique(),
                "runs": len(df),
                "new tokens": int(df["new_tokens"].sum()),
                "drafted": drafted,
                "accepted": accepted,
                "acceptance %": f"{100 * accepted / drafted:.1f}" if drafted else "",
                "tok/s": f"{df['tok_per_s'].mean():.2f}",
                "seconds / run": f"{df['total_s'].mean():.3f}",
                "peak MB": f"{df['peak_mem_mb'].max():.0f}",
                "device": first["device"],
                "file": cell["path"],
                "sha256": cell["sha256"][:12],
            }
        )
    frame = pd.DataFrame(rows)
    table = frame.to_html(index=False, classes="data", border=0, escape=True)
    body = (
        f"<h2>{html.escape(title)}</h2>\n<p>{len(frame)} cell files; a row pools the file's prompts and timed runs "
        "(acceptance = Σ accepted / Σ drafted). Click a column to sort.</p>\n"
        '<p><input placeholder="filter rows, e.g. lambda0.5 or r1" oninput="filterRows(this.value)" size="40"></p>\n'
        + table
    )
    return page(title, body, SORT_SCRIPT)


# ------------------------------------------------------------------------------------ runtimes, configuration


def runtimes_page(benchmarks: dict[str, list[str]]) -> str:
    """Wall seconds per stage (every job's `benchmark:` file) and per cell label."""
    import pandas as pd

    rows, missing = [], 0
    for stage, files in benchmarks.items():
        for f in files:
            if not Path(f).is_file():
                missing += 1
                continue
            b = pd.read_csv(f, sep="\t").iloc[0]
            label = f.split("/")[2] if stage == "eval (cells)" else ""
            rows.append({"stage": stage, "label": label, "s": float(b["s"]), "max_rss": b.get("max_rss")})
    frame = pd.DataFrame(rows, columns=["stage", "label", "s", "max_rss"])

    def summary(rows, by: str) -> str:
        g = rows.groupby(by, sort=False)["s"]
        out = pd.DataFrame({"jobs": g.size(), "total s": g.sum(), "mean s": g.mean(), "max s": g.max()})
        out.loc["all"] = [len(rows), rows["s"].sum(), rows["s"].mean(), rows["s"].max()]
        out["jobs"] = out["jobs"].astype(int)
        return out.round(2).to_html(border=0, classes="data", index_names=False)

    cells = frame[frame["stage"] == "eval (cells)"]
    body = (
        "<h2>Runtimes per stage</h2>\n<p>Wall-clock seconds of every job that keeps a Snakemake <code>benchmark:</code>"
        f" file ({len(frame)} jobs; benchmarks/…). Total = job-seconds (about core-seconds with 1-thread jobs): "
        "the wall time of a run with N parallel jobs is about total ÷ N. With the warm start (local runs) a job's "
        "process is a thin client of the warm server, so the benchmark's memory and CPU columns measure the client; "
        "its seconds are the job's. The paper rules (tables, figures, claims) keep no benchmark: Snakemake's own "
        "Statistics page times every job.</p>\n"
        + summary(frame, "stage")
        + (f"<p>{missing} expected benchmark file(s) absent (jobs not run in this workdir).</p>" if missing else "")
        + "<h3>Grid cells per label</h3>\n"
        + (summary(cells, "label") if len(cells) else "<p>none</p>")
    )
    return page("Runtimes", body)


def config_page(config: dict, configfiles: list[str]) -> str:
    import yaml

    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=120)
    files = ", ".join(f"<code>{html.escape(f)}</code>" for f in configfiles) or "the embedded default"
    body = (
        f"<h2>Configuration of this run</h2>\n<p>From {files}, with the defaults of "
        "<code>workflow/schemas/config.schema.yaml</code> filled in and any <code>--config</code> overrides applied: "
        "exactly what the rules read.</p>\n"
        f"<pre>{html.escape(text)}</pre>"
    )
    return page("Configuration", body)


# ------------------------------------------------------------------------------------ command line


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="kind", required=True)
    t = sub.add_parser("table", help="LaTeX table -> HTML")
    t.add_argument("tex"), t.add_argument("out"), t.add_argument("--name", required=True)
    m = sub.add_parser("markdown", help="markdown -> HTML fragment")
    m.add_argument("md"), m.add_argument("out")
    c = sub.add_parser("cells", help="the cells of an artifact -> HTML table")
    c.add_argument("out"), c.add_argument("--title", required=True)
    c.add_argument("--sources", help="an artifact's .sources.json (its cells with their sha256)")
    c.add_argument("--files", nargs="*", default=[], help="cell files")
    r = sub.add_parser("runtimes", help="benchmark files -> HTML")
    r.add_argument("out"), r.add_argument("--run", required=True, help="results/report/run.json (its benchmarks)")
    g = sub.add_parser("config", help="the run's configuration -> HTML")
    g.add_argument("out"), g.add_argument("--run", required=True, help="results/report/run.json (config, files)")
    a = p.parse_args(argv)
    if a.kind == "table":
        write(a.out, table_page(Path(a.tex).read_text(encoding="utf-8"), a.name))
    elif a.kind == "markdown":
        write(a.out, markdown_fragment(Path(a.md).read_text(encoding="utf-8")))
    elif a.kind == "cells":
        cells = json.loads(Path(a.sources).read_text())["cells"] if a.sources else []
        cells += [{"path": f, "sha256": sha256(f)} for f in a.files]
        write(a.out, cells_page(a.title, cells))
    elif a.kind == "runtimes":
        write(a.out, runtimes_page(json.loads(Path(a.run).read_text(encoding="utf-8"))["benchmarks"]))
    else:
        run = json.loads(Path(a.run).read_text(encoding="utf-8"))
        write(a.out, config_page(run["config"], run["configfiles"]))


if __name__ == "__main__":
    sys.exit(main())
