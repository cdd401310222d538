"""Which of the paper's findings hold in this run: each claim, its figure in the paper, this run's figure with a 95 %
interval, and a verdict, all computed from measured grid cells.

`python -m budgetdraft claims --settings JSON --cells FILE [FILE ...] --out results/claims.md`
writes `claims.md` and `claims.json` (same stem).

Cells are loaded with `grid.load_cells` and indexed by `grid.Grid` (with its lossless check, as for the tables).
A prompt is a (dataset, sample); every statistic below is a function of per-prompt sums, so it can be recomputed
with each prompt weighted by its multiplicity in a resample. γ_f = settings `gamma_fixed`; "pooled" sums over datasets and budgets
(and contexts where said), using only the (dataset, context, budget) places where every arm of the finding has a
cell; contexts are ordered as settings `contexts` lists them (shortest first). Labels: SD = `sd` (base drafter,
sparse cache), BD = `lambda0.5` (BudgetDraft), L_A only = `la_only`, λ = 1.0 = `lambda1.0`, single-budget =
`single_budget`.

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
  F8a peak memory     m(BD, peak_mem_mb) / m(SD, peak_mem_mb) at γ_f; equivalence margin [0.95, 1.05]
  F8b-B drafter cache m(SD+BD at the largest B, drafter_kv_mb) / m(SD+BD at the smallest B, ...) at γ_f; paper: > 1
  F8b-ctx             max over B of [max over contexts / min over contexts of m(SD+BD at context, B, drafter_kv_mb)]
                      at γ_f; equivalence margin [0.9, 1.1]

Interval: a paired two-way bootstrap over training replicates and prompts (Owen's pigeonhole bootstrap for a
crossed design: every replicate's drafters decode every prompt). Each of 2000 resamples (seed 0) draws the R
replicates with replacement and, independently, the prompts with replacement within each dataset; a (replicate,
prompt) sum is weighted by the product of the two multiplicities. Every statistic (both arms of a contrast alike) is
recomputed on the same draws: the arms are paired by replicate (replicate r of every variant starts from base drafter
r) and by prompt; a shared cell (AR, or a drafter trained once) counts alike in every replicate. Percentile interval
taken conservatively: the order statistics at or just outside the 2.5th and 97.5th percentiles (numpy 'lower' /
'higher'); resamples where a statistic is undefined (0/0) are dropped. Where the spread comes from: the same
statistic under 2000 resamples of the replicates alone (prompts fixed) and 2000 of the prompts alone (replicates
fixed); each variance's share of their sum is reported. With R = 1 the interval covers prompts only, and the report
says so on every verdict. Memory figures barely vary across prompts, so their interval is close to the point value;
the same rule applies.

Verdict: holds when the interval lies entirely on the paper's side of the reference (0, or 1 for ratios; a bound
within 1e-9 of it excludes nothing); does not hold when entirely on the other side; not resolved otherwise.
Equivalence claims (F6, F8a, F8b-ctx): holds when the interval lies inside the margin, does not hold when entirely
outside it, not resolved otherwise. not run: the cells the finding needs are absent; not measured: the cells lack the
column it needs. A finding that does not hold or is not resolved gets a one-line 'why' derived from the cells where
they show one; a possible reason they cannot show is labelled '(not measured)'.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from budgetdraft.atomic import atomic_write_text
from budgetdraft.grid import (
    COST_COLUMNS,
    KEY,
    OPTIONAL_COLUMNS,
    Grid,
    Settings,
    acceptance_by_replicate,
    draft_cost,
    load_cells,
    parse_settings,
    predicted_speedup,
)
from budgetdraft.names import AR, BD, LA_ONLY, LAMBDA1, SD, SHARED, SINGLE
from budgetdraft.tables import timing_text

RESAMPLES, SEED = 2000, 0
MEASURED_COLUMNS = [
    "decode_s",
    "verifier_forwards",
    "peak_tensor_mb",
    "drafter_kv_mb",
    "verifier_kv_mb",
    "mem_kind",
    *COST_COLUMNS,
]  # read when a cell has them
HOLDS, FAILS, OPEN, NOT_RUN, NOT_MEASURED = "holds", "does not hold", "not resolved", "not run", "not measured"
DIAGNOSTIC = "diagnostic"
UNMET = (FAILS, OPEN)  # verdicts that get a 'why' when the cells show one
PAPER_BEST_SPEEDUP = {"4K": 6.55, "8K": 4.46, "16K": 2.10}


# ----------------------------------------------------------------------------------------------- cells


def load_claim_cells(paths) -> pd.DataFrame:
    """`grid.load_cells` plus the measured columns a cell has (`MEASURED_COLUMNS`; NaN where a cell lacks one)."""
    df = load_cells(paths, OPTIONAL_COLUMNS + tuple(MEASURED_COLUMNS))
    return df.reindex(columns=list(dict.fromkeys([*df.columns, *MEASURED_COLUMNS])))


# ------------------------------------------------------------------------------------------- bootstrap


def multiplicities(strata, n_prompts: int, resamples: int = RESAMPLES, seed: int | np.random.Generator = SEED):
    """(resamples, n_prompts) counts: each row draws, within every stratum (array of prompt columns), as many
    prompts as it has, with replacement."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((resamples, n_prompts))
    for columns in strata:
        n = len(columns)
        draws = rng.integers(0, n, size=(resamples, n)) + n * np.arange(resamples)[:, None]
        counts[:, columns] = np.bincount(draws.ravel(), minlength=resamples * n).reshape(resamples, n)
    return counts


