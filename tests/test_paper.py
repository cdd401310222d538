"""Aggregation of cell files into the paper's tables and figures (`budgetdraft.report.paper`), on synthetic cells.

The cells below are TEST FIXTURES with hand-chosen values (not measurements): each cell's speedup, acceptance
and peak memory follow the small formulas in `SPEEDUP` / `ACCEPT` / `PEAK_GB`, so the expected table entries can
be computed by hand. Settings deliberately differ from the paper's (2 datasets, contexts 0.5K/1K, budgets 32/64).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from budgetdraft.evaluation import cellfile, sealed
from budgetdraft.evaluation.grid import Grid, load_cells
from budgetdraft.report import artifacts, paper

SRC = Path(__file__).resolve().parents[1] / "src"  # the CLI subprocesses run this checkout's library

SETTINGS = {
    "datasets": {"d1": "DS-One", "d2": "DS-Two"},
    "contexts": ["0.5K", "1K"],
    "budgets": [32, 64],
    "gamma_fixed": 2,
    "collapse": {"dataset": "d1", "gamma": 2},
    "comparison": {
        "dataset": "d2",
        "contexts": ["0.5K", "1K"],
        "gamma": 2,
        "drafter_sizes": {"sd": "1M", "triforce": "1M+9M", "eagle3": "head", "lambda0.5": "1M"},
    },
    "single_budget": {"dataset": "d2", "context": "1K", "gamma": 4, "trained_budget": 32},
    "variants": {
        "la_only": {"lambda_c": 0.0},
        "lambda0.5": {"lambda_c": 0.5},
        "lambda1.0": {"lambda_c": 1.0},
        "single_budget": {"lambda_c": 0.5},
    },
}
SWEEP = {"0.5K": [2, 4, 6], "1K": [2, 4]}
SAMPLES, REPEATS, NEW_TOKENS = [0, 1, 2], [0, 1], 32  # more new tokens than any cell accepts drafts
SAMPLE_FACTOR = {0: 0.9, 1: 1.0, 2: 1.1}  # per-sample speedup = cell speedup * factor (mean over samples = 1)
REPEAT_JITTER = {0: 0.95, 1: 1.05}  # total_s of repeat r = per-sample time * jitter (mean over repeats = 1)


def ar_time(sample):
    return 2.0 * (sample + 1)


def SPEEDUP(label, dataset, context, budget, gamma):
    b = budget // 32
    return {
        "ar": lambda: 1.0,
        "sd": lambda: 0.5 + 0.05 * gamma + 0.01 * b,
        "lambda0.5": lambda: {2: 1.5, 4: 2.5, 6: 2.0}[gamma] + 0.01 * b + (0.2 if dataset == "d2" else 0.0),
        "la_only": lambda: 1.2,
        "lambda1.0": lambda: 1.7 + 0.01 * b,
        "single_budget": lambda: {32: 1.8, 64: 1.1}[budget],
        "triforce": lambda: 1.3,
        "eagle3": lambda: 1.6,
        "sd@snapkv": lambda: 0.6 + 0.01 * b,  # the policies figure: another sparse policy's cells
        "lambda0.5@snapkv": lambda: 1.4 + 0.01 * b,
    }[label]()


def ACCEPT(label, gamma, budget):  # fraction with one decimal -> accepted counts are integers
    return {
        "ar": 0.0,
        "sd": {2: 0.3, 4: 0.2, 6: 0.1}.get(gamma),
        "lambda0.5": {2: 0.9, 4: 0.7, 6: 0.5}.get(gamma),
        "la_only": 0.6,
        "lambda1.0": 0.8,
        "single_budget": {32: 0.4, 64: 0.2}.get(budget),
        "triforce": 0.5,
        "eagle3": 0.5,
        "sd@snapkv": 0.4,
        "lambda0.5@snapkv": {32: 0.6, 64: 0.8}.get(budget),
    }[label]


def PEAK_GB(label, dataset, context, budget, gamma):
    base = (1.0 if context == "0.5K" else 2.0) + (0.1 if dataset == "d2" else 0.0) + 0.02 * (budget // 32)
    return base + (0.1 * gamma if label == "sd" else 0.0)


def output_ids(dataset, context, sample):
    return [hash((dataset, context, sample, i)) % 1000 for i in range(NEW_TOKENS)]


def write_cell(root: Path, label, dataset, context, budget, gamma, method=None, corrupt_sample=None, tie=None) -> Path:
    """``tie`` = (runner-up offset, margin): the AR rows record, at every token t, runner-up t + offset."""
    rows = []
    for s in SAMPLES:
        t = ar_time(s) / (
            SPEEDUP(label, dataset, context, budget, gamma) * (1.0 if label == "ar" else SAMPLE_FACTOR[s])
        )
        for r in REPEATS:
            total = t * REPEAT_JITTER[r]
            drafted = 0 if label == "ar" else 10 * (s + 1)
            accepted = round(ACCEPT(label, gamma, budget) * drafted)
            ids = output_ids(dataset, context, s)
            if s == corrupt_sample:
                ids = ids[:5] + [ids[5] + 1] + ids[6:]
            rows.append(
                dict(
                    label=label,
                    method=method or label,
                    dataset=dataset,
                    context=context,
                    budget=budget,
                    gamma=gamma,
                    policy="topk_chunks",
                    sample=s,
                    doc_id=f"doc{s}",
                    repeat=r,
                    prompt_tokens=100,
                    new_tokens=NEW_TOKENS,
                    verifier_prefill_s=0.1,
                    drafter_prefill_s=0.01,
                    decode_s=total - 0.11,
                    total_s=total,
                    tok_per_s=NEW_TOKENS / total,
                    drafted=drafted,
                    accepted=accepted,
                    verifier_forwards=5,
                    acceptance=accepted / drafted if drafted else float("nan"),
                    tau=2.0,
                    accept_by_position=[0.5] * gamma,
                    peak_mem_mb=PEAK_GB(label, dataset, context, budget, gamma) * 1024 + (-1.0 if r == 0 else 1.0),
                    mem_kind="cuda_max_allocated",
                    device="cpu",
                    output_ids=np.asarray(ids, dtype=np.int32),
                    config="{}",
                    **(
                        {}
                        if tie is None
                        else {"runner_up_ids": [i + tie[0] for i in ids], "top2_margins": [tie[1]] * len(ids)}
                    ),
                )
            )
    path = root / label / dataset / context / f"B{budget}_g{gamma}.parquet"
    cellfile.write_cell(pd.DataFrame(rows), path)
    return path


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    root = tmp_path_factory.mktemp("cells")
    out = {}

    def add(*key):
        out[key] = write_cell(root, *key)

    for d in SETTINGS["datasets"]:
        for c in SETTINGS["contexts"]:
            add("ar", d, c, 0, 0)
            for b in SETTINGS["budgets"]:
                for g in SWEEP[c]:
                    add("sd", d, c, b, g)
                    add("lambda0.5", d, c, b, g)
                for label in ("la_only", "lambda1.0"):
                    add(label, d, c, b, 2)
    for b in SETTINGS["budgets"]:
        add("single_budget", "d2", "1K", b, 4)
    for c in SETTINGS["comparison"]["contexts"]:
        add("triforce", "d2", c, 64, 2)
        add("eagle3", "d2", c, 0, 2)
    return out


def build_text(cells, artifact, tmp_path, settings=SETTINGS, keys=None):
    paths = [p for k, p in cells.items() if keys is None or keys(k)]
    out = tmp_path / f"{artifact}.tex"
    assert paper.build(artifact, paths, settings, out) == [out, paper.sources_path(out)]
    assert paper.trace_file(out)  # the recorded cells and settings re-derive every number of the table
    return out.read_text()


def data_rows(text, first):
    return [line for line in text.splitlines() if line.startswith(first)]


def entries(row):
    return [e.strip() for e in row.rstrip("\\ ").split("&")]


def test_main_picks_best_gamma_and_shows_sd_at_the_same_gamma(cells, tmp_path):
    text = build_text(cells, "main", tmp_path)
    assert text.count(r"\begin{tabular}{ll ccc ccc}") == 2
    assert r"\begin{table*}" in text and r"\label{tab:best_speedup_and_accept_per_budget}" in text
    assert text.count(r"\multirow{2}{*}{0.5K}") == 2 and text.count(r"\multirow{2}{*}{1K}") == 2
    assert text.count(r"\multicolumn{3}{c}{DS-One}") == 2 and text.count(r"\cmidrule(lr){6-8}") == 2
    rows = data_rows(text, "& 32") + data_rows(text, "& 64")
    assert len(rows) == 8 and all(len(entries(r)) == 2 + 3 * 2 for r in rows)
    a_row, b_row = data_rows(text, "& 32")[0], data_rows(text, "& 32")[2]  # (A) and (B) at 0.5K, B=32
    ar_d1 = np.mean([NEW_TOKENS / (ar_time(s) * REPEAT_JITTER[r]) for s in SAMPLES for r in REPEATS])
    # (A): best speedup is gamma=4 (2.5 + 0.01); SD shown at gamma=4 (0.5 + 0.2 + 0.01).
    assert entries(a_row)[2:5] == [f"{ar_d1:.2f}", r"0.71$\times$/20.00", r"2.51$\times$/70.00"]
    # (B): best acceptance is gamma=2 (90 %); SD at gamma=2; d2 adds 0.2 to BudgetDraft's speedup.
    assert entries(b_row)[3:8] == [
        r"0.61$\times$/30.00",
        r"1.51$\times$/90.00",
        entries(b_row)[5],
        r"0.61$\times$/30.00",
        r"1.71$\times$/90.00",
    ]


def test_comparison_rows_and_omitted_baselines(cells, tmp_path):
    text = build_text(cells, "comparison", tmp_path)
    assert r"\begin{table}[t]" in text and r"\label{tab:comparison}" in text
    assert r"\multicolumn{3}{c}{1K context (DS-Two, $\gamma{=}2$)}" in text
    assert text.count(r"AR & 1.00$\times$ & --") == 2
    assert r"SD (sparse/full) & 0.62$\times$ & 1M" in text  # largest budget (64): 0.5 + 0.1 + 0.02
    assert text.count(r"TriForce & 1.30$\times$ & 1M+9M") == 2 and text.count("EAGLE-3 & 1.60$\\times$ & head") == 2
    assert r"BudgetDraft ($B{=}64$) & 1.72$\times$ & 1M" in text
    without = build_text(cells, "comparison", tmp_path, keys=lambda k: k[0] not in ("eagle3", "triforce"))
    assert "EAGLE-3" not in without and "TriForce" not in without and "BudgetDraft ($B{=}32$)" in without
    listed = {**SETTINGS, "comparison": {**SETTINGS["comparison"], "baselines": ["triforce"]}}
    only = build_text(cells, "comparison", tmp_path, settings=listed)
    assert "TriForce" in only and "EAGLE-3" not in only  # cells given but eagle3 not among the baselines run
    with pytest.raises(ValueError, match=re.escape("missing cell (label=triforce, dataset=d2, context=1K")):
        build_text(cells, "comparison", tmp_path, settings=listed, keys=lambda k: k[:3] != ("triforce", "d2", "1K"))


def test_ablation_and_lambda_entries(cells, tmp_path):
    ablation = build_text(cells, "ablation_lc", tmp_path)
    row = entries(data_rows(ablation, "& 32")[0])
    assert row[3:5] == ["1.20/60.00", "1.51/90.00"] and r"$\times$" not in "".join(row)
    assert len(data_rows(ablation, "& 32") + data_rows(ablation, "& 64")) == 4
    lam = build_text(cells, "lambda", tmp_path)
    assert entries(data_rows(lam, "& 64")[0])[3:5] == [r"1.52$\times$/90.00", r"1.72$\times$/80.00"]
    assert r"\label{tab:lambda_sensitivity_full}" in lam and "Ctx & Bud & AR" in lam


def test_single_budget(cells, tmp_path):
    text = build_text(cells, "single_budget", tmp_path)
    assert r"Evaluating setting & $B{=}32$ & $B{=}64$ \\" in text
    assert r"Single-budget ($B{=}32$) & 1.80$\times$/40.00 & 1.10$\times$/20.00 \\" in text
    assert r"Multi-budget & 2.71$\times$/70.00 & 2.72$\times$/70.00 \\" in text
    assert r"on DS-Two at 1K with $\gamma=4$" in text


def test_vram_tables(cells, tmp_path):
    text = build_text(cells, "vram_gamma", tmp_path)
    rows = [entries(line) for line in text.splitlines() if re.match(r"^\d+ &", line)]
    assert [r[0] for r in rows] == ["2", "4", "6"]
    # gamma=6 was run at 0.5K only; mean over budgets {32, 64} and datasets: 1 + 0.03 + 0.05 (+0.6 for SD).
    assert rows[2] == ["6", "1.68", "1.08", "--", "--"]
    vram = build_text(cells, "vram", tmp_path)
    assert r"\begin{tabular}{ll|cc|cc}" in vram and r"\multicolumn{2}{c|}{DS-One}" in vram
    assert entries(data_rows(vram, "& 32")[0])[2:] == ["1.22", "1.02", "1.32", "1.12"]


def test_cpu_memory_is_labelled_and_in_megabytes(cells, tmp_path):
    frames = []
    for path in cells.values():
        df = pd.read_parquet(path)
        df["mem_kind"] = "cpu_tensor_bytes"
        frames.append(df)
    out = tmp_path / "vram_cpu.tex"
    paper.build("vram", pd.concat(frames, ignore_index=True), SETTINGS, out)
    text = out.read_text()
    assert "Peak memory usage (MB)" in text and "counted from the tensors on CPU" in text and "Peak VRAM" not in text
    assert entries(data_rows(text, "& 32")[0])[2:] == ["1249.28", "1044.48", "1351.68", "1146.88"]  # MB, not GB
    mixed = pd.concat(frames[:1] + [pd.read_parquet(p) for p in list(cells.values())[1:]], ignore_index=True)
    with pytest.raises(ValueError, match="different ways"):
        paper.build("vram", mixed, SETTINGS, out)


def test_captions_say_what_stands_behind_each_entry_and_take_lambda_from_the_variants(cells, tmp_path):
    text = build_text(cells, "ablation_lc", tmp_path)
    assert "Behind each entry: 3 prompt(s) $\\times$ 2 timed run(s); drafted tokens per speculative cell" in text
    settings = {**SETTINGS, "variants": {**SETTINGS["variants"], "lambda0.5": {"lambda_c": 0.25}}}
    text = build_text(cells, "ablation_lc", tmp_path, settings=settings)
    assert r"$\mathcal{L}_A + 0.25\,\mathcal{L}_C$" in text and "0.5" not in text.split(r"\caption")[1]


@pytest.mark.parametrize("artifact", ["fig_collapse", "fig_gamma", "fig_errorbar"])
def test_figures_write_pdf_and_png(cells, tmp_path, artifact):
    out = tmp_path / "figs" / f"{artifact}.pdf"
    written = paper.build(artifact, list(cells.values()), SETTINGS, out)
    assert written == [out, out.with_suffix(".png"), paper.sources_path(out)]
    assert out.read_bytes().startswith(b"%PDF") and out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in out.parent.iterdir() if ".tmp" in p.name]
    assert paper.trace_file(out)  # every plotted series re-derives from the recorded cells


def test_policies_figure_plots_each_policy_from_its_own_cells(cells, tmp_path):
    """One line per policy: the config's default policy from the plain labels, another from LABEL@POLICY cells."""
    extra = [write_cell(tmp_path / "cells", f"{label}@snapkv", "d1", c, b, 2, method="sd")
             for label in ("sd", "lambda0.5") for c in SETTINGS["contexts"] for b in SETTINGS["budgets"]]  # fmt: skip
    policies = {"names": ["topk_chunks", "snapkv"], "dataset": "d1", "gamma": 2, "default": "topk_chunks"}
    out = tmp_path / "policies.pdf"
    paper.build("fig_policies", list(cells.values()) + extra, {**SETTINGS, "policies": policies}, out)
    assert out.read_bytes().startswith(b"%PDF") and paper.trace_file(out)
    values = json.loads(paper.sources_path(out).read_text())["values"]
    assert len(values) == 2 * 2 * 2  # contexts x drafters x policies
    assert values["1K lambda0.5 snapkv"] == {
        "budget": [32, 64],
        "acceptance": [60.0, 80.0],
        "speedup": pytest.approx([1.41, 1.42]),
    }
    assert values["0.5K sd topk_chunks"]["acceptance"] == [30.0, 30.0]  # the grid's own sd cells at γ = 2
    with pytest.raises(ValueError, match=r"missing cell \(label=sd@snapkv"):
        paper.build("fig_policies", list(cells.values()), {**SETTINGS, "policies": policies}, out)


