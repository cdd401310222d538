"""`python -m budgetdraft <command> ...`: one sub-command per pipeline stage (`budgetdraft.pipeline.commands`), offered
first to the warm process of a pipeline run (`budgetdraft.pipeline.warm`), else run in this process."""

import sys

from budgetdraft.pipeline.commands import COMMANDS, WARM_COMMANDS, build_parser, run


def main(argv: list[str] | None = None) -> None:
    """Run ``python -m budgetdraft ARGV``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        build_parser().parse_args(argv)  # prints usage / the unknown-command error and exits
        return
    if argv[0] in WARM_COMMANDS:
        from budgetdraft.pipeline.warm import delegate

        status = delegate(argv)
        if status is not None:
            sys.exit(status)
    run(argv)
