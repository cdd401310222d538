"""A config's problems in plain language, before any job is planned: the schema's, then the ones it cannot express.

Snakemake's `validate` reports the first error with the whole sub-schema dumped; the Snakefile calls
`schema_problems` first, so that a user reads e.g. ``budgets[0] = 0: must be >= 1 (drafter KV budget B in
tokens), at config['budgets'][0]`` for every problem at once. `check_config` (called by
workflow/rules/common.smk) then checks what a schema cannot: that the sections agree with each other and with
the verifier, raising ValueError at the first inconsistency, naming its key and value.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

from budgetdraft import names
from budgetdraft.models import check_spec, max_positions

RULES = {  # jsonschema validator -> what it asks of the value
    "minimum": "must be >= {}",
    "exclusiveMinimum": "must be > {}",
    "maximum": "must be <= {}",
    "exclusiveMaximum": "must be < {}",
    "enum": "must be one of {}",
    "type": "must be of type {}",
    "pattern": "must match {}",
    "minItems": "needs at least {} item(s)",
    "maxItems": "takes at most {} item(s)",
    "minProperties": "needs at least {} entry(ies)",
    "uniqueItems": "must not repeat an item",
}


def dotted(path) -> str:
    """['budgets', 0] -> 'budgets[0]'; ['collapse', 'gamma'] -> 'collapse.gamma'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "config"


def problem(error) -> str:
    """One line for one jsonschema error."""
    where = dotted(error.absolute_path)
    at = "config" + "".join(f"[{p!r}]" for p in error.absolute_path)
    rule = RULES.get(error.validator)
    if rule is None:  # required, additionalProperties, propertyNames ...: jsonschema's own sentence is plain
        return f"{where}: {error.message}, at {at}"
    value = error.validator_value if error.validator != "uniqueItems" else ""
    about = error.schema.get("description") if isinstance(error.schema, dict) else None
    return f"{where} = {error.instance!r}: {rule.format(value)}" + (f" ({about})" if about else "") + f", at {at}"


def schema_problems(config: dict, schema_path: str | Path) -> list[str]:
    """Every problem of ``config`` against the YAML JSON-schema at ``schema_path``, one line each, in key order."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = Draft202012Validator(schema).iter_errors(config)
    return [problem(e) for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])]


# ---------------------------------------------------------------- checks beyond the schema


def check_config(config: dict) -> None:
    """Raise ValueError naming the key and value of the first inconsistency the schema cannot express (after
    `schema_problems` and Snakemake's `validate`, before any job is planned)."""
    check_models(config)
    check_engine(config)
    check_references(config)
    check_training(config)
    check_targets(config)


def check_models(config: dict) -> None:
    """Model specs this package can build, and prompts / training sequences that fit the verifier's positions."""
    for key in ("verifier", "drafter"):
        try:
            check_spec(config[key])
        except ValueError as e:
            raise ValueError(f"{key} = {config[key]!r}: {e}") from None
    limit = config["verifier_max_positions"]
    own = max_positions(config["verifier"])  # the configured verifier's own limit, where its config.json is readable
    limit = min(limit, own or limit)
    new = config["max_new_tokens"]
    for label, length in config["contexts"].items():
        if length + new > limit:
            raise ValueError(
                f"contexts.{label} = {length}: prompt + max_new_tokens ({new}) exceeds the verifier's {limit} "
                f"positions (verifier_max_positions / the config.json of {config['verifier']})"
            )
    data = config["training_data"]
    if data["prefix_len"] + data["cont_len"] > limit:
        raise ValueError(
            f"training_data.prefix_len + cont_len = {data['prefix_len'] + data['cont_len']} "
            f"exceeds verifier_max_positions = {limit}"
        )


def check_engine(config: dict) -> None:
    """CUDA graphs exist on CUDA devices only: ``engine: graphs`` elsewhere is refused rather than run as something
    else (compiling the steps on a CPU would time the compiler, not the graphs the setting names)."""
    engine, device = config.get("engine", "eager"), str(config["device"])
    if engine == "graphs" and not device.startswith("cuda"):
        raise ValueError(
            f"engine = 'graphs' needs a CUDA device, but device = {device!r}: set engine: eager, or device: cuda"
        )


def check_references(config: dict) -> None:
    """Every dataset, context and budget a section names is one the config defines."""
    if set(config["gammas"]) != set(config["contexts"]):
        raise ValueError(
            f"gammas has keys {sorted(config['gammas'])}; it needs one γ list per context: {sorted(config['contexts'])}"
        )
    for key in ("collapse", "comparison", "single_budget"):
        if config[key]["dataset"] not in config["datasets"]:
            raise ValueError(f"{key}.dataset = {config[key]['dataset']!r} is not a key of datasets")
    for context in config["comparison"]["contexts"] + [config["single_budget"]["context"]]:
        if context not in config["contexts"]:
            raise ValueError(f"context {context!r} (comparison/single_budget) is not a key of contexts")
    if config["single_budget"]["trained_budget"] not in config["budgets"]:
        raise ValueError(
            f"single_budget.trained_budget = {config['single_budget']['trained_budget']} is not in budgets"
        )


def check_training(config: dict) -> None:
    """One weight per training budget, and a single-budget variant trained at the budget its table names."""
    for name, hp in [("training", config["training"])] + [
        (f"variants.{v}", {**config["training"], **o}) for v, o in config["variants"].items()
    ]:
        if len(hp["budgets"]) != len(hp["budget_weights"]):
            raise ValueError(f"{name}: budgets and budget_weights differ in length")
    trained = {**config["training"], **config["variants"].get(names.SINGLE, {})}["budgets"]
    if trained != [config["single_budget"]["trained_budget"]]:
        raise ValueError(
            f"single_budget.trained_budget = {config['single_budget']['trained_budget']} but the {names.SINGLE} "
            f"variant trains at budgets {trained}: the table's label would not say what was trained"
        )


def check_targets(config: dict) -> None:
    """What the targets need: the `policies` target's dataset (default: the first), the variants the tables read,
    and a decoding every enabled baseline supports (greedy only)."""
    dataset = config.get("policies", {}).get("dataset", next(iter(config["datasets"])))
    if dataset not in config["datasets"]:
        raise ValueError(f"policies.dataset = {dataset!r} is not a key of datasets")
    for label, needed_by in names.REQUIRED_VARIANTS.items():
        if label not in config["variants"]:
            raise ValueError(f"variants must define {label!r} ({needed_by})")
    enabled = config["baselines"].get("enabled", [])
    temperature = config.get("sampling", {}).get("temperature", 0)  # 0 = greedy, the schema's default
    if temperature > 0 and enabled:
        raise ValueError(
            f"sampling.temperature = {temperature} but baselines.enabled = {enabled}: the baselines "
            "decode greedily only; set baselines.enabled: [] to sample, or sampling.temperature: 0"
        )
