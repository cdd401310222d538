"""The typed settings contract (budgetdraft.report.settings, budgetdraft.training.hparams): defaults declared once, unknown and missing keys named."""

import json
from pathlib import Path

import pytest

from budgetdraft.report.settings import PaperSettings, Variant, with_drafter_sizes
from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams

SRC = Path(__file__).resolve().parents[1] / "src" / "budgetdraft"
PAPER = {
    "datasets": {"d1": "DS-One"},
    "contexts": ["0.5K", "1K"],
    "budgets": [32, 64],
    "gamma_fixed": 2,
    "collapse": {"dataset": "d1", "gamma": 2},
    "comparison": {"dataset": "d1", "contexts": ["1K"], "gamma": 2},
    "single_budget": {"dataset": "d1", "context": "1K", "gamma": 2, "trained_budget": 32},
    "variants": {"lambda0.5": {"lambda_c": 0.5, "budgets": [32], "steps": 10}},
}


def test_paper_settings_parse_once_into_attributes():
    s = PaperSettings.from_json(PAPER)
    assert (s.gamma_fixed, s.single_budget.trained_budget, s.comparison.contexts) == (2, 32, ["1K"])
    assert s.lossless == {"lossless": "error", "near_tie_margin": 0.0, "not_run": {}} and s.given_gammas("1K") is None
    assert s.variant("lambda0.5").to_json() == PAPER["variants"]["lambda0.5"] and s.variant("x") == Variant()
    assert s.comparison.budget_of("triforce") is None and s.policies is None
    assert PaperSettings.from_json(s.to_json()) == s
    assert with_drafter_sizes(PAPER, {"sd": "1M"})["comparison"]["drafter_sizes"] == {"sd": "1M"}


def test_paper_settings_name_unknown_and_missing_keys():
    with pytest.raises(ValueError, match=r"unknown settings key\(s\) \['gama'\]"):
        PaperSettings.from_json({**PAPER, "gama": 1})
    with pytest.raises(ValueError, match="settings: missing key 'gamma_fixed'"):
        PaperSettings.from_json({k: v for k, v in PAPER.items() if k != "gamma_fixed"})
    with pytest.raises(ValueError, match=r"\['size'\] in collapse"):
        PaperSettings.from_json({**PAPER, "collapse": {"dataset": "d1", "gamma": 2, "size": 1}})


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_paper_settings_refuse_non_finite_numbers_naming_the_key(bad):
    """Settings a user writes by hand (Python's JSON reads NaN and Infinity) are checked as the plan's are."""
    with pytest.raises(ValueError, match="settings key 'near_tie_margin' must be a finite number"):
        PaperSettings.from_json({**PAPER, "near_tie_margin": bad})
    with pytest.raises(ValueError, match=r"settings key 'variants\.lambda0\.5\.lambda_c' must be a finite number"):
        PaperSettings.from_json({**PAPER, "variants": {"lambda0.5": {"lambda_c": bad}}})
    with pytest.raises(ValueError, match="settings key 'comparison.contexts' must be a finite number"):
        PaperSettings.from_json({**PAPER, "comparison": {**PAPER["comparison"], "contexts": ["1K", bad]}})
    assert PaperSettings.from_json({**PAPER, "datasets": {"nan": "NaN"}}).datasets == {"nan": "NaN"}  # names stay


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_numbers_nested_in_the_settings_objects_are_refused_naming_the_key(bad):
    """context_tokens and gammas are objects: a NaN or infinity in them passed the check and reached the figures as
    int(inf)'s OverflowError (issue 38)."""
    with pytest.raises(ValueError) as err:
        PaperSettings.from_json({**PAPER, "context_tokens": {"1K": 1024, "4K": bad}})
    assert str(err.value) == f"settings key 'context_tokens.4K' must be a finite number, got {bad!r}"
    with pytest.raises(ValueError) as err:
        PaperSettings.from_json({**PAPER, "gammas": {"1K": [3, bad]}})
    assert str(err.value) == f"settings key 'gammas.1K' must be a finite number, got [3, {bad!r}]"


def test_hparams_defaults_round_trip_and_checks():
    hp = TrainingHparams.from_json({"lambda_c": 0, "budgets": [128], "budget_weights": [1]})
    assert (hp.lambda_c, hp.budgets, hp.budget_weights, hp.steps) == (0.0, [128], [1.0], 5000)
    assert list(hp.to_json()) == [f for f in TrainingHparams().keys()] and hp["steps"] == 5000
    assert TrainingHparams.from_json(json.loads(json.dumps(hp.to_json()))) == hp
    with pytest.raises(ValueError, match=r"unknown hparams key\(s\) \['learning_rate'\]"):
        TrainingHparams.from_json({"learning_rate": 1e-4})
    with pytest.raises(ValueError, match="must pair up"):
        TrainingHparams.from_json({"budgets": [128]})
    assert Eagle3Hparams.from_json({"steps": 3}).to_json()["steps"] == 3
    with pytest.raises(ValueError, match="stepz"):
        Eagle3Hparams.from_json({"stepz": 1})
    with pytest.raises(ValueError, match="ttt_steps must be >= 1"):
        Eagle3Hparams.from_json({"ttt_steps": 0})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "nan"])
@pytest.mark.parametrize(
    "parse, key, value",
    [
        (TrainingHparams.from_json, "lambda_c", None),  # NaN must not read as "L_A only" (NaN > 0 is False)
        (TrainingHparams.from_json, "lr", None),
        (TrainingHparams.from_json, "steps", None),  # int(inf) would be an OverflowError, not a named key
        (TrainingHparams.from_json, "budget_weights", lambda bad: [bad, 1.0]),
        (Eagle3Hparams.from_json, "grad_clip", None),
        (Eagle3Hparams.from_json, "step_decay", None),
    ],
)
def test_hparams_refuse_non_finite_numbers_naming_the_key(parse, key, value, bad):
    data = {key: value(bad) if value else bad}
    if key == "budget_weights":
        data["budgets"] = [128, 256]
    with pytest.raises(ValueError, match=f"hparams key '{key}' must be a finite number"):
        parse(data)


def test_nan_lambda_or_weights_fail_the_checks_without_from_json():
    with pytest.raises(ValueError, match="lambda_c must be >= 0, got nan"):
        TrainingHparams(lambda_c=float("nan"))
    with pytest.raises(ValueError, match="budget_weights must be non-negative"):
        TrainingHparams(budgets=[128], budget_weights=[float("nan")])
