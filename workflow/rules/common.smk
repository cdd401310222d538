"""The grid (which cells each artifact needs), checks the schema cannot express, and input functions."""

import json
import re
import shlex
from pathlib import Path

# ---------------------------------------------------------------- names

DATASETS = list(config["datasets"])
CONTEXTS = list(config["contexts"])
BUDGETS = list(config["budgets"])
VARIANTS = list(config["variants"])  # trained drafters = cell labels
BASELINES = list(config["baselines"].get("enabled", []))
# Training stages, each with its own sequences and teacher targets: the base drafter (short full-cache windows,
# only when config `base_drafter` trains one) and BudgetDraft's variants (long prefix + supervised continuation).
BASE = config.get("base_drafter")
TRAINING_STAGES = (["base"] if BASE else []) + ["budgetdraft"]
# TriForce and EAGLE-3 do not use the drafter budget B: one cell (at the largest B) per context is enough.
BASELINE_BUDGET = max(config["budgets"])
METHOD = {"ar": "ar", "sd": "sd", "triforce": "triforce", "eagle3": "eagle3"}
METHOD.update({variant: "sd" for variant in VARIANTS})
TABLES = [
    "main",
    "comparison",
    "ablation_lc",
    "lambda",
    "single_budget",
    "vram_gamma",
    "vram",
]
FIGURES = {  # file stem under results/figures/ -> paper artifact name
    "collapse": "fig_collapse",
    "gamma_sensitivity": "fig_gamma",
    "errorbar": "fig_errorbar",
}

# src/ modules each stage runs: declared as inputs so that editing one reruns exactly its stage.
# MODEL_CODE: every model forward runs these.
MODEL_CODE = ["src/budgetdraft/kvcache.py", "src/budgetdraft/attention.py"]
SRC = {
    "models": ["src/budgetdraft/models.py"],
    "data": ["src/budgetdraft/data.py"],
    "targets": ["src/budgetdraft/targets.py", *MODEL_CODE],
    "train": ["src/budgetdraft/training.py", *MODEL_CODE],
    "eagle3": ["src/budgetdraft/baselines/eagle3.py", *MODEL_CODE],
    "prefill": [
        "src/budgetdraft/prefill.py",
        "src/budgetdraft/decoding.py",
        "src/budgetdraft/sampling.py",
        *MODEL_CODE,
    ],
    "eval": [
        "src/budgetdraft/cells.py",
        "src/budgetdraft/prefill.py",
        "src/budgetdraft/decoding.py",
        "src/budgetdraft/sampling.py",
        "src/budgetdraft/models.py",
        *MODEL_CODE,
    ],
    "paper": ["src/budgetdraft/paper.py"],
}
BASELINE_SRC = {
    "triforce": ["src/budgetdraft/baselines/triforce.py"],
    "eagle3": ["src/budgetdraft/baselines/eagle3.py"],
}


# ---------------------------------------------------------------- checks beyond the schema


def sampling():
    """`sampling:` with the schema's defaults for the keys it leaves out (temperature 0 = greedy)."""
    return {
        "temperature": 0,
        "top_p": 1.0,
        "top_k": 0,
        "seed": 0,
        **config.get("sampling", {}),
    }


REQUIRED_VARIANTS = {  # label -> the artifacts that read its cells
    "lambda0.5": "the BudgetDraft drafter of every table",
    "la_only": "the L_C ablation table and claim F4",
    "lambda1.0": "the lambda table and claim F6",
    "single_budget": "the single-budget table and claim F5",
}


def check_config(config):
    """Raise ValueError naming the key and value of the first inconsistency (before any job starts)."""
    limit = config["verifier_max_positions"]
    exported = Path("results/models/verifier/config.json")
    if exported.is_file():  # once exported, the model's own limit applies too
        model_limit = (
            json.loads(exported.read_text()).get("max_position_embeddings") or limit
        )
        limit = min(limit, model_limit)
    new = config["max_new_tokens"]
    for label, length in config["contexts"].items():
        if length + new > limit:
            raise ValueError(
                f"contexts.{label} = {length}: prompt + max_new_tokens ({new}) exceeds "
                f"the verifier's {limit} positions (verifier_max_positions / its config.json)"
            )
    data = config["training_data"]
    if data["prefix_len"] + data["cont_len"] > limit:
        raise ValueError(
            f"training_data.prefix_len + cont_len = {data['prefix_len'] + data['cont_len']} "
            f"exceeds verifier_max_positions = {limit}"
        )
    if set(config["gammas"]) != set(config["contexts"]):
        raise ValueError(
            f"gammas has keys {sorted(config['gammas'])}; it needs one γ list per context: {sorted(config['contexts'])}"
        )
    for key in ("collapse", "comparison", "single_budget"):
        if config[key]["dataset"] not in config["datasets"]:
            raise ValueError(
                f"{key}.dataset = {config[key]['dataset']!r} is not a key of datasets"
            )
    for context in config["comparison"]["contexts"] + [
        config["single_budget"]["context"]
    ]:
        if context not in config["contexts"]:
            raise ValueError(
                f"context {context!r} (comparison/single_budget) is not a key of contexts"
            )
    if config["single_budget"]["trained_budget"] not in config["budgets"]:
        raise ValueError(
            f"single_budget.trained_budget = {config['single_budget']['trained_budget']} is not in budgets"
        )
    for name, hp in [("training", config["training"])] + [
        (f"variants.{v}", {**config["training"], **o})
        for v, o in config["variants"].items()
    ]:
        if len(hp["budgets"]) != len(hp["budget_weights"]):
            raise ValueError(f"{name}: budgets and budget_weights differ in length")
    trained = {**config["training"], **config["variants"].get("single_budget", {})}[
        "budgets"
    ]
    if trained != [config["single_budget"]["trained_budget"]]:
        raise ValueError(
            f"single_budget.trained_budget = {config['single_budget']['trained_budget']} but the single_budget "
            f"variant trains at budgets {trained}: the table's label would not say what was trained"
        )
    for label, needed_by in REQUIRED_VARIANTS.items():
        if label not in config["variants"]:
            raise ValueError(f"variants must define {label!r} ({needed_by})")
    enabled = config["baselines"].get("enabled", [])
    if sampling()["temperature"] > 0 and enabled:
        raise ValueError(
            f"sampling.temperature = {sampling()['temperature']} but baselines.enabled = {enabled}: the baselines "
            "decode greedily only; set baselines.enabled: [] to sample, or sampling.temperature: 0"
        )


