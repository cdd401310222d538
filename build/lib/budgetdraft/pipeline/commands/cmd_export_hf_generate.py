"""`python -m budgetdraft export-hf-generate`: write ``custom_generate/`` beside a trained drafter, so that it is
published with its loop (``budgetdraft.decoding.hf_generate.export_generate``)."""

from budgetdraft.decoding.hf_generate import export_generate


def configure_parser(parser) -> None:
    parser.add_argument("--out", required=True, help="the trained drafter's directory (a Hugging Face checkpoint)")
    parser.add_argument(
        "--drafter-id", default=None, help="the hub id it will be published as (default: --out's absolute path)"
    )


def run(args) -> None:
    folder = export_generate(args.out, args.drafter_id)
    print(f"wrote {folder}/generate.py and requirements.txt")
