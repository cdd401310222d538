"""The grid (which cells each artifact needs), checks the schema cannot express, and input functions."""

import json
import os
import re
import shlex
import sys
from pathlib import Path

# Labels and artifacts have one home, shared with the library (src/ is on sys.path: Snakefile).
from budgetdraft.base import names, revisions
from budgetdraft.base.importgraph import code_files
from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams
from budgetdraft.report.settings import PaperSettings, Variant

# ---------------------------------------------------------------- names

DATASETS = list(config["datasets"])
CONTEXTS = list(config["contexts"])
BUDGETS = list(config["budgets"])
VARIANTS = list(config["variants"])  # trained drafters = cell labels
BASELINES = list(config["baselines"].get("enabled", []))
# Training stages, each with its own sequences and teacher targets: the base drafter (short full-cache windows,
# only when config `base_drafter` trains one) and BudgetDraft's variants (long prefix + supervised continuation).
BASE = config.get("base_drafter")
# Training replicates: the chain base drafter -> variants runs once per replicate r (training seed + r).
REPLICATES = list(range(config["replicates"]))
TRAINING_STAGES = (["base"] if BASE else []) + ["budgetdraft"]
# TriForce and EAGLE-3 do not use the drafter budget B: one cell (at the largest B) per context is enough.
BASELINE_BUDGET = max(config["budgets"])
# cell label -> eval-cell --method
METHOD = {method: method for method in names.METHODS}
METHOD.update({variant: names.SD for variant in VARIANTS})
# The `policies` target: the base drafter and BudgetDraft under each sparse policy; a policy other than the
# config's `policy` has its own cell labels (LABEL@POLICY, budgetdraft.base.names.policy_label).
POLICY = config["policy"]
POLICIES = {
    "names": ["topk_chunks", "streaming", "snapkv", "verifier_guided"],
    "dataset": DATASETS[0],
    "gamma": 5,
    **config.get("policies", {}),
}
POLICY_LABELS = [
    names.policy_label(label, policy, POLICY)
    for label in (names.SD, names.BD)
    for policy in POLICIES["names"]
]
METHOD.update(
    {label: METHOD[names.label_policy(label, POLICY)[0]] for label in POLICY_LABELS}
)
# `engine: graphs`: AR, SD and BudgetDraft also decoded eagerly at γ_fixed on the comparison dataset (LABEL+eager,
# budgetdraft.base.names.engine_label), for the claims' finding E1: the speedup over a fast AR beside the eager one.
ENGINE = config["engine"]
ENGINE_LABELS = (
    [
        names.engine_label(label, names.EAGER, ENGINE)
        for label in (names.AR, names.SD, names.BD)
    ]
    if ENGINE != names.EAGER
    else []
)
METHOD.update(
    {label: METHOD[names.label_engine(label, ENGINE)[0]] for label in ENGINE_LABELS}
)
TABLES = list(names.TABLES)
# file stem under results/figures/ -> artifact: the paper's (in `all`), and every figure (one rule draws them)
FIGURES = {stem: artifact for artifact, stem in names.FIGURE_STEMS.items()}
ALL_FIGURES = {
    **FIGURES,
    **{stem: artifact for artifact, stem in names.EXTRA_FIGURE_STEMS.items()},
}

# src/ modules each stage runs, declared as its code inputs so that editing one reruns exactly the stages that run
# it: a rule's code is what its command imports (budgetdraft.base.importgraph: its module from cli.COMMANDS and every
# module that imports, transitively, lazy imports included), never a list kept by hand.
STAGE_COMMANDS = {
    "models": "export-model",
    "data": "prepare",
    "targets": "targets",
    "train": "train",
    "eagle3": "train-eagle3",
    "prefill": "prefill",
    "paper": "paper",
    "claims": "claims",
}
SRC = {stage: code_files(command) for stage, command in STAGE_COMMANDS.items()}


# eval-cell imports a baseline's module by a name computed at run time (--method): named here, per method
CELL_CODE = {
    method: code_files(
        "eval-cell",
        (f"budgetdraft.decoding.baselines.{method}",) if method in names.BASELINES else (),
    )
    for method in names.METHODS
}


# ---------------------------------------------------------------- checks beyond the schema


# A warning, not an error: pinning needs the hub once (budgetdraft.base.revisions).
if unpinned := revisions.unpinned(config):
    print(
        f"budgetdraft: hub repositories read at no pinned revision: {', '.join(unpinned)}"
        " (python -m budgetdraft pin --configfile CONFIG prints the `revisions:` block)",
        file=sys.stderr,
    )


