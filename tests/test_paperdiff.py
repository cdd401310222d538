"""The paper, number by number (`budgetdraft.report.paperdiff`): its reference values, the reader that takes them from a
LaTeX table (the paper's or ours: one layout), the diff against the authors' tolerance, and the sanity checks.

The cells below are TEST FIXTURES (test_claims' synthetic cells), laid out at the paper's own settings so that every
table this pipeline builds has the paper's shape."""

import json
import math

import pytest
from test_claims import SPEED, paper_like, write_cell

from budgetdraft.evaluation import cellfile
from budgetdraft.report import paper, paperdiff
from budgetdraft.report.paperdiff import SAME, Value

SPEED_LABELS = ("sd", "lambda0.5", "la_only", "lambda1.0", "single_budget")  # test_claims' paper-like acceptance
PER_TABLE = {  # values the paper reports in each table
    "main": 2 * 12 * 3 * 5,  # 2 panels x 12 (context, budget) rows x 3 datasets x (AR + 2 x speedup/acceptance)
    "comparison": 16,
    "ablation_lc": 12 * 3 * 5,
    "lambda": 12 * 3 * 5,
    "single_budget": 2 * 4 * 2,
    "vram_gamma": (16 + 6 + 3) * 2,  # γ rows per context, "--" where the paper did not run one
    "vram": 12 * 3 * 2,
}
PAPER_SETTINGS = {
    "datasets": {"gs": "GS", "longbench": "LongBench", "lwm": "LWM"},
    "contexts": ["4K", "8K", "16K"],
    "context_tokens": {"4K": 3800, "8K": 8192, "16K": 16384},
    "budgets": [256, 512, 1024, 2048],
    "gammas": {"4K": list(range(5, 85, 5)), "8K": list(range(5, 35, 5)), "16K": [5, 10, 15]},
    "gamma_fixed": 5,
    "collapse": {"dataset": "gs", "gamma": 5},
    "comparison": {"dataset": "lwm", "contexts": ["8K", "16K"], "gamma": 5, "baselines": ["triforce", "eagle3"]},
    "single_budget": {"dataset": "lwm", "context": "16K", "gamma": 20, "trained_budget": 1024},
    "lossless_check": "error",
    "variants": {
        "lambda0.5": {"lambda_c": 0.5},
        "la_only": {"lambda_c": 0.0},
        "lambda1.0": {"lambda_c": 1.0},
        "single_budget": {"lambda_c": 0.5, "budgets": [1024]},
    },
}


def test_the_papers_reference_values_parse_and_cover_every_table():
    values = paperdiff.paper_values()
    counts = {t: sum(v.table == t for v in values) for t in PER_TABLE}
    assert counts == PER_TABLE
    first = values[0]
    assert (first.table, first.row_label, first.column_label, first.metric, first.value) == (
        "main",
        "4K / 256",
        "GS / AR",
        "tok_s",
        38.10,
    )
    lwm_16k = [v for v in values if v.table == "main" and v.panel == 1 and v.row_label == "16K / 256"]
    assert [v.value for v in lwm_16k if v.column_label == "LWM / BudgetDraft"] == [1.94, 66.48]  # panel B
    assert {v.metric for v in values} == {"tok_s", "speedup", "acceptance", "peak_gb"}
    assert len(paperdiff.places(values)) == len(values)  # one value per place


@pytest.fixture(scope="module")
def paper_scale_tables(tmp_path_factory):
    """Every table built by this pipeline from synthetic cells at the paper's settings (three datasets, 4K / 8K /
    16K, four budgets, the paper's γ sweep, the single-budget table at γ = 20).

    Its 693 cells pass from test_claims' writer to the grid's reader (`grid.load_cells`) in memory: each cell's
    rows are checked as a cell file's are (`cellfile.write_cell`: its invariants, its identity, its record) and read
    as the tables read them, but not sealed into a file and read back (`cellfile.write_sealed`, `read_checked`,
    which checks the same table again): ~10 s of file work here, which tests/test_cell_integrity.py checks."""
    with pytest.MonkeyPatch.context() as m:
        held = {}
        m.setattr(cellfile, "write_sealed", lambda table, out: held.__setitem__(str(out), table))
        m.setattr(cellfile, "read_checked", lambda path: held[str(path)])
        return paper_scale_build(tmp_path_factory.mktemp("paper_scale"))


