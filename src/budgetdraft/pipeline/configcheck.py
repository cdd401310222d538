"""A config's problems in plain language, before any job is planned: one entry point, `check_config`.

In order: a key given twice (in a config file, `check_config_files`, or on the command line, `check_config_args`);
text a folder or a page cannot hold (a key with a newline, markup in a display name) and numbers that are not
finite (`.nan`, `.inf`: every JSON-schema bound compares False with NaN, so the schema lets them through); then the
schema, validated once, with every problem one plain line (``budgets[0] = 0: must be >= 1 (drafter KV budget B in
tokens), at config['budgets'][0]``) and its defaults filled in, a whole-number float read as the integer it is
(``replicates: 2.0``); then what a schema cannot express (`check_consistency`): that the sections agree with each
other and with the verifier, a ValueError at the first inconsistency, naming its key and value.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import re
import sys
import unicodedata
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator, validators

from budgetdraft.base import methods, names, revisions
from budgetdraft.base.defaults import CHUNK_SIZE, ENGINE, GRAPHS, POLICY, SCORE_WINDOW, SEEDS, TRIFORCE_DEFAULTS
from budgetdraft.decoding.loading import check_spec, max_positions
from budgetdraft.evaluation.cellfile import path_key
from budgetdraft.pipeline.commands.flags import refuse_partial_chunk
from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams

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


def check_config_args(argv) -> None:
    """Raise ValueError when a Snakemake command line (``argv``, the program first) gives one ``--config`` key twice,
    or ``--config`` / ``-C`` or ``--configfile`` twice in any spelling (``-Ca=1``, ``-C a=1``, ``--config=a=1``):
    Snakemake keeps the last value of a key, and of two flags only the last flag's keys or files, without a word."""
    uses = command_line_uses(argv)
    seen = {}
    for dest, _, values in uses:
        for given in values if dest == "config" else ():
            key = given.split("=", 1)[0]
            if key in seen:
                raise ValueError(
                    f"--config gives {key!r} twice ({seen[key]} and {given}): Snakemake would keep only the last; "
                    "give it once"
                )
            seen[key] = given
    for dest, flag in (("config", "--config"), ("configfile", "--configfile")):
        given = [(option, values) for d, option, values in uses if d == dest]
        if len(given) > 1:
            raise ValueError(flag_twice(flag, given))


def flag_twice(flag: str, given: list[tuple[str, list[str]]]) -> str:
    """One line for a ``--config`` or ``--configfile`` flag given more than once (``given``: each use's option as
    written and its values)."""
    written = ", then ".join(" ".join([option, *values]) for option, values in given)
    dropped = " ".join(v.split("=", 1)[0] if flag == "--config" else v for _, values in given[:-1] for v in values)
    what = "keys" if flag == "--config" else "files"
    every = " ".join(v for _, values in given for v in values)
    return (
        f"{flag} is given {len(given)} times ({written}): Snakemake keeps only the last flag's {what}, so "
        f"{dropped or 'nothing'} would be dropped without a word; give them all after one {flag} ({flag} {every})"
    )


