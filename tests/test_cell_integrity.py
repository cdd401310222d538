"""A cell file proves its integrity and its identity (budgetdraft.evaluation.cellfile): bytes changed after it was written, rows
that no decoder writes, or rows of another cell than its path names are refused with the file named; the workflow
sets such a file aside at plan time (tests/test_unreadable_cells.py). Small synthetic cells; one tiny model decodes
the cell that accepts the most drafts a cell can."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import tiny_cell_args, tiny_cell_inputs

from budgetdraft.base.names import SHARED
from budgetdraft.evaluation import cellfile, grid, sealed
from budgetdraft.evaluation.cellfile import write_cell
from budgetdraft.evaluation.cells import CELL_COLUMNS
from budgetdraft.pipeline import cli, warm

SETTINGS = {  # the least `paper` and `claims` need to get as far as reading their cells
    "datasets": {"d1": "DS-One"},
    "contexts": ["1K"],
    "budgets": [32],
    "gamma_fixed": 5,
    "collapse": {"dataset": "d1", "gamma": 5},
    "comparison": {"dataset": "d1", "contexts": ["1K"], "gamma": 5, "drafter_sizes": {}},
    "single_budget": {"dataset": "d1", "context": "1K", "gamma": 5, "trained_budget": 32},
}


def rows(label="sd", dataset="d1", context="1K", budget=32, gamma=5, replicate=SHARED, samples=3, repeats=2, new=16):
    """A cell's rows as `cells.run_cell` makes them (every column), with plausible numbers."""
    out = []
    for s in range(samples):
        for r in range(repeats):
            drafted, accepted, total = 20 + s, 10 + r, 1.0 + 0.1 * s + 0.01 * r
            out.append(
                dict(
                    label=label,
                    method="sd",
                    dataset=dataset,
                    context=context,
                    budget=budget,
                    gamma=gamma,
                    policy="topk_chunks",
                    replicate=replicate,
                    sample=s,
                    doc_id=f"doc{s}",
                    repeat=r,
                    prompt_tokens=100,
                    new_tokens=new,
                    verifier_prefill_s=0.1,
                    drafter_prefill_s=0.01,
                    decode_s=total - 0.11,
                    total_s=total,
                    tok_per_s=new / total,
                    drafted=drafted,
                    accepted=accepted,
                    acceptance=accepted / drafted,
                    tau=2.0,
                    verifier_forwards=5,
                    accept_by_position=[0.5] * gamma,
                    peak_mem_mb=100.0 + r,
                    mem_kind="cpu_tensor_bytes",
                    peak_tensor_mb=90.0,
                    drafter_kv_mb=1.0,
                    verifier_kv_mb=2.0,
                    draft_s=0.2,
                    draft_steps=drafted,
                    verify_s=0.5,
                    device="cpu",
                    engine="eager",
                    bandwidth_gbs=float("nan"),
                    step_bytes=float("nan"),
                    bound_fraction=float("nan"),
                    output_ids=list(range(100 * s, 100 * s + new)),
                    runner_up_ids=[],
                    top2_margins=[],
                    config=json.dumps({"budget": budget, "gamma": gamma}),
                )
            )
    return pd.DataFrame(out, columns=CELL_COLUMNS)


def cell_path(root: Path, label="sd", dataset="d1", context="1K", budget=32, gamma=5, replicate=SHARED) -> Path:
    return root.joinpath("results", "cells", *cellfile.cell_parts(label, dataset, context, budget, gamma, replicate))


def refused(path: Path, reason: str):
    """pytest.raises for a `BadCell` of ``path`` whose one-line message names the file and ``reason``."""
    return pytest.raises(cellfile.BadCell, match="^" + re.escape(f"{path}: ") + ".*" + re.escape(reason))


