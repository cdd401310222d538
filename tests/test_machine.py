"""`estimate --gpu here`: the machine a run is on, measured by a probe (`budgetdraft.pipeline.machine`)."""

import json
import math
import os
import re
import threading
import time
from dataclasses import replace

import pytest
import torch
import yaml

from budgetdraft.pipeline import estimate, machine, probe
from budgetdraft.pipeline.roofline import Shape

TINY_VERIFIER = Shape(layers=8, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=1024, tied=True)
TINY_DRAFTER = Shape(layers=2, hidden=32, ffn=64, heads=4, kv_heads=2, vocab=1024, tied=True)


def synthetic_probe(bandwidth=20e9, overhead=2e-4, head_s=3e-3, flops=5e10) -> probe.Probe:
    """Timings a machine with these constants would give: a step = layers × overhead + bytes / bandwidth."""
    lv, ld, bv, bd = 6, 4, 4e8, 5e7
    tv, td = lv * overhead + bv / bandwidth, ld * overhead + bd / bandwidth
    per_layer = (tv - head_s) / lv
    return probe.Probe(
        verifier_step_s=tv, drafter_step_s=td, prefill_s=1e12 / flops + lv * overhead, load_s=2.0, load_bytes=8e8,
        verifier_layers=lv, drafter_layers=ld, verifier_bytes=bv, drafter_bytes=bd, prefill_flops=1e12,
        verifier_step2_s=head_s + 2 * per_layer, shallow_layers=2, verify_rows_s=1.5 * tv,
        train_steps_s=(((128, 16, 1), 0.3),),
    )  # fmt: skip


def test_the_roofline_constants_are_solved_back_from_the_timings_they_would_give():
    solved = probe.solve([synthetic_probe(), synthetic_probe(bandwidth=10e9), synthetic_probe(bandwidth=30e9)])
    assert solved["bandwidth"] == pytest.approx(20e9)  # the median probe's
    assert solved["layer_overhead_s"] == pytest.approx(2e-4)
    assert solved["flops"] == pytest.approx(5e10)
    assert solved["disk"] == pytest.approx(4e8)
    assert solved["verify_factor"] == pytest.approx(1.5)
    step = solved["verifier_step"]
    assert step["fixed_s"] + 6 * step["per_layer_s"] == pytest.approx(synthetic_probe().verifier_step_s)
    assert step["fixed_s"] == pytest.approx(3e-3)
    assert json.loads(next(iter(solved["train_step_s"]))) == [128, 16, 1]


def test_the_training_recipes_are_shared_out_among_the_probes_each_timed_once():
    """Each probe timed every training step (5 of its 12 s on a 2-core CPU); now each step is timed by one probe,
    beside the others' work, the longest first, and the solve takes each from the probe that timed it."""
    short, long_a, long_c = ("{}", 8, 120), ("{}", 896, 128), ('{"lambda_c": 0.5}', 896, 128)
    assert machine.recipe_shares((short, long_a, long_c), 2) == [(long_a, short), (long_c,)]
    assert machine.recipe_shares((short, long_a, long_c), 1) == [(long_a, long_c, short)]
    assert machine.recipe_shares((), 2) == [(), ()]
    one = replace(synthetic_probe(), train_steps_s=(((896, 128, 1), 2.0), ((8, 120, 1), 1.0)))
    other = replace(synthetic_probe(), train_steps_s=(((896, 128, 2), 2.5),))
    solved = probe.solve([one, other])["train_step_s"]
    assert solved == {"[896, 128, 1]": 2.0, "[8, 120, 1]": 1.0, "[896, 128, 2]": 2.5}


def test_a_probe_runs_our_decode_loop_and_gives_positive_timings():
    """The probe itself on tiny random models: every timing measured, none zero or NaN."""
    measured = probe.probe_once(TINY_VERIFIER, TINY_DRAFTER, "float32", "float32", "cpu", 1, 32)
    for name, value in vars(measured).items():
        if isinstance(value, float):
            assert math.isfinite(value) and value > 0, name
    assert (measured.verifier_layers, measured.shallow_layers) == (probe.PROBE_LAYERS, 2) and measured.load_bytes > 0
    solved = probe.solve([measured])
    assert solved["bandwidth"] > 0 and solved["flops"] > 0