def test_trace_file_checks_cells_outputs_and_plotted_values_by_content(cells, tmp_path):
    paths = [tmp_path / "cells" / f"{i}.parquet" for i in range(len(cells))]
    for src, dst in zip(cells.values(), paths):
        dst.parent.mkdir(exist_ok=True)
        dst.write_bytes(src.read_bytes())
    table, figure = tmp_path / "main.tex", tmp_path / "collapse.pdf"
    paper.build("main", paths, SETTINGS, table)
    paper.build("fig_collapse", paths, SETTINGS, figure)
    assert paper.trace_file(table) and paper.trace_file(figure)

    caption = table.read_text().replace("\\caption{", "\\caption{Typed. ", 1)  # a line that holds no number
    table.write_text(caption)
    with pytest.raises(ValueError, match="main.tex changed since it was built"):
        paper.trace_file(table)
    sources = json.loads(paper.sources_path(table).read_text())
    sources["outputs"]["main.tex"] = paper.file_sha256(table)  # even with its digest forged, the caption is checked
    paper.sources_path(table).write_text(json.dumps(sources))
    with pytest.raises(ValueError, match="line .* is not what the cells and settings give"):
        paper.trace_file(table)

    recorded = json.loads(paper.sources_path(figure).read_text())
    series = next(iter(recorded["values"]))
    recorded["values"][series]["acceptance"][0] += 1.0  # a plotted point that the cells do not give
    paper.sources_path(figure).write_text(json.dumps(recorded))
    with pytest.raises(ValueError, match="plotted values not derived from the cells"):
        paper.trace_file(figure)

    sd = next(p for p, k in zip(paths, cells) if k[0] == "sd")
    frame = pd.read_parquet(sd)
    frame.loc[0, "accepted"] += 1  # a cell changed after the artifacts were built (measured again)
    cellfile.write_cell(frame.assign(acceptance=frame["accepted"] / frame["drafted"]), sd)
    for artifact in (table, figure):
        with pytest.raises(ValueError, match="changed since the artifact was built"):
            paper.trace_file(artifact)


