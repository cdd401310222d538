"""`python -m budgetdraft claims`: which of the paper's findings hold in this run, with bootstrap intervals
(``budgetdraft.report.claims.build``)."""

from pathlib import Path

from budgetdraft.report.claims import build


def configure_parser(parser) -> None:
    parser.add_argument(
        "--settings",
        required=True,
        help="JSON object (or a JSON file), as for `budgetdraft paper`; optional variants {label: {lambda_c, budgets}}",
    )
    parser.add_argument("--cells", required=True, nargs="+", help="cell parquet files")
    parser.add_argument("--out", required=True, type=Path, help="claims .md; the .json goes next to it")
    parser.add_argument("--positions", nargs="*", default=[], help="positional profile files (`budgetdraft positions`)")
    parser.add_argument(
        "--positions-figure", type=Path, help="draw the positional profile here (.pdf, and .png beside)"
    )


def run(args) -> None:
    for path in build(
        args.cells, args.settings, args.out, profile=args.positions, profile_figure=args.positions_figure
    ):
        print(path)
