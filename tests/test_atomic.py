"""Atomic writes (`budgetdraft.base.atomic`): what a killed writer left is cleaned up, a failed write leaves nothing."""

import os
import subprocess

import pytest

from budgetdraft.base.atomic import atomic_path


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_temps_of_dead_writers_are_removed_and_those_of_live_ones_kept(tmp_path):
    out = tmp_path / "cell.parquet"
    dead, live = tmp_path / f".cell.parquet.{dead_pid()}.tmp", tmp_path / f".cell.parquet.{os.getppid()}.tmp"
    other = tmp_path / f".other.parquet.{dead_pid()}.tmp"  # another output's: not looked at
    for path in (dead, live, other):
        path.write_text("partial")
    (tmp_path / f".cell.parquet.{os.getpid()}.tmp").mkdir()  # an earlier, killed process with this PID
    with atomic_path(out) as tmp:
        tmp.write_text("new")
    assert out.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, live.name, other.name])


def test_a_failed_write_leaves_no_temp_and_the_old_output(tmp_path):
    out = tmp_path / "cell.parquet"
    out.write_text("old")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_path(out) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["cell.parquet"]


def test_a_directory_written_over_a_folder_its_command_did_not_write_is_refused_and_the_folder_kept(tmp_path):
    """atomic_path replaced an existing directory with shutil.rmtree, whatever it held (issue 38)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for command in (None, "export-model"):
        with pytest.raises(ValueError, match=f"{mine} (is a directory|exists and is not an earlier output)"):
            with atomic_path(mine, **({"command": command} if command else {})) as tmp:
                tmp.mkdir()
                (tmp / "model.safetensors").write_text("new")
        assert os.listdir(mine) == ["notes.txt"] and sorted(os.listdir(tmp_path)) == ["mine"]
