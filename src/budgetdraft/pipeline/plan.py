"""The workflow's plan of a config: which cells each artifact reads, where each drafter lives, what each job is handed
(hyper-parameters, settings, flags) and which code it runs. Plain Python over the config dict as the Snakefile has
it after `budgetdraft.pipeline.configcheck.check_config` (the schema's defaults filled in): no Snakemake, no file
written, so tests/test_plan.py checks the grid in process and workflow/rules/ only wires it (`PLAN = Plan(config)`).

One side effect stays explicit and apart from the plan: `set_aside_unreadable` moves a cell file that cannot be used
aside (FILE.unreadable, never deleted) so that its cell is measured again; the workflow calls it once, when Snakemake
is about to run jobs and before it plans them, over the cell files the plan can ask for (`Plan.every_cell`) and those
named on the command line (`Plan.asked_cells`), and prints what it did.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from functools import cached_property
from pathlib import Path

from budgetdraft.base import defaults, names, revisions
from budgetdraft.base.importgraph import code_files
from budgetdraft.base.jsonio import first_difference
from budgetdraft.decoding import baselines
from budgetdraft.evaluation import cellfile
from budgetdraft.report.settings import PaperSettings, Variant
from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams

# stage -> the `budgetdraft` command its rule runs (the stage's code inputs: `Plan.code`)
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
VERIFIER = "results/models/verifier"
SETTINGS_FILE = "results/settings/{name}.json"  # rule settings' output: what `paper` and `claims` lay out where


class Plan:
    """The grid and the jobs' arguments of one config (``config``: checked, its defaults filled in)."""

    def __init__(self, config: dict):
        self.config = config
        self.datasets = list(config["datasets"])
        self.contexts = list(config["contexts"])
        self.budgets = list(config["budgets"])
        self.variants = list(config["variants"])  # trained drafters = cell labels
        self.baselines = list(config["baselines"].get("enabled", []))
        # the base drafter's training (only when config `base_drafter` trains one), else None
        self.base = config.get("base_drafter")
        # Training replicates: the chain base drafter -> variants runs once per replicate r (training seed + r).
        self.replicates = list(range(config["replicates"]))
        # Training stages, each with its own sequences and teacher targets: the base drafter (short full-cache
        # windows) and BudgetDraft's variants (long prefix + supervised continuation).
        self.training_stages = (["base"] if self.base else []) + ["budgetdraft"]
        # TriForce and EAGLE-3 do not use the drafter budget B: one cell (at the largest B) per context is enough.
        self.baseline_budget = max(self.budgets)
        self._labels(config)
        self._artifacts(config)
        # The device each kind of job runs on: model jobs on `device`; the training chain (targets, train_base,
        # train) on `training.device`, else `device`; EAGLE-3's head on `baselines.eagle3.training.device`.
        self.training_device = config["training"].get("device", config["device"])
        self.eagle3_training = {
            "device": config["device"],
            **config["baselines"].get(names.EAGLE3, {}).get("training", {}),
        }
        Eagle3Hparams.from_json(self.eagle3_training)  # the contract of train-eagle3 --hparams, at plan time

    def _labels(self, config: dict) -> None:
        """The cell labels and their eval-cell --method (`method`): methods, variants and their companions."""
        self.method = {method: method for method in names.METHODS}
        self.method.update({variant: names.SD for variant in self.variants})
        self.policy, self.engine = config["policy"], config["engine"]  # every cell's, unless its label says another
        # The `policies` target: the base drafter and BudgetDraft under each sparse policy; a policy other than the
        # config's `policy` has its own cell labels (LABEL@POLICY, budgetdraft.base.names.policy_label).
        self.policies = {
            "names": list(defaults.COMPARED_POLICIES),
            "dataset": self.datasets[0],
            "gamma": defaults.GAMMA,
            **config.get("policies", {}),
        }
        self.policy_labels = [
            names.policy_label(label, policy, self.policy)
            for label in (names.SD, names.BD)
            for policy in self.policies["names"]
        ]
        self.method.update({label: self.method[self.drafter_label(label)] for label in self.policy_labels})
        # `engine: graphs`: AR, SD and BudgetDraft also decoded eagerly at γ_fixed on the comparison dataset
        # (LABEL+eager, budgetdraft.base.names.engine_label), for the claims' finding E1.
        self.engine_labels = (
            [names.engine_label(label, defaults.EAGER, self.engine) for label in (names.AR, names.SD, names.BD)]
            if self.engine != defaults.EAGER
            else []
        )
        self.method.update({label: self.method[self.drafter_label(label)] for label in self.engine_labels})

    def _artifacts(self, config: dict) -> None:
        """The tables and figures, and the variants each of the λ and `variants` tables shows."""
        # Variants beyond the paper's four are trained and evaluated like them, at γ_fixed over every dataset x
        # context x budget (as lambda1.0): a λ variant (its training differs from BudgetDraft's in lambda_c alone,
        # names.lambda_variants) joins the λ table, in order of λ; any other the `variants` table, which `all`
        # builds only when there is one. Each of the two tables is handed the variants it shows (artifact_settings).
        self.lambda_variants = names.lambda_variants(
            {v: {**config["training"], **o} for v, o in config["variants"].items()}
        )
        self.other_variants = [v for v in names.extra_variants(self.variants) if v not in self.lambda_variants]
        self.tables = list(names.TABLES)
        self.all_tables = self.tables + list(names.EXTRA_TABLES)  # every table the `table` rule builds
        self.tables_in_all = self.tables + (["variants"] if self.other_variants else [])
        # file stem under results/figures/ -> artifact: the paper's (in `all`), and every figure (one rule draws them)
        self.figures = {stem: artifact for artifact, stem in names.FIGURE_STEMS.items()}
        self.all_figures = {**self.figures, **{stem: a for a, stem in names.EXTRA_FIGURE_STEMS.items()}}

    # ------------------------------------------------------------------------------------------------ labels

    def drafter_label(self, label: str) -> str:
        """The drafter a cell label decodes with: LABEL@POLICY and LABEL+ENGINE are LABEL's."""
        return names.label_policy(names.label_engine(label, self.engine)[0], self.policy)[0]

    def label_engine(self, label: str) -> str:
        """The engine a cell label decodes on: its own (LABEL+eager), else the config's."""
        return names.label_engine(label, self.engine)[1]

    def label_policy(self, label: str) -> str:
        """The sparse policy a cell label decodes with: its own (LABEL@POLICY), else the config's."""
        return names.label_policy(label, self.policy)[1]

    def replicated(self, label: str) -> bool:
        """Whether a cell label's drafter is trained once per replicate: every variant, and SD and TriForce when they
        decode with the trained base drafter. AR, EAGLE-3 (one run) and, without `base_drafter`, SD and TriForce
        (the untrained drafter) are measured once and shared by every replicate."""
        label = self.drafter_label(label)
        return label in self.variants or (bool(self.base) and label in (names.SD, names.TRIFORCE))

    # ------------------------------------------------------------------------------------------------ cells

    def cell(self, label, dataset, context, budget, gamma, replicate=None) -> str:
        """A cell file (budgetdraft.evaluation.cellfile.cell_path): results/cells/LABEL/rR/... for replicate R of a
        trained drafter, results/cells/LABEL/... shared (``replicate`` None)."""
        shared = names.SHARED if replicate is None else replicate
        return cellfile.cell_path(label, dataset, context, budget, gamma, shared)

    def cell_files(self, label, dataset, context, budget, gamma) -> list[str]:
        """The files of one grid cell: one per replicate (`replicated`), else the one shared file."""
        if self.replicated(label):
            return [self.cell(label, dataset, context, budget, gamma, r) for r in self.replicates]
        return [self.cell(label, dataset, context, budget, gamma)]

    def ar_cells(self, datasets=None, contexts=None) -> list[str]:
        return [self.cell(names.AR, d, c, 0, 0) for d in datasets or self.datasets for c in contexts or self.contexts]

    def sweep_cells(self, label) -> list[str]:
        """Every dataset x context x budget x the context's γ sweep."""
        return [
            f
            for d in self.datasets
            for c in self.contexts
            for b in self.budgets
            for g in self.config["gammas"][c]
            for f in self.cell_files(label, d, c, b, g)
        ]

    def cells_at(self, labels, datasets=None, contexts=None, gamma=None) -> list[str]:
        """Every dataset x context x budget at one γ (default: gamma_fixed)."""
        gamma = gamma or self.config["gamma_fixed"]
        return [
            f
            for label in labels
            for d in datasets or self.datasets
            for c in contexts or self.contexts
            for b in self.budgets
            for f in self.cell_files(label, d, c, b, gamma)
        ]

    def artifact_cells(self, artifact: str) -> list[str]:
        """The cell files one table or figure reads (docs/artifacts.md, 'cells it needs'), unique, in order."""
        config, ar_cells, cells_at = self.config, self.ar_cells, self.cells_at
        cmp, single, collapse, pol = config["comparison"], config["single_budget"], config["collapse"], self.policies
        SD, BD = names.SD, names.BD

        def sweeps():
            return self.sweep_cells(SD) + self.sweep_cells(BD)

        cells = {
            "main": lambda: ar_cells() + sweeps(),
            "vram_gamma": lambda: ar_cells() + sweeps(),
            "vram": lambda: ar_cells() + cells_at([SD, BD]),
            "ablation_lc": lambda: ar_cells() + cells_at([names.LA_ONLY, BD]),
            "lambda": lambda: ar_cells() + cells_at(self.lambda_variants),
            "variants": lambda: ar_cells() + cells_at([BD] + self.other_variants),
            "comparison": lambda: (
                ar_cells([cmp["dataset"]], cmp["contexts"])
                + cells_at([SD, BD], [cmp["dataset"]], cmp["contexts"], cmp["gamma"])
                + [
                    f
                    for label in self.baselines
                    for c in cmp["contexts"]
                    for f in self.cell_files(label, cmp["dataset"], c, self.baseline_budget, cmp["gamma"])
                ]
            ),
            "single_budget": lambda: (
                ar_cells([single["dataset"]], [single["context"]])
                + cells_at([names.SINGLE, BD], [single["dataset"]], [single["context"]], single["gamma"])
            ),
            "fig_collapse": lambda: cells_at([SD], [collapse["dataset"]], None, collapse["gamma"]),
            "fig_gamma": lambda: ar_cells() + self.sweep_cells(BD),
            "fig_errorbar": lambda: ar_cells() + self.sweep_cells(BD),
            "fig_policies": lambda: (
                ar_cells([pol["dataset"]]) + cells_at(self.policy_labels, [pol["dataset"]], None, pol["gamma"])
            ),
        }[artifact]()
        return list(dict.fromkeys(cells))

    def engine_cells(self) -> list[str]:
        """The eager companions of a graphs run (`engine_labels`) and the graphs cells they are compared with."""
        if not self.engine_labels:
            return []
        dataset, ar = self.config["comparison"]["dataset"], self.engine_labels[0]
        return [self.cell(label, dataset, c, 0, 0) for label in (names.AR, ar) for c in self.contexts] + self.cells_at(
            [names.SD, names.BD] + self.engine_labels[1:], [dataset]
        )

    def all_cells(self) -> list[str]:
        """Every cell the claims read: the artifacts' of `all` and, on graphs, the eager companions (engine_cells)."""
        artifacts = self.tables_in_all + list(self.figures.values())
        return list(dict.fromkeys([c for a in artifacts for c in self.artifact_cells(a)] + self.engine_cells()))

    def every_cell(self) -> list[str]:
        """Every cell file any target of the workflow can ask for: every table's and figure's (the `policies` and
        `variants` ones too) and the eager companions (the cell files `set_aside_unreadable` checks)."""
        artifacts = self.all_tables + list(self.all_figures.values())
        return list(dict.fromkeys([c for a in artifacts for c in self.artifact_cells(a)] + self.engine_cells()))

    def artifact_files(self, artifacts) -> list[str]:
        """The files of tables and figures (by artifact): results/tables/A.tex, results/figures/STEM.{pdf,png}."""
        files = [f"results/tables/{a}.tex" for a in artifacts if a in self.all_tables]
        files += [
            f"results/figures/{stem}.{ext}"
            for stem, a in self.all_figures.items()
            if a in artifacts
            for ext in ("pdf", "png")
        ]
        return files

    def cell_wildcards(self, replicated: bool) -> dict[str, str]:
        """The wildcard constraints of the eval rule of shared cells (``replicated`` False) or of one replicate's."""

        def escaped(values):
            return "|".join(re.escape(str(v)) for v in values)

        constraints = {
            "label": escaped(label for label in self.method if self.replicated(label) == replicated),
            "dataset": escaped(self.datasets),
            "context": escaped(self.contexts),
            "budget": cellfile.NUMBER,
            "gamma": cellfile.NUMBER,
        }
        return {**constraints, "replicate": escaped(self.replicates)} if replicated else constraints

    @staticmethod
    def asked_cells(targets) -> list[str]:
        """The cell files among command-line ``targets``, each as its path under results/cells/ once resolved ('..'
        and symbolic links followed): ``results/cells/../../elsewhere/sd/gs/1K/B16_g3.parquet`` is no cell."""
        return [str(cell) for cell in map(cell_under_results, targets) if cell is not None]

    # ------------------------------------------------------------------------------------------------ drafters

    def training_data(self, stage: str) -> dict:
        """Sequences of a training stage: `base_drafter.data` for the base drafter, `training_data` for the variants."""
        return self.base["data"] if stage == "base" else self.config["training_data"]

    def base_drafter_dir(self, replicate) -> str:
        """The drafter every other drafter of a replicate starts from: its base drafter when config `base_drafter`
        trains one (a directory() output of rule train_base), else the exported drafter untouched (the paper's
        llama-68m)."""
        if self.base:
            return f"results/models/drafter_base/r{replicate}"
        return "results/models/drafter_untrained"

    def drafter_dir(self, label, replicate=None) -> str | None:
        """The directory a cell label's drafter is read from (a directory() output; None for AR); ``replicate`` for
        the labels that are `replicated`."""
        label = self.drafter_label(label)
        if label == names.AR:
            return None
        if label in (names.SD, names.TRIFORCE):
            return self.base_drafter_dir(replicate)
        if label == names.EAGLE3:
            return f"results/drafters/{label}"
        return f"results/drafters/r{replicate}/{label}"

    def comparison_drafters(self) -> dict[str, list[str]]:
        """{label: [its model directories]} of the comparison table's rows, whose sizes the table counts from the
        weights (TriForce: its drafter + the verifier, its middle level); replicates have the same sizes: the
        first's."""
        first = self.replicates[0]
        drafters = {names.SD: [self.base_drafter_dir(first)], names.BD: [self.drafter_dir(names.BD, first)]}
        if names.TRIFORCE in self.baselines:
            drafters[names.TRIFORCE] = [self.base_drafter_dir(first), VERIFIER]
        if names.EAGLE3 in self.baselines:
            drafters[names.EAGLE3] = [self.drafter_dir(names.EAGLE3)]
        return drafters

    def artifact_drafters(self, artifact: str) -> dict[str, list[str]]:
        """{label: [model directories]} whose sizes a table counts: the comparison table's drafters, else none."""
        return self.comparison_drafters() if artifact == "comparison" else {}

    def export_dtype(self, role: str) -> str:
        """The dtype a model is exported in: the verifier's `verifier_dtype`; the drafter's training dtype (the dtype
        it is trained and, with the paper's fp32 drafter, decoded in)."""
        if role == "verifier":
            return self.config["verifier_dtype"]
        return self.config["training"].get("dtype", self.config["drafter_dtype"])

    def revision_flag(self, repo: str | None) -> str:
        """`--revision SHA` when the config's `revisions:` pins hub repository ``repo``, else nothing."""
        pinned = revisions.revision(self.config, repo)
        return f"--revision {pinned}" if pinned else ""

    @staticmethod
    def gpu_slots(device) -> int:
        """GPU slots a job on ``device`` takes: 1 on CUDA (a counter locally, --gpus=1 on SLURM), else 0."""
        return 1 if str(device).startswith("cuda") else 0

    # ------------------------------------------------------------------------------------------------ hparams

    @staticmethod
    def seeded(hparams: dict, replicate) -> dict:
        """Training hparams of one replicate: seed + replicate (data order and budget sampling); replicate 0 trains
        exactly what a configuration without replicates trains."""
        return {**hparams, "seed": TrainingHparams.from_json(hparams).seed + int(replicate)}

    def base_hparams(self, replicate) -> str:
        """`training:` merged with `base_drafter.training`, L_A only (the full-cache windows have no prefix to
        sparsify), as handed to `budgetdraft train --hparams`."""
        hparams = {**self.config["training"], "device": self.training_device, **self.base["training"], "lambda_c": 0.0}
        return json.dumps(self.seeded(hparams, replicate), sort_keys=True)

    def variant_hparams(self, variant: str, replicate=0) -> str:
        """`training:` merged with the variant's overrides and the replicate's seed, as handed to `budgetdraft train
        --hparams`."""
        hparams = {**self.config["training"], "device": self.training_device, **self.config["variants"][variant]}
        return json.dumps(self.seeded(hparams, replicate), sort_keys=True)

    def eagle3_hparams(self) -> str:
        """`train-eagle3 --hparams`: `baselines.eagle3.training` on `device` unless it names its own."""
        return json.dumps(self.eagle3_training, sort_keys=True)

    # ------------------------------------------------------------------------------------------------ settings

    def samples(self, dataset: str) -> int:
        return self.config["datasets"][dataset].get("samples", self.config["samples"])

    @cached_property
    def paper_settings(self) -> dict:
        """The settings of `budgetdraft paper` and `claims` (what to lay out where), built from the config once and
        checked against their contract (`budgetdraft.report.settings.PaperSettings`)."""
        config, cmp, base = self.config, self.config["comparison"], self.base
        settings = {
            "datasets": {key: d["name"] for key, d in config["datasets"].items()},
            "contexts": self.contexts,
            "context_tokens": config["contexts"],
            "budgets": self.budgets,
            "gammas": config["gammas"],
            "gamma_fixed": config["gamma_fixed"],
            "collapse": config["collapse"],
            "comparison": {
                "dataset": cmp["dataset"],
                "contexts": cmp["contexts"],
                "gamma": cmp["gamma"],
                "baselines": self.baselines,
                "budgets": {label: self.baseline_budget for label in self.baselines},
            },
            "single_budget": config["single_budget"],
            "lossless_check": config["lossless_check"],
            "near_tie_margin": config["near_tie_margin"],
            "verifier_prefill_runs": defaults.PREFILL_RUNS if config["share_verifier_prefill"] else 0,
            "variants": {v: Variant.of_hparams(json.loads(self.variant_hparams(v))).to_json() for v in self.variants},
            "base_drafter_steps": base["training"]["steps"] if base else 0,
            "replicates": len(self.replicates),
            "base_drafter_teacher": base["teacher"] if base else "",
        }
        PaperSettings.from_json(settings)
        return settings

    def artifact_settings(self, artifact: str) -> str:
        """The settings JSON of one artifact (or of the claims): `paper_settings`, for the policies figure with its
        `policies:` too, for the λ and `variants` tables with only the extra variants each shows (lambda_variants,
        other_variants)."""
        settings = dict(self.paper_settings)
        shown = {"lambda": self.lambda_variants, "variants": self.other_variants}.get(artifact)
        if shown is not None:
            settings["variants"] = {
                v: x for v, x in settings["variants"].items() if v in names.REQUIRED_VARIANTS or v in shown
            }
        if artifact == "fig_policies":
            settings["policies"] = {**self.policies, "default": self.policy}
            PaperSettings.from_json(settings)
        return json.dumps(settings)

    def settings_files(self) -> dict[str, str]:
        """{results/settings/NAME.json: the JSON rule settings writes there} of every artifact and of the claims."""
        artifacts = [*self.all_tables, *self.all_figures.values(), "claims"]
        return {SETTINGS_FILE.format(name=name): self.artifact_settings(name) for name in artifacts}

    # ------------------------------------------------------------------------------------------------ cell jobs

    def cell_inputs(self, label, dataset, context, replicate=None) -> dict:
        """The inputs of a cell's job: the verifier, the prompts, its code, the shared prefill
        (`share_verifier_prefill`) and the drafter (not for AR)."""
        inputs = {
            "verifier": VERIFIER,
            "prompts": f"results/data/prompts/{dataset}/{context}.parquet",
            "code": self.cell_code(label),
        }
        if self.config["share_verifier_prefill"]:
            inputs["prefill"] = f"results/prefill/{dataset}/{context}.safetensors"
        drafter = self.drafter_dir(label, replicate)
        if drafter is not None:
            inputs["drafter"] = drafter
        return inputs

    def sampling_flags(self) -> str:
        """The sampling flags of `eval-cell`; none when greedy, so a greedy cell's command is what it always was."""
        s = self.config["sampling"]
        if s["temperature"] == 0:
            return ""
        return f" --temperature {s['temperature']} --top-p {s['top_p']} --top-k {s['top_k']} --seed {s['seed']}"

    def extra_flag(self, label: str) -> str:
        """`--extra JSON` of a baseline's cell (`baselines.<name>` of the config but its `training`), else nothing."""
        settings = self.config["baselines"].get(label)
        if label not in names.BASELINES or not settings:
            return ""
        extra = {k: v for k, v in settings.items() if k != "training"}
        return f"--extra {shlex.quote(json.dumps(extra, sort_keys=True))}"

    # ------------------------------------------------------------------------------------------------ code

    @cached_property
    def _code(self) -> dict[str, list[str]]:
        return {stage: code_files(command) for stage, command in STAGE_COMMANDS.items()}

    def code(self, stage: str) -> list[str]:
        """The src/ modules a stage's command runs (budgetdraft.base.importgraph: its module and every module that
        imports, transitively, lazy imports included), its rule's code inputs: editing one reruns exactly the
        stages that run it. Never a list kept by hand."""
        return self._code[stage]

    @cached_property
    def _cell_code(self) -> dict[str, list[str]]:
        return {
            method: code_files("eval-cell", (baselines.module(method),) if method in names.BASELINES else ())
            for method in names.METHODS
        }

    def cell_code(self, label: str) -> list[str]:
        """The code of a cell's `eval-cell`: with a baseline's module, which eval-cell imports by a name computed
        from --method (`budgetdraft.decoding.baselines.module`)."""
        return self._cell_code[self.method[label]]


