"""The paper's findings, each judged on this run's cells: the statistic, the arms it compares and the verdict rule.

γ_f = settings `gamma_fixed`; "pooled" sums over datasets and budgets (and contexts where said), using only the
(dataset, context, budget) places where every arm of the finding has a cell; contexts are ordered as settings
`contexts` lists them (shortest first). Labels: SD = `sd` (base drafter, sparse cache), BD = `lambda0.5`
(BudgetDraft), L_A only = `la_only`, λ = 1.0 = `lambda1.0`, single-budget = `single_budget`. Intervals and
verdicts: `budgetdraft.report.bootstrap`, `budgetdraft.report.verdicts`; the paper's own figure of each finding: `PAPER`.

  acceptance acc(S)   100 · Σ accepted / Σ drafted over the rows of the cells S (%)
  speedup sp(S)       mean over the prompts of S of AR per-prompt time / method per-prompt time, per-prompt time =
                      mean `total_s` over repeats (`grid.Grid.sample_speedups`; AR = label `ar` of the same
                      dataset and context)
  mean memory m(S, x) mean of column x over the rows of S
  F1 collapse         acc(SD at the longest context) − acc(SD at the shortest), pooled at γ_f; paper: < 0
  F2 recovery         per context: acc(BD) − acc(SD) (and acc(BD) / acc(SD)), pooled at γ_f; paper: > 0
  F3 robustness       spread(L) = mean over contexts of [max over B − min over B of acc(L at context, B)] (pooled
                      over datasets); F3 = spread(BD) − spread(SD) at γ_f; paper: < 0.  Diagnostic
                      F3-SD = acc(SD at the largest B) − acc(SD at the smallest B), pooled at γ_f: an interval holding
                      0 means the budget costs SD nothing, and F3/F4 cannot show
  F4 L_C matters      acc(BD) − acc(L_A only) at the smaller half of the budgets (at least one), pooled at γ_f;
                      paper: > 0
  F5 multi-budget     acc(BD) − acc(single-budget) at the budgets other than settings `single_budget.trained_budget`,
                      on settings `single_budget` dataset / context / γ; paper: > 0
  F6 λ = 1.0          acc(λ = 1.0) / acc(BD), pooled at γ_f; equivalence margin [0.9, 1.1]
  F7 speedup          per context: sp of the BD (B, γ) with the highest point speedup (pooled over datasets; chosen
                      once on the point estimate, the interval does not include that choice); paper: > 1.
                      Prediction (1 − α^(γ+1)) / ((1 − α)(γc + 1)) with α = acc / 100 of that cell and
                      c = (Σ draft_s / Σ draft_steps) / (Σ AR verify_s / Σ AR (new_tokens − 1)) over its datasets
  E1 (ours, not the paper's): per context, on a graphs run, sp(BD) over a graphs AR ÷ sp(BD+eager) over an eager
                      AR, at γ_f on the comparison dataset, pooled over budgets: how much of the speedup survives
                      a fast baseline (a diagnostic: the paper claims nothing about it)
  F8a peak memory     m(BD, peak_mem_mb) / m(SD, peak_mem_mb) at γ_f; equivalence margin [0.95, 1.05]
  F8b-B drafter cache m(SD+BD at the largest B, drafter_kv_mb) / m(SD+BD at the smallest B, ...) at γ_f; paper: > 1
  F8b-ctx             max over B of [max over contexts / min over contexts of m(SD+BD at context, B, drafter_kv_mb)]
                      at γ_f; equivalence margin [0.9, 1.1]
  CP (ours)           per context: acc(BD) / acc(lookup), the prompt-lookup copier with no parameters, pooled at γ_f;
                      judged > 1 (CP-long: the same on the `long_generation` cells); `budgetdraft.report.copying`

F1-F6 live here, F7 and E1 in `budgetdraft.report.speedups`, F8 in `budgetdraft.report.memoryuse`; `claims.all_findings`
lists them in the report's order. Memory figures barely vary across prompts, so their interval is close to the point value; the same rule applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from budgetdraft.base.methods import PI, SD
from budgetdraft.base.names import BD, LA_ONLY, LAMBDA1, SD_FULL, SINGLE
from budgetdraft.report.bootstrap import estimate, ratio
from budgetdraft.report.evidence import Evidence
from budgetdraft.report.verdicts import (
    DIAGNOSTIC,
    FAILS,
    OPEN,
    UNMET,
    Finding,
)


@dataclass(frozen=True)
class PaperFigure:
    """What the paper reports for one finding: the setting, then its numbers read left to right, each with what it
    is of; ``relation`` joins them ('→' a change, 'vs' a comparison). A claim the paper makes without a number has
    no values. An int is a number the paper gives to the unit."""

    setting: str
    values: tuple[tuple[float, str], ...] = ()
    relation: str = "vs"
    unit: str = " %"

    def number(self, value) -> str:
        return str(value) if isinstance(value, int) else f"{value:.2f}"

    def text(self) -> str:
        if not self.values:
            return self.setting
        shown = (f"{self.number(v)}{self.unit}" + (f" ({what})" if what else "") for v, what in self.values)
        return f"{self.setting}: " + f" {self.relation} ".join(shown)


# The paper's figure for each finding (acceptance in %, speedup in ×): the one place its numbers live.
PAPER = {
    "F1": PaperFigure("GS B=256", ((55.42, "4K"), (0.30, "8K"), (0.51, "16K")), "→"),
    "F2": PaperFigure("e.g. 8K GS", ((75, ""), (0.14, "SD"))),
    "F3-SD": PaperFigure("SD's acceptance depends on B"),
    "F3": PaperFigure("BudgetDraft flat across B, SD not (Tables main / ablation)"),
    "F4": PaperFigure("GS 4K B=1024", ((57.54, "L_A"), (91.62, "L_A + 0.5 L_C")), "→"),
    "F5": PaperFigure("LWM 16K γ=20 B=2048", ((34.17, ""), (14.61, "single-budget"))),
    "F6": PaperFigure("λ=1.0 vs 0.5, 16K GS B=256", ((18.72, ""), (18.81, ""))),
    "F7": PaperFigure("best speedup over B × γ", ((6.55, "4K"), (4.46, "8K"), (2.10, "16K")), unit="×"),
    "F8a": PaperFigure("same drafter, same sparse cache: equal peak VRAM (Table vram)"),
    "F8b-B": PaperFigure("drafter cache is O(B)"),
    "F8b-ctx": PaperFigure("drafter cache independent of context length"),
    "PI": PaperFigure(
        "not measured: the paper's limitations say positional extrapolation 'does not fully explain' the collapse "
        "and leave position-extension techniques to future work"
    ),
    "C": PaperFigure("not measured: the paper attributes the collapse to the sparse/full mismatch"),
}
PAPER_BEST_SPEEDUP = {context: value for value, context in PAPER["F7"].values}


def pct(x) -> str:
    return f"{x:.2f} %"


def interval(stat, fmt=pct) -> str:
    value, low, high = estimate(stat)
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def at(label, places, gamma) -> list[tuple]:
    return [(label, d, c, b, gamma) for d, c, b in places]


def no_cells(labels, where: str) -> str:
    return f"no cells of {' and '.join(labels)} {where}"


def sd_context_change(ev: Evidence, short, long):
    """acc(SD at long) − acc(SD at short), on the (dataset, budget) places with SD cells at both; and the arms."""
    both = set.intersection(*[{(d, b) for d, _, b in ev.places([SD], ev.gamma, [c])} for c in (short, long)])
    arms = {f"sd {c}": [(SD, d, c, b, ev.gamma) for d, b in sorted(both)] for c in (short, long)}
    return ev.acceptance(arms[f"sd {long}"]) - ev.acceptance(arms[f"sd {short}"]), arms


def collapse(ev: Evidence) -> list[Finding]:
    f = Finding(
        "F1",
        "SD acceptance falls as context grows (sparse-KV drafter collapses at long context)",
        PAPER["F1"].text(),
        unit="pp",
    )
    if len(ev.contexts) < 2:
        return [f.absent("needs two contexts")]
    short, long = ev.contexts[0], ev.contexts[-1]
    change, arms = sd_context_change(ev, short, long)
    if not arms[f"sd {short}"]:
        return [f.absent(no_cells([SD], f"at γ={ev.gamma} at both {short} and {long}"))]
    f.measure(ev, change, arms).judge("<")
    f.detail = "acc_SD " + "; ".join(
        f"{c} {interval(ev.acceptance(ev.keys(SD, ev.gamma, [c])))}" for c in ev.contexts if ev.keys(SD, ev.gamma, [c])
    )
    if f.verdict in UNMET:
        acc_short, acc_long = (ev.acceptance(arms[f"sd {c}"])[0] for c in (short, long))
        f.why = f"SD accepts {acc_long:.2f} % at {long} vs {acc_short:.2f} % at {short}"
        if acc_long >= acc_short:
            f.why = (
                f"no fall with context: {f.why}; the positional profile (below) shows whether the contexts lie "
                "within the positions the drafter knows"
            )
    power_note(f)
    return [f]


def recovery(ev: Evidence) -> list[Finding]:
    out = []
    shortest = ev.contexts[0]
    for context in ev.contexts:
        f = Finding(
            f"F2/{context}",
            "BudgetDraft recovers the acceptance SD loses at this context",
            PAPER["F2"].text(),
            unit="pp",
        )
        places = ev.places([SD, BD], ev.gamma, [context])
        if not places:
            out.append(f.absent(no_cells([SD, BD], f"at {context}, γ={ev.gamma}")))
            continue
        arms = {SD: at(SD, places, ev.gamma), BD: at(BD, places, ev.gamma)}
        bd, sd = ev.acceptance(arms[BD]), ev.acceptance(arms[SD])
        f.measure(ev, bd - sd, arms).judge(">")
        _, low, high = estimate(ratio(bd, sd))
        f.extra = {"ratio": float(ratio(bd[0], sd[0])), "ratio_ci": [low, high]}
        f.detail = f"BD {pct(bd[0])} vs SD {pct(sd[0])}; ratio {interval(ratio(bd, sd), lambda x: f'{x:.2f}')}"
        if f.verdict == FAILS:
            f.why = f"the trained drafter accepts less than the base drafter at {context}: {bd[0]:.2f} vs {sd[0]:.2f} %"
        elif f.verdict == OPEN and context != shortest and not sd_fell(ev, context, shortest):
            f.why = (
                f"SD keeps {sd[0]:.2f} % at {context} (no fall from {shortest}): there is no collapse for "
                f"BudgetDraft to recover from"
            )
        elif f.verdict == OPEN:
            f.why = f"BudgetDraft accepts {bd[0]:.2f} % vs SD's {sd[0]:.2f} % at {context}, within the interval's reach"
        power_note(f)
        out.append(f)
    return out


def power_note(f: Finding) -> Finding:
    """Where a finding's 95 % interval is wider than the effect it measures (half-width ≥ |value|), a note on which
    lever would narrow it to the effect: the interval's variance is its replicates' share plus its prompts' share
    (`spread`), each shrinking as 1 / its count, so ×m prompts divides the prompts' variance by m. An approximation
    from this run's own spread (normal half-width 1.96·sd), not a guarantee."""
    if f.value is None or f.ci_low is None or not math.isfinite(f.value) or f.replicates < 1:
        return f
    half = (f.ci_high - f.ci_low) / 2
    effect = abs(f.value - (1.0 if f.unit == "ratio" else 0.0))
    sd_r, sd_p = f.spread.get("sd_replicates", math.nan), f.spread.get("sd_prompts", math.nan)
    if not (math.isfinite(half) and half >= effect) or not (math.isfinite(sd_r) and math.isfinite(sd_p)):
        return f
    target = (effect / 1.96) ** 2
    levers = []
    for name, own, other in (("prompts", sd_p, sd_r), ("training replicates", sd_r, sd_p)):
        if own > 0 and target > other**2:
            levers.append(f"×{math.ceil(own**2 / (target - other**2))} {name}")
    if effect == 0:
        text = "the point estimate is the reference itself: no count of prompts or replicates resolves it"
    elif levers:
        text = "about " + " or ".join(levers) + " would narrow it below the effect"
    else:
        m_p = math.ceil(2 * sd_p**2 / target) if sd_p > 0 else 1
        m_r = math.ceil(2 * sd_r**2 / target) if sd_r > 0 else 1
        text = f"neither lever alone suffices; about ×{m_p} prompts and ×{m_r} training replicates together would"
    lever = (
        f"power: the interval (±{half:.2f}) is wider than the effect ({effect:.2f}); {text} "
        f"(sd over replicates {sd_r:.2f}, over prompts {sd_p:.2f}; each variance ∝ 1 / its count)"
    )
    f.note = "; ".join(filter(None, (f.note, lever)))
    return f


