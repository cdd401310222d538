"""`python -m budgetdraft export-model`: materialise a model spec as a self-contained Hugging Face directory
(``budgetdraft.decoding.export``)."""

from budgetdraft.base.defaults import DTYPE
from budgetdraft.decoding.export import export
from budgetdraft.decoding.loading import DTYPES


def configure_parser(parser) -> None:
    parser.add_argument("--spec", required=True, help="model spec (embedded:..., hub id or directory)")
    parser.add_argument("--out", required=True, help="output Hugging Face directory")
    parser.add_argument("--dtype", default=DTYPE, choices=DTYPES, help="dtype the weights are stored in")
    parser.add_argument("--revision", default="", help="hub commit to read a hub id at (config `revisions:`)")
    parser.add_argument(
        "--subfolder",
        default="",
        help="the model's folder inside the hub repository or directory (a relative path inside it)",
    )
    parser.add_argument(
        "--verifier",
        help="a verifier directory whose vocabulary the model must share (a drafter given as a checkpoint)",
    )
    parser.add_argument(
        "--cover",
        type=int,
        default=None,
        metavar="N",
        help="position interpolation: rescale the rotary positions (linearly) so that N positions span the model's "
        "native range (its max_position_embeddings); the weights are unchanged",
    )


def run(args) -> None:
    print(export(args.spec, args.out, args.dtype, args.revision, args.cover, args.subfolder, args.verifier))
