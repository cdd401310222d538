"""The Snakemake workflow wires the plan: real dry runs plan the grid of each config end to end, lint and format are
clean, a bad config fails early and clearly, and editing a module reruns exactly its stage.

The plan's logic itself (counts, which cells, hyper-parameters, settings) is tested in process on
budgetdraft.pipeline.plan.Plan (tests/test_plan.py); the dry runs here check what only Snakemake shows (the jobs and
their commands), each run once and shared by the tests that read it (`dry_run`). Each works on a copy of the workflow
and library in a temporary directory, never on the repository's results/.
"""

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import copy_project
from snakemake.cli import parse_config
from test_plan import CI_PER_REPLICATE, EXTRA_VARIANTS, GRID_SIZES, SCHEMA, expected_cells, replicated

from budgetdraft.base import methods as methods_registry
from budgetdraft.pipeline.configcheck import check_config
from budgetdraft.pipeline.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake")
pytestmark = [pytest.mark.workflow, pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake is not installed")]


@pytest.fixture()
def workdir(tmp_path):
    return copy_project(tmp_path)


def snakemake(workdir, *args, check=True):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True, env=env)
    out = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{out[-3000:]}")
    return proc.returncode, out


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """`snakemake -n -p ARGS` in one copy of the workflow, run once per ARGS and shared by the tests that read it."""
    work, plans = copy_project(tmp_path_factory.mktemp("plans")), {}

    def run(*args):
        if args not in plans:
            plans[args] = snakemake(work, "-n", "-p", *args)[1]
        return plans[args]

    return run


def job_counts(out: str) -> dict[str, int]:
    table = out.split("Job stats:", 1)[1].split("\n\n", 1)[0] if "Job stats:" in out else ""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def outputs(out: str, rule: str) -> set[str]:
    """The output files of every job of ``rule`` in a dry run's plan."""
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", out)
    return {
        m.group(1)
        for block in blocks
        if re.match(rf"(?:local)?rule {rule}:", block)
        for m in [re.search(r"^\s+output: (.+)$", block, re.M)]
        if m
    }


def checked(name: str, **overrides) -> dict:
    cfg = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    check_config(cfg, schema=SCHEMA, overrides=overrides)
    return cfg


@pytest.mark.parametrize("name, cells, files", GRID_SIZES)
def test_dry_run_plans_every_cell(dry_run, name, cells, files):
    """The grid's logic (which cells, how many): tests/test_plan.py; here, that Snakemake plans a job for each of the
    plan's cells and the stages behind them."""
    cfg = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    grid = expected_cells(cfg)
    assert len(grid) == cells
    out = dry_run("all", "--configfile", f"config/{name}.yaml")
    counts = job_counts(out)
    assert counts.get("eval_cell", 0) + counts.get("eval_replicate_cell", 0) == files, counts
    assert counts.get("eval_cell", 0) == sum(not replicated(cfg, c[0]) for c in grid), counts  # shared cells once
    assert outputs(out, "eval_cell") | outputs(out, "eval_replicate_cell") == set(Plan(checked(name)).cells.all_cells())
    reps = cfg["replicates"]
    assert counts["train"] == 4 * reps and counts["table"] == 7 and counts["figure"] == 3 and counts["claims"] == 1
    assert counts.get("train_base", 0) == ("base_drafter" in cfg) * reps  # the paper's llama-68m: untouched
    assert counts["prepare_prompts"] == len(cfg["datasets"]) * len(cfg["contexts"])
    shared = cfg.get("share_verifier_prefill", False)  # one prefill job per prompts file, or none
    assert counts.get("verifier_prefill", 0) == shared * counts["prepare_prompts"]
    assert counts.get("train_eagle3", 0) == ("eagle3" in cfg["baselines"]["enabled"])


@pytest.mark.parametrize("name", ["config", "ci", "paper"])
def test_budgetdraft_trains_where_it_evaluates(name):
    """Its training sequences (prefix + supervised continuation) reach the longest context, as the paper's 16,128 +
    256 reach 16K: the drafter is not left to extrapolate to positions it never trained at."""
    cfg = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    data = cfg["training_data"]
    assert data["prefix_len"] + data["cont_len"] == max(cfg["contexts"].values())


