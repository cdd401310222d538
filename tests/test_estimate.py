"""`budgetdraft estimate`: the cost of a configuration before it runs (roofline model over the workflow's own jobs)."""

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from test_plan import CI_PER_REPLICATE

from budgetdraft.pipeline import estimate, roofline

ROOT = Path(__file__).resolve().parents[1]


def paper_estimator(device="a100-80g", alpha=0.5, engine="eager", cache="preallocated", measured=False, **changes):
    """The paper config's estimator; the roofline's steps unless ``measured`` (then bench/gpu_decode.py's, where
    it measured these models: tests/test_gpusteps.py)."""
    cfg = {**yaml.safe_load((ROOT / "config/paper.yaml").read_text()), **changes}
    est = estimate.Estimator(cfg, estimate.DEVICES[device], alpha, engine=engine, cache=cache, gpu_measured=measured)
    return cfg, est


def test_the_per_layer_cost_reproduces_the_papers_own_ar_throughput_on_dynamic_cache_traffic():
    """The paper's AR (Table 1): 38.10 / 30.40 / 19.41 tok/s at 4K / 8K / 16K, 256 new tokens, prefill included,
    decoded by HF on a DynamicCache: the A100's 0.44 ms per layer is fitted on that traffic (3x the KV a step)."""
    _, est = paper_estimator(cache="dynamic")
    paper = {3800: 38.10, 8192: 30.40, 16384: 19.41}
    for context, tok_s in paper.items():
        seconds, _ = est.generation("ar", context, 0, 0, 256, shared=False)
        assert 0.75 < (256 / seconds) / tok_s < 1.25, (context, 256 / seconds)


def test_the_h100_model_matches_hf_generates_dynamic_cache_step_measured_on_an_h100():
    """Issue 28 measured HF generate (greedy, dynamic cache) on a random 7B fp16 on an H100: 24 / 28 / 36 ms a step
    at 4K / 8K / 16K. The same DynamicCache traffic and per-layer cost give it within 25 %."""
    _, est = paper_estimator("h100-80g", cache="dynamic")
    for context, ms in {3800: 24, 8192: 28, 16384: 36}.items():
        assert 0.75 < est.verifier.step(1, context, context + 256) * 1e3 / ms < 1.25, context


def test_our_step_reads_the_whole_rounded_capacity_once():
    """Our engine's decode step attends over every slot of the pre-allocated cache (rounded up as the engine
    rounds it) whatever is filled, reads it once (no DynamicCache copies) and, under eager, pays the per-layer cost."""
    from budgetdraft.decoding.engine import rounded_capacity

    assert [rounded_capacity(t) for t in (1, 15, 16, 17)] == [16, 16, 16, 32]
    _, est = paper_estimator("h100-80g")
    v, dev = est.verifier, est.device
    step = v.step(1, 4000, 3800 + 262)
    assert step == v.step(1, 3900, 3800 + 262)  # a fixed shape: the same cost at every position
    read = v.shape.read * 2 + v.shape.kv_bytes(rounded_capacity(3800 + 262), 2)
    assert step == pytest.approx(read / dev.bandwidth + v.shape.layers * dev.layer_overhead_s)
    _, dynamic = paper_estimator("h100-80g", cache="dynamic")
    assert step < dynamic.verifier.step(1, 16384, 16384 + 262) < dynamic.verifier.step(1, 16384, 16384 + 262) * 3


def test_graphs_drops_the_per_layer_overhead_of_decode_steps_only():
    _, eager = paper_estimator("h100-80g")
    _, graphs = paper_estimator("h100-80g", engine="graphs")
    layers = eager.verifier.shape.layers * eager.device.layer_overhead_s
    assert eager.verifier.step(6, 4000, 4062) - graphs.verifier.step(6, 4000, 4062) == pytest.approx(layers)
    assert graphs.verifier.prefill(3800) == eager.verifier.prefill(3800)  # a prefill runs eagerly on both
    cell = ("lambda0.5", "lwm", "8K", 256, 5, 0)
    assert graphs.cell(graphs.spec(*cell)).seconds < eager.cell(eager.spec(*cell)).seconds
    ar = ("ar", "lwm", "8K", 0, 0)
    assert graphs.cell(graphs.spec(*ar)).seconds < eager.cell(eager.spec(*ar)).seconds
    assert graphs.spec(*ar).engine == "graphs" and eager.spec(*ar).engine == "eager"  # the estimate's --engine


