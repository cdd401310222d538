"""The paper's seven LaTeX tables, laid out from a `Grid` of measured cells (metrics defined in `budgetdraft.evaluation.grid`).

Each builder returns a `Table`: its LaTeX lines and, for every number in them, the cells it comes from (what
`budgetdraft.report.paper.trace` checks a written table against).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from budgetdraft.base import methods
from budgetdraft.base.methods import AR, SD
from budgetdraft.base.names import BD, LA_ONLY, LAMBDA1, METHOD_NAMES, SINGLE, extra_variants
from budgetdraft.evaluation.grid import Grid, cell_name
from budgetdraft.report.artifacts import OTHER_VARIANTS, REGISTRY, SWEEP, Cells, label_of, table
from budgetdraft.report.settings import Settings, with_dataset_names

SD_NAME, BD_NAME = METHOD_NAMES[SD], METHOD_NAMES[BD]
COMPARED = [  # the comparison table's method rows: SD and the baselines (the copier has no drafter to count)
    label for label, m in methods.REGISTRY.items() if m.comparison or m.enabled_by == "baselines"
]
X = r"$\times$"


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
        return (
            self.num(grid.speedup(key), f"speedup {desc}", X if times else "")
            + "/"
            + self.num(grid.acceptance(key), f"acceptance {desc}")
        )

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
    if s.variant(label).lambda_c is None:
        raise ValueError(f"settings: variants has no lambda_c for {label!r}")
    lam = float(s.variant(label).lambda_c)
    sep = "" if compact else " "
    if lam == 0:
        return r"$\mathcal{L}_A$"
    weight = "" if lam == 1 else (f"{lam:g}" if compact else rf"{lam:g}\,")
    return rf"$\mathcal{{L}}_A{sep}+{sep}{weight}\mathcal{{L}}_C$"


def base_drafter_text(s: Settings) -> str:
    """What SD (sparse/full) decodes with: the paper's untrained drafter, or the base drafter trained here."""
    steps = int(s.base_drafter_steps)
    if not steps:
        return "untrained drafter"
    learned = "the next tokens of text" if s.base_drafter_teacher == "text" else "the verifier's greedy tokens"
    return (
        rf"base drafter (the truncated model after {steps} steps on {learned} in short full-cache windows, "
        r"not trained by BudgetDraft)"
    )


def count_word(n: int) -> str:
    return {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}.get(n, str(n))


def wrap(
    env: str, body: list[str], caption: str, label: str, tabcolsep: str, stretch: str, placement: str = "t"
) -> list[str]:
    return (
        [
            rf"\begin{{{env}}}[{placement}]",
            r"\centering",
            r"\small",
            rf"\setlength{{\tabcolsep}}{{{tabcolsep}}}",
            rf"\renewcommand{{\arraystretch}}{{{stretch}}}",
        ]
        + body
        + [rf"\caption{{{caption}}}", rf"\label{{{label}}}", rf"\end{{{env}}}"]
    )


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


@table("main", "tab:best_speedup_and_accept_per_budget", "Table 1", (Cells((AR,)), Cells((SD, BD), SWEEP)))
def table_main(grid: Grid, s: Settings) -> Table:
    t, ds = Table(), s.datasets
    ncol = 2 + 3 * len(ds)
    spec = "ll " + " ".join("ccc" for _ in ds)
    body = []
    for panel, by, title in (
        ("A", "speedup", "Best BudgetDraft speedup (per KV budget)"),
        ("B", "acceptance", "Best BudgetDraft acceptance (per KV budget)"),
    ):
        p = Table(sources=t.sources)
        p.add(
            rf"\begin{{tabular}}{{{spec}}}",
            r"\toprule",
            rf"\multicolumn{{{ncol}}}{{l}}{{({panel}) {title}}} \\",
            r"\midrule",
        )
        dataset_header(p, ds, 3, 3)
        p.row(["Context", "Budget"] + ["AR", SD_NAME, BD_NAME] * len(ds))
        p.add(r"\midrule")

        def entries(context, budget, p=p, by=by):  # called at once, in this iteration
            out = []
            for dataset in ds:
                g = best_run(grid, s, dataset, context, budget, by)
                out += [
                    p.ar(grid, dataset, context),
                    p.sp_acc(grid, grid.need(SD, dataset, context, budget, g)),
                    p.sp_acc(grid, (BD, dataset, context, budget, g)),
                ]
            return out

        context_blocks(p, s, entries)
        p.add(r"\bottomrule", r"\end{tabular}")
        body += ([""] if not body else ["", r"\vspace{0.6em}", ""]) + p.lines
    caption = (
        "We report throughput in tok/s for AR, and speedup vs AR / acceptance rate (\\%) for SD (sparse/full) "
        "and BudgetDraft. For each KV budget, Panel (A) reports the run with the best BudgetDraft speedup, "
        "and Panel (B) the run with the best BudgetDraft acceptance; both show the corresponding "
        "SD (sparse/full) run. "
        rf"SD (sparse/full) uses the {base_drafter_text(s)}; BudgetDraft uses {objective(s, BD)}."
    )
    t.lines = wrap("table*", body + [""], caption, label_of("main"), "1.4pt", "1.15")
    return t


