"""Settings that would silently mean something else are refused before any job is planned. Through a real dry run:
a config file that gives one key twice (YAML and Snakemake keep the last value), a number that is not finite, a
display name a reader cannot see; and a whole-number float is planned as the integer it is. The other names and
numbers that would fail late go from their config file's text through `check_config`, the one call the Snakefile makes
(a Snakemake start would add ~2 CPU-seconds to each; tests/test_configcheck.py has each edit as a Python value too).
A --config key or a --config / --configfile flag given twice is not refused: Snakemake shows a workflow only what it
kept (docs/pipeline.md, "What the workflow reads of Snakemake")."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_configcheck import SCHEMA

from budgetdraft.pipeline.configcheck import check_config

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake")
# each test that runs a real dry run (the in-process checks of the config texts need no Snakemake: the fast selection
# runs them)
needs_snakemake = pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake is not installed")


def dry_run(tmp_path, config_text: str, *args: str) -> tuple[int, str]:
    for name in ("workflow", "config", "profiles", "envs", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    (tmp_path / "bad.yaml").write_text(config_text)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "all", "--configfile", "bad.yaml", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.workflow
@needs_snakemake
def test_a_duplicated_key_in_the_configfile_is_refused_naming_file_key_and_line(tmp_path):
    text = (ROOT / "config" / "ci.yaml").read_text()
    first = 1 + next(i for i, line in enumerate(text.splitlines()) if line.startswith("max_new_tokens:"))
    last = len(text.splitlines()) + 1
    code, out = dry_run(tmp_path, text + "max_new_tokens: 64\n")
    assert code != 0
    assert f"bad.yaml, line {last}: key 'max_new_tokens' is given twice (first at line {first})" in out, out[-2000:]
    assert "Job stats" not in out


@pytest.mark.workflow
@needs_snakemake
def test_a_nan_lambda_is_refused_before_any_job(tmp_path):
    text = (
        (ROOT / "config" / "ci.yaml").read_text().replace("lambda1.0: {lambda_c: 1.0}", "lambda1.0: {lambda_c: .nan}")
    )
    code, out = dry_run(tmp_path, text)
    assert code != 0 and "variants.lambda1.0.lambda_c = nan: must be a finite number" in out, out[-2000:]
    assert "Job stats" not in out


@pytest.mark.workflow
@needs_snakemake
def test_whole_number_floats_plan_as_integers(tmp_path):
    text = (ROOT / "config" / "ci.yaml").read_text()
    text = text.replace("replicates: 2 ", "replicates: 2.0 ").replace("budgets: [16, 32]\n", "budgets: [16.0, 32.0]\n")
    assert "replicates: 2.0" in text and "budgets: [16.0, 32.0]" in text
    code, out = dry_run(tmp_path, text)
    assert code == 0 and "results/cells/lambda0.5/r1/gs/128/B16_g5.parquet" in out, out[-2000:]


LONG = "v" * 300
HOSTILE = [  # (an edit of config/ci.yaml's text, the line the plan stops with)
    (
        (
            '  lwm: {source: kjv_lwm, name: "LWM"}',
            '  lwm: {source: kjv_lwm, name: "LWM"}\n  LWM: {source: kjv_lwm, name: "L2"}',
        ),
        "datasets: 'LWM' differs only by case from datasets 'lwm'",
    ),
    (
        ("lambda1.0: {lambda_c: 1.0}", "lambda1.0: {lambda_c: 1.0}\n  SD: {lambda_c: 0.7}"),
        "variants: 'SD' differs only by case",
    ),
    (
        ('gammas: {"128": [3, 5]', 'gammas: {"128": [3, 5, 100000]'),
        "gammas.128[2] = 100000 is more than max_new_tokens",
    ),
    (
        ("seed: 0\n", "seed: 10000000000000000000000000000000000000000\n"),
        "seed = 10000000000000000000000000000000000000000",
    ),
    (
        ("lambda1.0: {lambda_c: 1.0}", f"lambda1.0: {{lambda_c: 1.0}}\n  {LONG}: {{lambda_c: 0.7}}"),
        "has 300 characters",
    ),
    (
        ("lambda1.0: {lambda_c: 1.0}", 'lambda1.0: {lambda_c: 1.0}\n  "lam\\n": {lambda_c: 0.7}'),
        "the key 'lam\\n' has a control",
    ),
    (('name: "GS"', 'name: "</script><img src=x onerror=alert(1)>"'), "datasets.gs.name = '</script>"),
    (('name: "GS"', 'name: "\\u202eSG"'), "datasets.gs.name = '\\u202eSG': holds U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    (
        (
            '  gs: {source: shakespeare_plays, name: "GS"}',
            '  gs: {source: shakespeare_plays, name: "Café"}\n  gs2: {source: shakespeare_plays, name: "Cafe\\u0301"}',
        ),
        "datasets.gs2.name = 'Cafe\u0301' reads as datasets.gs.name = 'Café': two columns a reader cannot tell apart",
    ),
    (
        ("lambda1.0: {lambda_c: 1.0}", "lambda1.0: {lambda_c: 1.0}\n  v1: {lambda_c: 0.7}\n  v1.: {lambda_c: 0.8}"),
        "variants: 'v1.' ends in '.', which Windows drops ('v1.' and 'v1' are one folder there)",
    ),
]


IDS = ["case-datasets", "case-method", "gamma", "seed", "long", "newline", "markup", "rtl", "nfc-nfd", "windows-dot"]


def edited_ci(edit) -> str:
    text = (ROOT / "config" / "ci.yaml").read_text()
    assert edit[0] in text, edit[0]
    return text.replace(edit[0], edit[1], 1)


@pytest.mark.parametrize("edit, line", HOSTILE, ids=IDS)
def test_a_name_or_number_that_fails_late_is_refused_from_the_config_text(tmp_path, edit, line):
    """The edited file read as Snakemake reads a --configfile (YAML), then checked as the Snakefile checks it."""
    path, text = tmp_path / "bad.yaml", edited_ci(edit)
    path.write_text(text)  # the file too: a key given twice is found in it
    with pytest.raises(ValueError) as refused:
        check_config(yaml.safe_load(text), schema=SCHEMA, files=[str(path)])
    assert line in str(refused.value)


@pytest.mark.workflow
@needs_snakemake
def test_a_name_that_fails_late_stops_snakemake_before_any_job(tmp_path):
    """One of the edits above through a real dry run: the refusal is Snakemake's last word, and no job is planned."""
    edit, line = HOSTILE[IDS.index("rtl")]
    code, out = dry_run(tmp_path, edited_ci(edit))
    assert code != 0 and line in out and "Job stats" not in out, out[-2000:]
