"""The workflow's plan (budgetdraft.pipeline.plan.Plan) in process, without Snakemake: the grid of each config (counted
independently from docs/artifacts.md), each artifact's cells, replicated labels, the policy and engine companions,
drafters, hyper-parameters and their seeds, settings (checked against PaperSettings), the cell path (formatted and
parsed in one place) and the code each stage runs. tests/test_workflow.py plans the same configs with Snakemake,
where the wiring itself is what it tests; the unreadable-cell step: tests/test_unreadable_cells.py."""

import copy
import functools
import json
import re
from pathlib import Path

import pytest
import yaml

from budgetdraft.base import defaults, methods, names
from budgetdraft.base.importgraph import code_files
from budgetdraft.evaluation import cellfile
from budgetdraft.pipeline.configcheck import check_config
from budgetdraft.pipeline.plan import STAGE_COMMANDS, Plan
from budgetdraft.report.settings import PaperSettings

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
CONFIGS = ("config", "ci", "paper")
EXTRA_VARIANTS = {"lambda0.25": {"lambda_c": 0.25}, "budgets_mix": {"budgets": [16, 32], "budget_weights": [0.9, 0.1]}}


def raw_config(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())


@functools.cache
def _checked(name: str, overrides: str) -> dict:
    cfg = raw_config(name)
    check_config(cfg, schema=SCHEMA, overrides=json.loads(overrides))
    return cfg


def config(name: str = "ci", **overrides) -> dict:
    """config/NAME.yaml as the Snakefile has it after check_config (``overrides`` merged in as --config's)."""
    return copy.deepcopy(_checked(name, json.dumps(overrides, sort_keys=True)))


def plan(name: str = "ci", **overrides) -> Plan:
    return Plan(config(name, **overrides))


# ------------------------------------------------------------------------------------- the grid, counted apart


def expected_cells(cfg: dict) -> set:
    """Cells docs/artifacts.md asks for, counted independently of budgetdraft.pipeline.plan."""
    ds, ctx, budgets = list(cfg["datasets"]), list(cfg["contexts"]), cfg["budgets"]
    cells = {("ar", d, c, 0, 0) for d in ds for c in ctx}
    for label in ("sd", "lambda0.5"):  # main: the whole γ sweep
        cells |= {(label, d, c, b, g) for d in ds for c in ctx for b in budgets for g in cfg["gammas"][c]}
    for label in ("sd", "la_only", "lambda0.5", "lambda1.0"):  # ablation, λ, VRAM at γ fixed
        cells |= {(label, d, c, b, cfg["gamma_fixed"]) for d in ds for c in ctx for b in budgets}
    cmp = cfg["comparison"]
    for label in ["sd", "lambda0.5"]:
        cells |= {(label, cmp["dataset"], c, b, cmp["gamma"]) for c in cmp["contexts"] for b in budgets}
    for label in cfg["baselines"].get("enabled", []):  # TriForce / EAGLE-3 do not use B: the largest only
        if label != "lookup":
            cells |= {(label, cmp["dataset"], c, max(budgets), cmp["gamma"]) for c in cmp["contexts"]}
    if "lookup" in cfg["baselines"].get("enabled", []):  # the copier reads no cache (B0): the comparison's cells,
        # and every dataset x context at γ fixed for the claims
        cells |= {("lookup", cmp["dataset"], c, 0, cmp["gamma"]) for c in cmp["contexts"]}
        cells |= {("lookup", d, c, 0, cfg["gamma_fixed"]) for d in ds for c in ctx}
    if long := cfg.get("long_generation"):  # LABEL~N on one dataset, every context, one budget, γ fixed
        for label in long["methods"]:
            b = 0 if label in ("ar", "lookup") else long["budget"]
            g = 0 if label == "ar" else cfg["gamma_fixed"]
            cells |= {(f"{label}~{long['max_new_tokens']}", long["dataset"], c, b, g) for c in ctx}
    one = cfg["single_budget"]
    for label in ("single_budget", "lambda0.5"):
        cells |= {(label, one["dataset"], one["context"], b, one["gamma"]) for b in budgets}
    col = cfg["collapse"]
    cells |= {("sd", col["dataset"], c, b, col["gamma"]) for c in ctx for b in budgets}
    controls = cfg.get("controls", [])  # the claims' controls at γ fixed: PI at every B, SD's full cache at B0
    cells |= {("pi", d, c, b, cfg["gamma_fixed"]) for d in ds for c in ctx for b in budgets if "pi" in controls}
    cells |= {("sd@full", d, c, 0, cfg["gamma_fixed"]) for d in ds for c in ctx if "sd@full" in controls}
    return cells


def copies(cfg: dict, label: str) -> list[str]:
    """The folders of a cell's files under results/cells/: LABEL/rR per replicate of a replicated cell (a long
    generation's, LABEL~N: the first replicate only, issue 56), LABEL for a shared one."""
    if not replicated(cfg, label):
        return [label]
    return [f"{label}/r{r}" for r in range(1 if "~" in label else cfg["replicates"])]


