"""The estimate's GPU steps come from bench/gpu_decode.py's measurement (budgetdraft.pipeline.gpusteps), named with
its device and date: on the device it was measured on they give back the measured steps, elsewhere the bound scales
the device's part and the host's part stays; a file that is not a measurement is refused, naming it."""

import json
import math
from dataclasses import replace

import pytest
import yaml
from test_estimate import ROOT, paper_estimator

from budgetdraft.pipeline import estimate, gpusteps, roofline


def shipped() -> dict:
    (path,) = sorted(gpusteps.FOLDER.glob("*.json"))
    return json.loads(path.read_text())


def on_the_measured_device(engine: str) -> estimate.Estimator:
    """The paper config's estimator on a device of the measured copy bandwidth (the bench's bound)."""
    run = gpusteps.latest()
    device = replace(estimate.DEVICES["h100-80g"], name=run.device, bandwidth=run.bandwidth_gbs * 1e9)
    cfg = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    return estimate.Estimator(cfg, device, 0.5, engine=engine)


@pytest.mark.parametrize("engine", ["eager", "graphs"])
def test_on_the_measured_device_a_step_costs_what_was_measured(engine):
    est = on_the_measured_device(engine)
    measured = 0
    for row in shipped()["rows"]:
        steps = row["ours"].get(engine)
        if steps is None:
            continue
        context = row["context"]
        ar = est.verifier.step(1, context, context + 262)
        assert ar * 1e3 == pytest.approx(steps["ar"]["ms"], rel=0.01), (engine, context)
        verify = est.verifier.step(6, context, context + 262)
        assert verify / ar == pytest.approx(est.verifier.slowdown.verify)
        for name, sample in steps.items():
            if name.startswith("draft B="):
                budget = int(name.removeprefix("draft B="))
                assert est.drafter.step(1, budget, budget + 262) * 1e3 == pytest.approx(sample["ms"], rel=0.01)
                measured += 1
    assert measured >= 2


def test_a_device_of_less_bandwidth_scales_the_devices_part_and_keeps_the_hosts():
    """Graphs' step is all the device's: ÷ bandwidth. Eager's excess over graphs (launches) does not shrink."""
    fast = {e: on_the_measured_device(e) for e in ("eager", "graphs")}
    slow = {e: paper_estimator("a100-80g", engine=e, measured=True)[1] for e in ("eager", "graphs")}
    ratio = fast["graphs"].device.bandwidth / slow["graphs"].device.bandwidth
    step = {
        k: {e: est.verifier.step(1, 3800, 4062) for e, est in d.items()} for k, d in (("fast", fast), ("slow", slow))
    }
    assert step["slow"]["graphs"] / step["fast"]["graphs"] == pytest.approx(ratio, rel=1e-6)
    host = step["fast"]["eager"] - step["fast"]["graphs"]
    assert step["slow"]["eager"] - step["slow"]["graphs"] == pytest.approx(host, rel=1e-6)
    assert host > 0


def test_the_report_names_the_measurement_and_other_models_get_the_roofline():
    cfg, est = paper_estimator("a100-80g", engine="graphs", measured=True)
    text = estimate.report(cfg, {}, est, "a100-80g")
    run = gpusteps.latest()
    assert f"graphs steps as measured by bench/gpu_decode.py on {run.device} ({run.date};" in text
    cfg, roof = paper_estimator("a100-80g", engine="graphs", measured=True, verifier_dtype="bfloat16")
    assert roof.gpu_steps is None and roof.verifier.slowdown is None  # measured in float16 only
    assert "No GPU measurement of these models: guessed efficiencies." in estimate.report(cfg, {}, roof, "a100-80g")
    cfg, cpu = paper_estimator("cpu", measured=True)
    assert cpu.gpu_steps is None  # a CPU is never costed by a GPU's steps


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda run: run["rows"][0]["ours"]["eager"]["ar"].update(ms=-3.0), "not a positive number"),
        (lambda run: run["rows"][0]["ours"]["eager"]["ar"].update(ms=math.nan), "not a positive number"),
        (lambda run: run.pop("bandwidth_gbs"), "KeyError: 'bandwidth_gbs'"),
        (lambda run: run["rows"][0].update(bound_ms=0), "ZeroDivisionError"),
    ],
)
def test_a_file_that_is_not_a_measurement_is_refused_naming_it(tmp_path, damage, says):
    run = shipped()
    damage(run)
    path = tmp_path / "gpu-2026-01-01.json"
    path.write_text(json.dumps(run))
    with pytest.raises(ValueError, match=rf"{path}: not a measurement of bench/gpu_decode.py \(.*{says}"):
        gpusteps.read(path)


def test_steps_interpolate_between_contexts_and_hold_beyond():
    points = ((1000.0, 2.0), (3000.0, 4.0))
    assert [gpusteps.interpolate(points, x) for x in (10, 1000, 2000, 3000, 9000)] == [2.0, 2.0, 3.0, 4.0, 4.0]
    assert roofline.BYTES["float16"] == 2  # the shipped run's verifier dtype, which applying() matches
