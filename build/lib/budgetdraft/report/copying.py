"""How much of the acceptance is copying (ours: the paper does not separate a drafter's skill from copying).

Greedy continuations of base models repeat themselves, and a drafter that can copy what it has already seen gets
that acceptance for free. The prompt-lookup copier (`budgetdraft.decoding.baselines.lookup`: no parameters, label
``lookup``) is measured beside the drafters, and every row records, per generated token, whether the copier would
have predicted it (``copied_2``, ``copied_3``: n-grams up to 2 and 3) and what became of the draft made for it
(``draft_outcomes``: accepted, rejected, none judged). From them, with the claims' two-level intervals (training
replicates × prompts, `budgetdraft.report.evidence.Evidence`):

- the finding CP/<context> (and CP-long/<context> on the long-generation control): acc(BudgetDraft) ÷ acc(copier),
  pooled at γ_fixed, judged > 1: BudgetDraft accepts more than copying alone gives (the paper's acceptance is not
  explained by copying); below 1, a drafter with no parameters accepts more;
- the copy share per context: the share of the verifier's own generated tokens (AR's rows) the copier predicts, over
  the grid's tokens and over the long generations';
- per context, each drafter's acceptance on the tokens the copier predicts against those it does not (a token's
  acceptance: its draft was accepted, among the tokens whose draft was judged), and the share of its accepted
  drafts the copier would have made too: how much of its acceptance is copying;
- per context, each drafter's acceptance and speedup over AR (the copier's drafts cost almost nothing: where it
  speeds decoding up on this machine);
- on the long generations, acceptance by generated position in buckets of ``BUCKET`` tokens, beside the copy share
  there: where copying begins, and how each method's acceptance moves once it does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from budgetdraft.base.methods import AR, LOOKUP, SD
from budgetdraft.base.names import BD, length_label
from budgetdraft.report.bootstrap import estimate, ratio
from budgetdraft.report.evidence import Evidence
from budgetdraft.report.verdicts import FAILS, OPEN, Finding

NGRAM = 2  # the copy flags the diagnostics read (copied_2: transformers' default n-gram)
BUCKET = 16  # generated positions per bucket of the by-position table
DRAFTERS = (SD, BD, LOOKUP)

TEXT = (
    "A copier with no parameters (prompt lookup, transformers' rule: the tokens that followed the last 2-gram's "
    "first earlier occurrence) measured as a drafter beside the others, and, for every generated token of every "
    "row, whether it would have predicted it. A token's acceptance: its draft was accepted, among the tokens whose "
    "draft was judged (a draft after a rejected one in the same round is not: it followed another text). Intervals: "
    "95 %, training replicates × prompts."
)


def long_tokens(ev: Evidence) -> int | None:
    """The new tokens of the long-generation control's cells (labels LABEL~N): the most any cell was asked for
    beyond the grid's AR cell (its cells' ``CellDecoding``), None when the run has none."""
    grid = ev.grid.decoding.get(AR)
    tokens = {g.max_new_tokens for g in ev.grid.decoding.values()} - {None, grid and grid.max_new_tokens}
    return max(tokens) if tokens else None


def keys_at(ev: Evidence, label: str, context: str, gamma: int | None = None) -> list[tuple]:
    """``label``'s cells at ``context``: AR's at γ 0, a drafter's at ``gamma`` (γ_fixed), over the settings' budgets
    where it was measured at them, else at budget 0 (a drafter without a budget: the copier)."""
    gamma = 0 if ev.grid.decodes(label) == AR else ev.gamma if gamma is None else gamma
    budgeted = any(k[0] == label and k[3] in ev.budgets for k in ev.grid.rows)
    return [k for k in ev.keys(label, gamma, [context], None if budgeted else [0]) if k[0] == label]


def copy_finding(ev: Evidence, context: str, tokens: int | None) -> Finding:
    """acc(BD) ÷ acc(copier) at ``context`` (γ_fixed, pooled), on the grid or (``tokens``) the long generations."""
    bd, copier = (label if tokens is None else length_label(label, tokens) for label in (BD, LOOKUP))
    f = Finding(
        f"CP{'' if tokens is None else '-long'}/{context}",
        "(ours) the paper's acceptance is not explained by copying: BudgetDraft accepts more than a copier with no "
        f"parameters, acc(BD) ÷ acc(copier) > 1{'' if tokens is None else f' ({tokens} new tokens)'}",
        "no claim (the paper does not separate copying from the drafter's skill)",
        unit="ratio",
    )
    arms = {bd: keys_at(ev, bd, context), copier: keys_at(ev, copier, context)}
    if not all(arms.values()):
        return f.absent(f"no {' or '.join(label for label, keys in arms.items() if not keys)} cells at {context}")
    a_bd, a_copy = ev.acceptance(arms[bd]), ev.acceptance(arms[copier])
    f.measure(ev, ratio(a_bd, a_copy), arms).judge(">", 1.0)
    f.detail = f"BudgetDraft {a_bd[0]:.2f} % vs the copier {a_copy[0]:.2f} % of its proposals"
    if f.verdict == FAILS:
        f.why = (
            f"the copier, with no parameters, accepts {a_copy[0]:.2f} % of what it proposes, BudgetDraft "
            f"{a_bd[0]:.2f} %: at {context} what BudgetDraft gets could be got by copying"
        )
    elif f.verdict == OPEN:
        f.why = f"BudgetDraft {a_bd[0]:.2f} % vs the copier {a_copy[0]:.2f} %, within the interval's reach"
    return f


def copying(ev: Evidence) -> list[Finding]:
    """The copying findings: per context on the grid's generations, and on the long ones when the run has them."""
    tokens = long_tokens(ev)
    out = [copy_finding(ev, c, None) for c in ev.contexts]
    return out + ([copy_finding(ev, c, tokens) for c in ev.contexts] if tokens else [])


