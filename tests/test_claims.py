"""The claims report (`budgetdraft.report.claims`, its findings, bootstrap and verdicts) on synthetic cells.

The cells below are TEST FIXTURES with hand-chosen values (not measurements): the acceptance of every row follows
an `accept(label, dataset, context, budget, sample)` function of each test, times follow `SPEED`, memory `PEAK_MB`
and `KV_MB`. Settings deliberately differ from the paper's (2 datasets, contexts 0.5K/1K, budgets 32/64).
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from budgetdraft.base import methods
from budgetdraft.base.names import parse_label
from budgetdraft.evaluation import cellfile
from budgetdraft.evaluation.grid import Grid, load_cells
from budgetdraft.pipeline import cli
from budgetdraft.report import bootstrap, claims, evidence, figures, findings
from budgetdraft.report.settings import parse_settings

SETTINGS = {
    "datasets": {"d1": "DS-One", "d2": "DS-Two"},
    "contexts": ["0.5K", "1K"],
    "budgets": [32, 64],
    "gammas": {"0.5K": [2, 4], "1K": [2]},
    "gamma_fixed": 2,
    "collapse": {"dataset": "d1", "gamma": 2},
    "comparison": {"dataset": "d2", "contexts": ["0.5K", "1K"], "gamma": 2, "drafter_sizes": {}},
    "single_budget": {"dataset": "d2", "context": "1K", "gamma": 2, "trained_budget": 32},
    "lossless_check": "error",
}
LABELS = ["sd", "lambda0.5", "la_only", "lambda1.0", "single_budget"]
SAMPLES, REPEATS, NEW_TOKENS, DRAFTED = range(6), [0, 1], 64, 50  # more new tokens than drafts accepted
GRID_MAX_NEW_TOKENS = 32  # what the grid's cells record they were asked for (decoded_as)
SPEED = {"ar": 1.0, "sd": 1.2, "lambda0.5": 2.0, "la_only": 1.5, "lambda1.0": 1.9, "single_budget": 1.4}
MEASURED = [
    "decode_s",
    "new_tokens",
    "verifier_forwards",
    "peak_tensor_mb",
    "drafter_kv_mb",
    "verifier_kv_mb",
    "mem_kind",
    "draft_s",
    "draft_steps",
    "verify_s",
]


def ar_time(sample):
    return 2.0 + 0.5 * sample


def PEAK_MB(context):
    return 1000.0 if context == "0.5K" else 1500.0


def KV_MB(budget):
    return 0.25 * budget


def wiggle(sample):  # per-prompt noise: 0, +0.04, -0.04, ... (sums to 0 over the samples)
    return 0.04 * ((sample % 3) - 1)


def paper_like(label, dataset, context, budget, sample):
    """Every finding of the paper, built in: SD collapses with context and small B; BudgetDraft does not."""
    base = {
        "sd": (0.6 if context == "0.5K" else 0.1) * (0.5 if budget == 32 else 1.0),
        "lambda0.5": 0.8,
        "lambda1.0": 0.78,
        "la_only": 0.5,
        "single_budget": 0.7 if budget == SETTINGS["single_budget"]["trained_budget"] else 0.3,
    }[label]
    return base + wiggle(sample)


def reversed_sd_bd(label, dataset, context, budget, sample):
    swap = {"sd": "lambda0.5", "lambda0.5": "sd"}.get(label, label)
    return paper_like(swap, dataset, context, budget, sample)


def equal_sd_bd(label, dataset, context, budget, sample):
    """BudgetDraft = SD on average, but each prompt differs by ±0.1 (in opposite directions)."""
    if label not in ("sd", "lambda0.5"):
        return paper_like(label, dataset, context, budget, sample)
    e = 0.1 if (sample + (dataset == "d2")) % 2 else -0.1
    return 0.5 + (e if label == "lambda0.5" else -e)


def decoded_as(label: str) -> dict:
    """What a real cell of ``label`` records of how it decoded (the report reads these, never the label): its
    decoder, its engine (LABEL+ENGINE: ar+eager is AR on the eager engine) and the new tokens asked for (LABEL~N;
    the grid's cells: GRID_MAX_NEW_TOKENS, fewer than the long generations', whatever this fixture's outputs are)."""
    parts = parse_label(label)
    decodes = methods.REGISTRY[parts.method].decodes if parts.method in methods.REGISTRY else methods.SD
    record = {"max_new_tokens": parts.tokens or GRID_MAX_NEW_TOKENS}
    return {"method": decodes, "engine": parts.engine or "graphs", "config": json.dumps(record)}


def write_cell(root: Path, accept, label, dataset, context, budget, gamma, measured=True, replicate=None) -> Path:
    rows = []
    is_ar = decoded_as(label)["method"] == methods.AR
    for s in SAMPLES:
        for r in REPEATS:
            total = ar_time(s) / SPEED[label] * (0.98 if r == 0 else 1.02)
            drafted = 0 if is_ar else DRAFTED
            steps = 0 if is_ar else gamma * 5
            row = dict(
                label=label,
                dataset=dataset,
                context=context,
                budget=budget,
                gamma=gamma,
                sample=s,
                repeat=r,
                total_s=total,
                tok_per_s=NEW_TOKENS / total,
                drafted=drafted,
                accepted=round(accept(label, dataset, context, budget, s) * drafted) if drafted else 0,
                peak_mem_mb=PEAK_MB(context) + (0.5 if r else -0.5),
                output_ids=np.arange(NEW_TOKENS, dtype=np.int32) + 100 * s,
                **decoded_as(label),
            )
            if replicate is not None:
                row["replicate"] = replicate
            if measured:
                row.update(
                    decode_s=total - 0.5,
                    new_tokens=NEW_TOKENS,
                    verifier_forwards=5,
                    peak_tensor_mb=PEAK_MB(context) - 10,
                    drafter_kv_mb=0.0 if is_ar else KV_MB(budget),
                    verifier_kv_mb=10.0,
                    mem_kind="cuda_max_allocated",
                    draft_s=0.01 * steps,
                    draft_steps=steps,
                    verify_s=0.1 * (NEW_TOKENS - 1 if is_ar else 5),
                )
            rows.append(row)
    where = root / label if replicate is None else root / label / f"r{replicate}"
    path = where / dataset / context / f"B{budget}_g{gamma}.parquet"
    cellfile.write_cell(pd.DataFrame(rows), path)
    return path


def write_grid(root: Path, accept=paper_like, labels=LABELS, measured=True) -> dict:
    """AR + every label at every dataset x context x budget at gamma_fixed, plus SD/BudgetDraft's gamma sweep."""
    out = {}
    for d in SETTINGS["datasets"]:
        for c in SETTINGS["contexts"]:
            out["ar", d, c, 0, 0] = write_cell(root, accept, "ar", d, c, 0, 0, measured)
            for b in SETTINGS["budgets"]:
                for label in labels:
                    for g in SETTINGS["gammas"][c] if label in ("sd", "lambda0.5") else [SETTINGS["gamma_fixed"]]:
                        out[label, d, c, b, g] = write_cell(root, accept, label, d, c, b, g, measured)
    return out


def by_id(paths, settings=SETTINGS, **kw) -> dict:
    ev = evidence.Evidence(evidence.load_claim_cells(list(paths)), parse_settings(settings), **kw)
    return {f.id: f for f in claims.all_findings(ev)}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    return write_grid(tmp_path_factory.mktemp("paper_like"))


def test_paper_like_grid_holds_everywhere(grid):
    found = by_id(grid.values())
    for fid in ["F1", "F2/0.5K", "F2/1K", "F3", "F4", "F5", "F6", "F7/0.5K", "F7/1K", "F8a", "F8b-B", "F8b-ctx"]:
        assert found[fid].verdict == "holds", (fid, found[fid])
    assert found["F3-SD"].verdict == "diagnostic" and found["F3-SD"].ci_low > 0 and not found["F3-SD"].note
    f2 = found["F2/1K"]
    # SD at 1K: 0.1 * (0.5 at B=32, 1.0 at B=64) + wiggle (0 on average) -> 7.5 %; BudgetDraft 80 %
    assert f2.value == pytest.approx(80.0 - 7.5, abs=0.5) and f2.ci_low > 0
    assert f2.prompts == 12 and f2.drafted == {"sd": 2 * 2 * 6 * 2 * DRAFTED, "lambda0.5": 2 * 2 * 6 * 2 * DRAFTED}


def test_contexts_listed_longest_first_are_judged_shortest_first(grid, tmp_path):
    """Settings that list the contexts longest first (with their lengths) give every finding the verdict and value of
    the same cells listed shortest first: F1 is the fall from the shortest to the longest, not its negative, and the
    report's header lists them shortest first."""
    tokens = {"0.5K": 512, "1K": 1024}
    ordered = {**SETTINGS, "context_tokens": tokens}
    backwards = {
        **ordered,
        "contexts": ["1K", "0.5K"],
        "comparison": {**SETTINGS["comparison"], "contexts": ["1K", "0.5K"]},
    }
    assert parse_settings(backwards).contexts == ["0.5K", "1K"]
    straight, reversed_ = by_id(grid.values(), ordered), by_id(grid.values(), backwards)
    assert straight.keys() == reversed_.keys()
    for fid, f in straight.items():
        assert (reversed_[fid].verdict, reversed_[fid].value) == (f.verdict, f.value), fid
    assert straight["F1"].verdict == "holds" and straight["F1"].value < 0
    out = claims.build(list(grid.values()), backwards, tmp_path / "claims.md")
    assert "Contexts (shortest first): 0.5K, 1K;" in out[0].read_text()


def test_speedup_matches_paper_grid_and_prediction(grid):
    f = by_id(grid.values())["F7/0.5K"]
    key = [("lambda0.5", d, "0.5K", f.extra["budget"], f.extra["gamma"]) for d in SETTINGS["datasets"]]
    ar = [grid["ar", d, "0.5K", 0, 0] for d in SETTINGS["datasets"]]
    g = Grid(load_cells([grid[k] for k in key] + ar))
    assert f.value == pytest.approx(np.mean([g.speedup(k) for k in key]))  # equal prompts per dataset
    # c = (0.01 s per drafter forward) / (0.1 s per AR step); alpha from the cell
    alpha, gamma = f.extra["alpha"], f.extra["gamma"]
    assert f.extra["c"] == pytest.approx(0.1)
    assert f.extra["predicted"] == pytest.approx((1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * 0.1 + 1)))
    assert "interval does not include that choice" in f.note


