"""The methods of the grid, each declared once: its cell label, its name in the tables, how its cells decode, where its
drafter comes from, which budgets its cells take, what enables it and where it appears.

The plan (which cells, which drafter directory, which code a cell runs, a baseline's --extra), the config check
(which names `baselines.enabled` and `controls` accept), the tables (the comparison table's rows and every method's
name), eval-cell (a method's factory) and `estimate` (the cost line of a drafter kind's rule) read this registry.
A few places still key by how a method decodes (``Method.decodes``) instead of reading a trait declared here:
eval-cell's sampling check (`budgetdraft.evaluation.cells.SAMPLING_METHODS`, "ar" and "sd") and `estimate`'s cost
of a generation ("ar", "lookup", and every other as SD). Each declared label (AR, SD, TRIFORCE, EAGLE3, LOOKUP,
PI) is a constant of this module, its one home. Adding a method of a declared drafter kind is one
`declare(Method(...))` here (plus a factory module when it decodes its own way); a new drafter kind is one
`kind(DrafterKind(...))` here plus the rule that makes its drafter (tests/test_extension.py adds both in a copy of
the project).

The trained variants (config `variants`: BudgetDraft and its ablations) are not declared here: a config names them,
and each decodes as SD with its own trained drafter (`variant`). Standard library only: the workflow reads this
module before any job runs.
"""

from __future__ import annotations

from dataclasses import dataclass

# ------------------------------------------------------------------------------------------- where drafters come from


@dataclass(frozen=True)
class DrafterKind:
    """Where a method's drafter comes from, declared once (``KINDS``): the plan (`TrainingChain.drafter_dir`, which
    drafters the positional profile reads), the workflow (the rule that makes the drafter, workflow/rules/train.smk),
    the cost estimate (that rule's cost line) and the config check read it, never a method's name. A new kind is
    its declaration here and its rule."""

    name: str
    rules: tuple[str, ...] = ()  # the workflow rules that make such a drafter (each makes one per method label)
    cost: str = ""  # the estimate's line for those rules: EXPORT (a model re-exported), "" (none, or costed elsewhere)
    own: bool = False  # each method of the kind has a drafter of its own (results/drafters/.../LABEL), profiled
    covers_longest: bool = False  # made to reach the longest context: the config must reach beyond its native range
    replicated: bool = False  # one drafter per training replicate when the base drafter is trained (`base_drafter`)
    what: str = ""


EXPORT = "export"  # a cost line: the drafter is a model exported again from another (no training)
KINDS: dict[str, DrafterKind] = {}


def kind(declared: DrafterKind) -> str:
    """Add a drafter kind to ``KINDS``; returns its name."""
    if declared.name in KINDS:
        raise ValueError(f"drafter kind {declared.name!r} is declared twice")
    KINDS[declared.name] = declared
    return declared.name


NONE = kind(DrafterKind("none", what="no drafter (AR, the copier)"))
BASE = kind(
    DrafterKind(
        "base",
        replicated=True,
        what="the base drafter: the trained base drafter of each replicate, or the exported drafter untouched",
    )
)
INTERPOLATED = kind(
    DrafterKind(
        "interpolated",
        rules=("interpolate", "interpolate_shared"),
        cost=EXPORT,
        own=True,
        covers_longest=True,
        replicated=True,
        what="the base drafter, its positions interpolated to cover the longest context (no training)",
    )
)
HEAD = kind(DrafterKind("head", what="a head of its own trained once from the verifier (EAGLE-3)"))
TRAINED = kind(
    DrafterKind(
        "trained", own=True, replicated=True, what="a variant trained from the base drafter (config `variants`)"
    )
)
GIVEN = kind(
    DrafterKind(
        "given",
        own=True,
        what="a variant given as a checkpoint (config `variants.X.checkpoint`): exported once, never trained",
    )
)

# The separators of a cell label's suffixes (budgetdraft.base.names): LABEL@POLICY (another sparse policy),
# LABEL+ENGINE (another engine), LABEL~N (N new tokens). No method's label has one, so a label parses one way: SD
# with its full drafter cache, the control `sd@full`, is SD under the policy `full`, not a method of its own.
POLICY_SEP, ENGINE_SEP, LENGTH_SEP = SEPARATORS = ("@", "+", "~")

# Which budgets a method's cells take:
GRID = "grid"  # every budget of the config
LARGEST = "largest"  # one cell at the largest budget: the method does not use the drafter's budget B
NO_BUDGET = "none"  # B0: no budget (AR, the copier; and any method under a policy that keeps every position)
BUDGETS = (GRID, LARGEST, NO_BUDGET)

# What enables a method in a config: "" always; else the config list that names it.
ENABLED_BY = ("", "baselines", "controls")