# ------------------------------------------------------------------------------------------------ the section


def per_row(rows: pd.DataFrame, flag: str, select) -> tuple[np.ndarray, np.ndarray]:
    """Per row: (accepted, judged) drafts among its generated tokens where ``select(copied, position)`` holds."""
    accepted, judged = np.zeros(len(rows)), np.zeros(len(rows))
    for i, (outcomes, copied) in enumerate(zip(rows["draft_outcomes"], rows[flag])):
        if np.ndim(outcomes) == 0 or np.ndim(copied) == 0 or len(outcomes) == 0:  # a cell written before: NaN
            continue
        outcomes, copied = np.asarray(outcomes), np.asarray(copied, dtype=bool)
        keep = (outcomes >= 0) & select(copied, np.arange(len(outcomes)))
        accepted[i], judged[i] = (outcomes[keep] == 1).sum(), keep.sum()
    return accepted, judged


def copied_accepts(rows: pd.DataFrame, flag: str) -> tuple[np.ndarray, np.ndarray]:
    """Per row: (accepted drafts the copier would also have made, accepted drafts)."""
    both, accepted = np.zeros(len(rows)), np.zeros(len(rows))
    for i, (outcomes, copied) in enumerate(zip(rows["draft_outcomes"], rows[flag])):
        if np.ndim(outcomes) == 0 or np.ndim(copied) == 0 or len(outcomes) == 0:
            continue
        hit = np.asarray(outcomes) == 1
        both[i], accepted[i] = (hit & np.asarray(copied, dtype=bool)).sum(), hit.sum()
    return both, accepted


def pooled(ev: Evidence, keys: list[tuple], values) -> np.ndarray:
    """Σ over the cells' rows of ``values(rows)`` = (numerator, denominator), as a percentage per bootstrap row."""
    rows = ev.rows(keys)
    if rows.empty or "draft_outcomes" not in rows:
        return np.full(len(ev.replicate_weights), np.nan)
    top, bottom = values(rows)
    return 100.0 * ratio(ev.weigh(ev.table(rows, top)), ev.weigh(ev.table(rows, bottom)))


