"""`estimate` from any install (issue 56): the workflow and the schema a config belongs to are its own, found from
the config file, the schema shipped with the package where there is none; a wheel install (no checkout in
site-packages) estimates the shipped configs from a checkout; and a hub id is priced at the model its hub serves
when that hub's config.json is readable offline (a local hub, the Hugging Face cache), the published shape else."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import paper_models
import pytest
import yaml
from localhub import LocalHub

from budgetdraft.pipeline import estimate
from budgetdraft.pipeline.roofline import MODELS

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
VERIFIER = "NousResearch/Yarn-Llama-2-7b-128k"


def test_the_schema_has_one_home_which_the_package_links_to():
    """The package ships the workflow's schema through a link, not a copy: there is one file to edit."""
    assert estimate.PACKAGED_SCHEMA.is_symlink()
    assert estimate.PACKAGED_SCHEMA.resolve() == WORKFLOW_SCHEMA.resolve()


def test_a_config_is_planned_by_the_workflow_above_it_and_checked_against_its_schema(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "workflow/schemas").mkdir(parents=True)
    (checkout / "workflow/Snakefile").write_text("")  # where this project keeps it (the catalog's layout)
    (checkout / "workflow/schemas/config.schema.yaml").write_text("type: object\n")
    nested = checkout / "config/mine/c.yaml"
    nested.parent.mkdir(parents=True)
    nested.write_text("{}\n")
    monkeypatch.chdir(tmp_path)  # no Snakefile here: only the config's own folders find the workflow
    found = estimate.Workflow.of(str(nested))
    assert found == estimate.Workflow(checkout, checkout / "workflow/schemas/config.schema.yaml")

    (checkout / "workflow/schemas/config.schema.yaml").unlink()  # a workflow without a schema: the package's
    assert estimate.Workflow.of(str(nested)).schema == estimate.PACKAGED_SCHEMA

    alone = tmp_path / "alone/c.yaml"
    alone.parent.mkdir()
    alone.write_text("{}\n")
    assert estimate.Workflow.of(str(alone)) == estimate.Workflow(None, estimate.PACKAGED_SCHEMA)
    with pytest.raises(ValueError, match=r"^--configfile .*alone/c\.yaml: no Snakefile in its folder") as err:
        estimate.Planning(str(alone))
    assert "\n" not in str(err.value)

    monkeypatch.chdir(checkout)  # a config outside any checkout, run from one: that checkout's workflow
    assert estimate.Workflow.of(str(alone)).root == checkout


def test_a_dry_run_that_never_plans_is_ended_in_one_line(tmp_path, monkeypatch):
    """The estimate waits for the workflow's dry run at most DRY_RUN_S (a run's prediction is asked from its onstart:
    a wait for ever there holds the run for ever), then ends it and says so in one line."""
    (tmp_path / "workflow").mkdir()
    (tmp_path / "workflow/Snakefile").write_text("import time\ntime.sleep(60)\n")
    (tmp_path / "c.yaml").write_text("{}\n")
    monkeypatch.setattr(estimate, "DRY_RUN_S", 2)
    planning = estimate.Planning(str(tmp_path / "c.yaml"))
    with pytest.raises(ValueError, match=r"^snakemake -n all --configfile .*c\.yaml \(in .*\) had planned no jobs "
                       r"after 2 s and was ended") as err:  # fmt: skip
        planning.jobs()
    assert "\n" not in str(err.value) and planning.proc.poll() is not None