def paper_scale_build(root) -> dict:
    """The cells of the paper's settings under ``root``, and each table of them in ``root/tables``."""
    for label, speed in {"triforce": 1.1, "eagle3": 1.3}.items():
        SPEED.setdefault(label, speed)
    s = PAPER_SETTINGS
    cells = []

    def cell(label, d, c, b, g):
        cells.append(write_cell(root, paper_like if label in SPEED_LABELS else lambda *a: 0.5, label, d, c, b, g))

    for d in s["datasets"]:
        for c in s["contexts"]:
            cell("ar", d, c, 0, 0)
            for b in s["budgets"]:
                for g in s["gammas"][c]:
                    for label in ("sd", "lambda0.5"):
                        cell(label, d, c, b, g)
                for label in ("la_only", "lambda1.0"):
                    cell(label, d, c, b, 5)
    for c in s["comparison"]["contexts"]:
        for label in ("triforce", "eagle3"):
            cell(label, "lwm", c, 2048, 5)
    for b in s["budgets"]:
        for label in ("single_budget", "lambda0.5"):
            cell(label, "lwm", "16K", b, 20)
    out, grid = {}, paper.as_grid(cells, paper.parse_settings(s))  # the cells read and checked once, not per table
    for key in PER_TABLE:
        path = root / "tables" / f"{key}.tex"
        path.parent.mkdir(exist_ok=True)
        paper.build(key, grid, s, path)
        out[key] = path
    return out


def test_every_value_of_the_paper_has_its_place_in_this_pipelines_tables(paper_scale_tables):
    """Built at the paper's settings, this pipeline's tables hold a number at every place the paper reports one, with
    the same row and column labels: the diff compares like with like."""
    tex = "\n".join(path.read_text() for path in paper_scale_tables.values())
    ours, paper = paperdiff.places(paperdiff.read_tex_tables(tex)), paperdiff.places(paperdiff.paper_values())
    missing = [v for place, v in paper.items() if place not in ours]
    assert not missing, missing[:5]
    for place, v in paper.items():
        mine = ours[place]
        assert (mine.column_label.split(" / ")[0], mine.metric) == (v.column_label.split(" / ")[0], v.metric), v
        if v.table != "vram_gamma":
            assert mine.row_label.lower() == v.row_label.lower(), (v, mine)


def value(metric: str, number: float, row: int = 0) -> Value:
    return Value("main", 0, row, 1, "4K / 256", "GS / BudgetDraft", metric, number)


@pytest.mark.parametrize(
    "metric, delta, within",
    [("acceptance", 1.99, True), ("acceptance", -2.01, False), ("speedup", 0.049, True), ("speedup", -0.051, False)],
)
def test_a_rerun_is_judged_against_the_authors_tolerance(metric, delta, within):
    """±2 points of acceptance and ±0.05× of speedup (EXPECTED_RESULTS.md): inside, or outside."""
    line = paperdiff.compared(value(metric, 50.0), value(metric, 50.0 + delta), SAME)
    assert line["difference"] == pytest.approx(delta) and line["within"] is within
    assert paperdiff.status(line, SAME) == ("within" if within else "outside")


def test_throughput_and_memory_have_no_tolerance_and_another_scale_no_verdict():
    tok = paperdiff.compared(value("tok_s", 38.1), value("tok_s", 30.0), SAME)
    assert tok["within"] is None and paperdiff.status(tok, SAME) == "no tolerance stated"
    far = paperdiff.compared(value("acceptance", 91.62), value("acceptance", 7.0), paperdiff.OTHER)
    assert far["within"] is None and paperdiff.status(far, paperdiff.OTHER) == "counterpart"
    missing = paperdiff.diff([value("speedup", 2.0)], [], SAME)
    assert paperdiff.status(missing[0], SAME) == "not run"


def measured(name: str, **overrides) -> dict:
    """The paper diff's settings of config/NAME.yaml as the plan writes them (its `measurement` included)."""
    from test_plan import plan

    return json.loads(plan(name, **overrides).settings.artifact_settings("paper_diff"))