def replicated(cfg: dict, label: str) -> bool:
    """A cell measured once per training replicate: a trained variant, or SD / TriForce / PI / SD's full cache on a
    trained base drafter."""
    label = label.split("~")[0]  # a long generation's cells are its method's
    return label in cfg["variants"] or ("base_drafter" in cfg and label in ("sd", "triforce", "pi", "sd@full"))


PAPER_TABLES = ["main", "ablation_lc", "lambda", "comparison", "single_budget", "vram_gamma", "vram"]


def cell_files(cfg: dict, grid: set) -> set:
    """The files of ``grid``'s cells: results/cells/LABEL/rR/... per replicate, results/cells/LABEL/... shared."""

    return {f"results/cells/{w}/{d}/{c}/B{b}_g{g}.parquet" for label, d, c, b, g in grid for w in copies(cfg, label)}


def key(path: str) -> dict:
    return cellfile.path_key(path)


def drafters(p: Plan, cells) -> set:
    """The per-replicate trained drafters (one `train` job each) that ``cells`` decode with."""
    dirs = set()
    for path in cells:
        k = key(path)
        if p.labels.replicated(k["label"]):
            dirs.add(p.drafters.drafter_dir(k["label"], k["replicate"]))
    return {d for d in dirs if d.startswith("results/drafters/r")}


# config/ci.yaml's cell files per training replicate: the grid's 44 and the controls' 12 (pi, sd@full)
CI_PER_REPLICATE = 44 + 12
# (config, its grid cells, its cell files): grid + controls; shared cells + replicated cells x replicates
GRID_SIZES = [
    # the copier (lookup) at every dataset x context, and the long generations (config: 4 methods x 3 contexts; ci:
    # 3 x 2; paper: 4 x 3), of which SD's and λ = 0.5's are on the first replicate only
    ("config", 185 + 45 + 9 + 12, 11 + 9 + 6 + 6 + (174 + 45) * 3),
    ("ci", 50 + 12 + 4 + 6, 6 + 4 + 4 + 2 + CI_PER_REPLICATE * 2),
    ("paper", 693 + 45 + 9 + 12, 693 + 45 + 9 + 12),
]


@pytest.mark.parametrize("name, cells, files", GRID_SIZES)
def test_the_grid_is_every_cell_the_artifacts_ask_for(name, cells, files):
    cfg = config(name)
    grid = expected_cells(cfg)
    assert len(grid) == cells
    assert sum(len(copies(cfg, c[0])) for c in grid) == files
    p = Plan(cfg)
    assert len(p.cells.all_cells()) == files and set(p.cells.all_cells()) == cell_files(cfg, grid)
    shared = [c for c in p.cells.all_cells() if key(c)["replicate"] == names.SHARED]
    assert len(shared) == sum(not replicated(cfg, c[0]) for c in grid)  # shared cells once
    reps = cfg["replicates"]
    # every variant, and PI's interpolated base drafter where the base is trained, once per replicate
    assert len(drafters(p, p.cells.all_cells())) == (4 + ("base_drafter" in cfg)) * reps
    assert p.cells.in_all == PAPER_TABLES + ["fig_collapse", "fig_gamma", "fig_errorbar"]
    assert p.cells.artifact_files(p.cells.in_all) == [
        *(f"results/tables/{t}.tex" for t in PAPER_TABLES),
        *(f"results/figures/{s}.{x}" for s in ("collapse", "gamma_sensitivity", "errorbar") for x in ("pdf", "png")),
    ]
    assert p.drafters.training_stages == (["base", "budgetdraft"] if "base_drafter" in cfg else ["budgetdraft"])
    assert p.replicates == list(range(reps)) and bool(p.base) == ("base_drafter" in cfg)
    assert (methods.EAGLE3 in p.labels.baselines) == ("eagle3" in cfg["baselines"]["enabled"])


def test_a_named_target_asks_for_its_artifacts_cells_only():
    """`snakemake ablation_lc`: AR (shared), L_A-only and λ = 0.5 at γ fixed per replicate, one table."""
    cfg = config("config")
    p = Plan(cfg)
    n_ds, n_ctx, n_b = len(cfg["datasets"]), len(cfg["contexts"]), len(cfg["budgets"])
    cells = p.cells.artifact_cells("ablation_lc")
    shared = [c for c in cells if key(c)["replicate"] == names.SHARED]
    assert len(shared) == n_ds * n_ctx and {key(c)["label"] for c in shared} == {methods.AR}
    assert len(cells) - len(shared) == n_ds * n_ctx * 2 * n_b * cfg["replicates"]
    assert len(drafters(p, cells)) == 2 * cfg["replicates"]
    assert p.cells.artifact_files(["ablation_lc"]) == ["results/tables/ablation_lc.tex"]  # one table, no figure