def test_lint_and_format_are_clean(workdir):
    _, out = snakemake(workdir, "--lint")
    assert "Congratulations" in out, out
    snakefmt = shutil.which("snakefmt")
    if snakefmt:
        proc = subprocess.run([snakefmt, "--check", "workflow"], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_config_key_is_documented():
    """config/README.md explains every top-level key the schema accepts (and names no key it does not)."""
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    doc = (ROOT / "config" / "README.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_0-9]+)`", doc, flags=re.M))
    documented |= {
        k
        for line in re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)+) \|", doc, flags=re.M)
        for k in re.findall(r"`([a-z_]+)`", line)
    }
    keys = set(schema["properties"])
    assert keys - documented == set(), "undocumented config keys"
    assert documented <= keys, "config/README.md documents keys the schema does not accept"


def test_python_lint_and_format_are_clean():
    """ruff (configured in pyproject.toml, pinned in envs/requirements.txt) finds nothing and would reformat nothing."""
    ruff = shutil.which("ruff")
    assert ruff, "ruff is pinned in envs/requirements.txt: install it with bash envs/install.sh"
    for args in (["check"], ["format", "--check"]):
        proc = subprocess.run([ruff, *args, "src", "tests", "bench"], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, f"ruff {' '.join(args)}:\n{proc.stdout}{proc.stderr}"


# Without profiles/default, whose `forcerun: [table, figure]` re-aggregates tables on every run: these tests check
# what Snakemake itself reruns after a code edit.
NO_PROFILE = ("--workflow-profile", "none")


def _touch_everything(workdir, configfile):
    """Create every output of a dry run, then let `--touch` order their mtimes like a finished run."""
    _, out = snakemake(workdir, "-n", "all", "--configfile", configfile)
    for line in re.findall(r"^\s+output: (.+)$", out, re.M):
        for path in line.split(", "):
            path = workdir / path.strip()
            if path.suffix:  # a file
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
            else:  # a directory() output
                path.mkdir(parents=True, exist_ok=True)
    # no warm process for a touch: it would import torch and transformers (~6 CPU-s) for jobs that never run
    snakemake(workdir, "--touch", "all", "-c1", "--configfile", configfile, "--config", "warm_start=false")
    _, out = snakemake(workdir, "-n", "all", "--configfile", configfile, *NO_PROFILE)
    assert "Nothing to be done" in out, out[-2000:]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A copy of the workflow whose every output of config/ci.yaml exists, its mtimes those of a finished run."""
    work = copy_project(tmp_path_factory.mktemp("finished"))
    _touch_everything(work, "config/ci.yaml")
    return work


def _edit(path: Path):
    path.write_text(path.read_text() + "# edited\n")
    later = time.time() + 10
    os.utime(path, (later, later))


def test_policies_target_plans_its_cells_apart_from_the_grid(dry_run):
    """`snakemake policies` (not in `all`): SD and λ = 0.5 under each policy at every context and budget of one
    dataset; the config's own policy reuses the grid's cells (plain labels), the others get LABEL@POLICY cells
    whose command passes their policy (the cells themselves: tests/test_plan.py)."""
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    pol, n_ctx, n_b, n_r = cfg["policies"], len(cfg["contexts"]), len(cfg["budgets"]), cfg["replicates"]
    out = dry_run("policies", "--configfile", "config/ci.yaml")
    counts = job_counts(out)
    assert counts["eval_cell"] == n_ctx, counts  # AR, shared by the replicates
    assert counts["eval_replicate_cell"] == n_ctx * 2 * len(pol["names"]) * n_b * n_r, counts  # 2 drafters x policies
    assert counts["figure"] == 1 and "table" not in counts and "claims" not in counts
    assert "results/figures/policies.pdf" in out
    assert f"results/cells/lambda0.5@snapkv/r1/{pol['dataset']}/128/B16_g{pol['gamma']}.parquet" in out
    assert f"results/cells/sd/r0/{pol['dataset']}/128/B16_g{pol['gamma']}.parquet" in out  # the grid's own cell
    commands = [line for line in out.splitlines() if "eval-cell" in line]
    assert any("--label sd@verifier_guided" in c and "--policy verifier_guided" in c for c in commands)
    assert all("--policy topk_chunks" in c for c in commands if "@" not in c.split("--label ")[1].split()[0])
    everything = dry_run("all", "--configfile", "config/ci.yaml")
    # `all` is unchanged: none of the policies' cells (its own @ label is the control sd@full)
    assert not any(f"@{name}/" in everything for name in pol["names"]) and "policies.pdf" not in everything


@pytest.mark.parametrize("module", ["report/paper", "training/train"])
def test_src_edits_rerun_only_their_stage(finished, tmp_path, module):
    workdir = tmp_path / "run"
    shutil.copytree(finished, workdir, symlinks=True)  # mtimes and Snakemake's records kept
    _edit(workdir / f"src/budgetdraft/{module}.py")
    counts = job_counts(snakemake(workdir, "-n", "all", "--configfile", "config/ci.yaml", *NO_PROFILE)[1])
    if module == "report/paper":  # formatting of tables/figures: never the grid, nor claims (which does not import it)
        # the paper's numbers beside ours (paper_diff) format with it too; `code` is the digest of the edited stage
        assert counts == {"code": 1, "table": 7, "figure": 3, "paper_diff": 1, "all": 1, "total": 13}, counts
    else:  # retrains every drafter (the EAGLE-3 head's training shares its schedule and checks) and reruns their
        # cells, not the AR cells nor the targets
        cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
        reps, contexts = cfg["replicates"], cfg["comparison"]["contexts"]
        assert counts["train"] == 4 * reps and counts["train_base"] == reps and counts["train_eagle3"] == 1
        assert "targets" not in counts and "export_model" not in counts
        # every cell of a replicate (CI_PER_REPLICATE), SD's 2 long generations on the first replicate; AR's cells
        # are EAGLE-3's
        assert counts["eval_replicate_cell"] == CI_PER_REPLICATE * reps + 2 and counts["eval_cell"] == len(contexts)


def refusal(cfg: dict, *config_args: str) -> str:
    """The one-line refusal of the Snakefile's config check (budgetdraft.pipeline.configcheck.check_config, called
    once before any job is planned; tests/test_config_refusals.py runs it through Snakemake), with ``config_args``
    given as Snakemake's --config."""
    with pytest.raises(ValueError) as refused:
        check_config(cfg, schema=SCHEMA, overrides=parse_config(config_args))
    return str(refused.value)


