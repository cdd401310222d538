"""The positional profile in the report: each drafter's teacher-forced agreement with the verifier by position bucket
(`budgetdraft.evaluation.profile` measures it), as a section of the claims report and a figure.

The first bucket is the base drafter's native range (the pipeline's bucket width), so the table reads as: what the
drafter agrees on where it was trained, and how much of that it keeps a multiple of that range further on. Intervals
use the claims' two-way bootstrap (training replicates × prompts, `budgetdraft.report.evidence.Evidence`'s weights):
a prompt is a (dataset, sample) of the longest context, the same column the cells' sample of that dataset is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from budgetdraft.base.names import SHARED
from budgetdraft.evaluation.profilefile import COLUMNS, read_rows
from budgetdraft.report.bootstrap import estimate, ratio
from budgetdraft.report.evidence import Evidence

TEXT = (
    "Teacher-forced top-1 agreement of each drafter with the verifier, by position: one forward of each over the "
    "longest context's prompts, full cache, real positions, and at every position whether the two greedy next tokens "
    "agree (`budgetdraft positions`). Buckets are the base drafter's native range wide: the first is where it was "
    "trained, each later one a further multiple of it. Values: agreement in % pooled over the training replicates "
    "and prompts; the last column, agreement in the last bucket ÷ in the first, with its 95 % interval (replicates × "
    "prompts)."
)


def load_profile(paths) -> pd.DataFrame:
    """The profile rows of every file, each checked (`budgetdraft.evaluation.profile.read_rows`: its seal and rows);
    none: an empty frame."""
    frames = [read_rows(p) for p in paths]
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(frames, ignore_index=True)


def pooled_agreement(ev: Evidence, rows: pd.DataFrame) -> np.ndarray:
    """Agreement (%) of ``rows`` under each bootstrap weights row of ``ev`` (row 0: the point estimate); a prompt the
    cells do not know is dropped."""
    known = [(d, int(s)) in ev.column for d, s in zip(rows["dataset"], rows["sample"])]
    rows = rows[known].copy()
    rows["prompt"] = [ev.column[(d, int(s))] for d, s in zip(rows["dataset"], rows["sample"])]
    rows["replicate"] = rows["replicate"].where(rows["replicate"].isin(ev.row_of), SHARED)
    return 100.0 * ratio(ev.weigh(ev.table(rows, rows["agreed"])), ev.weigh(ev.table(rows, rows["total"])))


def buckets(df: pd.DataFrame) -> list[tuple[int, int]]:
    return sorted({(int(a), int(b)) for a, b in zip(df["bucket_start"], df["bucket_end"])})


def profile_summary(ev: Evidence, df: pd.DataFrame) -> dict[str, dict]:
    """{drafter label: {"buckets": [(start, end, agreement %)], "last_over_first": (point, low, high)}}."""
    out = {}
    for label, rows in df.groupby("label", sort=False):
        spans = buckets(rows)
        values = {span: pooled_agreement(ev, rows[rows["bucket_start"] == span[0]]) for span in spans}
        first, last = values[spans[0]], values[spans[-1]]
        out[str(label)] = {
            "buckets": [(a, b, float(values[(a, b)][0])) for a, b in spans],
            "last_over_first": estimate(ratio(last, first)),
        }
    return out


def section(summary: dict[str, dict]) -> list[str]:
    """The claims report's section: one row per drafter, one column per bucket."""
    if not summary:
        return ["Not measured in this run (no profile files)."]
    spans = next(iter(summary.values()))["buckets"]
    heads = [f"{a}–{b - 1}" + (" (native)" if i == 0 else "") for i, (a, b, _) in enumerate(spans)]
    lines = [
        "| drafter | " + " | ".join(heads) + " | last ÷ first [95 %] |",
        "|---|" + "---|" * (len(heads) + 1),
    ]
    for label, s in summary.items():
        point, low, high = s["last_over_first"]
        values = " | ".join(f"{v:.1f}" for _, _, v in s["buckets"])
        lines.append(f"| {label} | {values} | {point:.2f} [{low:.2f}, {high:.2f}] |")
    return lines


def draw(summary: dict[str, dict], out: Path) -> list[Path]:
    """Agreement vs position, one line per drafter, the native range shaded: OUT (.pdf) and OUT.png."""
    import matplotlib.pyplot as plt

    from budgetdraft.report.figures import save

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, s in summary.items():
        mids = [(a + b - 1) / 2 for a, b, _ in s["buckets"]]
        ax.plot(mids, [v for _, _, v in s["buckets"]], marker="o", label=label)
    if summary:
        a, b, _ = next(iter(summary.values()))["buckets"][0]
        ax.axvspan(a, b - 1, color="0.9", zorder=0, label=f"native range (0–{b - 1})")
    ax.set_xlabel("position in the prompt")
    ax.set_ylabel("top-1 agreement with the verifier (%)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    return save(fig, Path(out))