def test_speedup_is_mean_of_per_sample_ratios(cells):
    grid = Grid(load_cells([cells[("ar", "d1", "1K", 0, 0)], cells[("sd", "d1", "1K", 32, 2)]]))
    key = ("sd", "d1", "1K", 32, 2)
    assert grid.speedup(key) == pytest.approx(0.61)
    assert list(grid.sample_speedups(key).round(6)) == [round(0.61 * f, 6) for f in SAMPLE_FACTOR.values()]
    ratio_of_means = sum(map(ar_time, SAMPLES)) / sum(ar_time(s) / (0.61 * SAMPLE_FACTOR[s]) for s in SAMPLES)
    assert abs(ratio_of_means - 0.61) > 1e-3  # the fixture tells the two definitions apart
    assert grid.acceptance(key) == pytest.approx(30.0)


def test_missing_cell_is_named(cells, tmp_path):
    gone = ("sd", "d1", "0.5K", 32, 4)
    with pytest.raises(ValueError, match=re.escape("label=sd, dataset=d1, context=0.5K, budget=32, gamma=4")):
        build_text(cells, "main", tmp_path, keys=lambda k: k != gone)
    with pytest.raises(ValueError, match=re.escape("label=ar, dataset=d2, context=1K, budget=0, gamma=0")):
        build_text(cells, "lambda", tmp_path, keys=lambda k: k != ("ar", "d2", "1K", 0, 0))
    with pytest.raises(ValueError, match="settings: missing key 'single_budget.gamma'"):
        bad = {**SETTINGS, "single_budget": {"dataset": "d2", "context": "1K", "trained_budget": 32}}
        build_text(cells, "single_budget", tmp_path, settings=bad)


