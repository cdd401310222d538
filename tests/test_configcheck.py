"""`budgetdraft.pipeline.configcheck.check_config`: what the schema cannot express, each problem one ValueError that names
the config key, the value and, for the position limit, the verifier it was read from (no Snakemake needed)."""

import json
from pathlib import Path

import pytest
import yaml

from budgetdraft.pipeline.configcheck import check_config, check_config_files, schema_problems

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


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
        (
            lambda c: c.update(long_generation=None) or c["contexts"].update({"256": 9000}),
            "contexts.256 = 9000: prompt + max_new_tokens (6) exceeds",
        ),
        (  # ci's long generations: 24 new tokens
            lambda c: c.update(verifier_max_positions=270),
            "contexts.256 = 256: prompt + long_generation.max_new_tokens (24) exceeds the verifier's 270",
        ),
        (lambda c: c["long_generation"].update(dataset="pg19"), "long_generation.dataset = 'pg19' is not a key of"),
        (lambda c: c["long_generation"].update(budget=7), "long_generation.budget = 7 is not in budgets"),
        (
            lambda c: c["long_generation"].update(methods=["ar", "nope"]),
            "long_generation.methods[1] = 'nope': not a method or variant this config runs",
        ),
        (
            lambda c: c["long_generation"].update(methods=["ar", "sd@full"]),
            "long_generation.methods[1] = 'sd@full': a policy's control runs at its own budget",
        ),
        (lambda c: c["training_data"].update(prefix_len=9000), "training_data.prefix_len + cont_len = 9032 exceeds"),
        (lambda c: c["gammas"].pop("128"), "gammas has keys ['256']; it needs one γ list per context: ['128', '256']"),
        (lambda c: c["collapse"].update(dataset="pg19"), "collapse.dataset = 'pg19' is not a key of datasets"),
        (lambda c: c["single_budget"].update(dataset="pg19"), "single_budget.dataset = 'pg19' is not a key"),
        (lambda c: c["comparison"].update(contexts=["1M"]), "context '1M' (comparison/single_budget) is not a key"),
        (lambda c: c["single_budget"].update(trained_budget=99), "single_budget.trained_budget = 99 is not in budgets"),
        (
            lambda c: c["training"].update(budget_weights=[1.0]),
            "training: budgets [16, 32] and budget_weights [1.0] must pair up",
        ),
        (
            lambda c: c["variants"]["la_only"].update(budgets=[16]),
            "variants.la_only: budgets [16] and budget_weights [0.6, 0.4] must pair up",
        ),
        (
            lambda c: c["single_budget"].update(trained_budget=32),
            "single_budget.trained_budget = 32 but the single_budget variant trains at budgets [16]",
        ),
        (lambda c: c["policies"].update(dataset="pg19"), "policies.dataset = 'pg19' is not a key of datasets"),
        (lambda c: c["variants"].pop("la_only"), "variants must define 'la_only' (the L_C ablation table"),
        (
            lambda c: c.update(sampling={"temperature": 0.7}),
            "sampling.temperature = 0.7 but baselines.enabled = ['triforce', 'eagle3', 'lookup']",
        ),
        (lambda c: c.update(engine="graphs"), "engine = 'graphs' needs a CUDA device, but device = 'cpu'"),
    ],
    ids=[
        "unknown-embedded-verifier",
        "bad-layer-count",
        "context-too-long",
        "position-limit",
        "long-dataset",
        "long-budget",
        "long-method",
        "long-policy-label",
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
    cfg["long_generation"]["methods"] = ["ar", "sd"]  # not the copier, a baseline
    check_config(cfg)  # sampling without baselines is fine


def rename_key(mapping: dict, old, new) -> None:
    mapping[new] = mapping.pop(old)


# Every config key that becomes a folder of results/ (cells, drafters, prompts): '.', '..' or a separator in it
# would write outside its folder (a context '..' made the three datasets overwrite each other's cells).
PATH_SEGMENTS = {
    "contexts": lambda c, bad: (rename_key(c["contexts"], "128", bad), rename_key(c["gammas"], "128", bad)),
    "datasets": lambda c, bad: rename_key(c["datasets"], "gs", bad),
    "variants": lambda c, bad: rename_key(c["variants"], "lambda1.0", bad),
    "policies.names": lambda c, bad: c["policies"]["names"].append(bad),
    "policy": lambda c, bad: c.update(policy=bad),
    "baselines.enabled": lambda c, bad: c["baselines"]["enabled"].append(bad),
}


@pytest.mark.parametrize("bad", ["..", ".", "a/b", "a\\b"])
@pytest.mark.parametrize("key", list(PATH_SEGMENTS))
def test_a_path_segment_cannot_leave_its_folder(key, bad):
    """check_config refuses each (whatever the schema says), and the schema refuses each too."""
    cfg = ci_config()
    PATH_SEGMENTS[key](cfg, bad)
    with pytest.raises(ValueError) as err:
        check_config(cfg)
    assert str(err.value).startswith(f"{key}: {bad!r}") and "folder of results/" in str(err.value)
    assert schema_problems(cfg, SCHEMA), f"the schema lets {key} {bad!r} through"


def test_context_labels_with_dots_stay_allowed():
    cfg = ci_config()
    for old, new in (("128", "0.25K"), ("256", "1.5K")):
        rename_key(cfg["contexts"], old, new)
        rename_key(cfg["gammas"], old, new)
    cfg["comparison"]["contexts"] = ["0.25K", "1.5K"]
    cfg["single_budget"]["context"] = "1.5K"
    assert schema_problems(cfg, SCHEMA) == []
    check_config(cfg)


def test_comparison_contexts_are_not_repeated():
    cfg = ci_config()
    cfg["comparison"]["contexts"] = ["256", "256"]
    assert schema_problems(cfg, SCHEMA) == [
        "comparison.contexts = ['256', '256']: must not repeat an item (keys of contexts), "
        "at config['comparison']['contexts']"
    ]


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c.update(chunk_size=64),
            "budgets[0] = 16 is not a positive multiple of chunk_size = 64: it would keep 0",
        ),
        (
            lambda c: c.update(chunk_size=5),
            "budgets[0] = 16 is not a positive multiple of chunk_size = 5: it would keep 15",
        ),
        (
            lambda c: c["training"].update(chunk_size=5),
            "training.budgets[0] = 16 is not a positive multiple of training.chunk_size = 5",
        ),
        (
            lambda c: (c["training"].pop("chunk_size"), c["training"].update(budgets=[12, 32])),
            "training.budgets[0] = 12 is not a positive multiple of training.chunk_size = 8",
        ),
        (
            lambda c: c["variants"]["la_only"].update(budgets=[16, 20]),
            "variants.la_only.budgets[1] = 20 is not a positive multiple of training.chunk_size = 8",
        ),
        (
            lambda c: c["baselines"]["triforce"].update(retrieval_budget=60),
            "baselines.triforce.retrieval_budget = 60 is not a positive multiple of baselines.triforce.chunk_size = 8",
        ),
    ],
    ids=["chunk-above-budget", "chunk-not-divisor", "training-chunk", "training-default-chunk", "variant", "triforce"],
)
def test_a_budget_is_a_whole_number_of_chunks(edit, message):
    cfg = ci_config()
    edit(cfg)
    with pytest.raises(ValueError) as err:
        check_config(cfg)
    assert message in str(err.value)


