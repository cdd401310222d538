"""A cell is a typed value (budgetdraft.evaluation.cellspec.CellSpec): its record in every row of a cell file is
versioned, a cell written by an earlier format (eval-cell's flags, no version; schema 2, which named the decoder
`method`) is read as it was, a newer version is refused by name; when a cell shares work with others is one rule, of
its decoder's declared traits, that the warm process and the estimate read."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from test_cell_integrity import rows

from budgetdraft.base.names import SHARED_DRAFTER_PREFILL
from budgetdraft.evaluation import cellfile, cells, grid
from budgetdraft.evaluation.cellspec import (
    CELL_SCHEMA,
    SAMPLING_FIELDS,
    SCHEMA_KEY,
    CellSpec,
    read_record,
    record_difference,
)
from budgetdraft.pipeline.configcheck import check_config
from budgetdraft.pipeline.plan import Plan
from budgetdraft.report.captions import shared_drafter_text

ROOT = Path(__file__).resolve().parents[1]
# The `config` of a BudgetDraft cell as eval-cell wrote it before CellSpec (commit 2c69200, clean run of
# config/config.yaml: results/cells/lambda0.5/r0/gs/1K/B64_g5.parquet): its parsed flags, `out` included, no version.
BEFORE_CELLSPEC = (
    '{"budget": 64, "chunk_size": 8, "context": "1K", "dataset": "gs", "device": "cpu", "draft_vocab": null, '
    '"drafter": "results/drafters/r0/lambda0.5", "drafter_dtype": "float32", "drafter_prefill_shared": true, '
    '"engine": "eager", "extra": "", "gamma": 5, "label": "lambda0.5", "max_new_tokens": 16, "method": "sd", '
    '"out": "results/cells/lambda0.5/r0/gs/1K/B64_g5.parquet", "policy": "topk_chunks", '
    '"prompts": "results/data/prompts/gs/1K.parquet", "repeats": 1, "replicate": 0, "score_window": 32, "seed": 0, '
    '"temperature": 0.0, "threads": 1, "top_k": 0, "top_p": 1.0, "verifier": "results/models/verifier", '
    '"verifier_dtype": "float32", "verifier_prefill": "results/prefill/gs/1K.safetensors", "warmup": 1, '
    '"warmup_prompt_tokens": 64, "warmup_tokens": 4}'
)
# The same cell's record as the code at 5fe8066 wrote it, `cell_schema` 2: CellSpec's fields, the decoder named
# `method` (schema 3 names it `decodes`, `method` being a row of the grid only).
SCHEMA_2 = (
    '{"budget": 64, "cell_schema": 2, "chunk_size": 8, "context": "1K", "dataset": "gs", "device": "cpu", '
    '"draft_vocab": null, "drafter": "results/drafters/r0/lambda0.5", "drafter_dtype": "float32", '
    '"drafter_prefill_shared": true, "engine": "eager", "extra": "", "gamma": 5, "label": "lambda0.5", '
    '"max_new_tokens": 16, "method": "sd", "policy": "topk_chunks", "prompts": "results/data/prompts/gs/1K.parquet", '
    '"repeats": 1, "replicate": 0, "score_window": 32, "seed": 0, "temperature": 0, "threads": 1, "top_k": 0, '
    '"top_p": 1.0, "verifier": "results/models/verifier", "verifier_dtype": "float32", '
    '"verifier_prefill": "results/prefill/gs/1K.safetensors", "warmup": 1, "warmup_prompt_tokens": 64, '
    '"warmup_tokens": 4}'
)


def default_plan() -> Plan:
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    check_config(cfg, schema=ROOT / "workflow/schemas/config.schema.yaml")
    return Plan(cfg)


def bd_spec() -> CellSpec:
    return default_plan().jobs.spec("lambda0.5", "gs", "1K", 64, 5, 0)


def test_a_cell_written_before_the_spec_is_read_as_it_was(tmp_path):
    """The previous format's record reads as the spec the plan builds for that cell today; its cell file loads, is
    greedy, and says its drafter prefill was shared."""
    assert CellSpec.of(read_record(BEFORE_CELLSPEC)) == bd_spec()
    assert read_record(BEFORE_CELLSPEC)["decodes"] == "sd" and "method" not in read_record(BEFORE_CELLSPEC)
    path = tmp_path / "results/cells/lambda0.5/r0/gs/1K/B64_g5.parquet"
    path.parent.mkdir(parents=True)
    old = rows("lambda0.5", "gs", "1K", 64, 5, replicate=0).assign(config=BEFORE_CELLSPEC)
    cellfile.write_cell(old, str(path))
    df = grid.load_cells([str(path)], optional=[*grid.OPTIONAL_COLUMNS, "config"])
    assert set(df["config"].map(grid.decoding_of)) == {"greedy"} and grid.sampled_groups(df) == set()
    assert "timed once" in shared_drafter_text(df)
    sampled = json.dumps({**json.loads(BEFORE_CELLSPEC), "temperature": 0.7, "top_p": 0.9})
    assert grid.decoding_of(sampled) == "temperature=0.7, top_p=0.9, top_k=0, seed=0"
    before_sampling = {k: v for k, v in json.loads(BEFORE_CELLSPEC).items() if k not in SAMPLING_FIELDS}
    assert grid.decoding_of(json.dumps(before_sampling)) == "greedy" and grid.decoding_of("") == "greedy"


@pytest.mark.parametrize("written", [BEFORE_CELLSPEC, SCHEMA_2], ids=["schema-1", "schema-2"])
def test_a_cell_of_an_earlier_schema_is_the_plans_cell(tmp_path, written):
    """A record of schema 1 or 2 reads as the cell the plan measures today, its decoder (`method` then) as
    `decodes`: equal to the planned spec, no difference from it, and its cell file is read as that cell's; had it
    decoded another way, the difference names the field."""
    planned = bd_spec()
    recorded = read_record(written)
    assert CellSpec.of(recorded) == planned and record_difference(recorded, planned) is None
    assert recorded["decodes"] == planned.decodes == "sd" and "method" not in recorded
    path = tmp_path / "results/cells/lambda0.5/r0/gs/1K/B64_g5.parquet"
    path.parent.mkdir(parents=True)
    cellfile.write_cell(rows("lambda0.5", "gs", "1K", 64, 5, replicate=0).assign(config=written), str(path))
    assert cellfile.read_checked(path, planned).num_rows > 0
    other = read_record(json.dumps({**json.loads(written), "method": "triforce"}))
    assert record_difference(other, planned) == "its record says decodes 'triforce', the plan wants 'sd'"


def test_the_record_is_the_spec_under_its_version_and_a_newer_version_is_refused():
    spec = bd_spec()
    recorded = json.loads(spec.record(drafter_prefill_shared=True))
    assert recorded[SCHEMA_KEY] == CELL_SCHEMA == 3 and recorded[SHARED_DRAFTER_PREFILL] is True
    assert recorded["decodes"] == "sd" and "method" not in recorded  # the decoder, under its own name
    assert CellSpec.of(read_record(spec.record())) == spec and SHARED_DRAFTER_PREFILL not in json.loads(spec.record())
    newer = json.dumps({**recorded, SCHEMA_KEY: CELL_SCHEMA + 1})
    with pytest.raises(ValueError, match=f"cell_schema {CELL_SCHEMA + 1}; this code reads versions 1 to 3"):
        grid.decoding_of(newer)
    with pytest.raises(ValueError, match="cell_schema 'x'"):
        read_record(json.dumps({SCHEMA_KEY: "x"}))


def test_what_a_cell_shares_is_one_rule_of_its_spec():
    """A forking warm process shares the warm-up of AR and the paper's drafter, eager, one thread, on the CPU, and
    the drafter's full prefill of SD-decoded cells; nothing for a baseline, more threads, graphs or a GPU."""
    bd = bd_spec()
    ar = default_plan().jobs.spec("ar", "gs", "1K", 0, 0)
    assert bd.shares_warm_up() and bd.shares_drafter_prefill()
    assert ar.shares_warm_up() and not ar.shares_drafter_prefill()
    for other in (
        replace(bd, threads=2),
        replace(bd, engine="graphs"),
        replace(bd, device="cuda:0"),
        default_plan().jobs.spec("triforce", "lwm", "1K", 128, 5, 0),
        default_plan().jobs.spec("lookup", "gs", "1K", 0, 5),
    ):
        assert not other.shares_warm_up() and not other.shares_drafter_prefill(), other
    assert replace(bd, device="cpu:0").shares_warm_up()
    # the warm process asks the same rule: no key for a cell the rule shares nothing of
    assert cells.warm_key(replace(bd, threads=2)) is None and cells.shared_prefill_key(replace(bd, threads=2)) is None


def test_a_spec_takes_only_its_fields_from_a_mapping():
    values = {**read_record(BEFORE_CELLSPEC), "unknown": 1}
    assert CellSpec.of(values, label="x").label == "x"
    with pytest.raises(TypeError):
        CellSpec.of({"label": "x"})  # decodes, models, prompts, ... have no default
    with pytest.raises(ValueError, match="--decodes 'nope' is not one of ar, sd, triforce, eagle3, lookup"):
        CellSpec.of(values, decodes="nope")  # a decoder no declaration names
