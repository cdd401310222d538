"""How much of the acceptance is copying (budgetdraft.report.copying), on synthetic cells: the finding's verdict
follows the ratio of BudgetDraft's acceptance to the copier's, the copy share and the split of acceptance by what
the copier predicts are read from the rows' per-token columns, and the claims report shows them.

The cells are TEST FIXTURES (test_claims' writer, hand-chosen acceptance), with each row's per-token columns added:
a row's first half of its tokens is "copied" (the copier predicts them), its second half not."""

import json

import numpy as np
import pytest
from test_claims import NEW_TOKENS, SETTINGS, write_cell

from budgetdraft.evaluation import cellfile
from budgetdraft.report import claims, copying, evidence
from budgetdraft.report.settings import parse_settings

BUDGETS, GAMMA = SETTINGS["budgets"], SETTINGS["gamma_fixed"]


def with_copy_columns(path, on_copied: float, off_copied: float):
    """The cell at ``path`` rewritten with per-token columns: the first half of every row's tokens copied, its
    drafts accepted at rate ``on_copied`` there and ``off_copied`` elsewhere (exactly, by position)."""
    frame = cellfile.read_frame(path)
    half = NEW_TOKENS // 2
    copied = [True] * half + [False] * (NEW_TOKENS - half)

    def outcomes(rate, n):
        kept = round(rate * n)
        return [1] * kept + [0] * (n - kept)

    drafts = outcomes(on_copied, half) + outcomes(off_copied, NEW_TOKENS - half)
    frame["draft_outcomes"] = [np.array(drafts if label != "ar" else [-1] * NEW_TOKENS, dtype=np.int8)
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
    out = claims.build(paths, SETTINGS, tmp_path / "claims.md")
    text = out[0].read_text()
    assert "## Copying" in text and "| 1K | grid | lambda0.5 | 90.6 [" in text and "| 1K | 50.0 [50.0, 50.0] |" in text
    assert {f["id"] for f in json.loads(out[1].read_text())["findings"]} >= {"CP/0.5K", "CP/1K"}
