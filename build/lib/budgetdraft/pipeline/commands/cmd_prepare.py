"""`python -m budgetdraft prepare prompts|train`: the tokenised prompts of one dataset x context, or the training
sequences disjoint from them (``budgetdraft.training.data``)."""

from budgetdraft.pipeline.commands.flags import count
from budgetdraft.training.data import EVAL_SOURCES, TRAIN_SOURCES, prepare_prompts, prepare_train


def configure_parser(parser) -> None:
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("prompts", help="evaluation prompts for one dataset x context")
    p.add_argument("--dataset", required=True, help="config key of the dataset, e.g. gs")
    p.add_argument("--source", required=True, help=f"one of {', '.join(EVAL_SOURCES)}")
    p.add_argument("--context", required=True, help="context label, e.g. 4K")
    p.add_argument("--length", type=count(1), required=True, help="prompt length in tokens")
    p.add_argument("--select-length", type=int, nargs="*", help="also require documents to fit these lengths")
    p.add_argument("--samples", type=count(1), required=True)
    p.add_argument("--path", default="", help="the authors' prompts file or data/ folder (sources authors_*)")
    t = sub.add_parser("train", help="training sequences, disjoint from the evaluation prompts")
    t.add_argument("--source", required=True, help=f"one of {', '.join(TRAIN_SOURCES)}")
    t.add_argument("--length", type=count(1), required=True, help="P + C tokens per sequence")
    t.add_argument("--sequences", type=count(1), required=True)
    t.add_argument("--exclude", nargs="*", default=[], help="prompts parquet files whose documents must not be used")
    for q in (p, t):
        q.add_argument("--tokenizer", required=True, help="verifier directory or model spec")
        q.add_argument("--seed", type=int, default=0, help="order in which documents are considered")
        q.add_argument("--revision", default="", help="hub commit of a hub source's repository (`revisions:`)")
        q.add_argument("--out", required=True)


def run(args) -> None:
    shared = {"tokenizer": args.tokenizer, "seed": args.seed, "revision": args.revision, "out": args.out}  # both take
    if args.what == "prompts":
        prepare_prompts(
            dataset=args.dataset,
            source=args.source,
            context=args.context,
            length=args.length,
            select_length=args.select_length,
            samples=args.samples,
            path=args.path,
            **shared,
        )
    else:
        prepare_train(source=args.source, length=args.length, sequences=args.sequences, exclude=args.exclude, **shared)
