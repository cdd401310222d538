"""The methods of the grid, each declared once: its cell label, its name in the tables, how its cells decode, where its
drafter comes from, which budgets its cells take, what enables it and where it appears.

Everything that used to keep its own list keyed by a method's name reads this registry instead: the plan (which
cells, which drafter directory, which code a cell runs, a baseline's --extra), the config check (which names
`baselines.enabled` and `controls` accept), the tables (the comparison table's rows and every method's name) and
`estimate` (how a cell is costed). Adding a method is one `declare(Method(...))` here, plus the code that makes
its drafter if that is new (a factory module for eval-cell, a rule for a drafter built from another).

The trained variants (config `variants`: BudgetDraft and its ablations) are not declared here: a config names them,
and each decodes as SD with its own trained drafter (`variant`). Standard library only: the workflow reads this
module before any job runs.
"""

from __future__ import annotations

from dataclasses import dataclass

# Where a method's drafter comes from (what `TrainingChain.drafter_dir` resolves):
NONE = "none"  # no drafter (AR)
BASE = "base"  # the base drafter: the trained base drafter of each replicate, or the exported drafter untouched
INTERPOLATED = "interpolated"  # the base drafter, its positions interpolated to cover the longest context (no training)
HEAD = "head"  # a head of its own trained once from the verifier (EAGLE-3)
TRAINED = "trained"  # a variant trained from the base drafter (config `variants`)
GIVEN = "given"  # a variant given as a checkpoint (config `variants.X.checkpoint`): exported once, never trained
DRAFTERS = (NONE, BASE, INTERPOLATED, HEAD, TRAINED, GIVEN)

# Which budgets a method's cells take:
GRID = "grid"  # every budget of the config
LARGEST = "largest"  # one cell at the largest budget: the method does not use the drafter's budget B
NO_BUDGET = "none"  # B0: no budget (AR; SD with its full cache)
BUDGETS = (GRID, LARGEST, NO_BUDGET)

# What enables a method in a config: "" always; else the config list that names it.
ENABLED_BY = ("", "baselines", "controls")


@dataclass(frozen=True)
class Method:
    """One method of the grid."""

    label: str  # its cell label: results/cells/LABEL/...
    name: str  # its name in the tables and the report
    decodes: str  # eval-cell --method: how its cells decode (ar, sd: the paper's drafter loop, or a baseline's own)
    drafter: str  # where its drafter comes from (DRAFTERS)
    budgets: str = GRID  # which budgets its cells take (BUDGETS)
    policy: str = ""  # its sparse policy when not the config's `policy` ("" = the config's)
    factory: str = ""  # a baseline's module, whose `drafter_factory(verifier, spec, extra, load)` eval-cell calls
    enabled_by: str = ""  # "" = always run; "baselines" / "controls": the config list that names it (ENABLED_BY)
    comparison: tuple[str, ...] = ()  # a row of the comparison table, its size counted from these: drafter, verifier
    claims: bool = False  # measured for the claims report at γ_fixed on every dataset × context × its budgets
    what: str = ""  # one line: what it is (docs, `--help`)

    def __post_init__(self):
        for field, value, allowed in (
            ("drafter", self.drafter, DRAFTERS),
            ("budgets", self.budgets, BUDGETS),
            ("enabled_by", self.enabled_by, ENABLED_BY),
        ):
            if value not in allowed:
                raise ValueError(f"method {self.label!r}: {field} {value!r} is not one of {', '.join(allowed)}")

    @property
    def replicated_drafter(self) -> bool:
        """Whether its drafter is one per training replicate when the base drafter is trained (`base_drafter`)."""
        return self.drafter in (BASE, INTERPOLATED, TRAINED)


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
        claims=True,
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
        claims=True,
        what="the base drafter, its rotary positions interpolated to cover the longest context, no training",
    )
)
SD_FULL = declare(
    Method(
        "sd@full",  # LABEL@POLICY: SD under the sparse policy `full` (budgetdraft.base.names.policy_label)
        "SD (full drafter cache)",
        "sd",
        BASE,
        NO_BUDGET,
        policy="full",
        enabled_by="controls",
        claims=True,
        what="SD with the base drafter's whole prompt cache, no budget: the collapse without the sparse cache",
    )
)

DECODES = tuple(dict.fromkeys(m.decodes for m in REGISTRY.values()))  # eval-cell --method choices
BASELINES = tuple(label for label, m in REGISTRY.items() if m.enabled_by == "baselines")
CONTROLS = tuple(label for label, m in REGISTRY.items() if m.enabled_by == "controls")


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
