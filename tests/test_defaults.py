"""Each default has one home (``budgetdraft.base.defaults``, ``budgetdraft.decoding.sampling.Sampling``) that the command-line
parsers and the library read; the config schema, which Snakemake reads itself, must say the same (checked here)."""

import argparse
import ast
import dataclasses
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from budgetdraft.base import defaults as base_defaults
from budgetdraft.decoding import engine, hf_generate
from budgetdraft.decoding.baselines import triforce
from budgetdraft.decoding.sampling import GREEDY, Sampling
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.pipeline import estimate, roofline
from budgetdraft.pipeline.commands import cmd_decode, cmd_estimate, cmd_eval_cell, cmd_prefill, cmd_targets
from budgetdraft.training import train
from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())["properties"]


def test_the_schema_defaults_are_the_librarys():
    assert SCHEMA["chunk_size"]["default"] == base_defaults.CHUNK_SIZE
    assert SCHEMA["score_window"]["default"] == base_defaults.SCORE_WINDOW
    assert SCHEMA["threads"]["default"] == base_defaults.THREADS
    sampling = {f.name: f.default for f in dataclasses.fields(Sampling)} | {"temperature": GREEDY}
    assert {k: v["default"] for k, v in SCHEMA["sampling"]["properties"].items()} == sampling
    assert SCHEMA["sampling"]["default"] == sampling


def test_the_schema_defaults_of_the_engine_policy_gamma_and_machine_are_the_librarys():
    assert SCHEMA["engine"]["default"] == base_defaults.ENGINE
    assert SCHEMA["engine"]["enum"] == list(base_defaults.ENGINES)
    assert SCHEMA["policy"]["default"] == base_defaults.POLICY
    policies = SCHEMA["policies"]
    assert policies["default"] == {"names": list(base_defaults.COMPARED_POLICIES), "gamma": base_defaults.GAMMA}
    assert policies["properties"]["names"]["default"] == list(base_defaults.COMPARED_POLICIES)
    assert policies["properties"]["gamma"]["default"] == base_defaults.GAMMA
    assert SCHEMA["gamma_fixed"]["default"] == base_defaults.GAMMA
    assert SCHEMA["device"]["default"] == base_defaults.DEVICE
    assert SCHEMA["verifier_dtype"]["default"] == SCHEMA["drafter_dtype"]["default"] == base_defaults.DTYPE
    # TriForce: the schema names its settings (no defaults: a cell's --extra holds only what the config sets)
    assert set(SCHEMA["baselines"]["properties"]["triforce"]["properties"]) == set(base_defaults.TRIFORCE_DEFAULTS)


def parsed_defaults(module) -> dict:
    parser = argparse.ArgumentParser()
    module.configure_parser(parser)
    return {a.dest: a.default for a in parser._actions}


@pytest.mark.parametrize("module", [cmd_eval_cell, cmd_decode, cmd_prefill, cmd_targets])
def test_every_parser_reads_the_one_home(module):
    defaults = parsed_defaults(module)
    assert defaults["threads"] == base_defaults.THREADS
    assert defaults["device"] == base_defaults.DEVICE
    for flag, home in (
        ("chunk_size", base_defaults.CHUNK_SIZE),
        ("score_window", base_defaults.SCORE_WINDOW),
        ("engine", base_defaults.ENGINE),
        ("policy", base_defaults.POLICY),
        ("dtype", base_defaults.DTYPE),
        ("verifier_dtype", base_defaults.DTYPE),
        ("drafter_dtype", base_defaults.DTYPE),
    ):
        if flag in defaults:
            assert defaults[flag] == home, flag
    if "top_p" in defaults:
        assert (defaults["temperature"], defaults["top_p"], defaults["top_k"], defaults["seed"]) == (GREEDY, 1.0, 0, 0)


def test_the_hparams_read_the_one_home():
    hp = TrainingHparams()
    assert (hp.chunk_size, hp.score_window, hp.threads) == (
        base_defaults.CHUNK_SIZE,
        base_defaults.SCORE_WINDOW,
        base_defaults.THREADS,
    )
    assert (hp.device, hp.dtype) == (base_defaults.DEVICE, base_defaults.DTYPE)
    e3 = Eagle3Hparams()
    assert (e3.threads, e3.device, e3.dtype, e3.verifier_dtype) == (
        base_defaults.THREADS,
        base_defaults.DEVICE,
        base_defaults.DTYPE,
        base_defaults.DTYPE,
    )
    assert train.POLICY is base_defaults.POLICY  # the policy of training's sparse branch


def parser_of(module) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    module.configure_parser(parser)
    return parser


