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
from budgetdraft.settings import TrainingHparams

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
    "not": "must not be one of {}",  # a `not: {enum: [...]}` (a variant named like a method)
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
    if error.validator == "not":
        value = error.validator_value.get("enum", error.validator_value)
    about = error.schema.get("description") if isinstance(error.schema, dict) else None
    return f"{where} = {error.instance!r}: {rule.format(value)}" + (f" ({about})" if about else "") + f", at {at}"


def schema_problems(config: dict, schema_path: str | Path) -> list[str]:
    """Every problem of ``config`` against the YAML JSON-schema at ``schema_path``, one line each, in key order."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = Draft202012Validator(schema).iter_errors(config)
    return [problem(e) for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])]


# ---------------------------------------------------------------- the config files themselves


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (PyYAML, like Snakemake, keeps the last)."""

    path = "config"

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise ValueError(
                        f"{self.path}, line {line}: key {key!r} is given twice (first at line {seen[key]}); YAML would "
                        "silently keep only the last value: remove one"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep)


def check_config_files(paths) -> None:
    """Raise ValueError naming the file, the key and its line when a config file gives one key twice in a mapping.
    Snakemake has loaded the files already (keeping the last value); the Snakefile re-reads each with this."""
    for path in paths:
        text = Path(path).read_text(encoding="utf-8")
        loader = type("Loader", (_UniqueKeyLoader,), {"path": str(path)})
        try:
            yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError:
            continue  # not YAML that PyYAML reads (Snakemake read it): nothing to compare
        except ValueError as err:
            raise ValueError(str(err)) from None  # one line, not PyYAML's stack


def typed_scalars(value, schema: dict | None = None):
    """A ``--config`` value with its numbers and booleans read as a config file reads them: Snakemake reads a nested
    value (``variants={lambda0.25: {lambda_c: 0.25}}``) with YAML's BaseLoader, every scalar a string ('0.25'). Only
    where ``schema`` (the config schema, walked along the value) wants no string: a string key, such as a commit id
    of `revisions` made of digits, stays a string."""
    schema = schema or {}
    if isinstance(value, dict):
        props, extra = schema.get("properties", {}), schema.get("additionalProperties", {})
        return {k: typed_scalars(v, props.get(k, extra if isinstance(extra, dict) else {})) for k, v in value.items()}
    if isinstance(value, list):
        return [typed_scalars(v, schema.get("items", {})) for v in value]
    if not isinstance(value, str) or schema.get("type") == "string" or "pattern" in schema:
        return value
    try:
        read = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return read if isinstance(read, (bool, int, float)) else value


# ---------------------------------------------------------------- checks beyond the schema


def check_config(config: dict) -> None:
    """Raise ValueError naming the key and value of the first inconsistency the schema cannot express (after
    `schema_problems` and Snakemake's `validate`, before any job is planned)."""
    check_path_names(config)
    check_variant_names(config)
    check_models(config)
    check_engine(config)
    check_references(config)
    check_training(config)
    check_chunks(config)
    check_targets(config)


def segment_problem(name) -> str | None:
    """Why ``name`` cannot be one folder or file name of a path under results/ (None: it can)."""
    name = str(name)
    if name in ("", ".", ".."):
        return f"{name!r} is not a folder name of its own"
    if any(sep in name for sep in ("/", "\\", "\0")):
        return f"{name!r} contains a path separator"
    return None


def check_path_names(config: dict) -> None:
    """Every key that becomes a path segment (results/cells/LABEL[@POLICY]/DATASET/CONTEXT/..., results/drafters/
    rR/VARIANT, results/data/prompts/DATASET/CONTEXT.parquet) is one folder name: never '.', '..' or with a '/'
    (a context '..' would write every dataset's cells into one folder, overwriting each other)."""
    segments = [
        *(("datasets", k) for k in config["datasets"]),
        *(("contexts", k) for k in config["contexts"]),
        *(("variants", k) for k in config["variants"]),
        *(("policies.names", p) for p in config.get("policies", {}).get("names", [])),
        ("policy", config.get("policy", "topk_chunks")),
        *(("baselines.enabled", b) for b in config.get("baselines", {}).get("enabled", [])),
    ]
    for key, name in segments:
        if why := segment_problem(name):
            raise ValueError(f"{key}: {why}, but it names a folder of results/: use letters, digits, '.' and '_' only")


