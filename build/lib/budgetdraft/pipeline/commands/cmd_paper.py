"""`python -m budgetdraft paper`: one table or figure of the paper from cell files (``budgetdraft.report.paper``),
the comparison table's drafter sizes counted from their weights (``--drafters``)."""

import json
from pathlib import Path

from budgetdraft.base.jsonio import json_object
from budgetdraft.report.paper import ARTIFACTS, build, drafter_sizes
from budgetdraft.report.settings import settings_dict, with_drafter_sizes


def configure_parser(parser) -> None:
    parser.add_argument(
        "--artifact",
        required=True,
        choices=sorted(ARTIFACTS),
        help="which table/figure: " + ", ".join(f"{k} ({a.label})" for k, a in ARTIFACTS.items()),
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output .tex (tables) or .pdf (figures; a .png with the same stem is written too)",
    )
    parser.add_argument(
        "--settings",
        required=True,
        help="JSON object (or a JSON file): datasets, contexts, budgets, gamma_fixed, collapse, "
        "comparison, single_budget; optional gammas {context: [gamma, ...]}",
    )
    parser.add_argument("--cells", required=True, nargs="+", help="cell parquet files the artifact reads")
    parser.add_argument(
        "--drafters",
        help="JSON {label: [model directory, ...]}: the comparison table's drafter sizes, counted from their weights "
        "(several directories are summed as 'a+b', e.g. TriForce's drafter + its middle level)",
    )


def run(args) -> None:
    settings = args.settings
    if args.drafters:
        sizes = drafter_sizes(json_object(args.drafters, "--drafters"))
        settings = json.dumps(with_drafter_sizes(settings_dict(args.settings), sizes))
    for path in build(args.artifact, args.cells, settings, args.out):
        print(path)