# ---------------------------------------------------------------- the grid


def drafter_label(label):
    """The drafter a cell label decodes with: LABEL@POLICY and LABEL+ENGINE are LABEL's."""
    return names.label_policy(names.label_engine(label, ENGINE)[0], POLICY)[0]


def cell_engine(wildcards):
    """The engine a cell decodes on: its label's (LABEL+eager), else the config's."""
    return names.label_engine(wildcards.label, ENGINE)[1]


def replicated(label):
    """Whether a cell label's drafter is trained once per replicate: every variant, and SD and TriForce when they
    decode with the trained base drafter. AR, EAGLE-3 (one run) and, without `base_drafter`, SD and TriForce
    (the untrained drafter) are measured once and shared by every replicate."""
    label = drafter_label(label)
    return label in VARIANTS or (bool(BASE) and label in (names.SD, names.TRIFORCE))


def cell(label, dataset, context, budget, gamma, replicate=None):
    """A cell file: results/cells/LABEL/rR/... for replicate R of a trained drafter, results/cells/LABEL/... shared."""
    where = f"{label}/r{replicate}" if replicate is not None else label
    return f"results/cells/{where}/{dataset}/{context}/B{budget}_g{gamma}.parquet"


def cell_files(label, dataset, context, budget, gamma):
    """The files of one grid cell: one per replicate (`replicated`), else the one shared file."""
    if replicated(label):
        return [cell(label, dataset, context, budget, gamma, r) for r in REPLICATES]
    return [cell(label, dataset, context, budget, gamma)]


def ar_cells(datasets=None, contexts=None):
    return [
        cell(names.AR, d, c, 0, 0)
        for d in datasets or DATASETS
        for c in contexts or CONTEXTS
    ]


def sweep_cells(label):
    """Every dataset x context x budget x the context's γ sweep."""
    return [
        f
        for d in DATASETS
        for c in CONTEXTS
        for b in BUDGETS
        for g in config["gammas"][c]
        for f in cell_files(label, d, c, b, g)
    ]


def cells_at(labels, datasets=None, contexts=None, gamma=None):
    """Every dataset x context x budget at one γ (default: gamma_fixed)."""
    gamma = gamma or config["gamma_fixed"]
    return [
        f
        for label in labels
        for d in datasets or DATASETS
        for c in contexts or CONTEXTS
        for b in BUDGETS
        for f in cell_files(label, d, c, b, gamma)
    ]


# Variants beyond the paper's four (config `variants`) are trained and evaluated like them, at γ_fixed over every
# dataset x context x budget (as lambda1.0): a λ variant (its training differs from BudgetDraft's in lambda_c alone,
# budgetdraft.base.names.lambda_variants) joins the λ table, in order of λ; any other the `variants` table, which `all`
# builds only when there is one. Each of the two tables is handed the variants it shows (artifact_settings).
LAMBDA_VARIANTS = names.lambda_variants(
    {v: {**config["training"], **o} for v, o in config["variants"].items()}
)
OTHER_VARIANTS = [v for v in names.extra_variants(VARIANTS) if v not in LAMBDA_VARIANTS]
ALL_TABLES = TABLES + list(names.EXTRA_TABLES)  # every table the `table` rule builds
TABLES_IN_ALL = TABLES + (["variants"] if OTHER_VARIANTS else [])


def artifact_cells(artifact):
    """The cell files one table or figure reads (docs/artifacts.md, 'cells it needs')."""
    cmp, single, collapse = (
        config["comparison"],
        config["single_budget"],
        config["collapse"],
    )
    AR, SD, BD = names.AR, names.SD, names.BD
    sweeps = sweep_cells(SD) + sweep_cells(BD)
    cells = {
        "main": ar_cells() + sweeps,
        "vram_gamma": ar_cells() + sweeps,
        "vram": ar_cells() + cells_at([SD, BD]),
        "ablation_lc": ar_cells() + cells_at([names.LA_ONLY, BD]),
        "lambda": ar_cells() + cells_at(LAMBDA_VARIANTS),
        "variants": ar_cells() + cells_at([BD] + OTHER_VARIANTS),
        "comparison": ar_cells([cmp["dataset"]], cmp["contexts"])
        + cells_at([SD, BD], [cmp["dataset"]], cmp["contexts"], cmp["gamma"])
        + [
            f
            for label in BASELINES
            for c in cmp["contexts"]
            for f in cell_files(label, cmp["dataset"], c, BASELINE_BUDGET, cmp["gamma"])
        ],
        "single_budget": ar_cells([single["dataset"]], [single["context"]])
        + cells_at(
            [names.SINGLE, BD],
            [single["dataset"]],
            [single["context"]],
            single["gamma"],
        ),
        "fig_collapse": cells_at([SD], [collapse["dataset"]], None, collapse["gamma"]),
        "fig_gamma": ar_cells() + sweep_cells(BD),
        "fig_errorbar": ar_cells() + sweep_cells(BD),
        "fig_policies": ar_cells([POLICIES["dataset"]])
        + cells_at(POLICY_LABELS, [POLICIES["dataset"]], None, POLICIES["gamma"]),
    }[artifact]
    return list(dict.fromkeys(cells))  # unique, order kept