def test_single_budget_trained_budget_is_a_whole_number_of_chunks():
    cfg = ci_config()
    cfg["budgets"] = [16, 32, 36]
    cfg["single_budget"]["trained_budget"] = 36
    cfg["variants"]["single_budget"]["budgets"] = [36]
    cfg["chunk_size"] = 4  # the grid's 36 is 9 chunks of 4; training's chunk of 8 is what refuses it
    with pytest.raises(ValueError, match=r"variants.single_budget.budgets\[0\] = 36 .* training.chunk_size = 8"):
        check_config(cfg)
    cfg["chunk_size"], cfg["training"]["chunk_size"] = 8, 4
    with pytest.raises(ValueError, match=r"budgets\[2\] = 36 is not a positive multiple of chunk_size = 8"):
        check_config(cfg)


def test_a_config_file_with_a_duplicated_key_is_refused(tmp_path):
    """YAML keeps the last of two equal keys; the file is refused, naming the file, the key and both lines."""
    good = tmp_path / "good.yaml"
    good.write_text("max_new_tokens: 8\ntraining: {steps: 1}\nvariants:\n  la_only: {lambda_c: 0}\n")
    check_config_files([good, ROOT / "config" / "ci.yaml", ROOT / "config" / "paper.yaml"])
    top = tmp_path / "top.yaml"
    top.write_text("max_new_tokens: 8\nrepeats: 1\nmax_new_tokens: 64\n")
    with pytest.raises(ValueError) as err:
        check_config_files([good, top])
    assert str(err.value).startswith(f"{top}, line 3: key 'max_new_tokens' is given twice (first at line 1)")
    nested = tmp_path / "nested.yaml"
    nested.write_text("training:\n  steps: 1\n  lr: 0.1\n  steps: 2\n")
    with pytest.raises(ValueError, match=r"line 4: key 'steps' is given twice \(first at line 2\)"):
        check_config_files([nested])
    flow = tmp_path / "flow.yaml"
    flow.write_text('contexts: {"128": 128, "128": 256}\n')
    with pytest.raises(ValueError, match="line 1: key '128' is given twice"):
        check_config_files([flow])


