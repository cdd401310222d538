"""Figures of the paper from measured cells (see `budgetdraft.evaluation.grid` for the metric definitions).

Each builder draws one figure from the grid and returns it with the values it plotted (JSON-able, by series);
`draw` writes OUT (PDF) and OUT with suffix .png atomically, and `budgetdraft.report.paper` records the values next to
them so that `paper.trace_file` can re-derive every plotted point from the cells.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from budgetdraft.base.atomic import atomic_path
from budgetdraft.base.jsonio import plain
from budgetdraft.base.methods import AR, SD
from budgetdraft.base.names import BD, METHOD_NAMES, policy_label
from budgetdraft.evaluation.grid import Grid
from budgetdraft.report.artifacts import NEVER, REGISTRY, SWEEP, Cells, figure
from budgetdraft.report.settings import Settings, with_dataset_names


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported when a figure is drawn, not when this module is: the workflow
    imports it to plan (its figures' registrations), and pyplot's second of imports was paid by every Snakemake run
    and every cluster job's Snakemake."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, out: Path) -> list[Path]:
    paths = []
    for path, fmt in ((out, "pdf"), (out.with_suffix(".png"), "png")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=200, bbox_inches="tight")
        paths.append(path)
    pyplot().close(fig)
    return paths


def replicate_sd(values) -> float:
    """Standard deviation over training replicates (NaN with one replicate: nothing to draw)."""
    values = np.asarray(values, dtype=float)
    return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def budget_mean_by_replicate(grid: Grid, keys, metric: str) -> np.ndarray:
    """Per training replicate, the mean over ``keys`` (one per budget) of the cell's acceptance or speedup."""
    per_key = [getattr(grid, f"replicate_{metric}")(k) for k in keys]
    return pd.concat(per_key, axis=1).mean(axis=1).to_numpy(dtype=float)


@figure("fig_collapse", "collapse", "fig:collapse", "Fig. 1", (Cells((SD,), where="collapse"),))
def fig_collapse(grid: Grid, s: Settings):
    """Acceptance of SD (sparse/full) vs context length, one line per budget (the largest labelled 'full'); error
    bars: the standard deviation over training replicates of the base drafter (when there are several)."""
    dataset, gamma = s.collapse.dataset, s.collapse.gamma
    contexts, budgets = s.contexts, sorted(s.budgets)
    lengths = [int(n) for n in s.context_tokens.values()]  # "full" is fewer tokens than every prompt
    fig, ax = pyplot().subplots(figsize=(4.8, 3.2))
    values = {}
    for budget in budgets:
        keys = [grid.need(SD, dataset, c, budget, gamma) for c in contexts]
        acc = [grid.acceptance(k) for k in keys]
        sd = [replicate_sd(grid.replicate_acceptance(k)) for k in keys]
        values[f"B={budget}"] = {"context": list(contexts), "acceptance": acc, "acceptance_replicate_sd": sd}
        label = f"full = {budget} tokens" if budget == budgets[-1] else f"$B={budget}$"
        ax.errorbar(range(len(contexts)), acc, yerr=np.nan_to_num(sd), marker="o", capsize=2, label=label)
    ax.set_xticks(range(len(contexts)), contexts)
    ax.set_xlabel("Context length")
    ax.set_ylabel("Acceptance (%)")
    ax.set_title(f"SD (sparse/full), {s.datasets.get(dataset, dataset)}, $\\gamma={gamma}$")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(
        title=f"KV budget (prompts: {min(lengths)}–{max(lengths)} tokens)" if lengths else "KV budget",
        fontsize=7,
        title_fontsize=7,
    )
    return fig, values


def gamma_series(grid: Grid, s: Settings, dataset, context, errorbars: bool) -> dict:
    """BudgetDraft vs γ at one (dataset, context), averaged over budgets: acceptance, speedup, the analytical
    speedup predicted from each cell's own α, γ and c (`budgetdraft.evaluation.grid`), the standard deviation over training
    replicates of the budget average, and with ``errorbars`` the std over (sample, budget) points of per-sample
    values."""
    gammas = s.sweep(grid, BD, dataset, context)
    out = {"gamma": list(gammas), **{k: [] for k in ("acceptance", "speedup", "predicted", "c")}}
    out.update({"acceptance_replicate_sd": [], "speedup_replicate_sd": []})
    if errorbars:
        out.update({"acceptance_std": [], "speedup_std": []})
    for g in gammas:
        keys = [(BD, dataset, context, b, g) for b in s.budgets]
        out["predicted"].append(np.mean([grid.predicted_speedup(k) for k in keys]))
        out["c"].append(np.mean([grid.cost(k) for k in keys]))
        for metric in ("acceptance", "speedup"):
            out[f"{metric}_replicate_sd"].append(replicate_sd(budget_mean_by_replicate(grid, keys, metric)))
        if errorbars:
            acc = np.concatenate([grid.sample_acceptance(k).to_numpy(dtype=float) for k in keys])
            sp = np.concatenate([grid.sample_speedups(k).to_numpy(dtype=float) for k in keys])
            out["acceptance"].append(np.nanmean(acc)), out["acceptance_std"].append(np.nanstd(acc))
            out["speedup"].append(np.mean(sp)), out["speedup_std"].append(np.std(sp))
        else:
            out["acceptance"].append(np.mean([grid.acceptance(k) for k in keys]))
            out["speedup"].append(np.mean([grid.speedup(k) for k in keys]))
    return out


