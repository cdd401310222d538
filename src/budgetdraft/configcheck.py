"""Plain-language schema errors: one line per problem of a config, naming the key, its value and the rule.

Snakemake's `validate` reports the first error with the whole sub-schema dumped; the Snakefile calls
`schema_problems` first, so that a user reads e.g. ``budgets[0] = 0: must be >= 1 (drafter KV budget B in
tokens), at config['budgets'][0]`` for every problem at once, before any job is planned.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

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
