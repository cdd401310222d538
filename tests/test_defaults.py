"""Each default has one home (``budgetdraft.base.defaults``, ``budgetdraft.decoding.sampling.Sampling``) that the command-line
parsers read; the config schema, which Snakemake reads itself, must say the same (checked here)."""

import argparse
import dataclasses
from pathlib import Path

import pytest
import yaml

from budgetdraft.base import defaults as base_defaults
from budgetdraft.decoding import decode as decode_cli
from budgetdraft.decoding.sampling import GREEDY, Sampling
from budgetdraft.evaluation import cells, prefill
from budgetdraft.training import targets
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


def parsed_defaults(module) -> dict:
    parser = argparse.ArgumentParser()
    module.configure_parser(parser)
    return {a.dest: a.default for a in parser._actions}


@pytest.mark.parametrize("module", [cells, decode_cli, prefill, targets])
def test_every_parser_reads_the_one_home(module):
    defaults = parsed_defaults(module)
    assert defaults["threads"] == base_defaults.THREADS
    for flag, home in (("chunk_size", base_defaults.CHUNK_SIZE), ("score_window", base_defaults.SCORE_WINDOW)):
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
    assert Eagle3Hparams().threads == base_defaults.THREADS