def draw_line(ax, series: dict, metric: str, **style):
    """``series[metric]`` vs γ (`gamma_series`) with a shaded band of ± its std over replicates and, where the series
    has them, error bars of ± its std over samples."""
    x, y = np.asarray(series["gamma"]), np.asarray(series[metric], dtype=float)
    band, errors = np.asarray(series[f"{metric}_replicate_sd"], dtype=float), series.get(f"{metric}_std")
    if errors is not None:
        ax.errorbar(x, y, yerr=errors, capsize=2, **style)
    else:
        ax.plot(x, y, **style)
    if np.isfinite(band).any():
        ax.fill_between(x, y - band, y + band, color=style.get("color"), alpha=0.2, lw=0)
        if len(x) == 1:  # a band needs two points: one γ gets a bar instead
            ax.errorbar(x, y, yerr=band, color=style.get("color"), capsize=4, lw=2, alpha=0.4)


def gamma_ticks(ax, gammas) -> None:
    if len(gammas) <= 8:  # label every γ run (one γ alone would get fractional ticks)
        ax.set_xticks(sorted(gammas))
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def gamma_grid(grid: Grid, s: Settings, errorbars: bool):
    """BudgetDraft acceptance and speedup vs γ, averaged over budgets (`gamma_series`). When every context has a γ
    sweep, the paper's layout: rows contexts x cols datasets, acceptance (left axis) and speedup (right axis) in
    each panel. When some context has a single γ (a panel of one point is no plot), rows {acceptance, speedup} x
    cols datasets, one line per context. Bands: ± the standard deviation over training replicates."""
    ds = s.datasets
    series = {(c, d): gamma_series(grid, s, d, c, errorbars) for c in s.contexts for d in ds}
    values = {f"{c} {d}": v for (c, d), v in series.items()}
    if all(len(v["gamma"]) > 1 for v in series.values()):
        return paper_gamma_layout(series, s), values
    return context_lines_layout(series, s), values