# ------------------------------------------------------------------------------------- labels and companions


def test_replicated_labels_and_their_drafters():
    ci, paper = plan("ci"), plan("paper")  # ci trains a base drafter, the paper's llama-68m is untouched
    for label in (methods.SD, methods.TRIFORCE, *ci.labels.variants, "sd@snapkv", "lambda0.5@streaming"):
        assert ci.labels.replicated(label), label
    for label in (methods.AR, methods.EAGLE3):
        assert not ci.labels.replicated(label) and not paper.labels.replicated(label), label
    assert not paper.labels.replicated(methods.SD) and not paper.labels.replicated(methods.TRIFORCE)
    assert all(paper.labels.replicated(v) for v in paper.labels.variants)
    assert ci.drafters.drafter_dir(methods.AR) is None
    assert (
        ci.drafters.drafter_dir(methods.SD, 1)
        == ci.drafters.drafter_dir(methods.TRIFORCE, 1)
        == "results/models/drafter_base/r1"
    )
    assert (
        paper.drafters.drafter_dir(methods.SD)
        == paper.drafters.base_drafter_dir(0)
        == "results/models/drafter_untrained"
    )
    assert ci.drafters.drafter_dir(methods.EAGLE3) == "results/drafters/eagle3"
    assert (
        ci.drafters.drafter_dir("lambda0.5@snapkv", 1)
        == ci.drafters.drafter_dir(names.BD, 1)
        == "results/drafters/r1/lambda0.5"
    )
    assert ci.labels.decodes == {  # each cell label's decoder (methods.DECODERS), a companion its label's
        **{m: m for m in ("ar", "sd", "triforce", "eagle3")},
        "pi": methods.SD_DECODER,
        "sd@full": methods.SD_DECODER,
        **{v: methods.SD_DECODER for v in ci.labels.variants},
        **{
            f"{d}@{pol}": methods.SD_DECODER
            for d in (methods.SD, names.BD)
            for pol in ("streaming", "snapkv", "verifier_guided")
        },
        "lookup": methods.LOOKUP_DECODER,
        **{f"{m}~24": m for m in ("ar", "sd", "lookup")},  # ci's long generations: 24 new tokens
    }
    assert ci.drafters.comparison_drafters() == {
        methods.SD: ["results/models/drafter_base/r0"],
        names.BD: ["results/drafters/r0/lambda0.5"],
        methods.TRIFORCE: ["results/models/drafter_base/r0", "results/models/verifier"],
        methods.EAGLE3: ["results/drafters/eagle3"],
    }
    assert ci.drafters.artifact_drafters("main") == {}


def test_the_policies_target_asks_for_its_cells_apart_from_the_grid():
    """`snakemake policies` (not in `all`): SD and λ = 0.5 under each policy at every context and budget of one
    dataset; the config's own policy reuses the grid's cells (plain labels), the others get LABEL@POLICY cells
    that decode with their policy."""
    cfg = config("ci")
    p = Plan(cfg)
    pol, n_ctx, n_b, n_r = cfg["policies"], len(cfg["contexts"]), len(cfg["budgets"]), cfg["replicates"]
    cells = p.cells.artifact_cells("fig_policies")
    shared = [c for c in cells if key(c)["replicate"] == names.SHARED]
    assert len(shared) == n_ctx  # AR, shared by the replicates
    assert len(cells) - len(shared) == n_ctx * 2 * len(pol["names"]) * n_b * n_r  # 2 drafters x policies
    assert p.cells.artifact_files(["fig_policies"]) == ["results/figures/policies.pdf", "results/figures/policies.png"]
    assert f"results/cells/lambda0.5@snapkv/r1/{pol['dataset']}/128/B16_g{pol['gamma']}.parquet" in cells
    assert f"results/cells/sd/r0/{pol['dataset']}/128/B16_g{pol['gamma']}.parquet" in cells  # the grid's own cell
    assert p.labels.policy_of("sd@verifier_guided") == "verifier_guided"
    assert all(p.labels.policy_of(key(c)["label"]) == "topk_chunks" for c in cells if "@" not in key(c)["label"])
    everything = p.cells.all_cells() + p.cells.artifact_files(p.cells.in_all)
    assert not any(("@" in f and "sd@full" not in f) or "policies.pdf" in f for f in everything)  # `all` is apart
    assert p.labels.policies == {"names": pol["names"], "dataset": pol["dataset"], "gamma": pol["gamma"]}
    # the schema's defaults are base.defaults' (a config without `policies:`)
    bare = raw_config("ci")
    bare.pop("policies")
    check_config(bare, schema=SCHEMA)
    assert Plan(bare).labels.policies == {
        "names": list(defaults.COMPARED_POLICIES),
        "dataset": list(bare["datasets"])[0],
        "gamma": defaults.GAMMA,
    }