# ---------------------------------------------------------------------------------------------------- unreadable
# A cell file cut short (a full disk, a killed copy or sync; the cell rule itself writes atomically), damaged (a
# flipped bit) or that lies (edited by hand, copied to another cell's path) would stop every table that reads it, or
# worse be published; Snakemake would delete the previous table when that job fails. So when Snakemake is about to
# run jobs, before it plans them, each existing cell file is checked as every reader checks it
# (budgetdraft.evaluation.cellfile.problem: a whole parquet file, the digest written with it, page checksums, its
# invariants, its rows the cell its path names), and so is whatever else sits at a cell path (a directory, a FIFO, a
# file the user cannot read). One that fails is moved aside (FILE.unreadable, never deleted) and named with the
# reason, so the cell is measured again like a missing one; a dry run or --touch only names it, and a command that
# runs no job (--summary, --report, -D, --filegraph, ...) never gets here.


def aside_name(path: Path) -> Path:
    """FILE.unreadable, or FILE.unreadable.N when an earlier one is kept there."""
    aside, n = path.with_name(f"{path.name}.unreadable"), 1
    while aside.exists():
        aside, n = path.with_name(f"{path.name}.unreadable.{n}"), n + 1
    return aside


def cell_under_results(path) -> Path | None:
    """``path`` as a cell file's path under results/cells/ (LABEL[/rR]/DATASET/CONTEXT/B_g.parquet), its folder
    resolved ('..' and symbolic links followed; the file itself is not, so a link is what a step moves), or None when
    it resolves elsewhere or names no cell."""
    path = Path(path)
    root = Path(cellfile.CELLS).resolve()
    where = path.parent.resolve() / path.name
    if not where.is_relative_to(root):
        return None
    inside = where.relative_to(root)
    return Path(cellfile.CELLS) / inside if cellfile.path_key(inside) else None


