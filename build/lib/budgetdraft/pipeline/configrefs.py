"""What a config's sections name and must agree on, beyond what its schema can express (called by
`budgetdraft.pipeline.configcheck.check_consistency`): names that become folders of results/, the methods and
variants a config runs, its models and their positions, what one section names in another (datasets, contexts,
budgets, γ), the repositories `revisions` pins, the authors' prompt files, and the contexts in order of their
length. Each raises a ValueError naming the key and its value.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from budgetdraft.base import methods, names, revisions
from budgetdraft.base.defaults import ENGINE, GRAPHS, POLICY
from budgetdraft.decoding.loading import check_model_spec, max_positions, parse_model_spec

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
    the one list of them: the schema keeps none); a control may also be a method that drafts (SD, a variant) under
    a registered sparse policy of its own, LABEL@POLICY (`sd@full`)."""
    lists = {
        "baselines.enabled": config.get("baselines", {}).get("enabled", []),
        "controls": config.get("controls", []),
    }
    for key, given in lists.items():
        known = [label for label, m in methods.REGISTRY.items() if m.enabled_by == key.split(".")[0]]
        for i, name in enumerate(given):
            if key == "controls" and methods.POLICY_SEP in name:
                check_policy_control(config, f"{key}[{i}]", name)
            elif name not in known:
                raise ValueError(
                    f"{key}[{i}] = {name!r}: must be one of {', '.join(known)}"
                    + (f", or LABEL{methods.POLICY_SEP}POLICY (e.g. {names.SD_FULL})" if key == "controls" else "")
                )


def check_policy_control(config: dict, key: str, label: str) -> None:
    """A control LABEL@POLICY: LABEL drafts with the paper's drafter (a method whose decoder is declared with it,
    ``Decoder.paper_drafter``: SD, or a variant), POLICY is registered, and it is not the config's own `policy`,
    under which LABEL's cells of the grid run already (`sd@topk_chunks` under `policy: topk_chunks` planned a second
    copy of SD's grid)."""
    parts = names.parse_label(label)
    drafter, policy = parts.method, parts.policy or ""
    drafting = [name for name, m in methods.REGISTRY.items() if m.decoder.paper_drafter and not m.enabled_by]
    drafting += list(config.get("variants", {}))
    if drafter not in drafting:
        raise ValueError(f"{key} = {label!r}: {drafter!r} is not a method that drafts; one of {', '.join(drafting)}")
    known = list(registered_policies())
    if policy not in known:
        raise ValueError(
            f"{key} = {label!r}: {policy!r} is not a sparse policy of budgetdraft.decoding.policies; one of "
            + ", ".join(known)
        )
    if policy == config.get("policy", POLICY):
        raise ValueError(
            f"{key} = {label!r}: {policy!r} is the config's own policy, under which {drafter}'s cells run already; "
            "a control of it would measure them again: remove it, or name another policy"
        )


# the registry of sparse policies (@sparse_policy), read as source: the config check runs before any job, torch-free
POLICY_REGISTRY = Path(__file__).resolve().parents[1] / "decoding" / "policies.py"


def registered_policies() -> dict[str, bool]:
    """{name: budgeted} of each ``@sparse_policy("name", ..., budgeted=...)`` of budgetdraft.decoding.policies, in
    order, read from its source: the one list of policies (the schema keeps none), so a new policy is one function
    there; an unbudgeted policy (`full`) keeps every position, and its cells take no budget."""
    found = {}
    for node in ast.parse(POLICY_REGISTRY.read_text(encoding="utf-8")).body:
        for dec in getattr(node, "decorator_list", []):
            if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "sparse_policy" and dec.args:
                budgeted = [ast.literal_eval(k.value) for k in dec.keywords if k.arg == "budgeted"]
                found[ast.literal_eval(dec.args[0])] = budgeted[0] if budgeted else True
    return found


def check_policies(config: dict) -> None:
    """`policy` and each of `policies.names` is a registered sparse policy (``registered_policies``)."""
    known = list(registered_policies())
    given = [("policy", config.get("policy", POLICY))]
    given += [(f"policies.names[{i}]", p) for i, p in enumerate(config.get("policies", {}).get("names", []))]
    for key, name in given:
        if name not in known:
            raise ValueError(
                f"{key} = {name!r}: not a sparse policy of budgetdraft.decoding.policies; one of {', '.join(known)}"
            )


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
            check_model_spec(config[key])
        except ValueError as e:
            raise ValueError(f"{key} = {config[key]!r}: {e}") from None
        check_model_spec_numbers(key, config[key])
    limit = config["verifier_max_positions"]
    own = max_positions(config["verifier"])  # the configured verifier's own limit, where its config.json is readable
    limit = min(limit, own or limit)
    long = config.get("long_generation") or {}
    new, key = max(
        (config["max_new_tokens"], "max_new_tokens"), (long.get("max_new_tokens", 0), "long_generation.max_new_tokens")
    )
    for label, length in config["contexts"].items():
        if length + new > limit:
            raise ValueError(
                f"contexts.{label} = {length}: prompt + {key} ({new}) exceeds the verifier's {limit} "
                f"positions (verifier_max_positions / the config.json of {config['verifier']})"
            )
    data = config["training_data"]
    if data["prefix_len"] + data["cont_len"] > limit:
        raise ValueError(
            f"training_data.prefix_len + cont_len = {data['prefix_len'] + data['cont_len']} "
            f"exceeds verifier_max_positions = {limit}"
        )
    check_base_range(config)


