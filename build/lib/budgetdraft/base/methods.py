"""The methods of the grid, each declared once: its cell label, its name in the tables, the decoder its cells run,
where its drafter comes from, which budgets its cells take, what enables it and where it appears; and the decoders
(decoding algorithms) they run, each declared once with its traits.

A method is a row of the grid; how its cells decode is its ``Method.decodes``, the name of a declared ``Decoder``.
The plan (which cells, which drafter directory, which code a cell runs, a baseline's --extra), the config check
(which names `baselines.enabled` and `controls` accept), the tables (the comparison table's rows and every method's
name) read the methods; eval-cell (a decoder's factory, its drafter, whether it samples), the warm process (what it
forks and prefills once), the plan (whether a cell drafts: its γ) and `estimate` (the cost line of a generation, and
of a drafter kind's rule) read the traits declared here, never a decoder's or a method's name. Each declared label
(AR, SD, TRIFORCE, EAGLE3, LOOKUP, PI) is a constant of this module, its one home, and so is each decoder's name
(AR_DECODER, SD_DECODER, ...). Adding a method of a declared drafter kind is one `declare(Method(...))` here; a new
decoder is one `decoder(Decoder(...))` here plus its factory module; a new drafter kind is one
`kind(DrafterKind(...))` here plus the rule that makes its drafter (tests/test_extension.py adds each in a copy of
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


def add(table: dict, name: str, declared, what: str) -> str:
    """Add ``declared`` to ``table`` (one of this module's: ``KINDS``, ``DECODERS``, ``REGISTRY``) under ``name``,
    refusing a name declared twice (``what`` names it: "drafter kind"); returns the name."""
    if name in table:
        raise ValueError(f"{what} {name!r} is declared twice")
    table[name] = declared
    return name


def kind(declared: DrafterKind) -> str:
    """Add a drafter kind to ``KINDS``; returns its name."""
    return add(KINDS, declared.name, declared, "drafter kind")


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

# ----------------------------------------------------------------------------------------- how a method's cells decode

# What a decoder's drafter is (``Decoder.drafter``), which eval-cell's --drafter names:
MODEL_DRAFTER = "model"  # a causal LM: the cell loads it (a warm process preloads it, once for its cells)
OWN_DRAFTER = "own"  # files its factory reads itself (EAGLE-3's head directory), never loaded as a causal LM
NO_DRAFTER = ""  # none (AR, the copier): --drafter is not read
DRAFTERS = (MODEL_DRAFTER, OWN_DRAFTER, NO_DRAFTER)
# The estimate's cost line of one generation (``Decoder.cost``, budgetdraft.pipeline.estimate.Estimator.generation):
VERIFIER_STEPS = "verifier"  # the verifier's prefill and one step a token (AR)
FREE_DRAFTS = "free_drafts"  # rounds of one verify of γ + 1 tokens, drafts that cost nothing (the copier's lookups)
MODEL_DRAFTS = "model_drafts"  # the drafter's prefill and γ steps a round, plus the verify (SD, TriForce, EAGLE-3)
COSTS = (VERIFIER_STEPS, FREE_DRAFTS, MODEL_DRAFTS)


@dataclass(frozen=True)
class Decoder:
    """A decoding algorithm, eval-cell's --decodes, declared once (``DECODERS``) with the traits its readers ask
    instead of its name: eval-cell (its factory, its drafter, whether it samples), the warm process (whether it
    forks the cell after running its warm-up once, and prefills its drafter once: ``CellSpec.shares_warm_up``), the
    plan (whether its cells draft: a γ; its code input) and the cost estimate (its cost line)."""

    name: str
    cost: str  # the estimate's line for one generation (COSTS)
    factory: str = ""  # its module, whose `drafter_factory(verifier, draft, extra, load)` eval-cell calls; "": the
    #                    paper's drafter (budgetdraft.decoding.sparse_drafter) with a model drafter, else none (AR)
    drafter: str = MODEL_DRAFTER  # what --drafter names (DRAFTERS)
    samples: bool = False  # decodes in sampling mode too (temperature > 0); else greedily only, and refuses it
    forks: bool = False  # a forking warm process may run its warm-up once and fork its cells (their drafter state)
    prefilled: bool = False  # ... and make its drafter's full prefill of each prompt once for all of its cells
    what: str = ""

    def __post_init__(self):
        for field, value, allowed in (("cost", self.cost, COSTS), ("drafter", self.drafter, DRAFTERS)):
            if value not in allowed:
                raise ValueError(f"decoder {self.name!r}: {field} {value!r} is not one of {', '.join(allowed)}")
        if self.drafter == OWN_DRAFTER and not self.factory:
            raise ValueError(f"decoder {self.name!r}: a drafter of its own ({OWN_DRAFTER!r}) needs a factory")
        if self.prefilled and not (self.forks and self.paper_drafter):
            raise ValueError(
                f"decoder {self.name!r}: a shared drafter prefill is the paper's drafter's, made by the forking warm "
                "process: prefilled needs forks, a model drafter and no factory"
            )

    @property
    def drafts(self) -> bool:
        """Whether its cells draft (the speculative loop, a γ): a drafter or a factory; else the verifier decodes
        alone (AR), its cells at γ 0."""
        return bool(self.drafter or self.factory)

    @property
    def paper_drafter(self) -> bool:
        """Whether it drafts with the paper's drafter (budgetdraft.decoding.sparse_drafter), the one that keeps a
        sparse cache under the cell's policy (a control LABEL@POLICY runs one of its methods)."""
        return self.drafter == MODEL_DRAFTER and not self.factory


DECODERS: dict[str, Decoder] = {}


def decoder(declared: Decoder) -> str:
    """Add a decoder to ``DECODERS``; returns its name (a method's ``decodes``)."""
    return add(DECODERS, declared.name, declared, "decoder")


AR_DECODER = decoder(
    Decoder(
        "ar", VERIFIER_STEPS, drafter=NO_DRAFTER, samples=True, forks=True, what="the verifier alone, a token a step"
    )
)
SD_DECODER = decoder(
    Decoder(
        "sd",
        MODEL_DRAFTS,
        samples=True,
        forks=True,
        prefilled=True,
        what="the paper's drafter on a sparse KV cache of B tokens drafts γ, the verifier checks them",
    )
)
TRIFORCE_DECODER = decoder(
    Decoder("triforce", MODEL_DRAFTS, "budgetdraft.decoding.baselines.triforce", what="TriForce's hierarchy")
)
EAGLE3_DECODER = decoder(
    Decoder(
        "eagle3",
        MODEL_DRAFTS,
        "budgetdraft.decoding.baselines.eagle3",
        OWN_DRAFTER,
        what="EAGLE-3's head on the verifier's hidden states",
    )
)
LOOKUP_DECODER = decoder(
    Decoder(
        "lookup",
        FREE_DRAFTS,
        "budgetdraft.decoding.baselines.lookup",
        NO_DRAFTER,
        what="the prompt-lookup copier: drafts what followed the last n-gram earlier in the text",
    )
)

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
    decodes: str  # the decoder its cells run (a name of DECODERS: eval-cell --decodes)
    drafter: str  # where its drafter comes from (a kind of KINDS)
    budgets: str = GRID  # which budgets its cells take (BUDGETS)
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
            ("decodes", self.decodes, tuple(DECODERS)),  # live, as the kinds: a decoder declared after this module
            ("drafter", self.drafter, tuple(KINDS)),  # live: a kind declared after this module counts
            ("budgets", self.budgets, BUDGETS),
            ("enabled_by", self.enabled_by, ENABLED_BY),
        ):
            if value not in allowed:
                raise ValueError(f"method {self.label!r}: {field} {value!r} is not one of {', '.join(allowed)}")
        if (self.drafter == NONE) != (self.decoder.drafter == NO_DRAFTER):
            raise ValueError(
                f"method {self.label!r}: drafter kind {self.drafter!r} but decoder {self.decodes!r} "
                + ("drafts with none" if self.decoder.drafter == NO_DRAFTER else "needs a drafter")
            )

    @property
    def decoder(self) -> Decoder:
        """How its cells decode: its decoder's traits (its factory is its decoder's)."""
        return DECODERS[self.decodes]

    @property
    def replicated_drafter(self) -> bool:
        """Whether its drafter is one per training replicate when the base drafter is trained (`base_drafter`)."""
        return KINDS[self.drafter].replicated