def test_a_cell_label_parses_one_way():
    """No declared method's label has a suffix separator, so a label's method and policy come from the grammar alone:
    the control sd@full is SD under the policy `full` (its budget B0 because `full` keeps every position), another
    method under another policy is accepted as a control too, and a method whose label has a separator is refused."""
    p = Plan(config("ci"))
    assert all(sep not in label for label in methods.REGISTRY for sep in methods.SEPARATORS)
    assert p.labels.method_of(names.SD_FULL) is p.labels.method_of(methods.SD) is methods.get(methods.SD)
    assert (p.labels.policy_of(names.SD_FULL), p.cells.budgets_of(names.SD_FULL)) == ("full", [0])
    assert p.cells.budgets_of("sd@snapkv") == p.cells.budgets_of(methods.SD) == p.budgets
    # the grammar parses a label the config writes once, at planning, and writes it back the same; a label the plan
    # did not make is refused, named, never parsed downstream
    parts = names.parse_label("lambda0.5@full+eager~64")
    assert parts == names.CellLabel("lambda0.5", "full", "eager", 64) and parts.text == "lambda0.5@full+eager~64"
    assert p.labels.parts[names.SD_FULL] == names.CellLabel(methods.SD, "full")
    with pytest.raises(ValueError, match=r"^cell label 'lambda0.5@full\+eager' is none of this config's: ar, sd, "):
        p.labels.method_of("lambda0.5@full+eager")
    # only a label's own policy takes the budget away: a config decoding everything under `full` keeps its budgets
    # (without the control sd@full, which would measure SD's cells under `full` again: refused, tests/test_leftovers)
    whole = Plan(config("ci", policy="full", controls=["pi"]))
    assert whole.cells.budgets_of(methods.SD) == whole.cells.budgets_of(names.BD) == whole.budgets
    with pytest.raises(ValueError, match=r"method 'sd@streaming': a label has no '@'.*parses one way"):
        methods.Method("sd@streaming", "SD (streaming)", "sd", methods.BASE)
    # a control LABEL@POLICY of a drafting method runs at every dataset x context, per replicate, at its policy
    cfg = config("ci")
    cfg["controls"] = ["pi", "sd@full", "lambda0.5@streaming"]
    check_config(cfg, schema=SCHEMA)
    cells = Plan(cfg).cells.control_cells()
    streaming = [c for c in cells if key(c)["label"] == "lambda0.5@streaming"]
    assert len(streaming) == len(cfg["datasets"]) * len(cfg["contexts"]) * len(cfg["budgets"]) * cfg["replicates"]
    for bad, why in (
        ("ar@full", r"controls\[1\] = 'ar@full': 'ar' is not a method that drafts"),
        ("sd@topk", r"controls\[1\] = 'sd@topk': 'topk' is not a sparse policy"),
        ("sd_full", r"controls\[1\] = 'sd_full': must be one of pi, or LABEL@POLICY \(e.g. sd@full\)"),
        ("sd@full+eager", r"controls\[1\] = 'sd@full\+eager': must match \^\[A-Za-z0-9\]"),  # LABEL@POLICY alone
    ):
        with pytest.raises(ValueError, match=why):
            check_config({**cfg, "controls": ["pi", bad]}, schema=SCHEMA)


def test_a_decoder_is_declared_once_with_its_traits():
    """Every method runs a declared decoder (`decodes`; its factory is the decoder's); a declaration whose traits
    disagree is refused in one line naming it: an undeclared decoder, a drafter kind its decoder does not use, a cost
    line the estimate does not know, a shared drafter prefill without the paper's drafter, a decoder declared twice."""
    assert {m.decodes for m in methods.REGISTRY.values()} == set(methods.DECODERS)
    assert methods.get(methods.PI).decoder is methods.DECODERS[methods.SD_DECODER]
    assert [n for n, d in methods.DECODERS.items() if d.samples] == [methods.AR_DECODER, methods.SD_DECODER]
    assert [n for n, d in methods.DECODERS.items() if not d.drafts] == [methods.AR_DECODER]
    for method, why in (
        (lambda: methods.Method("x", "X", "nope", methods.BASE), "method 'x': decodes 'nope' is not one of ar, sd, "),
        (lambda: methods.Method("x", "X", methods.SD_DECODER, methods.NONE), "'none' but decoder 'sd' needs a drafter"),
        (
            lambda: methods.Method("x", "X", methods.AR_DECODER, methods.BASE),
            "'base' but decoder 'ar' drafts with none",
        ),
        (lambda: methods.Decoder("x", "cheap"), "decoder 'x': cost 'cheap' is not one of verifier, free_drafts, "),
        (lambda: methods.Decoder("x", methods.MODEL_DRAFTS, "m", prefilled=True), "decoder 'x': a shared drafter "),
        (lambda: methods.decoder(methods.DECODERS["sd"]), "decoder 'sd' is declared twice"),
    ):
        with pytest.raises(ValueError, match=why):
            method()