BAD_CONFIGS = [
    (lambda c: c["datasets"].update(xx={"source": "wikitext", "name": "X"}), "['datasets']['xx']['source']"),
    (lambda c: c.update(budgets=[0, 32]), "['budgets'][0]"),
    (lambda c: c["gammas"].update({"128": [0, 3]}), "['gammas']['128'][0]"),
    (lambda c: c["contexts"].update({"256": 9000}), "contexts.256 = 9000"),
    (lambda c: c["collapse"].update(dataset="wikitext"), "collapse.dataset = 'wikitext'"),
    (lambda c: c["comparison"].update(contexts=["1M"]), "context '1M'"),
    (lambda c: c["collapse"].update(gama=5), "'gama' was unexpected"),
    (lambda c: c["variants"].pop("la_only"), "variants must define 'la_only'"),
    (lambda c: c["single_budget"].update(trained_budget=32), "single_budget.trained_budget = 32"),
    (
        lambda c: c.update(verifier="embedded:no_such_model"),
        "verifier = 'embedded:no_such_model': unknown embedded",
    ),
    (lambda c: c.update(drafter="embedded:smollm2:layers=x"), "drafter = 'embedded:smollm2:layers=x'"),
    (lambda c: c.update(budgets=[0, 32]), "budgets[0] = 0: must be >= 1 (drafter KV budget B in tokens)"),
    (lambda c: c["policies"].update(dataset="pg19"), "policies.dataset = 'pg19'"),
    (lambda c: c["policies"].update(names=["h2o"]), "policies.names[0] = 'h2o'"),
    (lambda c: c.update(device="gpu"), "device = 'gpu': must match"),
    (lambda c: c["training"].update(device="gpu:0"), "training.device = 'gpu:0': must match"),
]
BAD_CONFIG_IDS = [
    "unknown-dataset-source",
    "budget-0",
    "gamma-0",
    "context-too-long",
    "unknown-dataset-key",
    "unknown-context",
    "typo-in-collapse",
    "no-la-only",
    "trained-budget-mismatch",
    "unknown-embedded-verifier",
    "bad-layer-count",
    "plain-schema-line",
    "unknown-policies-dataset",
    "unknown-policy",
    "device-gpu",
    "training-device-gpu",
]