@dataclass(frozen=True)
class Method:
    """One method of the grid."""

    label: str  # its cell label: results/cells/LABEL/...
    name: str  # its name in the tables and the report
    decodes: str  # eval-cell --method: how its cells decode (ar, sd: the paper's drafter loop, or a baseline's own)
    drafter: str  # where its drafter comes from (a kind of KINDS)
    budgets: str = GRID  # which budgets its cells take (BUDGETS)
    factory: str = ""  # a baseline's module, whose `drafter_factory(verifier, spec, extra, load)` eval-cell calls
    enabled_by: str = ""  # "" = always run; "baselines" / "controls": the config list that names it (ENABLED_BY)
    comparison: tuple[str, ...] = ()  # a row of the comparison table, its size counted from these: drafter, verifier
    # the claims' findings that read its cells (ids before the '/': PI/1K is "PI"); its cells are then measured at
    # γ_fixed on every dataset × context × its budgets (tests/test_claims.py: each is measured with them, absent
    # without them)
    findings: tuple[str, ...] = ()
    what: str = ""  # one line: what it is (docs, `--help`)

    def __post_init__(self):
        if used := [sep for sep in SEPARATORS if sep in self.label]:
            raise ValueError(
                f"method {self.label!r}: a label has no {used[0]!r}, which starts a cell label's suffix "
                "(LABEL@POLICY, LABEL+ENGINE, LABEL~N): a label parses one way"
            )
        for field, value, allowed in (
            ("drafter", self.drafter, tuple(KINDS)),  # live: a kind declared after this module counts
            ("budgets", self.budgets, BUDGETS),
            ("enabled_by", self.enabled_by, ENABLED_BY),
        ):
            if value not in allowed:
                raise ValueError(f"method {self.label!r}: {field} {value!r} is not one of {', '.join(allowed)}")

    @property
    def replicated_drafter(self) -> bool:
        """Whether its drafter is one per training replicate when the base drafter is trained (`base_drafter`)."""
        return KINDS[self.drafter].replicated


REGISTRY: dict[str, Method] = {}


def declare(method: Method) -> str:
    """Add ``method`` to the registry; returns its label (the name the rest of the code compares cells with)."""
    if method.label in REGISTRY:
        raise ValueError(f"method {method.label!r} is declared twice")
    REGISTRY[method.label] = method
    return method.label


AR = declare(Method("ar", "AR", "ar", NONE, NO_BUDGET, what="the verifier alone, greedy, one token a step"))
SD = declare(
    Method(
        "sd",
        "SD (sparse/full)",
        "sd",
        BASE,
        comparison=("drafter",),
        what="speculative decoding with the base drafter on a sparse KV cache of B tokens (the paper's baseline)",
    )
)
TRIFORCE = declare(
    Method(
        "triforce",
        "TriForce",
        "triforce",
        BASE,
        LARGEST,
        factory="budgetdraft.decoding.baselines.triforce",
        enabled_by="baselines",
        comparison=("drafter", "verifier"),  # its middle level is the verifier on a retrieval cache
        what="hierarchical speculative decoding: the base drafter drafts for the verifier on a retrieval cache",
    )
)
EAGLE3 = declare(
    Method(
        "eagle3",
        "EAGLE-3",
        "eagle3",
        HEAD,
        LARGEST,
        factory="budgetdraft.decoding.baselines.eagle3",
        enabled_by="baselines",
        comparison=("drafter",),
        what="a draft head on the verifier's hidden states, trained once (train-eagle3)",
    )
)
LOOKUP = declare(
    Method(
        "lookup",
        "Prompt lookup (copier)",
        "lookup",
        NONE,
        NO_BUDGET,
        factory="budgetdraft.decoding.baselines.lookup",
        enabled_by="baselines",
        findings=("CP", "CP-long"),
        what="a drafter with no parameters: it copies what followed the last n-gram earlier in the text (transformers' "
        "prompt lookup); how much of any acceptance is copying",
    )
)
PI = declare(
    Method(
        "pi",
        "SD + position interpolation",
        "sd",
        INTERPOLATED,
        enabled_by="controls",
        findings=("PI",),
        what="the base drafter, its rotary positions interpolated to cover the longest context, no training",
    )
)
DECODES = tuple(dict.fromkeys(m.decodes for m in REGISTRY.values()))  # eval-cell --method choices
BASELINES = tuple(label for label, m in REGISTRY.items() if m.enabled_by == "baselines")


def variant(label: str, name: str = "", given: bool = False) -> Method:
    """A variant of config `variants` as a method: SD's loop with its own drafter, trained from the base drafter
    (once per replicate) or ``given`` as a checkpoint (one external draw, no training replicate)."""
    if given:
        return Method(label, name or label, "sd", GIVEN, what="a drafter given as a checkpoint, not trained here")
    return Method(label, name or label, "sd", TRAINED, what="a drafter trained from the base drafter (L_A + λ·L_C)")


def get(label: str) -> Method:
    if label not in REGISTRY:
        raise ValueError(f"unknown method {label!r}; declared: {', '.join(REGISTRY)}")
    return REGISTRY[label]


def enabled(config: dict) -> list[str]:
    """The declared methods a config runs, in declaration order: those always run, and those its `baselines.enabled`
    and `controls` name."""
    named = {"baselines": config.get("baselines", {}).get("enabled", []), "controls": config.get("controls", [])}
    return [label for label, m in REGISTRY.items() if not m.enabled_by or label in named[m.enabled_by]]


def policy_controls(config: dict) -> list[str]:
    """The controls a config names that are a method decoded under a sparse policy of its own, LABEL@POLICY (`sd@full`:
    SD with its full drafter cache), in its order; the claims read their cells like a declared control's."""
    return [label for label in config.get("controls", []) if POLICY_SEP in label]
