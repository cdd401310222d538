"""A config's problems in plain language, before any job is planned: one entry point, `check_config`.

In order: a key given twice in a config file (`check_config_files`; one given twice on the command line Snakemake
hides from a workflow: `check_config`); text a folder or a page cannot hold (a key with a newline, markup in a
display name) and numbers that are not finite (`.nan`, `.inf`: every JSON-schema bound compares False with NaN, so
the schema lets them through); then the schema, validated once, with every problem one plain line (``budgets[0] = 0:
must be >= 1 (drafter KV budget B in tokens), at config['budgets'][0]``) and its defaults filled in, a whole-number
float read as the integer it is (``replicates: 2.0``); then what a schema cannot express (`check_consistency`): that
the sections agree with each other and with the verifier, a ValueError at the first inconsistency, naming its key
and value. Those checks live by their job: `configrefs` (names, methods, models, references between sections),
`configgiven` (checkpoints given, not trained) and `configbounds` (sizes and counts, with what each would cost).
"""

from __future__ import annotations

import copy
import math
import re
import unicodedata
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator, validators

from budgetdraft.pipeline.configbounds import (
    check_baselines,
    check_chunks,
    check_plan_size,
    check_seeds,
    check_sizes,
    check_targets,
    check_training,
)
from budgetdraft.pipeline.configgiven import check_given
from budgetdraft.pipeline.configrefs import (
    check_engine_device,
    check_gammas,
    check_methods,
    check_models,
    check_path_names,
    check_policies,
    check_references,
    check_revisions,
    check_sources,
    check_variant_names,
    order_contexts,
)

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


def schema_problem(error) -> str:
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
    """Every problem of ``config`` against the YAML JSON-schema at ``schema_path``, one line each, in key order
    (``config`` is left as it is)."""
    return _validate(copy.deepcopy(config), yaml.safe_load(Path(schema_path).read_text()))


def _validate(config: dict, schema: dict) -> list[str]:
    """The schema's problems of ``config``, one line each, its defaults filled in as it is validated (jsonschema's
    recipe, as Snakemake's ``validate(set_default=True)``: a missing property takes its ``default``)."""
    base = Draft202012Validator
    properties = base.VALIDATORS["properties"]

    def fill(validator, props, instance, schema):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from properties(validator, props, instance, schema)

    filling = validators.extend(base, {"properties": fill})
    errors = filling(schema).iter_errors(config)
    return [schema_problem(e) for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])]


def whole_numbers(value, schema: dict, root: dict):
    """``value`` with every whole-number float that the schema wants an integer read as that integer (YAML reads
    ``replicates: 2.0`` as a float, which JSON-schema counts as an integer and ``range()`` refuses)."""
    while isinstance(schema, dict) and "$ref" in schema:  # local references only: "#/definitions/NAME"
        schema = root["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(value, dict):
        props, extra = schema.get("properties", {}), schema.get("additionalProperties", {})
        return {k: whole_numbers(v, props.get(k, extra), root) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v, schema.get("items", {}), root) for v in value]
    wants_integer = "integer" in (schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")])
    if wants_integer and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def walk(value, path=()):
    """(path, key or value) of every mapping key and every scalar of a config, depth first."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*path, k), k
            yield from walk(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from walk(v, (*path, i))
    else:
        yield path, value


CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MARKUP = set("<>&\"'`")  # HTML's: a display name is written into LaTeX, HTML pages and the report


def text_problems(config: dict) -> list[str]:
    """Keys that are no name (a control character, a newline, spaces around: `gs\\n` passes the schema's ``^...$``
    and then names no file), numbers that are not finite, and markup in a dataset's display name (`datasets.*.name`,
    a column title of every table and page)."""
    problems = []
    for path, item in walk(config):
        if isinstance(item, str) and path and item == path[-1] and (CONTROL.search(item) or item != item.strip()):
            problems.append(
                f"{dotted(path[:-1])}: the key {item!r} has a control character or surrounding spaces: remove them"
            )
        elif isinstance(item, float) and not math.isfinite(item):
            problems.append(f"{dotted(path)} = {item!r}: must be a finite number")
    return problems + display_name_problems(config)


TITLE_LENGTH = 64  # characters of a column title: wider than any table's column already
# Unicode categories a reader cannot see: controls (C0, C1: U+0085), format characters (U+202E right-to-left
# override, zero-width spaces and joiners, U+FEFF), line and paragraph separators (U+2028, U+2029), private use,
# surrogates and unassigned code points; a space separator other than U+0020 (U+00A0, U+3000) reads as a space.
UNSEEN = {  # category -> what a character of it without a Unicode name is
    "Cc": "a control character",
    "Cf": "a format character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Zs": "a space other than U+0020",
    "Co": "a private-use character",
    "Cs": "a surrogate",
    "Cn": "an unassigned code point",
}


def display_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a column title of every table, HTML page and the report (None: it can): markup, a
    character a reader cannot see (or takes for another: a space other than U+0020), spaces around it, nothing to
    show, or more than `TITLE_LENGTH` characters."""
    if MARKUP & set(name) or CONTROL.search(name):
        return (
            f"a column title may not hold {' '.join(sorted(MARKUP))} or a control character (it is written into "
            "LaTeX tables and HTML pages)"
        )
    unseen = next((c for c in name if c != " " and unicodedata.category(c) in UNSEEN), None)
    if unseen is not None:
        what = unicodedata.name(unseen, UNSEEN[unicodedata.category(unseen)])
        return f"holds U+{ord(unseen):04X} ({what}), which a reader cannot see in a column title: remove it"
    if not name.strip():
        return "is empty: a column title must show the dataset's name"
    if name != name.strip():
        return "has spaces around it, which a reader cannot see in a column title: remove them"
    if len(name) > TITLE_LENGTH:
        return f"has {len(name)} characters, more than the {TITLE_LENGTH} a column title may have: shorten it"
    return None