def test_the_ar_cell_a_cell_divides_by_is_read_from_its_rows_not_its_label(tmp_path, monkeypatch):
    """A cell divides by the AR cell its rows say decoded on the same engine to the same length, whatever the labels
    say: an eager SD cell by the eager AR cell, not the grid's; without one, the error names what is missing."""
    accept = lambda *a: 0.5  # noqa: E731
    monkeypatch.setitem(SPEED, "ar+eager", 0.5)  # the eager AR takes twice the grid's AR's time
    monkeypatch.setitem(SPEED, "sd+eager", 1.0)
    d, c = next(iter(SETTINGS["datasets"])), SETTINGS["contexts"][0]
    cells = {label: write_cell(tmp_path, accept, label, d, c, 0, 0) for label in ("ar", "ar+eager")}
    cells["sd+eager"] = write_cell(tmp_path, accept, "sd+eager", d, c, 16, 5)
    g = Grid(load_cells(list(cells.values())))
    assert g.ar_key(d, c, "sd+eager") == ("ar+eager", d, c, 0, 0) and g.ar_key(d, c) == ("ar", d, c, 0, 0)
    assert g.speedup(("sd+eager", d, c, 16, 5)) == pytest.approx(2.0)  # 1.0 if it divided by the grid's AR
    relabelled = load_cells(list(cells.values()))  # the labels' text is no part of it: a label of any name
    relabelled["label"] = relabelled["label"].map({"ar": "ar", "ar+eager": "slow", "sd+eager": "fast"})
    assert Grid(relabelled).ar_key(d, c, "fast") == ("slow", d, c, 0, 0)
    g = Grid(load_cells([cells["ar"], cells["sd+eager"]]))
    with pytest.raises(ValueError, match=r"missing the AR cell of label=sd\+eager.*no AR cell decoded on engine eager"):
        g.speedup(("sd+eager", d, c, 16, 5))