def test_the_engine_is_printed_and_graphs_off_a_gpu_is_refused():
    cfg, est = paper_estimator("h100-80g", engine="graphs")
    text = estimate.report(cfg, {}, est, "h100-80g")
    assert text.splitlines()[0].startswith("Estimate for h100-80g (NVIDIA H100 80GB SXM), engine graphs;")
    assert "- engine graphs: a decode step is one fixed shape over the whole pre-allocated cache" in text
    cfg, cpu = paper_estimator("cpu")
    assert ", engine eager;" in estimate.report(cfg, {}, cpu, "cpu")
    with pytest.raises(ValueError, match="--engine graphs: CUDA graphs need a GPU"):
        paper_estimator("cpu", engine="graphs")


def test_acceptance_and_a_faster_device_shorten_speculative_cells():
    _, a100 = paper_estimator()
    _, h100 = paper_estimator("h100-80g")
    _, sure = paper_estimator(alpha=0.9)
    cell = a100.spec("lambda0.5", "lwm", "8K", 256, 5, 0)
    assert h100.cell(cell).seconds < a100.cell(cell).seconds
    assert sure.cell(cell).seconds < a100.cell(cell).seconds
    assert roofline.tokens_per_round(0.0, 5) == 1 and roofline.tokens_per_round(1.0, 5) == 6


def test_a_context_that_does_not_fit_is_refused_naming_it():
    cfg, est = paper_estimator(contexts={"4K": 3800, "128K": 131072})
    with pytest.raises(ValueError, match=r"contexts\.128K = 131072: verifier weights 12\.6 GB \+ verifier KV cache"):
        estimate.check_fits(cfg, est, "a100-80g")
    estimate.check_fits(*paper_estimator()[:2], "a100-80g")  # the paper's 16K fits: 22 GB


@pytest.mark.pipeline
def test_the_command_costs_every_planned_job(tmp_path):
    """On config/ci.yaml: one row per stage, and as many cell jobs as the workflow plans."""
    for name in ("workflow", "config", "profiles", "envs", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    proc = subprocess.run(
        [sys.executable, "-m", "budgetdraft", "estimate", "--configfile", "config/ci.yaml", "--gpu", "cpu"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path / "src"), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    cells = sum(int(line.split("|")[2].replace(",", "")) for name, line in rows.items() if name.startswith("cells"))
    # shared cells (AR, EAGLE-3, the copier, the long generations': r0's of a trained drafter) and two replicates of
    # the rest (test_plan.py)
    assert cells == 6 + 4 + 4 + 2 + CI_PER_REPLICATE * 2
    assert {"base drafters", "variants", "targets", "EAGLE-3 head", "**total**"} <= set(rows)
    assert "Wall time:" in proc.stdout and "Assumptions:" in proc.stdout
    assert ", engine eager;" in proc.stdout  # config/ci.yaml names no engine: eager


def test_gpu_cells_load_the_verifier_once_per_resident_process():
    _, grid = paper_estimator()
    cfg, _ = paper_estimator()
    groups = estimate.Estimator(cfg, estimate.DEVICES["a100-80g"], 0.5, cells_per_process=16)
    _, cold = paper_estimator(warm_start=False)
    _, cpu = paper_estimator("cpu")
    assert grid.verifier_loads(693).loads == 1  # one local GPU: one resident process for the whole grid
    assert groups.verifier_loads(693).loads == 44  # SLURM job groups of 16 cells
    assert cold.verifier_loads(693).loads == 693  # warm_start: false: every cell its own process
    assert cpu.verifier_loads(693).loads == 0  # the forking warm process loaded it before the cells
    assert groups.verifier_loads(693).seconds == 44 * groups.verifier.load_s


def test_cpu_cells_forked_from_the_warm_process_share_the_warm_up_and_the_drafters_prefill():
    """On the CPU (one thread, forking warm process) a cell runs no warm-up of its own and only the first cell of a
    drafter and its prompts pays their full prefill; with warm_start false every cell pays both."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    forked = estimate.Estimator(cfg, estimate.DEVICES["cpu"], 0.07)
    cold = estimate.Estimator({**cfg, "warm_start": False}, estimate.DEVICES["cpu"], 0.07)
    sd = forked.spec("sd", "gs", "1K", 16, 5, 0)
    first, later = forked.cell(sd, first=True), forked.cell(sd, first=False)
    prefills = cfg["samples"] * forked.drafter.prefill(1024)
    assert first.seconds - later.seconds == pytest.approx(prefills)
    assert first.generations == later.generations == cfg["samples"]  # no warm-up
    alone = cold.cell(sd, first=False)
    assert alone.generations == cfg["samples"] + cfg["warmup"] and alone.seconds > first.seconds
    triforce = forked.spec("triforce", "lwm", "1K", 128, 5, 0)
    assert forked.cell(triforce).generations == cfg["samples"] + cfg["warmup"]
    # the rule is the warm process's own (CellSpec.shares_warm_up): on two threads nothing is shared
    two = forked.cell(replace(sd, threads=2), first=True)
    assert two.generations == cfg["samples"] + cfg["warmup"] and two.seconds > first.seconds