@pytest.mark.parametrize("edit, message", BAD_CONFIGS, ids=BAD_CONFIG_IDS)
def test_bad_config_fails_naming_the_key(edit, message):
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    edit(cfg)
    assert message in refusal(cfg)  # refused: no plan is made of it


def test_a_bad_config_stops_snakemake_before_any_job(workdir):
    """The wiring: the Snakefile's one check refuses a config file's problem, and --config's, before any job."""
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    BAD_CONFIGS[0][0](cfg)
    (workdir / "bad.yaml").write_text(yaml.safe_dump(cfg))
    code, out = snakemake(workdir, "-n", "all", "--configfile", "bad.yaml", check=False)
    assert code != 0 and BAD_CONFIGS[0][1] in out, out[-2000:]
    assert "Job stats" not in out  # rejected before planning any job
    bad = f"variants={json.dumps({'sd': {'lambda_c': 0.25}})}"
    code, out = snakemake(workdir, "-n", "all", "--configfile", "config/ci.yaml", "--config", bad, check=False)
    assert code != 0 and VARIANT_NAMES[0][1] in out and "Job stats" not in out, out[-2000:]


def test_every_schema_problem_is_one_plain_line():
    """All problems at once, each naming the key, its value and the rule (not a dump of the sub-schema)."""
    from budgetdraft.pipeline.configcheck import schema_problems

    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg.update(budgets=[0, 32], sampling={"temperature": -1, "topp": 3})
    cfg["collapse"]["gama"] = 5
    cfg.pop("repeats")
    lines = schema_problems(cfg, ROOT / "workflow" / "schemas" / "config.schema.yaml")
    assert lines == [
        "config: 'repeats' is a required property, at config",
        "budgets[0] = 0: must be >= 1 (drafter KV budget B in tokens), at config['budgets'][0]",
        "collapse: Additional properties are not allowed ('gama' was unexpected), at config['collapse']",
        "sampling: Additional properties are not allowed ('topp' was unexpected), at config['sampling']",
        "sampling.temperature = -1: must be >= 0 (0 = greedy; at most 100), at config['sampling']['temperature']",
    ]
    assert (
        schema_problems(
            yaml.safe_load((ROOT / "config" / "config.yaml").read_text()),
            ROOT / "workflow" / "schemas" / "config.schema.yaml",
        )
        == []
    )


@pytest.mark.parametrize("key", ["max_new_tokens", "repeats"])
def test_the_size_of_a_run_has_one_source_the_config(key):
    """No default in the schema or in `eval-cell` competes with the config's value: a config without it is rejected."""
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg.pop(key)
    assert f"'{key}' is a required property" in refusal(cfg)


def sampled_config(sampling, baselines=()) -> dict:
    """config/ci.yaml with `sampling:` set (None: left out) and `baselines.enabled` = ``baselines`` (the copying
    control's long generations keep the baselines still enabled)."""
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    if sampling is not None:
        cfg["sampling"] = sampling
    cfg["baselines"]["enabled"] = list(baselines)
    methods = cfg["long_generation"]["methods"]
    cfg["long_generation"]["methods"] = [m for m in methods if m not in methods_registry.BASELINES or m in baselines]
    return cfg