def engine_cells():
    """The eager companions of a graphs run (ENGINE_LABELS) and the graphs cells they are compared with."""
    if not ENGINE_LABELS:
        return []
    dataset, ar = config["comparison"]["dataset"], ENGINE_LABELS[0]
    return [
        cell(label, dataset, c, 0, 0) for label in (names.AR, ar) for c in CONTEXTS
    ] + cells_at([names.SD, names.BD] + ENGINE_LABELS[1:], [dataset])


def all_cells():
    """Every cell the claims read: the artifacts' and, on graphs, the eager companions (engine_cells)."""
    return list(
        dict.fromkeys(
            [
                c
                for a in TABLES_IN_ALL + list(FIGURES.values())
                for c in artifact_cells(a)
            ]
            + engine_cells()
        )
    )


def artifact_files(artifacts):
    files = [f"results/tables/{a}.tex" for a in artifacts if a in ALL_TABLES]
    files += [
        f"results/figures/{stem}.{ext}"
        for stem, a in ALL_FIGURES.items()
        if a in artifacts
        for ext in ("pdf", "png")
    ]
    return files


# ---------------------------------------------------------------- unreadable cell files
# A cell file cut short (a full disk, a killed copy or sync; the cell rule itself writes atomically), damaged (a
# flipped bit) or that lies (edited by hand, copied to another cell's path) would stop every table that reads it, or
# worse be published; Snakemake would delete the previous table when that job fails. When a cell's job is planned
# (its input function runs while the DAG is built, when Snakemake knows whether it is a dry run), its existing file
# is checked: a parquet file starts and ends with b"PAR1" and its footer fits inside it, then the cell proves its
# integrity and identity (budgetdraft.evaluation.cellfile: the digest written with it, page checksums, its invariants, its rows
# the cell its path names). A file that fails is reported by name with the reason and moved aside (FILE.unreadable,
# never deleted), so the cell is measured again like a missing one; a dry run (or --touch, or a cluster job's own
# Snakemake) only reports it.

PARQUET_MAGIC = b"PAR1"
CHECKED_CELLS = set()


def parquet_whole(path):
    """Whether `path` has a parquet file's magic at both ends and a footer that fits inside it."""
    size = path.stat().st_size
    if size < 12:
        return False
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(-8, os.SEEK_END)
        tail = f.read(8)
    footer = int.from_bytes(tail[:4], "little")
    return head == PARQUET_MAGIC and tail[4:] == PARQUET_MAGIC and footer + 12 <= size


def cell_problem(path):
    """Why an existing cell file cannot be used, or None (imported here: test_workflow plans with stand-ins)."""
    if not parquet_whole(path):
        return "not a whole parquet file"
    from budgetdraft.evaluation import cellfile

    return cellfile.problem(path)


def aside_name(path):
    """FILE.unreadable, or FILE.unreadable.N when an earlier one is kept there."""
    aside, n = path.with_name(f"{path.name}.unreadable"), 1
    while aside.exists():
        aside, n = path.with_name(f"{path.name}.unreadable.{n}"), n + 1
    return aside


def set_aside_if_unreadable(path):
    """Move an existing cell file that fails `cell_problem` aside, saying why, when this Snakemake runs jobs; name
    it otherwise. Each file is checked once per Snakemake."""
    path = Path(path)
    if path in CHECKED_CELLS or not path.is_file():
        return
    CHECKED_CELLS.add(path)
    problem = cell_problem(path)
    if problem is None:
        return
    aside = aside_name(path)
    if workflow.dryrun or workflow.touch or not workflow.is_main_process:
        print(
            f"unreadable cell file {path} ({problem}): a run will move it to {aside} "
            "and measure the cell again (this dry run plans as if it were whole)",
            file=sys.stderr,
        )
        return
    os.replace(path, aside)
    print(
        f"unreadable cell file {path} ({problem}): moved to {aside}, measuring the cell again",
        file=sys.stderr,
    )


# ---------------------------------------------------------------- input functions and params