check_config(config)


# ---------------------------------------------------------------- the grid


def cell(label, dataset, context, budget, gamma):
    return f"results/cells/{label}/{dataset}/{context}/B{budget}_g{gamma}.parquet"


def ar_cells(datasets=None, contexts=None):
    return [
        cell("ar", d, c, 0, 0)
        for d in datasets or DATASETS
        for c in contexts or CONTEXTS
    ]


def sweep_cells(label):
    """Every dataset x context x budget x the context's γ sweep."""
    return [
        cell(label, d, c, b, g)
        for d in DATASETS
        for c in CONTEXTS
        for b in BUDGETS
        for g in config["gammas"][c]
    ]


def cells_at(labels, datasets=None, contexts=None, gamma=None):
    """Every dataset x context x budget at one γ (default: gamma_fixed)."""
    gamma = gamma or config["gamma_fixed"]
    return [
        cell(label, d, c, b, gamma)
        for label in labels
        for d in datasets or DATASETS
        for c in contexts or CONTEXTS
        for b in BUDGETS
    ]


def artifact_cells(artifact):
    """The cell files one table or figure reads (docs/artifacts.md, 'cells it needs')."""
    cmp, single, collapse = (
        config["comparison"],
        config["single_budget"],
        config["collapse"],
    )
    sweeps = sweep_cells("sd") + sweep_cells("lambda0.5")
    cells = {
        "main": ar_cells() + sweeps,
        "vram_gamma": ar_cells() + sweeps,
        "vram": ar_cells() + cells_at(["sd", "lambda0.5"]),
        "ablation_lc": ar_cells() + cells_at(["la_only", "lambda0.5"]),
        "lambda": ar_cells() + cells_at(["lambda0.5", "lambda1.0"]),
        "comparison": ar_cells([cmp["dataset"]], cmp["contexts"])
        + cells_at(["sd", "lambda0.5"], [cmp["dataset"]], cmp["contexts"], cmp["gamma"])
        + [
            cell(label, cmp["dataset"], c, BASELINE_BUDGET, cmp["gamma"])
            for label in BASELINES
            for c in cmp["contexts"]
        ],
        "single_budget": ar_cells([single["dataset"]], [single["context"]])
        + cells_at(
            ["single_budget", "lambda0.5"],
            [single["dataset"]],
            [single["context"]],
            single["gamma"],
        ),
        "fig_collapse": cells_at(
            ["sd"], [collapse["dataset"]], None, collapse["gamma"]
        ),
        "fig_gamma": ar_cells() + sweep_cells("lambda0.5"),
        "fig_errorbar": ar_cells() + sweep_cells("lambda0.5"),
    }[artifact]
    return list(dict.fromkeys(cells))  # unique, order kept


def all_cells():
    return list(
        dict.fromkeys(
            c for a in TABLES + list(FIGURES.values()) for c in artifact_cells(a)
        )
    )


def artifact_files(artifacts):
    files = [f"results/tables/{a}.tex" for a in artifacts if a in TABLES]
    files += [
        f"results/figures/{stem}.{ext}"
        for stem, a in FIGURES.items()
        if a in artifacts
        for ext in ("pdf", "png")
    ]
    return files


# ---------------------------------------------------------------- input functions and params


def training_data(stage):
    """Sequences of a training stage: `base_drafter.data` for the base drafter, `training_data` for the variants."""
    return BASE["data"] if stage == "base" else config["training_data"]


def base_drafter_dir():
    """The drafter every other drafter starts from: the base drafter when config `base_drafter` trains one,
    else the exported drafter untouched (the paper's llama-68m)."""
    return "results/models/drafter_base" if BASE else "results/models/drafter_untrained"