def test_bd_beats_sd_holds_reversed_does_not_hold_equal_not_resolved(grid, tmp_path):
    assert by_id(grid.values())["F2/1K"].verdict == "holds"
    reversed_paths = write_grid(tmp_path / "reversed", reversed_sd_bd, ["sd", "lambda0.5"])
    out = claims.build(list(reversed_paths.values()), SETTINGS, tmp_path / "reversed.md")
    found = {f["id"]: f for f in json.loads(out[1].read_text())["findings"]}
    assert found["F2/1K"]["verdict"] == found["F2/0.5K"]["verdict"] == "does not hold"
    assert found["F2/1K"]["ci_high"] < 0 and found["F2/1K"]["why"]
    text = out[0].read_text()
    assert "| F2/1K |" in text and "**does not hold**" in text and "- **F2/1K** (does not hold):" in text
    equal = by_id(write_grid(tmp_path / "equal", equal_sd_bd, ["sd", "lambda0.5"]).values())
    for context in SETTINGS["contexts"]:
        f = equal[f"F2/{context}"]
        assert f.value == pytest.approx(0.0, abs=1e-9) and f.ci_low < 0 < f.ci_high and f.verdict == "not resolved"


def test_report_moves_with_the_cells(tmp_path):
    paths = write_grid(tmp_path, labels=["sd", "lambda0.5"])
    before = by_id(paths.values())
    path = paths["lambda0.5", "d1", "1K", 32, 2]
    df = pd.read_parquet(path)
    df.loc[df["sample"] == 0, "accepted"] = 0  # prompt (d1, 0) now accepts nothing at this cell
    cellfile.write_cell(df, path)
    after = by_id(paths.values())
    assert after["F2/1K"].value < before["F2/1K"].value
    assert (after["F2/1K"].ci_low, after["F2/1K"].ci_high) != (before["F2/1K"].ci_low, before["F2/1K"].ci_high)
    assert after["F2/0.5K"].value == before["F2/0.5K"].value  # another context: untouched
    assert after["F2/1K"].drafted == before["F2/1K"].drafted


