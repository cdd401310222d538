"""Figures of the paper from measured cells (see `budgetdraft.grid` for the metric definitions).

Each builder draws one figure from the grid and returns it with the values it plotted (JSON-able, by series);
`draw` writes OUT (PDF) and OUT with suffix .png atomically, and `budgetdraft.paper` records the values next to
them so that `paper.trace_file` can re-derive every plotted point from the cells.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from budgetdraft.atomic import atomic_path  # noqa: E402
from budgetdraft.grid import Grid, Settings  # noqa: E402
from budgetdraft.names import BD, METHOD_NAMES, SD, policy_label  # noqa: E402


def save(fig, out: Path) -> list[Path]:
    paths = []
    for path, fmt in ((out, "pdf"), (out.with_suffix(".png"), "png")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=200, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def fig_collapse(grid: Grid, s: Settings):
    """Acceptance of SD (sparse/full) vs context length, one line per budget (the largest labelled 'full')."""
    dataset, gamma = s.get("collapse.dataset"), int(s.get("collapse.gamma"))
    contexts, budgets = s.contexts, sorted(s.budgets)
    lengths = [int(n) for n in s.raw.get("context_tokens", {}).values()]  # "full" is fewer tokens than every prompt
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    values = {}
    for budget in budgets:
        acc = [grid.acceptance(grid.need(SD, dataset, c, budget, gamma)) for c in contexts]
        values[f"B={budget}"] = {"context": list(contexts), "acceptance": acc}
        label = f"full = {budget} tokens" if budget == budgets[-1] else f"$B={budget}$"
        ax.plot(range(len(contexts)), acc, marker="o", label=label)
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


def gamma_grid(grid: Grid, s: Settings, errorbars: bool):
    """rows contexts x cols datasets: BudgetDraft acceptance (left axis) and speedup (right axis) vs gamma,
    averaged over budgets, beside the analytical speedup predicted from each cell's own α, γ and c (dotted; see
    `budgetdraft.grid`). errorbars: mean +- std over (sample, budget) points of per-sample values."""
    ds = s.datasets
    fig, axes = plt.subplots(len(s.contexts), len(ds), figsize=(3.6 * len(ds), 2.8 * len(s.contexts)), squeeze=False)
    values = {}
    for i, context in enumerate(s.contexts):
        for j, (dataset, name) in enumerate(ds.items()):
            ax = axes[i][j]
            gammas = s.sweep(grid, BD, dataset, context)
            acc_m, acc_s, sp_m, sp_s, predicted, cost = [], [], [], [], [], []
            for g in gammas:
                keys = [(BD, dataset, context, b, g) for b in s.budgets]
                predicted.append(np.mean([grid.predicted_speedup(k) for k in keys]))
                cost.append(np.mean([grid.cost(k) for k in keys]))
                if errorbars:
                    acc = np.concatenate([grid.sample_acceptance(k).to_numpy(dtype=float) for k in keys])
                    sp = np.concatenate([grid.sample_speedups(k).to_numpy(dtype=float) for k in keys])
                    acc_m.append(np.nanmean(acc)), acc_s.append(np.nanstd(acc))
                    sp_m.append(np.mean(sp)), sp_s.append(np.std(sp))
                else:
                    acc_m.append(np.mean([grid.acceptance(k) for k in keys]))
                    sp_m.append(np.mean([grid.speedup(k) for k in keys]))
            values[f"{context} {dataset}"] = {
                "gamma": list(gammas),
                "acceptance": acc_m,
                "speedup": sp_m,
                "predicted": predicted,
                "c": cost,
                **({"acceptance_std": acc_s, "speedup_std": sp_s} if errorbars else {}),
            }
            ax2 = ax.twinx()
            if errorbars:
                ax.errorbar(gammas, acc_m, yerr=acc_s, color="C0", marker="o", ms=3, capsize=2, label="acceptance")
                ax2.errorbar(gammas, sp_m, yerr=sp_s, color="C1", marker="s", ms=3, capsize=2, ls="--", label="speedup")
            else:
                ax.plot(gammas, acc_m, color="C0", marker="o", ms=3, label="acceptance")
                ax2.plot(gammas, sp_m, color="C1", marker="s", ms=3, ls="--", label="speedup")
            ax2.plot(gammas, predicted, color="C1", ls=":", label="predicted speedup")
            ax.set_title(f"{name}, {context}", fontsize=9)
            ax.set_ylim(0, 100)
            ax2.set_ylim(bottom=0)
            if len(gammas) <= 8:  # label every γ run (one γ alone would get fractional ticks)
                ax.set_xticks(gammas)
            else:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
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
    return fig, values


def fig_gamma(grid: Grid, s: Settings):
    return gamma_grid(grid, s, errorbars=False)


def fig_errorbar(grid: Grid, s: Settings):
    return gamma_grid(grid, s, errorbars=True)


def fig_policies(grid: Grid, s: Settings):
    """rows contexts x cols {SD, BudgetDraft} x {acceptance, speedup}: each vs the budget B, one line per sparse
    policy (settings `policies`: names, dataset, gamma, and the config's default policy, whose cells have the
    plain labels)."""
    pol = s.get("policies")
    dataset, gamma, default, policies = pol["dataset"], int(pol["gamma"]), pol["default"], list(pol["names"])
    budgets, contexts, drafters = sorted(s.budgets), s.contexts, (SD, BD)
    fig, axes = plt.subplots(
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


FIGURE_BUILDERS = {
    "fig_collapse": fig_collapse,
    "fig_gamma": fig_gamma,
    "fig_errorbar": fig_errorbar,
    "fig_policies": fig_policies,
}


def plotted_values(artifact: str, grid: Grid, s: Settings) -> dict:
    """The values figure ``artifact`` plots, as plain floats (NaN where a point has no data)."""
    fig, values = FIGURE_BUILDERS[artifact](grid, s)
    plt.close(fig)
    return plain(values)


def draw(artifact: str, grid: Grid, s: Settings, out: Path) -> tuple[list[Path], dict]:
    """Write figure ``artifact`` to ``out`` (.pdf) and its .png; return the paths and the plotted values."""
    fig, values = FIGURE_BUILDERS[artifact](grid, s)
    return save(fig, out), plain(values)


def plain(values):
    """``values`` with numpy scalars turned into Python floats / ints, so they compare equal after JSON."""
    if isinstance(values, dict):
        return {str(k): plain(v) for k, v in values.items()}
    if isinstance(values, (list, tuple)):
        return [plain(v) for v in values]
    if isinstance(values, (np.integer, int)) and not isinstance(values, bool):
        return int(values)
    if isinstance(values, (np.floating, float)):
        return float(values)
    return values