def command_line_uses(argv) -> list[tuple[str, str, list[str]]]:
    """Each ``--config`` / ``-C`` and ``--configfile`` of a Snakemake command line (``argv``, the program first) as
    Snakemake's own argument parser reads it, in order: (``config`` or ``configfile``, the option, its values). The
    parser keeps only the last use of each; this reads every one. [] for a command line that parser refuses
    (Snakemake run through its API, not its command line)."""
    args = [str(a) for a in list(argv or ())[1:]]
    if not args:
        return []
    from snakemake.cli import get_argument_parser

    uses = []

    class Counted(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            uses.append((self.dest, option_string, [str(v) for v in values or ()]))
            super().__call__(parser, namespace, values, option_string)

    parser = get_argument_parser()
    for action in parser._actions:  # the parser's own actions, each counting its uses where it stores them
        if action.dest in ("config", "configfile"):
            action.__class__ = type(f"Counted{type(action).__name__}", (Counted, type(action)), {})
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_known_args(args)
    except SystemExit:
        return []
    return uses


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


def check_config(config: dict, schema: str | Path | None = None, files=(), argv=(), overrides=None) -> None:
    """Every check of a config before any job is planned, the one entry point (the Snakefile calls it once): the
    config files (``files``) and the command line (``argv``) give no key twice; ``overrides`` (Snakemake's
    ``--config``, every nested scalar a string) are merged in typed as a config file's; names and numbers are ones a
    run can use; the ``schema`` (a path) holds, validated once, its defaults filled in and whole-number floats read as
    integers; the sections agree (`check_consistency`). ``config`` is updated in place, as Snakemake's own
    ``validate`` does. A ValueError lists every problem up to the schema, one line each, or names the first
    inconsistency."""
    check_config_files(files)
    check_config_args(argv)
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


def method_problems(config: dict) -> list[str]:
    """Each name of `baselines.enabled` and `controls` must be a method declared for that list
    (budgetdraft.base.methods): one line per other name."""
    problems = []
    lists = {
        "baselines.enabled": (config.get("baselines") or {}).get("enabled", []),
        "controls": config.get("controls"),
    }
    for key, given in lists.items():
        known = [label for label, m in methods.REGISTRY.items() if m.enabled_by == key.split(".")[0]]
        for i, name in enumerate(given if isinstance(given, list) else []):
            if name not in known:
                problems.append(f"{key}[{i}] = {name!r}: must be one of {', '.join(known)}")
    return problems


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
    check_methods(config)
    check_variant_names(config)
    check_given(config)
    check_models(config)
    check_engine_device(config)
    check_references(config)
    check_sources(config)
    order_contexts(config)
    check_gammas(config)
    check_training(config)
    check_chunks(config)
    check_targets(config)
    check_sizes(config)
    check_seeds(config)
    check_baselines(config)


SEGMENT_LENGTH = 64  # characters of a name that becomes a folder: far below a file system's 255 bytes per name


# Names Windows keeps for devices, whatever their case or extension (`aux`, `CON.x`): no folder can have one there.
WINDOWS_DEVICES = {"CON", "PRN", "AUX", "NUL", *(f"{port}{n}" for port in ("COM", "LPT") for n in range(10))}
SAFE = "use letters, digits, '.' and '_' only"


def segment_problem(name) -> str | None:
    """Why ``name`` cannot be one folder or file name of a path under results/ (None: it can), and the fix."""
    name = str(name)
    if name in ("", ".", ".."):
        return f"{name!r} is not a folder name of its own, but it names a folder of results/: {SAFE}"
    if any(sep in name for sep in ("/", "\\", "\0")):
        return f"{name!r} contains a path separator, but it names a folder of results/: {SAFE}"
    if len(name) > SEGMENT_LENGTH:
        return (
            f"{name[:20]!r}... has {len(name)} characters, more than the {SEGMENT_LENGTH} a folder name may have, but "
            f"it names a folder of results/: {SAFE}"
        )
    if name.split(".", 1)[0].strip().upper() in WINDOWS_DEVICES:
        return (
            f"{name!r} is a device name on Windows (CON, PRN, AUX, NUL, COM0-9, LPT0-9, with any extension), where "
            "no folder can have it, but it names a folder of results/: rename it"
        )
    if name[-1] in ". ":
        return (
            f"{name!r} ends in {name[-1]!r}, which Windows drops ({name!r} and {name.rstrip('. ')!r} are one folder "
            "there), but it names a folder of results/: remove it"
        )
    return None


def check_methods(config: dict) -> None:
    """Each name of `baselines.enabled` and `controls` is a method declared for that list (budgetdraft.base.methods,
    the one list of them: the schema keeps none)."""
    lists = {
        "baselines.enabled": config.get("baselines", {}).get("enabled", []),
        "controls": config.get("controls", []),
    }
    for key, given in lists.items():
        known = [label for label, m in methods.REGISTRY.items() if m.enabled_by == key.split(".")[0]]
        for i, name in enumerate(given):
            if name not in known:
                raise ValueError(f"{key}[{i}] = {name!r}: must be one of {', '.join(known)}")


def check_path_names(config: dict) -> None:
    """Every key that becomes a path segment (results/cells/LABEL[@POLICY]/DATASET/CONTEXT/..., results/drafters/
    rR/VARIANT, results/data/prompts/DATASET/CONTEXT.parquet) is one folder name: never '.', '..' or with a '/'
    (a context '..' would write every dataset's cells into one folder, overwriting each other), nor one that
    differs from another of its folder only by case (on macOS, Windows and many network shares `LWM` and `lwm` are
    one folder: their prompts, drafters and cells would overwrite each other)."""
    policies = config.get("policies", {}).get("names", [])
    baselines = config.get("baselines", {}).get("enabled", [])
    folders = {  # names that share a folder: cell labels (methods and variants) / datasets / contexts
        "labels": [
            *(("the method label", m) for m in methods.REGISTRY),
            *(("variants", k) for k in config["variants"]),
        ],
        "datasets": [("datasets", k) for k in config["datasets"]],
        "contexts": [("contexts", k) for k in config["contexts"]],
    }
    segments = [
        *folders["datasets"],
        *folders["contexts"],
        *(("variants", k) for k in config["variants"]),
        *(("policies.names", p) for p in policies),
        ("policy", config.get("policy", POLICY)),
        *(("baselines.enabled", b) for b in baselines),
    ]
    for key, name in segments:
        if why := segment_problem(name):
            raise ValueError(f"{key}: {why}")
    for group in folders.values():
        seen = {}
        for key, name in group:
            first_key, first = seen.setdefault(str(name).casefold(), (key, name))
            if first != name:
                raise ValueError(
                    f"{key}: {name!r} differs only by case from {first_key} {first!r}: on macOS, Windows and many "
                    "network shares the two are one folder of results/ and would overwrite each other; rename one"
                )


def check_variant_names(config: dict) -> None:
    """A variant's name is one folder of results/ and one cell label (``names.variant_name_problem``): never a
    method's label (``ar``, ``sd``, ``triforce``, ``eagle3``), nor with a cell-label separator (``@``, ``+``); and
    no two variants train the same hyper-parameters (`check_training`)."""
    for name in config["variants"]:
        if why := names.variant_name_problem(name):
            raise ValueError(f"variants: {why}")


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
    check_base_range(config)


def check_base_range(config: dict) -> None:
    """The base drafter trains only within the positions its drafter knows (its native range: an embedded spec's
    ``positions=N``, else its config.json's max_position_embeddings where readable), as llama-68m never saw more
    than its 2,048: it is then evaluated beyond them, with explicit real positions, as the paper's drafter is."""
    base, native = config.get("base_drafter"), max_positions(config["drafter"])
    if native is None:
        return
    longest = max(config["contexts"].values())
    if methods.PI in config.get("controls", []) and longest <= native:
        raise ValueError(
            f"controls: pi interpolates the drafter's positions to cover the longest context ({longest} tokens), but "
            f"the drafter {config['drafter']!r} knows {native} positions already: nothing extrapolates, so there is "
            "nothing to interpolate; remove pi from controls (or give the drafter a shorter range, spec option "
            "positions=N)"
        )
    if not base:
        return
    window = base["data"]["prefix_len"] + base["data"]["cont_len"]
    if window > native:
        raise ValueError(
            f"base_drafter.data.prefix_len + cont_len = {window} is more than the {native} positions the drafter "
            f"{config['drafter']!r} knows: the base drafter would be trained beyond its native range; shorten its "
            "windows to at most its range"
        )


def check_engine_device(config: dict) -> None:
    """CUDA graphs exist on CUDA devices only: ``engine: graphs`` elsewhere is refused rather than run as something
    else (compiling the steps on a CPU would time the compiler, not the graphs the setting names)."""
    engine, device = config.get("engine", ENGINE), str(config["device"])
    if engine == GRAPHS and not device.startswith("cuda"):
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


def check_sources(config: dict) -> None:
    """A dataset of the authors' own prompts (`source: authors_*`) names their file (`path`: the file, or their
    data/ folder holding it), and it is there; no other source takes a `path`."""
    from budgetdraft.training.data import AUTHORS_FILES

    for key, d in config["datasets"].items():
        source, path = d["source"], d.get("path")
        if source not in AUTHORS_FILES:
            if path is not None:
                raise ValueError(f"datasets.{key}.path = {path!r}: source {source} reads no file; remove it")
            continue
        if path is None:
            raise ValueError(
                f"datasets.{key}: source {source} reads the authors' data/{AUTHORS_FILES[source]}: give its `path` "
                "(their repository's data/ folder, or the file)"
            )
        where = Path(os.path.expanduser(path))
        file = where / AUTHORS_FILES[source] if where.is_dir() else where
        if not file.is_file():
            raise ValueError(
                f"datasets.{key}.path = {path!r}: no file {file} (the authors' data/{AUTHORS_FILES[source]})"
            )


def order_contexts(config: dict) -> None:
    """`contexts` (and `comparison.contexts`) shortest first, by their prompt tokens: every finding that compares a
    short context with a long one, the collapse figure's axis and the paper diff read the first as the shortest. A
    config that lists them otherwise is reordered here, in place, and says so in one line; two contexts of the same
    length are refused (neither is the shorter)."""
    tokens = config["contexts"]
    by_length: dict[int, str] = {}
    for label, n in tokens.items():
        if n in by_length:
            raise ValueError(
                f"contexts.{label} = {n} prompt tokens, as contexts.{by_length[n]}: two contexts of one length are "
                "one context; give each its own length"
            )
        by_length[n] = label
    order = sorted(tokens, key=tokens.get)
    if list(tokens) != order:
        print(
            f"budgetdraft: contexts listed as {', '.join(tokens)}; taken shortest first by their prompt tokens: "
            f"{', '.join(f'{c} ({tokens[c]})' for c in order)}",
            file=sys.stderr,
        )
        config["contexts"] = {c: tokens[c] for c in order}
    config["comparison"]["contexts"] = sorted(config["comparison"]["contexts"], key=tokens.get)


def check_gammas(config: dict) -> None:
    """Every γ at most ``max_new_tokens``: a run generates that many tokens, so a longer draft cannot be accepted
    whole, and the engine's fixed shapes would still hold γ + 1 slots of every cache for it (γ = 100000 asked for
    30 GB of a 24 GB machine)."""
    new = config["max_new_tokens"]
    gammas = [(f"gammas.{c}[{i}]", g) for c, gs in config["gammas"].items() for i, g in enumerate(gs)]
    gammas += [(f"{key}.gamma", config[key]["gamma"]) for key in ("collapse", "comparison", "single_budget")]
    gammas += [("gamma_fixed", config.get("gamma_fixed")), ("policies.gamma", config.get("policies", {}).get("gamma"))]
    for key, gamma in gammas:
        if gamma is not None and gamma > new:
            raise ValueError(
                f"{key} = {gamma} is more than max_new_tokens = {new}: a run generates {new} tokens, so no longer "
                "draft can be accepted whole; lower it, or raise max_new_tokens"
            )


def trained_hparams(config: dict) -> list[tuple[str, dict]]:
    """(key, the hyper-parameters handed to the trainer, before its defaults) of `training` and of every variant
    (`training` merged with its overrides)."""
    return [("training", config["training"])] + [
        (f"variants.{v}", {**config["training"], **o}) for v, o in config["variants"].items() if "checkpoint" not in o
    ]


GIVEN_KEYS = ("checkpoint", "subfolder", "revision", "lambda_c", "budgets", "budget_weights", "not_run")  # not how


def check_given(config: dict) -> None:
    """A variant given as a checkpoint is not trained here: a training key beside `checkpoint` would have no effect
    (refused, naming it), a revision pins only a hub checkpoint, and a local checkpoint must exist and share the
    verifier's vocabulary (refused naming both; a hub checkpoint is checked when exported, the verifier too when it
    is a hub id)."""
    from budgetdraft.decoding.export import vocabulary_problem

    for label, given in config["variants"].items():
        if "checkpoint" not in given:
            continue
        for key in given:
            if key not in GIVEN_KEYS:
                raise ValueError(
                    f"variants.{label}.{key}: {label} is given as a checkpoint, not trained here, so {key} has no "
                    f"effect; remove it (with checkpoint, only {', '.join(GIVEN_KEYS[1:])} say what it is)"
                )
        where = Path(os.path.expanduser(str(given["checkpoint"] or ""))) / given.get("subfolder", "")
        checkpoint = str(given["checkpoint"] or "")
        if given.get("not_run") and checkpoint:
            raise ValueError(
                f"variants.{label}.not_run = {given['not_run']!r} says why it is not run, but it has a checkpoint: "
                "remove one of them"
            )
        if given.get("revision") and checkpoint and revisions.hub_model(checkpoint) is None:
            raise ValueError(
                f"variants.{label}.revision = {given['revision']!r}: {checkpoint!r} is a local checkpoint, and a "
                "revision pins a hub repository's commit; remove it"
            )
        # a path (not a hub id, revisions.hub_model; "/" in it: neither an embedded spec nor a bare name) that is missing
        if "/" in checkpoint and revisions.hub_model(checkpoint) is None and not where.is_dir():
            raise ValueError(
                f"variants.{label}.checkpoint = {str(where)!r}: no such directory (a local checkpoint; a hub "
                "repository is written owner/name)"
            )
        verifier = verifier_directory(config)
        if given["checkpoint"] and where.is_dir() and verifier is not None:
            name = f"variants.{label}.checkpoint = {str(where)!r}"
            if why := vocabulary_problem(where, verifier, name, config["verifier"]):
                raise ValueError(why)


def verifier_directory(config: dict) -> Path | None:
    """The verifier's files where they can be read at plan time: a local directory, or an embedded model's converted
    cache (once converted); None for a hub id (a results/ export may be another config's: never read as this one's)."""
    from budgetdraft.decoding.loading import cache_root, parse_spec

    base, _ = parse_spec(config["verifier"])
    path = Path(os.path.expanduser(config["verifier"]))
    if base.startswith("embedded:"):
        path = cache_root() / "models" / base.split(":", 1)[1]
    return path if (path / "config.json").is_file() else None


def check_training(config: dict) -> None:
    """Hyper-parameters the trainer accepts (``settings.TrainingHparams``, the one home of their rules: one weight per
    budget, ...) for `training` and every variant, and a single-budget variant trained at the budget its table
    names."""
    same = {}  # typed hparams -> the first variant that trains them (two would be one drafter under two names)
    for name, hp in trained_hparams(config):
        try:
            typed = TrainingHparams.from_json(hp)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{name}: {err}") from None
        if name != "training":  # compared as the trainer reads them: lambda_c 1 is lambda_c 1.0
            first = same.setdefault(json.dumps(typed.to_json(), sort_keys=True), name)
            if first != name:
                raise ValueError(f"{name} trains exactly what {first} trains: give it other hyper-parameters")
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
    chunk = config.get("chunk_size", CHUNK_SIZE)
    for i, budget in enumerate(config["budgets"]):
        refuse_partial_chunk(f"budgets[{i}]", budget, "chunk_size", chunk)
    refuse_partial_chunk("single_budget.trained_budget", config["single_budget"]["trained_budget"], "chunk_size", chunk)
    train_chunk = config["training"].get("chunk_size", TrainingHparams.chunk_size)
    for name, hp in trained_hparams(config):
        for i, budget in enumerate(hp["budgets"]):
            refuse_partial_chunk(f"{name}.budgets[{i}]", budget, "training.chunk_size", train_chunk)
    if names.TRIFORCE in config.get("baselines", {}).get("enabled", []):
        triforce = config["baselines"].get(names.TRIFORCE) or {}
        chunk_key = "baselines.triforce.chunk_size" if "chunk_size" in triforce else "chunk_size"
        refuse_partial_chunk(
            "baselines.triforce.retrieval_budget",
            triforce.get("retrieval_budget", TRIFORCE_DEFAULTS["retrieval_budget"]),
            chunk_key,
            triforce.get("chunk_size", chunk),
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


# ---------------------------------------------------------------- sizes and counts, with what each would cost


def shortest(config: dict, contexts=None) -> tuple[str, int]:
    """(label, prompt tokens) of the shortest of ``contexts`` (default: every context)."""
    return min(((c, config["contexts"][c]) for c in contexts or config["contexts"]), key=lambda item: item[1])


def check_sizes(config: dict) -> None:
    """Sizes bounded by what they size: a budget or a score window past the shortest prompt (its cells would be
    full-cache cells under a budget's label; a window scores the whole prompt), a training budget or window past the
    training prefix P, a warm-up longer than a run, and held-out sequences that leave none to train on."""
    label, tokens = shortest(config)
    for i, budget in enumerate(config["budgets"]):
        if budget > tokens:
            raise ValueError(
                f"budgets[{i}] = {budget} is more than contexts.{label} = {tokens} prompt tokens: its cells there would "
                f"keep the whole prompt, a full cache under the label B{budget}; lower it, or drop the context"
            )
    window = config.get("score_window", SCORE_WINDOW)
    if window > tokens:
        raise ValueError(
            f"score_window = {window} is more than contexts.{label} = {tokens} prompt tokens: the chunks are scored by "
            "the last score_window prefill queries, and the prompt has fewer; lower it"
        )
    prefix = config["training_data"]["prefix_len"]
    for name, hp in trained_hparams(config):
        for i, budget in enumerate(hp["budgets"]):
            if budget > prefix:
                raise ValueError(
                    f"{name}.budgets[{i}] = {budget} is more than training_data.prefix_len = {prefix}: the sparse view "
                    "would keep the whole prefix, the full-cache view under a budget's name; lower it"
                )
    train_window = config["training"].get("score_window", SCORE_WINDOW)
    if train_window > prefix:
        raise ValueError(
            f"training.score_window = {train_window} is more than training_data.prefix_len = {prefix}: the prefix has "
            "fewer queries to score its chunks with; lower it"
        )
    new, warm = config["max_new_tokens"], config.get("warmup_tokens", 0)
    if warm > new:
        raise ValueError(
            f"warmup_tokens = {warm} is more than max_new_tokens = {new}: a warm-up run would decode more than a timed "
            "one and past the positions checked for it; lower it (0 = max_new_tokens)"
        )
    heldout = config["training"].get("heldout", 0)
    for key, data in [("training_data", config["training_data"])] + (
        [("base_drafter.data", config["base_drafter"]["data"])] if config.get("base_drafter") else []
    ):
        if heldout >= data["sequences"]:
            raise ValueError(
                f"training.heldout = {heldout} leaves none of the {data['sequences']} sequences of {key} to train on; "
                "lower it"
            )


def check_seeds(config: dict) -> None:
    """Replicate r trains with seed + r (``TrainingChain.seeded``): the last replicate's seed stays a seed (at most 2^32 - 1;
    2^32 - 1 with replicates: 2 trained with 2^32)."""
    last = config["replicates"] - 1
    seeds = [("training.seed", config["training"].get("seed", TrainingHparams.seed))]
    if config.get("base_drafter"):
        seeds.append(("base_drafter.training.seed", config["base_drafter"]["training"].get("seed", seeds[0][1])))
    for key, seed in seeds:
        if seed + last >= SEEDS:
            raise ValueError(
                f"{key} = {seed} with replicates = {last + 1}: replicate {last} would train with seed {seed + last}, "
                f"past {SEEDS - 1}; lower {key} to at most {SEEDS - 1 - last}"
            )


def check_baselines(config: dict) -> None:
    """The baselines' sizes: TriForce's inner draft and StreamingLLM cache (both pre-allocated in every cache it
    keeps) within what its cells decode, its sinks within that cache; EAGLE-3's feature layers within the verifier's
    and its unroll within the window it scores."""
    enabled = config["baselines"].get("enabled", [])
    if names.TRIFORCE in enabled:
        triforce = {**TRIFORCE_DEFAULTS, **(config["baselines"].get(names.TRIFORCE) or {})}
        gamma, key = config["comparison"]["gamma"], "baselines.triforce"
        if triforce["gamma_inner"] > gamma:
            raise ValueError(
                f"{key}.gamma_inner = {triforce['gamma_inner']} is more than comparison.gamma = {gamma}, the γ of "
                f"TriForce's cells: it drafts at most γ tokens a round, and would pre-allocate {triforce['gamma_inner']} "
                "slots in each of its caches' layers for them; lower it"
            )
        label, tokens = shortest(config, config["comparison"]["contexts"])
        if triforce["streaming_budget"] > tokens:
            raise ValueError(
                f"{key}.streaming_budget = {triforce['streaming_budget']} is more than contexts.{label} = {tokens} "
                "prompt tokens (comparison.contexts): its small drafter's StreamingLLM cache would keep the whole "
                f"prompt and pre-allocate {triforce['streaming_budget']} slots a layer; lower it"
            )
        if not triforce["sinks"] < triforce["streaming_budget"]:
            raise ValueError(
                f"{key}.sinks = {triforce['sinks']} must be less than streaming_budget = {triforce['streaming_budget']}"
                ": the StreamingLLM cache keeps the sinks and at least one recent token"
            )
    if names.EAGLE3 in enabled:
        check_eagle3(config)


def check_eagle3(config: dict) -> None:
    """EAGLE-3's head reads the outputs of verifier layers ``layer_ids`` (an IndexError in training past the
    verifier's last layer: its layer count read from its config.json, or the shapes the estimate knows) and unrolls
    ``ttt_steps`` steps over the last ``ttt_window`` positions (a step past the window scores nothing)."""
    from budgetdraft.pipeline.estimate import shape

    key = "baselines.eagle3.training"
    hp = Eagle3Hparams.from_json(
        {"device": config["device"], **config["baselines"].get(names.EAGLE3, {}).get("training", {})}
    )
    try:
        layers = shape(config["verifier"]).layers
    except (ValueError, OSError, KeyError):
        layers = None  # not known offline: the head's training checks it
    for i, layer in enumerate(hp.layer_ids or ()):
        if layers is not None and layer >= layers:
            raise ValueError(
                f"{key}.layer_ids[{i}] = {layer}: the verifier {config['verifier']} has {layers} decoder layers, "
                f"numbered 0-{layers - 1}; pick layers below {layers}"
            )
    if hp.ttt_steps > hp.ttt_window:
        raise ValueError(
            f"{key}.ttt_steps = {hp.ttt_steps} is more than ttt_window = {hp.ttt_window}: an unroll step past the "
            "window scores no position, and each holds another copy of the head's activations; lower it"
        )


MAX_CELL_FILES = 20_000  # 893 in config.yaml (the grid and the `policies` target), 22 x that: the step before any
#                          job reads each, and Snakemake plans each as a job
MAX_RUNS = 2_000_000  # decoding runs of every cell file (prompts x (warm-up + timed runs)): 36,000 at paper scale


def check_plan_size(config: dict) -> None:
    """What the config would plan, counted before it is planned (``replicates: 300000``, a typo for 3, took minutes
    and gigabytes before a MemoryError): the cell files of every target (the plan of one replicate, scaled) and the
    decoding runs they make, each refused past its limit with the number it would cost."""
    from budgetdraft.pipeline.plan import Plan

    replicates = config["replicates"]
    one = [path_key(cell) for cell in Plan({**config, "replicates": 1}).cells.every_cell()]
    per_replicate = sum(key["replicate"] != names.SHARED for key in one)
    shared = len(one) - per_replicate
    cells = shared + per_replicate * replicates
    if cells > MAX_CELL_FILES:
        raise ValueError(
            f"replicates = {replicates}: the plan would measure {cells:,} cell files ({per_replicate:,} per "
            f"replicate + {shared:,} shared), more than the {MAX_CELL_FILES:,} one config may plan; lower replicates, "
            "or the grid's datasets, contexts, budgets, gammas or variants"
        )
    runs_each = config["warmup"] + config["repeats"]
    prompts = {d: config["datasets"][d].get("samples", config["samples"]) for d in config["datasets"]}
    runs = sum(prompts[k["dataset"]] * runs_each * (1 if k["replicate"] == names.SHARED else replicates) for k in one)
    if runs > MAX_RUNS:
        raise ValueError(
            f"repeats = {config['repeats']}, warmup = {config['warmup']}, samples = {config['samples']}: the "
            f"plan's {cells:,} cell files would decode {runs:,} runs (each prompt warmup + repeats times), more than "
            f"the {MAX_RUNS:,} one config may plan; lower repeats, warmup or samples"
        )