def venv_with_wheel(tmp_path: Path) -> Path:
    """A fresh venv holding only a wheel of the package (built from a copy of what the wheel is made of, so the
    checkout gains no build/), the project's .venv's packages visible through a .pth: nothing downloaded."""
    source = tmp_path / "source"
    skip = shutil.ignore_patterns("*.egg-info", "__pycache__")
    shutil.copytree(ROOT / "src", source / "src", symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "workflow/schemas", source / "workflow/schemas")  # what the package's link points to
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(source), "-w"]
    subprocess.run([*build, str(wheels)], check=True, capture_output=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin/python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    # the project's packages (torch, snakemake, ...) as a path: its .pth files, the editable install's, unread
    Path(purelib, "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(wheels.glob("budgetdraft-*.whl"))
    # --ignore-installed: the project's editable install, seen through the .pth, is not this venv's
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    "--ignore-installed", str(wheel)], check=True, capture_output=True)  # fmt: skip
    return python


@pytest.mark.workflow
def test_a_wheel_install_estimates_the_shipped_configs_from_a_checkout(tmp_path):
    """From a wheel, the schema had been looked up beside the installed module (site-packages/../workflow/...), and
    `estimate --configfile config/paper.yaml` failed with No such file or directory."""
    python = venv_with_wheel(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([python, "-c", "import budgetdraft; print(budgetdraft.__file__)"], cwd=tmp_path, env=env,
                           check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert where.startswith(str(tmp_path / "venv")), where
    for configfile, gpu in (("config/config.yaml", "cpu"), ("config/paper.yaml", "a100-80g")):
        done = subprocess.run([python, "-m", "budgetdraft", "estimate", "--configfile", configfile, "--gpu", gpu],
                              cwd=ROOT, env=env, capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, configfile + ": " + done.stderr[-2000:]
        assert "| **total** |" in done.stdout and "Wall time:" in done.stdout, done.stdout[-2000:]

    (tmp_path / "c.yaml").write_text((ROOT / "config/config.yaml").read_text())  # no checkout anywhere
    done = subprocess.run([python, "-m", "budgetdraft", "estimate", "--configfile", "c.yaml", "--gpu", "cpu"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no Snakefile in its folder" in done.stderr, done.stderr


SHAPES = """
import json, sys, yaml
from budgetdraft.pipeline import estimate
from budgetdraft.pipeline.roofline import served_shape
cfg = yaml.safe_load(open(sys.argv[1]))
est = estimate.Estimator(cfg, estimate.DEVICES["a100-80g"], 0.5)
print(json.dumps([vars(served_shape(cfg, "verifier")), vars(est.verifier.shape), est.gpu_steps is None]))
"""


def shapes(configfile: Path, env: dict) -> list:
    done = subprocess.run([sys.executable, "-c", SHAPES, str(configfile)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_hub_id_is_priced_at_the_model_its_hub_serves(tmp_path):
    """A local hub serving a 2-layer, 256-wide model under the 7B verifier's id: the estimate had priced it at the
    id's published 32 layers x 4096 (`MODELS`), a GPU measurement of the 7B included. Read from the hub on this
    machine, then from the Hugging Face cache offline; with neither, the published shape."""
    served = paper_models.yarn_llama_2_7b_128k(heads=2, layers=2)
    cfg = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    cfg.pop("revisions", None)  # the hub here has its own commits
    configfile = tmp_path / "paper.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    tiny = {"layers": 2, "hidden": 256, "ffn": served["intermediate_size"], "heads": 2, "kv_heads": 2,
            "vocab": served["vocab_size"], "tied": False}  # fmt: skip
    published = dict(MODELS[VERIFIER])
    with LocalHub(tmp_path / "repos") as hub:
        hub.add(VERIFIER, {"config.json": json.dumps(served)})
        env = {**os.environ, **hub.env(tmp_path / "hf")}
        assert shapes(configfile, env) == [tiny, tiny, True]  # the hub's shape; no GPU measurement of the 7B applies
    offline = {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "https://huggingface.co"}
    assert shapes(configfile, offline)[:2] == [tiny, tiny]  # from the cache the hub filled, no hub asked
    elsewhere = {**offline, "HF_HOME": str(tmp_path / "empty"), "HF_HUB_CACHE": str(tmp_path / "empty/hub")}
    assert shapes(configfile, elsewhere) == [published, published, False]
