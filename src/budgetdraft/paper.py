"""Tables and figures of the paper, aggregated from measured grid cells (never re-measured, never typed).

`python -m budgetdraft paper --artifact NAME --out PATH --settings JSON --cells FILE [FILE ...]`

A cell file (`budgetdraft.cells`, see docs/architecture.md) holds one row per (sample, repeat) of one
(label, dataset, context, budget, gamma). Definitions used everywhere below:

  per-sample time   mean over repeats of `total_s`
  speedup           mean over samples of AR per-sample time / method per-sample time (matched by `sample`;
                    the AR cell is label `ar`, budget 0, gamma 0 of the same dataset and context)
  acceptance (%)    100 * sum(accepted) / sum(drafted) over the cell
  AR tok/s          mean `tok_per_s` of the AR cell
  peak memory (GB)  mean `peak_mem_mb` / 1024 over the cell's rows

While loading, every row's `output_ids` is compared with the AR cell's output for the same
(dataset, context, sample): greedy speculative decoding is lossless, so any difference is an error. Cells
decoded in sampling mode (temperature > 0, recorded in their `config`) are lossless in distribution, not token
for token: for them the check is that every cell of a (dataset, context) used the same sampling settings, and
the token comparison is skipped with a note (tests/test_sampling.py tests the distribution).

Every number written to a table is recorded with the cells it comes from; `trace()` re-derives a table
from the cells and maps each number in the written file to its source.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from budgetdraft.atomic import atomic_path

AR, SD, BD = "ar", "sd", "lambda0.5"
LA_ONLY, LAMBDA1, SINGLE, TRIFORCE, EAGLE3 = "la_only", "lambda1.0", "single_budget", "triforce", "eagle3"
KEY = ["label", "dataset", "context", "budget", "gamma"]
NEEDED_COLUMNS = KEY + ["sample", "repeat", "total_s", "tok_per_s", "drafted", "accepted", "peak_mem_mb",
                        "output_ids"]
METHOD_NAMES = {AR: "AR", SD: "SD (sparse/full)", TRIFORCE: "TriForce", EAGLE3: "EAGLE-3", BD: "BudgetDraft"}
SD_NAME, BD_NAME = METHOD_NAMES[SD], METHOD_NAMES[BD]
X = r"$\times$"

TABLES = {  # artifact -> LaTeX label
    "main": "tab:best_speedup_and_accept_per_budget",
    "comparison": "tab:comparison",
    "ablation_lc": "tab:ablation_lc",
    "lambda": "tab:lambda_sensitivity_full",
    "single_budget": "tab:single_budget_ablation",
    "vram_gamma": "tab:peak_vram_gamma_full",
    "vram": "tab:peak_vram",
}
FIGURES = {"fig_collapse": "fig:collapse", "fig_gamma": "fig:gamma_sensitivity_budget_avg",
           "fig_errorbar": "fig:errorbar"}
ARTIFACTS = {**TABLES, **FIGURES}


def cell_name(key) -> str:
    label, dataset, context, budget, gamma = key
    return f"(label={label}, dataset={dataset}, context={context}, budget={budget}, gamma={gamma})"


# ----------------------------------------------------------------------------------------------- cells


OPTIONAL_COLUMNS = ("device", "mem_kind")  # read when a cell has them


def read_cell(path: Path, optional=OPTIONAL_COLUMNS) -> pd.DataFrame:
    """One cell file's `NEEDED_COLUMNS` and those of the `optional` columns it has; a missing file, a missing
    column, or a file that is no readable parquet (cut short by a kill) is an error naming the file."""
    if not path.exists():
        raise FileNotFoundError(f"cell file not found: {path}")
    try:
        names = pq.read_schema(path).names
        missing = [c for c in NEEDED_COLUMNS if c not in names]
        if missing:
            raise ValueError(f"{path}: missing cell columns {missing}")
        present = [c for c in dict.fromkeys(optional) if c in names and c not in NEEDED_COLUMNS]
        return pd.read_parquet(path, columns=NEEDED_COLUMNS + present)
    except pa.ArrowException:
        raise ValueError(f"{path}: not a readable parquet file (truncated by a kill?): delete it and re-run to "
                         "re-measure it") from None


def load_cells(paths, optional=OPTIONAL_COLUMNS) -> pd.DataFrame:
    """Concatenate cell files (`read_cell`: `NEEDED_COLUMNS` plus the `optional` columns each file has); reject
    a cell given twice (in two files)."""
    if not paths:
        raise ValueError("no --cells given")
    frames, owner = [], {}
    for path in map(Path, paths):
        df = read_cell(path, optional)
        if df.empty:
            raise ValueError(f"{path}: cell file has no rows")
        for key in df[KEY].drop_duplicates().itertuples(index=False):
            key = tuple(key)
            if key in owner:
                raise ValueError(f"cell {cell_name(key)} is in two files: {owner[key]} and {path}")
            owner[key] = path
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    for col in ("label", "dataset", "context"):
        df[col] = df[col].astype(str)
    for col in ("budget", "gamma", "sample", "repeat"):
        df[col] = df[col].astype(int)
    return df


SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "seed")


def decoding_of(config: str) -> str:
    """'greedy', or the sampling settings, of a cell row's recorded `config` (cells from before sampling mode
    recorded none: greedy)."""
    args = json.loads(config) if config else {}
    if not args.get("temperature"):
        return "greedy"
    return ", ".join(f"{k}={args.get(k)}" for k in SAMPLING_FLAGS)


def sampled_groups(df: pd.DataFrame) -> set[tuple[str, str]]:
    """The (dataset, context) groups decoded in sampling mode; every cell of a group must share one decoding."""
    sampled = set()
    decoding = df["config"].map(decoding_of) if "config" in df.columns else pd.Series("greedy", index=df.index)
    for (dataset, context), modes in decoding.groupby([df["dataset"], df["context"]], sort=True):
        kinds = sorted(modes.unique())
        if len(kinds) > 1:
            raise ValueError(f"cells of {dataset}/{context} were decoded differently ({'; '.join(kinds)}): their "
                             "times and acceptance are not comparable; re-run them with one `sampling:` setting")
        if kinds[0] != "greedy":
            sampled.add((dataset, context))
            print(f"budgetdraft paper: note: {dataset}/{context} was decoded by sampling ({kinds[0]}): outputs are "
                  "samples, not the AR tokens, so the token-for-token lossless check is skipped", file=sys.stderr)
    return sampled


def check_lossless(df: pd.DataFrame, mode: str = "error") -> None:
    """Every row's output_ids must equal the AR output of its (dataset, context, sample).

    Without an AR cell for that (dataset, context), the first cell (sorted by key) is the reference.
    ``mode="warn"`` reports mismatches on stderr instead of failing: with an fp16 verifier a batched verify and a
    single-token step can round a near-tie differently, so rare flips are not a decoding bug there.
    Sampling mode: see ``sampled_groups``."""
    ids = df["output_ids"].map(lambda a: np.asarray(a, dtype=np.int64).tobytes())
    sampled = sampled_groups(df)
    for (dataset, context), group in df.groupby(["dataset", "context"], sort=True):
        if (dataset, context) in sampled:
            continue
        keys = sorted({tuple(k) for k in group[KEY].itertuples(index=False)})
        ref_key = (AR, dataset, context, 0, 0)
        if ref_key not in keys:
            ref_key = keys[0]
        is_ref = np.ones(len(group), dtype=bool)
        for col, val in zip(KEY, ref_key):
            is_ref &= (group[col] == val).to_numpy()
        ref_rows = group[is_ref].sort_values("repeat")
        reference = dict(zip(ref_rows["sample"], ids.loc[ref_rows.index]))
        expected = group["sample"].map(reference)
        bad = expected.notna() & (expected != ids.loc[group.index])
        if bad.any():
            row = group.loc[bad[bad].index[0]]
            got = np.asarray(row["output_ids"], dtype=np.int64)
            want = np.frombuffer(reference[row["sample"]], dtype=np.int64)
            n = min(len(got), len(want))
            diff = np.flatnonzero(got[:n] != want[:n])
            where = f"first difference at token {diff[0]}" if len(diff) else f"lengths {len(got)} vs {len(want)}"
            key = tuple(row[KEY])
            message = (f"lossless check failed: cell {cell_name(key)} sample {row['sample']} repeat "
                       f"{row['repeat']} generated different output_ids than {cell_name(ref_key)} ({where}); "
                       f"{int(bad.sum())} row(s) of {dataset}/{context} differ")
            if mode != "warn":
                raise ValueError(message)
            print(f"budgetdraft paper: warning: {message}", file=sys.stderr)


class Grid:
    """Measured cells, indexed by (label, dataset, context, budget, gamma), with the paper's metrics."""

    def __init__(self, df: pd.DataFrame, check: bool = True, lossless: str = "error"):
        if check:
            check_lossless(df, lossless)
        if "device" in df.columns and df["device"].nunique() > 1:
            print(f"budgetdraft paper: warning: cells come from several devices: {sorted(df['device'].unique())}",
                  file=sys.stderr)
        self.df = df
        per_sample = df.groupby(KEY + ["sample"], sort=True).agg(
            time=("total_s", "mean"), accepted=("accepted", "sum"), drafted=("drafted", "sum"))
        self.samples = {tuple(k): g.droplevel(KEY) for k, g in per_sample.groupby(level=KEY, sort=False)}
        self.rows = {tuple(k): g for k, g in df.groupby(KEY, sort=False)}

    def has(self, key) -> bool:
        return tuple(key) in self.rows

    def need(self, *key):
        key = tuple(key)
        if key not in self.rows:
            raise ValueError(f"missing cell {cell_name(key)}: not among the --cells given")
        return key

    def gammas(self, label, dataset, context, budget) -> list[int]:
        return sorted(k[4] for k in self.rows if k[:4] == (label, dataset, context, budget))

    def ar_key(self, dataset, context):
        return self.need(AR, dataset, context, 0, 0)

    def sample_speedups(self, key) -> pd.Series:
        """AR per-sample time / method per-sample time, indexed by sample."""
        key = self.need(*key)
        ar_key = self.ar_key(key[1], key[2])
        method, ar = self.samples[key]["time"], self.samples[ar_key]["time"]
        if set(method.index) != set(ar.index):
            raise ValueError(f"cell {cell_name(key)} has samples {sorted(method.index)} but the AR cell "
                             f"{cell_name(ar_key)} has {sorted(ar.index)}")
        return ar.loc[method.index] / method

    def speedup(self, key) -> float:
        return float(self.sample_speedups(key).mean())

    def sample_acceptance(self, key) -> pd.Series:
        s = self.samples[self.need(*key)]
        return 100.0 * s["accepted"] / s["drafted"].where(s["drafted"] > 0)

    def acceptance(self, key) -> float:
        rows = self.rows[self.need(*key)]
        drafted = rows["drafted"].sum()
        return 100.0 * rows["accepted"].sum() / drafted if drafted > 0 else math.nan

    def ar_tok_s(self, dataset, context) -> float:
        return float(self.rows[self.ar_key(dataset, context)]["tok_per_s"].mean())

    @cached_property
    def memory(self) -> tuple[str, float, str]:
        """(unit, MB per unit, what `peak_mem_mb` measures) of these cells: CUDA's max_memory_allocated in GB as in
        the paper, or, on CPU, the bytes held in weights and KV caches in MB (a sparse cache moves it by < 1 MB)."""
        kinds = set(self.df["mem_kind"]) if "mem_kind" in self.df else {"cpu_peak_rss"}
        if kinds == {"cuda_max_allocated"}:
            return "GB", 1024.0, (r"peak GPU memory (\texttt{max\_memory\_allocated}), converted from "
                                  r"\texttt{peak\_mem\_mb}")
        if kinds == {"cpu_tensor_bytes"}:
            return "MB", 1.0, ("memory held in weights and KV caches, counted from the tensors on CPU (not VRAM: "
                               "activations and the process's other memory are not included)")
        raise ValueError(f"cells measure peak memory in different ways ({sorted(kinds)}): re-run the older cells")

    def peak(self, key) -> float:
        """Mean `peak_mem_mb` of a cell, in the unit of `memory`."""
        return float(self.rows[self.need(*key)]["peak_mem_mb"].mean()) / self.memory[1]