def display_name_problems(config: dict) -> list[str]:
    """The datasets' display names (`datasets.*.name`, a column title of every table and page): each one a reader can
    see (`display_name_problem`), and no two a reader cannot tell apart: equal once Unicode-normalised (NFKC: "Café"
    composed and decomposed, "ﬁ" and "fi") and case-folded."""
    problems, seen = [], {}
    for key, dataset in config.get("datasets", {}).items():
        name = dataset.get("name") if isinstance(dataset, dict) else None
        if not isinstance(name, str):
            continue
        if why := display_name_problem(name):
            shown = repr(name) if len(name) <= TITLE_LENGTH else f"{name[:20]!r}..."  # the line stays one line
            problems.append(f"datasets.{key}.name = {shown}: {why}")
            continue
        first = seen.setdefault(" ".join(unicodedata.normalize("NFKC", name).casefold().split()), key)
        if first != key:
            problems.append(
                f"datasets.{key}.name = {name!r} reads as datasets.{first}.name = "
                f"{config['datasets'][first]['name']!r}: two columns a reader cannot tell apart; rename one"
            )
    return problems


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


def command_line_config(given: dict, files) -> dict:
    """What ``--config`` gave: the entries of ``given`` (the config as Snakemake hands it to the Snakefile before its
    ``configfile:`` directive: the command line's config files merged in order, then ``--config``) that those
    ``files`` do not give as they are, at every depth. Snakemake reads a nested ``--config`` value with every scalar a
    string (`typed_scalars`), so a value a file gives as 0.25 and ``--config`` as '0.25' is ``--config``'s. A value
    ``--config`` gives exactly as a file does is the file's: the same either way."""
    from_files: dict = {}
    for path in files:
        merge(from_files, copy.deepcopy(_load(path)))
    return _differences(given, from_files)


def _load(path) -> dict:
    """The mapping a config file holds ({} for one that PyYAML does not read as a mapping: Snakemake read it)."""
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _differences(given: dict, base: dict) -> dict:
    """The entries of ``given`` that ``base`` does not hold as they are (same type and value), at every depth."""
    out = {}
    for key, value in given.items():
        known = base.get(key, _MISSING)
        if isinstance(value, dict) and isinstance(known, dict):
            if nested := _differences(value, known):
                out[key] = nested
        elif type(value) is not type(known) or value != known:
            out[key] = value
    return out


_MISSING = object()


def check_config(config: dict, schema: str | Path | None = None, files=(), overrides=None) -> None:
    """Every check of a config before any job is planned, the one entry point (the Snakefile calls it once): the
    config files (``files``) give no key twice; ``overrides`` (Snakemake's ``--config``, every nested scalar a
    string: `command_line_config`) are merged in typed as a config file's; names and numbers are ones a run can use;
    the ``schema`` (a path) holds, validated once, its defaults filled in and whole-number floats read as integers;
    the sections agree (`check_consistency`). ``config`` is updated in place, as Snakemake's own ``validate`` does. A
    ValueError lists every problem up to the schema, one line each, or names the first inconsistency.

    A command line that gives a ``--config`` key twice, or ``--config`` / ``--configfile`` twice, is not refused here:
    Snakemake keeps the last without a word, and a workflow sees only what it kept (``config``,
    ``workflow.configfiles``): the command line itself is no part of Snakemake's public API."""
    check_config_files(files)
    tree = yaml.safe_load(Path(schema).read_text()) if schema else None
    merge(config, typed_scalars(overrides or {}, tree))
    problems = text_problems(config)
    if tree is not None:
        problems += _validate(config, tree)
    if problems:
        raise ValueError(f"the config has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    if tree is not None:
        config.update(whole_numbers(config, tree, tree))
    check_consistency(config)
    if tree is not None:  # the plan reads the schema's defaults
        check_plan_size(config)


def merge(config: dict, overrides: dict) -> None:
    """``overrides`` merged into ``config`` key by key at every depth (as Snakemake merges ``--config``)."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merge(config[key], value)
        else:
            config[key] = value


def check_consistency(config: dict) -> None:
    """Raise ValueError naming the key and value of the first inconsistency the schema cannot express."""
    check_path_names(config)
    check_policies(config)
    check_methods(config)
    check_variant_names(config)
    check_given(config)
    check_models(config)
    check_engine_device(config)
    check_references(config)
    check_revisions(config)
    check_sources(config)
    order_contexts(config)
    check_gammas(config)
    check_training(config)
    check_chunks(config)
    check_targets(config)
    check_sizes(config)
    check_seeds(config)
    check_baselines(config)