def check_model_spec_numbers(key: str, model_spec: str) -> None:
    """An embedded spec's numbers written as the numbers they are: ``positions=0064`` is ``positions=64`` to the
    model, but another spec (a second converted copy of the model in the cache, named by the spec, and another
    drafter to every record that names it)."""
    for option, value in parse_model_spec(model_spec)[1].items():
        if value.isdigit() and value != str(int(value)):
            raise ValueError(
                f"{key} = {model_spec!r}: {option}={value} has a leading zero, and names another converted model than "
                f"{option}={int(value)}; write {option}={int(value)}"
            )


def check_base_range(config: dict) -> None:
    """The base drafter trains only within the positions its drafter knows (its native range: an embedded spec's
    ``positions=N``, else its config.json's max_position_embeddings where readable), as llama-68m never saw more
    than its 2,048: it is then evaluated beyond them, with explicit real positions, as the paper's drafter is."""
    base, native = config.get("base_drafter"), max_positions(config["drafter"])
    if native is None:
        return
    longest = max(config["contexts"].values())
    declared = [c for c in config.get("controls", []) if c in methods.REGISTRY]  # not LABEL@POLICY
    covering = [c for c in declared if methods.KINDS[methods.get(c).drafter].covers_longest]
    if covering and longest <= native:
        raise ValueError(
            f"controls: {covering[0]} interpolates the drafter's positions to cover the longest context ({longest} "
            f"tokens), but the drafter {config['drafter']!r} knows {native} positions already: nothing extrapolates, "
            f"so there is nothing to interpolate; remove {covering[0]} from controls (or give the drafter a shorter "
            "range, spec option positions=N)"
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
    if long := config.get("long_generation"):
        if long["dataset"] not in config["datasets"]:
            raise ValueError(f"long_generation.dataset = {long['dataset']!r} is not a key of datasets")
        if long["budget"] not in config["budgets"]:
            raise ValueError(f"long_generation.budget = {long['budget']} is not in budgets")
        run = methods.enabled(config) + list(config["variants"])
        for i, label in enumerate(long["methods"]):
            if methods.POLICY_SEP in label:
                raise ValueError(
                    f"long_generation.methods[{i}] = {label!r}: a policy's control runs at its own budget; name its "
                    "method (sd) or a variant"
                )
            if label not in run:
                raise ValueError(f"long_generation.methods[{i}] = {label!r}: not a method or variant this config runs")
        if long["max_new_tokens"] <= config["max_new_tokens"]:
            raise ValueError(
                f"long_generation.max_new_tokens = {long['max_new_tokens']} is no more than max_new_tokens = "
                f"{config['max_new_tokens']}: the long generations would be no longer than the grid's own; raise it "
                "past max_new_tokens, or set long_generation: null"
            )
        if long["max_new_tokens"] < config["gamma_fixed"]:
            raise ValueError(
                f"long_generation.max_new_tokens = {long['max_new_tokens']} is less than gamma_fixed = "
                f"{config['gamma_fixed']}: no draft could be accepted whole; raise it"
            )
    if config["single_budget"]["trained_budget"] not in config["budgets"]:
        raise ValueError(
            f"single_budget.trained_budget = {config['single_budget']['trained_budget']} is not in budgets"
        )


def check_revisions(config: dict) -> None:
    """Each key of `revisions` is a hub repository the config reads (``revisions.hub_repos``): a revision of any
    other (a typo, ``nobody/unused``, ``../../etc``) pins nothing, and the repository it was meant for stays
    unpinned without a word."""
    read = revisions.hub_repos(config)
    for repo in config.get("revisions") or {}:
        if repo not in read:
            raise ValueError(
                f"revisions: {repo!r} is no hub repository this config reads (it reads "
                f"{', '.join(sorted(read)) or 'none'}), so its revision pins nothing; remove it, or correct the name "
                "(python -m budgetdraft pin prints the block)"
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
