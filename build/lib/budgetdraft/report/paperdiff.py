"""Every number of the paper beside this run's: the paper's reported values (`paper_values.csv`, read once from the
paper's LaTeX tables by `budgetdraft.report.papervalues.read_tex_tables`) and this run's, read from its own
`results/tables/*.tex` by the same reader,
since every table is built with the paper's layout (rows, columns, panels, the `speedup×/acceptance%` format).

    python -m budgetdraft paper-diff --tables results/tables/*.tex --settings results/settings/claims.json \\
        --out results/paper_diff.md

Each reported value is matched to this run's by table, panel, row and column position (its row and column labels are
shown beside it) and compared: the difference, and whether it lies within the authors' stated tolerance for a rerun
(±2 points of acceptance, ±0.05× of speedup; they state none for throughput or memory). Only a run whose whole
measurement is the paper's (`PAPER_MEASUREMENT`: models, dataset sources, lengths, the γ sweep, samples, repeats,
dtypes, and each variant's training recipe or the authors' released checkpoint) is a rerun; any other (the embedded
default, a paper-scale run trained for 50 steps) has counterparts: the report says so on its first line, lists
what differs, and gives no verdict of "differs".
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

from budgetdraft.base.atomic import atomic_path, atomic_write_text
from budgetdraft.evaluation.cellfile import read_checked
from budgetdraft.report.papervalues import Value, paper_values, read_tex_tables
from budgetdraft.report.settings import settings_dict

TOLERANCE = {"acceptance": 2.0, "speedup": 0.05}  # the authors' EXPECTED_RESULTS.md: ±2 pp, ±0.05×
# ------------------------------------------------------------------------------------------------ the diff

# The paper's measurement: what a run must match, every part of it, to be a rerun of the paper and not a run with
# counterparts only (the run's side: budgetdraft.pipeline.plan.SettingsFiles.measurement).
PAPER_RECIPE = {  # the paper's training of every variant (§4 Hyperparameters; the authors' train_tinydraft.py)
    "steps": 5000,
    "lr": 1e-5,
    "weight_decay": 0.01,
    "warmup_steps": 150,
    "grad_clip": 1.0,
    "budgets": [256, 512, 1024, 2048],
    "budget_weights": [0.4, 0.3, 0.2, 0.1],
    "chunk_size": 8,
    "freeze_embeddings": False,
}
PAPER_VARIANTS = {
    "la_only": {**PAPER_RECIPE, "lambda_c": 0.0},
    "lambda0.5": {**PAPER_RECIPE, "lambda_c": 0.5},
    "lambda1.0": {**PAPER_RECIPE, "lambda_c": 1.0},
    "single_budget": {**PAPER_RECIPE, "lambda_c": 0.5, "budgets": [1024], "budget_weights": [1.0]},
}
# The authors' released drafters: one hub repository, a subfolder per variant (the single-budget one is not released)
RELEASE_REPO = "qwe123wjb/BudgetDraft-checkpoints"
RELEASED = {"lambda0.5": "main", "la_only": "aonly", "lambda1.0": "ac"}
PAPER_MEASUREMENT = {
    "verifier": "NousResearch/Yarn-Llama-2-7b-128k",
    "drafter": "JackFram/llama-68m",
    "base_drafter_steps": 0,  # SD (sparse/full) drafts with llama-68m as released
    "verifier_dtype": "float16",
    "drafter_dtype": "float32",
    "datasets": {"gs": "pg19_test", "longbench": "longbench_qmsum", "lwm": "narrativeqa_lwm"},
    "samples": {"gs": 10, "longbench": 10, "lwm": 10},
    "context_tokens": {"4K": 3800, "8K": 8192, "16K": 16384},
    "budgets": [256, 512, 1024, 2048],
    "gammas": {"4K": list(range(5, 85, 5)), "8K": list(range(5, 35, 5)), "16K": [5, 10, 15]},
    "chunk_size": 8,
    "max_new_tokens": 256,
    "warmup": 1,
    "repeats": 5,
    "training_data": {"source": "pg19_train", "prefix_len": 16128, "cont_len": 256},
}
PAPER_SCALE = {k: PAPER_MEASUREMENT[k] for k in ("verifier", "context_tokens", "budgets")}


def shown(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def variant_difference(label: str, given: dict) -> tuple[str | None, str | None]:
    """(how variant ``label`` of this run differs from the paper's, what is taken on trust) from its `measurement`
    entry: a training recipe (compared key by key with the paper's) or a checkpoint (the authors' release, its
    subfolder named, is theirs; a local copy of it is taken on trust; any other checkpoint differs)."""
    if "checkpoint" in given:
        where, sub = given["checkpoint"], given.get("subfolder", "")
        if label not in RELEASED:
            return f"variants.{label}: a checkpoint ({where}); the authors do not release this drafter", None
        if sub != RELEASED[label]:
            return f"variants.{label}: subfolder {sub!r}, not the release's {RELEASED[label]!r}", None
        if where == RELEASE_REPO:
            return None, None
        if "/" in where and not where.startswith((".", "/", "~")) and where.count("/") == 1:
            return f"variants.{label}: checkpoint {where}, not the authors' {RELEASE_REPO}", None
        return None, f"variants.{label}: the local checkpoint {where}/{sub} is taken to be the authors' {sub}/"
    paper = PAPER_VARIANTS[label]
    differs = [f"{k} {shown(given.get(k))} (paper: {shown(v)})" for k, v in paper.items() if given.get(k, v) != v]
    return (f"variants.{label} trained with " + ", ".join(differs)) if differs else None, None


def measurement_differences(measurement: dict) -> tuple[list[str], list[str]]:
    """(each way this run's measurement differs from the paper's, what is taken on trust): models, dataset
    sources, lengths, the γ sweep, samples, repeats, dtypes and each of the paper's variants' training or
    checkpoint. No difference: a rerun."""
    if not measurement:
        return ["the run's measurement is not recorded (settings written before it was)"], []
    differs, trusted = [], []
    for key, paper in PAPER_MEASUREMENT.items():
        ours = measurement.get(key)
        if ours != paper:
            differs.append(f"{key} {shown(ours)} (paper: {shown(paper)})")
    for label, given in measurement.get("variants", {}).items():
        if label in PAPER_VARIANTS:
            difference, trust = variant_difference(label, given)
            differs += [difference] if difference else []
            trusted += [trust] if trust else []
    return differs, trusted


SAME, OTHER = "rerun", "counterpart"


def compared(paper: Value, ours: Value | None, scale: str) -> dict:
    """One reported value beside this run's: the difference and, for a rerun, whether it lies within the authors'
    tolerance (``within``: True / False, None where they state none or this run has no value there)."""
    line = {
        "table": paper.table,
        "panel": paper.panel,
        "row": paper.row_label,
        "column": paper.column_label,
        "metric": paper.metric,
        "paper": paper.value,
        "ours": None if ours is None else ours.value,
        "our_row": None if ours is None else ours.row_label,
        "our_column": None if ours is None else ours.column_label,
        "difference": None if ours is None else ours.value - paper.value,
        "tolerance": TOLERANCE.get(paper.metric),
        "within": None,
    }
    if ours is not None and scale == SAME and line["tolerance"] is not None:
        line["within"] = abs(line["difference"]) <= line["tolerance"] + 1e-9
    return line


def places(values: list[Value]) -> dict[tuple, Value]:
    """Each value by its place: table, panel, section (a row label's first part, e.g. the context "4K" of
    "4K / 256", in order of appearance), row within the section, column and metric. A run whose grid is smaller
    than the paper's (fewer budgets per context) then lines up context with context and budget with budget; the
    paper's rows beyond it have no counterpart, instead of taking the next context's."""
    sections: dict[tuple, list[str]] = {}
    rows: dict[tuple, list[str]] = {}
    out = {}
    for v in values:
        section = v.row_label.split(" / ")[0] if " / " in v.row_label else ""
        order = sections.setdefault((v.table, v.panel), [])
        order += [section] * (section not in order)
        within = rows.setdefault((v.table, v.panel, section), [])
        within += [v.row_label] * (v.row_label not in within)
        place = (v.table, v.panel, order.index(section), within.index(v.row_label), v.column, v.metric)
        out.setdefault(place, v)
    return out


def diff(paper: list[Value], ours: list[Value], scale: str) -> list[dict]:
    """Every reported value, matched to this run's at the same place (`places`)."""
    mine = places(ours)
    return [compared(v, mine.get(place), scale) for place, v in places(paper).items()]


def status(line: dict, scale: str) -> str:
    if line["ours"] is None:
        return "no counterpart" if scale == OTHER else "not run"
    if scale == OTHER:
        return "counterpart"
    if line["within"] is None:
        return "no tolerance stated"
    return "within" if line["within"] else "outside"


def summary(lines: list[dict], scale: str) -> dict[str, dict[str, int]]:
    """Per table: how many reported values, and how many of each status."""
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        counts = out.setdefault(line["table"], {"values": 0})
        counts["values"] += 1
        key = status(line, scale)
        counts[key] = counts.get(key, 0) + 1
    return out


def number(value, metric: str) -> str:
    if value is None:
        return "--"
    return f"{value:.2f}" + {"speedup": "×", "acceptance": " %", "peak_gb": " GB"}.get(metric, "")


# ------------------------------------------------------------------------------------------------ sanity checks
# The authors' own sanity checks for a rerun (their EXPECTED_RESULTS.md): the AR baseline's throughput, the final
# training loss (≈ 2.5–3.0 by step 5,000), and acceptance identical across the four budgets at 4K.

A100_GBS = 2039.0  # the A100 80GB's memory bandwidth, GB/s: the paper's device
# Yarn-Llama-2-7B-128K in fp16, the paper's verifier: weights and KV cache read by one decode step
VERIFIER_WEIGHT_GB = 6.74e9 * 2 / 1e9
VERIFIER_KV_BYTES_PER_TOKEN = 32 * 2 * 4096 * 2  # layers × (K, V) × hidden × fp16
PAPER_NEW_TOKENS = 256


def paper_bound_fraction(tok_s: float, prompt_tokens: int) -> float:
    """The paper's AR throughput as a fraction of the A100's bandwidth bound: bytes one step reads (weights + the
    KV cache at the middle of the generation) × tok/s ÷ 2,039 GB/s."""
    cached = prompt_tokens + PAPER_NEW_TOKENS / 2
    step_gb = VERIFIER_WEIGHT_GB + cached * VERIFIER_KV_BYTES_PER_TOKEN / 1e9
    return tok_s * step_gb / A100_GBS


MARKDOWN = re.compile(r"([\\`*_\[\]()#|<>])")


def md(text) -> str:
    """``text`` as plain text inside a markdown table cell: every character markdown reads as markup (``|`` ends a
    cell, ``[x](…)`` is a link, ``*`` ``_`` emphasis, ``<`` HTML) escaped with a backslash. Labels and display names
    come from a user's config."""
    return MARKDOWN.sub(r"\\\1", str(text))


def ar_lines(lines: list[dict], ar_rows, scale: str) -> list[str]:
    """AR throughput beside the paper's, each as a share of its device's bandwidth bound (ours from the AR cells'
    `bound_fraction`, recorded on a GPU; the paper's from its tok/s and its verifier's shape on an A100)."""
    out = ["| context | dataset | paper tok/s | share of the A100's bound | this run (its context) tok/s | share of "
           "its device's bound |", "|---|---|---|---|---|---|"]  # fmt: skip
    paper_tokens = PAPER_SCALE["context_tokens"]
    seen = set()
    for line in lines:
        if line["table"] != "main" or line["metric"] != "tok_s" or line["panel"] != 0:
            continue
        context, dataset = line["row"].split(" / ")[0], line["column"].split(" / ")[0]
        if (context, dataset) in seen:
            continue
        seen.add((context, dataset))
        theirs = paper_bound_fraction(line["paper"], paper_tokens.get(context, 0)) if context in paper_tokens else None
        our_context = (line["our_row"] or "").split(" / ")[0]
        ours = ar_rows.get(our_context, {}).get((line["our_column"] or "").split(" / ")[0])
        mine = number(line["ours"], "tok_s") + (f" ({md(our_context)})" if line["ours"] is not None else "")
        bound = "--" if line["ours"] is None else "not recorded (no GPU)" if ours is None else f"{ours:.2f}"
        out.append(
            f"| {md(context)} | {md(dataset)} | {line['paper']:.2f} | {'--' if theirs is None else f'{theirs:.2f}'} | "
            f"{mine} | {bound} |"
        )
    return out


def loss_lines(losses: dict[str, dict[int, float]]) -> list[str]:
    """The final training loss of each variant (mean L = L_A + λ·L_C over its last 50 steps), per replicate."""
    if not losses:
        return ["No drafter was trained in this run (every variant was given as a checkpoint)."]
    out = ["| variant | final loss per replicate (mean of the last 50 steps) |", "|---|---|"]
    for label, per in losses.items():
        text = ", ".join(f"r{r}: {v:.2f}" for r, v in sorted(per.items())) if per else "given, not trained here"
        out.append(f"| {md(label)} | {text} |")
    return out + ["", "The authors expect about 2.5–3.0 by step 5,000 at their scale (`EXPECTED_RESULTS.md`)."]


def final_loss(log: Path, lambda_c: float, last: int = 50) -> float:
    """Mean L_A + λ·L_C over the last ``last`` steps of a training's loss_log.csv."""
    with open(log, encoding="utf-8") as f:
        return mean_loss(list(csv.DictReader(f))[-last:], lambda_c)


def mean_loss(rows: list[dict], lambda_c: float) -> float:
    """Mean L_A + λ·L_C over loss-log rows (L_C empty or nan where the step ran no sparse branch)."""
    total = [float(r["L_A"]) + lambda_c * (float(r["L_C"]) if r["L_C"] not in ("", "nan") else 0.0) for r in rows]
    return sum(total) / len(total) if total else math.nan


# ------------------------------------------------------------------------------------------------ the paper's own
# Numbers of the paper (and of the authors' EXPECTED_RESULTS.md) that disagree with each other: no rerun can match
# both, so they are listed as the paper's, not as differences of this run.

BUDGETDRAFT_COLUMNS = {"main": "BudgetDraft", "ablation_lc": "L_A + 0.5 L_C", "lambda": "L_A+0.5L_C"}
# the authors' EXPECTED_RESULTS.md (their repository at cd1a0fe), "Figure 3 — Budget-averaged γ sensitivity peaks"
FIGURE3_PEAKS = Path(__file__).with_name("expected_figure3.csv")


def budgetdraft_runs(values: list[Value]) -> dict[tuple, list[tuple[str, float, float]]]:
    """{(context, budget, dataset): [(where, speedup, acceptance)]}: every BudgetDraft (λ = 0.5) run the paper
    reports, by table and panel."""
    pairs: dict[tuple, dict] = {}
    for v in values:
        context, _, budget = v.row_label.partition(" / ")
        dataset, _, column = v.column_label.partition(" / ")
        if BUDGETDRAFT_COLUMNS.get(v.table) == column and budget:
            where = v.table + ("" if v.table != "main" else f" panel {'AB'[v.panel]}")
            pairs.setdefault((context, budget, dataset, where), {})[v.metric] = v.value
    out: dict[tuple, list] = {}
    for (context, budget, dataset, where), m in pairs.items():
        if {"speedup", "acceptance"} <= set(m):
            out.setdefault((context, budget, dataset), []).append((where, m["speedup"], m["acceptance"]))
    return out


def inconsistencies(values: list[Value], peaks_csv: Path = FIGURE3_PEAKS) -> list[str]:
    """Where the paper disagrees with itself, one line each:

    - one run, two speedups: the same setting (context, budget, dataset) of BudgetDraft with the same acceptance (to
      0.01 pp) in two tables, its speedups more than the authors' tolerance (±0.05×) apart;
    - Figure 3's peaks (the authors' EXPECTED_RESULTS.md: the best budget-averaged speedup over γ) against Table 1's
      best speedup at each budget, where Table 1's acceptance is one figure at every budget (so every budget's best
      run is at one γ, and the average there is the mean of the four bests): more than the tolerance apart."""
    tol = TOLERANCE["speedup"]
    out = []
    runs = budgetdraft_runs(values)
    for (context, budget, dataset), found in runs.items():
        for acc in sorted({round(a, 2) for _, _, a in found}):
            speedups: dict[float, list[str]] = {}
            for where, speedup, a in found:
                if round(a, 2) == acc:
                    speedups.setdefault(speedup, []).append(where)
            if max(speedups) - min(speedups) > tol + 1e-9:
                shown = " and ".join(f"{x:.2f}× ({', '.join(w)})" for x, w in sorted(speedups.items(), reverse=True))
                out.append(f"{context} / B={budget} / {dataset}: BudgetDraft at {acc:.2f} % acceptance is {shown}")
    with open(peaks_csv, encoding="utf-8") as f:
        peaks = list(csv.DictReader(f))
    for peak in peaks:
        bests = [r for (c, _, d), rs in runs.items() if (c, d) == (peak["context"], peak["dataset"])
                 for r in rs if r[0] == "main panel A"]  # fmt: skip
        if not bests or len({round(acc, 2) for _, _, acc in bests}) != 1:
            continue
        mean = sum(s for _, s, _ in bests) / len(bests)
        if abs(float(peak["speedup"]) - mean) > tol + 1e-9:
            out.append(
                f"{peak['context']} / {peak['dataset']}: EXPECTED_RESULTS.md's Figure 3 peak is {float(peak['speedup']):.2f}× "
                f"(γ = {peak['gamma']}), but Table 1's best speedups, {', '.join(f'{s:.2f}×' for _, s, _ in bests)} at "
                f"one acceptance ({bests[0][2]:.2f} %) at every budget, average {mean:.2f}×"
            )
    return out


def inconsistency_lines(values: list[Value]) -> list[str]:
    found = inconsistencies(values)
    if not found:
        return ["None found by the checks below."]
    return [f"- {md(line)}" for line in found] + [
        "",
        "Checks: the same setting of BudgetDraft at the same acceptance in two tables with speedups more than ±0.05× "
        "apart; the authors' EXPECTED_RESULTS.md Figure 3 peaks against Table 1's best speedups where Table 1's "
        "acceptance is one figure at every budget. A rerun can match at most one of each pair: the status column "
        "below compares this run with the paper's table values as printed.",
    ]


def budget_lines(shortest: str, acceptance: dict[str, dict[str, dict[int, float]]]) -> list[str]:
    """Acceptance at each budget at the shortest context (γ_fixed) per drafter and dataset, and whether it is
    identical across budgets, the authors' 'central result' at 4K."""
    out = [f"| drafter | dataset | acceptance at each budget ({md(shortest)}) | identical? |", "|---|---|---|---|"]
    for label, by_dataset in acceptance.items():
        for dataset, per in by_dataset.items():
            same = len({round(v, 9) for v in per.values()}) == 1
            shown = ", ".join(f"B={b}: {v:.2f} %" for b, v in sorted(per.items()))
            out.append(f"| {md(label)} | {md(dataset)} | {shown} | {'**yes**' if same else 'no'} |")
    return out + [
        "",
        "Identical acceptance at every budget means the budget had no effect there: the drafter proposed the same "
        "tokens whatever it kept of the prompt (for a prompt no longer than B the sparse cache is the whole cache). "
        "The authors read it as budget robustness; it is also what a drafter that attends little to distant tokens "
        "gives.",
    ]


# ------------------------------------------------------------------------------------------------ the report


def markdown(lines: list[dict], scale: str, run: str, sanity: list[str]) -> str:
    counts = summary(lines, scale)
    if scale == SAME:
        head = (
            f"This run is a rerun of the paper's measurement ({md(run)}): each of the paper's {len(lines)} reported "
            "values beside this run's, and whether the difference lies within the authors' tolerance for a rerun (±2 "
            "points of acceptance, ±0.05× of speedup; none stated for throughput or memory)."
        )
    else:
        head = (
            f"**This run is not a rerun of the paper: its values are counterparts ({md(run)})**. Below, each of the "
            f"paper's {len(lines)} reported values beside the value at the same place of this run's table (its own "
            "row and column labels shown): the shape, with no verdict of 'differs'."
        )
    statuses = sorted({k for c in counts.values() for k in c if k != "values"})
    out = [f"# The paper, number by number: {head}", "", "## Summary per table", ""]
    out += ["| table | values | " + " | ".join(statuses) + " |", "|---|---|" + "---|" * len(statuses)]
    for table, c in counts.items():
        out.append(f"| {table} | {c['values']} | " + " | ".join(str(c.get(k, 0)) for k in statuses) + " |")
    out += ["", "## Sanity checks (the authors')", "", *sanity, "", "## Every value", ""]
    for table in counts:
        out += [f"### {table}", "", "| row | column | paper | this run (its row / column) | difference | status |",
                "|---|---|---|---|---|---|"]  # fmt: skip
        for line in (x for x in lines if x["table"] == table):
            mine = number(line["ours"], line["metric"])
            if line["ours"] is not None and (line["our_row"], line["our_column"]) != (line["row"], line["column"]):
                mine += f" ({md(line['our_row'])} / {md(line['our_column'])})"
            delta = "--" if line["difference"] is None else f"{line['difference']:+.2f}"
            out.append(
                f"| {md(line['row'])} | {md(line['column'])} | {number(line['paper'], line['metric'])} | {mine} | {delta} | "
                f"{status(line, scale)} |"
            )
        out.append("")
    return "\n".join(out)


def run_scale(settings: dict) -> tuple[str, str]:
    """(SAME or OTHER, a description of the run: what differs from the paper's measurement, or what a rerun takes
    on trust) from its settings' `measurement` (`measurement_differences`)."""
    differs, trusted = measurement_differences(settings.get("measurement") or {})
    if differs:
        return OTHER, "it differs in " + "; ".join(differs)
    return SAME, "every setting is the paper's" + ("; " + "; ".join(trusted) if trusted else "")


def cell_rows(paths) -> list[dict]:
    """The rows of cell files, checked as every reader checks them (budgetdraft.evaluation.cellfile)."""
    return [row for path in paths for row in read_checked(path).to_pylist()]


def ar_bounds(rows: list[dict], names: dict) -> dict[str, dict[str, float]]:
    """{context: {dataset name: mean bound_fraction}} of AR rows that recorded one (a GPU run)."""
    out: dict[str, dict[str, list]] = {}
    for r in rows:
        if r["label"] == "ar" and r.get("bound_fraction") is not None and not math.isnan(r["bound_fraction"]):
            out.setdefault(r["context"], {}).setdefault(names.get(r["dataset"], r["dataset"]), []).append(
                r["bound_fraction"]
            )
    return {c: {d: sum(v) / len(v) for d, v in ds.items()} for c, ds in out.items()}


def shortest_acceptance(rows: list[dict], shortest: str, gamma: int) -> dict[str, dict[str, dict[int, float]]]:
    """{drafter label: {dataset: {budget: acceptance %}}} at the shortest context and γ_fixed."""
    sums: dict = {}
    for r in rows:
        if r["label"] == "ar" or r["context"] != shortest or int(r["gamma"]) != gamma:
            continue
        acc = sums.setdefault(r["label"], {}).setdefault(r["dataset"], {}).setdefault(int(r["budget"]), [0, 0])
        acc[0] += r["accepted"]
        acc[1] += r["drafted"]
    return {
        label: {d: {b: 100.0 * a / n if n else math.nan for b, (a, n) in per.items()} for d, per in ds.items()}
        for label, ds in sums.items()
    }


def losses(drafters, variants: dict) -> dict[str, dict[int, float]]:
    """{variant: {replicate: final loss}} from trained drafter directories results/drafters/rR/LABEL/."""
    out: dict[str, dict[int, float]] = {label: {} for label in variants}
    for d in map(Path, drafters):
        replicate = re.fullmatch(r"r(\d+)", d.parent.name)
        log = d / "loss_log.csv"
        if replicate and log.is_file() and d.name in out:
            lam = float((variants.get(d.name) or {}).get("lambda_c") or 0.0)
            out[d.name][int(replicate.group(1))] = final_loss(log, lam)
    return out


def build(tables, settings, cells=(), drafters=(), out="results/paper_diff.md") -> list[Path]:
    """Write the diff (.md) and every line of it (.csv beside it); return both paths."""
    s = settings_dict(settings)
    scale, described = run_scale(s)
    ours = [v for t in tables for v in read_tex_tables(Path(t).read_text(encoding="utf-8"))]
    lines = diff(paper_values(), ours, scale)
    rows = cell_rows(cells)
    shortest = s["contexts"][0]
    sanity = ["### AR throughput", "", *ar_lines(lines, ar_bounds(rows, s["datasets"]), scale), ""]
    sanity += ["### Final training loss", "", *loss_lines(losses(drafters, s.get("variants", {}))), ""]
    sanity += [f"### Acceptance across budgets at {md(shortest)}", ""]
    sanity += budget_lines(shortest, shortest_acceptance(rows, shortest, int(s["gamma_fixed"])))
    sanity += ["", "### The paper's own inconsistencies (not this run's differences)", ""]
    sanity += inconsistency_lines(paper_values())
    out = Path(out)
    atomic_write_text(out, markdown(lines, scale, described, sanity) + "\n")
    table = out.with_suffix(".csv")
    with atomic_path(table) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*lines[0], "status"])
        writer.writeheader()
        writer.writerows({**line, "status": status(line, scale)} for line in lines)
    return [out, table]