# -------------------------------------------------------------------------------------------- settings


@dataclass
class Settings:
    raw: dict

    def get(self, dotted: str):
        node = self.raw
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ValueError(f"settings: missing key '{dotted}'")
            node = node[part]
        return node

    @property
    def datasets(self) -> dict:
        return dict(self.get("datasets"))

    @property
    def contexts(self) -> list[str]:
        return [str(c) for c in self.get("contexts")]

    @property
    def budgets(self) -> list[int]:
        return [int(b) for b in self.get("budgets")]

    def sweep(self, grid: Grid, label, dataset, context, budgets=None) -> list[int]:
        """The gamma sweep at (dataset, context): settings `gammas[context]` if given (then every cell is
        required), else every gamma present for `label` at any budget; each gamma needs every budget."""
        budgets = self.budgets if budgets is None else budgets
        given = self.raw.get("gammas", {}).get(context) if isinstance(self.raw.get("gammas"), dict) else None
        if given is not None:
            gammas = sorted(int(g) for g in given)
        else:
            gammas = sorted({g for b in budgets for g in grid.gammas(label, dataset, context, b)})
            if not gammas:
                grid.need(label, dataset, context, budgets[0], "any")
        for g in gammas:
            for b in budgets:
                grid.need(label, dataset, context, b, g)
        return gammas


