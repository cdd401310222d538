"""Which of the paper's findings hold in this run: the report of each claim, its figure in the paper, this run's
figure with a 95 % interval and its verdict, all computed from measured grid cells.

`python -m budgetdraft claims --settings JSON --cells FILE [FILE ...] --out results/claims.md`
writes `claims.md` and `claims.json` (same stem). The statistics: `budgetdraft.report.findings` (what each finding
compares), `budgetdraft.report.bootstrap` (the interval and where its spread comes from), `budgetdraft.report.verdicts` (the rule);
the cells behind them: `budgetdraft.report.evidence`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from budgetdraft.base.atomic import atomic_write_text
from budgetdraft.base.jsonio import plain
from budgetdraft.base.methods import AR, LOOKUP, SD
from budgetdraft.base.names import BD, SHARED, extra_variants, length_label
from budgetdraft.evaluation.grid import KEY, acceptance_by_replicate
from budgetdraft.report import copying, findings, memoryuse, speedups
from budgetdraft.report.bootstrap import RESAMPLES, SEED
from budgetdraft.report.captions import shared_drafter_text, timing_text
from budgetdraft.report.evidence import Evidence, load_claim_cells
from budgetdraft.report.profiles import TEXT as POSITIONS_TEXT
from budgetdraft.report.profiles import draw as draw_profile
from budgetdraft.report.profiles import load_profile, profile_summary, section
from budgetdraft.report.settings import Settings, parse_settings
from budgetdraft.report.verdicts import DIAGNOSTIC as DIAGNOSTIC  # re-exported: bench/verdict_stability.py reads it
from budgetdraft.report.verdicts import VERDICT_RULE, Finding


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


EXTRA_VARIANTS_TEXT = (
    "Variants this configuration adds to the paper's four (config `variants`): trained and measured like them, and "
    "never judged, for no finding of the paper is about them. Each one's acceptance is pooled as above (γ_fixed, every "
    "dataset, context and budget it was measured at), beside BudgetDraft's (`lambda0.5`)."
)


def extra_variant_acceptance(ev: Evidence) -> dict[str, dict]:
    """{extra variant: its hyper-parameters as the settings give them, acceptance (%) per replicate and their mean,
    and the mean minus BudgetDraft's}: what claims.md lists for the variants beyond the paper's, unjudged."""
    by_label = replicate_acceptance(ev)
    bd = float(np.mean(by_label[BD])) if by_label.get(BD) else float("nan")
    out = {}
    for label in extra_variants(ev.s.variants):
        values = by_label.get(label, [])
        mean = float(np.mean(values)) if values else float("nan")
        out[label] = {**ev.s.variant(label).to_json(), "per_replicate": values, "mean": mean, "minus_bd_pp": mean - bd}
    return out


def extra_variant_rows(extra: dict[str, dict]) -> list[str]:
    if not extra:
        return ["None in this configuration."]
    lines = [
        "| variant | λ_C | training budgets | steps | acceptance per replicate (%) | mean | − BudgetDraft |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, v in extra.items():
        per = ", ".join(f"{x:.2f}" for x in v["per_replicate"]) or "no cells"
        lines.append(
            f"| {label} | {v.get('lambda_c', '?')} | {v.get('budgets', '?')} | {v.get('steps', '?')} | {per} | "
            f"{show(v['mean'], '')} % | {show(v['minus_bd_pp'], 'pp')} |"
        )
    return lines


def speedup_model(ev: Evidence) -> list[dict]:
    """Per speculative cell with an AR cell beside it: α, γ, c, measured and predicted speedup (`budgetdraft.evaluation.grid`)."""
    out = []
    for key in sorted(ev.grid.rows):
        ar = ev.grid.ar_partner.get(key[0])
        if ev.grid.decodes(key[0]) == AR or ar is None or not ev.grid.has((ar, *key[1:3], 0, 0)):
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


def speedup_model_rows(model: list[dict], tokens: int | None = None, labels=(SD, BD, LOOKUP)) -> list[str]:
    """Markdown: per label × context × γ, means over its cells (datasets × budgets) of `speedup_model`; the labels'
    long generations of ``tokens`` new tokens (LABEL~N) too. The copier's c is its lookups' cost: near 0, so where
    it accepts at all it is the one drafter whose speedup is not eaten by drafting."""
    df = pd.DataFrame(model)
    lines = [
        "| drafter | context | γ | cells | α | c | measured | predicted | measured ÷ predicted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if df.empty:
        return lines
    shown = df["label"].isin([*labels, *(length_label(label, tokens) for label in labels if tokens)])
    for (label, context, gamma), g in df[shown].groupby(["label", "context", "gamma"], sort=False):
        m = g[["alpha", "c", "measured", "predicted", "measured_over_predicted"]].mean()
        lines.append(
            f"| {label} | {context} | {gamma} | {len(g)} | {m['alpha']:.3f} | {m['c']:.3f} | {m['measured']:.2f}× | "
            f"{m['predicted']:.2f}× | {m['measured_over_predicted']:.2f} |"
        )
    return lines


CLOCK_TEXT = (
    "How fast the AR baseline's decode steps are, against the memory-bandwidth bound of the device (the bytes a "
    "step must read, weights + the prompt's KV, at the bandwidth measured once per process by a device copy): "
    "a speedup is only as honest as the baseline it divides. On a CPU no bound is recorded."
)


def clock_rows(ev: Evidence) -> list[str]:
    """Markdown: per context, the engine, AR's decode tok/s and its share of the bandwidth bound (AR cells)."""
    lines = [
        "| context | engine | device | AR decode tok/s | share of the bandwidth bound | AR rows |",
        "|---|---|---|---|---|---|",
    ]
    df = ev.grid.df
    ar = df[df["label"] == AR]
    for context in ev.contexts:
        rows = ar[ar["context"] == context]
        if rows.empty:
            continue
        engine = ", ".join(sorted(rows["engine"].dropna().astype(str).unique())) if "engine" in rows else "?"
        device = ", ".join(sorted(rows["device"].dropna().astype(str).unique())) if "device" in rows else "?"
        timed = "verify_s" in rows and rows["verify_s"].notna().all() and rows["verify_s"].sum() > 0
        rate = f"{(rows['new_tokens'] - 1).sum() / rows['verify_s'].sum():.1f}" if timed else "not measured"
        bound = rows["bound_fraction"].dropna() if "bound_fraction" in rows else rows["label"][:0]
        share = f"{bound.mean():.2f} ({bound.min():.2f}–{bound.max():.2f})" if len(bound) else "not measured"
        lines.append(f"| {context} | {engine or '?'} | {device or '?'} | {rate} | {share} | {len(rows)} |")
    return lines


def given(settings: Settings) -> list[str]:
    """The variants given as checkpoints (not trained here) that have cells."""
    return [label for label, v in settings.variants.items() if v.checkpoint and label not in settings.not_run]


def given_notes(found: list[Finding], settings: Settings) -> list[Finding]:
    """A note on every finding that compares a drafter given as a checkpoint: it is one external draw, so no
    training replicate stands behind it and the interval does not see how another training run would land."""
    labels = set(given(settings))
    for f in found:
        arms = {token for arm in f.drafted for token in arm.replace("+", " ").split()}
        if used := sorted(labels & arms):
            text = f"{', '.join(used)}: one external checkpoint (no training replicate): the interval covers its prompts only"
            f.note = "; ".join(filter(None, (f.note, text)))
    return found


def header(ev: Evidence, n_files: int, seed: int) -> dict:
    per_dataset = {d: sum(p[0] == d for p in ev.prompts) for d in ev.datasets}
    gammas = sorted({k[4] for k in ev.grid.rows if k[0] != AR})
    variants = {label: v.to_json() for label, v in ev.s.variants.items()}
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
        "timing": (timing_text(ev.s) + shared_drafter_text(ev.grid.df)).strip(),
        "given": given(ev.s),
        "not_run": dict(ev.s.not_run),
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


SPEEDUP_MODEL_TEXT = (
    "Each speculative cell's measured speedup beside (1 − α^(γ+1)) / ((1 − α)(γc + 1)) from its own acceptance α, "
    "its γ and c = seconds per drafter forward ÷ seconds per AR decode step (same dataset and context); rows are "
    "means over the cells (datasets × budgets) of a drafter, context and γ; every cell is in `claims.json` "
    "(`speedup_model`). The model predicts decoding alone; a measured speedup is end to end, both sides including "
    "the same verifier prefill, which pulls it toward 1 (above a prediction below 1), while what the model leaves "
    "out (the drafter's prefill and sparse-cache selection, Python overhead) pulls it down."
)


def markdown(head: dict, found: list[Finding], ev: Evidence, model: list[dict], profile: dict | None = None) -> str:
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
        *(
            [f"- Given as checkpoints, not trained here (one external draw each): {', '.join(head['given'])}"]
            if head.get("given")
            else []
        ),
        *(["- Not run: " + "; ".join(f"{v} ({w})" for v, w in head["not_run"].items())] if head.get("not_run") else []),
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
    lines += ["", "## Copying", ""] + copying.section(ev, found)
    lines += ["", "## Positional profile", "", POSITIONS_TEXT, ""] + section(profile or {})
    lines += ["", "## Decode engine and clock", "", CLOCK_TEXT, ""] + clock_rows(ev)
    model_rows = speedup_model_rows(model, copying.long_tokens(ev))
    lines += ["", "## Analytical speedup model", "", SPEEDUP_MODEL_TEXT, ""] + model_rows
    lines += ["", "## Acceptance per training replicate", "", REPLICATE_TEXT, ""] + replicate_rows(ev)
    lines += ["", "## Variants beyond the paper (not judged)", "", EXTRA_VARIANTS_TEXT, ""]
    lines += extra_variant_rows(extra_variant_acceptance(ev))
    lines += ["", "## Evidence behind each number", ""] + evidence_rows(ev)
    return "\n".join(lines) + "\n"


def all_findings(ev: Evidence) -> list[Finding]:
    """Every finding, in the report's order: the paper's (`findings`, `speedups`, `memoryuse`) and ours on copying
    (`copying`)."""
    gap = findings.sd_budget_gap(ev)
    return (
        findings.collapse(ev)
        + findings.collapse_causes(ev)
        + findings.recovery(ev)
        + findings.interpolation(ev)
        + [gap]
        + findings.budget_robustness(ev, gap)
        + findings.consistency_loss(ev, gap)
        + findings.multi_budget(ev)
        + findings.lambda_one(ev)
        + speedups.speedup(ev)
        + speedups.fast_baseline(ev)
        + memoryuse.memory(ev)
        + copying.copying(ev)
    )


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


def build(
    cells, settings, out, resamples: int = RESAMPLES, seed: int = SEED, profile=(), profile_figure=None
) -> list[Path]:
    """Write the claims report (.md) and its .json from cell files (and the positional profile's files, drawn to
    ``profile_figure`` when given); return the paths written."""
    s = settings if isinstance(settings, Settings) else parse_settings(settings)
    ev = Evidence(load_claim_cells(cells), s, resamples, seed)
    found = given_notes(all_findings(ev), s)
    head, model = header(ev, len(cells), seed), speedup_model(ev)
    positions = profile_summary(ev, load_profile(profile))
    out = Path(out)
    json_path = out.with_suffix(".json")
    atomic_write_text(out, markdown(head, found, ev, model, positions))
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
                    "extra_variants": extra_variant_acceptance(ev),
                    "positional_profile": positions,
                },
                strict=True,
            ),
            indent=1,
        )
        + "\n",
    )
    figures = draw_profile(positions, Path(profile_figure)) if profile_figure else []
    return [out, json_path, *figures]