def flag(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    return next(a for a in parser._actions if a.dest == dest)


def test_the_shared_decode_flags_are_one_functions():
    """eval-cell and decode take the same decode flags (add_decode_flags): the same defaults, choices and checks;
    decode's γ is the one home's, the prefill's timed runs too, and the estimate's --engine has the same choices
    (its default: the config's)."""
    shared = ("policy", "chunk_size", "score_window", "draft_vocab", "device", "verifier_dtype", "drafter_dtype")
    shared += ("threads", "engine", "temperature", "top_p", "top_k", "seed")
    eval_cell, decode = parser_of(cmd_eval_cell), parser_of(cmd_decode)
    for dest in shared:
        a, b = flag(eval_cell, dest), flag(decode, dest)
        assert (a.option_strings, a.default, a.type, a.choices) == (b.option_strings, b.default, b.type, b.choices)
    assert list(flag(eval_cell, "engine").choices) == list(base_defaults.ENGINES)
    assert flag(decode, "gamma").default == base_defaults.GAMMA
    assert flag(parser_of(cmd_prefill), "repeats").default == base_defaults.PREFILL_RUNS
    engine_flag = flag(parser_of(cmd_estimate), "engine")
    assert engine_flag.default is None and list(engine_flag.choices) == list(base_defaults.ENGINES)


def signature_defaults(fn) -> dict:
    return {k: p.default for k, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}


def test_the_librarys_entries_read_the_one_home():
    gen = signature_defaults(hf_generate.generate)
    assert (gen["kv_policy"], gen["gamma"], gen["engine"]) == (
        base_defaults.POLICY,
        base_defaults.GAMMA,
        base_defaults.ENGINE,
    )
    drafter = signature_defaults(SparseDrafter.__init__)
    assert (drafter["policy"], drafter["engine"]) == (base_defaults.POLICY, base_defaults.ENGINE)
    assert triforce.DEFAULTS == base_defaults.TRIFORCE_DEFAULTS
    settings = signature_defaults(triforce.TriForceDrafter.__init__)
    assert {k: v for k, v in settings.items() if k in triforce.DEFAULTS} == base_defaults.TRIFORCE_DEFAULTS


def test_the_estimate_and_the_engine_share_one_capacity_rounding(monkeypatch):
    """The cost estimate (torch-free, its roofline too) imports the engine's rounding and names, never a copy of them."""
    assert roofline.rounded_capacity is engine.rounded_capacity is base_defaults.rounded_capacity
    assert estimate.SLOT_ROUNDING == base_defaults.SLOT_ROUNDING
    assert estimate.ENGINES is engine.ENGINES is base_defaults.ENGINES
    assert [base_defaults.rounded_capacity(t) for t in (1, 16, 17, 16.5, 4061.5)] == [16, 16, 32, 32, 4064]
    # the prefill job's timed runs are PREFILL_RUNS, read when costed
    cfg = {"verifier": "embedded:smollm2", "drafter": "embedded:smollm2:layers=4", "verifier_dtype": "float32"}
    cfg |= {"drafter_dtype": "float32", "training": {}, "datasets": {"d": {"source": "x", "name": "D"}}, "samples": 3}
    est = estimate.Estimator(cfg, estimate.DEVICES["cpu"], 0.5)
    assert est.prefill_job("d", 128).generations == 3 * base_defaults.PREFILL_RUNS
    monkeypatch.setattr(estimate, "PREFILL_RUNS", 5)
    assert est.prefill_job("d", 128).generations == 15


def test_the_estimate_checks_the_configs_engine_where_it_reads_it(tmp_path):
    """--engine is checked when parsed (its choices); a config's engine, which the estimate reads unchecked by the
    schema, once where it is read, naming the file."""
    config = tmp_path / "c.yaml"
    config.write_text("engine: graph\n")
    with pytest.raises(ValueError, match=f"^engine = 'graph' in {config}: one of eager, graphs$"):
        estimate.cost_report(str(config), "a100-80g", 0.5, None, "all", 0)


def test_the_drafters_engine_is_checked_where_it_enters_the_library():
    """A SparseDrafter built with an engine that is none is refused when built (the loop checks its own), not run
    as another engine, nor found out at its prefill."""
    model = SimpleNamespace(device="cpu", get_output_embeddings=lambda: None)
    with pytest.raises(ValueError, match=r"^engine 'graph' is not one of eager, graphs$"):
        SparseDrafter(model, 64, engine="graph")
    assert SparseDrafter(model, 64).engine == base_defaults.ENGINE


SRC = Path(__file__).resolve().parents[1] / "src" / "budgetdraft"
SPELLED = {*base_defaults.ENGINES, *base_defaults.COMPARED_POLICIES}  # names whose one home is base/defaults.py
# files the one home does not reach yet, with how many such names they spell at most (being rewritten: the decode
# loop, the verifier, the metrics, eval-cell's run_cell); the policy registry names each policy once
REGISTRY = {"decoding/policies.py": len(base_defaults.COMPARED_POLICIES)}


def spelled_names(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every string constant of ``path`` that is an engine's or a compared policy's name (docstrings
    aside)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in SPELLED and id(node) not in docstrings
    ]


def test_no_module_spells_a_default_that_has_its_one_home():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name == "base/defaults.py":
            continue
        spelled = spelled_names(path)
        if len(spelled) > REGISTRY.get(name, 0):
            found += [f"{name}:{line}: {value!r}" for line, value in spelled]
    assert found == [], "read these from budgetdraft.base.defaults:\n" + "\n".join(found)