def parse_settings(text_or_path) -> Settings:
    return Settings(settings_dict(text_or_path))


def settings_dict(text_or_path) -> dict:
    """The settings as a plain dict, from a dict, a JSON string or a JSON file."""
    from budgetdraft.cli import json_object

    return json_object(text_or_path, "--settings")


# ------------------------------------------------------------------------------------------ formatting


@dataclass
class Table:
    """LaTeX being built, and where each number in it comes from."""

    lines: list[str] = field(default_factory=list)
    sources: list[tuple[str, str]] = field(default_factory=list)

    def num(self, value: float, source: str, unit: str = "") -> str:
        text = "--" if value is None or not math.isfinite(value) else f"{value:.2f}"
        self.sources.append((text, source))
        return text + (unit if text != "--" else "")

    def sp_acc(self, grid: Grid, key, times: bool = True) -> str:
        desc = cell_name(key)
        return (self.num(grid.speedup(key), f"speedup {desc}", X if times else "") + "/"
                + self.num(grid.acceptance(key), f"acceptance {desc}"))

    def ar(self, grid: Grid, dataset, context) -> str:
        return self.num(grid.ar_tok_s(dataset, context), f"AR tok/s {cell_name((AR, dataset, context, 0, 0))}")

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def row(self, cells) -> None:
        self.lines.append(" & ".join(cells).lstrip() + r" \\")


