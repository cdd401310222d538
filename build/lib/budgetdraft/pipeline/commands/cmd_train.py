"""`python -m budgetdraft train`: train a drafter with L_A + λ·L_C (``budgetdraft.training.train``), resumable from
its last checkpoint."""

from budgetdraft.base.jsonio import json_object
from budgetdraft.training.hparams import TrainingHparams
from budgetdraft.training.train import train


def configure_parser(parser) -> None:
    parser.add_argument("--init", required=True, help="initial drafter: model spec or Hugging Face directory")
    parser.add_argument("--targets", required=True, help="teacher targets .safetensors (budgetdraft targets)")
    parser.add_argument("--out", required=True, help="output directory (final Hugging Face checkpoint)")
    parser.add_argument(
        "--hparams", default=None, help=f"JSON object or file with any of: {', '.join(TrainingHparams().keys())}"
    )
    parser.add_argument("--variant", default=None, help="the variant trained, named in error lines only")
    parser.add_argument("--replicate", default=None, help="the training replicate, named in error lines only")


def run_label(args) -> str:
    """What error lines call this run: its --variant and --replicate (the pipeline's names; labels only, no part of
    the run identity), else "training"."""
    parts = [f"variant {args.variant}"] if args.variant else []
    parts += [f"replicate {args.replicate}"] if args.replicate is not None else []
    return ", ".join(parts) or "training"


def run(args) -> None:
    out = train(args.init, args.targets, args.out, json_object(args.hparams, "--hparams"), label=run_label(args))
    print(out)
