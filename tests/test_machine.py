"""`estimate --gpu here`: the machine a run is on, measured by a probe (`budgetdraft.pipeline.machine`)."""

import json
import math

import pytest
import torch
import yaml

from budgetdraft.pipeline import machine
from budgetdraft.pipeline.roofline import Shape

TINY_VERIFIER = Shape(layers=8, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=1024, tied=True)
TINY_DRAFTER = Shape(layers=2, hidden=32, ffn=64, heads=4, kv_heads=2, vocab=1024, tied=True)


def synthetic_probe(bandwidth=20e9, overhead=2e-4, head_s=3e-3, flops=5e10) -> machine.Probe:
    """Timings a machine with these constants would give: a step = layers × overhead + bytes / bandwidth."""
    lv, ld, bv, bd = 16, 4, 4e8, 5e7
    tv, td = lv * overhead + bv / bandwidth, ld * overhead + bd / bandwidth
    per_layer = (tv - head_s) / lv
    return machine.Probe(
        verifier_step_s=tv, drafter_step_s=td, prefill_s=1e12 / flops + lv * overhead, load_s=2.0, load_bytes=8e8,
        verifier_layers=lv, drafter_layers=ld, verifier_bytes=bv, drafter_bytes=bd, prefill_flops=1e12,
        verifier_step2_s=head_s + 4 * per_layer, verify_rows_s=1.5 * tv, train_steps_s=(((128, 16, 1), 0.3),),
    )  # fmt: skip


def test_the_roofline_constants_are_solved_back_from_the_timings_they_would_give():
    solved = machine.solve([synthetic_probe(), synthetic_probe(bandwidth=10e9), synthetic_probe(bandwidth=30e9)])
    assert solved["bandwidth"] == pytest.approx(20e9)  # the median probe's
    assert solved["layer_overhead_s"] == pytest.approx(2e-4)
    assert solved["flops"] == pytest.approx(5e10)
    assert solved["disk"] == pytest.approx(4e8)
    assert solved["verify_factor"] == pytest.approx(1.5)
    step = solved["verifier_step"]
    assert step["fixed_s"] + 16 * step["per_layer_s"] == pytest.approx(synthetic_probe().verifier_step_s)
    assert step["fixed_s"] == pytest.approx(3e-3)
    assert json.loads(next(iter(solved["train_step_s"]))) == [128, 16, 1]


def test_a_probe_runs_our_decode_loop_and_gives_positive_timings():
    """The probe itself on tiny random models: every timing measured, none zero or NaN."""
    probe = machine.probe_once(TINY_VERIFIER, TINY_DRAFTER, "float32", "float32", "cpu", 1, 32)
    for name, value in vars(probe).items():
        if isinstance(value, float):
            assert math.isfinite(value) and value > 0, name
    assert probe.verifier_layers == 8 and probe.load_bytes > 0
    solved = machine.solve([probe])
    assert solved["bandwidth"] > 0 and solved["flops"] > 0


def test_the_machine_is_probed_once_then_read_from_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BUDGETDRAFT_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(machine, "probe_once", lambda *a: calls.append(a) or synthetic_probe())
    monkeypatch.setattr(machine, "job_seconds", lambda: 0.5)
    cfg = yaml.safe_load(open("config/ci.yaml"))
    first = machine.measure(cfg, 1, say=lambda line: None)
    assert len(calls) == 1 and first["job_s"] == 0.5
    assert machine.measure(cfg, 1, say=lambda line: None) == first and len(calls) == 1
    machine.measure(cfg, 1, remeasure=True, say=lambda line: None)
    assert len(calls) == 2
    machine.measure({**cfg, "threads": 2}, 1, say=lambda line: None)  # another key: measured anew
    assert len(calls) == 3
    device = machine.here(cfg, 1, say=lambda line: None)
    assert (
        device.bandwidth == pytest.approx(20e9) and device.job_s == 0.5 and "measured on this machine" in device.basis
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_cuda_config_on_a_machine_without_one_is_refused_saying_what_to_do():
    with pytest.raises(ValueError, match=r"device: cuda in the config.*--gpu a100-80g"):
        machine.measure(yaml.safe_load(open("config/paper.yaml")), 1)


def test_the_prediction_runs_as_many_jobs_as_the_cores_it_is_given(monkeypatch):
    from budgetdraft.pipeline import estimate

    monkeypatch.setattr(machine, "cores", lambda: 2)
    assert estimate.default_parallel({"threads": 1}) == 2  # profiles/default: 2 cores
    assert estimate.default_parallel({"threads": 1}, 1) == 1  # snakemake --cores 1
    assert estimate.default_parallel({"threads": 2}, 8) == 1  # at most the cores visible, each job 2 threads


def test_a_probe_builds_only_the_verifier_layers_that_fit_beside_its_twins():
    """A 7B verifier in fp16 on a 24 GB machine: two probes of 16 layers each, held twice while a load is timed, were
    killed after minutes; the probe takes the layers that fit in half the memory, and refuses a shape of which not
    two layers fit, naming what to do instead."""
    from budgetdraft.pipeline.roofline import shape

    llama7b = shape("NousResearch/Yarn-Llama-2-7b-128k")
    assert machine.probe_layers(TINY_VERIFIER, "float32", 2, 24 * 2**30) == 8  # all of a small one
    assert machine.probe_layers(llama7b, "float16", 1, 80 * 2**30) == machine.PROBE_LAYERS
    layers = machine.probe_layers(llama7b, "float16", 2, 20 * 2**30)
    layer_bytes = 2 * (llama7b.body / llama7b.layers)
    assert 2 <= layers < machine.PROBE_LAYERS
    assert 2 * 2 * (layers * layer_bytes + 2 * 2 * llama7b.vocab * llama7b.hidden) <= 20 * 2**30 / 2 + 1
    with pytest.raises(ValueError, match=r"does not fit in this machine's 2\.0 GiB available with 2 at once"):
        machine.probe_layers(llama7b, "float16", 2, 2 * 2**30)
