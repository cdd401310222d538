"""`budgetdraft.configcheck.check_config`: what the schema cannot express, each problem one ValueError that names
the config key, the value and, for the position limit, the verifier it was read from (no Snakemake needed)."""

import json
from pathlib import Path

import pytest
import yaml

from budgetdraft.configcheck import check_config

ROOT = Path(__file__).resolve().parents[1]


def ci_config() -> dict:
    return yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())


@pytest.mark.parametrize("name", ["ci", "config", "paper"])
def test_shipped_configs_pass(name):
    check_config(yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text()))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c.update(verifier="embedded:nope"), "verifier = 'embedded:nope': unknown embedded model 'nope'"),
        (lambda c: c.update(drafter="embedded:smollm2:layers=x"), "drafter = 'embedded:smollm2:layers=x': model spec"),
        (lambda c: c["contexts"].update({"256": 9000}), "contexts.256 = 9000: prompt + max_new_tokens (8) exceeds"),
        (lambda c: c.update(verifier_max_positions=200), "contexts.256 = 256: prompt + max_new_tokens (8) exceeds"),
        (lambda c: c["training_data"].update(prefix_len=9000), "training_data.prefix_len + cont_len = 9032 exceeds"),
        (lambda c: c["gammas"].pop("128"), "gammas has keys ['256']; it needs one γ list per context: ['128', '256']"),
        (lambda c: c["collapse"].update(dataset="pg19"), "collapse.dataset = 'pg19' is not a key of datasets"),
        (lambda c: c["single_budget"].update(dataset="pg19"), "single_budget.dataset = 'pg19' is not a key"),
        (lambda c: c["comparison"].update(contexts=["1M"]), "context '1M' (comparison/single_budget) is not a key"),
        (lambda c: c["single_budget"].update(trained_budget=99), "single_budget.trained_budget = 99 is not in budgets"),
        (lambda c: c["training"].update(budget_weights=[1.0]), "training: budgets and budget_weights differ"),
        (lambda c: c["variants"]["la_only"].update(budgets=[16]), "variants.la_only: budgets and budget_weights"),
        (
            lambda c: c["single_budget"].update(trained_budget=32),
            "single_budget.trained_budget = 32 but the single_budget variant trains at budgets [16]",
        ),
        (lambda c: c["policies"].update(dataset="pg19"), "policies.dataset = 'pg19' is not a key of datasets"),
        (lambda c: c["variants"].pop("la_only"), "variants must define 'la_only' (the L_C ablation table"),
        (
            lambda c: c.update(sampling={"temperature": 0.7}),
            "sampling.temperature = 0.7 but baselines.enabled = ['triforce', 'eagle3']",
        ),
        (lambda c: c.update(engine="graphs"), "engine = 'graphs' needs a CUDA device, but device = 'cpu'"),
    ],
    ids=[
        "unknown-embedded-verifier",
        "bad-layer-count",
        "context-too-long",
        "position-limit",
        "training-too-long",
        "gammas-per-context",
        "collapse-dataset",
        "single-budget-dataset",
        "comparison-context",
        "trained-budget-not-a-budget",
        "training-weights",
        "variant-weights",
        "single-budget-variant",
        "policies-dataset",
        "required-variant",
        "sampling-with-baselines",
        "graphs-on-cpu",
    ],
)
def test_each_problem_names_its_key_and_value(edit, message):
    cfg = ci_config()
    edit(cfg)
    with pytest.raises(ValueError) as err:
        check_config(cfg)
    assert message in str(err.value)


def test_the_position_limit_names_the_verifier_it_was_read_from(tmp_path):
    """A verifier directory whose config.json allows fewer positions than `verifier_max_positions` sets the limit."""
    verifier = tmp_path / "verifier"
    verifier.mkdir()
    (verifier / "config.json").write_text(json.dumps({"max_position_embeddings": 200}))
    cfg = ci_config()
    cfg["verifier"] = str(verifier)
    with pytest.raises(ValueError, match="verifier's 200 positions") as err:
        check_config(cfg)
    assert f"the config.json of {verifier}" in str(err.value) and str(err.value).startswith("contexts.256 = 256")


def test_defaults_the_schema_fills_are_not_needed():
    """Without `policies` (its dataset defaults to the first) or `sampling` (greedy), nothing is refused."""
    cfg = ci_config()
    cfg.pop("policies", None)
    cfg.pop("sampling", None)
    check_config(cfg)
    cfg["sampling"] = {"temperature": 0.7}
    cfg["baselines"]["enabled"] = []
    check_config(cfg)  # sampling without baselines is fine