def sealed_copy(frame: pd.DataFrame, out: Path) -> None:
    """Write ``frame`` to ``out`` sealed with a digest of its own rows, as a careful forger would (no checks)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(sealed.seal(pa.Table.from_pandas(frame, preserve_index=False)), out, write_page_checksum=True)


def test_a_written_cell_reads_back_sealed(tmp_path):
    path = cell_path(tmp_path)
    write_cell(rows(), path)
    assert sealed.DIGEST_KEY in pq.read_schema(path).metadata and cellfile.problem(path) is None
    df = grid.read_cell(path)
    assert (
        len(df) == 6
        and set(df["budget"]) == {32}
        and list(df.columns[: len(grid.NEEDED_COLUMNS)]) == list(grid.NEEDED_COLUMNS)
    )
    pd.testing.assert_frame_equal(cellfile.read_frame(path), rows())
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing else left beside it


def test_every_flipped_bit_is_caught_or_changes_nothing(tmp_path):
    """One bit flipped at positions spread over the whole file (magic, data pages, page headers, footer, the
    digest itself): the cell is refused as a `BadCell` naming it, or it reads exactly as written."""
    path = cell_path(tmp_path)
    write_cell(rows(), path)
    data, good = path.read_bytes(), cellfile.read_frame(path)
    outcomes = {"refused": 0, "unchanged": 0}
    positions = sorted({*range(0, len(data), max(1, len(data) // 600)), *range(len(data) - 64, len(data))})
    for pos in positions:
        flipped = bytearray(data)
        flipped[pos] ^= 1 << (pos % 8)
        path.write_bytes(bytes(flipped))
        try:
            df = cellfile.read_frame(path)
        except cellfile.BadCell as e:
            assert str(e).startswith(f"{path}: ") and "\n" not in str(e), str(e)
            outcomes["refused"] += 1
            with pytest.raises(ValueError) as again:  # the tables' reader refuses it too (unsealed included)
                grid.read_cell(path)
            assert str(again.value) == str(e)
            continue
        pd.testing.assert_frame_equal(df, good, obj=f"cell with bit {pos % 8} of byte {pos} flipped")
        assert cellfile.problem(path) is None
        outcomes["unchanged"] += 1
    assert len(positions) > 600 and outcomes["refused"] > len(positions) // 4, outcomes


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda df: df.assign(accepted=-7, acceptance=-7 / df["drafted"]), "row 0: accepted = -7 is negative"),
        (lambda df: df.assign(accepted=df["drafted"] + 1, acceptance=1.05), "row 0: accepted 21 > drafted 20"),
        (
            lambda df: df.assign(accepted=15, acceptance=15 / df["drafted"], new_tokens=8, tok_per_s=8 / df["total_s"]),
            "row 0: accepted 15 >= new_tokens 8",
        ),
        (  # the first new token is the prefill's: no cell accepts as many drafts as it has new tokens
            lambda df: df.assign(new_tokens=df["accepted"], tok_per_s=df["accepted"] / df["total_s"]),
            "row 0: accepted 10 >= new_tokens 10",
        ),
        (lambda df: df.assign(accepted=df["accepted"] + 1), "row 0: acceptance = 0.5 but accepted / drafted give"),
        (lambda df: df.assign(repeat=df["repeat"] - 1), "row 0: repeat = -1 is negative"),
        (lambda df: df.assign(drafted=-df["drafted"], accepted=-30), "row 0: drafted = -20 is negative"),
        (lambda df: df.assign(new_tokens=0, tok_per_s=0.0), "row 0: new_tokens = 0 is below 1"),
        (lambda df: df.assign(total_s=-df["total_s"], tok_per_s=float("nan")), "row 0: total_s = -1.0 is negative"),
        (lambda df: df.assign(draft_s=float("inf")), "row 0: draft_s = inf is not a finite number"),
        (lambda df: df.assign(replicate=-2), "row 0: replicate = -2 is below -1"),
        (lambda df: df.iloc[:0], "cell file has no rows"),
    ],
    ids=[
        "accepted-negative",
        "accepted-beyond-drafted",
        "accepted-beyond-new-tokens",
        "accepted-every-new-token",
        "acceptance-not-derived",
        "repeat-negative",
        "drafted-negative",
        "no-new-tokens",
        "time-negative",
        "time-infinite",
        "replicate-below-shared",
        "empty",
    ],
)
def test_rows_no_decoder_writes_are_refused(tmp_path, edit, reason):
    """Sealed by a forger who recomputed the digest (so only the rows can tell), or by the writer itself."""
    path = cell_path(tmp_path)
    sealed_copy(edit(rows()), path)
    with refused(path, reason):
        grid.read_cell(path)
    with pytest.raises(ValueError, match=re.escape(f"{path}: ") + ".*" + re.escape(reason)):
        grid.load_cells([path])
    assert cellfile.problem(path).startswith(reason)
    with refused(tmp_path / "w" / path.name, reason):  # eval-cell never writes such rows
        write_cell(edit(rows()), tmp_path / "w" / path.name)
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


@pytest.mark.parametrize(
    "written, path_of, reason",
    [
        ({"budget": 64}, {"budget": 32}, "budget 64"),  # rows of B64 under B32_g5.parquet
        ({"gamma": 4}, {"gamma": 5}, "gamma 4"),
        ({"label": "lambda0.5"}, {"label": "sd"}, "label 'lambda0.5'"),
        ({"dataset": "d2"}, {"dataset": "d1"}, "dataset 'd2'"),
        ({"context": "0.5K"}, {"context": "1K"}, "context '0.5K'"),
        ({"replicate": 1}, {"replicate": 0}, "replicate 1"),  # replicate 1's rows under r0/
        ({"replicate": 0}, {"replicate": SHARED}, "replicate 0"),  # a replicate's rows as the shared cell
        ({"replicate": SHARED}, {"replicate": 0}, "replicate -1"),  # the shared cell's rows under r0/
    ],
    ids=["budget", "gamma", "label", "dataset", "context", "replicate", "replicate-as-shared", "shared-as-replicate"],
)
def test_rows_of_another_cell_than_the_path_says_are_refused(tmp_path, written, path_of, reason):
    """A whole, sealed cell copied (or moved) to another cell's path: its digest holds, its identity does not."""
    key = {"label": "sd", "dataset": "d1", "context": "1K", "budget": 32, "gamma": 5, "replicate": SHARED}
    source, target = cell_path(tmp_path / "a", **{**key, **written}), cell_path(tmp_path / "b", **{**key, **path_of})
    write_cell(rows(**{**key, **written}), source)
    target.parent.mkdir(parents=True)
    target.write_bytes(source.read_bytes())
    with refused(target, f"its rows are another cell ({reason}"):
        grid.read_cell(target)
    assert "than its path names" in cellfile.problem(target)
    with refused(target, "than its path names"):  # eval-cell --out of another cell than its flags say
        write_cell(rows(**{**key, **written}), target)