def ratio(num, den):
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    return np.divide(num, den, out=np.full(np.broadcast(num, den).shape, np.nan), where=den != 0)


def two_way_weights(strata, n_prompts: int, n_replicates: int, resamples: int, seed: int):
    """(replicate weights, prompt weights), each with 1 + 3 * resamples rows (`BLOCKS`): row 0 all ones (the point
    estimate); then both factors resampled; the replicates alone; the prompts alone."""
    rng = np.random.default_rng(seed)
    prompts = multiplicities(strata, n_prompts, resamples, rng)  # first: with R = 1, the prompt-only bootstrap
    reps = multiplicities([np.arange(n_replicates)], n_replicates, resamples, rng)
    ones_r, ones_p = np.ones((resamples, n_replicates)), np.ones((resamples, n_prompts))
    return (
        np.vstack([np.ones(n_replicates), reps, reps, ones_r]),
        np.vstack([np.ones(n_prompts), prompts, ones_p, prompts]),
    )


def blocks(stat) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A statistic over `two_way_weights` rows: (point, both resampled, replicates alone, prompts alone)."""
    stat = np.asarray(stat, dtype=float)
    n = (len(stat) - 1) // 3
    return stat[:1], stat[1 : 1 + n], stat[1 + n : 1 + 2 * n], stat[1 + 2 * n :]


class Evidence:
    """The cells, their prompts and training replicates, and the two-way bootstrap weights (`two_way_weights`)."""

    def __init__(self, df: pd.DataFrame, settings: Settings, resamples: int = RESAMPLES, seed: int = SEED):
        self.s = settings
        self.datasets, self.contexts = list(settings.datasets), settings.contexts
        self.budgets, self.gamma = sorted(settings.budgets), int(settings.get("gamma_fixed"))
        df = df[df["dataset"].isin(self.datasets)].reset_index(drop=True)
        if df.empty:
            raise ValueError(f"no cell is of a dataset in settings datasets {self.datasets}")
        self.prompts = sorted(
            {(d, int(s)) for d, s in zip(df["dataset"], df["sample"])}, key=lambda p: (self.datasets.index(p[0]), p[1])
        )
        self.column = {p: i for i, p in enumerate(self.prompts)}
        df["prompt"] = [self.column[(d, int(s))] for d, s in zip(df["dataset"], df["sample"])]
        self.grid = Grid(df, **settings.lossless)
        self.replicates = sorted(int(r) for r in self.grid.df["replicate"].unique() if r != SHARED) or [SHARED]
        self.row_of = {r: i for i, r in enumerate(self.replicates) if r != SHARED}
        strata = [np.array([i for i, p in enumerate(self.prompts) if p[0] == d]) for d in self.datasets]
        strata = [s for s in strata if len(s)]
        self.replicate_weights, self.prompt_weights = two_way_weights(
            strata, len(self.prompts), len(self.replicates), resamples, seed
        )
        self._vectors = {}

    # cells
    def keys(self, label, gamma=None, contexts=None, budgets=None, datasets=None) -> list[tuple]:
        budgets = [0] if label == AR else self.budgets if budgets is None else budgets
        return sorted(
            k
            for k in self.grid.rows
            if k[0] == label
            and k[1] in (datasets or self.datasets)
            and (contexts is None or k[2] in contexts)
            and k[3] in budgets
            and (gamma is None or k[4] == gamma)
        )

    def places(self, labels, gamma, contexts=None, budgets=None, datasets=None) -> list[tuple]:
        """(dataset, context, budget) where every label has a cell at gamma."""
        sets = [{k[1:4] for k in self.keys(label, gamma, contexts, budgets, datasets)} for label in labels]
        return sorted(set.intersection(*sets))

    def rows(self, keys) -> pd.DataFrame:
        return pd.concat([self.grid.rows[k] for k in keys]) if keys else self.grid.df.iloc[:0]

    def measured(self, keys, column) -> bool:
        return bool(keys) and self.rows(keys)[column].notna().any()

    # per-(replicate, prompt) sums, and statistics over the weights
    def table(self, rows: pd.DataFrame, values) -> np.ndarray:
        """(replicates, prompts) sums of ``values`` over ``rows`` (columns `replicate`, `prompt`); a shared row adds
        to every replicate."""
        n_r, n_p = len(self.replicates), len(self.prompts)
        values = np.asarray(values, dtype=float)
        row = rows["replicate"].map(self.row_of).fillna(-1).to_numpy(dtype=int)  # -1: shared
        prompt, own = rows["prompt"].to_numpy(dtype=int), row >= 0
        out = np.bincount(row[own] * n_p + prompt[own], weights=values[own], minlength=n_r * n_p).reshape(n_r, n_p)
        return out + np.bincount(prompt[~own], weights=values[~own], minlength=n_p)

    def vector(self, key, column) -> np.ndarray:
        """Per (replicate, prompt): Σ column over the cell's rows; column 'n:x' counts the rows where x is measured."""
        if (key, column) not in self._vectors:
            rows = self.grid.rows[key]
            values = rows[column[2:]].notna() if column.startswith("n:") else rows[column].fillna(0)
            self._vectors[key, column] = self.table(rows, values.astype(float))
        return self._vectors[key, column]

    def weigh(self, table: np.ndarray) -> np.ndarray:
        """Σ over (replicate, prompt) of table × replicate multiplicity × prompt multiplicity, per weights row."""
        return np.einsum("br,rp,bp->b", self.replicate_weights, table, self.prompt_weights)

    def weighted(self, keys, column) -> np.ndarray:
        return self.weigh(
            sum((self.vector(k, column) for k in keys), np.zeros((len(self.replicates), len(self.prompts))))
        )

    def acceptance(self, keys) -> np.ndarray:
        return 100.0 * ratio(self.weighted(keys, "accepted"), self.weighted(keys, "drafted"))

    def mean(self, keys, column) -> np.ndarray:
        return ratio(self.weighted(keys, column), self.weighted(keys, "n:" + column))

    def speedup(self, keys) -> np.ndarray:
        """Mean over the (replicate, prompt) pairs of the cells (one per dataset) of the per-prompt speedup vs AR
        (the replicate's per-prompt time against AR's)."""
        shape = (len(self.replicates), len(self.prompts))
        value, present = np.zeros(shape), np.zeros(shape)
        for key in keys:
            per = self.grid.replicate_sample_speedups(key).rename("speedup").reset_index()
            per["prompt"] = [self.column[(key[1], int(s))] for s in per["sample"]]
            value += self.table(per, per["speedup"])
            present += self.table(per, np.ones(len(per)))
        return ratio(self.weigh(value), self.weigh(present))

    def prompt_count(self, keys) -> int:
        counts = sum((self.vector(k, "n:sample") for k in keys), np.zeros((len(self.replicates), len(self.prompts))))
        return int(np.count_nonzero(counts.sum(axis=0)))

    def replicate_count(self, keys) -> int:
        """Training replicates behind the cells (1 when they are all shared)."""
        own = {int(r) for k in keys for r in self.grid.rows[k]["replicate"].unique() if r != SHARED}
        return max(1, len(own))

    def drafted(self, arms: dict) -> dict:
        return {arm: int(sum(self.vector(k, "drafted").sum() for k in keys)) for arm, keys in arms.items()}