def test_bootstrap_is_reproducible_stratified_and_paired(grid, tmp_path):
    a, b = (
        claims.build(list(grid.values()), SETTINGS, tmp_path / "a.md"),
        claims.build(list(grid.values()), SETTINGS, tmp_path / "b.md"),
    )
    assert a[1].read_text() == b[1].read_text() and a[0].read_text() == b[0].read_text()

    m = bootstrap.multiplicities([np.array([0, 1, 2]), np.array([3, 4])], 5, resamples=100, seed=0)
    assert (m[:, :3].sum(axis=1) == 3).all() and (m[:, 3:].sum(axis=1) == 2).all()  # stratified by dataset

    # BudgetDraft = SD + 10 pp on every prompt, prompts very different: the paired difference is exactly 10 pp in
    # every resample, while each arm alone (and an unpaired difference) varies a lot.
    def offset(label, dataset, context, budget, sample):
        return 0.1 * (sample + 1) + (0.1 if label == "lambda0.5" else 0.0)

    paths = list(write_grid(tmp_path / "offset", offset, ["sd", "lambda0.5"]).values())
    df, settings = evidence.load_claim_cells(paths), parse_settings(SETTINGS)
    ev, ev_other = evidence.Evidence(df, settings), evidence.Evidence(df, settings, seed=1)
    sd, bd = ev.keys("sd", 2, ["1K"]), ev.keys("lambda0.5", 2, ["1K"])
    paired = bootstrap.estimate(ev.acceptance(bd) - ev.acceptance(sd))
    unpaired = bootstrap.estimate(ev.acceptance(bd) - ev_other.acceptance(sd))
    assert paired == pytest.approx((10.0, 10.0, 10.0))
    assert bootstrap.estimate(ev.acceptance(sd)) == bootstrap.estimate(evidence.Evidence(df, settings).acceptance(sd))
    assert bootstrap.estimate(ev.acceptance(sd)) != bootstrap.estimate(ev_other.acceptance(sd))  # another seed
    assert bootstrap.estimate(ev.acceptance(sd))[2] - bootstrap.estimate(ev.acceptance(sd))[1] > 10
    assert unpaired[2] - unpaired[1] > 10


def test_missing_variants_not_run_others_computed(tmp_path):
    found = by_id(write_grid(tmp_path, labels=["sd", "lambda0.5"]).values())
    for fid in ("F4", "F5", "F6"):
        assert found[fid].verdict == "not run" and found[fid].value is None and found[fid].why.startswith("no cells")
    for fid in ("F1", "F2/1K", "F3", "F7/1K", "F8a", "F8b-B"):
        assert found[fid].verdict == "holds", fid


def test_unmeasured_columns_are_reported_not_measured(tmp_path):
    found = by_id(write_grid(tmp_path, labels=["sd", "lambda0.5"], measured=False).values())
    assert found["F8b-B"].verdict == found["F8b-ctx"].verdict == "not measured"
    assert found["F7/1K"].extra["predicted"] is None and "predicted not measured" in found["F7/1K"].detail
    assert "mem_kind not recorded" in found["F8a"].detail and found["F8a"].verdict == "holds"


def test_budget_that_costs_sd_nothing_is_named(tmp_path):
    def flat_sd(label, dataset, context, budget, sample):
        return 0.5 + wiggle(sample) if label == "sd" else paper_like(label, dataset, context, budget, sample)

    found = by_id(write_grid(tmp_path, flat_sd, ["sd", "lambda0.5", "la_only"]).values())
    assert found["F3-SD"].ci_low <= 0 <= found["F3-SD"].ci_high
    assert "budget costs this drafter nothing, so there is no budget loss" in found["F3"].why
    assert found["F3"].verdict != "holds"
    # F4 holds here (BudgetDraft 80 % vs L_A only 50 %): its lines must not say it cannot show
    assert found["F4"].verdict == "holds" and "nothing" not in found["F4"].why + found["F4"].note


def test_cli_writes_report_and_rejects_bad_settings(grid, tmp_path, capsys):
    out = tmp_path / "claims.md"
    settings = {
        **SETTINGS,
        "variants": {
            "lambda0.5": {"lambda_c": 0.5, "budgets": [32, 64]},
            "lambda1.0": {"lambda_c": 1.0, "budgets": [32, 64]},
        },
    }
    cli.main(["claims", "--settings", json.dumps(settings), "--cells", *map(str, grid.values()), "--out", str(out)])
    assert capsys.readouterr().out.split() == [str(out), str(tmp_path / "claims.json")]
    text = out.read_text()
    assert "Verdict rule" in text and "## Evidence behind each number" in text
    assert "variants: lambda0.5: λ_C=0.5, B∈[32, 64]" in text
    assert "| F6 | λ = 1 gives acceptance very close to λ = 0.5" in text
    assert "| lambda0.5 | 12 | 600 / 600 / 600 | 6 × 2 |" in text
    data = json.loads((tmp_path / "claims.json").read_text())
    assert {"id", "claim", "paper", "value", "ci_low", "ci_high", "verdict", "why", "prompts", "drafted"} <= set(
        data["findings"][0]
    )
    assert data["header"]["prompts_per_dataset"] == {"d1": 6, "d2": 6}
    bad = {k: v for k, v in SETTINGS.items() if k != "gamma_fixed"}
    with pytest.raises(SystemExit, match="gamma_fixed"):
        cli.main(["claims", "--settings", json.dumps(bad), "--cells", *map(str, grid.values()), "--out", str(out)])
    with pytest.raises(ValueError, match="no cell is of a dataset"):
        claims.build(list(grid.values()), {**SETTINGS, "datasets": {"d9": "None"}}, out)


def test_drafters_that_did_not_diverge_are_named(tmp_path):
    def single_is_multi(label, dataset, context, budget, sample):
        label = "lambda0.5" if label == "single_budget" else label
        return paper_like(label, dataset, context, budget, sample)

    found = by_id(write_grid(tmp_path, single_is_multi).values())
    assert found["F5"].verdict == "not resolved" and found["F5"].value == 0
    assert "single_budget and lambda0.5 drafted and accepted exactly the same tokens" in found["F5"].why
    assert found["F4"].verdict == "holds" and "exactly the same" not in found["F4"].why


