"""`python -m budgetdraft paper-diff`: every value the paper reports beside this run's, within the authors'
tolerance or not (``budgetdraft.report.paperdiff.build``)."""

from pathlib import Path

from budgetdraft.report.paperdiff import build


def configure_parser(parser) -> None:
    parser.add_argument("--tables", nargs="+", required=True, help="this run's results/tables/*.tex")
    parser.add_argument(
        "--settings", required=True, help="the run's settings and measurement (results/settings/paper_diff.json)"
    )
    parser.add_argument(
        "--cells", nargs="*", default=[], help="AR cells and SD / BudgetDraft cells at the shortest context"
    )
    parser.add_argument("--drafters", nargs="*", default=[], help="trained drafter directories (their loss logs)")
    parser.add_argument("--out", required=True, type=Path, help="the report (.md); its .csv goes beside it")


def run(args) -> None:
    for path in build(args.tables, args.settings, args.cells, args.drafters, args.out):
        print(path)