REGISTRY: dict[str, Method] = {}


def declare(method: Method) -> str:
    """Add ``method`` to the registry; returns its label (the name the rest of the code compares cells with)."""
    return add(REGISTRY, method.label, method, "method")


AR = declare(Method("ar", "AR", AR_DECODER, NONE, NO_BUDGET, what="the verifier alone, greedy, one token a step"))
SD = declare(
    Method(
        "sd",
        "SD (sparse/full)",
        SD_DECODER,
        BASE,
        comparison=("drafter",),
        what="speculative decoding with the base drafter on a sparse KV cache of B tokens (the paper's baseline)",
    )
)
TRIFORCE = declare(
    Method(
        "triforce",
        "TriForce",
        TRIFORCE_DECODER,
        BASE,
        LARGEST,
        enabled_by="baselines",
        comparison=("drafter", "verifier"),  # its middle level is the verifier on a retrieval cache
        what="hierarchical speculative decoding: the base drafter drafts for the verifier on a retrieval cache",
    )
)
EAGLE3 = declare(
    Method(
        "eagle3",
        "EAGLE-3",
        EAGLE3_DECODER,
        HEAD,
        LARGEST,
        enabled_by="baselines",
        comparison=("drafter",),
        what="a draft head on the verifier's hidden states, trained once (train-eagle3)",
    )
)
LOOKUP = declare(
    Method(
        "lookup",
        "Prompt lookup (copier)",
        LOOKUP_DECODER,
        NONE,
        NO_BUDGET,
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
        SD_DECODER,
        INTERPOLATED,
        enabled_by="controls",
        findings=("PI",),
        what="the base drafter, its rotary positions interpolated to cover the longest context, no training",
    )
)
BASELINES = tuple(label for label, m in REGISTRY.items() if m.enabled_by == "baselines")


def variant(label: str, name: str = "", given: bool = False) -> Method:
    """A variant of config `variants` as a method: SD's loop with its own drafter, trained from the base drafter
    (once per replicate) or ``given`` as a checkpoint (one external draw, no training replicate)."""
    if given:
        return Method(label, name or label, SD_DECODER, GIVEN, what="a drafter given as a checkpoint, not trained here")
    return Method(
        label, name or label, SD_DECODER, TRAINED, what="a drafter trained from the base drafter (L_A + λ·L_C)"
    )


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