def interpolation(ev: Evidence) -> list[Finding]:
    """PI (ours): per context, the share of BudgetDraft's recovery over SD that position interpolation alone (the
    base drafter with its positions rescaled to cover the longest context, no training) recovers."""
    out = []
    for context in ev.contexts:
        f = Finding(
            f"PI/{context}",
            "(ours) position interpolation alone recovers less than BudgetDraft: (acc PI − acc SD) ÷ (acc BD − "
            "acc SD) < 1",
            PAPER["PI"].text(),
            unit="ratio",
        )
        places = ev.places([SD, BD, PI], ev.gamma, [context])
        if not places:
            out.append(f.absent(no_cells([SD, BD, PI], f"at {context}, γ={ev.gamma}")))
            continue
        arms = {label: at(label, places, ev.gamma) for label in (SD, BD, PI)}
        sd, bd, pi = (ev.acceptance(arms[label]) for label in (SD, BD, PI))
        f.measure(ev, ratio(pi - sd, bd - sd), arms)
        f.extra = {"pi_minus_sd_pp": estimate(pi - sd), "bd_minus_sd_pp": estimate(bd - sd)}
        f.detail = (
            f"PI {pct(pi[0])}, BD {pct(bd[0])}, SD {pct(sd[0])}; PI − SD {interval(pi - sd, pp)}, "
            f"BD − SD {interval(bd - sd, pp)}"
        )
        if estimate(bd - sd)[1] <= 0:  # a share of a recovery that may be nil or negative is no share
            f.verdict = OPEN
            f.why = (
                f"BudgetDraft's own recovery over SD at {context} is not above 0 within its interval "
                f"({interval(bd - sd, pp)}): there is no recovery for interpolation to take a share of"
            )
            out.append(f)
            continue
        f.judge("<", 1.0)
        if f.verdict == FAILS:
            f.why = (
                f"interpolating the base drafter's positions, with no training, recovers as much as BudgetDraft or "
                f"more at {context} ({pi[0]:.2f} vs {bd[0]:.2f} %): what BudgetDraft recovers here is positional"
            )
        elif f.verdict == OPEN:
            f.why = f"PI accepts {pi[0]:.2f} % vs BudgetDraft's {bd[0]:.2f} % at {context}, within the interval's reach"
        out.append(power_note(f))
    return out


