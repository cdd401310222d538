"""bench/gpu_decode.py, the GPU decode benchmark of issue 28: its code path runs on the CPU (``--smoke``: tiny
models, eager engine, a few steps) and prints the table's columns; without CUDA and without ``--smoke`` it says in
one line what it needs. Its numbers are measured only on a GPU.

A fresh process pays ~7 s importing torch and transformers here: the smoke run whose columns and --profile are
checked and the one-line refusal run in this process (tests/test_bench.py's ``run_script``, which runs the file as
``python bench/gpu_decode.py`` would); the run cut short by --max-minutes, whose json the estimate reads, runs as a
process of its own, as a user runs it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_bench import run_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_decode.py"


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The smoke run at two contexts and two budgets, HF's rows included, with --profile: its output and report."""
    out = tmp_path_factory.mktemp("smoke") / "report.md"
    flags = ["--smoke", "--profile", "--contexts", "48", "80", "--budgets", "16", "32", "--out", str(out)]
    return run_script("gpu_decode.py", *flags, cwd=out.parent), out


def test_smoke_prints_every_column_for_every_context(smoke):
    run, out = smoke
    lines = run.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| context | AR eager ms"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns == [
        "context",
        "AR eager ms",
        "AR graphs ms",
        "HF dynamic ms",
        "HF static ms",
        "bound ms",
        "bound ÷ eager",
        "bound ÷ graphs",
        "bound ÷ HF static",
        "verify(6) ÷ AR eager",
        "verify(6) ÷ AR graphs",
        "c eager B=16/32",
        "c graphs B=16/32",
        "graphs warm-up s",
        "peak GB eager / graphs / HF dyn / HF static",
    ]
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in lines[lines.index(header) + 2 :][:2]}
    assert set(rows) == {"48 (48)", "80 (80)"}
    for cells in rows.values():
        ar_eager, ar_graphs, hf_dynamic, hf_static = (float(c) if c.strip() != "—" else None for c in cells[:4])
        assert ar_eager > 0 and hf_dynamic > 0 and hf_static > 0  # eager and both HF runs measured
        assert ar_graphs is None  # the smoke test runs the eager engine only
        assert all(float(c) > 0 for c in cells[10].split("/"))  # c at both budgets
    # the header names the device and versions; every measurement has its repeats, steps and spread
    assert "torch " in run.stdout and "transformers " in run.stdout and "UTC" in run.stdout
    assert "| 48 | ours eager: verify |" in run.stdout and "| 80 | HF generate static |" in run.stdout
    assert "2 x 4" in run.stdout and "not judged (a CPU smoke test)" in run.stdout
    assert out.read_text(encoding="utf-8") == run.stdout


def test_smoke_profile_writes_the_report_and_its_json(smoke):
    """--profile (the same run): each step's aten ops, in the report's json."""
    run, out = smoke
    assert "| context | AR eager ms |" in run.stdout and out.read_text(encoding="utf-8") == run.stdout
    assert "Kernels a step (--profile" in run.stdout
    record = json.loads(out.with_suffix(".json").read_text())
    profiles = record["rows"][0]["profiles"]
    assert profiles and all(p["aten_ops"] > 0 for p in profiles.values())


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the benchmark would run")
def test_without_cuda_it_says_what_it_needs_in_one_line(tmp_path):
    run = run_script("gpu_decode.py", "--out", str(tmp_path / "report.md"), cwd=tmp_path, check=False)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == "needs a CUDA device; --smoke runs a CPU smoke test"
    assert run.stdout == ""


@pytest.fixture(scope="module")
def cut_short(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``python bench/gpu_decode.py --smoke`` at two contexts, without HF's rows, with a time limit the first
    context already passes: its output and report."""
    out = tmp_path_factory.mktemp("cut_short") / "report.md"
    run = bench(
        "--smoke", "--contexts", "32", "48", "--budgets", "16", "--no-hf", "--max-minutes", "0.01", "--out", str(out)
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run, out


def test_a_context_past_the_time_budget_is_skipped_and_named(cut_short):
    """The first context always runs; a later one that would take the run past --max-minutes is named, not run;
    the report's json copy lies beside it."""
    run, out = cut_short
    assert "| 32 (32) |" in run.stdout and "| 48 (48) |" not in run.stdout
    assert "Not measured, to stay within --max-minutes 0.01: ours at 48 (48)." in run.stdout
    assert [row["context"] for row in json.loads(out.with_suffix(".json").read_text())["rows"]] == [32]


def test_its_json_is_what_the_estimate_reads(cut_short, tmp_path):
    """The run's json names its device, date, bandwidth and source, and budgetdraft.pipeline.gpusteps reads it
    (a CPU smoke run has no bound: a GPU's is put in its place here). The run cut short above: its one row is a
    smoke run's at context 32 without HF's rows, as a run of that context alone."""
    from budgetdraft.pipeline import gpusteps

    _, out = cut_short
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["device"] == "CPU (smoke test)" and record["source"].startswith("bench/gpu_decode.py --smoke")
    record.update(bandwidth_gbs=4100.0)
    record["rows"][0]["bound_ms"] = 3.77
    measured = tmp_path / "gpu-2026-11-28.json"
    measured.write_text(json.dumps(record))
    steps = gpusteps.read(measured)
    assert steps.device == "CPU (smoke test)" and set(steps.verifier) == {"eager"} and set(steps.drafter) == {"eager"}
    ar_ms = record["rows"][0]["ours"]["eager"]["ar"]["ms"]
    assert steps.verifier["eager"].seconds(3.77e-3, 32) * 1e3 == pytest.approx(ar_ms)


def test_graphs_rows_run_compiled_per_capacity_and_once_for_every_capacity(tmp_path):
    """``--engines graphs --capacities static dynamic`` (a CPU smoke run: graphs is aot_eager there) gives both
    graphs rows at each context, in the table and the json, each judged against the targets. Compiled: per capacity,
    the AR step, the verify and the drafter's step at the first context and the verifier's two again at the second
    (5); once for every capacity, the three at the first context only (3). The engine's default is put back."""
    from budgetdraft.decoding import engine

    flags = ["--smoke", "--engines", "graphs", "--capacities", "static", "dynamic", "--contexts", "32", "48",
             "--budgets", "16", "--no-hf", "--steps", "2", "--repeats", "1"]  # fmt: skip
    out = tmp_path / "report.md"
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    run = run_script("gpu_decode.py", *flags, "--out", str(out), cwd=tmp_path)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs == 5 + 3
    assert engine.DYNAMIC_CAPACITY is False
    header = next(line for line in run.stdout.splitlines() if line.startswith("| context |"))
    assert "| AR graphs ms | AR graphs any-capacity ms |" in header and "| graphs any-capacity warm-up s |" in header
    record = json.loads(out.with_suffix(".json").read_text())
    assert [list(row["ours"]) for row in record["rows"]] == [["graphs", "graphs any-capacity"]] * 2
    assert list(record["targets"]) == ["sdpa", "sdpa any-capacity"]