# ------------------------------------------------------------------------------------ variants beyond the paper's


def test_a_config_may_add_variants_under_any_safe_name():
    cfg = ci_config()
    cfg["variants"].update(
        {"lambda0.25": {"lambda_c": 0.25}, "lr-1e-3_v2": {"lr": 1.0e-3}, "2B": {"budgets": [32], "budget_weights": [1]}}
    )
    check_config(cfg)
    assert not schema_problems(cfg, SCHEMA)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("ar", "variants: 'ar' is the label of method 'AR'"),
        ("sd", "variants: 'sd' is the label of method 'SD (sparse/full)'"),
        ("triforce", "variants: 'triforce' is the label of method 'TriForce'"),
        ("eagle3", "variants: 'eagle3' is the label of method 'EAGLE-3'"),
        ("lambda0.5@snapkv", "variants: 'lambda0.5@snapkv' contains '@' or '+', which separate a cell label"),
        ("lambda0.5+eager", "variants: 'lambda0.5+eager' contains '@' or '+'"),
        ("-x", "variants: '-x' is not a safe name: use letters, digits, '_', '.' and '-', starting with a letter"),
        (".hidden", "variants: '.hidden' is not a safe name"),
        ("a b", "variants: 'a b' is not a safe name"),
        ("λ2", "variants: 'λ2' is not a safe name"),
        ("..", "variants: '..' is not a folder name of its own"),
        (".", "variants: '.' is not a folder name of its own"),
    ],
)
def test_a_variant_name_that_is_unsafe_or_a_method_label_is_refused_naming_the_key(bad, message):
    """check_config refuses each with the key named (whatever the schema says), and the schema refuses each too."""
    cfg = ci_config()
    cfg["variants"][bad] = {"lambda_c": 0.25}
    with pytest.raises(ValueError) as err:
        check_config(cfg)
    assert str(err.value).startswith(message), str(err.value)
    problems = schema_problems(cfg, SCHEMA)  # an unsafe name is the schema's too; a method's label the plan's alone
    assert bool(problems) == ("label of method" not in message), problems
    assert all(p.startswith(f"variants = {bad!r}: must") for p in problems), problems


def test_two_variants_that_train_the_same_drafter_are_refused():
    cfg = ci_config()
    cfg["variants"]["b16"] = {"budget_weights": [1.0], "budgets": [16]}
    with pytest.raises(ValueError, match=r"variants\.b16 trains exactly what variants\.single_budget trains"):
        check_config(cfg)