def test_a_graphs_run_asks_for_eager_companions_on_their_own_engine():
    """`engine: graphs` (on CUDA; planning needs no GPU): every cell decodes on graphs, and AR, SD and BudgetDraft
    are also measured eagerly (LABEL+eager) at γ_fixed on the comparison dataset, for the claims' finding E1."""
    cfg = config("ci", device="cuda", engine="graphs")
    p = Plan(cfg)
    eager = [c for c in p.cells.all_cells() if "+eager" in key(c)["label"]]
    n_ctx, n_b, n_r = len(cfg["contexts"]), len(cfg["budgets"]), cfg["replicates"]
    assert len(eager) == n_ctx + 2 * n_ctx * n_b * n_r  # AR, then SD and BudgetDraft per budget and replicate
    assert all(p.labels.engine_of(key(c)["label"]) == "eager" for c in eager)
    assert all(key(c)["dataset"] == cfg["comparison"]["dataset"] for c in eager)
    assert all(p.labels.engine_of(key(c)["label"]) == "graphs" for c in p.cells.all_cells() if c not in eager)
    assert (
        p.labels.decodes["ar+eager"] == methods.AR_DECODER and p.labels.decodes["lambda0.5+eager"] == methods.SD_DECODER
    )
    assert p.drafters.drafter_dir("sd+eager", 1) == p.drafters.drafter_dir(methods.SD, 1)
    plain = plan("ci")
    assert not any("+eager" in c for c in plain.cells.every_cell()) and plain.labels.engine_labels == []  # an eager run


# ------------------------------------------------------------------------------------- variants beyond the paper's


def test_extra_variants_are_trained_and_evaluated_like_the_papers():
    """`--config variants={...}` adds a λ variant (λ = 0.25) and another (a budget mix) to the paper's four: each is
    trained per replicate and measured at γ_fixed over every dataset x context x budget (as lambda1.0); the λ table
    reads the λ variant's cells, the `variants` table (in `all` because the config has such a variant) the other's."""
    cfg = config("ci", variants=EXTRA_VARIANTS)
    p = Plan(cfg)
    reps, g = cfg["replicates"], cfg["gamma_fixed"]
    assert len(drafters(p, p.cells.all_cells())) == 6 * reps + reps and p.cells.in_all.count("variants") == 1  # + PI's
    places = [(d, c, b) for d in cfg["datasets"] for c in cfg["contexts"] for b in cfg["budgets"]]
    per_replicate = [c for c in p.cells.all_cells() if key(c)["replicate"] != names.SHARED]
    assert len(per_replicate) == CI_PER_REPLICATE * reps + 2 + 2 * len(places) * reps  # + the long generations: r0's
    for label in EXTRA_VARIANTS:
        assert all(f"results/drafters/r{r}/{label}" in drafters(p, p.cells.all_cells()) for r in range(reps))
        for r in range(reps):
            assert all(
                f"results/cells/{label}/r{r}/{d}/{c}/B{b}_g{g}.parquet" in p.cells.all_cells() for d, c, b in places
            )
    cells = {a: "\n".join(p.cells.artifact_cells(a)) for a in ("lambda", "variants", "main")}
    assert "lambda0.25/r1/" in cells["lambda"] and "budgets_mix/" not in cells["lambda"]
    assert "budgets_mix/r1/" in cells["variants"] and "lambda0.25/" not in cells["variants"]
    assert "lambda0.25/" not in cells["main"] and "budgets_mix/" not in cells["main"]
    assert p.labels.lambda_variants == ["lambda0.25", "lambda0.5", "lambda1.0"] and p.labels.other_variants == [
        "budgets_mix"
    ]
    shown = {a: json.loads(p.settings.artifact_settings(a))["variants"] for a in ("lambda", "variants")}
    assert shown["lambda"]["lambda0.25"]["lambda_c"] == 0.25 and "budgets_mix" not in shown["lambda"]
    assert shown["variants"]["budgets_mix"] == {"lambda_c": 0.5, "budgets": [16, 32], "steps": 4}
    assert '"lambda_c": 0.25' in p.drafters.variant_hparams("lambda0.25", 0)
    # a λ variant alone: the λ table shows it, and `all` builds no `variants` table (`snakemake variants` would)
    only = Plan(config("ci", variants={"lambda0.25": {"lambda_c": 0.25}}))
    assert "variants" not in only.cells.in_all
    assert "results/tables/variants.tex" not in only.cells.artifact_files(only.cells.in_all)
    assert only.cells.artifact_files(["variants"]) == ["results/tables/variants.tex"]
    assert not any("lambda0.25" in c for c in only.cells.artifact_cells("variants"))


