"""The cells a claim is judged on, as per-(training replicate, prompt) sums under the bootstrap's weights.

Cells are loaded with `grid.load_cells` and indexed by `grid.Grid` (with its lossless check, as for the tables).
A prompt is a (dataset, sample); every statistic of the claims report is a function of per-prompt sums, so it can
be recomputed with each prompt weighted by its multiplicity in a resample (`budgetdraft.report.bootstrap`). A shared cell
(AR, or a drafter trained once) counts alike in every replicate.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from budgetdraft.base.methods import AR
from budgetdraft.base.names import SHARED
from budgetdraft.evaluation.grid import COST_COLUMNS, OPTIONAL_COLUMNS, Grid, load_cells
from budgetdraft.report.bootstrap import RESAMPLES, SEED, ratio, two_way_weights
from budgetdraft.report.settings import Settings

MEASURED_COLUMNS = [
    "decode_s",
    "verifier_forwards",
    "peak_tensor_mb",
    "drafter_kv_mb",
    "verifier_kv_mb",
    "mem_kind",
    *COST_COLUMNS,
    # what each generated token was to the prompt-lookup copier and to its draft (budgetdraft.report.copying)
    "draft_outcomes",
    "copied_2",
    "copied_3",
    "copy_share_2",
    "copy_share_3",
]  # read when a cell has them


def load_claim_cells(paths) -> pd.DataFrame:
    """`grid.load_cells` plus the measured columns a cell has (`MEASURED_COLUMNS`; NaN where a cell lacks one)."""
    df = load_cells(paths, OPTIONAL_COLUMNS + tuple(MEASURED_COLUMNS))
    return df.reindex(columns=list(dict.fromkeys([*df.columns, *MEASURED_COLUMNS])))


class Evidence:
    """The cells, their prompts and training replicates, and the two-way bootstrap weights (`two_way_weights`)."""

    def __init__(self, df: pd.DataFrame, settings: Settings, resamples: int = RESAMPLES, seed: int = SEED):
        self.s = settings
        self.datasets, self.contexts = list(settings.datasets), settings.contexts
        self.budgets, self.gamma = sorted(settings.budgets), settings.gamma_fixed
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

    def accepted(self, keys) -> int:
        """Draft tokens accepted over the cells ``keys`` (every replicate and prompt)."""
        return int(sum(self.vector(k, "accepted").sum() for k in keys))