def set_text(values) -> str:
    return r"\{" + ",".join(str(v) for v in values) + r"\}"


def names_text(names) -> str:
    names = list(names)
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + ", and " + names[-1]


def objective(s: Settings, label: str, compact: bool = False) -> str:
    """L_A + λ·L_C of a trained variant, λ read from the variant's own `lambda_c` (settings `variants`)."""
    variant = s.get("variants").get(label)
    if variant is None or "lambda_c" not in variant:
        raise ValueError(f"settings: variants has no lambda_c for {label!r}")
    lam = float(variant["lambda_c"])
    sep = "" if compact else " "
    if lam == 0:
        return r"$\mathcal{L}_A$"
    weight = "" if lam == 1 else (f"{lam:g}" if compact else rf"{lam:g}\,")
    return rf"$\mathcal{{L}}_A{sep}+{sep}{weight}\mathcal{{L}}_C$"


def base_drafter_text(s: Settings) -> str:
    """What SD (sparse/full) decodes with: the paper's untrained drafter, or the base drafter trained here."""
    steps = int(s.raw.get("base_drafter_steps", 0))
    if not steps:
        return "untrained drafter"
    learned = ("the next tokens of text" if s.raw.get("base_drafter_teacher") == "text" else
               "the verifier's greedy tokens")
    return (rf"base drafter (the truncated model after {steps} steps on {learned} in short full-cache windows, "
            r"not trained by BudgetDraft)")