def base_drafter_file():
    """What a rule needs to depend on the base drafter (a trained drafter's directory is not an output)."""
    return f"{base_drafter_dir()}/model.safetensors" if BASE else base_drafter_dir()


def base_hparams():
    """`training:` merged with `base_drafter.training`, L_A only: the full-cache windows have no prefix to sparsify."""
    return json.dumps(
        {**config["training"], **BASE["training"], "lambda_c": 0.0}, sort_keys=True
    )


def train_gpu(wildcards=None):
    """GPU slots of a training-stage job (targets, training): 1 when `training.device` is CUDA."""
    return 1 if str(config["training"].get("device", "cpu")).startswith("cuda") else 0


def drafter_input(label):
    """The file or directory() output a cell label's drafter is read from (None for AR)."""
    if label == "ar":
        return None
    if label in ("sd", "triforce"):
        return base_drafter_file()
    if label == "eagle3":
        return "results/drafters/eagle3"
    return f"results/drafters/{label}/model.safetensors"


def cell_inputs(wildcards):
    inputs = {
        "verifier": "results/models/verifier",
        "prompts": f"results/data/prompts/{wildcards.dataset}/{wildcards.context}.parquet",
        "code": SRC["eval"] + BASELINE_SRC.get(wildcards.label, []),
    }
    if config["share_verifier_prefill"]:
        inputs["prefill"] = (
            f"results/prefill/{wildcards.dataset}/{wildcards.context}.safetensors"
        )
    drafter = drafter_input(wildcards.label)
    if drafter is not None:
        inputs["drafter"] = drafter
    return inputs


def drafter_flag_dir(path):
    """The directory of a drafter input: a trained drafter's `model.safetensors` names its directory."""
    path = Path(path)
    return path.parent if path.name == "model.safetensors" else path


def cell_drafter_flag(wildcards, input):
    """`--drafter DIR`, or nothing for AR."""
    if "drafter" not in input.keys():
        return ""
    return f"--drafter {drafter_flag_dir(input.drafter)}"


PREFILL_RUNS = 2  # timed runs of a shared verifier prefill; their median is charged (captions say so)


def cell_sampling_flags():
    """The sampling flags of `eval-cell`; none when greedy, so a greedy cell's command is what it always was."""
    s = sampling()
    if s["temperature"] == 0:
        return ""
    return f" --temperature {s['temperature']} --top-p {s['top_p']} --top-k {s['top_k']} --seed {s['seed']}"


def cell_prefill_flag(wildcards, input):
    """`--verifier-prefill FILE` when the verifier's prefills are shared (`share_verifier_prefill`)."""
    return f"--verifier-prefill {input.prefill}" if "prefill" in input.keys() else ""


def cell_extra_flag(wildcards):
    settings = config["baselines"].get(wildcards.label)
    if wildcards.label not in ("triforce", "eagle3") or not settings:
        return ""
    extra = {k: v for k, v in settings.items() if k != "training"}
    return f"--extra {shlex.quote(json.dumps(extra, sort_keys=True))}"


def variant_hparams(variant):
    """`training:` merged with the variant's overrides, as handed to `budgetdraft train --hparams`."""
    return json.dumps(
        {**config["training"], **config["variants"][variant]}, sort_keys=True
    )


def paper_settings():
    """The settings JSON of `budgetdraft paper` (what to lay out where), built from the config."""
    cmp = config["comparison"]
    return json.dumps(
        {
            "datasets": {key: d["name"] for key, d in config["datasets"].items()},
            "contexts": CONTEXTS,
            "context_tokens": config["contexts"],
            "budgets": BUDGETS,
            "gammas": config["gammas"],
            "gamma_fixed": config["gamma_fixed"],
            "collapse": config["collapse"],
            "comparison": {
                "dataset": cmp["dataset"],
                "contexts": cmp["contexts"],
                "gamma": cmp["gamma"],
                "drafter_sizes": cmp.get("drafter_sizes", {}),
                "baselines": BASELINES,
                "budgets": {label: BASELINE_BUDGET for label in BASELINES},
            },
            "single_budget": config["single_budget"],
            "lossless_check": config["lossless_check"],
            "verifier_prefill_runs": (
                PREFILL_RUNS if config["share_verifier_prefill"] else 0
            ),
            "variants": {
                v: {k: hp[k] for k in ("lambda_c", "budgets", "steps")}
                for v in VARIANTS
                for hp in [json.loads(variant_hparams(v))]
            },
            "base_drafter_steps": BASE["training"]["steps"] if BASE else 0,
            "base_drafter_teacher": BASE["teacher"] if BASE else "",
        }
    )


def samples(dataset):
    return config["datasets"][dataset].get("samples", config["samples"])


def gpu(wildcards=None):
    """GPU slots a model job takes: 1 on a CUDA device (a counter locally, --gpus=1 on SLURM)."""
    return 1 if str(config["device"]).startswith("cuda") else 0