def test_speedup_model_per_cell_moves_with_draft_time_and_is_drawn(tmp_path):
    """c = (0.01 s per drafter forward) / (0.1 s per AR step) in every fixture cell; doubling one cell's draft_s
    doubles its c only, and lowers its predicted speedup (claims.json and the γ figure both read it)."""
    paths = write_grid(tmp_path, labels=["sd", "lambda0.5"])
    md, js = claims.build(list(paths.values()), SETTINGS, tmp_path / "claims.md")
    model = {
        (m["label"], m["dataset"], m["context"], m["budget"], m["gamma"]): m
        for m in json.loads(js.read_text())["speedup_model"]
    }
    assert set(model) == {k for k in paths if k[0] != "ar"}
    key = ("lambda0.5", "d1", "0.5K", 32, 4)
    m = model[key]
    alpha, gamma = m["alpha"], 4
    assert m["c"] == pytest.approx(0.1)
    assert m["predicted"] == pytest.approx((1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * 0.1 + 1)))
    assert m["measured_over_predicted"] == pytest.approx(m["measured"] / m["predicted"])
    assert "## Analytical speedup model" in md.read_text() and "| lambda0.5 | 0.5K | 4 | 4 |" in md.read_text()

    df = pd.read_parquet(paths[key])
    df["draft_s"] *= 2
    cellfile.write_cell(df, paths[key])
    _, js = claims.build(list(paths.values()), SETTINGS, tmp_path / "after.md")
    after = {
        (m["label"], m["dataset"], m["context"], m["budget"], m["gamma"]): m
        for m in json.loads(js.read_text())["speedup_model"]
    }
    assert after[key]["c"] == pytest.approx(0.2) and after[key]["predicted"] < m["predicted"]
    assert all(after[k] == model[k] for k in model if k != key)

    grid = Grid(load_cells(list(paths.values())))
    drawn = figures.plotted_values("fig_gamma", grid, parse_settings(SETTINGS))["0.5K d1"]
    assert drawn["gamma"] == [2, 4]
    expected = np.mean([grid.predicted_speedup(("lambda0.5", "d1", "0.5K", b, 4)) for b in SETTINGS["budgets"]])
    assert drawn["predicted"][1] == pytest.approx(expected) and drawn["c"][1] == pytest.approx(0.15)


def write_replicated(root: Path, bd_offsets) -> list[Path]:
    """AR (shared) + SD and BudgetDraft in len(bd_offsets) training replicates at gamma_fixed: SD accepts 50 % (+
    wiggle), BudgetDraft 4 pp more on every prompt, plus bd_offsets[r] in replicate r."""
    g, paths = SETTINGS["gamma_fixed"], []
    for d in SETTINGS["datasets"]:
        for c in SETTINGS["contexts"]:
            paths.append(write_cell(root, paper_like, "ar", d, c, 0, 0))
            for b in SETTINGS["budgets"]:
                for r, offset in enumerate(bd_offsets):

                    def accept(label, *where, offset=offset):
                        return 0.5 + wiggle(where[-1]) + (0.04 + offset if label == "lambda0.5" else 0.0)

                    paths += [write_cell(root, accept, label, d, c, b, g, replicate=r) for label in ("sd", "lambda0.5")]
    return paths


def test_replicates_that_disagree_widen_the_interval_and_unresolve(tmp_path):
    """Each replicate alone: +4 pp on every prompt (prompts-only interval [4, 4]: holds). Three replicates that
    disagree by ±10 pp: the two-way interval spans 0 (not resolved) and names the replicates as its source."""
    paths = write_replicated(tmp_path / "three", [0.0, -0.1, 0.1])
    one = [p for p in paths if "/r1/" not in str(p) and "/r2/" not in str(p)]
    alone = by_id(one)["F2/1K"]
    assert alone.verdict == "holds" and alone.replicates == 1 and alone.ci_low == pytest.approx(4.0)
    ev = evidence.Evidence(evidence.load_claim_cells(paths), parse_settings(SETTINGS))
    found = {f.id: f for f in claims.all_findings(ev)}
    f = found["F2/1K"]
    assert f.replicates == 3 and f.value == pytest.approx(4.0)
    assert f.ci_low < 0 < f.ci_high and f.verdict == "not resolved"
    bd, sd = ev.keys("lambda0.5", 2, ["1K"]), ev.keys("sd", 2, ["1K"])
    _, _, reps, prompts = bootstrap.blocks(ev.acceptance(bd) - ev.acceptance(sd))
    assert np.ptp(prompts) == pytest.approx(0.0) and np.ptp(reps) > 10  # paired prompts cancel; replicates do not
    assert f.spread["replicate_share"] == pytest.approx(1.0)
    text = claims.markdown(claims.header(ev, len(paths), 0), list(found.values()), ev, [])
    assert "**R = 3**" in text and "| F2/1K |" in text and "replicates 100 %" in text