def first_line(settings: dict) -> tuple[str, str]:
    scale, described = paperdiff.run_scale(settings)
    text = paperdiff.markdown(paperdiff.diff(paperdiff.paper_values(), [], scale), scale, described, [])
    return scale, text.splitlines()[0]


def test_only_the_papers_whole_measurement_is_a_rerun():
    """config/paper.yaml measures what the paper measured: a rerun. The embedded default, and paper.yaml with any one
    part of the measurement changed (50 training steps, another dataset source, one γ less, fewer samples or
    repeats, a bfloat16 verifier), is not: its first line says "counterpart" and names what differs, with the
    paper's value beside it. (The verifier, contexts and budgets alone made a 50-step run a "rerun" before.)"""
    assert first_line(measured("paper"))[0] == SAME
    scale, line = first_line(measured("config"))
    assert scale == paperdiff.OTHER and "not a rerun" in line and "counterparts" in line
    assert "embedded:smollm2" in line and "no verdict" in line
    cuts = {
        "training": ({"training": {"steps": 50}}, "variants.lambda0.5 trained with steps 50 \\(paper: 5000\\)"),
        "source": ({"datasets": {"gs": {"source": "shakespeare_plays"}}}, "shakespeare\\_plays"),
        "gammas": ({"gammas": {"16K": [5, 10]}}, "gammas"),
        "samples": ({"samples": 2}, "samples"),
        "repeats": ({"repeats": 1}, "repeats 1 \\(paper: 5\\)"),
        "dtype": ({"verifier_dtype": "bfloat16"}, "verifier\\_dtype bfloat16 \\(paper: float16\\)"),
    }
    for what, (change, said) in cuts.items():
        scale, line = first_line(measured("paper", **change))
        assert scale == paperdiff.OTHER and said in line, (what, line)


def test_the_release_is_a_rerun_and_another_checkpoint_is_not():
    """The authors' released drafters (their hub repository, each variant's subfolder) are the paper's training: a
    run on them is a rerun; a local copy is taken on trust and says so; another repository or the wrong subfolder
    differs, naming the variant."""
    settings = measured("paper")
    released = {v: {"checkpoint": paperdiff.RELEASE_REPO, "subfolder": sub, "revision": ""}
                for v, sub in paperdiff.RELEASED.items()}  # fmt: skip
    settings["measurement"]["variants"] = released
    assert first_line(settings)[0] == SAME
    local = {**released, "lambda0.5": {"checkpoint": "./ckpts", "subfolder": "main", "revision": ""}}
    settings["measurement"]["variants"] = local
    scale, described = paperdiff.run_scale(settings)
    assert scale == SAME and "taken to be the authors' main/" in described
    wrong = {**released, "la_only": {"checkpoint": paperdiff.RELEASE_REPO, "subfolder": "main", "revision": ""}}
    settings["measurement"]["variants"] = wrong
    scale, line = first_line(settings)
    assert scale == paperdiff.OTHER and "variants.la\\_only: subfolder 'main'" in line


def test_labels_are_plain_text_in_the_markdown():
    """A display name or label holding markdown (`|` would shift every cell after it, `[x](https://…)` is a live
    link) is escaped wherever the report prints it."""
    lines = paperdiff.budget_lines("4K", {"la|bel": {"[x](https://example.org)": {256: 50.0}}})
    assert lines[2].startswith("| la\\|bel | \\[x\\]\\(https://example.org\\) |")
    assert lines[2].count(" | ") == 3  # four cells, as the header's


def test_the_authors_sanity_checks():
    """AR's share of the A100's bound from its tok/s and the 7B fp16 verifier's bytes a step (13.5 GB + the KV at
    3,928 tokens: 2.06 GB): 38.1 tok/s is 0.29 of 2,039 GB/s; identical acceptance at every budget is named."""
    assert paperdiff.paper_bound_fraction(38.10, 3800) == pytest.approx(38.10 * (13.48 + 3928 * 524288 / 1e9) / 2039)
    assert 0.28 < paperdiff.paper_bound_fraction(38.10, 3800) < 0.30
    lines = paperdiff.budget_lines("4K", {"lambda0.5": {"gs": {256: 91.62, 512: 91.62}, "lwm": {256: 90.0, 512: 89.0}}})
    assert any("gs" in line and "**yes**" in line for line in lines)
    assert any("lwm" in line and "| no |" in line for line in lines)
    rows = [{"L_A": "2.0", "L_C": "1.0"}, {"L_A": "4.0", "L_C": "1.0"}]
    assert math.isclose(paperdiff.mean_loss(rows, 0.5), 3.5)
    assert math.isclose(paperdiff.mean_loss([{"L_A": "2.0", "L_C": ""}], 0.0), 2.0)  # L_A only: no L_C logged