def test_the_schema_says_the_variant_name_rule_of_names():
    from budgetdraft.base import methods, names

    names_schema = yaml.safe_load(SCHEMA.read_text())["properties"]["variants"]["propertyNames"]
    assert names_schema["pattern"] == names.VARIANT_NAME
    assert "not" not in names_schema  # no list of method labels to keep in step: the plan asks the declarations
    for label in [*methods.REGISTRY, *methods.DECODERS]:
        assert "is the label of method" in names.variant_name_problem(label), label


def test_config_values_are_typed_only_where_the_schema_wants_a_number():
    """`--config` nested values arrive as strings: λ becomes a number, a commit id of digits stays a string."""
    from budgetdraft.pipeline.configcheck import typed_scalars

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    given = {"variants": {"lambda0.25": {"lambda_c": "0.25"}}, "revisions": {"a/b": "1" * 40}, "budgets": ["16"]}
    typed = typed_scalars(given, schema)
    assert typed["variants"]["lambda0.25"]["lambda_c"] == 0.25 and typed["budgets"] == [16]
    assert typed["revisions"]["a/b"] == "1" * 40


# ------------------------------------------------------------------ values that would fail late, or mean something else


def refusal(edit, **where) -> str:
    """The message of check_config (the Snakefile's one entry point, schema included) on config/ci.yaml edited."""
    cfg = ci_config()
    edit(cfg)
    with pytest.raises(ValueError) as err:
        check_config(cfg, schema=SCHEMA, **where)
    return str(err.value)


@pytest.mark.parametrize(
    "edit, line",
    [
        (lambda c: c["variants"]["lambda1.0"].update(lambda_c=float("inf")), "variants.lambda1.0.lambda_c = inf"),
        (lambda c: c["variants"]["lambda1.0"].update(lambda_c=float("nan")), "variants.lambda1.0.lambda_c = nan"),
        (lambda c: c["training"].update(budget_weights=[float("nan"), 0.4]), "training.budget_weights[0] = nan"),
        (lambda c: c.update(near_tie_margin=float("-inf")), "near_tie_margin = -inf"),
    ],
    ids=["lambda-inf", "lambda-nan", "weights-nan", "margin-inf"],
)
def test_a_number_that_is_not_finite_is_refused_naming_the_key(edit, line):
    """`.nan` and `.inf` pass every bound of the schema (comparisons with NaN are False; λ NaN made `lambda_c > 0`
    False: L_A only, while every record said λ = NaN)."""
    assert f"{line}: must be a finite number" in refusal(edit)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["variants"].update({"Lambda1.0": {"lambda_c": 0.7}}),
            "variants: 'Lambda1.0' differs only by case from variants 'lambda1.0': on macOS, Windows",
        ),
        (
            lambda c: c["variants"].update({"SD": {"lambda_c": 0.7}}),
            "variants: 'SD' differs only by case from the method label 'sd'",
        ),
        (
            lambda c: c["datasets"].update({"LWM": {"source": "kjv_lwm", "name": "LWM 2"}}),
            "datasets: 'LWM' differs only by case from datasets 'lwm'",
        ),
        (
            lambda c: (c["contexts"].update({"1k": 100, "1K": 100}), c["gammas"].update({"1k": [3], "1K": [3]})),
            "contexts: '1K' differs only by case from contexts '1k'",
        ),
    ],
    ids=["variants", "variant-and-method", "datasets", "contexts"],
)
def test_names_that_differ_only_by_case_are_refused(edit, message):
    """Each becomes a folder of results/: on case-insensitive file systems the two would overwrite each other."""
    assert message in refusal(edit)


def test_a_gamma_longer_than_a_run_is_refused():
    message = refusal(lambda c: c["gammas"]["128"].append(100000))
    assert message.startswith("gammas.128[2] = 100000 is more than max_new_tokens = 6"), message
    assert refusal(lambda c: c["comparison"].update(gamma=9)).startswith("comparison.gamma = 9 is more than")


def test_a_seed_beyond_32_bits_is_refused_naming_the_key():
    assert "seed = 10000000000000000000000000000000000000000: must be <= 4294967295" in refusal(
        lambda c: c.update(seed=10**40)
    )
    assert "training.seed = -1: must be >= 0" in refusal(lambda c: c["training"].update(seed=-1))