def thing_problem(path: Path) -> str | None:
    """Why what is at a cell path cannot be used as that cell (None: nothing is there, or a whole cell): not a
    regular file (a directory, a FIFO, which a reader would wait on for ever: never opened), a file the user cannot
    read, or one a reader refuses (`cellfile.problem`)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    if not stat.S_ISREG(mode):
        kind = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
        return f"{kind.get(stat.S_IFMT(mode), 'a device')}, not a cell file"
    try:
        return cellfile.problem(path)
    except OSError as e:
        return f"cannot be read: {e.strerror}"


def set_aside_unreadable(paths, dry_run: bool) -> list[str]:
    """Move everything at a cell path of ``paths`` that a reader could not use (`thing_problem`) aside
    (FILE.unreadable, never deleted), so that its cell is measured again; with ``dry_run`` move nothing. Only a path
    that resolves inside results/cells/ is looked at (`cell_under_results`). One line per such path, saying what was
    done (or what a run would do)."""
    lines = []
    for path in dict.fromkeys(filter(None, map(cell_under_results, paths))):
        if (problem := thing_problem(path)) is None:
            continue
        aside = aside_name(path)
        if dry_run:
            lines.append(
                f"unreadable cell file {path} ({problem}): a run will move it to {aside} "
                "and measure the cell again (this dry run plans as if it were whole)"
            )
            continue
        try:
            os.replace(path, aside)
        except OSError as e:
            raise ValueError(
                f"unreadable cell file {path} ({problem}) cannot be moved to {aside} ({e.strerror}): move or "
                "remove it, and the cell is measured again"
            ) from None
        lines.append(f"unreadable cell file {path} ({problem}): moved to {aside}, measuring the cell again")
    return lines


# ---------------------------------------------------------------------------------------------------- stale settings
# A settings file (rule settings: results/settings/NAME.json) decides a table's column titles and each variant's λ;
# the run record (rule run_record: results/report/run.json) the report's configuration page. Their rules have no
# input, so Snakemake writes one again only when its params (the plan's JSON) change: a file edited by hand would be
# read by the next job that reads it and published. So when Snakemake is about to run jobs, before it plans
# them, each existing one is compared with the JSON the plan writes there; one that differs is removed, named with
# its first difference, so rule settings writes it again and every artifact that reads it is built again.


def drop_stale_settings(planned: dict[str, str], dry_run: bool) -> list[str]:
    """Remove every existing file of ``planned`` ({path: the JSON the plan writes there}) whose JSON is not that
    (`jsonio.first_difference`); with ``dry_run`` remove nothing. One line per such file, naming the difference and
    what was done (or what a run would do)."""
    lines = []
    for path, text in planned.items():
        try:
            found = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            difference = f"not readable: {getattr(e, 'strerror', None) or e}"
        else:
            try:
                difference = first_difference(json.loads(found), json.loads(text))
            except json.JSONDecodeError:
                difference = "not JSON"
        if difference is None:
            continue
        said = f"{path} is not what the config plans ({difference})"
        if dry_run:
            lines.append(f"{said}: a run will write it again and rebuild what reads it (this dry run plans as it is)")
            continue
        os.remove(path)
        lines.append(f"{said}: removed, writing it again and rebuilding what reads it")
    return lines