def check_variant_names(config: dict) -> None:
    """A variant's name is one folder of results/ and one cell label (``names.variant_name_problem``): never a
    method's label (``ar``, ``sd``, ``triforce``, ``eagle3``), nor with a cell-label separator (``@``, ``+``); and
    no two variants train the same hyper-parameters."""
    for name in config["variants"]:
        if why := names.variant_name_problem(name):
            raise ValueError(f"variants: {why}")
    same = {}  # merged hparams -> the first variant that trains them (two would be one drafter under two names)
    for v, o in config["variants"].items():
        first = same.setdefault(repr(sorted({**config["training"], **o}.items())), v)
        if first != v:
            raise ValueError(
                f"variants.{v} trains exactly what variants.{first} trains: give it other hyper-parameters"
            )


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
    """Hyper-parameters the trainer accepts (``settings.TrainingHparams``, the one home of their rules: one weight per
    budget, ...) for `training` and every variant, and a single-budget variant trained at the budget its table
    names."""
    for name, hp in [("training", config["training"])] + [
        (f"variants.{v}", {**config["training"], **o}) for v, o in config["variants"].items()
    ]:
        try:
            TrainingHparams.from_json(hp)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{name}: {err}") from None
    trained = {**config["training"], **config["variants"].get(names.SINGLE, {})}["budgets"]
    if trained != [config["single_budget"]["trained_budget"]]:
        raise ValueError(
            f"single_budget.trained_budget = {config['single_budget']['trained_budget']} but the {names.SINGLE} "
            f"variant trains at budgets {trained}: the table's label would not say what was trained"
        )


def check_chunks(config: dict) -> None:
    """A budget keeps whole chunks of ``chunk_size`` tokens (TopKChunks keeps ⌊B / chunk_size⌋ of them): a budget
    that is not a positive multiple of its chunk size would decode with fewer prompt tokens than its label B says
    (0 when the chunk is larger than B)."""
    chunk = config.get("chunk_size", 8)
    for i, budget in enumerate(config["budgets"]):
        refuse_partial_chunk(f"budgets[{i}]", budget, "chunk_size", chunk)
    refuse_partial_chunk("single_budget.trained_budget", config["single_budget"]["trained_budget"], "chunk_size", chunk)
    train_chunk = config["training"].get("chunk_size", TrainingHparams.chunk_size)
    for name, hp in [("training", config["training"])] + [
        (f"variants.{v}", {**config["training"], **o}) for v, o in config["variants"].items()
    ]:
        for i, budget in enumerate(hp["budgets"]):
            refuse_partial_chunk(f"{name}.budgets[{i}]", budget, "training.chunk_size", train_chunk)
    if names.TRIFORCE in config.get("baselines", {}).get("enabled", []):
        triforce = config["baselines"].get(names.TRIFORCE) or {}
        chunk_key = "baselines.triforce.chunk_size" if "chunk_size" in triforce else "chunk_size"
        refuse_partial_chunk(
            "baselines.triforce.retrieval_budget",
            triforce.get("retrieval_budget", 256),
            chunk_key,
            triforce.get("chunk_size", chunk),
        )


def refuse_partial_chunk(key: str, budget: int, chunk_key: str, chunk: int) -> None:
    if budget < chunk or budget % chunk:
        kept = budget // chunk * chunk
        raise ValueError(
            f"{key} = {budget} is not a positive multiple of {chunk_key} = {chunk}: it would keep {kept} prompt "
            f"tokens, not {budget}; make the budget a multiple of {chunk_key}, or {chunk_key} a divisor of it"
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
