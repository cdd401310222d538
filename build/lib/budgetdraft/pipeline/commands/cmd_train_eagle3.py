"""`python -m budgetdraft train-eagle3`: train the EAGLE-3 draft head baseline
(``budgetdraft.training.eagle3_head.train_head``)."""

from budgetdraft.base.jsonio import json_object
from budgetdraft.training.eagle3_head import train_head
from budgetdraft.training.hparams import Eagle3Hparams


def configure_parser(parser) -> None:
    parser.add_argument("--verifier", required=True, help="verifier model spec or directory")
    parser.add_argument("--targets", required=True, help="targets.safetensors (input_ids, targets)")
    parser.add_argument("--out", required=True, help="output directory (head.safetensors + eagle3.json)")
    parser.add_argument(
        "--hparams", default="", help="JSON object (inline or a file path): " + ", ".join(Eagle3Hparams().keys())
    )


def run(args) -> None:
    train_head(args.verifier, args.targets, args.out, json_object(args.hparams, "--hparams"))
