"""Drafters given, not trained (issue 40): a variant named by a checkpoint (a local directory here; a hub id works
the same with internet) plans no training job and is exported once and measured as one external draw, and
config/paper_release.yaml is the paper's evaluation of the authors' four released drafters, no training."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import tiny_llama

from budgetdraft.base import revisions
from budgetdraft.decoding.export import vocabulary_problem
from budgetdraft.pipeline.configcheck import check_config
from budgetdraft.pipeline.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())


def test_the_release_config_is_the_papers_but_for_its_given_drafters():
    """Everything but the variants (checkpoints, no training overrides) and EAGLE-3 (a head trained here) is
    config/paper.yaml's, so that its numbers are the paper's evaluation of the released drafters."""
    paper, release = load("paper"), load("paper_release")
    changed = {k for k in paper.keys() | release.keys() if paper.get(k) != release.get(k)}
    assert changed == {"variants", "baselines"}
    assert release["baselines"]["enabled"] == ["triforce", "lookup"]
    assert {k: {x: y for x, y in v.items() if x != "checkpoint"} for k, v in release["variants"].items()} == {
        "la_only": {"subfolder": "aonly", "lambda_c": 0.0},
        "lambda0.5": {"subfolder": "main", "lambda_c": 0.5},
        "lambda1.0": {"subfolder": "ac", "lambda_c": 1.0},
        "single_budget": {
            "not_run": "the authors do not release this drafter",
            "lambda_c": 0.5,
            "budgets": [1024],
            "budget_weights": [1.0],
        },
    }
    assert {v.get("checkpoint") for v in release["variants"].values()} == {RELEASE, None}


RELEASE = "qwe123wjb/BudgetDraft-checkpoints"  # one hub repository, a subfolder per drafter


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """A local copy laid out as the release (`hf download ... --local-dir ./ckpts`): main/, aonly/, ac/."""
    path = tmp_path_factory.mktemp("release") / "ckpts"
    for sub in ("main", "aonly", "ac"):
        tiny_llama(seed=5, layers=1).save_pretrained(path / sub)
    return str(path)


def release_plan(**variants) -> Plan:
    cfg = load("paper_release")
    for label, given in variants.items():
        cfg["variants"][label].update(given)
    check_config(cfg, schema=SCHEMA)
    return Plan(cfg)


def test_a_given_variant_plans_no_training_and_is_measured_once(checkpoint):
    p = release_plan(**{"lambda0.5": {"checkpoint": checkpoint}, "la_only": {"checkpoint": None}})
    assert p.labels.trained == [] and p.labels.given == {
        "lambda0.5": {"checkpoint": checkpoint, "subfolder": "main", "lambda_c": 0.5},
        "lambda1.0": {"checkpoint": RELEASE, "subfolder": "ac", "lambda_c": 1.0},
    }
    assert p.drafters.drafter_dir("lambda0.5") == "results/drafters/given/lambda0.5" and not p.labels.replicated(
        "lambda0.5"
    )
    cells = [c for c in p.cells.all_cells() if "/lambda0.5/" in c]
    assert cells and all("/r0/" not in c for c in cells)  # shared: one external draw, no training replicate
    assert p.drafters.export_given_flags("lambda0.5") == f"--spec {checkpoint} --subfolder main"
    settings = json.loads(p.settings.artifact_settings("main"))
    assert settings["variants"]["lambda0.5"]["checkpoint"] == checkpoint
    assert set(settings["not_run"]) == {"la_only", "single_budget"}
    assert not any(f"/{v}/" in c for c in p.cells.every_cell() for v in settings["not_run"])  # left out: no cell asked


def test_a_given_checkpoint_is_an_input_of_its_export_by_content(tmp_path):
    """A local checkpoint's files are its export's inputs and their sha256 its params: weights replaced at the same
    path (even with their old modification time) make another digest, so Snakemake exports and measures it again."""
    path = tmp_path / "ckpt"
    tiny_llama(seed=5, layers=1).save_pretrained(path / "main")
    p = release_plan(**{"lambda0.5": {"checkpoint": str(path)}})
    weights = path / "main" / "model.safetensors"
    assert str(weights) in p.drafters.given_files("lambda0.5")
    before, stat = p.drafters.given_digest("lambda0.5"), weights.stat()
    tiny_llama(seed=6, layers=1).save_pretrained(path / "main")
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert p.drafters.given_digest("lambda0.5") != before


def test_a_revision_pins_only_a_hub_checkpoint_and_an_unpinned_one_is_warned(checkpoint):
    """A revision on a local checkpoint is refused at plan time; a hub checkpoint read without one is listed with
    the unpinned repositories (the plan's warning, and what `pin` pins), and the config's `revisions:` pins it."""
    cfg = load("paper_release")
    cfg["variants"]["lambda0.5"].update(checkpoint=checkpoint, revision="a" * 40)
    with pytest.raises(ValueError, match=r"variants\.lambda0\.5\.revision = 'a{40}': .* is a local checkpoint"):
        check_config(cfg, schema=SCHEMA)
    cfg = load("paper_release")
    cfg["variants"]["lambda0.5"].update(checkpoint="owner/ckpts", subfolder="main")
    assert "owner/ckpts" in revisions.unpinned(cfg) and revisions.hub_repos(cfg)["owner/ckpts"] == "model"
    cfg["revisions"] = {"owner/ckpts": "b" * 40}
    check_config(cfg, schema=SCHEMA)
    assert "owner/ckpts" not in revisions.unpinned(cfg)
    assert (
        Plan(cfg).drafters.export_given_flags("lambda0.5")
        == f"--spec owner/ckpts --subfolder main --revision {'b' * 40}"
    )


def test_a_training_key_beside_a_checkpoint_is_refused(checkpoint):
    cfg = load("paper_release")
    cfg["variants"]["lambda0.5"].update(checkpoint=checkpoint, steps=100)
    with pytest.raises(ValueError, match=r"variants\.lambda0\.5\.steps: lambda0\.5 is given as a checkpoint"):
        check_config(cfg, schema=SCHEMA)


@pytest.mark.parametrize("where", ["/no/such/dir", "./tinydraft_aonly/final", "~/no_such_release/x/final"])
def test_a_local_checkpoint_that_is_not_there_is_refused_before_any_job(where, tmp_path, monkeypatch):
    """A path (absolute, relative, under ~, or with more than one '/') can only be a directory: missing, it is
    refused at plan time naming the key, never taken for a hub id that fails at export."""
    monkeypatch.chdir(tmp_path)
    cfg = load("paper_release")
    cfg["variants"]["la_only"]["checkpoint"] = where
    with pytest.raises(ValueError, match=r"variants\.la_only\.checkpoint = .*: no such directory"):
        check_config(cfg, schema=SCHEMA)
    cfg["variants"]["la_only"]["checkpoint"] = "owner/name"  # a hub id: checked when exported
    check_config(cfg, schema=SCHEMA)


@pytest.mark.real
def test_a_checkpoint_of_another_vocabulary_is_refused_naming_both(checkpoint, real_pair):
    """The default's verifier (SmolLM2, 49,152 tokens, converted by real_pair) against a 96-token checkpoint: refused
    at plan time, naming both; and export-model refuses it before writing anything."""
    cfg = load("config")
    cfg["variants"]["lambda1.0"] = {"checkpoint": checkpoint, "subfolder": "ac", "lambda_c": 1.0}
    with pytest.raises(ValueError) as err:
        check_config(cfg, schema=SCHEMA)
    said = str(err.value)
    assert f"variants.lambda1.0.checkpoint = '{checkpoint}/ac' has a vocabulary of 96 tokens" in said
    assert "the verifier embedded:smollm2 of 49,152" in said


def test_export_refuses_a_drafter_of_another_vocabulary_before_writing(checkpoint, tmp_path):
    verifier = tmp_path / "verifier"
    tiny_llama(seed=0, layers=1, vocab=128).save_pretrained(verifier)
    main = f"{checkpoint}/main"
    assert "vocabulary of 96 tokens" in vocabulary_problem(main, verifier, "drafter", "verifier")
    assert vocabulary_problem(main, main, "a", "b") is None


def test_a_release_folder_without_its_subfolder_is_refused_naming_the_drafters_in_it(checkpoint):
    with pytest.raises(ValueError, match=r"no config\.json there.*it holds the models \['ac', 'aonly', 'main'\]"):
        release_plan(**{"lambda0.5": {"checkpoint": checkpoint, "subfolder": ""}})


@pytest.mark.workflow
def test_the_release_dry_run_plans_no_training_and_every_evaluation(checkpoint, tmp_path):
    """`snakemake -n all --configfile config/paper_release.yaml`, the three released checkpoints read from a local
    copy: no job trains, a job exports each checkpoint, and every cell of the paper's grid is planned but the
    single-budget drafter's (not released)."""
    given = {v: {"checkpoint": checkpoint} for v in ("la_only", "lambda0.5", "lambda1.0")}
    override = json.dumps(given).replace('"', "")
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "all", "--configfile", "config/paper_release.yaml",
         "--config", f"variants={override}"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    jobs = {
        line.split()[0]: int(line.split()[1])
        for line in run.stdout.splitlines()
        if len(line.split()) == 2 and line.split()[1].isdigit()
    }
    assert not {"train", "train_base", "train_eagle3", "targets"} & set(jobs), jobs
    assert jobs["export_given"] == 3
    cfg = copy.deepcopy(load("paper_release"))
    for label, g in given.items():
        cfg["variants"][label].update(g)
    check_config(cfg, schema=SCHEMA)
    assert jobs["eval_cell"] == len(Plan(cfg).cells.all_cells())