def estimate(stat) -> tuple[float, float, float]:
    """(point, low, high): the point row, and the conservative 95 % percentile interval of the resamples of both
    replicates and prompts (`blocks`)."""
    point, both, _, _ = blocks(stat)
    boot = both[~np.isnan(both)]
    if not len(boot):
        return float(point[0]), math.nan, math.nan
    return (
        float(point[0]),
        float(np.percentile(boot, 2.5, method="lower")),
        float(np.percentile(boot, 97.5, method="higher")),
    )


def variance_split(stat) -> dict:
    """Standard deviation of a statistic under resampling the replicates alone and the prompts alone, and each
    one's share of the sum of the two variances (None where neither varies)."""
    point, _, reps, prompts = blocks(stat)
    tol = 1e-9 * max(1.0, abs(float(point[0]))) if np.isfinite(point[0]) else 1e-9  # float noise is no spread
    sd_r, sd_p = (float(np.nanstd(x)) if np.isfinite(x).any() else math.nan for x in (reps, prompts))
    sd_r, sd_p = (0.0 if sd <= tol else sd for sd in (sd_r, sd_p))
    total = sd_r**2 + sd_p**2
    share = sd_r**2 / total if total > 0 else None
    return {"sd_replicates": sd_r, "sd_prompts": sd_p, "replicate_share": share}


