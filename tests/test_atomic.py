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