def count_word(n: int) -> str:
    return {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}.get(n, str(n))


def wrap(env: str, body: list[str], caption: str, label: str, tabcolsep: str, stretch: str,
         placement: str = "t") -> list[str]:
    return ([rf"\begin{{{env}}}[{placement}]", r"\centering", r"\small", rf"\setlength{{\tabcolsep}}{{{tabcolsep}}}",
             rf"\renewcommand{{\arraystretch}}{{{stretch}}}"] + body
            + [rf"\caption{{{caption}}}", rf"\label{{{label}}}", rf"\end{{{env}}}"])


def dataset_header(t: Table, datasets: dict, per: int, first: int, lead: int = 2, bar: bool = False) -> None:
    """`& & \\multicolumn{per}{c}{GS} & ...` and the cmidrules under it."""
    groups = []
    for i, name in enumerate(datasets.values()):
        align = "c|" if bar and i < len(datasets) - 1 else "c"
        groups.append(rf"\multicolumn{{{per}}}{{{align}}}{{{name}}}")
    t.add("& " * lead + " & ".join(groups) + r" \\")
    t.add("".join(rf"\cmidrule(lr){{{first + i * per}-{first + (i + 1) * per - 1}}}" for i in range(len(datasets))))


def context_blocks(t: Table, s: Settings, row_fn) -> None:
    """One `\\multirow` block per context, one row per budget; row_fn(context, budget) -> entries."""
    for i, context in enumerate(s.contexts):
        if i:
            t.add(r"\midrule")
        t.add(rf"\multirow{{{len(s.budgets)}}}{{*}}{{{context}}}")
        for budget in s.budgets:
            t.row([""] + [str(budget)] + row_fn(context, budget))


# ---------------------------------------------------------------------------------------------- tables


def best_run(grid: Grid, s: Settings, dataset, context, budget, by: str):
    """The BudgetDraft gamma with the best speedup (by='speedup') or acceptance; ties -> the other metric,
    then the smaller gamma."""
    best = None
    for g in s.sweep(grid, BD, dataset, context, [budget]):
        key = (BD, dataset, context, budget, g)
        sp, acc = grid.speedup(key), grid.acceptance(key)
        score = (sp, acc) if by == "speedup" else (acc, sp)
        score = tuple(-math.inf if math.isnan(v) else v for v in score)
        if best is None or score > best[0]:
            best = (score, g)
    return best[1]


def table_main(grid: Grid, s: Settings) -> Table:
    t, ds = Table(), s.datasets
    ncol = 2 + 3 * len(ds)
    spec = "ll " + " ".join("ccc" for _ in ds)
    body = []
    for panel, by, title in (("A", "speedup", "Best BudgetDraft speedup (per KV budget)"),
                             ("B", "acceptance", "Best BudgetDraft acceptance (per KV budget)")):
        p = Table(sources=t.sources)
        p.add(rf"\begin{{tabular}}{{{spec}}}", r"\toprule", rf"\multicolumn{{{ncol}}}{{l}}{{({panel}) {title}}} \\",
              r"\midrule")
        dataset_header(p, ds, 3, 3)
        p.row(["Context", "Budget"] + ["AR", SD_NAME, BD_NAME] * len(ds))
        p.add(r"\midrule")

        def entries(context, budget):
            out = []
            for dataset in ds:
                g = best_run(grid, s, dataset, context, budget, by)
                out += [p.ar(grid, dataset, context), p.sp_acc(grid, grid.need(SD, dataset, context, budget, g)),
                        p.sp_acc(grid, (BD, dataset, context, budget, g))]
            return out

        context_blocks(p, s, entries)
        p.add(r"\bottomrule", r"\end{tabular}")
        body += ([""] if not body else ["", r"\vspace{0.6em}", ""]) + p.lines
    caption = ("We report throughput in tok/s for AR, and speedup vs AR / acceptance rate (\\%) for SD (sparse/full) "
               "and BudgetDraft. For each KV budget, Panel (A) reports the run with the best BudgetDraft speedup, "
               "and Panel (B) the run with the best BudgetDraft acceptance; both show the corresponding "
               "SD (sparse/full) run. "
               rf"SD (sparse/full) uses the {base_drafter_text(s)}; BudgetDraft uses {objective(s, BD)}.")
    t.lines = wrap("table*", body + [""], caption, TABLES["main"], "1.4pt", "1.15")
    return t