def test_a_truncated_cell_file_is_named_with_its_fix(cells, tmp_path):
    data = cells[("ar", "d1", "1K", 0, 0)].read_bytes()
    for size in (0, len(data) // 2, len(data) - 4):  # empty, half, footer cut off
        cut = tmp_path / "results" / "cells" / "cut.parquet"
        cut.parent.mkdir(parents=True, exist_ok=True)
        cut.write_bytes(data[:size])
        with pytest.raises(
            ValueError,
            match=re.escape(f"{cut}: not a whole parquet file: delete it and re-run to re-measure it"),
        ):
            load_cells([cells[("sd", "d1", "1K", 32, 2)], cut])


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda df: df.assign(accepted=df["accepted"] + 1), "acceptance = 0.3 but accepted / drafted give 0.4"),
        (lambda df: df.assign(accepted=df["drafted"] + 1), "accepted 11 > drafted 10"),
        (lambda df: df.assign(tok_per_s=df["tok_per_s"] * 2), "tok_per_s = "),
    ],
    ids=["accepted-raised", "accepted-beyond-drafted", "speed-doubled"],
)
def test_a_cell_whose_columns_disagree_is_refused(cells, tmp_path, edit, message):
    """A cell edited by hand (or mixed from two runs) so that a derived column no longer follows its inputs, and
    sealed again with a digest of its edited rows (no checks): only its rows can tell."""
    df = pd.read_parquet(cells[("sd", "d1", "1K", 32, 2)])
    edited = tmp_path / "edited.parquet"
    pq.write_table(sealed.seal(pa.Table.from_pandas(edit(df), preserve_index=False)), edited)
    with pytest.raises(ValueError, match=re.escape(f"{edited}: ") + ".*" + re.escape(message)):
        load_cells([edited])


