"""The workflow's plan of a config: a thin front (`Plan`) over parts that each do one job, plain Python over the config
dict as the Snakefile has it after `budgetdraft.pipeline.configcheck.check_config` (the schema's defaults filled in):
no Snakemake, no file written, so tests/test_plan.py checks it in process and workflow/rules/ only wires it
(`PLAN = Plan(config)`, then `PLAN.cells.all_cells()`, `PLAN.drafters.drafter_dir(...)`, ...).

- `Labels`: which methods and variants this config measures, and which decoder each cell label runs;
- `CellPlan`: which cell files each table, figure, control and target reads (files planned; the cells measured are
  `budgetdraft.evaluation.grid.Grid`);
- `TrainingChain` (`budgetdraft.pipeline.trainingchain`): where each drafter lives and what its training job is
  handed;
- `SettingsFiles` (`budgetdraft.pipeline.settingsfiles`): what each artifact (and the claims) lays out where, the
  files rule settings writes;
- `CellJobs`: a cell's `CellSpec` (budgetdraft.evaluation.cellspec), its job's inputs and eval-cell flags, and the
  flags other jobs share;
- `CodeInputs`: the digest of the modules each stage runs, its jobs' code input.

The parts in modules of their own type the plan they read as a Protocol of just that (`trainingchain.ChainPlan`,
`settingsfiles.SettingsPlan`), so neither imports this module back, for annotations either (tests/test_layers.py).

The steps that change files before any job runs (a damaged cell set aside, a stale settings file removed) are not the
plan's: `budgetdraft.pipeline.setaside`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import fields
from functools import cached_property
from pathlib import Path

from budgetdraft.base import defaults, methods, names, revisions
from budgetdraft.base.importgraph import code_files
from budgetdraft.evaluation import cellfile
from budgetdraft.evaluation.cellspec import SAMPLING_FIELDS, CellSpec
from budgetdraft.pipeline import configrefs
from budgetdraft.pipeline.settingsfiles import SettingsFiles
from budgetdraft.pipeline.trainingchain import VERIFIER, TrainingChain
from budgetdraft.report import artifacts, paper
from budgetdraft.training.data import AUTHORS_FILES

# stage -> the `budgetdraft` command its rule runs (the stage's code input: `CodeInputs.code`)
STAGE_COMMANDS = {
    "models": "export-model",
    "data": "prepare",
    "targets": "targets",
    "train": "train",
    "eagle3": "train-eagle3",
    "prefill": "prefill",
    "positions": "positions",
    "paper": "paper",
    "claims": "claims",
    "paper_diff": "paper-diff",
}
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
        self.cells = CellPlan(self)
        self.code = CodeInputs()
        self.jobs = CellJobs(self)
        self.settings = SettingsFiles(self)


class Labels:
    """Which methods and variants a config measures, and which decoder each cell label runs (`decodes`)."""

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
        """The cell labels, each made here from its parts, once (`parts`: label -> names.CellLabel; nothing after the
        plan splits a label): the methods (every declared one: the eval rules' wildcards list them), the variants and
        their companions; and the decoder each runs (`decodes`: eval-cell --decodes), the one of the label it is of."""
        self.policy, self.engine = config["policy"], config["engine"]  # every cell's, unless its label says another
        self.max_new_tokens = config["max_new_tokens"]
        plain = [names.CellLabel(label) for label in [*methods.REGISTRY, *self.variants]]
        # The `policies` target: the base drafter and BudgetDraft under each sparse policy; a policy other than the
        # config's `policy` has its own cell labels (LABEL@POLICY, budgetdraft.base.names.policy_label).
        self.policies = {
            "names": list(defaults.COMPARED_POLICIES),
            "dataset": datasets[0],
            "gamma": defaults.GAMMA,
            **config.get("policies", {}),
        }
        run = [label for label in (methods.SD, names.BD) if label not in self.not_run]  # BudgetDraft may be left out
        policy = [
            names.CellLabel(label, None if policy == self.policy else policy)
            for label in run
            for policy in self.policies["names"]
        ]
        # the controls that are a method under a sparse policy of its own (LABEL@POLICY: sd@full), read by the claims:
        # labels a config writes, parsed here
        controls = [names.parse_label(label) for label in methods.policy_controls(config)]
        # a policy that keeps every position (`full`) takes no budget: its cells are B0
        self.unbudgeted = {name for name, budgeted in configrefs.registered_policies().items() if not budgeted}
        # `engine: graphs`: AR, SD and BudgetDraft also decoded eagerly at γ_fixed on the comparison dataset
        # (LABEL+eager, budgetdraft.base.names.engine_label), for the claims' finding E1.
        eager = (
            [names.CellLabel(label, engine=defaults.EAGER) for label in (methods.AR, *run)]
            if self.engine != defaults.EAGER
            else []
        )
        # `long_generation`: AR, SD, BudgetDraft and the copier generating more tokens (LABEL~N, names.length_label)
        self.long = config.get("long_generation") or None
        long = (
            [
                names.CellLabel(label, tokens=self.long["max_new_tokens"])
                for label in self.long["methods"]
                if label not in self.not_run and (label in self.methods or label in self.variants)
            ]
            if self.long
            else []
        )
        self.policy_labels, self.policy_controls, self.engine_labels, self.long_labels = (
            [part.text for part in parts] for parts in (policy, controls, eager, long)
        )
        self.parts = {part.text: part for part in plain + policy + controls + eager + long}
        self.decodes = {label: self.method_of(label).decodes for label in self.parts}

    def part(self, label: str) -> names.CellLabel:
        """The parts of a cell label this plan made (``parts``); a label it did not make is refused, named."""
        if label not in self.parts:
            raise ValueError(f"cell label {label!r} is none of this config's: {', '.join(self.parts)}")
        return self.parts[label]

    def drafts(self, label: str) -> bool:
        """Whether a cell label's decoder drafts (``Decoder.drafts``): its cells take a γ; else (AR) they are B0_g0."""
        return methods.DECODERS[self.decodes[label]].drafts

    def drafter_label(self, label: str) -> str:
        """The drafter a cell label decodes with: LABEL@POLICY, LABEL+ENGINE and LABEL~N are LABEL's."""
        return self.part(label).method

    def new_tokens_of(self, label: str) -> int:
        """The new tokens a cell label generates: its own (LABEL~N), else the config's max_new_tokens."""
        return self.part(label).tokens or self.max_new_tokens

    def engine_of(self, label: str) -> str:
        """The engine a cell label decodes on: its own (LABEL+eager), else the config's."""
        return self.part(label).engine or self.engine

    def policy_of(self, label: str) -> str:
        """The sparse policy a cell label decodes with: its own (LABEL@POLICY), else the config's."""
        return self.part(label).policy or self.policy

    def method_of(self, label: str) -> methods.Method:
        """The method (declared, or a variant) a cell label measures: LABEL@POLICY, LABEL+ENGINE and LABEL~N are
        LABEL's; a declared method this config does not run is still known (the eval rules' wildcards list every
        label)."""
        method = self.part(label).method
        return self.methods.get(method) or methods.get(method)

    def budget_kind(self, label: str) -> str:
        """Which budgets a cell label's cells take (methods.BUDGETS): its method's, none when the label names a policy
        of its own that keeps every position (sd@full). A config whose own `policy` is such a one keeps its grid."""
        own = self.part(label).policy  # None under the config's policy
        return methods.NO_BUDGET if own in self.unbudgeted else self.method_of(label).budgets

    def replicated(self, label: str) -> bool:
        """Whether a cell label's drafter is trained once per replicate: every trained variant, and SD, TriForce and
        the controls when they decode with the trained base drafter. AR, EAGLE-3 (one run), a variant given as a
        checkpoint and, without `base_drafter`, SD and TriForce (the untrained drafter) are measured once and
        shared by every replicate."""
        method = self.method_of(label)
        return method.drafter == methods.TRAINED or (bool(self.base) and method.replicated_drafter)


class CellPlan:
    """Which cell files each table, figure, control and target reads (docs/artifacts.md, 'cells it needs'): the plan's
    cells as files to make, where `budgetdraft.evaluation.grid.Grid` holds the cells measured."""

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
        self.named: dict[str, tuple] = {}  # cell file -> (label, dataset, context, B, γ, replicate), as `cell` made it

    def cell(self, label, dataset, context, budget, gamma, replicate=None) -> str:
        """A cell file (budgetdraft.evaluation.cellfile.cell_path): results/cells/LABEL/rR/... for replicate R of a
        trained drafter, results/cells/LABEL/... shared (``replicate`` None). The file is noted with the cell it
        names (``named``), where `CellJobs.specs` looks its cell up."""
        shared = names.SHARED if replicate is None else replicate
        path = cellfile.cell_path(label, dataset, context, budget, gamma, shared)
        self.named.setdefault(path, (label, dataset, context, int(budget), int(gamma), replicate))
        return path

    def cell_files(self, label, dataset, context, budget, gamma) -> list[str]:
        """The files of one grid cell: one per replicate (`replicated`), else the one shared file."""
        if self.labels.replicated(label):
            return [self.cell(label, dataset, context, budget, gamma, r) for r in self.plan.replicates]
        return [self.cell(label, dataset, context, budget, gamma)]

    def budgets_of(self, label: str) -> list[int]:
        """The budgets a label's cells take (its method's `budgets`): every B, the largest only, or B0."""
        kind = self.labels.budget_kind(label)
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
                if not self.labels.drafts(label)
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
        """The cells of the controls and baselines the claims read (methods declared with `findings`: PI, the
        prompt-lookup copier; and the controls LABEL@POLICY: SD with a full cache): every dataset × context × the
        budgets each takes, at γ_fixed."""
        ls = self.labels
        labels = tuple(label for label, m in ls.methods.items() if m.findings) + tuple(ls.policy_controls)
        return self.selected(artifacts.Cells(labels)) if labels else []

    def engine_cells(self) -> list[str]:
        """The eager companions of a graphs run (`engine_labels`) and the graphs cells they are compared with."""
        ls = self.labels
        if not ls.engine_labels:
            return []
        dataset, ar, gamma = self.config["comparison"]["dataset"], ls.engine_labels[0], self.config["gamma_fixed"]
        compared = [label for label in (methods.SD, names.BD) if label not in ls.not_run] + ls.engine_labels[1:]
        return [self.cell(label, dataset, c, 0, 0) for label in (methods.AR, ar) for c in self.plan.contexts] + [
            f
            for label in compared
            for c in self.plan.contexts
            for b in self.plan.budgets
            for f in self.cell_files(label, dataset, c, b, gamma)
        ]

    def long_cells(self) -> list[str]:
        """The long-generation control's cells (`long_generation`): each of its labels (LABEL~N) on its dataset at
        every context, at its budget (AR and the copier: none) and γ_fixed (AR: 0); a trained drafter's on its first
        training replicate only (CP-long has stayed far from its threshold in every run: its interval then covers
        prompts, and the report's row says so, `budgetdraft.report.claims.spread_text`)."""
        ls, long = self.labels, self.labels.long
        if not long:
            return []
        out = []
        for label in ls.long_labels:
            ar = not ls.drafts(label)  # the verifier alone: no budget, no γ
            budgets = [long["budget"]] if self.budgets_of(label) == self.plan.budgets else self.budgets_of(label)
            for c in self.plan.contexts:
                for b in budgets:
                    files = self.cell_files(
                        label, long["dataset"], c, 0 if ar else b, 0 if ar else self.config["gamma_fixed"]
                    )
                    out.append(files[0])  # the shared file, or the first replicate's
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
        """The positional profile of each training replicate (rule positions), read by the claims."""
        return [f"results/positions/r{r}.parquet" for r in self.plan.replicates]

    def artifact_files(self, keys) -> list[str]:
        """The files of tables and figures (by key): results/tables/KEY.tex, results/figures/STEM.{pdf,png}."""
        return [f for key in keys for f in self.artifacts[key].files]

    def cell_wildcards(self, replicated: bool) -> dict[str, str]:
        """The wildcard constraints of the eval rule of shared cells (``replicated`` False) or of one replicate's."""

        def escaped(values):
            return "|".join(re.escape(str(v)) for v in values)

        constraints = {
            "label": escaped(label for label in self.labels.decodes if self.labels.replicated(label) == replicated),
            "dataset": escaped(self.plan.datasets),
            "context": escaped(self.plan.contexts),
            "budget": cellfile.NUMBER,
            "gamma": cellfile.NUMBER,
        }
        return {**constraints, "replicate": escaped(self.plan.replicates)} if replicated else constraints


class CellJobs:
    """What a cell is (its `CellSpec`), what its job is handed (inputs, eval-cell's flags), and the flags other jobs
    share."""

    def __init__(self, plan: Plan):
        self.plan, self.config = plan, plan.config

    def spec(self, label: str, dataset: str, context: str, budget: int, gamma: int, replicate=None) -> CellSpec:
        """The cell of a label at (dataset, context, B, γ) and training replicate (None: a cell no per-replicate
        training feeds), as its job measures it."""
        c, labels = self.config, self.plan.labels
        sampling = {k: c["sampling"][k] for k in SAMPLING_FIELDS}
        share = c["share_verifier_prefill"]
        return CellSpec(
            label=label, decodes=labels.decodes[label], verifier=VERIFIER,
            prompts=f"results/data/prompts/{dataset}/{context}.parquet", dataset=dataset, context=context,
            max_new_tokens=labels.new_tokens_of(label), repeats=c["repeats"],
            drafter=self.plan.drafters.drafter_dir(label, replicate), budget=int(budget), gamma=int(gamma),
            replicate=names.SHARED if replicate is None else int(replicate), policy=labels.policy_of(label),
            chunk_size=c["chunk_size"], score_window=c["score_window"], **sampling, engine=labels.engine_of(label),
            device=c["device"], verifier_dtype=c["verifier_dtype"], drafter_dtype=c["drafter_dtype"],
            threads=c["threads"], warmup=c["warmup"], warmup_tokens=c["warmup_tokens"],
            warmup_prompt_tokens=c["warmup_prompt_tokens"],
            verifier_prefill=f"results/prefill/{dataset}/{context}.safetensors" if share else "",
            extra=self.extra(label),
        )  # fmt: skip

    @cached_property
    def specs(self) -> dict[str, CellSpec]:
        """{cell file: its CellSpec} of every cell any target can ask for (`CellPlan.every_cell`), made once: a cell's
        job and the set-aside check look their cell up here, never parse its path or label."""
        named = self.plan.cells.named
        return {path: self.spec(*named[path]) for path in self.plan.cells.every_cell()}

    def at(self, path: str) -> CellSpec | None:
        """The cell the plan measures at cell file ``path``: looked up (``specs``), or, for a budget or γ of the
        user's own (a file outside the grid, asked for by its path, as the eval rules' wildcards allow), made for
        the label, dataset, context and replicate the plan has; None for a file that is no cell of the plan."""
        path = str(path)
        if path in self.specs:
            return self.specs[path]
        key = cellfile.path_key(path)
        labels, plan = self.plan.labels, self.plan
        if not key or key["label"] not in labels.decodes or key["dataset"] not in plan.datasets:
            return None
        replicate = None if key["replicate"] == names.SHARED else key["replicate"]
        if key["context"] not in plan.contexts or labels.replicated(key["label"]) != (replicate is not None):
            return None
        if replicate is not None and replicate not in plan.replicates:
            return None
        spec = self.spec(key["label"], key["dataset"], key["context"], key["budget"], key["gamma"], replicate)
        return spec if cellfile.cell_path(**key) == path else None

    def cell_inputs(self, spec: CellSpec) -> dict:
        """The inputs of a cell's job: the verifier, the prompts, its code, the shared prefill
        (`share_verifier_prefill`) and the drafter (not for AR)."""
        inputs = {"verifier": spec.verifier, "prompts": spec.prompts, "code": self.plan.code.cell_code(spec.decodes)}
        if spec.verifier_prefill:
            inputs["prefill"] = spec.verifier_prefill
        if spec.drafter is not None:
            inputs["drafter"] = spec.drafter
        return inputs

    @staticmethod
    def eval_cell_flags(spec: CellSpec) -> str:
        """eval-cell's command line of a cell, but --out (its parser reads it back into ``spec``: tests/test_plan.py);
        each field its flag (``_`` as ``-``) in the spec's order, an unset one (None, "") left out, the sampling flags
        only in sampling mode, so a greedy cell's command is what it always was."""
        values = [(f.name, getattr(spec, f.name)) for f in fields(spec)]
        return " ".join(
            f"--{name.replace('_', '-')} {shell_word(value)}"
            for name, value in values
            if value is not None and value != "" and (spec.temperature or name not in SAMPLING_FIELDS)
        )

    def prompts_file(self, dataset: str) -> list[str]:
        """The authors' prompts file a dataset reads (`source: authors_*`, its `path`: the file or their data/
        folder), as the input of its prompts jobs; [] for any other source."""
        d = self.config["datasets"][dataset]
        if d["source"] not in AUTHORS_FILES:
            return []
        path = Path(os.path.expanduser(d["path"]))
        return [str(path / AUTHORS_FILES[d["source"]] if path.is_dir() else path)]

    def extra(self, label: str) -> str:
        """The JSON settings of a baseline's cell (`baselines.<name>` of the config but its `training`), else ""."""
        settings = self.config["baselines"].get(label)
        if label not in methods.BASELINES or not settings:
            return ""
        return json.dumps({k: v for k, v in settings.items() if k != "training"}, sort_keys=True)

    def revision_flag(self, repo: str | None) -> str:
        """`--revision SHA` when the config's `revisions:` pins hub repository ``repo``, else nothing."""
        pinned = revisions.revision(self.config, repo)
        return f"--revision {pinned}" if pinned else ""

    @staticmethod
    def gpu_slots(device) -> int:
        """GPU slots a job on ``device`` takes: 1 on CUDA (a counter locally, --gpus=1 on SLURM), else 0."""
        return 1 if str(device).startswith("cuda") else 0


def shell_word(value) -> str:
    """``value`` as one word of a shell command: as it is where the shell would not change it (a label's ``~N``
    included: a tilde expands only at a word's start), else quoted."""
    text = str(value)
    return text if re.fullmatch(r"[\w@%+=:,./-][\w@%+=:,./~-]*", text) else shlex.quote(text)


class CodeInputs:
    """The code input of each stage's jobs: the digest of the src/ modules its command runs (rule code)."""

    @cached_property
    def _code(self) -> dict[str, list[str]]:
        """{code set: the src/ modules it runs}: each stage's command, and eval-cell per declared decoder (its
        factory module, which eval-cell imports by name, among them)."""
        stages = {stage: code_files(command) for stage, command in STAGE_COMMANDS.items()}
        cells = {
            f"cell-{name}": code_files("eval-cell", (d.factory,) if d.factory else ())
            for name, d in methods.DECODERS.items()
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
        """The code input of a cell that runs decoder ``decodes`` (eval-cell --decodes; its factory with it)."""
        return self.digest(f"cell-{decodes}")
