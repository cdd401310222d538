"""Each default has one home (``budgetdraft.settings``, ``budgetdraft.sampling.Sampling``) that the command-line
parsers read; the config schema, which Snakemake reads itself, must say the same (checked here)."""

import argparse
import dataclasses
from pathlib import Path

import pytest
import yaml

from budgetdraft import cells, decode_cli, prefill, settings, targets
from budgetdraft.sampling import GREEDY, Sampling

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())["properties"]


def test_the_schema_defaults_are_the_librarys():
    assert SCHEMA["chunk_size"]["default"] == settings.CHUNK_SIZE
    assert SCHEMA["score_window"]["default"] == settings.SCORE_WINDOW
    assert SCHEMA["threads"]["default"] == settings.THREADS
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
    assert defaults["threads"] == settings.THREADS
    for flag, home in (("chunk_size", settings.CHUNK_SIZE), ("score_window", settings.SCORE_WINDOW)):
        if flag in defaults:
            assert defaults[flag] == home, flag
    if "top_p" in defaults:
        assert (defaults["temperature"], defaults["top_p"], defaults["top_k"], defaults["seed"]) == (GREEDY, 1.0, 0, 0)


def test_the_hparams_read_the_one_home():
    hp = settings.TrainingHparams()
    assert (hp.chunk_size, hp.score_window, hp.threads) == (
        settings.CHUNK_SIZE,
        settings.SCORE_WINDOW,
        settings.THREADS,
    )
    assert settings.Eagle3Hparams().threads == settings.THREADS