def test_rows_of_two_cells_in_one_file_are_refused(tmp_path):
    path = cell_path(tmp_path)
    sealed_copy(pd.concat([rows(), rows(budget=64)], ignore_index=True), path)
    with refused(path, "its rows hold more than one cell (budget 32 and 64)"):
        grid.read_cell(path)


def test_a_sealed_cell_edited_afterwards_is_refused(tmp_path):
    """Rows changed consistently (times halved, speeds doubled), the rest of the file and its digest kept."""
    path = cell_path(tmp_path)
    write_cell(rows(), path)
    table = pq.read_table(path)
    df = table.to_pandas()
    df["total_s"] /= 2
    df["tok_per_s"] = df["new_tokens"] / df["total_s"]
    edited = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(table.schema.metadata)
    pq.write_table(edited, path)
    reason = "its rows do not match the digest written with them"
    with refused(path, reason):
        grid.read_cell(path)
    assert cellfile.problem(path).startswith(reason)


def test_a_cell_without_a_digest_is_refused_by_every_reader(tmp_path, monkeypatch):
    """A file written by hand (or before cells were sealed), its rows plausible: it cannot prove its integrity, so
    `paper` and `claims` refuse it, naming it, as the workflow's plan-time check (`problem`) does."""
    path = cell_path(tmp_path)
    path.parent.mkdir(parents=True)
    rows().to_parquet(path)
    reason = "no integrity digest (written before it was sealed, or not by budgetdraft)"
    with refused(path, reason):
        grid.read_cell(path)
    with refused(path, reason):
        grid.load_cells([path])
    assert cellfile.problem(path) == reason
    monkeypatch.delenv(warm.ENV, raising=False)
    for command in (["paper", "--artifact", "main"], ["claims"]):
        argv = [*command, "--settings", json.dumps(SETTINGS), "--cells", str(path), "--out", str(tmp_path / "o.md")]
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == f"budgetdraft {command[0]}: error: {path}: {reason}: {cellfile.FIX}"
    assert not (tmp_path / "o.md").exists()


def test_a_cell_accepts_fewer_drafts_than_it_has_new_tokens(tmp_path, monkeypatch):
    """The bound is what decoding gives: the first new token is the prefill's and every round ends with the verifier's
    own token, so a drafter that agrees with the verifier every time (the verifier itself, its whole cache kept)
    accepts new_tokens - verifier_forwards drafts, fewer than its new tokens; eval-cell writes that cell."""
    tiny_cell_inputs(tmp_path, list(range(3, 40)))
    out = cell_path(tmp_path, label="x", dataset="d", context="c", budget=16, gamma=3)
    argv = tiny_cell_args(tmp_path, out, new_tokens=13, extra=("--policy", "full", "--warmup", "0"))
    argv[argv.index("--drafter") + 1] = str(tmp_path / "v")
    monkeypatch.delenv(warm.ENV, raising=False)
    cli.main(["eval-cell", *argv])
    row = cellfile.read_frame(out).iloc[0]
    assert row.accepted == row.drafted > 0  # every draft accepted
    assert row.accepted == row.new_tokens - row.verifier_forwards and row.accepted < row.new_tokens == 13


def test_the_digest_covers_every_column_and_its_type():
    table = pa.Table.from_pandas(rows(), preserve_index=False)
    digest = sealed.table_digest(table)
    assert sealed.table_digest(pa.Table.from_batches(table.to_batches(max_chunksize=1))) == digest  # layout-free
    for column, value in {
        "repeat": 7,
        "output_ids": [1, 2],
        "config": "{}",
        "bandwidth_gbs": 1.0,
        "accept_by_position": [0.5, 0.25],
        "doc_id": None,
    }.items():
        i = table.column_names.index(column)
        values = table.column(i).to_pylist()
        values[-1] = value
        changed = table.set_column(i, column, pa.array(values, table.column(i).type))
        assert sealed.table_digest(changed) != digest, column
    widened = table.set_column(
        table.column_names.index("repeat"), "repeat", table.column("repeat").cast(pa.uint64())
    )  # repeat = 4294967296 and the like: a flipped type
    assert sealed.table_digest(widened) != digest
    renamed = table.rename_columns(
        ["budget" if n == "gamma" else "gamma" if n == "budget" else n for n in table.column_names]
    )
    assert sealed.table_digest(renamed) != digest
    assert np.isnan(rows()["bandwidth_gbs"]).all()  # NaN measures are allowed (the engine columns, a CPU's memory)