# ------------------------------------------------------------------------------------- hyper-parameters, settings


@pytest.mark.parametrize("name", CONFIGS)
def test_each_replicate_trains_with_its_own_seed(name):
    cfg = config(name)
    p = Plan(cfg)
    seed = cfg["training"]["seed"]
    for r in p.replicates:
        for v in p.labels.variants:
            hparams = json.loads(p.drafters.variant_hparams(v, r))
            assert hparams == {
                **cfg["training"],
                "device": p.drafters.training_device,
                **cfg["variants"][v],
                "seed": seed + r,
            }
        if p.base:
            hparams = json.loads(p.drafters.base_hparams(r))
            assert hparams["seed"] == seed + r and hparams["lambda_c"] == 0.0
            assert {k: hparams[k] for k in cfg["base_drafter"]["training"] if k != "seed"} == {
                k: v for k, v in cfg["base_drafter"]["training"].items() if k != "seed"
            }
    assert p.drafters.variant_hparams(names.BD) == p.drafters.variant_hparams(
        names.BD, 0
    )  # replicate 0: a run without replicates
    eagle3 = json.loads(p.drafters.eagle3_hparams())
    assert eagle3["device"] == cfg["baselines"].get("eagle3", {}).get("training", {}).get("device", cfg["device"])


@pytest.mark.parametrize("name", CONFIGS)
def test_every_artifacts_settings_hold_their_contract(name):
    cfg = config(name)
    p = Plan(cfg)
    for artifact in [*p.cells.all_tables, *p.cells.all_figures.values(), "claims"]:
        settings = json.loads(p.settings.artifact_settings(artifact))
        PaperSettings.from_json(settings)
        assert settings["replicates"] == cfg["replicates"] and settings["budgets"] == cfg["budgets"]
        assert settings["verifier_prefill_runs"] == (defaults.PREFILL_RUNS if cfg["share_verifier_prefill"] else 0)
        # TriForce and EAGLE-3 are run at the largest B (they use none of it); the copier reads no cache: B0
        assert settings["comparison"]["budgets"] == {
            b: 0 if b == methods.LOOKUP else max(cfg["budgets"]) for b in p.labels.baselines
        }
        assert ("policies" in settings) == (artifact == "fig_policies")
    policies = json.loads(p.settings.artifact_settings("fig_policies"))["policies"]
    assert policies == {**p.labels.policies, "default": cfg["policy"]}


def test_the_flags_of_a_cell():
    """Sampling flags only when the temperature is above 0 (a greedy cell's command is what it always was); a
    baseline's `--extra` is its config section without its training."""
    hot = plan("ci", sampling={"temperature": 0.7, "top_p": 0.9}, baselines={"enabled": []}, long_generation=None)
    greedy = plan("ci")
    explicit = plan(
        "ci", sampling={"temperature": 0, "top_k": 5}, baselines={"enabled": ["triforce"]}, long_generation=None
    )

    def flags(p, label, budget=32, gamma=5):
        return p.jobs.eval_cell_flags(p.jobs.spec(label, "gs", "128", budget, gamma, 0))

    assert "--temperature" not in flags(greedy, methods.SD) and flags(greedy, methods.SD) == flags(explicit, methods.SD)
    assert "--extra" not in flags(greedy, methods.SD)
    assert flags(hot, methods.SD).endswith(" --temperature 0.7 --top-p 0.9 --top-k 0 --seed 0")
    assert (
        """--extra '{"chunk_size": 8, "gamma_inner": 1, "retrieval_budget": 64, "sinks": 4, "streaming_budget": 16}'"""
        in flags(greedy, methods.TRIFORCE)
    )
    assert "--extra '{}'" in flags(greedy, methods.EAGLE3)  # its section is only its training
    assert "--label 'sd~24'" not in flags(greedy, "sd~24") and "--label sd~24 " in flags(greedy, "sd~24")
    assert (
        greedy.drafters.export_dtype("verifier") == "float32"
        and plan("paper").drafters.export_dtype("verifier") == "float16"
    )


def test_the_stale_export_of_another_config_is_not_read(tmp_path, monkeypatch, capsys):
    """A checkout that ran the embedded default holds SmolLM2's export (8,192 positions): planning the paper's
    config (16K contexts, a 131,072-position verifier) must not read that file as the paper verifier's limit."""
    stale = tmp_path / "results/models/verifier/config.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 8192}))
    monkeypatch.chdir(tmp_path)
    cfg = raw_config("paper")
    check_config(cfg, schema=SCHEMA)  # no refusal
    # the grid, its controls (PI, SD's full cache), the copier, the long generations
    assert len(Plan(cfg).cells.all_cells()) == 693 + 45 + 9 + 12
    assert "positions" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------- the cell path, code


