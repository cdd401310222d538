"""Measured grid cells and the settings that lay them out: what tables, figures and claims all read.

A cell file (`budgetdraft.evaluation.cells`, see docs/architecture.md) holds one row per (sample, repeat) of one
(label, dataset, context, budget, gamma) and one training replicate of its drafter (`replicate`; `names.SHARED` for a
cell that no per-replicate training feeds). A grid cell pools the files of its replicates. Definitions used everywhere (`budgetdraft.report.tables`, `budgetdraft.report.figures`,
`budgetdraft.report.claims`):

  per-sample time   mean over repeats (and replicates) of `total_s`
  speedup           mean over samples of AR per-sample time / method per-sample time (matched by `sample`;
                    the AR cell: decoded by AR on the same engine to the same length, `CellDecoding`, at budget 0,
                    gamma 0 of the same dataset and context)
  acceptance (%)    100 * sum(accepted) / sum(drafted) over the cell (every replicate)
  AR tok/s          mean `tok_per_s` of the AR cell
  peak memory (GB)  mean `peak_mem_mb` / 1024 over the cell's rows
  c                 drafter/verifier cost: seconds per drafter forward of the cell (sum `draft_s` / sum
                    `draft_steps`) / seconds per decode step of its AR cell (sum `verify_s` / sum (`new_tokens` - 1),
                    the AR prefill giving the first token)
  predicted speedup (1 - a^(g+1)) / ((1 - a)(g c + 1)) from the cell's acceptance a, its gamma g and c (Leviathan et
                    al.'s model: a round of g drafter steps and one verifier forward yields (1 - a^(g+1)) / (1 - a)
                    tokens in expectation, AR one token per verifier step)

While loading, every row's `output_ids` is compared with the AR cell's output for the same
(dataset, context, sample): greedy speculative decoding is lossless, so any difference is an error. Cells
decoded in sampling mode (temperature > 0, recorded in their `config`) are lossless in distribution, not token
for token: for them the check is that every cell of a (dataset, context) used the same sampling settings, and
the token comparison is skipped with a note (tests/test_sampling.py tests the distribution).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from budgetdraft.base.methods import AR
from budgetdraft.base.names import SHARED
from budgetdraft.evaluation import cellfile
from budgetdraft.evaluation.cellspec import SAMPLING_FIELDS, read_record

KEY = ["label", "dataset", "context", "budget", "gamma"]
NEEDED_COLUMNS = KEY + ["sample", "repeat", "total_s", "tok_per_s", "drafted", "accepted", "peak_mem_mb", "output_ids"]


def cell_name(key, replicate: int = SHARED) -> str:
    label, dataset, context, budget, gamma = key
    rep = f", replicate={replicate}" if replicate != SHARED else ""
    return f"(label={label}, dataset={dataset}, context={context}, budget={budget}, gamma={gamma}{rep})"


# ----------------------------------------------------------------------------------------------- cells


TIE_COLUMNS = ("runner_up_ids", "top2_margins")  # written by greedy AR cells (budgetdraft.decoding.loop.Generation)
COST_COLUMNS = ("draft_s", "draft_steps", "verify_s", "new_tokens")  # c of the analytical speedup model
CLOCK_COLUMNS = ("engine", "bound_fraction")  # how the decode steps ran, and AR's share of the bandwidth bound
# how a cell decoded: its decoder (the `method` column) and its recorded `config` (CellSpec.record)
DECODING_COLUMNS = ("method", "config")
OPTIONAL_COLUMNS = (
    "replicate", "device", "mem_kind", *DECODING_COLUMNS, *TIE_COLUMNS, *COST_COLUMNS, *CLOCK_COLUMNS
)  # when present  # fmt: skip


def read_cell(path: Path, optional=OPTIONAL_COLUMNS) -> pd.DataFrame:
    """One cell file's `NEEDED_COLUMNS` and those of the `optional` columns it has, once the file has proven its
    integrity and identity (`cellfile.read_checked`: its digest, its invariants, the cell its path names), as the
    workflow's plan-time check does, so the tables and claims never read a file that the workflow would measure
    again. A missing file, a missing column, a file without a digest (written by hand, or before cells were
    sealed), one that is no readable parquet (cut short by a kill, damaged), whose rows no longer give their
    digest, contradict each other or are another cell than its path says is an error naming the file."""
    path = Path(path)
    table = cellfile.read_checked(path)
    names = set(table.column_names)  # a new list at each access
    missing = [c for c in NEEDED_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"{path}: missing cell columns {missing}")
    present = [c for c in dict.fromkeys(optional) if c in names and c not in NEEDED_COLUMNS]
    return table.select(NEEDED_COLUMNS + present).to_pandas()


def load_cells(paths, optional=OPTIONAL_COLUMNS) -> pd.DataFrame:
    """Concatenate cell files (`read_cell`: `NEEDED_COLUMNS` plus the `optional` columns each file has; a file from
    before replicates counts as `SHARED`); reject a cell and replicate given twice (in two files), and a cell given
    both shared and per replicate."""
    if not paths:
        raise ValueError("no --cells given")
    frames, owner, kind = [], {}, {}  # (cell, replicate) -> file; cell -> (shared?, a file of it)
    for path in map(Path, paths):
        df = read_cell(path, optional)
        if df.empty:
            raise ValueError(f"{path}: cell file has no rows")
        if "replicate" not in df.columns:
            df["replicate"] = SHARED
        # one cell a file (`cellfile.check_identity` refuses rows of two): its first row names it
        key, replicate = tuple(df[c].iat[0] for c in KEY), int(df["replicate"].iat[0])
        if (key, replicate) in owner:
            raise ValueError(f"cell {cell_name(key, replicate)} is in two files: {owner[key, replicate]} and {path}")
        shared, first = kind.setdefault(key, (replicate == SHARED, path))
        if shared != (replicate == SHARED):
            raise ValueError(f"cell {cell_name(key)} is both shared and per replicate: {first} and {path}")
        owner[key, replicate] = path
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    for col in ("label", "dataset", "context"):
        df[col] = df[col].astype(str)
    for col in ("budget", "gamma", "sample", "repeat", "replicate"):
        df[col] = df[col].astype(int)
    return df


def decoding_of(config: str) -> str:
    """'greedy', or the sampling settings, of a cell row's recorded `config` (cells from before sampling mode
    recorded none: greedy)."""
    recorded = read_record(config)
    if not recorded.get("temperature"):
        return "greedy"
    return ", ".join(f"{k}={recorded.get(k)}" for k in SAMPLING_FIELDS)


def sampled_groups(df: pd.DataFrame) -> set[tuple[str, str]]:
    """The (dataset, context) groups decoded in sampling mode; every cell of a group must share one decoding."""
    sampled = set()
    if "config" in df.columns:  # a cell's rows share one record: each distinct one read once
        decoding = df["config"].map({config: decoding_of(config) for config in df["config"].unique()})
    else:
        decoding = pd.Series("greedy", index=df.index)
    for (dataset, context), modes in decoding.groupby([df["dataset"], df["context"]], sort=True):
        kinds = sorted(modes.unique())
        if len(kinds) > 1:
            raise ValueError(
                f"cells of {dataset}/{context} were decoded differently ({'; '.join(kinds)}): their "
                "times and acceptance are not comparable; re-run them with one `sampling:` setting"
            )
        if kinds[0] != "greedy":
            sampled.add((dataset, context))
            print(
                f"budgetdraft paper: note: {dataset}/{context} was decoded by sampling ({kinds[0]}): outputs are "
                "samples, not the AR tokens, so the token-for-token lossless check is skipped",
                file=sys.stderr,
            )
    return sampled


@dataclass(frozen=True)
class CellDecoding:
    """How the cells of one label decoded, as their rows record it: the decoder (the `method` column), the engine,
    and the new tokens asked for (the recorded `config`'s max_new_tokens; a long generation's, LABEL~N, differ from
    the grid's). The report reads these, never the label's text: which AR cell a cell divides by and is compared
    with is the AR cell decoded on the same engine to the same length. A frame built by hand without these columns
    reads its label as its decoder, on one engine, at one length."""

    decodes: str
    engine: str | None = None
    max_new_tokens: int | None = None


def cell_decodings(df: pd.DataFrame) -> dict[str, CellDecoding]:
    """{label: its cells' ``CellDecoding``}, read from each label's first row."""
    out = {}
    for row in df.drop_duplicates("label").to_dict("records"):
        record = read_record(row["config"]) if "config" in row else {}
        decodes, engine = str(row.get("method", row["label"])), row.get("engine")
        engine = None if pd.isna(engine) else str(engine)  # NaN: a file without the column beside ones with it
        out[row["label"]] = CellDecoding(decodes, engine, record.get("max_new_tokens"))
    return out


def ar_partners(found: dict[str, CellDecoding]) -> dict[str, str]:
    """{label: the AR label its cells divide by and must equal}: the AR cells decoded on its engine to its length
    (the first label in order where several are)."""
    ar = {}
    for label, g in sorted(found.items()):
        if g.decodes == AR:
            ar.setdefault((g.engine, g.max_new_tokens), label)
    return {label: ar[g.engine, g.max_new_tokens] for label, g in found.items() if (g.engine, g.max_new_tokens) in ar}


def check_lossless(df: pd.DataFrame, mode: str = "error", near_tie_margin: float = 0.0) -> list[dict]:
    """Every row's output_ids must equal the AR output of its (dataset, context, sample) at its length (a long
    generation's, ``LABEL~N``: the AR cell asked for as many new tokens, ``CellDecoding``); returns the rows that
    differ (``divergence``), each marked ``near_tie`` or not.

    Without an AR cell for that (dataset, context), the first cell (sorted by key) is the reference.
    ``mode="error"``: any difference fails. ``mode="near_tie"`` (fp16 verifiers, whose batched verify and
    single-token step can round a near-tie differently): a difference is allowed, and reported, only where the
    reference's verifier had the row's token as its runner-up within ``near_tie_margin`` logits at the first
    differing position; any other difference fails. Sampling mode: see ``sampled_groups``."""
    sampled = sampled_groups(df)
    found = cell_decodings(df)
    divergences = []
    length = df["label"].map(lambda label: found[label].max_new_tokens or 0)
    for (dataset, context, _), group in df.groupby([df["dataset"], df["context"], length], sort=True):
        if (dataset, context) not in sampled:
            ar = sorted(label for label in group["label"].unique() if found[label].decodes == AR)
            divergences += group_divergences(group, near_tie_margin, ar[0] if ar else None)
    fatal = [d for d in divergences if mode == "error" or not d["near_tie"]]
    if fatal:
        d = fatal[0]
        raise ValueError(
            f"lossless check failed: cell {d['cell']} sample {d['sample']} repeat {d['repeat']} generated "
            f"different output_ids than {d['reference']} ({d['where']}); {len(fatal)} row(s) differ"
            + (" not at a near-tie" if mode == "near_tie" else "")
        )
    for d in divergences:
        print(
            f"budgetdraft paper: note: near-tie divergence: {d['cell']} sample {d['sample']}: {d['where']}",
            file=sys.stderr,
        )
    return divergences


def group_divergences(group: pd.DataFrame, near_tie_margin: float, ar: str | None = AR) -> list[dict]:
    """The rows of one (dataset, context, generation length) whose output_ids differ from the reference cell's:
    ``ar``'s (an AR cell label at that length), else the first cell's."""
    keys = sorted({tuple(k) for k in group[KEY].itertuples(index=False)})
    ref_key = (ar, *keys[0][1:3], 0, 0)
    if ref_key not in keys:
        ref_key = keys[0]
    is_ref = np.ones(len(group), dtype=bool)
    for col, val in zip(KEY, ref_key):
        is_ref &= (group[col] == val).to_numpy()
    reference = {int(r["sample"]): r for _, r in group[is_ref].sort_values("repeat", ascending=False).iterrows()}
    found = []
    for _, row in group.iterrows():
        ref = reference.get(int(row["sample"]))
        if ref is not None and not np.array_equal(np.asarray(row["output_ids"]), np.asarray(ref["output_ids"])):
            found.append(divergence(row, ref, ref_key, near_tie_margin))
    return found


def divergence(row, ref, ref_key, near_tie_margin: float) -> dict:
    """Where ``row`` first leaves the reference row ``ref``, and whether it is a near-tie there."""
    got, want = np.asarray(row["output_ids"], dtype=np.int64), np.asarray(ref["output_ids"], dtype=np.int64)
    n = min(len(got), len(want))
    diff = np.flatnonzero(got[:n] != want[:n])
    position = int(diff[0]) if len(diff) else None
    runner_up, margin = -1, math.nan
    if position is not None and all(c in ref.index for c in TIE_COLUMNS) and position < len(ref["top2_margins"]):
        runner_up, margin = int(ref["runner_up_ids"][position]), float(ref["top2_margins"][position])
    near_tie = position is not None and int(got[position]) == runner_up and margin <= near_tie_margin
    where = f"lengths {len(got)} vs {len(want)}"
    if position is not None:
        where = (
            f"first difference at token {position}: {int(got[position])} vs {int(want[position])}, the reference "
            f"verifier's runner-up {runner_up} at a top-2 margin of {margin:.4g} logits"
        )
    return {
        "cell": cell_name(tuple(row[KEY])),
        "reference": cell_name(ref_key),
        "sample": int(row["sample"]),
        "repeat": int(row["repeat"]),
        "position": position,
        "margin": None if math.isnan(margin) else margin,
        "near_tie": bool(near_tie),
        "where": where,
    }


class Grid:
    """Measured cells, indexed by (label, dataset, context, budget, gamma), with the paper's metrics."""

    def __init__(
        self,
        df: pd.DataFrame,
        check: bool = True,
        lossless: str = "error",
        near_tie_margin: float = 0.0,
        not_run=(),
    ):
        """``not_run``: labels whose cells the run left out on purpose (a variant whose checkpoint was not given):
        asked for, they are no error, and every metric of them is NaN (a table prints "--")."""
        self.not_run = frozenset(not_run)
        self.divergences = check_lossless(df, lossless, near_tie_margin) if check else []
        if "device" in df.columns and df["device"].nunique() > 1:
            print(
                f"budgetdraft paper: warning: cells come from several devices: {sorted(df['device'].unique())}",
                file=sys.stderr,
            )
        if "replicate" not in df.columns:  # frames built by hand, cells from before replicates
            df = df.assign(replicate=SHARED)
        self.df = df
        per_sample = df.groupby(KEY + ["sample"], sort=True).agg(
            time=("total_s", "mean"), accepted=("accepted", "sum"), drafted=("drafted", "sum")
        )
        self.samples = {tuple(k): g.droplevel(KEY) for k, g in per_sample.groupby(level=KEY, sort=False)}
        self.rows = {tuple(k): g for k, g in df.groupby(KEY, sort=False)}
        self.decoding = cell_decodings(df)
        self.ar_partner = ar_partners(self.decoding)

    def has(self, key) -> bool:
        return tuple(key) in self.rows

    def need(self, *key):
        key = tuple(key)
        if key not in self.rows and key[0] not in self.not_run:
            raise ValueError(f"missing cell {cell_name(key)}: not among the --cells given")
        return key

    def gammas(self, label, dataset, context, budget) -> list[int]:
        return sorted(k[4] for k in self.rows if k[:4] == (label, dataset, context, budget))

    def decodes(self, label) -> str | None:
        """The decoder of ``label``'s cells (None: no cell of it was given)."""
        found = self.decoding.get(label)
        return found.decodes if found else None

    def ar_key(self, dataset, context, label=AR):
        """The AR cell a cell of ``label`` divides by: AR decoded on the same engine to the same length
        (``ar_partners``)."""
        ar = self.ar_partner.get(label)
        if ar is None and label in self.decoding:
            g = self.decoding[label]
            raise ValueError(
                f"missing the AR cell of {cell_name((label, dataset, context, 0, 0))[1:-1]}: no AR cell decoded on "
                f"engine {g.engine} to max_new_tokens {g.max_new_tokens} is among the --cells given"
            )
        return self.need(ar or AR, dataset, context, 0, 0)

    def sample_speedups(self, key) -> pd.Series:
        """AR per-sample time / method per-sample time, indexed by sample."""
        key = self.need(*key)
        ar_key = self.ar_key(key[1], key[2], key[0])
        method, ar = self.samples[key]["time"], self.samples[ar_key]["time"]
        if set(method.index) != set(ar.index):
            raise ValueError(
                f"cell {cell_name(key)} has samples {sorted(method.index)} but the AR cell "
                f"{cell_name(ar_key)} has {sorted(ar.index)}"
            )
        return ar.loc[method.index] / method

    def left_out(self, key) -> bool:
        """Whether ``key`` is a cell of a label the run left out (``not_run``): its metrics are NaN."""
        return tuple(key) not in self.rows and key[0] in self.not_run

    def speedup(self, key) -> float:
        if self.left_out(key):
            return math.nan
        return float(self.sample_speedups(key).mean())

    def sample_acceptance(self, key) -> pd.Series:
        s = self.samples[self.need(*key)]
        return 100.0 * s["accepted"] / s["drafted"].where(s["drafted"] > 0)

    def acceptance(self, key) -> float:
        if self.left_out(key):
            return math.nan
        rows = self.rows[self.need(*key)]
        drafted = rows["drafted"].sum()
        return 100.0 * rows["accepted"].sum() / drafted if drafted > 0 else math.nan

    def replicate_acceptance(self, key) -> pd.Series:
        """A cell's acceptance (%) in each training replicate (one entry, `SHARED`, for a shared cell)."""
        return acceptance_by_replicate(self.rows[self.need(*key)])

    def replicate_sample_speedups(self, key) -> pd.Series:
        """AR per-sample time / the cell's per-sample time in each training replicate, indexed by (replicate,
        sample)."""
        self.sample_speedups(key)  # the AR cell must have the cell's samples
        ar = self.samples[self.ar_key(key[1], key[2], key[0])]["time"]
        times = self.rows[tuple(key)].groupby(["replicate", "sample"])["total_s"].mean()
        return ar.reindex(times.index.get_level_values("sample")).to_numpy() / times

    def replicate_speedup(self, key) -> pd.Series:
        """A cell's speedup (mean over samples of AR per-sample time / per-sample time) in each training replicate
        (figures.py reads it as ``replicate_{metric}``, beside ``replicate_acceptance``)."""
        return self.replicate_sample_speedups(key).groupby("replicate").mean()

    def replicates(self, key) -> list[int]:
        return sorted(int(r) for r in self.rows[self.need(*key)]["replicate"].unique())

    def cost(self, key) -> float:
        """c of a speculative cell (see the module docstring); NaN where the cells lack the timing columns."""
        return draft_cost(self.rows[self.need(*key)], self.rows[self.ar_key(key[1], key[2], key[0])])

    def predicted_speedup(self, key) -> float:
        """The analytical speedup of a speculative cell from its own acceptance, γ and c."""
        return predicted_speedup(self.acceptance(key) / 100.0, int(key[4]), self.cost(key))

    def ar_tok_s(self, dataset, context) -> float:
        return float(self.rows[self.ar_key(dataset, context)]["tok_per_s"].mean())

    @cached_property
    def memory(self) -> tuple[str, float, str]:
        """(unit, MB per unit, what `peak_mem_mb` measures) of these cells: CUDA's max_memory_allocated in GB as in
        the paper, or, on CPU, the bytes held in weights and KV caches in MB (a sparse cache moves it by < 1 MB)."""
        kinds = set(self.df["mem_kind"]) if "mem_kind" in self.df else {"cpu_peak_rss"}
        if kinds == {"cuda_max_allocated"}:
            return (
                "GB",
                1024.0,
                (
                    r"peak GPU memory (\texttt{max\_memory\_allocated}), converted from "
                    r"\texttt{peak\_mem\_mb}"
                ),
            )
        if kinds == {"cpu_tensor_bytes"}:
            return (
                "MB",
                1.0,
                (
                    "memory held in weights and KV caches, counted from the tensors on CPU (not VRAM: "
                    "activations and the process's other memory are not included)"
                ),
            )
        raise ValueError(f"cells measure peak memory in different ways ({sorted(kinds)}): re-run the older cells")

    def peak(self, key) -> float:
        """Mean `peak_mem_mb` of a cell, in the unit of `memory`."""
        if self.left_out(key):
            return math.nan
        return float(self.rows[self.need(*key)]["peak_mem_mb"].mean()) / self.memory[1]


def acceptance_by_replicate(rows: pd.DataFrame) -> pd.Series:
    """100 · Σ accepted / Σ drafted over ``rows``, per training replicate (NaN where nothing was drafted)."""
    sums = rows.groupby("replicate")[["accepted", "drafted"]].sum()
    return 100.0 * sums["accepted"] / sums["drafted"].where(sums["drafted"] > 0)


def draft_cost(rows: pd.DataFrame, ar_rows: pd.DataFrame) -> float:
    """c: seconds per drafter forward of ``rows`` ÷ seconds per decode step of the AR rows (ratios of sums)."""
    timed = all(c in rows and rows[c].notna().all() for c in ("draft_s", "draft_steps")) and all(
        c in ar_rows and ar_rows[c].notna().all() for c in ("verify_s", "new_tokens")
    )
    if not timed or rows["draft_steps"].sum() == 0:
        return math.nan
    step = ar_rows["verify_s"].sum() / (ar_rows["new_tokens"] - 1).sum()
    return float(rows["draft_s"].sum() / rows["draft_steps"].sum() / step)


def predicted_speedup(alpha: float, gamma: int, c: float) -> float:
    """(1 − α^(γ+1)) / ((1 − α)(γc + 1)): expected tokens per round over the round's cost in verifier steps."""
    if math.isnan(alpha) or math.isnan(c):
        return math.nan
    if alpha >= 1.0:
        return (gamma + 1) / (gamma * c + 1)
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))


# -------------------------------------------------------------------------------------------- settings