def three_column_table(grid: Grid, s: Settings, labels, names, times: bool, caption: str, label: str,
                       ctx_head: str, bud_head: str) -> Table:
    """AR tok/s + two drafters as speedup/acc at gamma_fixed, per context x budget x dataset."""
    t, ds, g = Table(), s.datasets, int(s.get("gamma_fixed"))
    t.add(r"\begin{tabular}{ll " + " ".join("ccc" for _ in ds) + "}", r"\toprule")
    dataset_header(t, ds, 3, 3)
    t.row([ctx_head, bud_head] + ["AR", *names] * len(ds))
    t.add(r"\midrule")

    def entries(context, budget):
        out = []
        for dataset in ds:
            out.append(t.ar(grid, dataset, context))
            out += [t.sp_acc(grid, grid.need(lab, dataset, context, budget, g), times) for lab in labels]
        return out

    context_blocks(t, s, entries)
    t.add(r"\bottomrule", r"\end{tabular}")
    t.lines = wrap("table*", t.lines, caption, label, "2.5pt", "1.12", "t!" if label == TABLES["ablation_lc"] else "t")
    return t


def table_ablation_lc(grid: Grid, s: Settings) -> Table:
    g = s.get("gamma_fixed")
    la, bd = objective(s, LA_ONLY), objective(s, BD)
    caption = (rf"Ablation on multi-view sparse training at $\gamma={g}$. We report throughput in tok/s for AR, and "
               rf"speedup vs AR / acceptance rate (\%) for {la} and {bd}, under the same $\gamma$ and KV budget.")
    return three_column_table(grid, s, [LA_ONLY, BD], [la, bd], False, caption, TABLES["ablation_lc"], "Context",
                              "Budget")


def table_lambda(grid: Grid, s: Settings) -> Table:
    g = s.get("gamma_fixed")
    caption = (rf"$\lambda$ sensitivity at $\gamma={g}$ ({objective(s, BD)} vs {objective(s, LAMBDA1)}). Entries "
               r"report speedup vs AR / acceptance rate (\%) under the same $\gamma$, context length, and KV budget.")
    return three_column_table(grid, s, [BD, LAMBDA1], [objective(s, BD, True), objective(s, LAMBDA1, True)],
                              True, caption, TABLES["lambda"], "Ctx", "Bud")


def comparison_key(grid: Grid, s: Settings, label, dataset, context, gamma, required: bool):
    """A baseline's cell at (dataset, context, gamma): settings comparison.budgets[label] if given, else the
    only budget run, else the largest one (the 'full' setting)."""
    fixed = s.raw.get("comparison", {}).get("budgets", {}).get(label)
    if fixed is not None:
        key = (label, dataset, context, int(fixed), gamma)
        return grid.need(*key) if required else (key if grid.has(key) else None)
    budgets = sorted(k[3] for k in grid.rows if k[0] == label and k[1:3] == (dataset, context) and k[4] == gamma)
    if not budgets:
        if required:
            grid.need(label, dataset, context, max(s.budgets), gamma)
        return None
    return (label, dataset, context, budgets[-1], gamma)