# -------------------------------------------------------------------------------------------- verdicts


def directional(low, high, side: str, reference: float = 0.0) -> str:
    """side '>' or '<': the paper's side of the reference; a bound within rounding (1e-9) of it does not exclude it."""
    if math.isnan(low) or math.isnan(high):
        return OPEN
    tol = 1e-9 * max(1.0, abs(reference))
    above, below = low > reference + tol, high < reference - tol
    if side == ">":
        return HOLDS if above else FAILS if below else OPEN
    return HOLDS if below else FAILS if above else OPEN


def equivalent(low, high, margin) -> str:
    if math.isnan(low) or math.isnan(high):
        return OPEN
    if margin[0] <= low and high <= margin[1]:
        return HOLDS
    return FAILS if high < margin[0] or low > margin[1] else OPEN


@dataclass
class Finding:
    id: str
    claim: str
    paper: str
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str = NOT_RUN
    why: str = ""
    prompts: int = 0
    replicates: int = 0
    spread: dict = field(default_factory=dict)
    drafted: dict = field(default_factory=dict)
    unit: str = ""
    detail: str = ""
    note: str = ""
    extra: dict = field(default_factory=dict)

    def measure(self, ev: Evidence, stat, arms: dict) -> Finding:
        self.value, self.ci_low, self.ci_high = estimate(stat)
        keys = [k for keys in arms.values() for k in keys]
        self.prompts, self.replicates = ev.prompt_count(keys), ev.replicate_count(keys)
        self.spread = variance_split(stat)
        self.drafted = ev.drafted(arms)
        return self

    def judge(self, side: str, reference: float = 0.0) -> Finding:
        self.verdict = directional(self.ci_low, self.ci_high, side, reference)
        return self

    def judge_within(self, margin) -> Finding:
        self.verdict = equivalent(self.ci_low, self.ci_high, margin)
        return self

    def absent(self, why: str, verdict: str = NOT_RUN) -> Finding:
        self.verdict, self.why = verdict, why
        return self


def pct(x) -> str:
    return f"{x:.2f} %"


def interval(stat, fmt=pct) -> str:
    value, low, high = estimate(stat)
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


# -------------------------------------------------------------------------------------------- findings


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
        "GS B=256: 55.42 % (4K) → 0.30 % (8K) → 0.51 % (16K)",
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
                f"no fall with context: {f.why}; a possible reason (not measured): every context lies within "
                "the positions the drafter's layers were pretrained on"
            )
    return [f]


