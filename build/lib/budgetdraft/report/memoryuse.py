"""The paper's memory findings F8a (equal peak memory), F8b-B (the drafter cache grows with B) and F8b-ctx (it does not
grow with the context), judged on this run's cells (the statistics: `budgetdraft.report.findings`' docstring).
"""

from __future__ import annotations

import numpy as np

from budgetdraft.base.methods import SD
from budgetdraft.base.names import BD
from budgetdraft.report.bootstrap import ratio
from budgetdraft.report.evidence import Evidence
from budgetdraft.report.findings import PAPER, at, no_cells
from budgetdraft.report.verdicts import (
    NOT_MEASURED,
    UNMET,
    Finding,
)


def mem_kinds(ev: Evidence, keys) -> str:
    kinds = sorted(ev.rows(keys)["mem_kind"].dropna().astype(str).unique())
    return ", ".join(kinds) if kinds else "mem_kind not recorded"


def memory(ev: Evidence) -> list[Finding]:
    fa = Finding(
        "F8a",
        "BudgetDraft's peak memory ≈ SD's (ratio of mean peak_mem_mb in [0.95, 1.05])",
        PAPER["F8a"].text(),
        unit="ratio",
    )
    fb = Finding(
        "F8b-B",
        "the drafter cache grows with B (mean drafter_kv_mb at the largest B ÷ at the smallest)",
        PAPER["F8b-B"].text(),
        unit="ratio",
    )
    fc = Finding(
        "F8b-ctx",
        "at fixed B the drafter cache does not grow with context (max ÷ min over contexts, worst B, in [0.9, 1.1])",
        PAPER["F8b-ctx"].text(),
        unit="ratio",
    )
    places = ev.places([SD, BD], ev.gamma)
    if not places:
        return [f.absent(no_cells([SD, BD], f"at γ={ev.gamma}")) for f in (fa, fb, fc)]
    arms = {SD: at(SD, places, ev.gamma), BD: at(BD, places, ev.gamma)}
    bd, sd = ev.mean(arms[BD], "peak_mem_mb"), ev.mean(arms[SD], "peak_mem_mb")
    fa.measure(ev, ratio(bd, sd), arms).judge_within((0.95, 1.05))
    fa.detail = f"BD {bd[0]:.1f} MB vs SD {sd[0]:.1f} MB (peak_mem_mb: {mem_kinds(ev, arms[SD] + arms[BD])})"
    if fa.verdict in UNMET:
        fa.why = f"BudgetDraft's peak is {bd[0]:.1f} MB vs SD's {sd[0]:.1f} MB"
    keys = arms[SD] + arms[BD]
    if not ev.measured(keys, "drafter_kv_mb"):
        return [fa] + [f.absent("cells have no drafter_kv_mb", NOT_MEASURED) for f in (fb, fc)]
    return [fa, cache_growth(ev, fb, keys), cache_flatness(ev, fc, keys)]


def cache_growth(ev: Evidence, f: Finding, keys) -> Finding:
    small, large = min(k[3] for k in keys), max(k[3] for k in keys)
    if small == large:
        return f.absent("drafter_kv_mb measured at one budget only")
    arms = {f"sd+{BD} B={b}": [k for k in keys if k[3] == b] for b in (large, small)}
    big, little = (ev.mean(arms[f"sd+{BD} B={b}"], "drafter_kv_mb") for b in (large, small))
    f.measure(ev, ratio(big, little), arms).judge(">", 1.0)
    f.detail = f"{big[0]:.2f} MB at B={large} vs {little[0]:.2f} MB at B={small}"
    if f.verdict in UNMET:
        f.why = f"the drafter cache is {big[0]:.2f} MB at B={large} and {little[0]:.2f} MB at B={small}"
    return f


def cache_flatness(ev: Evidence, f: Finding, keys) -> Finding:
    per_budget = {}
    for budget in sorted({k[3] for k in keys}):
        contexts = [c for c in ev.contexts if any(k[2] == c and k[3] == budget for k in keys)]
        if len(contexts) > 1:
            mb = np.column_stack(
                [ev.mean([k for k in keys if k[2] == c and k[3] == budget], "drafter_kv_mb") for c in contexts]
            )
            per_budget[budget] = (contexts, mb)
    if not per_budget:
        return f.absent("drafter_kv_mb not measured at two contexts of one budget")
    worst = np.max([ratio(mb.max(axis=1), mb.min(axis=1)) for _, mb in per_budget.values()], axis=0)
    f.measure(ev, worst, {f"sd+{BD}": [k for k in keys if k[3] in per_budget]}).judge_within((0.9, 1.1))
    budget = max(per_budget, key=lambda b: ratio(per_budget[b][1][0].max(), per_budget[b][1][0].min()))
    contexts, mb = per_budget[budget]
    f.detail = f"worst B={budget}: " + ", ".join(f"{c} {v:.2f} MB" for c, v in zip(contexts, mb[0]))
    if f.verdict in UNMET:
        f.why = f"at B={budget} the drafter cache goes from {mb[0].min():.2f} to {mb[0].max():.2f} MB across contexts"
    return f