def test_one_replicate_says_prompts_only_on_every_verdict(grid, tmp_path):
    out = claims.build(list(grid.values()), SETTINGS, tmp_path / "one.md")
    rows = [line for line in out[0].read_text().splitlines() if line.startswith("| F")]
    assert rows and all("prompts only (R = 1" in row for row in rows if "**not run**" not in row)
    assert "**R = 1**" in out[0].read_text()


def test_a_cell_and_replicate_in_two_files_is_refused(tmp_path):
    paths = write_replicated(tmp_path / "a", [0.0, 0.0])
    twin = tmp_path / "b" / "twin.parquet"
    twin.parent.mkdir()
    twin.write_bytes(paths[1].read_bytes())  # the same (cell, replicate) again
    with pytest.raises(ValueError, match="replicate=0.*is in two files"):
        load_cells([*paths, twin])
    shared = pd.read_parquet(paths[1]).drop(columns="replicate")
    cellfile.write_cell(shared, twin)
    with pytest.raises(ValueError, match="both shared and per replicate"):
        load_cells([*paths, twin])


def test_captions_and_figures_show_the_replicates_spread(tmp_path):
    """Two replicates whose BudgetDraft differs by 10 pp: the caption pools 2 replicates and names their spread."""
    from budgetdraft.report import captions

    grid = Grid(load_cells(write_replicated(tmp_path, [0.0, 0.1])))
    text = captions.replicate_text(grid)
    assert "pool 2 training replicates" in text and "largest 7.1 pp" in text  # sd of {x, x + 10} = 7.07 pp
    key = ("lambda0.5", "d1", "1K", 32, 2)
    assert grid.replicate_acceptance(key).diff().iloc[-1] == pytest.approx(10.0)
    assert grid.acceptance(key) == pytest.approx(grid.replicate_acceptance(key).mean())  # equal drafted counts
    assert "one training run each" in captions.replicate_text(Grid(load_cells(write_replicated(tmp_path / "1", [0.0]))))


def test_gamma_figure_has_no_lone_point_panel(grid):
    """SETTINGS sweep γ at 0.5K only (1K has one γ): the figure draws one line per context instead of a 1K row of
    one-point panels, and the replicates' spread is recorded per point."""
    for artifact in ("fig_gamma", "fig_errorbar"):
        fig, values = figures.drawn(artifact, Grid(load_cells(list(grid.values()))), parse_settings(SETTINGS))
        for ax in fig.axes:
            assert max(len(line.get_xdata()) for line in ax.get_lines()) >= 2, (artifact, ax.get_title())
        assert len(values["1K d1"]["gamma"]) == 1 and "acceptance_replicate_sd" in values["1K d1"]


def test_paper_figures_read_as_the_paper_gives_them():
    """The paper's numbers live in one table of data (`findings.PAPER`); the report renders them."""
    assert findings.PAPER["F1"].text() == "GS B=256: 55.42 % (4K) → 0.30 % (8K) → 0.51 % (16K)"
    assert findings.PAPER["F2"].text() == "e.g. 8K GS: 75 % vs 0.14 % (SD)"  # an int: the paper's own rounding
    assert findings.PAPER["F8b-B"].text() == "drafter cache is O(B)"
    assert findings.PAPER_BEST_SPEEDUP == {"4K": 6.55, "8K": 4.46, "16K": 2.10}


def test_plain_values_for_json():
    """One conversion for claims.json (strict JSON: no NaN) and a figure's plotted values (NaN kept)."""
    from budgetdraft.base.jsonio import plain

    values = {1: (np.float32(0.5), np.int64(3), float("nan"), [float("inf")], True, "x", None)}
    assert plain(values, strict=True) == {"1": [0.5, 3, None, [None], True, "x", None]}
    loose = plain(values)
    assert np.isnan(loose["1"][2]) and loose["1"][3] == [float("inf")] and loose["1"][:2] == [0.5, 3]
    assert all(type(v) in (float, int) for v in loose["1"][:2]) and loose["1"][4] is True


@pytest.mark.parametrize("bd_acceptance, why", [(0.0, "with no draft accepted"), (0.1, "that this cell's α, γ")])
def test_a_speedup_its_own_acceptance_cannot_produce_is_timing_inconsistent(tmp_path, bd_acceptance, why):
    """What a slow AR clock gave on a GPU: BudgetDraft 2× faster than AR at an acceptance where no round (α = 0)
    or the analytical model (α = 0.1: ≈ 0.9×) allows it. The speedup interval alone would say "holds"."""

    def slow_ar(label, dataset, context, budget, sample):
        return bd_acceptance if label == "lambda0.5" else paper_like(label, dataset, context, budget, sample)

    found = by_id(write_grid(tmp_path, accept=slow_ar).values())
    for context in SETTINGS["contexts"]:
        f = found[f"F7/{context}"]
        assert f.ci_low > 1 and f.verdict == "timing inconsistent" and why in f.why, f
    assert found["F7/1K"].extra["predicted"] < 1