def test_lossless_violation_detected(cells, tmp_path):
    bad = write_cell(tmp_path / "bad", "lambda0.5", "d2", "1K", 64, 2, corrupt_sample=1)
    paths = [p for k, p in cells.items() if k != ("lambda0.5", "d2", "1K", 64, 2)] + [bad]
    with pytest.raises(
        ValueError,
        match=r"lossless check failed: cell \(label=lambda0\.5, dataset=d2, context=1K, "
        r"budget=64, gamma=2\) sample 1 .*first difference at token 5",
    ):
        paper.build("vram", paths, SETTINGS, tmp_path / "x.tex")
    with pytest.raises(ValueError, match="is in two files"):
        load_cells([cells[("ar", "d1", "1K", 0, 0)]] * 2)


def test_lossless_near_tie_mode_allows_reports_and_refuses_the_rest(cells, tmp_path, capsys):
    """A cell differing from AR where AR's verifier had its token as runner-up within the margin is a near-tie:
    allowed and listed under `near_tie`, an error under `error`; any other difference fails in both modes."""
    bad = write_cell(tmp_path / "bad", "lambda0.5", "d2", "1K", 64, 2, corrupt_sample=1)  # token 5 -> +1
    others = [p for k, p in cells.items() if k not in {("lambda0.5", "d2", "1K", 64, 2), ("ar", "d2", "1K", 0, 0)}]
    near = {**SETTINGS, "lossless_check": "near_tie", "near_tie_margin": 0.25}

    def build(tie, settings):
        ar = write_cell(tmp_path / f"ar{tie}", "ar", "d2", "1K", 0, 0, tie=tie)
        return paper.build("vram", others + [ar, bad], settings, tmp_path / "x.tex")

    written = build((1, 0.1), near)
    divergences = json.loads(written[-1].read_text())["near_tie_divergences"]
    assert sorted(d["repeat"] for d in divergences) == sorted(REPEATS)  # every divergent row, listed
    for d in divergences:
        assert (d["sample"], d["position"], d["margin"]) == (1, 5, pytest.approx(0.1))
        assert "budget=64, gamma=2" in d["cell"] and d["near_tie"]
    assert "near-tie divergence" in capsys.readouterr().err
    for tie, settings, why in [
        ((1, 0.1), SETTINGS, "first difference at token 5: .* runner-up .* margin of 0.1 logits"),  # mode error
        ((1, 0.5), near, "margin of 0.5 logits.*not at a near-tie"),  # AR was not close to a tie there
        ((2, 0.1), near, "not at a near-tie"),  # the cell's token was not AR's runner-up
    ]:
        with pytest.raises(ValueError, match=why):
            build(tie, settings)
    without_ties = paper.build("vram", list(cells.values()), near, tmp_path / "y.tex")
    assert json.loads(without_ties[-1].read_text())["near_tie_divergences"] == []


