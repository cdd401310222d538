"""The two-way bootstrap behind every interval of the claims report, over training replicates and prompts.

The design is crossed (every replicate's drafters decode every prompt), so the interval is Owen's pigeonhole
bootstrap: each resample draws the R replicates with replacement and, independently, the prompts with replacement
within each dataset, and a (replicate, prompt) sum is weighted by the product of the two multiplicities. Every
statistic (both arms of a contrast alike) is recomputed on the same draws, so the arms are paired by replicate
(replicate r of every variant starts from base drafter r) and by prompt. The interval is the percentile interval
taken conservatively: the order statistics at or just outside the 2.5th and 97.5th percentiles (numpy 'lower' /
'higher'); resamples where a statistic is undefined (0/0) are dropped. Where the spread comes from: the same
statistic under as many resamples of the replicates alone (prompts fixed) and of the prompts alone (replicates
fixed); each variance's share of their sum is reported. With R = 1 the interval covers prompts only.
"""

from __future__ import annotations

import math

import numpy as np

RESAMPLES, SEED = 2000, 0


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
