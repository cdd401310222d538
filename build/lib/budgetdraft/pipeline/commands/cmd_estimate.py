"""`python -m budgetdraft estimate`: what a configuration will cost on a device, before it runs
(``budgetdraft.pipeline.estimate``). Torch-free, as the estimate is, but for ``--gpu here``'s probe
(``budgetdraft.pipeline.machine``)."""

from budgetdraft.base.defaults import ENGINE
from budgetdraft.pipeline.commands.flags import add_engine_flag, count
from budgetdraft.pipeline.estimate import DEVICES, HERE, cost_report


def configure_parser(parser) -> None:
    parser.add_argument("--configfile", required=True, help="the pipeline config to estimate (config/*.yaml)")
    parser.add_argument(
        "--gpu",
        default=HERE,
        choices=[HERE, *DEVICES],
        help="the device the run will use: here (this machine, measured by a probe of seconds, cached) or a named one "
        "(constants of that device, partly guessed)",
    )
    parser.add_argument(
        "--parallel", type=count(1), default=None, help="jobs side by side here (default: cores ÷ threads, at most 2)"
    )
    parser.add_argument("--remeasure", action="store_true", help="probe this machine again (--gpu here)")
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="acceptance rate assumed in speculative cells (default: the config's expected_acceptance)",
    )
    add_engine_flag(
        parser,
        default=None,
        help="how decode steps run (budgetdraft.decoding.engine): eager (per-layer host overhead) or graphs (none); "
        f"default: the config's engine, {ENGINE} if it names none",
    )
    parser.add_argument("--target", default="all", help="the snakemake target to estimate")
    parser.add_argument(
        "--cells-per-process",
        type=int,
        default=0,
        help="GPU cells one resident process runs (0: all, one local GPU; profiles/slurm's job groups: 16)",
    )


def run(args) -> None:
    text = cost_report(
        args.configfile,
        args.gpu,
        args.alpha,
        args.engine,
        args.target,
        args.cells_per_process,
        args.parallel or 0,
        args.remeasure,
    )
    print(text, end="")