def test_sampling_reaches_the_cells_only_when_set(workdir, dry_run):
    """What a cell is handed (no flags when greedy): tests/test_plan.py; here, where the command carries them."""
    greedy = [line for line in dry_run("all", "--configfile", "config/ci.yaml").splitlines() if "eval-cell" in line]
    assert greedy and not any("--temperature" in c or "--seed" in c for c in greedy)  # greedy: as it was
    (workdir / "s.yaml").write_text(yaml.safe_dump(sampled_config({"temperature": 0.7, "top_p": 0.9})))
    _, out = snakemake(workdir, "-n", "-p", "results/cells/sd/r0/gs/128/B16_g5.parquet", "--configfile", "s.yaml")
    hot = next(line for line in out.splitlines() if "eval-cell" in line)
    assert "--temperature 0.7 --top-p 0.9 --top-k 0 --seed 0 --out" in hot


@pytest.mark.parametrize(
    "sampling, baselines, message",
    [
        ({"temperature": -1}, [], "['sampling']['temperature']"),
        ({"temperature": 1, "top_p": 0}, [], "['sampling']['top_p']"),
        ({"temperature": 1, "top_k": 2.5}, [], "['sampling']['top_k']"),
        ({"temperature": 1, "topp": 0.5}, [], "'topp' was unexpected"),
        ({"temperature": 0.5}, ["triforce"], "sampling.temperature = 0.5 but baselines.enabled = ['triforce']"),
    ],
)
def test_bad_sampling_fails_naming_the_key(sampling, baselines, message):
    assert message in refusal(sampled_config(sampling, baselines))


def test_a_graphs_run_plans_eager_companions_on_their_own_engine(dry_run):
    """`engine: graphs` (on CUDA; planning needs no GPU): an eager companion (LABEL+eager) decodes on the eager
    engine, every other cell on graphs (which cells: tests/test_plan.py)."""
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    dataset = cfg["comparison"]["dataset"]
    cells = [f"results/cells/{label}/r0/{dataset}/128/B16_g5.parquet" for label in ("sd+eager", "sd")]
    cells += [f"results/cells/{label}/{dataset}/128/B0_g0.parquet" for label in ("ar+eager", "ar")]
    out = dry_run(*cells, "--configfile", "config/ci.yaml", "--config", "device=cuda", "engine=graphs")
    commands = [line for line in out.splitlines() if "eval-cell" in line]
    eager = [c for c in commands if "+eager" in c.split("--label ")[1].split()[0]]
    assert len(commands) == 4 and len(eager) == 2
    assert all("--engine eager" in c and f"--dataset {dataset}" in c for c in eager)
    assert all("--engine graphs" in c for c in commands if c not in eager)
    assert "+eager" not in dry_run("all", "--configfile", "config/ci.yaml")  # an eager run has no companions