def test_a_name_too_long_for_a_folder_is_refused():
    message = refusal(lambda c: c["variants"].update({"v" * 300: {"lambda_c": 0.7}}))
    assert message.startswith("variants: 'vvvvvvvvvvvvvvvvvvvv'... has 300 characters, more than the 64"), message


@pytest.mark.parametrize(
    "edit, line",
    [
        (lambda c: c["variants"].update({"lam\n": {"lambda_c": 0.7}}), "variants: the key 'lam\\n' has a control"),
        (lambda c: c["datasets"].update({"gs\n": c["datasets"].pop("gs")}), "datasets: the key 'gs\\n' has a control"),
        (lambda c: c["variants"].update({" lam": {"lambda_c": 0.7}}), "variants: the key ' lam' has a control"),
    ],
)
def test_a_key_with_a_newline_is_refused_naming_it(edit, line):
    """Python's `$` matches before a trailing newline, so `gs\\n` passes the schema's `^[A-Za-z0-9_]+$`."""
    assert line in refusal(edit)


@pytest.mark.parametrize("name", ["</script><img src=x onerror=alert(1)>", "A & B", 'say "hi"', "tab\there"])
def test_markup_in_a_display_name_is_refused(name):
    """A dataset's name is a column title of every table, HTML page and the report."""
    assert f"datasets.gs.name = {name!r}: a column title may not hold" in refusal(
        lambda c: c["datasets"]["gs"].update(name=name)
    )


def test_whole_number_floats_are_read_as_the_integers_they_are():
    cfg = ci_config()
    cfg.update(replicates=2.0, budgets=[16.0, 32.0], max_new_tokens=8.0)
    cfg["training"]["steps"] = 10.0
    check_config(cfg, schema=SCHEMA)
    assert (cfg["replicates"], cfg["budgets"], cfg["training"]["steps"]) == (2, [16, 32], 10)
    assert all(type(x) is int for x in (cfg["replicates"], *cfg["budgets"], cfg["max_new_tokens"]))
    assert type(cfg["training"]["lr"]) is float  # a number the schema does not want whole stays a float
    assert "replicates = 2.5: must be of type integer" in refusal(lambda c: c.update(replicates=2.5))


def test_the_schema_defaults_are_filled_in_once_validated():
    cfg = ci_config()
    cfg.pop("engine", None), cfg.pop("sampling", None)
    check_config(cfg, schema=SCHEMA)
    assert cfg["engine"] == "eager" and cfg["sampling"] == {"temperature": 0, "top_p": 1.0, "top_k": 0, "seed": 0}


def test_what_config_gave_is_told_apart_from_the_command_lines_files(tmp_path):
    """The Snakefile hands check_config what --config gave (command_line_config): the config Snakemake loaded before
    the workflow's default, less what the --configfile files give as they are. A nested --config value arrives as a
    string ('1.0' where the file has 1.0: --config's) and is typed as a file's; with no --configfile, all of it."""
    from budgetdraft.pipeline.configcheck import command_line_config

    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("samples: 2\nrepeats: 1\nvariants: {lambda1.0: {lambda_c: 1.0}}\n")
    second.write_text("repeats: 3\n")
    given = {"samples": 2, "repeats": 3, "variants": {"lambda1.0": {"lambda_c": "1.0"}, "v": {"lambda_c": "0.25"}}}
    assert command_line_config(given, [first, second]) == {"variants": given["variants"]}
    assert command_line_config({**given, "repeats": 1}, [first, second]) == {
        "repeats": 1,
        "variants": given["variants"],
    }
    assert command_line_config(given, []) == given
    cfg = ci_config()
    check_config(cfg, schema=SCHEMA, overrides=command_line_config({"variants": {"v": {"lambda_c": "0.25"}}}, []))
    assert cfg["variants"]["v"] == {"lambda_c": 0.25}


# ------------------------------------------------------------------------------------------------------ names


