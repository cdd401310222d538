"""Inputs that were taken on trust (issue 54, items 5-7): the machine probe's cache, files and flags of `pin`,
`positions`, `train` and `train-eagle3`, and config values the plan accepted without a word. Each is refused before
any work in one line naming the file, flag or config key and its value; a cached probe that cannot be used is
probed again, saying so."""

import json
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_configcheck import eagle3, triforce

from budgetdraft.pipeline import cli, machine, probe
from budgetdraft.pipeline.configcheck import check_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def ci_config() -> dict:
    return yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())


# ------------------------------------------------------------------------------------------- the machine probe's cache


def fake_probe() -> probe.Probe:
    """Timings of a machine that reads 20 GB/s (as tests/test_machine.py's synthetic probe)."""
    return probe.Probe(
        verifier_step_s=0.0212, drafter_step_s=0.0033, prefill_s=20.0012, load_s=2.0, load_bytes=8e8,
        verifier_layers=6, drafter_layers=4, verifier_bytes=4e8, drafter_bytes=5e7, prefill_flops=1e12,
        verifier_step2_s=0.0092, shallow_layers=2, verify_rows_s=0.0318, train_steps_s=(((128, 16, 1), 0.3),),
    )  # fmt: skip


def fake_timed(calls: list, pause: float = 0.0):
    """`machine.timed`'s stand-in: records each probe's arguments and answers `fake_probe`'s timings and a job of
    0.5 s, after ``pause`` seconds, instead of starting the probe's processes."""

    def timed(args, parallel, quiet=None):
        calls.append(args)
        time.sleep(pause)
        return [fake_probe()] * parallel, 0.5

    return timed


