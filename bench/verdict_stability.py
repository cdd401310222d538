"""Do the claims' verdicts survive a rerun? The claims report on disjoint sets of training replicates of one run.

    python bench/verdict_stability.py --results results            # a finished `snakemake all`
    python bench/verdict_stability.py --results results --size 1   # each replicate alone: R = 1, prompts-only

Two disjoint sets of replicates are two independent training runs of the same commit, as two machines with other
float rounding give (bench/README.md, "Verdict stability"): each set gets the claims report of `snakemake claims`,
built from its replicates' cells and the shared ones (AR, EAGLE-3), and the verdicts are compared finding by
finding. Sets of --size replicates (default: half of them) are taken in order, disjoint: with R = 6 and size 3,
{0, 1, 2} vs {3, 4, 5}; every pair of sets is compared. Settings come from the main table's provenance file.
Prints a markdown table; --json writes every verdict.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import tempfile
from pathlib import Path

from budgetdraft.base import methods
from budgetdraft.report import claims

REPLICATE_DIR = re.compile(r"^r(\d+)$")


def cells_by_replicate(results: Path) -> tuple[list[Path], dict[int, list[Path]]]:
    """(shared cell files, {replicate: its cell files}) of the grid (policy cells, LABEL@POLICY, are not claims')."""
    shared, replicated = [], {}
    for path in sorted((results / "cells").rglob("*.parquet")):
        parts = path.relative_to(results / "cells").parts
        if "@" in parts[0] and parts[0] not in methods.REGISTRY:  # a policy's cells; sd@full is a control of the claims
            continue
        match = REPLICATE_DIR.match(parts[1])
        if match:
            replicated.setdefault(int(match.group(1)), []).append(path)
        else:
            shared.append(path)
    return shared, replicated


def verdicts(cells: list[Path], settings: dict) -> dict[str, dict]:
    """{finding id: its verdict, value and interval} of the claims report on ``cells``."""
    with tempfile.TemporaryDirectory() as tmp:
        report = claims.build([str(c) for c in cells], settings, Path(tmp) / "claims.md")[1]
        found = json.loads(report.read_text())["findings"]
    return {
        f["id"]: {k: f[k] for k in ("verdict", "value", "ci_low", "ci_high")}
        for f in found
        if f["verdict"] != claims.DIAGNOSTIC
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--size", type=int, default=0, help="replicates per set (default: half of them)")
    parser.add_argument("--json", type=Path, help="write every set's verdicts here")
    args = parser.parse_args()
    settings = json.loads((args.results / "tables/main.sources.json").read_text())["settings"]
    shared, replicated = cells_by_replicate(args.results)
    reps = sorted(replicated)
    size = args.size or max(1, len(reps) // 2)
    sets = [reps[i : i + size] for i in range(0, len(reps) - size + 1, size)]
    if len(sets) < 2:
        raise SystemExit(f"{len(reps)} replicate(s) in {args.results}/cells: two disjoint sets of {size} need more")
    runs = {tuple(s): verdicts(shared + [c for r in s for c in replicated[r]], settings) for s in sets}
    ids = list(next(iter(runs.values())))
    names = [f"replicates {list(s)}" for s in runs]
    print(f"| finding | {' | '.join(names)} | same verdict |")
    print("|---|" + "---|" * len(names) + "---|")
    same_all = 0
    for fid in ids:
        found = [runs[s][fid] for s in runs]
        same = len({f["verdict"] for f in found}) == 1
        same_all += same
        shown = [f"{f['verdict']} ({claims.show(f['value'], '')})" for f in found]
        print(f"| {fid} | {' | '.join(shown)} | {'yes' if same else '**no**'} |")
    pairs = list(itertools.combinations(runs, 2))
    agree = [sum(runs[a][f]["verdict"] == runs[b][f]["verdict"] for f in ids) for a, b in pairs]
    print(
        f"\n{same_all} of {len(ids)} findings get the same verdict in all {len(runs)} sets of {size} replicate(s); "
        f"pairwise agreement {', '.join(f'{n}/{len(ids)}' for n in agree)}."
    )
    if args.json:
        args.json.write_text(json.dumps({str(list(s)): v for s, v in runs.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