def training_data(stage):
    """Sequences of a training stage: `base_drafter.data` for the base drafter, `training_data` for the variants."""
    return BASE["data"] if stage == "base" else config["training_data"]


def base_drafter_dir(replicate):
    """The drafter every other drafter of a replicate starts from: its base drafter when config `base_drafter`
    trains one (a directory() output of rule train_base), else the exported drafter untouched (the paper's llama-68m).
    """
    if BASE:
        return f"results/models/drafter_base/r{replicate}"
    return "results/models/drafter_untrained"


def export_dtype(role):
    """The dtype a model is exported in: the verifier's `verifier_dtype`; the drafter's training dtype (the dtype it
    is trained and, with the paper's fp32 drafter, decoded in)."""
    if role == "verifier":
        return config["verifier_dtype"]
    return config["training"].get("dtype", config["drafter_dtype"])


def revision_flag(repo):
    """`--revision SHA` when the config's `revisions:` pins hub repository ``repo``, else nothing."""
    pinned = revisions.revision(config, repo)
    return f"--revision {pinned}" if pinned else ""


def seeded(hparams, replicate):
    """Training hparams of one replicate: seed + replicate (data order and budget sampling); replicate 0 trains
    exactly what a configuration without replicates trains."""
    return {**hparams, "seed": TrainingHparams.from_json(hparams).seed + int(replicate)}


# The device each kind of job runs on: model jobs on `device`; the training chain (targets, train_base, train) on
# `training.device`, else `device`; EAGLE-3's head on `baselines.eagle3.training.device`, else `device`.
TRAINING_DEVICE = config["training"].get("device", config["device"])
EAGLE3_TRAINING = {
    "device": config["device"],
    **config["baselines"].get(names.EAGLE3, {}).get("training", {}),
}
# the contract of train-eagle3 --hparams (budgetdraft.training.hparams.Eagle3Hparams), checked at plan time
Eagle3Hparams.from_json(EAGLE3_TRAINING)


def gpu_slots(device):
    """GPU slots a job on `device` takes: 1 on CUDA (a counter locally, --gpus=1 on SLURM), else 0."""
    return 1 if str(device).startswith("cuda") else 0


def base_hparams(replicate):
    """`training:` merged with `base_drafter.training`, L_A only: the full-cache windows have no prefix to sparsify."""
    hparams = {
        **config["training"],
        "device": TRAINING_DEVICE,
        **BASE["training"],
        "lambda_c": 0.0,
    }
    return json.dumps(seeded(hparams, replicate), sort_keys=True)


def drafter_dir(label, replicate=None):
    """The directory a cell label's drafter is read from (a directory() output; None for AR); `replicate` for the
    labels that are `replicated`."""
    label = drafter_label(label)
    if label == names.AR:
        return None
    if label in (names.SD, names.TRIFORCE):
        return base_drafter_dir(replicate)
    if label == names.EAGLE3:
        return f"results/drafters/{label}"
    return f"results/drafters/r{replicate}/{label}"


def comparison_drafters():
    """{label: [its model directories]} of the comparison table's rows, whose sizes the table counts from the
    weights (TriForce: its drafter + the verifier, its middle level); replicates have the same sizes: the first's.
    """
    first = REPLICATES[0]
    drafters = {
        names.SD: [base_drafter_dir(first)],
        names.BD: [drafter_dir(names.BD, first)],
    }
    if names.TRIFORCE in BASELINES:
        drafters[names.TRIFORCE] = [base_drafter_dir(first), "results/models/verifier"]
    if names.EAGLE3 in BASELINES:
        drafters[names.EAGLE3] = [drafter_dir(names.EAGLE3)]
    return drafters


def artifact_drafters(wildcards):
    """{label: [model directories]} whose sizes a table counts: the comparison table's drafters, else none."""
    return comparison_drafters() if wildcards.artifact == "comparison" else {}


def artifact_drafter_dirs(wildcards):
    """The model directories of `artifact_drafters`, as the table rule's inputs."""
    return sorted({d for dirs in artifact_drafters(wildcards).values() for d in dirs})


def drafters_flag(wildcards):
    """`--drafters JSON` for a table that counts drafter sizes, nothing for the others."""
    drafters = artifact_drafters(wildcards)
    return f"--drafters {shlex.quote(json.dumps(drafters))}" if drafters else ""


def cell_replicate(wildcards):
    """The replicate of a cell job (None for a shared cell, whose path has no rR)."""
    return int(wildcards.replicate) if "replicate" in wildcards.keys() else None


