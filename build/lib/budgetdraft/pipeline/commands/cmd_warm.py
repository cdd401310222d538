"""`python -m budgetdraft warm`: serve pre-imported forks (or, ``--resident``, this process) to the commands of a
pipeline run (``budgetdraft.pipeline.warm``), each run as `python -m budgetdraft` runs it (``cli.run``)."""

from budgetdraft.pipeline import cli
from budgetdraft.pipeline.commands.flags import count, seconds
from budgetdraft.pipeline.warm import MAX_PID, RESIDENT_COMMANDS, serve


def configure_parser(parser) -> None:
    parser.add_argument("--socket", required=True, help="Unix socket path to serve on")
    parser.add_argument(
        "--idle",
        type=seconds,
        default=0,
        help="also exit after this many seconds without a request (0: only when the parent exits)",
    )
    parser.add_argument(
        "--resident",
        action="store_true",
        help=f"fork nothing: run {' and '.join(RESIDENT_COMMANDS)} here and keep their models loaded (GPU)",
    )
    parser.add_argument(
        "--owner", type=count(1, MAX_PID), help="exit when this process exits (default: the parent process)"
    )


def run(args) -> None:
    serve(args.socket, cli.run, args.idle, args.resident, args.owner)