def pp(x) -> str:
    return f"{x:+.2f} pp"


def collapse_causes(ev: Evidence) -> list[Finding]:
    """The collapse split by cause, per context, from SD with a full drafter cache (no budget) beside SD at each
    budget: C-pos = acc(SD full cache at the shortest context) − acc(SD full cache at this one), what is lost with
    every position kept (positional); C-sparse = acc(SD full cache) − acc(SD at the budgets), what the sparse cache
    costs at this context (the sparse/full mismatch). Their sum is the whole fall from the full-cache drafter at the
    shortest context to the sparse one here. Diagnostics: the paper makes no claim on the split."""
    short = ev.contexts[0]
    out = []
    full_short = ev.keys(SD_FULL, ev.gamma, [short], [0])
    for context in ev.contexts:
        full = ev.keys(SD_FULL, ev.gamma, [context], [0])
        datasets = sorted({k[1] for k in full})
        sparse = ev.keys(SD, ev.gamma, [context], datasets=datasets) if datasets else []
        if context != short:
            f = Finding(
                f"C-pos/{context}",
                f"diagnostic: acceptance SD loses from {short} to {context} with a full drafter cache (positional)",
                PAPER["C"].text(),
                unit="pp",
            )
            base = [k for k in full_short if k[1] in datasets]
            if not full or not base:
                out.append(f.absent(no_cells([SD_FULL], f"at both {short} and {context}, γ={ev.gamma}")))
            else:
                arms = {f"{SD_FULL} {short}": base, f"{SD_FULL} {context}": full}
                f.measure(ev, ev.acceptance(base) - ev.acceptance(full), arms).verdict = DIAGNOSTIC
                f.detail = f"full cache {pct(ev.acceptance(base)[0])} at {short} → {pct(ev.acceptance(full)[0])}"
                out.append(f)
        f = Finding(
            f"C-sparse/{context}",
            f"diagnostic: acceptance the sparse cache costs SD at {context} (full drafter cache − budgets, "
            "the sparse/full mismatch)",
            PAPER["C"].text(),
            unit="pp",
        )
        if not full or not sparse:
            out.append(f.absent(no_cells([SD_FULL, SD], f"at {context}, γ={ev.gamma}")))
            continue
        arms = {SD_FULL: full, SD: sparse}
        f.measure(ev, ev.acceptance(full) - ev.acceptance(sparse), arms).verdict = DIAGNOSTIC
        f.detail = f"full cache {pct(ev.acceptance(full)[0])} vs B ∈ {ev.budgets} {pct(ev.acceptance(sparse)[0])}"
        out.append(f)
    return out