def stand_in(calls: list, pause: float = 0.0):
    """`machine.timed`'s stand-in: records each probe's arguments and answers `synthetic_probe`'s timings and a job
    of 0.5 s, after ``pause`` seconds; no process is started."""

    def timed(args, parallel, quiet=None):
        calls.append(args)
        time.sleep(pause)
        return [synthetic_probe()] * parallel, 0.5

    return timed


def test_the_machine_is_probed_once_then_read_from_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BUDGETDRAFT_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(machine, "timed", stand_in(calls))
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


def test_a_run_predicts_from_a_probe_of_the_last_hour_only(monkeypatch, tmp_path):
    """The prediction before a run (`max_age_s`: estimate.PREDICTION_MAX_AGE_S) probes again when the cached probe is
    older than that, was taken at a time to come, or records no time (a file of an earlier version), saying which;
    `estimate` itself (no limit) reads it at any age."""
    monkeypatch.setenv("BUDGETDRAFT_CACHE", str(tmp_path))
    calls, said = [], []
    monkeypatch.setattr(machine, "timed", stand_in(calls))
    cfg = yaml.safe_load(open("config/ci.yaml"))
    hour = estimate.PREDICTION_MAX_AGE_S
    first = machine.measure(cfg, 1, say=said.append, max_age_s=hour)
    assert len(calls) == 1 and time.time() - first["measured_s"] < 60
    assert machine.measure(cfg, 1, say=said.append, max_age_s=hour) == first and len(calls) == 1
    cached = machine.measure_file(machine.key_of(cfg, "cpu", 1))
    for measured_s, why in [(time.time() - hour - 60, r"measured 1\.0 h ago, not within the last 1 h"),
                            (time.time() + 3600, r"measured 1\.0 h from now"),
                            (None, r"records no time it was measured at \(measured_s\)")]:  # fmt: skip
        old = {**first, "measured_s": measured_s}
        cached.write_text(json.dumps({k: v for k, v in old.items() if v is not None}))
        assert machine.measure(cfg, 1, say=lambda line: None) == json.loads(cached.read_text())  # estimate: any age
        calls.clear()
        machine.measure(cfg, 1, say=said.append, max_age_s=hour)
        why_said = said[-2]  # the line before the last ("measuring this machine ...")
        assert len(calls) == 1 and re.search(why, why_said) and why_said.startswith(str(cached)), said


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_cuda_config_on_a_machine_without_one_is_refused_saying_what_to_do():
    with pytest.raises(ValueError, match=r"device: cuda in the config.*--gpu a100-80g"):
        machine.measure(yaml.safe_load(open("config/paper.yaml")), 1)


def test_the_prediction_runs_as_many_jobs_as_the_cores_it_is_given(monkeypatch):
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
    assert machine.probe_layers(replace(TINY_VERIFIER, layers=4), "float32", 2, 24 * 2**30) == 4  # all of it
    assert machine.probe_layers(llama7b, "float16", 1, 80 * 2**30) == probe.PROBE_LAYERS
    layers = machine.probe_layers(llama7b, "float16", 2, 20 * 2**30)
    layer_bytes = 2 * (llama7b.body / llama7b.layers)
    assert 2 <= layers < probe.PROBE_LAYERS
    assert 2 * 2 * (layers * layer_bytes + 2 * 2 * llama7b.vocab * llama7b.hidden) <= 20 * 2**30 / 2 + 1
    with pytest.raises(ValueError, match=r"does not fit in this machine's 2\.0 GiB available with 2 at once"):
        machine.probe_layers(llama7b, "float16", 2, 2 * 2**30)


# ------------------------------------------------------------------------------ the probe's processes and their waits

TINY_ARGS = dict(
    verifier_shape=vars(TINY_VERIFIER), drafter_shape=vars(TINY_DRAFTER), verifier_dtype="float32",
    drafter_dtype="float32", device="cpu", threads=1, context=32, recipes=(), layers=probe.PROBE_LAYERS,
)  # fmt: skip


def test_the_probe_runs_in_fresh_processes_never_forking_this_one(monkeypatch):
    """The probe runs where Snakemake's own multi-threaded process asks for it (`snakemake all`'s prediction): a
    warm process forked from it never came up, and the Snakemake beside it waited for ever on the probe cache's
    lock. The probes and the warm process are fresh processes (no os.fork here: a fork would raise), which import
    while the caller's dry run runs (``quiet``), then time: a real probe and real cells through the warm process."""

    def no_fork():
        raise AssertionError("os.fork: the probe forked the process that asked for it")

    monkeypatch.setattr(os, "fork", no_fork)
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # this process has threads, as Snakemake's
    events = []
    (measured,), job_s = machine.timed(TINY_ARGS, 1, quiet=lambda: events.append("quiet"))
    assert events == ["quiet"]
    assert (measured.verifier_layers, measured.shallow_layers, measured.drafter_layers) == (probe.PROBE_LAYERS, 2, 2)
    assert measured.verifier_step_s > 0 and measured.load_bytes > 0
    assert machine.SNAKEMAKE_JOB_S < job_s < machine.CELL_S