def test_a_smaller_grid_lines_up_context_with_context_and_budget_with_budget():
    """Two budgets per context against the paper's four: the paper's third and fourth budget have no counterpart,
    and its next context meets ours (not our second context's first budget as a third 4K row)."""
    paper_rows, our_rows = ["4K / 256", "4K / 512", "4K / 1024", "8K / 256"], ["128 / 16", "128 / 32", "256 / 16"]
    paper_values = [Value("main", 0, i, 0, label, "GS / AR", "tok_s", 30.0) for i, label in enumerate(paper_rows)]
    ours = [Value("main", 0, i, 0, label, "GS / AR", "tok_s", float(i)) for i, label in enumerate(our_rows)]
    lines = paperdiff.diff(paper_values, ours, paperdiff.OTHER)
    assert [(line["row"], line["our_row"]) for line in lines] == [
        ("4K / 256", "128 / 16"),
        ("4K / 512", "128 / 32"),
        ("4K / 1024", None),
        ("8K / 256", "256 / 16"),
    ]


def test_a_memory_table_in_mb_is_compared_in_gb():
    """A CPU run's memory tables are in MB (their caption says so): read as GB, as the paper's, not 1,024x larger."""
    tex = (
        r"\begin{table}\caption{Peak memory (MB) vs draft length $\gamma$: held in tensors.}\label{tab:peak_vram_gamma_full}"
        "\n" r"\begin{tabular}{c|cc}" "\n" r"& \multicolumn{2}{c}{128} \\" "\n" r"$\gamma$ & SD & BudgetDraft \\"
        "\n" r"3 & 512.00 & 1024.00 \\" "\n" r"\end{tabular}\end{table}"
    )  # fmt: skip
    assert [v.value for v in paperdiff.read_tex_tables(tex) if v.metric == "peak_gb"] == [0.5, 1.0]


def test_the_papers_own_inconsistencies_are_listed_as_the_papers(tmp_path):
    """At 8K the paper prints BudgetDraft's best-acceptance run (Table 1, panel B) and its γ = 5 run (Tables 3 and
    C) at the same acceptance with speedups 1.35× apart; the authors' EXPECTED_RESULTS.md Figure 3 peaks at 8K
    LongBench / LWM and 16K LWM fall below Table 1's best speedups where every budget has one acceptance. 4K and
    16K agree across tables, and values that agree give nothing."""
    found = paperdiff.inconsistencies(paperdiff.paper_values())
    assert (
        "8K / B=256 / GS: BudgetDraft at 74.78 % acceptance is 3.74× (main panel B) and 2.39× (ablation_lc, lambda)"
        in found
    )
    assert any(line.startswith("8K / LWM: EXPECTED_RESULTS.md's Figure 3 peak is 2.90× (γ = 15)") for line in found)
    assert sum("Figure 3" in line for line in found) == 3
    assert not [line for line in found if line.startswith(("4K", "16K / B="))]

    def ablation(metric, number):
        return Value("ablation_lc", 0, 0, 2, "4K / 256", "GS / L_A + 0.5 L_C", metric, number)

    (tmp_path / "peaks.csv").write_text("context,dataset,gamma,speedup\n")
    main = [value("speedup", 2.0), value("acceptance", 50.0)]
    agreeing = main + [ablation("speedup", 2.04), ablation("acceptance", 50.0)]
    assert paperdiff.inconsistencies(agreeing, tmp_path / "peaks.csv") == []
    two = main + [ablation("speedup", 3.0), ablation("acceptance", 50.0)]
    (line,) = paperdiff.inconsistencies(two, tmp_path / "peaks.csv")
    assert line == "4K / B=256 / GS: BudgetDraft at 50.00 % acceptance is 3.00× (ablation_lc) and 2.00× (main panel A)"