@pytest.mark.parametrize("name", CONFIGS)
def test_a_cell_path_is_formatted_and_parsed_in_one_place(name):
    """Every cell file the plan can ask for parses back to the cell it formats, and exactly one of the two eval
    rules (shared cells, one replicate's cells) makes it: its output pattern and wildcard constraints."""
    p = plan(name)
    rules = {}
    for shared in (True, False):
        pattern, constraints = cellfile.cell_pattern(not shared), p.cells.cell_wildcards(not shared)
        regex = re.escape(pattern)
        for wildcard, allowed in constraints.items():
            regex = regex.replace(re.escape("{" + wildcard + "}"), f"(?:{allowed})")
        rules[shared] = re.compile(regex)
    for path in p.cells.every_cell():
        k = key(path)
        assert cellfile.cell_path(**k) == path
        replicate = None if k["replicate"] == names.SHARED else k["replicate"]
        assert p.cells.cell(k["label"], k["dataset"], k["context"], k["budget"], k["gamma"], replicate) == path
        made_by = [shared for shared, rule in rules.items() if rule.fullmatch(path)]
        assert made_by == [replicate is None], path
        wildcards = {**k, "replicate": k["replicate"]}
        assert cellfile.cell_pattern(replicate is not None).format(**wildcards) == path
    assert cellfile.cell_pattern(True, root="logs/cells", ext="log") == (
        "logs/cells/{label}/r{replicate}/{dataset}/{context}/B{budget}_g{gamma}.log"
    )


def test_the_eval_rules_write_the_cell_path_the_plan_formats():
    """The eval rules' outputs, logs and benchmarks (literal patterns, which the docs' tests read) are the patterns of
    the cell path's one home, budgetdraft.evaluation.cellfile."""
    text = (ROOT / "workflow" / "rules" / "eval.smk").read_text()
    patterns = set(re.findall(r'"((?:results|logs|benchmarks)/cells/[^"]+)"', text))
    assert patterns == {
        cellfile.cell_pattern(replicated, root, ext)
        for replicated in (False, True)
        for root, ext in (("results/cells", "parquet"), ("logs/cells", "log"), ("benchmarks/cells", "tsv"))
    }


def test_each_stage_runs_the_code_its_command_imports():
    p = plan("ci")
    for stage, command in STAGE_COMMANDS.items():
        assert p.code.digest(stage) == f"results/code/{stage}.sha256" and p.code.files(stage) == code_files(command), (
            stage
        )
    for method in methods.BASELINES:  # eval-cell imports its decoder's factory by name: the plan declares it as code
        assert methods.get(method).decoder.factory == f"budgetdraft.decoding.baselines.{method}"
        assert p.code.cell_code(method) == f"results/code/cell-{method}.sha256"
        assert f"src/budgetdraft/decoding/baselines/{method}.py" in p.code.files(f"cell-{method}")
        # eval-cell imports the copier itself (every row records what it would have predicted)
        assert set(code_files("eval-cell")) <= set(p.code.files(f"cell-{method}"))
    for label in (methods.AR, methods.SD, names.BD, "sd@snapkv"):
        assert p.code.cell_code(p.labels.decodes[label]) in (
            "results/code/cell-ar.sha256",
            "results/code/cell-sd.sha256",
        )
        assert p.code.files(p.code.cell_code(p.labels.decodes[label]).split("/")[-1][: -len(".sha256")]) == code_files(
            "eval-cell"
        )
    inputs = p.jobs.cell_inputs(p.jobs.spec(names.BD, "gs", "128", 32, 5, 1))
    assert inputs == {
        "verifier": "results/models/verifier",
        "prompts": "results/data/prompts/gs/128.parquet",
        "code": "results/code/cell-sd.sha256",
        "prefill": "results/prefill/gs/128.safetensors",
        "drafter": "results/drafters/r1/lambda0.5",
    }
    assert "drafter" not in p.jobs.cell_inputs(p.jobs.spec(methods.AR, "gs", "128", 0, 0))


def test_the_files_written_from_the_plan_are_every_artifacts_settings():
    planned = plan("ci").settings.files()
    assert sorted(planned) == sorted(
        f"results/settings/{name}.json"
        for name in [*PAPER_TABLES, "variants", "fig_collapse", "fig_gamma", "fig_errorbar", "fig_policies", "claims",
                     "paper_diff"]
    )  # fmt: skip


