"""Hub revisions: the repositories a config reads, `pin`'s block, and the jobs reading them at the pinned commit."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from budgetdraft import models
from budgetdraft.base import revisions
from budgetdraft.pipeline.commands import cmd_pin
from budgetdraft.training import data

ROOT = Path(__file__).resolve().parents[1]
PAPER = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
SHA = {repo: f"{i:x}" * 40 for i, repo in enumerate(sorted(revisions.hub_repos(PAPER)), start=1)}


def test_the_paper_config_reads_two_hub_models_and_three_hub_datasets():
    assert revisions.hub_repos(PAPER) == {
        "NousResearch/Yarn-Llama-2-7b-128k": "model",
        "JackFram/llama-68m": "model",
        "emozilla/pg19": "dataset",
        "THUDM/LongBench": "dataset",
        "deepmind/narrativeqa": "dataset",
    }
    assert revisions.unpinned(PAPER) == sorted(SHA)
    assert revisions.unpinned({**PAPER, "revisions": SHA}) == []
    default = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    assert revisions.hub_repos(default) == {}  # embedded models and texts: nothing to pin


@pytest.mark.parametrize("spec", ["embedded:smollm2", "results/models/verifier", "./a/b", "/a/b", "~/a/b", "a/b/c"])
def test_local_specs_are_not_hub_repositories(spec):
    assert revisions.hub_model(spec) is None


def test_pin_prints_a_block_the_schema_accepts(monkeypatch, capsys):
    from snakemake.utils import validate

    monkeypatch.setattr(revisions, "current_commits", lambda repos: {r: SHA[r] for r in repos})
    cmd_pin.run(argparse.Namespace(configfile=str(ROOT / "config/paper.yaml")))
    block = yaml.safe_load(capsys.readouterr().out)
    assert block == {"revisions": SHA}
    validate({**PAPER, **block}, str(ROOT / "workflow/schemas/config.schema.yaml"))


def test_pin_without_the_hub_says_which_repositories_it_could_not_read(monkeypatch):
    def offline(repos):
        raise OSError("no network")

    monkeypatch.setattr(revisions, "current_commits", offline)
    with pytest.raises(ValueError, match=r"cannot read the hub's current commits of .*emozilla/pg19.*no network"):
        cmd_pin.run(argparse.Namespace(configfile=str(ROOT / "config/paper.yaml")))


def test_a_revision_is_refused_where_nothing_is_read_from_the_hub(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="is not a hub repository"):
        models.export("embedded:smollm2", tmp_path / "out", revision=SHA["emozilla/pg19"])
    with pytest.raises(ValueError, match="source 'sotu_summary' reads no hub repository"):
        data.source_docs(data.EVAL_SOURCES, "sotu_summary", 0, SHA["emozilla/pg19"])
    seen = {}
    monkeypatch.setitem(data.EVAL_SOURCES, "pg19_test", lambda seed, revision="": seen.update(revision=revision))
    data.source_docs(data.EVAL_SOURCES, "pg19_test", 0, "abc")
    assert seen == {"revision": "abc"}


@pytest.mark.workflow
def test_jobs_read_hub_repositories_at_the_pinned_commit():
    """A dry run of the paper config: the verifier's export and a prompts file pass their repository's commit."""
    pins = ",".join(f'"{repo}": "{sha}"' for repo, sha in SHA.items())
    targets = ["results/models/verifier", "results/data/prompts/gs/4K.parquet"]
    cmd = [sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", *targets, "--configfile", "config/paper.yaml"]
    pinned = subprocess.run([*cmd, "--config", f"revisions={{{pins}}}"], cwd=ROOT, capture_output=True, text=True)
    assert pinned.returncode == 0, pinned.stderr[-3000:]
    assert f"--spec NousResearch/Yarn-Llama-2-7b-128k --dtype float16 --revision {SHA[PAPER['verifier']]}" in (
        pinned.stdout
    )
    assert f"--revision {SHA['emozilla/pg19']} --out results/data/prompts/gs/4K.parquet" in pinned.stdout
    assert "hub repositories read at no pinned revision" not in pinned.stderr
    loose = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert "hub repositories read at no pinned revision: JackFram/llama-68m" in loose.stderr
    assert "--revision" not in loose.stdout