def with_interval(stat: np.ndarray) -> str:
    value, low, high = estimate(stat)
    return "--" if not np.isfinite(value) else f"{value:.1f} [{low:.1f}, {high:.1f}]"


def share(ev: Evidence, keys: list[tuple], flag: str = f"copied_{NGRAM}", select=None) -> np.ndarray:
    """The share (%) of generated tokens the copier predicts, over the rows of ``keys`` (AR's: the verifier's own
    text), at the positions ``select`` keeps."""
    select = select or (lambda copied, pos: np.ones(len(copied), dtype=bool))

    def values(rows):
        hit, total = np.zeros(len(rows)), np.zeros(len(rows))
        for i, copied in enumerate(rows[flag]):
            if np.ndim(copied) and len(copied):
                copied = np.asarray(copied, dtype=bool)
                keep = select(copied, np.arange(len(copied)))
                hit[i], total[i] = copied[keep].sum(), keep.sum()
        return hit, total

    return pooled(ev, keys, values)


def share_rows(ev: Evidence, tokens: int | None) -> list[str]:
    out = ["| context | copy share, grid (n ≤ 2) | (n ≤ 3) |" + (f" long, {tokens} tokens (n ≤ 2) | (n ≤ 3) |" if tokens
           else ""), "|---|---|---|" + ("---|---|" if tokens else "")]  # fmt: skip
    for c in ev.contexts:
        cells = [with_interval(share(ev, keys_at(ev, AR, c), f"copied_{n}")) for n in (2, 3)]
        if tokens:
            cells += [with_interval(share(ev, keys_at(ev, length_label(AR, tokens), c), f"copied_{n}")) for n in (2, 3)]
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    return out


def split_rows(ev: Evidence, tokens: int | None) -> list[str]:
    """Each drafter's acceptance on the tokens the copier predicts and on the others, per context."""
    out = [
        "| context | generations | method | acceptance on tokens the copier predicts | on the others | "
        "accepted drafts the copier predicts |",
        "|---|---|---|---|---|---|",
    ]
    flag = f"copied_{NGRAM}"
    for label in DRAFTERS:
        for t in (None, tokens) if tokens else (None,):
            own = label if t is None else length_label(label, t)
            for c in ev.contexts:
                keys = keys_at(ev, own, c)
                if not keys:
                    continue
                on = pooled(ev, keys, lambda rows: per_row(rows, flag, lambda copied, pos: copied))
                off = pooled(ev, keys, lambda rows: per_row(rows, flag, lambda copied, pos: ~copied))
                by_copier = pooled(ev, keys, lambda rows: copied_accepts(rows, flag))
                where = "grid" if t is None else f"long ({t})"
                out.append(
                    f"| {c} | {where} | {own} | {with_interval(on)} | {with_interval(off)} | {with_interval(by_copier)} |"
                )
    return out


def speed_rows(ev: Evidence, tokens: int | None) -> list[str]:
    """Per context, each drafter's acceptance and speedup over AR at γ_fixed (pooled over its budgets): where the
    copier, whose drafts cost almost nothing, speeds decoding up on this machine, beside the trained drafters."""
    out = ["| context | generations | method | acceptance (%) | speedup over AR |", "|---|---|---|---|---|"]
    for t in (None, tokens) if tokens else (None,):
        for c in ev.contexts:
            for label in DRAFTERS:
                own = label if t is None else length_label(label, t)
                keys = keys_at(ev, own, c)
                if keys:
                    where = "grid" if t is None else f"long ({t})"
                    speed = estimate(ev.speedup(keys))
                    shown_speed = (
                        "--" if not np.isfinite(speed[0]) else f"{speed[0]:.2f}× [{speed[1]:.2f}, {speed[2]:.2f}]"
                    )
                    out.append(f"| {c} | {where} | {own} | {with_interval(ev.acceptance(keys))} | {shown_speed} |")
    return out