def table_comparison(grid: Grid, s: Settings) -> Table:
    t = Table()
    dataset, gamma = s.get("comparison.dataset"), int(s.get("comparison.gamma"))
    contexts, sizes = [str(c) for c in s.get("comparison.contexts")], s.get("comparison.drafter_sizes")
    name = s.datasets.get(dataset, dataset)
    # comparison.baselines (optional): the baselines that were run, each then required; without it, every
    # baseline whose cells are given gets a row and the others are left out.
    enabled = s.raw["comparison"].get("baselines")
    t.add(r"\begin{tabular}{lcc}", r"\toprule")
    t.row(["Method", "Speedup", "Drafter"])
    for context in contexts:
        t.add(r"\midrule", rf"\multicolumn{{3}}{{c}}{{{context} context ({name}, $\gamma{{=}}{gamma}$)}} \\", r"\midrule")
        ar = grid.ar_key(dataset, context)
        t.row(["AR", t.num(grid.speedup(ar), f"speedup {cell_name(ar)}", X), "--"])
        for label in (SD, TRIFORCE, EAGLE3):
            if label != SD and enabled is not None and label not in enabled:
                continue
            required = label == SD or (enabled is not None and label in enabled)
            key = comparison_key(grid, s, label, dataset, context, gamma, required=required)
            if key is not None:
                t.row([METHOD_NAMES[label], t.num(grid.speedup(key), f"speedup {cell_name(key)}", X),
                       str(sizes.get(label, "--"))])
        for budget in s.budgets:
            key = grid.need(BD, dataset, context, budget, gamma)
            t.row([rf"BudgetDraft ($B{{=}}{budget}$)", t.num(grid.speedup(key), f"speedup {cell_name(key)}", X),
                   str(sizes.get(BD, "--"))])
    t.add(r"\bottomrule", r"\end{tabular}")
    caption = rf"Comparison with baselines on {name} at {names_text(contexts).replace(', and', ' and')} with $\gamma{{=}}{gamma}$."
    t.lines = wrap("table", t.lines, caption, TABLES["comparison"], "5pt", "1.15")
    return t


def table_single_budget(grid: Grid, s: Settings) -> Table:
    t = Table()
    dataset, context = s.get("single_budget.dataset"), str(s.get("single_budget.context"))
    gamma, trained = int(s.get("single_budget.gamma")), s.get("single_budget.trained_budget")
    t.add(r"\begin{tabular}{l" + "c" * len(s.budgets) + "}", r"\toprule")
    t.row(["Evaluating setting"] + [rf"$B{{=}}{b}$" for b in s.budgets])
    t.add(r"\midrule")
    for label, title in ((SINGLE, rf"Single-budget ($B{{=}}{trained}$)"), (BD, "Multi-budget")):
        t.row([title] + [t.sp_acc(grid, grid.need(label, dataset, context, b, gamma)) for b in s.budgets])
    t.add(r"\bottomrule", r"\end{tabular}")
    name = s.datasets.get(dataset, dataset)
    caption = (rf"Single-budget vs. multi-budget sparse training on {name} at {context} with $\gamma={gamma}$. "
               r"Entries report speedup vs AR / acceptance rate (\%). The single-budget variant is trained with a "
               rf"fixed sparse-cache budget $B{{=}}{trained}$, while multi-budget training samples from "
               rf"$B\in{set_text(s.budgets)}$.")
    t.lines = wrap("table*", t.lines, caption, TABLES["single_budget"], "5pt", "1.5", "t!")
    return t