@pytest.fixture
def probed(monkeypatch, tmp_path):
    """A cache under tmp_path and a probe that records its calls instead of timing anything."""
    monkeypatch.setenv("BUDGETDRAFT_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(machine, "timed", fake_timed(calls))
    return calls


def edited(field, value):
    def edit(measure):
        *parents, name = field.split(".")
        inner = measure
        for part in parents:
            inner = inner[part]
        inner[name] = value
        return json.dumps(measure, indent=1)

    return edit


def dropped(field):
    return lambda measure: json.dumps({k: v for k, v in measure.items() if k != field})


@pytest.mark.parametrize(
    "forge, why",
    [
        (edited("bandwidth", -3), "bandwidth -3 is not a positive number"),
        (edited("bandwidth", 0), "bandwidth 0 is not a positive number"),
        (edited("bandwidth", float("nan")), "bandwidth nan is not a positive number"),
        (edited("timings.verifier_step_s", 1e300), "timings.verifier_step_s 1e+300 is more than 3600"),
        (edited("layer_overhead_s", -1e-3), "layer_overhead_s -0.001 is not a finite number >= 0"),
        (edited("flops", "fast"), "flops 'fast' is not a number"),
        (edited("job_s", True), "job_s True is not a number"),
        (edited("train_step_s", {"[128, 16, 1]": -0.3}), "train_step_s[[128, 16, 1]] -0.3 is not a positive number"),
        (dropped("bandwidth"), "bandwidth is missing"),
        (lambda m: "{ not json", "is not JSON (Expecting property name"),
        (lambda m: "[]", "holds list, not a measure"),
        (edited("key.cpu", "Another CPU"), "it was measured with cpu 'Another CPU', and this machine and config have"),
        (edited("key.cores", 512), "it was measured with cores 512, and this machine and config have"),
    ],
    ids=[
        "negative", "zero", "nan", "1e300", "negative-overhead", "text", "bool", "train-step", "missing", "not-json",
        "list", "another-cpu", "other-cores",
    ],
)  # fmt: skip
def test_a_cached_probe_that_no_probe_wrote_is_probed_again_saying_why(probed, tmp_path, forge, why):
    """A forged `$BUDGETDRAFT_CACHE/machine/*.json` made `snakemake all` predict "about -1.40 h"; NaN printed "nan
    h", 1e300 a 300-digit number of hours, and a missing key or broken JSON a traceback naming no file."""
    cfg = ci_config()
    said = []
    good = machine.measure(cfg, 1, say=said.append)
    (cached,) = (tmp_path / "machine").glob("*.json")
    cached.write_text(forge(json.loads(cached.read_text())))
    said.clear()
    again = machine.measure(cfg, 1, say=said.append)
    assert len(probed) == 2, "the forged file was believed"
    assert said[0].startswith(f"{cached}: {why}") and said[0].endswith("; probing again"), said[0]
    assert again["bandwidth"] == pytest.approx(good["bandwidth"])
    assert json.loads(cached.read_text())["bandwidth"] == pytest.approx(good["bandwidth"])  # written anew, whole
    device = machine.here(cfg, 1, say=said.append)
    assert device.bandwidth > 0 and len(probed) == 2  # the new file is believed


def test_two_probes_started_at_once_measure_once(probed, monkeypatch):
    """Two runs that start together wait for one probe (a lock), instead of probing side by side and racing to
    write the file."""
    monkeypatch.setattr(machine, "timed", fake_timed(probed, pause=0.5))
    cfg = ci_config()
    results = []
    runs = [threading.Thread(target=lambda: results.append(machine.measure(cfg, 1, say=lambda line: None)))]
    runs.append(threading.Thread(target=runs[0]._target))
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert len(probed) == 1 and results[0] == results[1]


# ------------------------------------------------------------------------------------------------- the commands


def command_error(argv) -> str:
    """The one line a command ends with (`budgetdraft NAME: error: ...`)."""
    with pytest.raises(SystemExit) as err:
        cli.run(argv)
    return str(err.value.code)


@pytest.mark.parametrize("text, held", [("", "nothing"), ("- a\n- b\n", "a list"), ("just text\n", "a str")])
def test_pin_of_a_file_that_is_no_config_names_the_file(tmp_path, text, held):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert command_error(["pin", "--configfile", str(path)]) == (
        f"budgetdraft pin: error: {path}: holds {held}, not a pipeline config (a mapping of its settings)"
    )


@pytest.mark.parametrize(
    "command, hparams, line",
    [
        ("train-eagle3", {"lr": 1e308}, "train-eagle3 hparams key 'lr' must be a learning rate in (0, 1], got 1e+308"),
        ("train-eagle3", {"lr": 0}, "train-eagle3 hparams key 'lr' must be a learning rate in (0, 1], got 0"),
        ("train-eagle3", {"ttt_window": 1e8}, "train-eagle3 hparam ttt_window must be at most 1048576"),
        ("train-eagle3", {"ttt_window": 2.5}, "train-eagle3 hparams key 'ttt_window' must be a whole number, got 2.5"),
        ("train-eagle3", {"threads": -3}, "train-eagle3 hparams key 'threads' must be in [0, 1024]"),
        ("train", {"threads": -3}, "hparams key 'threads' must be in [0, 1024] (torch threads; 0: torch's default)"),
        ("train", {"lr": 1e308}, "hparams key 'lr' must be a learning rate in (0, 1], got 1e+308"),
        ("train", {"steps": 2.5}, "hparams key 'steps' must be a whole number, got 2.5"),
    ],
)
def test_training_hparams_out_of_range_are_refused_before_any_work(tmp_path, command, hparams, line):
    """`train-eagle3 --hparams '{"lr": 1e308}'` ended in a RuntimeError; threads -3 reached torch."""
    model = "--verifier" if command == "train-eagle3" else "--init"
    argv = [command, model, "embedded:nope", "--targets", "none.safetensors", "--out", str(tmp_path / "out")]
    message = command_error([*argv, "--hparams", json.dumps(hparams)])
    assert message.startswith(f"budgetdraft {command}: error: ") and line in message, message


def test_training_hparams_in_range_stay_accepted():
    from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams

    assert Eagle3Hparams.from_json({"ttt_window": 64.0, "lr": 1.0, "threads": 0}).ttt_window == 64
    assert TrainingHparams.from_json({"steps": 10.0, "lr": 1e-4, "threads": 1024}).steps == 10


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.parquet"
    pd.DataFrame({"input_ids": [list(range(3, 67)), list(range(3, 35))]}).to_parquet(path)
    return path


def test_positions_refuses_a_dataset_named_twice(tmp_path, prompts):
    """`dict(zip(--datasets, --prompts))` kept the last file of a dataset named twice, without a word."""
    other = tmp_path / "other.parquet"
    argv = ["positions", "--verifier", "v", "--prompts", str(prompts), str(other), "--datasets", "gs", "gs"]
    assert command_error([*argv, "--out", str(tmp_path / "t.parquet")]) == (
        f"budgetdraft positions: error: --datasets names 'gs' twice ({prompts} and {other}): each --prompts file is "
        "one dataset's; name each dataset once"
    )


@pytest.mark.parametrize("bucket", [10**12, 64])
def test_positions_refuses_a_bucket_as_long_as_the_longest_prompt(tmp_path, prompts, bucket):
    argv = ["positions", "--targets", "t.parquet", "--drafter", f"sd={tmp_path}", "--prompts", str(prompts)]
    argv += ["--datasets", "gs", "--bucket", str(bucket), "--out", str(tmp_path / "p.parquet")]
    assert command_error(argv) == (
        f"budgetdraft positions: error: --bucket {bucket} is not shorter than the longest prompt of --prompts (64 "
        "tokens): every position would fall in the first bucket; give fewer than 64"
    )


# --------------------------------------------------------------------------------------- config values taken silently


def refusal(edit) -> str:
    """The message of check_config (the Snakefile's one entry point, schema included) on config/ci.yaml edited."""
    cfg = ci_config()
    edit(cfg)
    with pytest.raises(ValueError) as err:
        check_config(cfg, schema=SCHEMA)
    return str(err.value)


@pytest.mark.parametrize(
    "edit, line",
    [
        (
            lambda c: c.update(policy="topk_chunks", controls=["pi", "sd@topk_chunks"]),
            "controls[1] = 'sd@topk_chunks': 'topk_chunks' is the config's own policy, under which sd's cells run "
            "already; a control of it would measure them again",
        ),
        (
            lambda c: c.update(controls=["lambda0.5@topk_chunks"]),
            "controls[0] = 'lambda0.5@topk_chunks': 'topk_chunks' is the config's own policy",
        ),
        (
            lambda c: c.update(revisions={"nobody/unused": "0" * 40}),
            "revisions: 'nobody/unused' is no hub repository this config reads (it reads none), so its revision pins "
            "nothing; remove it, or correct the name",
        ),
        (
            lambda c: c.update(revisions={"../../etc": "0" * 40}),
            "revisions: '../../etc' is no hub repository this config reads",
        ),
        (
            lambda c: c["long_generation"].update(max_new_tokens=6),
            "long_generation.max_new_tokens = 6 is no more than max_new_tokens = 6: the long generations would be no "
            "longer than the grid's own",
        ),
        (
            lambda c: c.update(drafter="embedded:smollm2:layers=4:positions=0064"),
            "drafter = 'embedded:smollm2:layers=4:positions=0064': positions=0064 has a leading zero, and names "
            "another converted model than positions=64; write positions=64",
        ),
        (
            lambda c: c.update(drafter="embedded:smollm2:layers=04:positions=64"),
            "drafter = 'embedded:smollm2:layers=04:positions=64': layers=04 has a leading zero",
        ),
        (
            triforce(retrieval_budget=8e15),
            "baselines.triforce.retrieval_budget = 8000000000000000 is more than contexts.128 = 128 prompt tokens "
            "(comparison.contexts): its verifier's retrieval cache would keep the whole prompt",
        ),
        (
            eagle3(ttt_window=1e8),
            "baselines.eagle3.training: train-eagle3 hparam ttt_window must be at most 1048576 (positions of a "
            "training sequence), got 100000000",
        ),
        (
            eagle3(ttt_window=1000),
            "baselines.eagle3.training.ttt_window = 1000 is more than the 255 positions of a training sequence "
            "(training_data.prefix_len + cont_len - 1)",
        ),
        (
            eagle3(step0_positions=256),
            "baselines.eagle3.training.step0_positions = 256 is more than the 255 positions of a training sequence",
        ),
        (eagle3(lr=1e308), "baselines.eagle3.training.lr = 1e+308: must be <= 1 (a learning rate, in (0, 1]"),
        (lambda c: c["training"].update(lr=1e308), "training.lr = 1e+308: must be <= 1 (a learning rate"),
        (lambda c: c["variants"]["la_only"].update(lr=2.0), "variants.la_only.lr = 2.0: must be <= 1"),
    ],
    ids=[
        "control-of-own-policy",
        "variant-control-of-own-policy",
        "revision-of-an-unread-repository",
        "revision-of-a-path",
        "long-generation-no-longer",
        "spec-leading-zero",
        "spec-layers-leading-zero",
        "triforce-retrieval-budget",
        "eagle3-ttt-window-huge",
        "eagle3-ttt-window-past-sequence",
        "eagle3-step0-positions",
        "eagle3-lr",
        "training-lr",
        "variant-lr",
    ],
)
def test_a_value_the_plan_took_silently_is_refused_naming_the_key(edit, line):
    message = refusal(edit)
    assert line in message, message


def test_a_revision_of_a_repository_the_config_reads_stays_accepted():
    cfg = ci_config()
    cfg["verifier"] = cfg["drafter"] = "JackFram/llama-68m"  # a hub id: read at its pinned revision
    cfg["revisions"] = {"JackFram/llama-68m": "0" * 40}
    from budgetdraft.pipeline.configrefs import check_revisions

    check_revisions(cfg)