def paper_gamma_layout(series: dict, s: Settings):
    ds = s.datasets
    fig, axes = pyplot().subplots(
        len(s.contexts), len(ds), figsize=(3.6 * len(ds), 2.8 * len(s.contexts)), squeeze=False
    )
    for i, context in enumerate(s.contexts):
        for j, (dataset, name) in enumerate(ds.items()):
            v, ax = series[context, dataset], axes[i][j]
            ax2 = ax.twinx()
            g = v["gamma"]
            draw_line(ax, v, "acceptance", color="C0", marker="o", ms=3, label="acceptance")
            draw_line(ax2, v, "speedup", color="C1", marker="s", ms=3, ls="--", label="speedup")
            ax2.plot(g, v["predicted"], color="C1", ls=":", label="predicted speedup")
            ax.set_title(f"{name}, {context}", fontsize=9)
            ax.set_ylim(0, 100)
            ax2.set_ylim(bottom=0)
            gamma_ticks(ax, g)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("Acceptance (%)", color="C0")
            if j == len(ds) - 1:
                ax2.set_ylabel("Speedup vs AR (×)", color="C1")
            if i == len(s.contexts) - 1:
                ax.set_xlabel(r"Draft length $\gamma$")
            if i == 0 and j == 0:
                lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
                ax.legend(lines, ["acceptance", "speedup", "predicted speedup"], fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def context_lines_layout(series: dict, s: Settings):
    ds = s.datasets
    fig, axes = pyplot().subplots(2, len(ds), figsize=(3.6 * len(ds), 5.2), squeeze=False, sharex=True)
    for j, (dataset, name) in enumerate(ds.items()):
        ax_acc, ax_sp = axes[0][j], axes[1][j]
        for k, context in enumerate(s.contexts):
            v, color = series[context, dataset], f"C{k}"
            g = v["gamma"]
            style = {"color": color, "marker": "os^vDP"[k % 6], "ms": 3, "label": context}
            draw_line(ax_acc, v, "acceptance", **style)
            draw_line(ax_sp, v, "speedup", **style)
            ax_sp.plot(g, v["predicted"], color=color, ls=":", lw=1)
        ax_acc.set_title(name, fontsize=9)
        ax_sp.axhline(1.0, color="gray", lw=0.8, ls=":")
        for ax in (ax_acc, ax_sp):
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        gamma_ticks(ax_sp, sorted({g for c in s.contexts for g in series[c, dataset]["gamma"]}))
        ax_sp.set_xlabel(r"Draft length $\gamma$")
        if j == 0:
            ax_acc.set_ylabel("Acceptance (%)")
            ax_sp.set_ylabel("Speedup vs AR (×; dotted: predicted)")
            ax_acc.legend(title="context", fontsize=7, title_fontsize=7)
    fig.tight_layout()
    return fig


@figure(
    "fig_gamma", "gamma_sensitivity", "fig:gamma_sensitivity_budget_avg", "Fig. 3", (Cells((AR,)), Cells((BD,), SWEEP))
)
def fig_gamma(grid: Grid, s: Settings):
    return gamma_grid(grid, s, errorbars=False)


@figure("fig_errorbar", "errorbar", "fig:errorbar", "App. B", (Cells((AR,)), Cells((BD,), SWEEP)))
def fig_errorbar(grid: Grid, s: Settings):
    return gamma_grid(grid, s, errorbars=True)


@figure(
    "fig_policies",
    "policies",
    "fig:policies",
    "not in the paper",
    (Cells((AR,), where="policies"), Cells(("policy_labels",), where="policies")),
    in_all=NEVER,
)
def fig_policies(grid: Grid, s: Settings):
    """rows contexts x cols {SD, BudgetDraft} x {acceptance, speedup}: each vs the budget B, one line per sparse
    policy (settings `policies`: names, dataset, gamma, and the config's default policy, whose cells have the
    plain labels)."""
    if s.policies is None:
        raise ValueError("settings: missing key 'policies'")
    pol = s.policies
    dataset, gamma, default, policies = pol.dataset, pol.gamma, pol.default, list(pol.names)
    budgets, contexts, drafters = sorted(s.budgets), s.contexts, (SD, BD)
    fig, axes = pyplot().subplots(
        len(contexts), 2 * len(drafters), figsize=(3.0 * 2 * len(drafters), 2.5 * len(contexts)), squeeze=False
    )
    values = {}
    for i, context in enumerate(contexts):
        for j, drafter in enumerate(drafters):
            ax_acc, ax_sp = axes[i][2 * j], axes[i][2 * j + 1]
            for k, policy in enumerate(policies):
                keys = [grid.need(policy_label(drafter, policy, default), dataset, context, b, gamma) for b in budgets]
                acc, sp = [grid.acceptance(key) for key in keys], [grid.speedup(key) for key in keys]
                values[f"{context} {drafter} {policy}"] = {"budget": budgets, "acceptance": acc, "speedup": sp}
                style = {"color": f"C{k}", "marker": "os^vDP"[k % 6], "ms": 3, "label": policy}
                ax_acc.plot(budgets, acc, **style)
                ax_sp.plot(budgets, sp, **style)
            ax_sp.axhline(1.0, color="gray", lw=0.8, ls=":")
            ax_acc.set_ylim(0, max(10.0, ax_acc.get_ylim()[1]))  # an all-zero panel still reads in percent
            for ax, what in ((ax_acc, "acceptance (%)"), (ax_sp, "speedup vs AR (×)")):
                ax.set_xscale("log", base=2)
                ax.set_xticks(budgets, [str(b) for b in budgets])
                ax.minorticks_off()
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
                ax.set_title(f"{METHOD_NAMES.get(drafter, drafter)}, {context}: {what}", fontsize=8)
                if i == len(contexts) - 1:
                    ax.set_xlabel("KV budget $B$ (tokens)")
    axes[0][0].legend(title="policy", fontsize=7, title_fontsize=7)
    fig.suptitle(f"Sparse policies, {s.datasets.get(dataset, dataset)}, $\\gamma={gamma}$", fontsize=10)
    fig.tight_layout()
    return fig, values


def plain_title(text: str) -> str:
    """A dataset's config `name` as matplotlib text that prints it as written (a '$' would start mathtext)."""
    return str(text).replace("$", r"\$")


def drawn(artifact: str, grid: Grid, s: Settings):
    """The declared figure ``artifact`` (budgetdraft.report.artifacts), datasets named as matplotlib prints them."""
    return with_dataset_names(REGISTRY[artifact].build, plain_title)(grid, s)


def plotted_values(artifact: str, grid: Grid, s: Settings) -> dict:
    """The values figure ``artifact`` plots, as plain floats (NaN where a point has no data)."""
    fig, values = drawn(artifact, grid, s)
    pyplot().close(fig)
    return plain(values)


def draw(artifact: str, grid: Grid, s: Settings, out: Path) -> tuple[list[Path], dict]:
    """Write figure ``artifact`` to ``out`` (.pdf) and its .png; return the paths and the plotted values."""
    fig, values = drawn(artifact, grid, s)
    return save(fig, out), plain(values)