@pytest.mark.parametrize(
    "name, why",
    [
        ("LWM\u202e", "holds U+202E (RIGHT-TO-LEFT OVERRIDE), which a reader cannot see in a column title"),
        ("Long\u2028Bench", "holds U+2028 (LINE SEPARATOR), which a reader cannot see"),
        ("GS\x85", "holds U+0085 (a control character), which a reader cannot see"),
        ("G\u200bS", "holds U+200B (ZERO WIDTH SPACE)"),
        ("Long\u00a0Bench", "holds U+00A0 (NO-BREAK SPACE)"),
        ("", "is empty: a column title must show the dataset's name"),
        ("   ", "is empty"),
        (" GS", "has spaces around it"),
        ("G" * 100_000, "has 100000 characters, more than the 64 a column title may have"),
    ],
    ids=[
        "rtl-override",
        "line-separator",
        "next-line",
        "zero-width",
        "no-break-space",
        "empty",
        "blank",
        "spaces",
        "long",
    ],
)
def test_a_display_name_a_reader_cannot_see_is_refused(name, why):
    """A dataset's name is a column title of every table and page: what it holds must be what a reader sees."""
    message = refusal(lambda c: c["datasets"]["gs"].update(name=name))
    shown = repr(name) if len(name) <= 64 else f"{name[:20]!r}..."
    assert message.startswith("the config has 1 problem(s):") and f"datasets.gs.name = {shown}: {why}" in message
    assert len(message) < 300, message[:400]


@pytest.mark.parametrize(
    "first, second",
    [("Café", "Cafe\u0301"), ("LWM", "LWM"), ("LWM", "lwm"), ("ﬁve", "five")],
    ids=["nfc-nfd", "same", "case", "ligature"],
)
def test_two_display_names_a_reader_cannot_tell_apart_are_refused(first, second):
    """Two columns under one title (after Unicode normalisation and case folding) say nothing of which is which."""

    def edit(c):
        c["datasets"]["gs"]["name"], c["datasets"]["lwm"]["name"] = first, second

    assert (
        f"datasets.lwm.name = {second!r} reads as datasets.gs.name = {first!r}: two columns a reader cannot tell "
        "apart; rename one"
    ) in refusal(edit)


@pytest.mark.parametrize(
    "key, name, why",
    [
        ("datasets", "CON", "'CON' is a device name on Windows"),
        ("datasets", "aux", "'aux' is a device name on Windows"),
        ("variants", "nul.v2", "'nul.v2' is a device name on Windows"),
        ("variants", "COM1", "'COM1' is a device name on Windows"),
        (
            "variants",
            "lambda1.",
            "'lambda1.' ends in '.', which Windows drops ('lambda1.' and 'lambda1' are one folder",
        ),
        ("contexts", "256.", "'256.' ends in '.', which Windows drops"),
    ],
)
def test_a_folder_name_that_windows_cannot_hold_apart_is_refused(key, name, why):
    """Windows keeps device names for itself and drops a trailing dot: `v1.` beside `v1` would be one folder."""

    def edit(c):
        old = {"datasets": "gs", "variants": "lambda1.0", "contexts": "256"}[key]
        rename_key(c[key], old, name)
        if key == "contexts":
            rename_key(c["gammas"], old, name)

    message = refusal(edit)
    assert message.startswith(f"{key}: {why}") and "but it names a folder of results/" in message, message


# ------------------------------------------------------------------------------------- sizes, counts and their cost


def triforce(**settings):
    return lambda c: c["baselines"]["triforce"].update(settings)


def eagle3(**settings):
    return lambda c: c["baselines"]["eagle3"]["training"].update(settings)


