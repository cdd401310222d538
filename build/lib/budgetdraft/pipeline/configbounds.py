"""Sizes and counts bounded by what they size, each refusal saying what it would cost (called by
`budgetdraft.pipeline.configcheck`): training recipes, chunk sizes, the teacher targets, budgets and windows
against the prompts, seeds, the baselines' settings, EAGLE-3's, and the whole plan's size.
"""

from __future__ import annotations

import json

from budgetdraft.base import methods, names
from budgetdraft.base.defaults import CHUNK_SIZE, SCORE_WINDOW, SEEDS, TRIFORCE_DEFAULTS
from budgetdraft.evaluation.cellfile import path_key
from budgetdraft.pipeline.commands.flags import refuse_partial_chunk
from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams


def trained_hparams(config: dict) -> list[tuple[str, dict]]:
    """(key, the hyper-parameters handed to the trainer, before its defaults) of `training` and of every variant
    (`training` merged with its overrides)."""
    return [("training", config["training"])] + [
        (f"variants.{v}", {**config["training"], **o}) for v, o in config["variants"].items() if "checkpoint" not in o
    ]


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
    if methods.TRIFORCE in config.get("baselines", {}).get("enabled", []):
        triforce = config["baselines"].get(methods.TRIFORCE) or {}
        chunk_key = "baselines.triforce.chunk_size" if "chunk_size" in triforce else "chunk_size"
        refuse_partial_chunk(
            "baselines.triforce.retrieval_budget",
            triforce.get("retrieval_budget", TRIFORCE_DEFAULTS["retrieval_budget"]),
            chunk_key,
            triforce.get("chunk_size", chunk),
        )


def check_targets(config: dict) -> None:
    """What the targets need: the `policies` target's dataset (default: the first), the variants the tables read,
    and a decoding every method it enables supports (a decoder not declared to sample, as the baselines', decodes
    greedily only: budgetdraft.base.methods.Decoder.samples)."""
    dataset = config.get("policies", {}).get("dataset", next(iter(config["datasets"])))
    if dataset not in config["datasets"]:
        raise ValueError(f"policies.dataset = {dataset!r} is not a key of datasets")
    for label, needed_by in names.REQUIRED_VARIANTS.items():
        if label not in config["variants"]:
            raise ValueError(f"variants must define {label!r} ({needed_by})")
    temperature = config.get("sampling", {}).get("temperature", 0)  # 0 = greedy, the schema's default
    lists = {"baselines.enabled": config["baselines"].get("enabled", []), "controls": config.get("controls", [])}
    for key, enabled in lists.items():
        greedy = [label for label in enabled if label in methods.REGISTRY and not methods.get(label).decoder.samples]
        if temperature > 0 and greedy:
            raise ValueError(
                f"sampling.temperature = {temperature} but {key} = {enabled}: {', '.join(greedy)} decode greedily "
                f"only; remove them from {key} to sample, or set sampling.temperature: 0"
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
    """The baselines' sizes: TriForce's inner draft, retrieval cache and StreamingLLM cache (each pre-allocated in
    every cache it keeps) within what its cells decode, its sinks within that cache; EAGLE-3's feature layers within
    the verifier's, its windows within its training sequences and its unroll within the window it scores."""
    enabled = config["baselines"].get("enabled", [])
    if methods.TRIFORCE in enabled:
        triforce = {**TRIFORCE_DEFAULTS, **(config["baselines"].get(methods.TRIFORCE) or {})}
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
        if triforce["retrieval_budget"] > tokens:
            raise ValueError(
                f"{key}.retrieval_budget = {triforce['retrieval_budget']} is more than contexts.{label} = {tokens} "
                "prompt tokens (comparison.contexts): its verifier's retrieval cache would keep the whole prompt, a "
                f"full cache under TriForce's name, and pre-allocate {triforce['retrieval_budget']} slots a layer; "
                "lower it"
            )
        if not triforce["sinks"] < triforce["streaming_budget"]:
            raise ValueError(
                f"{key}.sinks = {triforce['sinks']} must be less than streaming_budget = {triforce['streaming_budget']}"
                ": the StreamingLLM cache keeps the sinks and at least one recent token"
            )
    if methods.EAGLE3 in enabled:
        check_eagle3(config)


def check_eagle3(config: dict) -> None:
    """EAGLE-3's head reads the outputs of verifier layers ``layer_ids`` (an IndexError in training past the
    verifier's last layer: its layer count read from its config.json, or the shapes the estimate knows), scores
    ``step0_positions`` and unrolls over the last ``ttt_window`` positions of the training sequences (more than a
    sequence has is the whole sequence under a larger number: ``ttt_window: 1e8`` said nothing), and unrolls
    ``ttt_steps`` steps (a step past the window scores nothing)."""
    from budgetdraft.pipeline.roofline import shape

    key = "baselines.eagle3.training"
    try:
        hp = Eagle3Hparams.from_json(
            {"device": config["device"], **config["baselines"].get(methods.EAGLE3, {}).get("training", {})}
        )
    except (ValueError, TypeError) as err:
        raise ValueError(f"{key}: {err}") from None
    data = config["training_data"]  # the head trains on the training sequences' targets (rule train_eagle3)
    positions = data["prefix_len"] + data["cont_len"] - 1  # base positions of a sequence, each with a next token
    for name in ("ttt_window", "step0_positions"):
        if getattr(hp, name) > positions:
            raise ValueError(
                f"{key}.{name} = {getattr(hp, name)} is more than the {positions} positions of a training sequence "
                "(training_data.prefix_len + cont_len - 1): it would take the whole sequence under a larger number; "
                f"lower it to at most {positions}"
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
