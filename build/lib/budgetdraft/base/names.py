"""The names the library and the workflow share beyond the declared methods: the trained variants' cell labels,
the labels of a method under its own policy, engine or length (LABEL@POLICY, LABEL+ENGINE, LABEL~N: a cell label as
its parts, ``CellLabel``, which the plan makes once, and the grammar that writes and reads them), and the rule a
variant's name follows. The declared methods' labels (AR, SD, the baselines, the controls) and the separators of a
cell label have their one home in `budgetdraft.base.methods` (read from there: other modules import them from it, not
from here); the engines' names theirs in `budgetdraft.base.defaults`; the artifacts are declared on their builders
(`budgetdraft.report.artifacts`).

No imports beyond the standard library and `budgetdraft.base.methods` (standard library
only): the workflow (`workflow/rules/common.smk` and `budgetdraft.pipeline.plan`) reads this module too, before any
job runs and without the heavy dependencies of the other modules.
"""

from dataclasses import dataclass

from budgetdraft.base import methods
from budgetdraft.base.methods import ENGINE_SEP, LENGTH_SEP, POLICY_SEP

# Cell labels of the trained variants the tables read (a declared method's label, AR, SD, the baselines and the
# controls, has its one home in budgetdraft.base.methods: methods.AR, methods.SD, ...).
BD, LA_ONLY, LAMBDA1, SINGLE = "lambda0.5", "la_only", "lambda1.0", "single_budget"
# A method under another sparse policy has its own cell label, LABEL@POLICY (policy_label, below); the separators'
# home is budgetdraft.base.methods, where no declared label may contain one.
FULL = "full"  # the sparse policy that keeps every position (budgetdraft.decoding.policies, unbudgeted)
# the control of the collapse: SD with its full drafter cache, no budget (B0)
SD_FULL = f"{methods.SD}{POLICY_SEP}{FULL}"
METHOD_NAMES = {
    **{label: m.name for label, m in methods.REGISTRY.items()},
    BD: "BudgetDraft",
    SD_FULL: "SD (full drafter cache)",
}
REQUIRED_VARIANTS = {  # trained variant (cell label) -> the artifacts that read its cells
    BD: "the BudgetDraft drafter of every table",
    LA_ONLY: "the L_C ablation table and claim F4",
    LAMBDA1: "the lambda table and claim F6",
    SINGLE: "the single-budget table and claim F5",
}

# The `replicate` of a cell that no per-replicate training feeds (AR, a drafter trained once or not at all); cells of
# a drafter trained once per training replicate (config `replicates`) carry 0, 1, ...
SHARED = -1


@dataclass(frozen=True)
class CellLabel:
    """A cell label as its parts, made once when the plan is made (budgetdraft.pipeline.plan.Labels) so that nothing
    after it parses a label: the method or variant whose drafter and decoder it runs (``method``), and what it
    changes of the config's run, each None where it keeps the config's: its sparse ``policy`` (LABEL@POLICY), its
    ``engine`` (LABEL+ENGINE) and its new ``tokens`` (LABEL~N). ``text`` is the label itself."""

    method: str
    policy: str | None = None
    engine: str | None = None
    tokens: int | None = None

    @property
    def text(self) -> str:
        policy = f"{POLICY_SEP}{self.policy}" if self.policy else ""
        engine = f"{ENGINE_SEP}{self.engine}" if self.engine else ""
        return self.method + policy + engine + ("" if self.tokens is None else f"{LENGTH_SEP}{self.tokens}")


def parse_label(text: str) -> CellLabel:
    """The parts of a cell label written in a config (a control LABEL@POLICY: `sd@full`), the inverse of
    ``CellLabel.text``: the label grammar's one parse of a label the plan did not make itself."""
    rest, sep, tokens = text.partition(LENGTH_SEP)
    if not (sep and tokens.isdigit()):
        rest, tokens = text, None
    rest, _, engine = rest.partition(ENGINE_SEP)
    method, _, policy = rest.partition(POLICY_SEP)
    return CellLabel(method, policy or None, engine or None, None if tokens is None else int(tokens))


