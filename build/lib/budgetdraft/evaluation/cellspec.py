"""What one evaluation grid cell is made of, as one typed value: ``CellSpec``.

The plan builds it for every cell of a config (``budgetdraft.pipeline.plan``), `eval-cell` parses its flags into it,
and the library takes nothing else: ``make_decoder``, the warm process's sharing and the cost estimate read its
fields, every drafter factory its drafter's (``CellSpec.draft``: the decoding layer's own ``DraftSpec``). Each row of
a cell file records it (``record``) under a versioned schema (``CELL_SCHEMA``); ``read_record`` reads every version
written so far and refuses one it does not know (``UnknownRecord``), and ``record_difference`` says where a record is
not the cell the plan measures at its path.

When a cell may share work with the cells beside it is decided here once (``shares_warm_up``,
``shares_drafter_prefill``, from its decoder's declared traits: ``budgetdraft.base.methods.Decoder``): the forking
warm process, the shared drafter prefill and the cost estimate all ask.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields

from budgetdraft.base.defaults import CHUNK_SIZE, DEVICE, DTYPE, EAGER, ENGINE, POLICY, SCORE_WINDOW, THREADS
from budgetdraft.base.jsonio import first_difference
from budgetdraft.base.methods import DECODERS, Decoder
from budgetdraft.base.names import SHARED, SHARED_DRAFTER_PREFILL
from budgetdraft.decoding.draftspec import DraftSpec

# Version of the record a cell row carries in its `config` column. 1: eval-cell's flags as parsed (no version key;
# also `out`, the file's own path); 2: the fields of CellSpec and `cell_schema`; 3: the decoder is `decodes` (it was
# `method`, which now means a row of the grid only). ``read_record`` reads each as the current one.
CELL_SCHEMA = 3
SCHEMA_KEY = "cell_schema"
RENAMED = {"method": "decodes"}  # the fields a record before version 3 names otherwise: its name -> the field's
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "seed")  # a cell's sampling settings (config `sampling`)
# The one field of a cell that does not define what it measured (record_difference): Snakemake gives a job config
# `threads` capped at --cores, so the same cell records 1 when measured under --cores 1 and 2 under --cores 2.
UNCOMPARED = ("threads",)


@dataclass(frozen=True, kw_only=True)
class CellSpec:
    """One cell: what it decodes (its decoder, label, models, prompts), where in the grid (dataset, context, B, γ,
    replicate), how (policy, chunk size, score window, draft vocabulary, engine, device, dtypes, threads, sampling)
    and how it is measured (new tokens, warm-up, repeats, a shared verifier prefill). ``extra`` is a baseline's own
    settings as JSON text. Each field is eval-cell's flag of the same name (``_`` as ``-``), in the order of its
    command line (budgetdraft.pipeline.plan.CellJobs.eval_cell_flags)."""

    label: str
    decodes: str  # the decoder it runs (budgetdraft.base.methods.DECODERS): its method's
    verifier: str
    drafter: str | None = None
    prompts: str
    dataset: str
    context: str
    budget: int = 0
    gamma: int = 0
    replicate: int = SHARED
    policy: str = POLICY
    chunk_size: int = CHUNK_SIZE
    score_window: int = SCORE_WINDOW
    draft_vocab: str | None = None
    max_new_tokens: int
    warmup: int = 1
    warmup_tokens: int = 0
    warmup_prompt_tokens: int = 0
    repeats: int = 1
    device: str = DEVICE
    engine: str = ENGINE
    verifier_dtype: str = DTYPE
    drafter_dtype: str = DTYPE
    threads: int = THREADS
    extra: str = ""
    verifier_prefill: str = ""
    temperature: float = 0.0  # the sampling fields: on its command line only in sampling mode (temperature > 0)
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    @classmethod
    def of(cls, values: Mapping, **given) -> CellSpec:
        """The spec of the fields ``values`` holds (a parsed command line's, a record's), ``given`` on top; other
        keys are ignored, a field neither holds takes its default."""
        merged = {**values, **given}
        return cls(**{f.name: merged[f.name] for f in fields(cls) if f.name in merged})

    @property
    def draft(self) -> DraftSpec:
        """The cell's drafter as the decoding layer takes it (every drafter factory): the fields of the same names.
        Derived, never stored: the record and the cell's file are the spec's fields alone."""
        return DraftSpec.of(vars(self))

    def __post_init__(self):
        if self.decodes not in DECODERS:  # live: a decoder declared after budgetdraft.base.methods counts
            raise ValueError(f"--decodes {self.decodes!r} is not one of {', '.join(DECODERS)}")

    @property
    def decoder(self) -> Decoder:
        """The declared decoder it runs: its traits."""
        return DECODERS[self.decodes]

    def shares_warm_up(self) -> bool:
        """Whether a forking warm process may run this cell's warm-up once for its models and fork the cell after
        it: a decoder declared to fork (AR, the paper's drafter), eager, one thread, on the CPU. Elsewhere each cell
        warms itself up (an accelerator is never forked; the graphs engine captures per shape; a baseline's drafter
        builds its own state; more threads start a pool a fork does not inherit)."""
        on_cpu = self.device.split(":")[0] == "cpu"
        return self.decoder.forks and self.engine == EAGER and self.threads == 1 and on_cpu

    def shares_drafter_prefill(self) -> bool:
        """Whether its drafter's full prefill of each prompt may be made once, by that process, for every cell of
        the drafter and the prompts, each cutting it to its own budget (a decoder declared ``prefilled``: the
        paper's drafter, ``budgetdraft.decoding.sparse_drafter``)."""
        return self.shares_warm_up() and self.decoder.prefilled

    def record(self, drafter_prefill_shared: bool = False) -> str:
        """The JSON a cell row carries in its `config` column: the fields, the schema's version and, where it cut
        a prefill the warm process made, that it did."""
        out = {
            **asdict(self),
            SCHEMA_KEY: CELL_SCHEMA,
            **({SHARED_DRAFTER_PREFILL: True} if drafter_prefill_shared else {}),
        }
        return json.dumps(dict(sorted(out.items())))


class UnknownRecord(ValueError):
    """A cell row's record this code cannot read: ``reason`` says why (``has cell_schema 3; ...``), without the
    remedy that ``str()`` adds, so that a reader naming the file adds its own."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"a cell row's config {reason}: remove the cell file and measure it again")


def read_record(text: str) -> dict:
    """A cell row's recorded `config` as {field: value} of the current schema, from any version written so far:
    version 1 (eval-cell's flags, no version key) has the names of version 2, and lacks the sampling flags when it
    predates sampling mode (greedy, their defaults); versions 1 and 2 name the decoder `method` (``RENAMED``). A
    version newer than this code's, or a record that is no JSON object, is refused (``UnknownRecord``), naming it:
    such a cell is measured again, never misread. An empty record (cells before any record) reads as {}."""
    if not text:
        return {}
    try:
        values = json.loads(text)
    except json.JSONDecodeError:
        raise UnknownRecord("is not JSON") from None
    if not isinstance(values, dict):
        raise UnknownRecord(f"is a JSON {type(values).__name__}, not an object")
    version = values.pop(SCHEMA_KEY, 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= CELL_SCHEMA:
        raise UnknownRecord(f"has {SCHEMA_KEY} {version!r}; this code reads versions 1 to {CELL_SCHEMA}")
    values.pop("out", None)  # version 1: the file's own path
    if version < 3:
        values = {RENAMED.get(key, key): value for key, value in values.items()}
    return values


def record_difference(recorded: Mapping, planned: CellSpec) -> str | None:
    """Where a cell's record (``read_record``, any version) first differs from the spec the plan measures at the
    cell's path, in the order of the spec's fields, as ``its record says budget 64, the plan wants 128``; None when
    it is the plan's cell. Every field that defines the measurement is compared; a field an older record lacks takes
    its default, and one without a default (the cell's label, decoder, models, prompts, new tokens) that a record
    lacks cannot be shown to be the plan's. Not compared: ``UNCOMPARED`` (the threads a run gave the job), and in
    greedy mode the sampling settings but the temperature, which eval-cell's command line carries only in sampling
    mode (``budgetdraft.pipeline.plan.CellJobs.eval_cell_flags``), so a greedy cell records their defaults whatever
    the config's `sampling` holds. Keys that are no field (the shared drafter prefill: how the process ran) are not
    compared either."""
    for field in fields(CellSpec):
        sampling_only = not planned.temperature and field.name in SAMPLING_FIELDS and field.name != "temperature"
        if field.name in UNCOMPARED or sampling_only:
            continue
        wanted = getattr(planned, field.name)
        if field.name not in recorded and field.default is MISSING:
            return f"its record says no {field.name}, the plan wants {wanted!r}"
        found = recorded.get(field.name, field.default)
        if first_difference(_compared(field.name, found), _compared(field.name, wanted)) is not None:
            return f"its record says {field.name} {found!r}, the plan wants {wanted!r}"
    return None


def _compared(name: str, value):
    """A field's value as compared: a baseline's ``extra`` settings as the JSON they hold, not as they are spelled."""
    if name == "extra" and isinstance(value, str) and value:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value