def test_trace_maps_every_number_to_cells(cells, tmp_path):
    """The main table is built and traced from the cell files; every other table from their grid, loaded once (each
    load reads and checks all 66 files, 2 s here, and 17 of them made this test 33 s)."""
    out = tmp_path / "main.tex"
    paper.build("main", list(cells.values()), SETTINGS, out)
    traced = paper.trace(out, list(cells.values()), SETTINGS)
    assert len(traced) == 2 * 2 * 2 * 2 * 5  # panels x contexts x budgets x datasets x (AR + 2 x speedup/acc)
    assert ("2.51", "speedup (label=lambda0.5, dataset=d1, context=0.5K, budget=32, gamma=4)") in traced
    tables = [key for key, a in paper.ARTIFACTS.items() if a.kind == "table" and a.in_all == artifacts.ALWAYS]
    assert len(tables) == 7
    grid = paper.as_grid(list(cells.values()), paper.parse_settings(SETTINGS))
    for artifact in tables:  # every table: numbers in the file, in order, are the ones the cells give
        other = tmp_path / f"{artifact}.tex"
        paper.build(artifact, grid, SETTINGS, other)
        assert paper.trace(other, grid, SETTINGS)
    out.write_text(out.read_text().replace("2.51$", "9.99$", 1))
    with pytest.raises(ValueError, match="not derived from the cells"):
        paper.trace(out, grid, SETTINGS)


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, "-m", "budgetdraft", "paper", *args], capture_output=True, text=True, env=env
    )