def test_contexts_are_taken_shortest_first_and_said_so(capsys):
    """A config that lists its contexts longest first is reordered by prompt tokens when checked, saying so; the
    plan, the settings (their `contexts` and the comparison's) and the paper diff's cells then read the shortest as
    the shortest. Two contexts of one length are refused naming both."""
    cfg = raw_config("config")
    cfg["contexts"] = dict(reversed(list(cfg["contexts"].items())))
    cfg["comparison"]["contexts"] = list(reversed(cfg["comparison"]["contexts"]))
    check_config(cfg, schema=SCHEMA)
    said = capsys.readouterr().err
    assert "contexts listed as 1K, 0.5K, 0.25K; taken shortest first" in said and "0.25K (240), 0.5K (512)" in said
    p = Plan(cfg)
    assert p.contexts == ["0.25K", "0.5K", "1K"] and p.longest_context == "1K"
    settings = json.loads(p.settings.artifact_settings("claims"))
    assert settings["contexts"] == ["0.25K", "0.5K", "1K"] and settings["comparison"]["contexts"] == ["0.5K", "1K"]
    assert {Path(f).parts[-2] for f in p.cells.paper_diff_cells() if "/ar/" not in f} == {"0.25K"}
    same = raw_config("config")
    same["contexts"]["0.5K"] = 240
    with pytest.raises(ValueError, match=r"contexts.0.5K = 240 prompt tokens, as contexts.0.25K"):
        check_config(same, schema=SCHEMA)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_cell_spec_is_what_eval_cell_reads_back_from_its_flags(name):
    """The plan builds each cell's CellSpec and renders eval-cell's flags from it; eval-cell's own parser reads
    the flags back into the same spec, for every cell of the config (so the command line is no second home of a
    cell's fields)."""
    import argparse
    import shlex

    from budgetdraft.pipeline.commands.cmd_eval_cell import cell_spec, configure_parser

    p = plan(name)
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    for path in p.cells.every_cell():
        m = cellfile.path_key(path)
        replicate = None if m["replicate"] == names.SHARED else m["replicate"]
        spec = p.jobs.spec(m["label"], m["dataset"], m["context"], m["budget"], m["gamma"], replicate)
        flags = shlex.split(p.jobs.eval_cell_flags(spec))
        assert cell_spec(parser.parse_args([*flags, "--out", path])) == spec, path


def test_a_cell_is_looked_up_in_the_plan_not_parsed_from_its_path():
    """The plan makes {cell file: CellSpec} once for every cell any target can ask for; a cell's job and the set-aside
    check look it up (workflow/rules/common.smk: cell_spec, planned_cell). Each spec names the file it is at, a
    companion's spec carries its label's own policy, engine and length, and the lookup is the same object each time."""
    cfg = config("ci")
    cfg["controls"] = [*cfg.get("controls", []), "sd@full"]
    p = Plan(cfg)
    specs = p.jobs.specs
    assert set(specs) == set(p.cells.every_cell())
    for path, spec in specs.items():
        replicate = spec.replicate
        assert cellfile.cell_path(spec.label, spec.dataset, spec.context, spec.budget, spec.gamma, replicate) == path
    assert p.jobs.at(next(iter(specs))) is next(iter(specs.values())) and p.jobs.at("results/cells/x/y.parquet") is None
    sd_full = [s for s in specs.values() if s.label == names.SD_FULL]
    assert sd_full and {(s.policy, s.budget) for s in sd_full} == {("full", 0)}
    long = [s for s in specs.values() if s.label in p.labels.long_labels]
    assert long and all(s.max_new_tokens == p.labels.parts[s.label].tokens for s in long)


def test_a_cell_of_the_users_own_budget_or_gamma_is_the_plans_cell_at_its_path():
    """A cell file outside the grid (a budget or γ the user asks for by its path, as the eval rules' wildcards allow)
    is the plan's cell of its label, dataset, context and replicate at that budget and γ: its job measures it and the
    set-aside check compares its record with it (common.smk: cell_spec and planned_cell are one lookup). A path of
    no label, dataset, context or replicate of the plan, or not in the form the plan writes, is no cell of it."""
    p = Plan(config("ci"))
    own = "results/cells/lambda0.5/r1/lwm/256/B48_g7.parquet"
    assert own not in p.jobs.specs
    assert p.jobs.at(own) == p.jobs.spec("lambda0.5", "lwm", "256", 48, 7, 1)
    assert p.jobs.at("results/cells/ar/gs/128/B0_g0.parquet") is p.jobs.specs["results/cells/ar/gs/128/B0_g0.parquet"]
    for foreign in (
        "results/cells/nolabel/lwm/256/B48_g7.parquet",
        "results/cells/lambda0.5/r1/nodata/256/B48_g7.parquet",
        "results/cells/lambda0.5/r1/lwm/999/B48_g7.parquet",
        "results/cells/lambda0.5/r9/lwm/256/B48_g7.parquet",  # replicate 9 of 2
        "results/cells/lambda0.5/lwm/256/B48_g7.parquet",  # a replicated label without its replicate
        "results/cells/ar/r0/lwm/256/B0_g0.parquet",  # a shared label with one
        "results/cells/lambda0.5/r1/lwm/256/B048_g7.parquet",
        "elsewhere/lambda0.5/r1/lwm/256/B48_g7.parquet",
    ):
        assert p.jobs.at(foreign) is None, foreign