def sd_fell(ev: Evidence, context, shortest) -> bool:
    """Whether SD's acceptance at `context` is below that at `shortest` (interval of the change below 0)."""
    change, arms = sd_context_change(ev, shortest, context)
    return bool(arms[f"sd {context}"]) and estimate(change)[2] < 0


def sd_budget_gap(ev: Evidence) -> Finding:
    small, large = ev.budgets[0], ev.budgets[-1]
    f = Finding(
        "F3-SD",
        f"diagnostic: SD acceptance at B={large} minus at B={small} (does the budget cost SD?)",
        PAPER["F3-SD"].text(),
        unit="pp",
    )
    both = set.intersection(*[{(d, c) for d, c, _ in ev.places([SD], ev.gamma, budgets=[b])} for b in (small, large)])
    if len(ev.budgets) < 2 or not both:
        return f.absent(no_cells([SD], f"at both B={small} and B={large}, γ={ev.gamma}"))
    arms = {f"sd B={b}": [(SD, d, c, b, ev.gamma) for d, c in sorted(both)] for b in (large, small)}
    f.measure(ev, ev.acceptance(arms[f"sd B={large}"]) - ev.acceptance(arms[f"sd B={small}"]), arms)
    f.verdict = DIAGNOSTIC
    if f.ci_low <= 0 <= f.ci_high:
        bound = max(abs(f.ci_low), abs(f.ci_high))
        f.note = (
            f"SD acceptance at the smallest budget equals full-budget acceptance within ±{bound:.2f} pp: "
            "budget costs this drafter nothing, so there is no budget loss for BudgetDraft to recover"
        )
    return f


