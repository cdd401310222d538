"""How much of the acceptance is copying (budgetdraft.report.copying), on synthetic cells: the finding's verdict
follows the ratio of BudgetDraft's acceptance to the copier's, the copy share and the split of acceptance by what
the copier predicts are read from the rows' per-token columns, and the claims report shows them.

The cells are TEST FIXTURES (test_claims' writer, hand-chosen acceptance), with each row's per-token columns added:
a row's first half of its tokens is "copied" (the copier predicts them), its second half not."""

import json

import numpy as np
import pytest
from test_claims import NEW_TOKENS, SETTINGS, decoded_as, write_cell

from budgetdraft.evaluation import cellfile
from budgetdraft.report import claims, copying, evidence
from budgetdraft.report.settings import parse_settings

BUDGETS, GAMMA = SETTINGS["budgets"], SETTINGS["gamma_fixed"]


def with_copy_columns(path, on_copied: float, off_copied: float, copied_half: str = "first"):
    """The cell at ``path`` rewritten with per-token columns: the ``copied_half`` ("first" or "second") of every
    row's tokens copied, its drafts accepted at rate ``on_copied`` there and ``off_copied`` elsewhere (exactly, by
    position)."""
    frame = cellfile.read_frame(path)
    half = NEW_TOKENS // 2
    copied = [True] * half + [False] * (NEW_TOKENS - half)

    def outcomes(rate, n):
        kept = round(rate * n)
        return [1] * kept + [0] * (n - kept)

    drafts = outcomes(on_copied, half) + outcomes(off_copied, NEW_TOKENS - half)
    if copied_half == "second":
        copied, drafts = copied[half:] + copied[:half], drafts[half:] + drafts[:half]
    frame["draft_outcomes"] = [np.array(drafts if label.split("~")[0] != "ar" else [-1] * NEW_TOKENS, dtype=np.int8)
                               for label in frame["label"]]  # fmt: skip
    for n in (2, 3):
        frame[f"copied_{n}"] = [np.array(copied)] * len(frame)
        frame[f"copy_share_{n}"] = 0.5
    cellfile.write_cell(frame, path)
    return path


def write(root, bd: float, copier: float, split=(0.9, 0.1)) -> list:
    """AR, BudgetDraft (acceptance ``bd``) at every budget and the copier (acceptance ``copier``, B0) at γ_fixed."""
    rates = {"ar": 0.0, "lambda0.5": bd, "lookup": copier}
    paths = []
    for d in SETTINGS["datasets"]:
        for c in SETTINGS["contexts"]:
            paths.append(with_copy_columns(write_cell(root, lambda *a: 0, "ar", d, c, 0, 0), 0, 0))
            for b in BUDGETS:
                paths.append(with_copy_columns(write_cell(root, lambda *a: rates["lambda0.5"], "lambda0.5", d, c, b,
                                                          GAMMA), *split))  # fmt: skip
            paths.append(
                with_copy_columns(write_cell(root, lambda *a: rates["lookup"], "lookup", d, c, 0, GAMMA), 1.0, 0.0)
            )
    return paths


@pytest.fixture(autouse=True)
def speeds(monkeypatch):
    import test_claims

    monkeypatch.setitem(test_claims.SPEED, "lookup", 1.1)


@pytest.mark.parametrize(
    "bd, copier, verdict", [(0.8, 0.3, "holds"), (0.1, 0.6, "does not hold"), (0.4, 0.4, "not resolved")]
)
def test_the_copying_finding_follows_the_ratio_of_acceptances(tmp_path, bd, copier, verdict):
    paths = write(tmp_path, bd, copier)
    ev = evidence.Evidence(evidence.load_claim_cells(paths), parse_settings(SETTINGS))
    found = {f.id: f for f in copying.copying(ev)}
    assert set(found) == {f"CP/{c}" for c in SETTINGS["contexts"]}  # no long generations in this run
    for f in found.values():
        assert f.value == pytest.approx(bd / copier, rel=0.05) and f.verdict == verdict, f


def test_the_report_shows_the_copy_share_and_the_split_by_what_the_copier_predicts(tmp_path):
    """BudgetDraft accepts 90 % of the drafts made for copied tokens and 10 % of the others (by construction); the
    copy share of the verifier's own tokens is a half; both are in claims.md with their intervals."""
    paths = write(tmp_path, 0.5, 0.5)
    ev = evidence.Evidence(evidence.load_claim_cells(paths), parse_settings(SETTINGS))
    keys = copying.keys_at(ev, "lambda0.5", "1K")
    on = copying.pooled(ev, keys, lambda rows: copying.per_row(rows, "copied_2", lambda copied, pos: copied))
    off = copying.pooled(ev, keys, lambda rows: copying.per_row(rows, "copied_2", lambda copied, pos: ~copied))
    assert on[0] == pytest.approx(90.6, abs=0.1) and off[0] == pytest.approx(9.4, abs=0.1)  # 29 of 32, 3 of 32
    assert copying.share(ev, copying.keys_at(ev, "ar", "1K"))[0] == pytest.approx(50.0)
    by_copier = copying.pooled(ev, keys, lambda rows: copying.copied_accepts(rows, "copied_2"))
    assert by_copier[0] == pytest.approx(100 * 29 / 32)  # of its 32 accepted drafts per row, 29 were copied tokens
    out = claims.build(paths, SETTINGS, tmp_path / "claims.md")
    text = out[0].read_text()
    assert "## Copying" in text and "| 1K | grid | lambda0.5 | 90.6 [" in text and "| 1K | 50.0 [50.0, 50.0] |" in text
    assert "| 1K | grid | lookup | 50.0 [50.0, 50.0] | 1.10× [1.10, 1.10] |" in text  # its speedup over AR
    assert {f["id"] for f in json.loads(out[1].read_text())["findings"]} >= {"CP/0.5K", "CP/1K"}