def position_rows(ev: Evidence, tokens: int) -> list[str]:
    """On the long generations: acceptance by generated position (buckets of BUCKET), each method, and AR's copy
    share there, per context."""
    buckets = [(start, min(start + BUCKET, tokens)) for start in range(0, tokens, BUCKET)]
    head = " | ".join(f"{a}-{b - 1}" for a, b in buckets)
    out = [f"| context | row | {head} |", "|---|---|" + "---|" * len(buckets)]
    flag = f"copied_{NGRAM}"
    for c in ev.contexts:
        ar = keys_at(ev, length_label(AR, tokens), c)
        cells = [
            with_interval(share(ev, ar, flag, lambda copied, pos, a=a, b=b: (pos >= a) & (pos < b))) for a, b in buckets
        ]
        out.append(f"| {c} | copy share (AR's tokens) | " + " | ".join(cells) + " |")
        for label in (length_label(d, tokens) for d in DRAFTERS):
            keys = keys_at(ev, label, c)
            if not keys:
                continue
            cells = [
                with_interval(pooled(ev, keys, lambda rows, a=a, b=b: per_row(rows, flag, lambda copied, pos: (pos >= a) & (pos < b))))
                for a, b in buckets
            ]  # fmt: skip
            out.append(f"| {c} | acceptance, {label} | " + " | ".join(cells) + " |")
    return out


def onset(ev: Evidence, tokens: int) -> str:
    """Where copying begins: the first bucket whose copy share (AR's tokens, pooled over contexts) is at least half,
    and the share in the first and the last bucket."""
    ar = [k for c in ev.contexts for k in keys_at(ev, length_label(AR, tokens), c)]
    buckets = [(start, min(start + BUCKET, tokens)) for start in range(0, tokens, BUCKET)]
    shares = [
        estimate(share(ev, ar, f"copied_{NGRAM}", lambda copied, pos, a=a, b=b: (pos >= a) & (pos < b)))[0]
        for a, b in buckets
    ]
    if not ar or not np.isfinite(shares[0]):
        return ""
    first = next((f"{a}-{b - 1}" for (a, b), s in zip(buckets, shares) if s >= 50), None)
    where = f"from tokens {first} on, the copier predicts half of the verifier's tokens or more" if first else (
        "in no bucket does the copier predict half of the verifier's tokens"
    )  # fmt: skip
    return (
        f"Over the long generations ({tokens} tokens, every context pooled) the copier predicts {shares[0]:.0f} % of "
        f"the verifier's first {BUCKET} tokens and {shares[-1]:.0f} % of its last {BUCKET}: {where}."
    )


def section(ev: Evidence, found: list[Finding]) -> list[str]:
    """The claims report's section "Copying"."""
    tokens = long_tokens(ev)
    lines = [TEXT, "", "### The copy share of the verifier's own text", ""] + share_rows(ev, tokens)
    lines += ["", "### Acceptance and speedup over AR, the copier beside the drafters", ""] + speed_rows(ev, tokens)
    lines += ["", "### Acceptance on the tokens the copier predicts, and on the others", ""] + split_rows(ev, tokens)
    if tokens:
        lines += ["", f"### Acceptance by generated position ({tokens}-token generations)", ""]
        lines += [onset(ev, tokens), ""] + position_rows(ev, tokens)
    verdicts = [f for f in found if f.id.startswith("CP")]
    if verdicts:
        lines += ["", "What it means for the paper's numbers: " + meaning(verdicts)]
    return lines


def meaning(found: list[Finding]) -> str:
    held = [f.id for f in found if f.verdict == "holds"]
    failed = [f.id for f in found if f.verdict == "does not hold"]
    parts = []
    if failed:
        parts.append(
            f"at {', '.join(failed)} a copier with no parameters accepts more than BudgetDraft, so acceptance there "
            "is no evidence of a drafter's skill: a speedup claimed from it would also be had by copying"
        )
    if held:
        parts.append(f"at {', '.join(held)} BudgetDraft accepts more than copying alone gives")
    if not parts:
        return "no context separates BudgetDraft from the copier within the intervals."
    return "; ".join(parts) + "."