def three_column_table(
    grid: Grid, s: Settings, labels, names, times: bool, caption: str, label: str, ctx_head: str, bud_head: str
) -> Table:
    """AR tok/s + the drafters ``labels`` (two in the paper's tables) as speedup/acc at gamma_fixed, per context x
    budget x dataset."""
    t, ds, g = Table(), s.datasets, s.gamma_fixed
    per = 1 + len(labels)
    t.add(r"\begin{tabular}{ll " + " ".join("c" * per for _ in ds) + "}", r"\toprule")
    dataset_header(t, ds, per, 3)
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
    t.lines = wrap(
        "table*", t.lines, caption, label, "2.5pt", "1.12", "t!" if label == label_of("ablation_lc") else "t"
    )
    return t


@table("ablation_lc", "tab:ablation_lc", "Table 3", (Cells((AR,)), Cells((LA_ONLY, BD))))
def table_ablation_lc(grid: Grid, s: Settings) -> Table:
    g = s.gamma_fixed
    la, bd = objective(s, LA_ONLY), objective(s, BD)
    caption = (
        rf"Ablation on multi-view sparse training at $\gamma={g}$. We report throughput in tok/s for AR, and "
        rf"speedup vs AR / acceptance rate (\%) for {la} and {bd}, under the same $\gamma$ and KV budget."
    )
    return three_column_table(
        grid, s, [LA_ONLY, BD], [la, bd], False, caption, label_of("ablation_lc"), "Context", "Budget"
    )


def lambda_of(s: Settings, label: str) -> float:
    if s.variant(label).lambda_c is None:
        raise ValueError(f"settings: variants has no lambda_c for {label!r}")
    return float(s.variant(label).lambda_c)


def lambda_labels(s: Settings) -> list[str]:
    """The λ table's variants in order of λ (ties: by label): BudgetDraft, λ = 1.0, and every variant beyond the
    paper's four that the settings list (the workflow lists the λ variants there: `names.lambda_variants`)."""
    return sorted([BD, LAMBDA1] + extra_variants(s.variants), key=lambda label: (lambda_of(s, label), label))


def lambda_names(s: Settings, labels, compact: bool = False) -> list[str]:
    """Each variant's objective; one that prints like another's (λ = 0.5 and 0.5000001 both print 0.5) also names
    its variant, so that no two columns of different numbers read alike."""
    texts = [objective(s, label, compact) for label in labels]
    return [
        text + rf" (\texttt{{{latex_text(label)}}})" if texts.count(text) > 1 else text
        for text, label in zip(texts, labels)
    ]


@table("lambda", "tab:lambda_sensitivity_full", "App. C", (Cells((AR,)), Cells(("lambda_variants",))))
def table_lambda(grid: Grid, s: Settings) -> Table:
    g, labels = s.gamma_fixed, lambda_labels(s)
    caption = (
        rf"$\lambda$ sensitivity at $\gamma={g}$ ({' vs '.join(lambda_names(s, labels))}). Entries "
        r"report speedup vs AR / acceptance rate (\%) under the same $\gamma$, context length, and KV budget."
    )
    return three_column_table(
        grid,
        s,
        labels,
        lambda_names(s, labels, True),
        True,
        caption,
        label_of("lambda"),
        "Ctx",
        "Bud",
    )


def variant_text(s: Settings, label: str) -> str:
    """A trained variant's hyper-parameters as the settings give them: its objective (λ), training budgets, steps."""
    v = s.variant(label)
    parts = [objective(s, label)] if v.lambda_c is not None else []
    parts += [rf"trained at $B\in{set_text(v.budgets)}$"] if v.budgets else []
    parts += [f"{int(v.steps)} steps"] if v.steps is not None else []
    return ", ".join(parts) or "hyper-parameters not given"