def test_the_report_shows_the_ar_clock_against_the_bandwidth_bound(tmp_path):
    """AR cells that recorded their share of the bandwidth bound (a GPU) show it per context; cells without it
    (a CPU) say "not measured" rather than a number."""
    paths = write_grid(tmp_path / "cells", labels=["lambda0.5"])
    for key, path in paths.items():
        if key[0] == "ar" and key[2] == "1K":
            cell = pd.read_parquet(path)
            cell["engine"], cell["device"], cell["bound_fraction"] = "graphs", "cuda:H100", 0.6 + 0.01 * cell["sample"]
            cellfile.write_cell(cell, path)
    text = claims.build(list(paths.values()), SETTINGS, tmp_path / "claims.md")[0].read_text()
    section = text.split("## Decode engine and clock")[1].split("## ")[0]
    rows = {
        line.split("|")[1].strip(): line
        for line in section.splitlines()
        if line.startswith("| 0.5K") or line.startswith("| 1K")
    }
    assert "not measured" in rows["0.5K"] and "| graphs | cuda:H100 |" in rows["1K"]
    assert "0.62 (0.60–0.65)" in rows["1K"] and "| 10.0 |" in rows["0.5K"]  # 15 steps in 1.5 s of verify_s a row


def test_a_graphs_run_says_how_much_speedup_survives_a_fast_baseline(tmp_path, monkeypatch):
    """E1 (ours): the eager companions of a graphs run (LABEL+eager) divide by the eager AR, the rest by the graphs
    AR. Here the eager AR is 2× slower and the eager BudgetDraft 1.2× slower than on graphs: BudgetDraft's 2× over
    the fast AR is 3.33× over the slow one, and 0.6 of that survives."""
    monkeypatch.setitem(SPEED, "ar+eager", 0.5)
    monkeypatch.setitem(SPEED, "lambda0.5+eager", 2.0 / 1.2)
    monkeypatch.setitem(SPEED, "sd+eager", 1.2 / 1.2)

    def accept(label, *where):
        return paper_like(label.partition("+")[0], *where)

    paths = write_grid(tmp_path, accept=accept)
    for d in SETTINGS["datasets"]:
        for c in SETTINGS["contexts"]:
            paths["ar+eager", d, c, 0, 0] = write_cell(tmp_path, accept, "ar+eager", d, c, 0, 0)
            for b in SETTINGS["budgets"]:
                for label in ("sd+eager", "lambda0.5+eager"):
                    paths[label, d, c, b, 2] = write_cell(tmp_path, accept, label, d, c, b, SETTINGS["gamma_fixed"])
    found = by_id(paths.values())
    for context in SETTINGS["contexts"]:
        e1 = found[f"E1/{context}"]
        assert e1.verdict == "diagnostic" and e1.value == pytest.approx(0.6, rel=0.02), e1
        assert "over the eager AR" in e1.detail and "SD 1.20× vs 2.00×" in e1.detail
    assert found["F7/1K"].verdict == "holds"  # the paper's findings read the graphs cells alone
    assert not any(fid.startswith("E1") for fid in by_id(write_grid(tmp_path / "eager").values()))


def test_extra_variants_are_listed_with_their_acceptance_and_never_judged(grid, tmp_path, monkeypatch):
    """Variants a config adds beyond the paper's four: claims.md lists each one's acceptance (per replicate, mean,
    minus BudgetDraft's) in a section of its own; the findings and their verdicts are the paper's, unchanged."""
    monkeypatch.setitem(SPEED, "lambda0.25", 1.9)
    monkeypatch.setitem(SPEED, "few_b", 1.6)

    def accept(label, *where):
        return {"lambda0.25": 0.7, "few_b": 0.6}.get(label) or paper_like(label, *where)

    paths = list(grid.values()) + list(write_grid(tmp_path / "extra", accept, ["lambda0.25", "few_b"]).values())
    paths = [p for p in paths if "/ar/" not in str(p) or str(tmp_path) not in str(p)]  # one AR cell per place
    settings = {
        **SETTINGS,
        "variants": {
            "lambda0.5": {"lambda_c": 0.5},
            "lambda1.0": {"lambda_c": 1.0},
            "lambda0.25": {"lambda_c": 0.25},
            "few_b": {"lambda_c": 0.5, "budgets": [32], "steps": 7},
        },
    }
    out = tmp_path / "claims.md"
    claims.build(paths, settings, out, resamples=100)
    text = out.read_text()
    section = text.split("## Variants beyond the paper (not judged)", 1)[1].split("\n## ", 1)[0]
    assert "| lambda0.25 | 0.25 | ? | ? | 70.00 | 70.00 % | -10.00 pp |" in section
    assert "| few_b | 0.5 | [32] | 7 | 60.00 | 60.00 % | -20.00 pp |" in section
    data = json.loads((tmp_path / "claims.json").read_text())
    assert data["extra_variants"]["few_b"]["mean"] == pytest.approx(60.0)
    plain = claims.build(list(grid.values()), {**SETTINGS, "variants": {}}, tmp_path / "plain.md", resamples=100)
    judged = json.loads(plain[1].read_text())["findings"]
    assert [(f["id"], f["verdict"]) for f in data["findings"]] == [(f["id"], f["verdict"]) for f in judged]
    assert "lambda0.25" not in text.split("## Findings", 1)[1].split("## Acceptance per training replicate")[0]
    assert "None in this configuration." in (tmp_path / "plain.md").read_text()


# ------------------------------------------------------------------ controls the paper did not run (issue 39)