def spread(ev: Evidence, label, places) -> np.ndarray:
    """Mean over contexts of (max − min over budgets) of the pooled-over-datasets acceptance."""
    per_context = []
    for context in sorted({c for _, c, _ in places}):
        budgets = sorted({b for _, c, b in places if c == context})
        if len(budgets) > 1:
            acc = np.column_stack(
                [
                    ev.acceptance([(label, d, c, b2, ev.gamma) for d, c, b2 in places if c == context and b2 == b])
                    for b in budgets
                ]
            )
            per_context.append(acc.max(axis=1) - acc.min(axis=1))
    return np.mean(per_context, axis=0)


def budget_robustness(ev: Evidence, gap: Finding) -> list[Finding]:
    f = Finding(
        "F3",
        "BudgetDraft's acceptance varies less across KV budgets than SD's (spread BD − spread SD)",
        PAPER["F3"].text(),
        unit="pp",
    )
    places = ev.places([SD, BD], ev.gamma)
    if not any(len({b for _, c2, b in places if c2 == c}) > 1 for c in ev.contexts):
        return [f.absent(no_cells([SD, BD], f"at two budgets of one context, γ={ev.gamma}"))]
    arms = {SD: at(SD, places, ev.gamma), BD: at(BD, places, ev.gamma)}
    bd, sd = spread(ev, BD, places), spread(ev, SD, places)
    f.measure(ev, bd - sd, arms).judge("<")
    f.detail = f"spread BD {bd[0]:.2f} pp vs SD {sd[0]:.2f} pp"
    explain_by_budget_gap(f, gap)
    return [f]


def explain_by_budget_gap(f: Finding, gap: Finding) -> None:
    """An unresolved budget finding is explained by SD's budget gap when that gap is nil (nothing for BudgetDraft
    to recover across budgets); a finding that holds or fails keeps its own reason."""
    if gap.note and f.verdict == OPEN:
        f.why = gap.note