@table(
    "variants",
    "tab:extra_variants",
    "not in the paper",
    (Cells((AR,)), Cells((BD, "other_variants"))),
    in_all=OTHER_VARIANTS,
)
def table_variants(grid: Grid, s: Settings) -> Table:
    """The variants beyond the paper's four that the settings list (the workflow lists those that are not λ
    variants: they have the λ table), beside BudgetDraft, at gamma_fixed; their hyper-parameters in the caption."""
    g, extra = s.gamma_fixed, extra_variants(s.variants)
    heads = [BD_NAME] + [rf"\multicolumn{{1}}{{c}}{{\texttt{{{latex_text(label)}}}}}" for label in extra]
    listed = "; ".join(rf"\texttt{{{latex_text(label)}}}: {variant_text(s, label)}" for label in extra)
    caption = (
        (
            rf"Variants beyond the paper's (config \texttt{{variants}}) at $\gamma={g}$, each trained as BudgetDraft "
            rf"({variant_text(s, BD)}) but for its own hyper-parameters: {listed}."
        )
        if extra
        else rf"No variants beyond the paper's in this configuration (config \texttt{{variants}}): BudgetDraft alone at $\gamma={g}$."
    ) + r" Entries report speedup vs AR / acceptance rate (\%) under the same $\gamma$, context length, and KV budget."
    return three_column_table(grid, s, [BD] + extra, heads, True, caption, label_of("variants"), "Ctx", "Bud")


def comparison_key(grid: Grid, s: Settings, label, dataset, context, gamma, required: bool):
    """A baseline's cell at (dataset, context, gamma): settings comparison.budgets[label] if given, else the
    only budget run, else the largest one (the 'full' setting)."""
    fixed = s.comparison.budget_of(label)
    if fixed is not None:
        key = (label, dataset, context, fixed, gamma)
        return grid.need(*key) if required else (key if grid.has(key) else None)
    budgets = sorted(k[3] for k in grid.rows if k[0] == label and k[1:3] == (dataset, context) and k[4] == gamma)
    if not budgets:
        if required:
            grid.need(label, dataset, context, max(s.budgets), gamma)
        return None
    return (label, dataset, context, budgets[-1], gamma)


@table(
    "comparison",
    "tab:comparison",
    "Table 2",
    (Cells((AR,), where="comparison"), Cells((SD, BD, "baselines"), where="comparison")),
)
def table_comparison(grid: Grid, s: Settings) -> Table:
    t = Table()
    dataset, gamma = s.comparison.dataset, s.comparison.gamma
    contexts, sizes = s.comparison.contexts, s.comparison.drafter_sizes
    name = s.datasets.get(dataset, dataset)
    # comparison.baselines (optional): the baselines that were run, each then required; without it, every
    # baseline whose cells are given gets a row and the others are left out.
    enabled = s.comparison.baselines
    t.add(r"\begin{tabular}{lcc}", r"\toprule")
    t.row(["Method", "Speedup", "Drafter"])
    for context in contexts:
        t.add(
            r"\midrule", rf"\multicolumn{{3}}{{c}}{{{context} context ({name}, $\gamma{{=}}{gamma}$)}} \\", r"\midrule"
        )
        ar = grid.ar_key(dataset, context)
        t.row(["AR", t.num(grid.speedup(ar), f"speedup {cell_name(ar)}", X), "--"])
        for label in COMPARED:
            optional = bool(methods.get(label).enabled_by)
            if optional and enabled is not None and label not in enabled:
                continue
            required = not optional or (enabled is not None and label in enabled)
            key = comparison_key(grid, s, label, dataset, context, gamma, required=required)
            if key is not None:
                t.row(
                    [
                        METHOD_NAMES[label],
                        t.num(grid.speedup(key), f"speedup {cell_name(key)}", X),
                        str(sizes.get(label, "--")),
                    ]
                )
        for budget in s.budgets:
            key = grid.need(BD, dataset, context, budget, gamma)
            t.row(
                [
                    rf"BudgetDraft ($B{{=}}{budget}$)",
                    t.num(grid.speedup(key), f"speedup {cell_name(key)}", X),
                    str(sizes.get(BD, "--")),
                ]
            )
    t.add(r"\bottomrule", r"\end{tabular}")
    caption = rf"Comparison with baselines on {name} at {names_text(contexts).replace(', and', ' and')} with $\gamma{{=}}{gamma}$."
    t.lines = wrap("table", t.lines, caption, label_of("comparison"), "5pt", "1.15")
    return t