def test_long_generations_show_acceptance_by_position_and_where_copying_begins(tmp_path, monkeypatch):
    """Long-generation cells (LABEL~64) whose second half is copied: the copy share is 0 in buckets 0-15 and 16-31 and
    100 % after, BudgetDraft's acceptance by bucket follows its drafts, the onset is said at 32-47, and CP-long is
    judged."""
    import test_claims

    for label, speed in (("ar~64", 1.0), ("lambda0.5~64", 2.0), ("lookup~64", 1.1)):
        monkeypatch.setitem(test_claims.SPEED, label, speed)
    paths = write(tmp_path, 0.5, 0.5)
    d = next(iter(SETTINGS["datasets"]))
    for c in SETTINGS["contexts"]:
        paths.append(with_copy_columns(write_cell(tmp_path, lambda *a: 0, "ar~64", d, c, 0, 0), 0, 0, "second"))
        bd = write_cell(tmp_path, lambda *a: 0.5, "lambda0.5~64", d, c, BUDGETS[0], GAMMA)
        paths.append(with_copy_columns(bd, 0.9, 0.1, "second"))
        copier = write_cell(tmp_path, lambda *a: 0.5, "lookup~64", d, c, 0, GAMMA)
        paths.append(with_copy_columns(copier, 1.0, 0.0, "second"))
    ev = evidence.Evidence(evidence.load_claim_cells(paths), parse_settings(SETTINGS))
    assert copying.long_tokens(ev) == NEW_TOKENS
    assert "from tokens 32-47 on, the copier predicts half of the verifier's tokens or more" in copying.onset(ev, 64)
    rows = copying.position_rows(ev, NEW_TOKENS)
    c = SETTINGS["contexts"][-1]
    share = next(r for r in rows if r.startswith(f"| {c} | copy share"))
    assert share.split(" | ")[2:6] == [
        "0.0 [0.0, 0.0]",
        "0.0 [0.0, 0.0]",
        "100.0 [100.0, 100.0]",
        "100.0 [100.0, 100.0] |",
    ]
    bd_row = next(r for r in rows if r.startswith(f"| {c} | acceptance, lambda0.5~64"))
    # each row's drafts: 3 of its first 32 accepted (tokens 0-2), 29 of its last 32 (tokens 32-60)
    assert [cell.split(" [")[0] for cell in bd_row.split(" | ")[2:6]] == ["18.8", "0.0", "100.0", "81.2"]
    found = {f.id for f in copying.copying(ev)}
    assert found == {f"CP/{x}" for x in SETTINGS["contexts"]} | {f"CP-long/{x}" for x in SETTINGS["contexts"]}


def test_a_long_generation_is_checked_against_ar_at_its_own_length():
    """The lossless check compares LABEL~N with ar~N (their outputs are N tokens), never with the grid's AR, and
    still fails a long generation that leaves its AR."""
    import pandas as pd

    from budgetdraft.evaluation import grid

    def rows(label, ids):
        return {"label": label, "dataset": "d", "context": "1K", "budget": 0, "gamma": 0, "sample": 0, "repeat": 0,
                "output_ids": ids, **decoded_as(label)}  # fmt: skip

    short, long = list(range(8)), list(range(16))
    cells = [rows("ar", short), rows("sd", short), rows("ar~16", long), rows("sd~16", long)]
    assert grid.check_lossless(pd.DataFrame(cells)) == []
    cells[-1] = rows("sd~16", long[:10] + [99] * 6)
    with pytest.raises(ValueError, match=r"label=sd~16.* than \(label=ar~16.*first difference at token 10"):
        grid.check_lossless(pd.DataFrame(cells))


def test_the_findings_a_method_declares_read_its_cells(tmp_path, monkeypatch):
    """Each finding a declared method names (methods.Method.findings: the copier's CP and CP-long, PI's) is measured
    on a run with that method's cells and not run on the same run without them."""
    import test_claims

    from budgetdraft.base import methods
    from budgetdraft.report.verdicts import NOT_RUN

    for label, speed in (("ar~64", 1.0), ("lambda0.5~64", 2.0), ("lookup~64", 1.1)):
        monkeypatch.setitem(test_claims.SPEED, label, speed)
    paths = test_claims.write_controls(tmp_path, 0.3)  # the grid, PI and SD with a full drafter cache
    d = next(iter(SETTINGS["datasets"]))
    for c in SETTINGS["contexts"]:
        paths += [write_cell(tmp_path, lambda *a: 0.3, "lookup", dd, c, 0, GAMMA) for dd in SETTINGS["datasets"]]
        paths.append(write_cell(tmp_path, lambda *a: 0, "ar~64", d, c, 0, 0))
        paths.append(write_cell(tmp_path, lambda *a: 0.5, "lambda0.5~64", d, c, BUDGETS[0], GAMMA))
        paths.append(write_cell(tmp_path, lambda *a: 0.3, "lookup~64", d, c, 0, GAMMA))
    declared = {label: m.findings for label, m in methods.REGISTRY.items() if m.findings}
    assert set(declared) == {"lookup", "pi"}
    for label, ids in declared.items():
        for own, run in (
            (True, paths),
            (False, [p for p in paths if cellfile.path_key(p)["label"].split("~")[0] != label]),
        ):
            found = test_claims.by_id(run)
            for fid in ids:
                verdicts = [f.verdict for key, f in found.items() if key.split("/")[0] == fid]
                assert verdicts and all((v != NOT_RUN) == own for v in verdicts), (label, fid, own, verdicts)