# A drafter decoded with a sparse policy other than the config's `policy` has its own cell label, LABEL@POLICY
# (results/cells/sd@snapkv/...); under the config's policy it keeps its plain label, so the grid's paths stay put.


def policy_label(label: str, policy: str, default: str) -> str:
    """The cell label of drafter ``label`` decoded with sparse ``policy`` (``default``: the config's policy)."""
    return label if policy == default else f"{label}{POLICY_SEP}{policy}"


# With `engine: graphs` the run also decodes AR, SD and BudgetDraft eagerly, at γ_fixed on the comparison dataset,
# under labels LABEL+eager (results/cells/ar+eager/...): their speedups beside the graphs ones say how much of a
# speedup survives a fast baseline (claims, finding E1). Each speedup divides by the AR of its own engine.
# The eager companions' engine is EAGER (budgetdraft.base.defaults, the engines' one home); the suffix: ENGINE_SEP.


def engine_label(label: str, engine: str, default: str) -> str:
    """The cell label of ``label`` decoded on ``engine`` (``default``: the config's engine)."""
    return label if engine == default else f"{label}{ENGINE_SEP}{engine}"


# The long-generation control (config `long_generation`): a few cells that generate more tokens than the grid's, so
# that a continuation reaches the part where a greedy base model repeats itself, under labels LABEL~N (N new
# tokens: results/cells/sd~128/...; LENGTH_SEP).


def length_label(label: str, tokens: int) -> str:
    """The cell label of ``label`` generating ``tokens`` new tokens (the long-generation control)."""
    return f"{label}{LENGTH_SEP}{tokens}"


# Variants beyond the paper's four (REQUIRED_VARIANTS): a config may add any trained variant (an override of
# `training:`) under a name that is one folder of results/ (results/drafters/rR/NAME/, results/cells/NAME/) and one
# cell label: letters, digits, '_', '.' and '-', starting with a letter or a digit (so never '.', '..', a hidden
# folder or a command-line option), with neither cell-label separator (POLICY_SEP, ENGINE_SEP) and no method's name.
# The schema's `variants` propertyNames pattern is this one (tests/test_configcheck.py keeps the two equal).
VARIANT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def variant_name_problem(name) -> str | None:
    """Why ``name`` cannot be a trained variant's name (None: it can)."""
    import re

    name = str(name)
    if name in methods.REGISTRY or name in methods.DECODERS:
        return f"{name!r} is the label of method {METHOD_NAMES.get(name, name)!r}: its cells would be that method's"
    if POLICY_SEP in name or ENGINE_SEP in name:
        return (
            f"{name!r} contains {POLICY_SEP!r} or {ENGINE_SEP!r}, which separate a cell label from its policy or engine"
        )
    if not re.fullmatch(VARIANT_NAME, name):
        return (
            f"{name!r} is not a safe name: use letters, digits, '_', '.' and '-', starting with a letter or digit "
            "(it names a folder of results/ and a cell label)"
        )
    return None


def extra_variants(variants) -> list[str]:
    """The variants of a config (or settings) beyond the paper's four, in their order."""
    return [v for v in variants if v not in REQUIRED_VARIANTS]


def lambda_variants(hparams: dict) -> list[str]:
    """The variants of the λ table, in order of λ (ties: by name), from {variant: its merged training hparams}:
    BudgetDraft (`lambda0.5`), `lambda1.0`, and every extra variant whose hyper-parameters differ from BudgetDraft's
    in `lambda_c` alone (a λ variant; `la_only` stays the L_C ablation's). The other extra variants are the
    `variants` table's."""
    bd = {k: v for k, v in hparams[BD].items() if k != "lambda_c"}
    chosen = [BD, LAMBDA1] + [
        v for v in extra_variants(hparams) if {k: x for k, x in hparams[v].items() if k != "lambda_c"} == bd
    ]
    return sorted(chosen, key=lambda v: (float(hparams[v]["lambda_c"]), v))


# a cell row's `config` key, true where its drafter cut a full prefill made once for all its cells
# (budgetdraft.evaluation.cells.prefill_once); the captions say so (report.captions.shared_drafter_text)
SHARED_DRAFTER_PREFILL = "drafter_prefill_shared"
