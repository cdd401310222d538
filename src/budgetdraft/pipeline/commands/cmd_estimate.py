"""`python -m budgetdraft estimate`: what a configuration will cost on a device, before it runs
(``budgetdraft.pipeline.estimate``). Torch-free, as the estimate is."""

from budgetdraft.base.defaults import ENGINE
from budgetdraft.pipeline.commands.flags import add_engine_flag
from budgetdraft.pipeline.estimate import DEVICES, cost_report


def configure_parser(parser) -> None:
    parser.add_argument("--configfile", required=True, help="the pipeline config to estimate (config/*.yaml)")
    parser.add_argument("--gpu", default="a100-80g", choices=DEVICES, help="device the run will use")
    parser.add_argument("--alpha", type=float, default=0.3, help="acceptance rate assumed in speculative cells")
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
    text = cost_report(args.configfile, args.gpu, args.alpha, args.engine, args.target, args.cells_per_process)
    print(text, end="")