def recovery(ev: Evidence) -> list[Finding]:
    out = []
    shortest = ev.contexts[0]
    for context in ev.contexts:
        f = Finding(
            f"F2/{context}",
            "BudgetDraft recovers the acceptance SD loses at this context",
            "e.g. 8K GS: 75 % vs 0.14 % (SD)",
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
        "SD's acceptance depends on B",
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
        "BudgetDraft flat across B, SD not (Tables main / ablation)",
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
        "GS 4K B=1024: 57.54 % (L_A) → 91.62 % (L_A + 0.5 L_C)",
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
    steps = {label: ((ev.s.raw.get("variants") or {}).get(label) or {}).get("steps") for label in (a, b)}
    trained = f" ({steps[a]} / {steps[b]} training steps from the same base drafter)" if all(steps.values()) else ""
    return (
        f"{a} and {b} drafted and accepted exactly the same tokens on every prompt of these cells: their "
        f"training{trained} did not separate them"
    )


def lambda_c(ev: Evidence, label, default: float) -> float:
    """λ of a trained variant: settings `variants[label].lambda_c` when given, else the label's own value."""
    return float(((ev.s.raw.get("variants") or {}).get(label) or {}).get("lambda_c", default))


def multi_budget(ev: Evidence) -> list[Finding]:
    dataset, context = ev.s.get("single_budget.dataset"), str(ev.s.get("single_budget.context"))
    gamma, trained = int(ev.s.get("single_budget.gamma")), int(ev.s.get("single_budget.trained_budget"))
    others = [b for b in ev.budgets if b != trained]
    f = Finding(
        "F5",
        f"multi-budget training beats a drafter trained at B={trained} alone, at the other budgets",
        "LWM 16K γ=20 B=2048: 34.17 % vs 14.61 % (single-budget)",
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
        "λ=1.0 vs 0.5, 16K GS B=256: 18.72 % vs 18.81 %",
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


def paper_speedup(ev: Evidence, context) -> str:
    if context in PAPER_BEST_SPEEDUP:
        return f"{PAPER_BEST_SPEEDUP[context]:.2f}× best at {context}"
    listed = ", ".join(f"{v:.2f}× ({c})" for c, v in PAPER_BEST_SPEEDUP.items())
    if len(ev.contexts) == len(PAPER_BEST_SPEEDUP):
        paper_context = list(PAPER_BEST_SPEEDUP)[ev.contexts.index(context)]
        return f"{PAPER_BEST_SPEEDUP[paper_context]:.2f}× best at {paper_context} (same place in the context list)"
    return "best " + listed


def speedup(ev: Evidence) -> list[Finding]:
    out = []
    for context in ev.contexts:
        f = Finding(
            f"F7/{context}",
            "BudgetDraft decodes faster than AR (best speedup over B × γ)",
            paper_speedup(ev, context),
            unit="x",
        )
        datasets = [d for d in ev.datasets if ev.grid.has((AR, d, context, 0, 0))]
        candidates = sorted(
            {
                k[3:]
                for k in ev.keys(BD, contexts=[context], datasets=datasets)
                if all(ev.grid.has((BD, d, context) + k[3:]) for d in datasets)
            }
        )
        if not datasets or not candidates:
            out.append(f.absent(no_cells([AR, BD], f"at {context} for the same datasets")))
            continue
        cells = {bg: [(BD, d, context) + bg for d in datasets] for bg in candidates}
        best = max(candidates, key=lambda bg: ev.speedup(cells[bg])[0])
        arms = {BD: cells[best], AR: [(AR, d, context, 0, 0) for d in datasets]}
        f.measure(ev, ev.speedup(arms[BD]), arms).judge(">", 1.0)
        budget, gamma = best
        alpha = ev.acceptance(arms[BD])[0] / 100.0
        c = draft_cost(ev.rows(arms[BD]), ev.rows(arms[AR]))
        c = None if math.isnan(c) else c
        predicted = None if c is None or math.isnan(alpha) else predicted_speedup(alpha, gamma, c)
        f.extra = {
            "budget": budget,
            "gamma": gamma,
            "alpha": alpha,
            "c": c,
            "predicted": predicted,
            "measured_over_predicted": None if predicted is None else f.value / predicted,
        }
        f.detail = f"B={budget}, γ={gamma}, α={alpha:.3f}; predicted " + (
            "not measured"
            if predicted is None
            else f"{predicted:.2f}× (c={c:.3f}), measured ÷ predicted {f.value / predicted:.2f}"
        )
        f.note = "cell chosen once on the point estimate; the interval does not include that choice"
        if f.verdict in UNMET:
            f.why = slow_reason(ev, arms[AR], f.value, alpha, gamma, c, predicted)
        out.append(f)
    return out


def slow_reason(ev: Evidence, ar_keys, measured, alpha, gamma, c, predicted) -> str:
    parts = []
    if predicted is not None:
        parts.append(
            f"α={alpha:.3f}, γ={gamma}, c={c:.3f} predict {predicted:.2f}×"
            + (
                ": a drafted token costs more than acceptance saves"
                if predicted < 1
                else f"; measured is {measured / predicted:.2f} of that, the rest going to time outside the "
                "drafter and verifier forwards"
            )
        )
    if ev.measured(ar_keys, "decode_s"):
        ar = ev.rows(ar_keys)
        share = float((ar["total_s"] - ar["decode_s"]).sum() / ar["total_s"].sum())
        parts.append(
            f"prefill is {100 * share:.1f} % of AR's total time, so a method with the same prefill can be at "
            f"most {1 / share:.2f}× faster"
            if share > 0
            else "AR spends no time outside decoding"
        )
    return "; ".join(parts) or "speedup below 1"


def mem_kinds(ev: Evidence, keys) -> str:
    kinds = sorted(ev.rows(keys)["mem_kind"].dropna().astype(str).unique())
    return ", ".join(kinds) if kinds else "mem_kind not recorded"


def memory(ev: Evidence) -> list[Finding]:
    fa = Finding(
        "F8a",
        "BudgetDraft's peak memory ≈ SD's (ratio of mean peak_mem_mb in [0.95, 1.05])",
        "same drafter, same sparse cache: equal peak VRAM (Table vram)",
        unit="ratio",
    )
    fb = Finding(
        "F8b-B",
        "the drafter cache grows with B (mean drafter_kv_mb at the largest B ÷ at the smallest)",
        "drafter cache is O(B)",
        unit="ratio",
    )
    fc = Finding(
        "F8b-ctx",
        "at fixed B the drafter cache does not grow with context (max ÷ min over contexts, worst B, in [0.9, 1.1])",
        "drafter cache independent of context length",
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


def findings(ev: Evidence) -> list[Finding]:
    gap = sd_budget_gap(ev)
    return (
        collapse(ev)
        + recovery(ev)
        + [gap]
        + budget_robustness(ev, gap)
        + consistency_loss(ev, gap)
        + multi_budget(ev)
        + lambda_one(ev)
        + speedup(ev)
        + memory(ev)
    )


# ---------------------------------------------------------------------------------------------- report


def show(value, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "--" if value is None or math.isnan(value) else ("∞" if value > 0 else "-∞")
    return {"pp": f"{value:+.2f} pp", "x": f"{value:.2f}×", "ratio": f"{value:.3f}"}.get(unit, f"{value:.2f}")


def spread_text(f: Finding) -> str:
    """Where a finding's interval gets its width: the replicates' and the prompts' share of the variance."""
    if f.value is None:
        return "--"
    if f.replicates < 2:
        return "prompts only (R = 1: the training run is one draw the interval does not see)"
    share = f.spread.get("replicate_share")
    if share is None:
        return f"neither varies (R = {f.replicates})"
    sd_r, sd_p = (show(f.spread[k], f.unit).lstrip("+") for k in ("sd_replicates", "sd_prompts"))
    return f"replicates {100 * share:.0f} % (sd {sd_r}) · prompts {100 * (1 - share):.0f} % (sd {sd_p})"


def finding_row(f: Finding) -> str:
    run = show(f.value, f.unit) + (f"; {f.detail}" if f.detail else "") if f.value is not None else "--"
    ci = f"[{show(f.ci_low, f.unit)}, {show(f.ci_high, f.unit)}]" if f.value is not None else "--"
    drafted = ", ".join(f"{arm} {n:,}" for arm, n in f.drafted.items()) or "--"
    cells = [
        f.id,
        f.claim,
        f.paper,
        run,
        ci,
        f"**{f.verdict}**",
        spread_text(f),
        f"{f.replicates} × {f.prompts}" if f.value is not None else "--",
        drafted,
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def evidence_rows(ev: Evidence) -> list[str]:
    lines = [
        "| label | cells | drafted tokens per cell (min / median / max) | samples × repeats per cell | training replicates |",
        "|---|---|---|---|---|",
    ]
    by_label = {}
    for key in sorted(ev.grid.rows):
        by_label.setdefault(key[0], []).append(key)
    for label, keys in by_label.items():
        drafted = np.array([int(ev.grid.rows[k]["drafted"].sum()) for k in keys])
        shapes = sorted(
            {f"{ev.grid.rows[k]['sample'].nunique()} × {ev.grid.rows[k]['repeat'].nunique()}" for k in keys}
        )
        replicates = sorted({str(ev.replicate_count([k])) for k in keys})
        lines.append(
            f"| {label} | {len(keys)} | {drafted.min():,} / {np.median(drafted):,.0f} / {drafted.max():,} | "
            f"{', '.join(shapes)} | {', '.join(replicates)} |"
        )
    return lines


REPLICATE_TEXT = (
    "Each drafter's acceptance pooled over its cells at γ_fixed (every dataset, context and budget), in each training "
    "replicate, and their mean and standard deviation: how far one training run can land from another."
)


def replicate_acceptance(ev: Evidence) -> dict[str, list[float]]:
    """{label: pooled acceptance (%) at γ_fixed in each replicate (one value for a shared label)}."""
    out = {}
    for label in sorted({k[0] for k in ev.grid.rows if k[0] != AR}):
        keys = ev.keys(label, ev.gamma, budgets=sorted({k[3] for k in ev.grid.rows if k[0] == label}))
        if keys:
            out[label] = [float(x) for x in acceptance_by_replicate(ev.rows(keys))]
    return out


def replicate_rows(ev: Evidence) -> list[str]:
    lines = ["| drafter | per replicate (%) | mean | sd over replicates |", "|---|---|---|---|"]
    for label, values in replicate_acceptance(ev).items():
        sd = f"{np.std(values, ddof=1):.2f} pp" if len(values) > 1 else "-- (one run)"
        lines.append(f"| {label} | {', '.join(f'{v:.2f}' for v in values)} | {np.mean(values):.2f} % | {sd} |")
    return lines


def speedup_model(ev: Evidence) -> list[dict]:
    """Per speculative cell with an AR cell beside it: α, γ, c, measured and predicted speedup (`budgetdraft.grid`)."""
    out = []
    for key in sorted(ev.grid.rows):
        if key[0] == AR or not ev.grid.has((AR, key[1], key[2], 0, 0)):
            continue
        measured, predicted = ev.grid.speedup(key), ev.grid.predicted_speedup(key)
        out.append(
            dict(zip(KEY, key))
            | {
                "alpha": ev.grid.acceptance(key) / 100.0,
                "c": ev.grid.cost(key),
                "measured": measured,
                "predicted": predicted,
                "measured_over_predicted": measured / predicted,
            }
        )
    return out


def speedup_model_rows(model: list[dict], labels=(SD, BD)) -> list[str]:
    """Markdown: per label × context × γ, means over its cells (datasets × budgets) of `speedup_model`."""
    df = pd.DataFrame(model)
    lines = [
        "| drafter | context | γ | cells | α | c | measured | predicted | measured ÷ predicted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if df.empty:
        return lines
    for (label, context, gamma), g in df[df["label"].isin(labels)].groupby(["label", "context", "gamma"], sort=False):
        m = g[["alpha", "c", "measured", "predicted", "measured_over_predicted"]].mean()
        lines.append(
            f"| {label} | {context} | {gamma} | {len(g)} | {m['alpha']:.3f} | {m['c']:.3f} | {m['measured']:.2f}× | "
            f"{m['predicted']:.2f}× | {m['measured_over_predicted']:.2f} |"
        )
    return lines


def header(ev: Evidence, n_files: int, seed: int) -> dict:
    per_dataset = {d: sum(p[0] == d for p in ev.prompts) for d in ev.datasets}
    gammas = sorted({k[4] for k in ev.grid.rows if k[0] != AR})
    variants = ev.s.raw.get("variants") or {}
    return {
        "cells": len(ev.grid.rows),
        "files": n_files,
        "prompts_per_dataset": per_dataset,
        "contexts": ev.contexts,
        "budgets": ev.budgets,
        "gammas": gammas,
        "gamma_fixed": ev.gamma,
        "variants": variants,
        "replicates": [r for r in ev.replicates if r != SHARED],
        "resamples": (len(ev.prompt_weights) - 1) // 3,
        "seed": seed,
        "timing": timing_text(ev.s).strip(),
        "lossless": lossless_summary(ev),
    }


def lossless_summary(ev: Evidence) -> dict:
    """The lossless check's outcome: greedy rows compared with AR's, and the near-tie divergences it allowed."""
    lossless = ev.s.lossless
    return {
        "mode": lossless["lossless"],
        "near_tie_margin": lossless["near_tie_margin"],
        "rows": len(ev.grid.df),
        "near_tie_divergences": ev.grid.divergences,
    }


VERDICT_RULE = (
    "**holds** when the 95 % interval lies entirely on the side the paper claims (excludes 0, or 1 for "
    "ratios); **does not hold** when it lies entirely on the other side; **not resolved** otherwise. "
    "Equivalence claims (F6, F8a, F8b-ctx): **holds** when the interval lies inside the margin, **does not "
    "hold** when entirely outside it, else **not resolved**. **not run**: the cells the finding needs are "
    "absent; **not measured**: the cells lack the column it needs; F3-SD is a diagnostic, not a claim "
    "(no verdict). F8 figures barely vary across prompts: "
    "their interval is close to the point value, and the same rule is applied to it."
)


SPEEDUP_MODEL_TEXT = (
    "Each speculative cell's measured speedup beside (1 − α^(γ+1)) / ((1 − α)(γc + 1)) from its own acceptance α, "
    "its γ and c = seconds per drafter forward ÷ seconds per AR decode step (same dataset and context); rows are "
    "means over the cells (datasets × budgets) of a drafter, context and γ; every cell is in `claims.json` "
    "(`speedup_model`). The model predicts decoding alone; a measured speedup is end to end, both sides including "
    "the same verifier prefill, which pulls it toward 1 (above a prediction below 1), while what the model leaves "
    "out (the drafter's prefill and sparse-cache selection, Python overhead) pulls it down."
)


def markdown(head: dict, found: list[Finding], ev: Evidence, model: list[dict]) -> str:
    variants = (
        "; ".join(
            f"{label}: λ_C={v.get('lambda_c', '?')}, B∈{v.get('budgets', '?')}" for label, v in head["variants"].items()
        )
        or "not given"
    )
    lines = [
        "# Which of the paper's findings hold in this run",
        "",
        f"- Cells read: {head['cells']} ({head['files']} files); prompts per dataset: "
        + ", ".join(f"{d} {n}" for d, n in head["prompts_per_dataset"].items())
        + " (prompt = (dataset, sample))",
        f"- Contexts (shortest first): {', '.join(head['contexts'])}; budgets: {head['budgets']}; "
        f"γ: {head['gammas']} (γ_fixed = {head['gamma_fixed']}); variants: {variants}",
        replicates_line(head),
        f"- 95 % interval: {interval_text(head)}",
        f"- Verdict rule: {VERDICT_RULE}",
        *([f"- {head['timing']}"] if head.get("timing") else []),
        lossless_line(head["lossless"]),
        "",
        "## Findings",
        "",
        "| id | the paper's claim | paper | this run | 95 % interval | verdict | the interval's spread comes from | "
        "replicates × prompts | drafted tokens per arm |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [finding_row(f) for f in found]
    lines += ["", "## Why, and notes", ""]
    lines += [
        f"- **{f.id}** ({f.verdict}): " + "; note: ".join(filter(None, (f.why, f.note)))
        for f in found
        if f.why or f.note
    ]
    lines += ["", "## Analytical speedup model", "", SPEEDUP_MODEL_TEXT, ""] + speedup_model_rows(model)
    lines += ["", "## Acceptance per training replicate", "", REPLICATE_TEXT, ""] + replicate_rows(ev)
    lines += ["", "## Evidence behind each number", ""] + evidence_rows(ev)
    return "\n".join(lines) + "\n"


def replicates_line(head: dict) -> str:
    reps = head["replicates"]
    if len(reps) < 2:
        return (
            "- Training replicates: **R = 1**: every drafter was trained once, so every interval below covers the "
            "prompts only; a rerun on another machine (other float rounding) can move a verdict."
        )
    return (
        f"- Training replicates: **R = {len(reps)}** (replicates {reps}): the base drafter and every variant were "
        "trained once per replicate (training seed + replicate: data order, budget sampling), and every cell of a "
        "trained drafter was measured in each; AR and drafters trained once are shared by all."
    )


def interval_text(head: dict) -> str:
    both = (
        "a paired two-way bootstrap over training replicates and prompts (Owen's pigeonhole bootstrap): each "
        "resample draws the replicates with replacement and, independently, the prompts with replacement within "
        "each dataset"
        if len(head["replicates"]) > 1
        else "a paired bootstrap over prompts (R = 1), drawn with replacement within each dataset"
    )
    return (
        f"{both}; {head['resamples']} resamples, seed {head['seed']}; every arm of a contrast uses the same draw "
        "(paired by replicate and prompt); percentile interval. The spread column splits it: the variance under "
        "resampling the replicates alone vs the prompts alone."
    )


def lossless_line(summary: dict) -> str:
    found = summary["near_tie_divergences"]
    line = (
        f"- Lossless: every greedy row of the {summary['rows']} read was compared token for token with its AR "
        f"output (`lossless_check: {summary['mode']}`); {len(found)} differ"
    )
    if not found:
        return line + "."
    return line + (
        f", each at a near-tie of the verifier (its runner-up within {summary['near_tie_margin']} logits): "
        + "; ".join(f"{d['cell']} sample {d['sample']} at token {d['position']}" for d in found)
    )


def plain(value):
    """JSON-safe: NaN / inf -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def build(cells, settings, out, resamples: int = RESAMPLES, seed: int = SEED) -> list[Path]:
    """Write the claims report (.md) and its .json from cell files; return both paths."""
    s = settings if isinstance(settings, Settings) else parse_settings(settings)
    ev = Evidence(load_claim_cells(cells), s, resamples, seed)
    found, head, model = findings(ev), header(ev, len(cells), seed), speedup_model(ev)
    out = Path(out)
    json_path = out.with_suffix(".json")
    atomic_write_text(out, markdown(head, found, ev, model))
    atomic_write_text(
        json_path,
        json.dumps(
            plain(
                {
                    "header": head,
                    "verdict_rule": VERDICT_RULE,
                    "findings": [asdict(f) for f in found],
                    "speedup_model": model,
                    "replicate_acceptance": replicate_acceptance(ev),
                }
            ),
            indent=1,
        )
        + "\n",
    )
    return [out, json_path]


# ------------------------------------------------------------------------------------------------- CLI


def configure_parser(parser) -> None:
    parser.add_argument(
        "--settings",
        required=True,
        help="JSON object (or a JSON file), as for `budgetdraft paper`; optional variants {label: {lambda_c, budgets}}",
    )
    parser.add_argument("--cells", required=True, nargs="+", help="cell parquet files")
    parser.add_argument("--out", required=True, type=Path, help="claims .md; the .json goes next to it")


def run(args) -> None:
    for path in build(args.cells, args.settings, args.out):
        print(path)