def cell_inputs(wildcards):
    """The verifier, the prompts, the shared prefills (`share_verifier_prefill`) and the drafter (not for AR).
    First, its own file is set aside when unreadable (`set_aside_if_unreadable`), to be measured again.
    """
    set_aside_if_unreadable(
        cell(
            wildcards.label,
            wildcards.dataset,
            wildcards.context,
            wildcards.budget,
            wildcards.gamma,
            cell_replicate(wildcards),
        )
    )
    inputs = {
        "verifier": "results/models/verifier",
        "prompts": f"results/data/prompts/{wildcards.dataset}/{wildcards.context}.parquet",
        "code": CELL_CODE[METHOD[wildcards.label]],
    }
    if config["share_verifier_prefill"]:
        inputs["prefill"] = (
            f"results/prefill/{wildcards.dataset}/{wildcards.context}.safetensors"
        )
    drafter = drafter_dir(wildcards.label, cell_replicate(wildcards))
    if drafter is not None:
        inputs["drafter"] = drafter
    return inputs


def cell_drafter_flag(wildcards, input):
    """`--drafter DIR`, or nothing for AR."""
    return f"--drafter {input.drafter}" if "drafter" in input.keys() else ""


PREFILL_RUNS = 2  # timed runs of a shared verifier prefill; their median is charged (captions say so)


def cell_sampling_flags():
    """The sampling flags of `eval-cell`; none when greedy, so a greedy cell's command is what it always was."""
    # the schema's `validate` filled in the keys a config leaves out
    s = config["sampling"]
    if s["temperature"] == 0:
        return ""
    return f" --temperature {s['temperature']} --top-p {s['top_p']} --top-k {s['top_k']} --seed {s['seed']}"


def cell_prefill_flag(wildcards, input):
    """`--verifier-prefill FILE` when the verifier's prefills are shared (`share_verifier_prefill`)."""
    return f"--verifier-prefill {input.prefill}" if "prefill" in input.keys() else ""


def cell_extra_flag(wildcards):
    settings = config["baselines"].get(wildcards.label)
    if wildcards.label not in names.BASELINES or not settings:
        return ""
    extra = {k: v for k, v in settings.items() if k != "training"}
    return f"--extra {shlex.quote(json.dumps(extra, sort_keys=True))}"


def variant_hparams(variant, replicate=0):
    """`training:` merged with the variant's overrides and the replicate's seed, as handed to `budgetdraft train
    --hparams`."""
    hparams = {
        **config["training"],
        "device": TRAINING_DEVICE,
        **config["variants"][variant],
    }
    return json.dumps(seeded(hparams, replicate), sort_keys=True)


def paper_settings():
    """The settings JSON of `budgetdraft paper` (what to lay out where), built from the config and checked
    against its contract (`budgetdraft.report.settings.PaperSettings`)."""
    cmp = config["comparison"]
    settings = {
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
            "baselines": BASELINES,
            "budgets": {label: BASELINE_BUDGET for label in BASELINES},
        },
        "single_budget": config["single_budget"],
        "lossless_check": config["lossless_check"],
        "near_tie_margin": config["near_tie_margin"],
        "verifier_prefill_runs": (
            PREFILL_RUNS if config["share_verifier_prefill"] else 0
        ),
        "variants": {
            v: Variant.of_hparams(json.loads(variant_hparams(v))).to_json()
            for v in VARIANTS
        },
        "base_drafter_steps": BASE["training"]["steps"] if BASE else 0,
        "replicates": len(REPLICATES),
        "base_drafter_teacher": BASE["teacher"] if BASE else "",
    }
    PaperSettings.from_json(settings)
    return json.dumps(settings)


def samples(dataset):
    return config["datasets"][dataset].get("samples", config["samples"])


def artifact_settings(artifact):
    """The settings JSON of one artifact: `paper_settings`, for the policies figure with its `policies:` too, for the
    λ and `variants` tables with only the extra variants each shows (LAMBDA_VARIANTS, OTHER_VARIANTS).
    """
    shown = {"lambda": LAMBDA_VARIANTS, "variants": OTHER_VARIANTS}.get(artifact)
    if shown is not None and set(names.extra_variants(VARIANTS)) - set(shown):
        settings = json.loads(paper_settings())
        settings["variants"] = {
            v: x
            for v, x in settings["variants"].items()
            if v in names.REQUIRED_VARIANTS or v in shown
        }
        return json.dumps(settings)
    if artifact != "fig_policies":
        return paper_settings()
    settings = {
        **json.loads(paper_settings()),
        "policies": {**POLICIES, "default": POLICY},
    }
    PaperSettings.from_json(settings)
    return json.dumps(settings)