def consistency_loss(ev: Evidence, gap: Finding) -> list[Finding]:
    small = ev.budgets[: max(1, len(ev.budgets) // 2)]
    f = Finding(
        "F4",
        f"the consistency loss L_C raises acceptance at small budgets (B ∈ {small}; BD − L_A only)",
        PAPER["F4"].text(),
        unit="pp",
    )
    places = ev.places([LA_ONLY, BD], ev.gamma, budgets=small)
    if not places:
        return [f.absent(no_cells([LA_ONLY, BD], f"at B ∈ {small}, γ={ev.gamma}"))]
    arms = {LA_ONLY: at(LA_ONLY, places, ev.gamma), BD: at(BD, places, ev.gamma)}
    bd, la = ev.acceptance(arms[BD]), ev.acceptance(arms[LA_ONLY])
    f.measure(ev, bd - la, arms).judge(">")
    f.detail = f"BD {pct(bd[0])} vs L_A only {pct(la[0])}"
    if f.verdict in UNMET:
        f.why = same_drafts(ev, arms) or (
            f"L_A only accepts {la[0]:.2f} % vs {bd[0]:.2f} % with {lambda_c(ev, BD, 0.5):g} L_C at B ∈ {small}"
        )
    explain_by_budget_gap(f, gap)
    return [f]


def same_drafts(ev: Evidence, arms: dict) -> str:
    """A note when two trained drafters accepted and drafted exactly alike on every prompt of every cell compared."""
    (a, keys_a), (b, keys_b) = arms.items()
    if not all(
        np.array_equal(ev.vector(ka, col), ev.vector(kb, col))
        for ka, kb in zip(keys_a, keys_b)
        for col in ("accepted", "drafted")
    ):
        return ""
    steps = {label: ev.s.variant(label).steps for label in (a, b)}
    trained = f" ({steps[a]} / {steps[b]} training steps from the same base drafter)" if all(steps.values()) else ""
    return (
        f"{a} and {b} drafted and accepted exactly the same tokens on every prompt of these cells: their "
        f"training{trained} did not separate them"
    )


def lambda_c(ev: Evidence, label, default: float) -> float:
    """λ of a trained variant: settings `variants[label].lambda_c` when given, else the label's own value."""
    given = ev.s.variant(label).lambda_c
    return float(default if given is None else given)


def multi_budget(ev: Evidence) -> list[Finding]:
    dataset, context = ev.s.single_budget.dataset, ev.s.single_budget.context
    gamma, trained = ev.s.single_budget.gamma, ev.s.single_budget.trained_budget
    others = [b for b in ev.budgets if b != trained]
    f = Finding(
        "F5",
        f"multi-budget training beats a drafter trained at B={trained} alone, at the other budgets",
        PAPER["F5"].text(),
        unit="pp",
    )
    places = ev.places([SINGLE, BD], gamma, [context], others, [dataset])
    if not places:
        return [f.absent(no_cells([SINGLE, BD], f"at {dataset} {context} γ={gamma}, B ∈ {others}"))]
    arms = {SINGLE: at(SINGLE, places, gamma), BD: at(BD, places, gamma)}
    bd, single = ev.acceptance(arms[BD]), ev.acceptance(arms[SINGLE])
    f.measure(ev, bd - single, arms).judge(">")
    f.detail = f"{dataset} {context} γ={gamma}: BD {pct(bd[0])} vs single-budget {pct(single[0])}"
    if f.verdict in UNMET:
        home = ev.keys(SINGLE, gamma, [context], [trained], [dataset])
        f.why = same_drafts(ev, arms) or (
            f"the single-budget drafter accepts {single[0]:.2f} % away from its trained budget vs {bd[0]:.2f} % for "
            f"BudgetDraft" + (f" ({ev.acceptance(home)[0]:.2f} % at B={trained})" if home else "")
        )
    return [f]


def lambda_one(ev: Evidence) -> list[Finding]:
    one_c, half_c = lambda_c(ev, LAMBDA1, 1.0), lambda_c(ev, BD, 0.5)
    f = Finding(
        "F6",
        f"λ = {one_c:g} gives acceptance very close to λ = {half_c:g} (ratio in [0.9, 1.1])",
        PAPER["F6"].text(),
        unit="ratio",
    )
    places = ev.places([LAMBDA1, BD], ev.gamma)
    if not places:
        return [f.absent(no_cells([LAMBDA1, BD], f"at γ={ev.gamma}"))]
    arms = {LAMBDA1: at(LAMBDA1, places, ev.gamma), BD: at(BD, places, ev.gamma)}
    one, half = ev.acceptance(arms[LAMBDA1]), ev.acceptance(arms[BD])
    f.measure(ev, ratio(one, half), arms).judge_within((0.9, 1.1))
    f.detail = f"λ={one_c:g} {pct(one[0])} vs λ={half_c:g} {pct(half[0])}"
    if f.verdict in UNMET:
        f.why = f"λ = {one_c:g} accepts {one[0]:.2f} % vs {half[0]:.2f} % for λ = {half_c:g}"
    return [f]