def test_extra_variants_are_trained_and_evaluated_like_the_papers(dry_run, tmp_path):
    """`--config variants={...}` adds a λ variant (λ = 0.25) and another (a budget mix) to the paper's four: each is
    trained per replicate and measured at γ_fixed over every dataset x context x budget (as lambda1.0); the λ table
    reads the λ variant's cells, the `variants` table (in `all` because the config has such a variant) the other's
    (the plan's side of it, and a λ variant alone: tests/test_plan.py)."""
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    reps, g = cfg["replicates"], cfg["gamma_fixed"]
    extra = f"variants={json.dumps(EXTRA_VARIANTS)}"
    out = dry_run("all", "--configfile", "config/ci.yaml", "--config", extra)
    counts = job_counts(out)
    assert counts["train"] == 6 * reps and counts["table"] == 7 + 1, counts
    places = [(d, c, b) for d in cfg["datasets"] for c in cfg["contexts"] for b in cfg["budgets"]]
    # grid + controls per replicate, SD's long generations on the first
    assert counts["eval_replicate_cell"] == CI_PER_REPLICATE * reps + 2 + 2 * len(places) * reps, counts
    for label in EXTRA_VARIANTS:
        assert all(f"output: results/drafters/r{r}/{label}\n" in out for r in range(reps))
        for r in range(reps):
            assert all(f"results/cells/{label}/r{r}/{d}/{c}/B{b}_g{g}.parquet" in out for d, c, b in places)
    commands = {
        artifact: next(line for line in out.splitlines() if f"paper --artifact {artifact} " in line)
        for artifact in ("lambda", "variants", "main")
    }
    assert "lambda0.25/r1/" in commands["lambda"] and "budgets_mix/" not in commands["lambda"]
    assert "budgets_mix/r1/" in commands["variants"] and "lambda0.25/" not in commands["variants"]
    assert all(f"--settings results/settings/{a}.json" in commands[a] for a in commands)
    assert "lambda0.25/" not in commands["main"] and "budgets_mix/" not in commands["main"]
    trained = next(line for line in out.splitlines() if "train --init" in line and "r0/lambda0.25 " in line)
    assert '"lambda_c": 0.25' in trained
    # each table reads its settings from a file (rule settings): written here for real (the rule has no input; no
    # warm process for two local rules)
    work = copy_project(tmp_path)
    snakemake(work, "--cores", "1", "results/settings/lambda.json", "results/settings/variants.json",
              "--configfile", "config/ci.yaml", "--config", extra, "warm_start=false")  # fmt: skip
    shown = {a: json.loads((work / f"results/settings/{a}.json").read_text()) for a in ("lambda", "variants")}
    plan = Plan(checked("ci", variants=EXTRA_VARIANTS))
    assert shown == {a: json.loads(plan.settings.artifact_settings(a)) for a in shown}  # what the plan says, as a file
    assert shown["lambda"]["variants"]["lambda0.25"]["lambda_c"] == 0.25
    assert "budgets_mix" not in shown["lambda"]["variants"]
    assert shown["variants"]["variants"]["budgets_mix"] == {"lambda_c": 0.5, "budgets": [16, 32], "steps": 4}


VARIANT_NAMES = [
    ("sd", "variants: 'sd' is the label of method 'SD (sparse/full)'"),
    ("bd@snapkv", "variants = 'bd@snapkv': must match"),
    ("bd+eager", "variants = 'bd+eager': must match"),
    ("..", "variants = '..': must match"),
]


@pytest.mark.parametrize("name, message", VARIANT_NAMES)
def test_a_variant_name_that_is_unsafe_or_a_method_label_fails_naming_the_key(name, message):
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    assert message in refusal(cfg, f"variants={json.dumps({name: {'lambda_c': 0.25}})}")


def test_a_settings_file_edited_by_hand_is_named_and_written_again(workdir):
    """A settings file decides a table's column titles and each variant's λ, and its rule has no input: edited by hand
    (a dataset's name, a variant's λ), it is named with its first difference by a dry run and written again from the
    plan by a run, so every table that reads it is built again, never from the edit."""
    plan = Plan(checked("ci"))
    forged = {
        "lambda": json.loads(plan.settings.artifact_settings("lambda")),
        "claims": json.loads(plan.settings.artifact_settings("claims")),
    }
    forged["lambda"]["datasets"]["lwm"] = "FORGED-NAME"
    forged["claims"]["variants"]["lambda1.0"]["lambda_c"] = 0.1
    settings = ["results/settings/lambda.json", "results/settings/claims.json"]
    run = ("--cores", "1", *settings, "--configfile", "config/ci.yaml", "--config", "warm_start=false")
    snakemake(workdir, *run)  # made by the workflow (Snakemake records them), then edited
    for name, settings in forged.items():
        (workdir / f"results/settings/{name}.json").write_text(json.dumps(settings))
    _, out = snakemake(
        workdir, "-n", "results/tables/lambda.tex", "results/claims.md", "--configfile", "config/ci.yaml"
    )
    for name, difference in (
        ("lambda", "datasets.lwm = 'FORGED-NAME', not 'LWM'"),
        ("claims", "variants.lambda1.0.lambda_c = 0.1, not 1.0"),
    ):
        assert (
            f"settings file results/settings/{name}.json (not what the config plans: {difference}): job set_aside "
            "removes it" in out
        ), out[-2000:]
        assert json.loads((workdir / f"results/settings/{name}.json").read_text()) == forged[name]  # only said
    _, out = snakemake(workdir, *run)
    assert (
        "results/settings/lambda.json (not what the config plans: datasets.lwm = 'FORGED-NAME', not 'LWM'): removed, "
        "writing it again" in out
    ), out[-2000:]
    for name in forged:
        assert (workdir / f"results/settings/{name}.json").read_text() == plan.settings.artifact_settings(name)