@pytest.mark.parametrize(
    "edit, line",
    [
        (
            lambda c: c.update(replicates=300000),
            "replicates = 300000: the plan would measure 24,600,014 cell files (82 per replicate + 14 shared), more "
            "than the 20,000 one config may plan; lower replicates",
        ),
        (
            lambda c: c.update(repeats=100000),
            "repeats = 100000, warmup = 1, samples = 1: the plan's 178 cell files would decode 17,800,178 runs (each "
            "prompt warmup + repeats times), more than the 2,000,000 one config may plan",
        ),
        (
            lambda c: c.update(budgets=[16, 32, 512]),
            "budgets[2] = 512 is more than contexts.128 = 128 prompt tokens: its cells there would keep the whole "
            "prompt, a full cache under the label B512",
        ),
        (
            lambda c: c.update(score_window=10000),
            "score_window = 10000 is more than contexts.128 = 128 prompt tokens",
        ),
        (
            lambda c: c["variants"]["la_only"].update(budgets=[16, 256]),
            "variants.la_only.budgets[1] = 256 is more than training_data.prefix_len = 224",
        ),
        (
            lambda c: c["training"].update(score_window=1000),
            "training.score_window = 1000 is more than training_data.prefix_len = 224",
        ),
        (lambda c: c.update(warmup_tokens=9), "warmup_tokens = 9 is more than max_new_tokens = 6"),
        (
            lambda c: c["training"].update(heldout=4),
            "training.heldout = 4 leaves none of the 4 sequences of training_data to train on",
        ),
        (
            lambda c: c["training"].update(seed=2**32 - 1),
            "training.seed = 4294967295 with replicates = 2: replicate 1 would train with seed 4294967296, past "
            "4294967295; lower training.seed to at most 4294967294",
        ),
        (
            lambda c: c["base_drafter"]["training"].update(seed=2**32 - 1),
            "base_drafter.training.seed = 4294967295 with replicates = 2: replicate 1 would train with seed 4294967296",
        ),
        (
            triforce(gamma_inner=1000),
            "baselines.triforce.gamma_inner = 1000 is more than comparison.gamma = 5, the γ of TriForce's cells: it "
            "drafts at most γ tokens a round, and would pre-allocate 1000 slots",
        ),
        (
            triforce(streaming_budget=100000),
            "baselines.triforce.streaming_budget = 100000 is more than contexts.128 = 128 prompt tokens "
            "(comparison.contexts): its small drafter's StreamingLLM cache would keep the whole prompt and "
            "pre-allocate 100000 slots a layer",
        ),
        (triforce(sinks=16), "baselines.triforce.sinks = 16 must be less than streaming_budget = 16"),
        (
            eagle3(layer_ids=[2, 5, 8]),
            "baselines.eagle3.training.layer_ids[2] = 8: the verifier embedded:smollm2:layers=8 has 8 decoder layers, "
            "numbered 0-7",
        ),
        (
            eagle3(ttt_steps=100000),
            "baselines.eagle3.training.ttt_steps = 100000 is more than ttt_window = 64: an unroll step past the window "
            "scores no position",
        ),
        (eagle3(step_decay=1e200), "baselines.eagle3.training.step_decay = 1e+200: must be <= 1"),
        (eagle3(threads=100000), "baselines.eagle3.training.threads = 100000: must be <= 1024"),
        (lambda c: c.update(threads=100000), "threads = 100000: must be <= 1024"),
        (lambda c: c["training"].update(steps=10**9), "training.steps = 1000000000: must be <= 1000000"),
        (
            lambda c: c["variants"].update(lambda1={"lambda_c": 1}),
            "variants.lambda1 trains exactly what variants.lambda1.0 trains",
        ),
    ],
    ids=[
        "replicates",
        "repeats",
        "budget-past-context",
        "score-window",
        "training-budget-past-prefix",
        "training-score-window",
        "warmup-tokens",
        "heldout",
        "seed-plus-replicate",
        "base-seed-plus-replicate",
        "triforce-gamma-inner",
        "triforce-streaming-budget",
        "triforce-sinks",
        "eagle3-layer",
        "eagle3-ttt-steps",
        "eagle3-step-decay",
        "eagle3-threads",
        "threads",
        "steps",
        "lambda-1-is-1.0",
    ],
)
def test_a_size_or_count_that_fails_late_is_refused_with_what_it_costs(edit, line):
    """Every count and size is bounded before any job, by what it sizes or by what the plan would cost: a typo of
    300000 for 3 replicates took minutes and gigabytes before a MemoryError; TriForce's caches and EAGLE-3's unroll
    are pre-allocated; EAGLE-3's layers past the verifier's ended in an IndexError in training."""
    message = refusal(edit)
    assert line in message, message