def write_controls(root: Path, pi_acceptance: float, full=(0.6, 0.3)) -> list[Path]:
    """The paper-like grid plus PI (position interpolation, no training: flat `pi_acceptance` at every context) and
    SD with a full drafter cache (B0: `full` at 0.5K and 1K)."""
    SPEED.setdefault("pi", 1.3)
    SPEED.setdefault("sd@full", 1.2)

    def accept(label, dataset, context, budget, sample):
        if label == "pi":
            return pi_acceptance + wiggle(sample)
        if label == "sd@full":
            return full[SETTINGS["contexts"].index(context)] + wiggle(sample)
        return paper_like(label, dataset, context, budget, sample)

    paths = list(write_grid(root).values())
    g = SETTINGS["gamma_fixed"]
    for d in SETTINGS["datasets"]:
        for c in SETTINGS["contexts"]:
            paths += [write_cell(root, accept, "pi", d, c, b, g) for b in SETTINGS["budgets"]]
            paths.append(write_cell(root, accept, "sd@full", d, c, 0, g))
    return paths


def test_interpolation_alone_is_judged_against_budgetdraft_s_recovery(tmp_path):
    """At 1K SD accepts 7.5 %, BudgetDraft 80 %: interpolation at 30 % recovers 0.31 of it (holds: less than
    BudgetDraft); at 85 % it recovers more than BudgetDraft (does not hold: the recovery is positional)."""
    less = by_id(write_controls(tmp_path / "less", 0.30))["PI/1K"]
    assert less.verdict == "holds" and less.unit == "ratio"
    assert less.value == pytest.approx((30 - 7.5) / (80 - 7.5), abs=0.02)
    assert "PI 30.00 %" in less.detail and "BD − SD" in less.detail
    more = by_id(write_controls(tmp_path / "more", 0.85))["PI/1K"]
    assert more.verdict == "does not hold" and more.value > 1 and "positional" in more.why


def test_interpolation_share_is_not_judged_where_budgetdraft_recovers_nothing(tmp_path):
    """SD and BudgetDraft swapped: BudgetDraft loses to SD, so there is no recovery to take a share of."""
    SPEED.setdefault("pi", 1.3)
    root = tmp_path / "swapped"
    paths = list(write_grid(root, reversed_sd_bd).values())
    g = SETTINGS["gamma_fixed"]
    for d in SETTINGS["datasets"]:
        for c in SETTINGS["contexts"]:
            paths += [write_cell(root, lambda *a: 0.5, "pi", d, c, b, g) for b in SETTINGS["budgets"]]
    f = by_id(paths)["PI/1K"]
    assert f.verdict == "not resolved" and "no recovery" in f.why


def test_the_collapse_is_split_into_its_positional_and_sparse_parts(tmp_path):
    """Full-cache SD 60 % at 0.5K and 30 % at 1K: 30 pp are lost with every position kept (positional); SD at the
    budgets accepts 7.5 % at 1K, so the sparse cache costs 22.5 pp more there. Both are diagnostics."""
    found = by_id(write_controls(tmp_path, 0.3))
    pos, sparse = found["C-pos/1K"], found["C-sparse/1K"]
    assert pos.verdict == sparse.verdict == "diagnostic"
    assert pos.value == pytest.approx(30.0, abs=0.5) and sparse.value == pytest.approx(22.5, abs=0.5)
    assert "C-pos/0.5K" not in found and found["C-sparse/0.5K"].value == pytest.approx(60 - 45, abs=0.5)


def test_a_finding_whose_interval_is_wider_than_its_effect_names_the_lever(tmp_path):
    """Replicates that disagree by ±10 pp around +4 pp: the interval spans far more than the effect, the
    replicates are its whole spread, so the note asks for more training replicates, not more prompts."""
    f = by_id(write_replicated(tmp_path / "three", [0.0, -0.1, 0.1]))["F2/1K"]
    assert "power:" in f.note and "training replicates" in f.note and "×" in f.note
    assert "prompts would" not in f.note


def test_cells_loaded_from_files_keep_what_the_lossless_check_reads_of_their_sampling(tmp_path):
    """Cells decoded by sampling differ from AR's tokens by design: loaded from their files (grid.load_cells), they
    still carry their recorded sampling settings, so the report skips the token check for them with a note instead of
    failing it; greedy cells that differ still fail."""
    d, c = next(iter(SETTINGS["datasets"])), SETTINGS["contexts"][0]
    paths = [write_cell(tmp_path, lambda *a: 0.5, label, d, c, *at) for label, at in (("ar", (0, 0)), ("sd", (16, 5)))]
    sd = pd.read_parquet(paths[1])
    sd["output_ids"] = [ids + 1 for ids in sd["output_ids"]]  # other tokens than AR's
    cellfile.write_cell(sd, paths[1])
    with pytest.raises(ValueError, match="lossless check failed"):
        Grid(load_cells(paths))
    sampled = json.dumps({"max_new_tokens": GRID_MAX_NEW_TOKENS, "temperature": 1.0, "seed": 0})
    for path in paths:
        frame = pd.read_parquet(path)
        cellfile.write_cell(frame.assign(config=sampled), path)
    assert Grid(load_cells(paths)).divergences == []