def test_cli(cells, tmp_path):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(SETTINGS))
    paths = [str(p) for p in cells.values()]
    out = tmp_path / "t" / "ablation.tex"
    done = run_cli(
        "--artifact", "ablation_lc", "--out", str(out), "--settings", json.dumps(SETTINGS), "--cells", *paths
    )
    assert done.returncode == 0, done.stderr
    assert r"\label{tab:ablation_lc}" in out.read_text()
    fig = tmp_path / "t" / "collapse.pdf"
    done = run_cli("--artifact", "fig_collapse", "--out", str(fig), "--settings", str(settings), "--cells", *paths)
    assert done.returncode == 0, done.stderr
    assert fig.stat().st_size > 0 and fig.with_suffix(".png").stat().st_size > 0
    done = run_cli(
        "--artifact",
        "single_budget",
        "--out",
        str(tmp_path / "s.tex"),
        "--settings",
        str(settings),
        "--cells",
        *[str(p) for k, p in cells.items() if k[0] != "single_budget"],
    )
    assert done.returncode != 0 and "missing cell (label=single_budget, dataset=d2, context=1K" in done.stderr


def test_comparison_drafter_sizes_are_counted_from_the_weights(cells, tmp_path):
    """`paper --drafters`: the Drafter column is the parameter count of each label's directories, never typed."""
    from conftest import tiny_llama

    from budgetdraft.decoding.loading import parameter_count

    small, large = tmp_path / "small", tmp_path / "large"
    tiny_llama(layers=1).save_pretrained(small)
    tiny_llama(layers=3).save_pretrained(large)
    n_small = sum(p.numel() for p in tiny_llama(layers=1).parameters())
    assert parameter_count(small) == n_small  # untied embedding and head: every parameter stored once
    settings = {**SETTINGS, "comparison": {k: v for k, v in SETTINGS["comparison"].items() if k != "drafter_sizes"}}
    drafters = {
        "sd": [str(small)],
        "triforce": [str(small), str(large)],
        "eagle3": [str(small)],
        "lambda0.5": [str(small)],
    }
    out = tmp_path / "comparison.tex"
    done = run_cli(
        "--artifact", "comparison", "--out", str(out), "--settings", json.dumps(settings),
        "--drafters", json.dumps(drafters), "--cells", *[str(p) for p in cells.values()],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    small_text, large_text = (f"{parameter_count(d) / 1e3:.0f}K" for d in (small, large))
    text = out.read_text()
    assert f"& {small_text}+{large_text} \\\\" in text and f"& {small_text} \\\\" in text
    assert paper.trace_file(out)  # the counted sizes are recorded in the settings the trace re-derives from


# ------------------------------------------------------------------------------------ variants beyond the paper's


def relabelled(cells, tmp_path, source: str, label: str) -> list[Path]:
    """Copies of the cells of ``source`` as the cells of a variant ``label`` (same rows, their label changed)."""
    out = []
    for key, path in cells.items():
        if key[0] != source:
            continue
        frame = pd.read_parquet(path).assign(label=label)
        copy = tmp_path / "extra" / label / Path(*Path(path).parts[-3:])
        cellfile.write_cell(frame, copy)
        out.append(copy)
    return out


def test_lambda_table_lists_every_lambda_variant_in_order_of_lambda(cells, tmp_path):
    """Extra λ variants a config adds (here λ = 2.0 and 0.25, listed in that order) join the λ table, ordered by λ;
    the paper's own two stay as they were (test_ablation_and_lambda_entries)."""
    settings = {
        **SETTINGS,
        "variants": {**SETTINGS["variants"], "lambda2.0": {"lambda_c": 2.0}, "lambda0.25": {"lambda_c": 0.25}},
    }
    extra = relabelled(cells, tmp_path, "lambda1.0", "lambda2.0") + relabelled(cells, tmp_path, "la_only", "lambda0.25")
    out = tmp_path / "lambda.tex"
    paper.build("lambda", list(cells.values()) + extra, settings, out)
    assert paper.trace_file(out)
    text = out.read_text()
    assert r"\begin{tabular}{ll ccccc ccccc}" in text and r"\multicolumn{5}{c}{DS-One}" in text
    heads = [
        r"$\mathcal{L}_A+0.25\mathcal{L}_C$",
        r"$\mathcal{L}_A+0.5\mathcal{L}_C$",
        r"$\mathcal{L}_A+\mathcal{L}_C$",
    ]
    heads.append(r"$\mathcal{L}_A+2\mathcal{L}_C$")
    assert "Ctx & Bud & AR & " + " & ".join(heads) + " & AR & " in text
    # λ = 0.25 (la_only's cells), 0.5, 1.0, 2.0 (lambda1.0's cells) at d1, 0.5K, B = 64
    assert entries(data_rows(text, "& 64")[0])[3:7] == [
        r"1.20$\times$/60.00",
        r"1.52$\times$/90.00",
        r"1.72$\times$/80.00",
        r"1.72$\times$/80.00",
    ]
    assert r"\mathcal{L}_A + 0.25\,\mathcal{L}_C$ vs $\mathcal{L}_A + 0.5\,\mathcal{L}_C$ vs" in text
    with pytest.raises(ValueError, match=re.escape("missing cell (label=lambda0.25")):
        paper.build("lambda", list(cells.values()), settings, tmp_path / "missing.tex")


def test_lambda_columns_whose_lambda_prints_alike_name_their_variants(cells, tmp_path):
    """λ = 0.5 (BudgetDraft) and 0.5000001 both print 0.5: those two headers also name their variant (the others
    stay the paper's), and the trace still re-derives every line."""
    settings = {**SETTINGS, "variants": {**SETTINGS["variants"], "lam05b": {"lambda_c": 0.5000001}}}
    extra = relabelled(cells, tmp_path, "la_only", "lam05b")
    out = tmp_path / "lambda.tex"
    paper.build("lambda", list(cells.values()) + extra, settings, out)
    assert paper.trace_file(out)
    text = out.read_text()
    heads = [
        r"$\mathcal{L}_A+0.5\mathcal{L}_C$ (\texttt{lambda0.5})",
        r"$\mathcal{L}_A+0.5\mathcal{L}_C$ (\texttt{lam05b})",
        r"$\mathcal{L}_A+\mathcal{L}_C$",
    ]
    assert "Ctx & Bud & AR & " + " & ".join(heads) + r" & AR & " in text
    assert entries(data_rows(text, "& 64")[0])[3:6] == [
        r"1.52$\times$/90.00",
        r"1.20$\times$/60.00",
        r"1.72$\times$/80.00",
    ]
    assert (
        r"0.5\,\mathcal{L}_C$ (\texttt{lambda0.5}) vs $\mathcal{L}_A + 0.5\,\mathcal{L}_C$ (\texttt{lam05b}) vs" in text
    )


def test_variants_table_shows_the_extra_variants_with_their_hyper_parameters(cells, tmp_path):
    settings = {
        **SETTINGS,
        "variants": {**SETTINGS["variants"], "few_b": {"lambda_c": 0.5, "budgets": [32], "steps": 7}},
    }
    extra = relabelled(cells, tmp_path, "la_only", "few_b")
    out = tmp_path / "variants.tex"
    assert paper.build("variants", list(cells.values()) + extra, settings, out) == [out, paper.sources_path(out)]
    assert paper.trace_file(out)
    text = out.read_text()
    assert r"\label{tab:extra_variants}" in text
    assert r"Ctx & Bud & AR & BudgetDraft & \multicolumn{1}{c}{\texttt{few\_b}} & AR" in text
    assert r"\texttt{few\_b}: $\mathcal{L}_A + 0.5\,\mathcal{L}_C$, trained at $B\in\{32\}$, 7 steps." in text
    assert entries(data_rows(text, "& 64")[0])[3:5] == [r"1.52$\times$/90.00", r"1.20$\times$/60.00"]
    none = tmp_path / "none.tex"
    paper.build("variants", list(cells.values()), SETTINGS, none)
    assert "No variants beyond the paper's in this configuration" in none.read_text()
    assert paper.trace_file(none)
