"""The workflow's plan of a config: a thin front (`Plan`) over parts that each do one job, plain Python over the config
dict as the Snakefile has it after `budgetdraft.pipeline.configcheck.check_config` (the schema's defaults filled in):
no Snakemake, no file written, so tests/test_plan.py checks it in process and workflow/rules/ only wires it
(`PLAN = Plan(config)`, then `PLAN.cells.all_cells()`, `PLAN.drafters.drafter_dir(...)`, ...).

- `Labels`: which methods and variants this config measures, and what each cell label decodes with;
- `CellGrid`: which cell files each table, figure, control and target reads;
- `TrainingChain`: where each drafter lives and what its training job is handed;
- `SettingsFiles`: what each artifact (and the claims) lays out where, the files rule settings writes;
- `CellJobs`: a cell's inputs and flags, and the flags other jobs share;
- `CodeInputs`: the digest of the modules each stage runs, its jobs' code input.

The steps that change files before any job runs (a damaged cell set aside, a stale settings file removed) are not the
plan's: `budgetdraft.pipeline.setaside`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
from functools import cached_property
from pathlib import Path

from budgetdraft.base import defaults, methods, names, revisions
from budgetdraft.base.atomic import files_sha256
from budgetdraft.base.importgraph import code_files
from budgetdraft.evaluation import cellfile
from budgetdraft.report import artifacts, paper
from budgetdraft.report.settings import PaperSettings, Variant
from budgetdraft.training.data import AUTHORS_FILES
from budgetdraft.training.hparams import Eagle3Hparams, TrainingHparams

# stage -> the `budgetdraft` command its rule runs (the stage's code input: `CodeInputs.code`)
STAGE_COMMANDS = {
    "models": "export-model",
    "data": "prepare",
    "targets": "targets",
    "train": "train",
    "eagle3": "train-eagle3",
    "prefill": "prefill",
    "profile": "profile",
    "paper": "paper",
    "claims": "claims",
    "paper_diff": "paper-diff",
}
VERIFIER = "results/models/verifier"
SETTINGS_FILE = "results/settings/{name}.json"  # rule settings' output: what `paper` and `claims` lay out where
PAPER_DIFF = "paper_diff"  # the settings file of the paper diff: the claims' settings and the run's `measurement`
CODE_DIGEST = "results/code/{code}.sha256"  # rule code's output: the sha256 of the modules a stage runs


class Plan:
    """The plan of one config (``config``: checked, its defaults filled in): its shape, and its parts."""

    def __init__(self, config: dict):
        self.config = config
        self.datasets = list(config["datasets"])
        self.contexts = sorted(
            config["contexts"], key=config["contexts"].get
        )  # shortest first, as configcheck orders them
        self.budgets = list(config["budgets"])
        # Training replicates: the chain base drafter -> variants runs once per replicate r (training seed + r).
        self.replicates = list(range(config["replicates"]))
        # the base drafter's training (only when config `base_drafter` trains one), else None
        self.base = config.get("base_drafter")
        # A method that does not use the drafter budget B (TriForce, EAGLE-3) has one cell at the largest B.
        self.baseline_budget = max(self.budgets)
        # the longest prompt: where PI's interpolated drafter must reach, and where the positional profile is taken
        self.longest_context = self.contexts[-1]
        self.labels = Labels(self)
        self.drafters = TrainingChain(self)
        self.cells = CellGrid(self)
        self.code = CodeInputs()
        self.jobs = CellJobs(self)
        self.settings = SettingsFiles(self)


class Labels:
    """Which methods and variants a config measures, and what each cell label decodes with."""

    def __init__(self, plan: Plan):
        config = plan.config
        self.base = plan.base
        # Variants = cell labels: trained here (once per replicate) or given as a checkpoint (`checkpoint`: exported
        # once, one external draw); a given variant whose checkpoint is empty is left out, its rows "not run".
        given = {v: o for v, o in config["variants"].items() if "checkpoint" in o}
        self.not_run = {
            v: o.get("not_run") or f"variants.{v}.checkpoint is not given"
            for v, o in given.items()
            if not o["checkpoint"]
        }
        self.variants = [v for v in config["variants"] if v not in self.not_run]
        self.given = {v: o for v, o in given.items() if v not in self.not_run}
        self.trained = [v for v in self.variants if v not in self.given]
        # the declared methods this config runs (budgetdraft.base.methods): AR and SD always, the baselines and the
        # controls its `baselines.enabled` and `controls` name
        self.methods = {label: methods.get(label) for label in methods.enabled(config)}
        self.methods.update(
            {v: methods.variant(v, names.METHOD_NAMES.get(v, ""), given=v in self.given) for v in self.variants}
        )
        self.baselines = [label for label, m in self.methods.items() if m.enabled_by == "baselines"]
        self.controls = [label for label, m in self.methods.items() if m.enabled_by == "controls"]
        # Variants beyond the paper's four are trained and evaluated like them, at γ_fixed over every dataset x
        # context x budget (as lambda1.0): a λ variant (its training differs from BudgetDraft's in lambda_c alone,
        # names.lambda_variants) joins the λ table, in order of λ; any other the `variants` table, which `all`
        # builds only when there is one. Each of the two tables is handed the variants it shows (artifact_settings).
        self.lambda_variants = names.lambda_variants(
            {v: {**config["training"], **o} for v, o in config["variants"].items()}
        )
        self.other_variants = [v for v in names.extra_variants(self.variants) if v not in self.lambda_variants]
        self._companions(config, plan.datasets)

    def _companions(self, config: dict, datasets: list) -> None:
        """The cell labels and their eval-cell --method (`method`): methods, variants and their companions."""
        self.method = {label: m.decodes for label, m in methods.REGISTRY.items()}
        self.method.update({variant: methods.SD for variant in self.variants})
        self.policy, self.engine = config["policy"], config["engine"]  # every cell's, unless its label says another
        # The `policies` target: the base drafter and BudgetDraft under each sparse policy; a policy other than the
        # config's `policy` has its own cell labels (LABEL@POLICY, budgetdraft.base.names.policy_label).
        self.policies = {
            "names": list(defaults.COMPARED_POLICIES),
            "dataset": datasets[0],
            "gamma": defaults.GAMMA,
            **config.get("policies", {}),
        }
        run = [label for label in (names.SD, names.BD) if label not in self.not_run]  # BudgetDraft may be left out
        self.policy_labels = [
            names.policy_label(label, policy, self.policy) for label in run for policy in self.policies["names"]
        ]
        self.method.update({label: self.method[self.drafter_label(label)] for label in self.policy_labels})
        # `engine: graphs`: AR, SD and BudgetDraft also decoded eagerly at γ_fixed on the comparison dataset
        # (LABEL+eager, budgetdraft.base.names.engine_label), for the claims' finding E1.
        self.engine_labels = (
            [names.engine_label(label, defaults.EAGER, self.engine) for label in (names.AR, *run)]
            if self.engine != defaults.EAGER
            else []
        )
        self.method.update({label: self.method[self.drafter_label(label)] for label in self.engine_labels})
        # `long_generation`: AR, SD, BudgetDraft and the copier generating more tokens (LABEL~N, names.length_label)
        self.long = config.get("long_generation") or None
        self.long_labels = (
            [
                names.length_label(label, self.long["max_new_tokens"])
                for label in self.long["methods"]
                if label not in self.not_run and (label in self.methods or label in self.variants)
            ]
            if self.long
            else []
        )
        self.method.update({label: self.method[self.drafter_label(label)] for label in self.long_labels})
        self.max_new_tokens = config["max_new_tokens"]

    def drafter_label(self, label: str) -> str:
        """The drafter a cell label decodes with: LABEL@POLICY, LABEL+ENGINE and LABEL~N are LABEL's."""
        label = names.split_length_label(label)[0]
        return names.split_policy_label(names.split_engine_label(label, self.engine)[0], self.policy)[0]

    def new_tokens_of(self, label: str) -> int:
        """The new tokens a cell label generates: its own (LABEL~N), else the config's max_new_tokens."""
        return names.split_length_label(label)[1] or self.max_new_tokens

    def engine_of(self, label: str) -> str:
        """The engine a cell label decodes on: its own (LABEL+eager), else the config's."""
        return names.split_engine_label(label, self.engine)[1]

    def policy_of(self, label: str) -> str:
        """The sparse policy a cell label decodes with: its own (LABEL@POLICY), else the config's."""
        return names.split_policy_label(label, self.policy)[1]

    def method_of(self, label: str) -> methods.Method:
        """The method (declared, or a variant) a cell label measures: LABEL@POLICY and LABEL+ENGINE are LABEL's, a
        declared label (sd@full) its own."""
        if label in self.methods or label in methods.REGISTRY:
            return self.methods.get(label) or methods.get(label)
        return self.methods[self.drafter_label(label)]

    def replicated(self, label: str) -> bool:
        """Whether a cell label's drafter is trained once per replicate: every trained variant, and SD, TriForce and
        the controls when they decode with the trained base drafter. AR, EAGLE-3 (one run), a variant given as a
        checkpoint and, without `base_drafter`, SD and TriForce (the untrained drafter) are measured once and
        shared by every replicate."""
        method = self.method_of(label)
        return method.drafter == methods.TRAINED or (bool(self.base) and method.replicated_drafter)