def sleeper(code: str = "") -> str:
    """A process's Python that runs ``code``, then sleeps a minute: one that never answers."""
    return f"import socket, sys, time\n{code}\ntime.sleep(60)"


READY = f"print('{machine.SAID}ready', flush=True)"  # a probe process that has imported
SERVING = ("-c", sleeper("socket.socket(socket.AF_UNIX).bind(sys.argv[1])"))  # a warm process that serves


@pytest.mark.parametrize(
    "probe_main, warm, limit, says",
    [
        (sleeper(), SERVING, "START_S",
         r"^the machine probe's process \(pid \d+\) was still importing torch and the probe's modules \(for 2 s\) "
         r"when its time was up; nothing was measured$"),
        ("raise SystemExit('no torch here')", SERVING, "START_S",
         r"^the machine probe's process exited \(1\) while importing torch and the probe's modules \(for 2 s\): "
         r"no torch here$"),
        (sleeper(READY), ("-c", sleeper()), "START_S",
         r"^the machine probe's warm process \(pid \d+\) did not serve on \S+ within 2 s; nothing was "
         r"measured$"),
        (sleeper(READY), ("-c", "raise SystemExit('port taken')"), "START_S",
         r"^the machine probe's warm process exited \(1\) before it served: port taken$"),
        (sleeper(READY + "; input()"), SERVING, "PROBE_S",
         r"^the machine probe's process \(pid \d+\) was still timing its probe \(for 2 s\) when its time was "
         r"up; nothing was measured$"),
    ],
    ids=["probe-silent", "probe-exits", "warm-silent", "warm-exits", "probe-never-answers"],
)  # fmt: skip
def test_every_wait_on_a_probe_process_ends_in_one_line(monkeypatch, probe_main, warm, limit, says):
    """A process of the probe that never comes up, exits or never answers stops the probe at its limit, naming it in
    one line, and is ended: the probe had waited for a forked warm process for ever, holding the cache's lock."""
    started = []
    popen = machine.subprocess.Popen

    def recorded(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(machine.subprocess, "Popen", recorded)
    monkeypatch.setattr(machine, "PROBE_MAIN", probe_main)
    monkeypatch.setattr(machine, "WARM", warm)
    monkeypatch.setattr(machine, limit, 2)
    start = time.monotonic()
    with pytest.raises(ValueError, match=says) as err:
        machine.timed(TINY_ARGS, 1)
    assert "\n" not in str(err.value) and time.monotonic() - start < 20
    assert len(started) == 2 and all(process.poll() is not None for process in started)  # none left running


def test_a_run_waits_for_another_runs_probe_a_limited_time(monkeypatch, tmp_path):
    """A second run waits on the probe cache's lock while another run probes (test_leftovers: two runs, one probe),
    but no longer than LOCK_S: it had waited for ever on a probe that never ended."""
    from budgetdraft.base.atomic import file_lock

    monkeypatch.setenv("BUDGETDRAFT_CACHE", str(tmp_path))
    monkeypatch.setattr(machine, "timed", stand_in([]))
    monkeypatch.setattr(machine, "LOCK_S", 0.5)
    cfg = yaml.safe_load(open("config/ci.yaml"))
    cached = machine.measure_file(machine.key_of(cfg, "cpu", 1))
    ended = []

    def waiting() -> None:
        try:
            machine.measure(cfg, 1, say=lambda line: None)
        except ValueError as err:
            ended.append(str(err))

    with file_lock(cached):  # another run's probe, under way
        run = threading.Thread(target=waiting, daemon=True)
        run.start()
        run.join(timeout=20)
        assert not run.is_alive(), "the second run still waits on the lock"
    assert len(ended) == 1 and "\n" not in ended[0]
    assert re.match(rf"^{re.escape(str(cached))}\.lock: another run has held it for 0\.5 s, probing", ended[0])
    assert machine.measure(cfg, 1, say=lambda line: None)["job_s"] == 0.5  # the lock given back: probed
