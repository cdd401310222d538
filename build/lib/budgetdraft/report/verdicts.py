"""Verdicts: what a finding's 95 % interval says about the paper's claim, and the record of one finding.

A directional claim holds when the interval lies entirely on the paper's side of the reference (0, or 1 for ratios;
a bound within 1e-9 of it excludes nothing), does not hold when entirely on the other side, and is not resolved
otherwise. An equivalence claim holds when the interval lies inside the margin, does not hold when entirely outside
it, and is not resolved otherwise. not run: the cells the finding needs are absent; not measured: the cells lack the
column it needs. A finding that does not hold or is not resolved gets a one-line 'why' derived from the cells where
they show one; a possible reason they cannot show is labelled '(not measured)'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from budgetdraft.report.bootstrap import estimate, variance_split
from budgetdraft.report.evidence import Evidence

HOLDS, FAILS, OPEN, NOT_RUN, NOT_MEASURED = "holds", "does not hold", "not resolved", "not run", "not measured"
TIMING = "timing inconsistent"  # a speedup the cells' own α, γ and c cannot produce: the clock, not the method
TIMING_FACTOR = 1.25  # measured ÷ predicted speedup above this reads as the clock's doing
DIAGNOSTIC = "diagnostic"
UNMET = (FAILS, OPEN)  # verdicts that get a 'why' when the cells show one

# The rule in the report's words (claims.md's header, claims.json's `verdict_rule`).
VERDICT_RULE = (
    "**holds** when the 95 % interval lies entirely on the side the paper claims (excludes 0, or 1 for "
    "ratios); **does not hold** when it lies entirely on the other side; **not resolved** otherwise. "
    "Equivalence claims (F6, F8a, F8b-ctx): **holds** when the interval lies inside the margin, **does not "
    "hold** when entirely outside it, else **not resolved**. **not run**: the cells the finding needs are "
    "absent; **not measured**: the cells lack the column it needs; **timing inconsistent**: a speedup that would "
    f"hold exceeds by more than {TIMING_FACTOR}× what the cells' own α, γ and c allow (or SD beats AR with no "
    "draft accepted), which a slow AR clock produces, not a faster method; F3-SD is a diagnostic, not a claim "
    "(no verdict). F8 figures barely vary across prompts: "
    "their interval is close to the point value, and the same rule is applied to it."
)


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
