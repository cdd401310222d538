"""Settings that would silently mean something else are refused before any job is planned, by a real dry run: a
config file that gives one key twice (YAML keeps the last value; Snakemake loads the file itself)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake")
pytestmark = [pytest.mark.workflow, pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake is not installed")]


def dry_run(tmp_path, config_text: str) -> tuple[int, str]:
    for name in ("Snakefile", "workflow", "config", "profiles", "envs", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    (tmp_path / "bad.yaml").write_text(config_text)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "all", "--configfile", "bad.yaml"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_duplicated_key_in_the_configfile_is_refused_naming_file_key_and_line(tmp_path):
    text = (ROOT / "config" / "ci.yaml").read_text()
    first = 1 + text.splitlines().index("max_new_tokens: 8")
    last = len(text.splitlines()) + 1
    code, out = dry_run(tmp_path, text + "max_new_tokens: 64\n")
    assert code != 0
    assert f"bad.yaml, line {last}: key 'max_new_tokens' is given twice (first at line {first})" in out, out[-2000:]
    assert "Job stats" not in out