def table_vram_gamma(grid: Grid, s: Settings) -> Table:
    """Peak memory vs gamma per context, averaged over budgets and datasets; '--' where gamma was not run."""
    t, ds = Table(), s.datasets
    run = {}  # context -> gammas run there (by SD or BudgetDraft); each needs both methods x budgets x datasets
    for context in s.contexts:
        given = s.raw.get("gammas", {}).get(context) if isinstance(s.raw.get("gammas"), dict) else None
        run[context] = (sorted(int(g) for g in given) if given is not None else
                        sorted({k[4] for k in grid.rows if k[0] in (SD, BD) and k[2] == context
                                and k[1] in ds and k[3] in s.budgets}))
    t.add(r"\begin{tabular}{c " + " ".join("cc" for _ in s.contexts) + "}", r"\toprule")
    t.add(r"$\gamma$ & " + " & ".join(rf"\multicolumn{{2}}{{c}}{{{c}}}" for c in s.contexts) + r" \\")
    t.add("".join(rf"\cmidrule(lr){{{2 + 2 * i}-{3 + 2 * i}}}" for i in range(len(s.contexts))))
    t.row([""] + [SD_NAME, BD_NAME] * len(s.contexts))
    t.add(r"\midrule")
    for g in sorted(set().union(*run.values())):
        entries = [str(g)]
        for context in s.contexts:
            for label in (SD, BD):
                if g not in run[context]:
                    entries.append("--")
                    continue
                keys = [grid.need(label, d, context, b, g) for d in ds for b in s.budgets]
                value = float(np.mean([grid.peak(k) for k in keys]))
                entries.append(t.num(value, f"mean peak {grid.memory[0]} of {label} at context={context}, "
                                            f"gamma={g} over {len(keys)} cells (every budget x dataset)"))
        t.row(entries)
    t.add(r"\bottomrule", r"\end{tabular}")
    unit, _, what = grid.memory
    caption = (rf"Peak memory ({unit}) vs draft length $\gamma$: {what}. For each context length and $\gamma$, values "
               rf"are averaged over KV budgets $B\in{set_text(s.budgets)}$ and the {count_word(len(ds))} datasets "
               rf"({names_text(ds.values())}). Missing entries indicate that $\gamma$ was not evaluated at that "
               r"context length.")
    t.lines = wrap("table*", t.lines, caption, TABLES["vram_gamma"], "5.0pt", "1.12")
    return t


def table_vram(grid: Grid, s: Settings) -> Table:
    t, ds, g = Table(), s.datasets, int(s.get("gamma_fixed"))
    t.add(r"\begin{tabular}{ll|" + "|".join("cc" for _ in ds) + "}", r"\toprule")
    dataset_header(t, ds, 2, 3, bar=True)
    t.row(["Context", "$B$"] + [SD_NAME, BD_NAME] * len(ds))
    t.add(r"\midrule")

    def entries(context, budget):
        out = []
        for dataset in ds:
            for label in (SD, BD):
                key = grid.need(label, dataset, context, budget, g)
                out.append(t.num(grid.peak(key), f"peak {grid.memory[0]} {cell_name(key)}"))
        return out

    context_blocks(t, s, entries)
    t.add(r"\bottomrule", r"\end{tabular}")
    unit, _, what = grid.memory
    caption = (rf"Peak memory usage ({unit}) at $\gamma={g}$: {what}, under the same context length and KV budget. "
               rf"SD (sparse/full) uses the {base_drafter_text(s)}; BudgetDraft uses {objective(s, BD)}.")
    t.lines = wrap("table*", t.lines, caption, TABLES["vram"], "4.5pt", "1.15")
    return t


TABLE_BUILDERS = {"main": table_main, "comparison": table_comparison, "ablation_lc": table_ablation_lc,
                  "lambda": table_lambda, "single_budget": table_single_budget, "vram_gamma": table_vram_gamma,
                  "vram": table_vram}


# -------------------------------------------------------------------------------------------- building


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def span(values) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}--{high:,}"


def evidence_text(grid: Grid) -> str:
    """How much stands behind each entry: prompts and timed runs per cell, drafted tokens per speculative cell."""
    cells = [rows for key, rows in grid.rows.items() if key[0] != AR]
    if not cells:
        return ""
    drafted = sorted(int(rows["drafted"].sum()) for rows in cells)
    return (f" Behind each entry: {span([rows['sample'].nunique() for rows in cells])} prompt(s) $\\times$ "
            f"{span([rows['repeat'].nunique() for rows in cells])} timed run(s); drafted tokens per speculative cell "
            f"{span(drafted)} (median {int(np.median(drafted)):,}).")


def timing_text(settings: Settings) -> str:
    """What the times include when the verifier's prefills were shared (``budgetdraft.prefill``)."""
    runs = int(settings.raw.get("verifier_prefill_runs", 0))
    if not runs:
        return ""
    return (f" Times include the verifier's prefill, computed once per prompt (median of {runs} timed runs) and"
            " charged to every method that decodes the prompt.")


def add_to_caption(table: Table, text: str) -> None:
    """Append ``text`` inside the table's ``\\caption{...}``."""
    i = next(i for i, line in enumerate(table.lines) if line.startswith(r"\caption{"))
    table.lines[i] = table.lines[i][:-1] + text + "}"


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