class TrainingChain:
    """Where each drafter lives (the training chain base drafter -> variants, per replicate, and the drafters made or
    given beside it), and what each training job is handed."""

    def __init__(self, plan: Plan):
        self.plan, self.labels, self.config = plan, plan.labels, plan.config
        self.base, self.replicates = plan.base, plan.replicates
        # Training stages, each with its own sequences and teacher targets: the base drafter (short full-cache
        # windows) and BudgetDraft's variants (long prefix + supervised continuation).
        self.training_stages = (["base"] if self.base else []) + ["budgetdraft"]
        # The device each kind of job runs on: model jobs on `device`; the training chain (targets, train_base,
        # train) on `training.device`, else `device`; EAGLE-3's head on `baselines.eagle3.training.device`.
        config = self.config
        self.training_device = config["training"].get("device", config["device"])
        self.eagle3_training = {
            "device": config["device"],
            **config["baselines"].get(names.EAGLE3, {}).get("training", {}),
        }
        Eagle3Hparams.from_json(self.eagle3_training)  # the contract of train-eagle3 --hparams, at plan time

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
        method = self.labels.method_of(label)
        return {
            methods.NONE: lambda: None,
            methods.BASE: lambda: self.base_drafter_dir(replicate),
            methods.INTERPOLATED: lambda: self.interpolated_dir(replicate),
            methods.HEAD: lambda: f"results/drafters/{method.label}",
            methods.TRAINED: lambda: f"results/drafters/r{replicate}/{method.label}",
            methods.GIVEN: lambda: f"results/drafters/given/{method.label}",
        }[method.drafter]()

    def interpolated_dir(self, replicate) -> str:
        """PI's drafter: the base drafter of a replicate (or the untrained one, shared) with its positions interpolated
        to cover the longest context (rule interpolate)."""
        return f"results/drafters/r{replicate}/{methods.PI}" if self.base else f"results/drafters/{methods.PI}"

    def longest_tokens(self) -> int:
        """The longest context's prompt tokens: the positions PI's drafter is interpolated to cover."""
        return self.config["contexts"][self.plan.longest_context]

    def profiled(self, replicate) -> dict[str, str]:
        """{label: drafter directory} of the positional profile of one replicate (rule profile): the base drafter
        (SD's), PI's when it runs, and every variant."""
        labels = [methods.SD] + [methods.PI] * (methods.PI in self.labels.controls) + self.labels.variants
        return {label: self.drafter_dir(label, replicate) for label in labels}

    def trained_drafters(self) -> list[str]:
        """Every trained variant's directory, per replicate (their loss logs)."""
        return [self.drafter_dir(v, r) for r in self.replicates for v in self.labels.trained]

    def comparison_drafters(self) -> dict[str, list[str]]:
        """{label: [its model directories]} of the comparison table's rows, whose sizes the table counts from the
        weights (TriForce: its drafter + the verifier, its middle level); replicates have the same sizes: the
        first's."""
        first = self.replicates[0]
        models = {"drafter": lambda label: self.drafter_dir(label, first), "verifier": lambda label: VERIFIER}
        drafters = {
            label: [models[part](label) for part in m.comparison]
            for label, m in self.labels.methods.items()
            if m.comparison
        }
        bd = {names.BD: [self.drafter_dir(names.BD, first)]} if names.BD in self.labels.variants else {}
        return {names.SD: drafters.pop(names.SD), **bd, **drafters}

    def artifact_drafters(self, artifact: str) -> dict[str, list[str]]:
        """{label: [model directories]} whose sizes a table counts: the comparison table's drafters, else none."""
        return self.comparison_drafters() if artifact == "comparison" else {}

    def export_dtype(self, role: str) -> str:
        """The dtype a model is exported in: the verifier's `verifier_dtype`; the drafter's training dtype (the dtype
        it is trained and, with the paper's fp32 drafter, decoded in)."""
        if role == "verifier":
            return self.config["verifier_dtype"]
        return self.config["training"].get("dtype", self.config["drafter_dtype"])

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

    def given_revision(self, variant: str) -> str:
        """The hub commit a given checkpoint is read at: its own `revision`, else the config's `revisions:` entry of
        its repository ('' for a local checkpoint, or a hub one left unpinned: warned about at plan time)."""
        given = self.labels.given[variant]
        return given.get("revision") or revisions.revision(self.config, revisions.hub_model(str(given["checkpoint"])))

    def given_files(self, variant: str) -> list[str]:
        """The files of a local checkpoint (inside its `subfolder`), the inputs of its export: a checkpoint replaced
        at the same path is exported and measured again. [] for a hub checkpoint (its revision says what it is)."""
        given = self.labels.given[variant]
        if revisions.hub_model(str(given["checkpoint"])):
            return []
        where = Path(os.path.expanduser(str(given["checkpoint"]))) / given.get("subfolder", "")
        return sorted(str(f) for f in where.iterdir() if f.is_file()) if where.is_dir() else []

    def given_digest(self, variant: str) -> str:
        """What a given checkpoint is, by content: the sha256 of its files (a local one) or its repository, subfolder
        and revision (a hub one); export_given's params, so that a checkpoint that changes is exported again even
        when its files keep an older modification time (copied with it)."""
        given = self.labels.given[variant]
        files = self.given_files(variant)
        if files:
            return _files_digest(tuple((f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files))
        return f"{given['checkpoint']}/{given.get('subfolder', '')}@{self.given_revision(variant)}"

    def export_given_flags(self, variant: str) -> str:
        """export-model's flags for a variant given as a checkpoint: the checkpoint, its subfolder and revision."""
        given, revision = self.labels.given[variant], self.given_revision(variant)
        flags = [f"--spec {shlex.quote(str(given['checkpoint']))}"]
        flags += [f"--subfolder {shlex.quote(given['subfolder'])}"] if given.get("subfolder") else []
        flags += [f"--revision {shlex.quote(revision)}"] if revision else []
        return " ".join(flags)


@functools.lru_cache(maxsize=32)
def _files_digest(files: tuple[tuple[str, int, int], ...]) -> str:
    """sha256 of files named with their size and modification time: read once per process while they stay so."""
    return files_sha256([f for f, _, _ in files])


class CellGrid:
    """Which cell files each table, figure, control and target reads (docs/artifacts.md, 'cells it needs')."""

    def __init__(self, plan: Plan):
        self.plan, self.labels, self.config = plan, plan.labels, plan.config
        # the declared tables and figures (budgetdraft.report.artifacts), and those `all` builds for this config
        self.artifacts = paper.ARTIFACTS
        other = bool(self.labels.other_variants)
        wanted = {artifacts.ALWAYS: True, artifacts.NEVER: False, artifacts.OTHER_VARIANTS: other}
        self.in_all = [key for key, a in self.artifacts.items() if wanted[a.in_all]]
        self.all_tables = [key for key, a in self.artifacts.items() if a.kind == "table"]  # what rule `table` builds
        self.all_figures = {a.stem: key for key, a in self.artifacts.items() if a.kind == "figure"}  # stem -> key
        self.figures_in_all = [key for key in self.in_all if self.artifacts[key].kind == "figure"]

    def cell(self, label, dataset, context, budget, gamma, replicate=None) -> str:
        """A cell file (budgetdraft.evaluation.cellfile.cell_path): results/cells/LABEL/rR/... for replicate R of a
        trained drafter, results/cells/LABEL/... shared (``replicate`` None)."""
        shared = names.SHARED if replicate is None else replicate
        return cellfile.cell_path(label, dataset, context, budget, gamma, shared)

    def cell_files(self, label, dataset, context, budget, gamma) -> list[str]:
        """The files of one grid cell: one per replicate (`replicated`), else the one shared file."""
        if self.labels.replicated(label):
            return [self.cell(label, dataset, context, budget, gamma, r) for r in self.plan.replicates]
        return [self.cell(label, dataset, context, budget, gamma)]

    def budgets_of(self, label: str) -> list[int]:
        """The budgets a label's cells take (its method's `budgets`): every B, the largest only, or B0."""
        kind = self.labels.method_of(label).budgets
        plan = self.plan
        return {methods.GRID: plan.budgets, methods.LARGEST: [plan.baseline_budget], methods.NO_BUDGET: [0]}[kind]

    def where(self, section: str) -> tuple[list[str], list[str], int]:
        """(datasets, contexts, γ) of a config section a `Cells` names ("": every dataset and context, γ_fixed)."""
        c, plan, policies = self.config, self.plan, self.labels.policies
        return {
            "": lambda: (plan.datasets, plan.contexts, c["gamma_fixed"]),
            "comparison": lambda: ([c["comparison"]["dataset"]], c["comparison"]["contexts"], c["comparison"]["gamma"]),
            "single_budget": lambda: (
                [c["single_budget"]["dataset"]],
                [c["single_budget"]["context"]],
                c["single_budget"]["gamma"],
            ),
            "collapse": lambda: ([c["collapse"]["dataset"]], plan.contexts, c["collapse"]["gamma"]),
            "policies": lambda: ([policies["dataset"]], plan.contexts, policies["gamma"]),
        }[section]()

    def labels_of(self, labels) -> list[str]:
        """Cell labels of a `Cells`, its groups (budgetdraft.report.artifacts.GROUPS) resolved for this config."""
        ls = self.labels
        groups = {
            "baselines": ls.baselines,
            "lambda_variants": ls.lambda_variants,
            "other_variants": ls.other_variants,
            "policy_labels": ls.policy_labels,
        }
        return [label for item in labels for label in groups.get(item, [item]) if label not in ls.not_run]

    def selected(self, cells: artifacts.Cells) -> list[str]:
        """The cell files of one `Cells`: each label at every dataset × context of its section × the budgets its
        method takes × γ (the section's, or each context's sweep); AR's cells are B0_g0."""
        datasets, contexts, gamma = self.where(cells.where)
        return [
            f
            for label in self.labels_of(cells.labels)
            for d in datasets
            for c in contexts
            for b in self.budgets_of(label)
            for g in (
                [0]
                if self.labels.method[label] == methods.AR
                else self.config["gammas"][c]
                if cells.gamma == artifacts.SWEEP
                else [gamma]
            )
            for f in self.cell_files(label, d, c, b, g)
        ]

    def artifact_cells(self, artifact: str) -> list[str]:
        """The cell files one table or figure reads (its declared `cells`), unique, in order."""
        return list(dict.fromkeys(f for cells in self.artifacts[artifact].cells for f in self.selected(cells)))

    def control_cells(self) -> list[str]:
        """The cells of the controls and baselines the claims read (methods declared with `claims`: PI, SD with a full
        cache, the prompt-lookup copier): every dataset × context × the budgets each takes, at γ_fixed."""
        labels = tuple(label for label, m in self.labels.methods.items() if m.claims)
        return self.selected(artifacts.Cells(labels)) if labels else []

    def engine_cells(self) -> list[str]:
        """The eager companions of a graphs run (`engine_labels`) and the graphs cells they are compared with."""
        ls = self.labels
        if not ls.engine_labels:
            return []
        dataset, ar, gamma = self.config["comparison"]["dataset"], ls.engine_labels[0], self.config["gamma_fixed"]
        compared = [label for label in (names.SD, names.BD) if label not in ls.not_run] + ls.engine_labels[1:]
        return [self.cell(label, dataset, c, 0, 0) for label in (names.AR, ar) for c in self.plan.contexts] + [
            f
            for label in compared
            for c in self.plan.contexts
            for b in self.plan.budgets
            for f in self.cell_files(label, dataset, c, b, gamma)
        ]

    def long_cells(self) -> list[str]:
        """The long-generation control's cells (`long_generation`): each of its labels (LABEL~N) on its dataset at
        every context, at its budget (AR and the copier: none) and γ_fixed (AR: 0)."""
        ls, long = self.labels, self.labels.long
        if not long:
            return []
        out = []
        for label in ls.long_labels:
            ar = ls.method[label] == methods.AR
            budgets = [long["budget"]] if self.budgets_of(label) == self.plan.budgets else self.budgets_of(label)
            for c in self.plan.contexts:
                for b in budgets:
                    out += self.cell_files(
                        label, long["dataset"], c, 0 if ar else b, 0 if ar else self.config["gamma_fixed"]
                    )
        return out

    def all_cells(self) -> list[str]:
        """Every cell the claims read: the artifacts' of `all`, the controls', the long generations' and, on graphs,
        the eager companions."""
        cells = [c for a in self.in_all for c in self.artifact_cells(a)]
        return list(dict.fromkeys(cells + self.control_cells() + self.long_cells() + self.engine_cells()))

    def every_cell(self) -> list[str]:
        """Every cell file any target of the workflow can ask for: every table's and figure's (the `policies` and
        `variants` ones too), the controls' and the eager companions (the cell files a damaged one is set aside
        from: budgetdraft.pipeline.setaside)."""
        cells = [c for a in self.artifacts for c in self.artifact_cells(a)]
        return list(dict.fromkeys(cells + self.control_cells() + self.long_cells() + self.engine_cells()))

    def paper_diff_cells(self) -> list[str]:
        """The cells the paper diff's sanity checks read: AR's, and SD's and BudgetDraft's at the shortest context
        and γ_fixed (is acceptance the same at every budget there?)."""
        shortest, gamma, ls = self.plan.contexts[0], self.config["gamma_fixed"], self.labels
        ar = self.selected(artifacts.Cells((methods.AR,)))
        return ar + [
            f
            for label in (methods.SD, names.BD)
            if label in ls.methods and label not in ls.not_run
            for d in self.plan.datasets
            for b in self.plan.budgets
            for f in self.cell_files(label, d, shortest, b, gamma)
        ]

    def profile_files(self) -> list[str]:
        """The positional profile of each training replicate (rule profile), read by the claims."""
        return [f"results/profile/r{r}.parquet" for r in self.plan.replicates]

    def artifact_files(self, keys) -> list[str]:
        """The files of tables and figures (by key): results/tables/KEY.tex, results/figures/STEM.{pdf,png}."""
        return [f for key in keys for f in self.artifacts[key].files]

    def cell_wildcards(self, replicated: bool) -> dict[str, str]:
        """The wildcard constraints of the eval rule of shared cells (``replicated`` False) or of one replicate's."""

        def escaped(values):
            return "|".join(re.escape(str(v)) for v in values)

        constraints = {
            "label": escaped(label for label in self.labels.method if self.labels.replicated(label) == replicated),
            "dataset": escaped(self.plan.datasets),
            "context": escaped(self.plan.contexts),
            "budget": cellfile.NUMBER,
            "gamma": cellfile.NUMBER,
        }
        return {**constraints, "replicate": escaped(self.plan.replicates)} if replicated else constraints


class SettingsFiles:
    """What each artifact (and the claims) lays out where: the JSON rule settings writes to results/settings/."""

    def __init__(self, plan: Plan):
        self.plan, self.labels, self.config = plan, plan.labels, plan.config

    def samples(self, dataset: str) -> int:
        return self.config["datasets"][dataset].get("samples", self.config["samples"])

    def variant_settings(self, variant: str) -> dict:
        """What the tables say of a variant: its λ, budgets and steps as trained here, or, given as a checkpoint, the
        λ and budgets its config says it was trained with, and the checkpoint."""
        overrides = self.config["variants"][variant]
        if "checkpoint" in overrides:
            return Variant.of_checkpoint({**overrides, "checkpoint": str(overrides["checkpoint"] or "")}).to_json()
        return Variant.of_hparams(json.loads(self.plan.drafters.variant_hparams(variant))).to_json()

    @cached_property
    def paper_settings(self) -> dict:
        """The settings of `budgetdraft paper` and `claims` (what to lay out where), built from the config once and
        checked against their contract (`budgetdraft.report.settings.PaperSettings`)."""
        config, cmp, plan, ls = self.config, self.config["comparison"], self.plan, self.labels
        settings = {
            "datasets": {key: d["name"] for key, d in config["datasets"].items()},
            "contexts": plan.contexts,
            "context_tokens": config["contexts"],
            "budgets": plan.budgets,
            "gammas": config["gammas"],
            "gamma_fixed": config["gamma_fixed"],
            "collapse": config["collapse"],
            "comparison": {
                "dataset": cmp["dataset"],
                "contexts": cmp["contexts"],
                "gamma": cmp["gamma"],
                "baselines": ls.baselines,
                "budgets": {label: plan.cells.budgets_of(label)[0] for label in ls.baselines},
            },
            "single_budget": config["single_budget"],
            "lossless_check": config["lossless_check"],
            "near_tie_margin": config["near_tie_margin"],
            "verifier_prefill_runs": defaults.PREFILL_RUNS if config["share_verifier_prefill"] else 0,
            "variants": {v: self.variant_settings(v) for v in config["variants"]},
            "not_run": ls.not_run,
            "base_drafter_steps": plan.base["training"]["steps"] if plan.base else 0,
            "replicates": len(plan.replicates),
            "base_drafter_teacher": plan.base["teacher"] if plan.base else "",
        }
        PaperSettings.from_json(settings)
        return settings

    RECIPE = (
        "steps",
        "lr",
        "weight_decay",
        "warmup_steps",
        "grad_clip",
        "budgets",
        "budget_weights",
        "chunk_size",
        "lambda_c",
        "freeze_embeddings",
    )  # the training keys that define a drafter's recipe (the paper diff)

    def measurement(self) -> dict:
        """What defines this run's measurement, in the terms `budgetdraft.report.paperdiff` compares with the paper's
        (models, dataset sources, lengths, the γ sweep, samples, repeats, dtypes, each drafter's training recipe or
        checkpoint): a run is a rerun of the paper only where every one of them is the paper's."""
        c, drafters = self.config, self.plan.drafters
        variants = {}
        for v, overrides in c["variants"].items():
            if "checkpoint" in overrides:
                if overrides["checkpoint"]:  # a checkpoint not given: its rows are "not run", nothing measured
                    variants[v] = {k: str(overrides.get(k) or "") for k in ("checkpoint", "subfolder", "revision")}
            else:
                hparams = json.loads(drafters.variant_hparams(v))
                variants[v] = {k: hparams[k] for k in self.RECIPE if k in hparams}
        return {
            "verifier": c["verifier"],
            "drafter": c["drafter"],
            "base_drafter_steps": self.plan.base["training"]["steps"] if self.plan.base else 0,
            "verifier_dtype": c["verifier_dtype"],
            "drafter_dtype": c["drafter_dtype"],
            "datasets": {k: d["source"] for k, d in c["datasets"].items()},
            "samples": {k: self.samples(k) for k in c["datasets"]},
            "context_tokens": dict(c["contexts"]),
            "budgets": list(c["budgets"]),
            "gammas": {k: list(v) for k, v in c["gammas"].items()},
            "chunk_size": c["chunk_size"],
            "max_new_tokens": c["max_new_tokens"],
            "warmup": c["warmup"],
            "repeats": c["repeats"],
            "training_data": {k: c["training_data"][k] for k in ("source", "prefix_len", "cont_len")},
            "variants": variants,
        }

    def artifact_settings(self, artifact: str) -> str:
        """The settings JSON of one artifact (or of the claims): `paper_settings`, for the policies figure with its
        `policies:` too, for the λ and `variants` tables with only the extra variants each shows (lambda_variants,
        other_variants)."""
        settings, ls = dict(self.paper_settings), self.labels
        shown = {"lambda": ls.lambda_variants, "variants": ls.other_variants}.get(artifact)
        if shown is not None:
            settings["variants"] = {
                v: x for v, x in settings["variants"].items() if v in names.REQUIRED_VARIANTS or v in shown
            }
        if artifact == "fig_policies":
            settings["policies"] = {**ls.policies, "default": ls.policy}
            PaperSettings.from_json(settings)
        if artifact == PAPER_DIFF:
            settings["measurement"] = self.measurement()
        return json.dumps(settings)

    def files(self) -> dict[str, str]:
        """{results/settings/NAME.json: the JSON rule settings writes there} of every artifact and of the claims."""
        cells = self.plan.cells
        names_ = [*cells.all_tables, *cells.all_figures.values(), "claims", PAPER_DIFF]
        return {SETTINGS_FILE.format(name=name): self.artifact_settings(name) for name in names_}


class CellJobs:
    """What a cell's job is handed (its inputs and eval-cell's flags), and the flags other jobs share."""

    def __init__(self, plan: Plan):
        self.plan, self.config = plan, plan.config

    def cell_inputs(self, label, dataset, context, replicate=None) -> dict:
        """The inputs of a cell's job: the verifier, the prompts, its code, the shared prefill
        (`share_verifier_prefill`) and the drafter (not for AR)."""
        inputs = {
            "verifier": VERIFIER,
            "prompts": f"results/data/prompts/{dataset}/{context}.parquet",
            "code": self.plan.code.cell_code(self.plan.labels.method[label]),
        }
        if self.config["share_verifier_prefill"]:
            inputs["prefill"] = f"results/prefill/{dataset}/{context}.safetensors"
        drafter = self.plan.drafters.drafter_dir(label, replicate)
        if drafter is not None:
            inputs["drafter"] = drafter
        return inputs

    def prompts_file(self, dataset: str) -> list[str]:
        """The authors' prompts file a dataset reads (`source: authors_*`, its `path`: the file or their data/
        folder), as the input of its prompts jobs; [] for any other source."""
        d = self.config["datasets"][dataset]
        if d["source"] not in AUTHORS_FILES:
            return []
        path = Path(os.path.expanduser(d["path"]))
        return [str(path / AUTHORS_FILES[d["source"]] if path.is_dir() else path)]

    def sampling_flags(self) -> str:
        """The sampling flags of `eval-cell`; none when greedy, so a greedy cell's command is what it always was."""
        s = self.config["sampling"]
        if s["temperature"] == 0:
            return ""
        return f" --temperature {s['temperature']} --top-p {s['top_p']} --top-k {s['top_k']} --seed {s['seed']}"

    def extra_flag(self, label: str) -> str:
        """`--extra JSON` of a baseline's cell (`baselines.<name>` of the config but its `training`), else nothing."""
        settings = self.config["baselines"].get(label)
        if label not in methods.BASELINES or not settings:
            return ""
        extra = {k: v for k, v in settings.items() if k != "training"}
        return f"--extra {shlex.quote(json.dumps(extra, sort_keys=True))}"

    def revision_flag(self, repo: str | None) -> str:
        """`--revision SHA` when the config's `revisions:` pins hub repository ``repo``, else nothing."""
        pinned = revisions.revision(self.config, repo)
        return f"--revision {pinned}" if pinned else ""

    @staticmethod
    def gpu_slots(device) -> int:
        """GPU slots a job on ``device`` takes: 1 on CUDA (a counter locally, --gpus=1 on SLURM), else 0."""
        return 1 if str(device).startswith("cuda") else 0


class CodeInputs:
    """The code input of each stage's jobs: the digest of the src/ modules its command runs (rule code)."""

    @cached_property
    def _code(self) -> dict[str, list[str]]:
        """{code set: the src/ modules it runs}: each stage's command, and eval-cell per way a cell decodes (a
        baseline's declared factory module, which eval-cell imports by name, among them)."""
        stages = {stage: code_files(command) for stage, command in STAGE_COMMANDS.items()}
        factories = {m.decodes: m.factory for m in methods.REGISTRY.values()}
        cells = {
            f"cell-{decodes}": code_files("eval-cell", (factory,) if factory else ())
            for decodes, factory in factories.items()
        }
        return {**stages, **cells}

    def files(self, code: str) -> list[str]:
        """The src/ modules of a code set (budgetdraft.base.importgraph: a command's module and every module it
        imports, transitively, lazy imports included): the inputs of its digest (rule code). Never a list kept by
        hand."""
        return self._code[code]

    @property
    def sets(self) -> list[str]:
        return list(self._code)

    def digest(self, stage: str) -> str:
        """A stage's code input: the digest of the modules its command runs (rule code, results/code/STAGE.sha256),
        rewritten when one of them changes, so editing a module reruns exactly the stages that run it. One file
        instead of dozens: Snakemake reads every waiting job's inputs at each scheduling round."""
        return CODE_DIGEST.format(code=stage)

    def cell_code(self, decodes: str) -> str:
        """The code input of a cell that decodes as ``decodes`` (eval-cell --method; a baseline's factory with it)."""
        return self.digest(f"cell-{decodes}")