# ---------------------------------------------------------------- only Snakemake's public API (issue 57)

PRIVATE = re.compile(r"config_settings|dag_settings|remote_exec|local_exec|deployment_settings|sys\.argv")


def test_the_workflow_reads_only_snakemakes_public_api():
    """workflow/ (the Snakefile included, where the snakemake-workflows catalog keeps it) reads none of Snakemake's
    settings objects or the command line: what they told is told by `config`, `workflow.configfiles`, the
    environment or a rule of the workflow's own (docs/pipeline.md, "What the workflow reads of Snakemake")."""
    assert not (ROOT / "Snakefile").exists() and (ROOT / "workflow" / "Snakefile").is_file()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "workflow").rglob("*"))
        if path.is_file()
        for number, line in enumerate(path.read_text(errors="ignore").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert found == []


def probed(workdir: Path, code: str) -> Path:
    """``workdir`` with ``code`` run by its Snakefile when Snakemake exits (atexit: after a dry run's plan too)."""
    snakefile = workdir / "workflow" / "Snakefile"
    snakefile.write_text(snakefile.read_text() + f"\n\nimport atexit\n\n\n@atexit.register\ndef probe():\n{code}")
    return workdir


def test_a_configfile_replaces_the_embedded_default(dry_run):
    """--configfile config/ci.yaml is the whole config (Snakemake would merge it into the workflow's default, and the
    default's contexts would add up); with none, the default is planned."""
    contexts = {
        name: set(yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())["contexts"])
        for name in ("ci", "config")
    }
    assert contexts["ci"] != contexts["config"]
    for out, name in ((dry_run("all", "--configfile", "config/ci.yaml"), "ci"), (dry_run(), "config")):
        planned = {m.group(1) for m in re.finditer(r"results/data/prompts/\w+/([\w.]+)\.parquet", out)}
        assert planned == {str(c) for c in contexts[name]}, (name, planned)


@pytest.mark.parametrize(
    "targets, predicted",
    [(("all",), True), ((), True), (("main",), False), (("all", "policies"), False)],
    ids=["all", "default-target", "another-target", "all-and-another"],
)
def test_the_time_is_predicted_only_when_the_plan_is_all(workdir, targets, predicted):
    """print_prediction (workflow/rules/common.smk) speaks only when `all` is the one named target this Snakemake
    planned: `snakemake main` or `snakemake all policies` would not be what its line predicts. Its decision, run
    after a dry run's plan with the prediction itself stubbed."""
    code = (
        "    import budgetdraft.pipeline.estimate as estimate\n"
        "    estimate.prediction = lambda configfile, cores=None: f'PREDICTED {configfile}'\n"
        "    config['estimate_before_run'] = True\n"
        "    print_prediction()\n"
    )
    out = snakemake(probed(workdir, code), "-n", *targets, "--configfile", "config/ci.yaml")[1]
    assert ("PREDICTED " in out) == predicted, out[-2000:]