@table(
    "single_budget",
    "tab:single_budget_ablation",
    "App. E",
    (Cells((AR,), where="single_budget"), Cells((SINGLE, BD), where="single_budget")),
)
def table_single_budget(grid: Grid, s: Settings) -> Table:
    t = Table()
    dataset, context = s.single_budget.dataset, s.single_budget.context
    gamma, trained = s.single_budget.gamma, s.single_budget.trained_budget
    t.add(r"\begin{tabular}{l" + "c" * len(s.budgets) + "}", r"\toprule")
    t.row(["Evaluating setting"] + [rf"$B{{=}}{b}$" for b in s.budgets])
    t.add(r"\midrule")
    for label, title in ((SINGLE, rf"Single-budget ($B{{=}}{trained}$)"), (BD, "Multi-budget")):
        t.row([title] + [t.sp_acc(grid, grid.need(label, dataset, context, b, gamma)) for b in s.budgets])
    t.add(r"\bottomrule", r"\end{tabular}")
    name = s.datasets.get(dataset, dataset)
    caption = (
        rf"Single-budget vs. multi-budget sparse training on {name} at {context} with $\gamma={gamma}$. "
        r"Entries report speedup vs AR / acceptance rate (\%). The single-budget variant is trained with a "
        rf"fixed sparse-cache budget $B{{=}}{trained}$, while multi-budget training samples from "
        rf"$B\in{set_text(s.budgets)}$."
    )
    t.lines = wrap("table*", t.lines, caption, label_of("single_budget"), "5pt", "1.5", "t!")
    return t


@table("vram_gamma", "tab:peak_vram_gamma_full", "App. A (vs γ)", (Cells((AR,)), Cells((SD, BD), SWEEP)))
def table_vram_gamma(grid: Grid, s: Settings) -> Table:
    """Peak memory vs gamma per context, averaged over budgets and datasets; '--' where gamma was not run."""
    t, ds = Table(), s.datasets
    run = {}  # context -> gammas run there (by SD or BudgetDraft); each needs both methods x budgets x datasets
    for context in s.contexts:
        given = s.given_gammas(context)
        run[context] = (
            given
            if given is not None
            else sorted(
                {k[4] for k in grid.rows if k[0] in (SD, BD) and k[2] == context and k[1] in ds and k[3] in s.budgets}
            )
        )
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
                entries.append(
                    t.num(
                        value,
                        f"mean peak {grid.memory[0]} of {label} at context={context}, "
                        f"gamma={g} over {len(keys)} cells (every budget x dataset)",
                    )
                )
        t.row(entries)
    t.add(r"\bottomrule", r"\end{tabular}")
    unit, _, what = grid.memory
    caption = (
        rf"Peak memory ({unit}) vs draft length $\gamma$: {what}. For each context length and $\gamma$, values "
        rf"are averaged over KV budgets $B\in{set_text(s.budgets)}$ and the {count_word(len(ds))} datasets "
        rf"({names_text(ds.values())}). Missing entries indicate that $\gamma$ was not evaluated at that "
        r"context length."
    )
    t.lines = wrap("table*", t.lines, caption, label_of("vram_gamma"), "5.0pt", "1.12")
    return t


@table("vram", "tab:peak_vram", "App. A", (Cells((AR,)), Cells((SD, BD))))
def table_vram(grid: Grid, s: Settings) -> Table:
    t, ds, g = Table(), s.datasets, s.gamma_fixed
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
    caption = (
        rf"Peak memory usage ({unit}) at $\gamma={g}$: {what}, under the same context length and KV budget. "
        rf"SD (sparse/full) uses the {base_drafter_text(s)}; BudgetDraft uses {objective(s, BD)}."
    )
    t.lines = wrap("table*", t.lines, caption, label_of("vram"), "4.5pt", "1.15")
    return t


LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_text(text: str) -> str:
    """Plain text (a dataset's config `name`, e.g. ``Q&A 100% \\input{x}``) as LaTeX that prints it as written."""
    return "".join(LATEX_SPECIALS.get(ch, ch) for ch in str(text))


def laid_out(artifact: str, grid: Grid, s: Settings) -> Table:
    """The declared table ``artifact`` (budgetdraft.report.artifacts), datasets named as LaTeX prints them."""
    return with_dataset_names(REGISTRY[artifact].build, latex_text)(grid, s)


# ------------------------------------------------------------------------------------------------ captions