def warm_environment(workdir: Path, env: dict, warm_start: str) -> dict:
    """BUDGETDRAFT_WARM / _AUTOSTART as the Snakefile leaves them in a Snakemake started with ``env`` added."""
    code = (
        "    print('WARM=' + json.dumps({k: v for k, v in os.environ.items() if k.startswith('BUDGETDRAFT_WARM')}))\n"
    )
    proc = subprocess.run(
        [SNAKEMAKE, "--list-target-rules", "--configfile", "config/ci.yaml", "--config", f"warm_start={warm_start}"],
        cwd=probed(workdir, code),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(workdir), **env},
    )
    found = re.search(r"^WARM=(.*)$", proc.stdout + proc.stderr, re.M)
    assert found, proc.stdout + proc.stderr
    return json.loads(found.group(1))


def test_a_cluster_job_is_told_from_the_environment(workdir):
    """A Snakemake that SLURM started (SLURM_JOB_ID) below the run's own (BUDGETDRAFT_SNAKEMAKE, another process's id)
    runs a cluster job: it drops the submitting machine's warm socket and, resident, makes its own, which its first
    cell starts. A run started inside a SLURM allocation (no run's id yet) is no cluster job and keeps what it has."""
    login = {"BUDGETDRAFT_WARM": "/login-node/warm.sock"}
    job = {"SLURM_JOB_ID": "42", "BUDGETDRAFT_SNAKEMAKE": "1", **login}
    resident = warm_environment(workdir, job, "resident")
    assert "job42" in resident["BUDGETDRAFT_WARM"] and resident["BUDGETDRAFT_WARM_AUTOSTART"].isdigit(), resident
    assert warm_environment(workdir, job, "fork") == {}  # no fork server in a cluster job: each cell on its own
    assert warm_environment(workdir, {"SLURM_JOB_ID": "42", **login}, "resident") == login
    group_cell = {**job, "BUDGETDRAFT_WARM": "/tmp/job42/warm.sock", "BUDGETDRAFT_WARM_AUTOSTART": "7"}
    assert warm_environment(workdir, group_cell, "resident") == {k: group_cell[k] for k in group_cell if "WARM" in k}


DEPLOYMENT_VARS = ("CONDA_PREFIX", "APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")


@pytest.fixture(scope="module")
def deployed_job(tmp_path_factory) -> tuple[str, dict]:
    """The rules' shell prefix (workflow/Snakefile, DEPLOYED_JOB) of a Snakemake started outside any deployment, and
    that environment: one Snakemake start for every job environment below."""
    base = {k: v for k, v in os.environ.items() if k not in DEPLOYMENT_VARS}
    code = "    print('DEPLOYED_JOB=' + DEPLOYED_JOB)\n"
    proc = subprocess.run(
        [SNAKEMAKE, "--list-target-rules", "--configfile", "config/ci.yaml"],
        cwd=probed(copy_project(tmp_path_factory.mktemp("deployed")), code), capture_output=True, text=True, env=base,
    )  # fmt: skip
    return re.search(r"^DEPLOYED_JOB=(.*)$", proc.stdout, re.M).group(1), base


@pytest.mark.parametrize(
    "job, kept",
    [
        ({}, True),
        ({"CONDA_PREFIX": "/envs/rule"}, False),
        ({"APPTAINER_CONTAINER": "/images/rule.sif"}, False),
        ({"CONDA_PREFIX": "/envs/rule", "BUDGETDRAFT_WARM_AUTOSTART": "7"}, True),
    ],
    ids=["same-environment", "conda", "apptainer", "a-cluster-jobs-own-server"],
)
def test_a_job_deployed_elsewhere_does_not_use_the_warm_process(deployed_job, job, kept):
    """The rules' shell prefix: a job that --sdm conda or apptainer runs in another environment than Snakemake's
    drops BUDGETDRAFT_WARM (the warm process would run its cell in Snakemake's Python); a cluster job's own resident
    server, started by the cell's own Python, stays."""
    snippet, base = deployed_job
    env = {**base, "BUDGETDRAFT_WARM": "/tmp/warm.sock", **job}
    shown = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; {snippet} echo ${{BUDGETDRAFT_WARM:-none}}"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert shown.stdout.strip() == ("/tmp/warm.sock" if kept else "none"), shown.stdout + shown.stderr
