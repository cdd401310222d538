"""`python -m budgetdraft draft-vocab`: the most frequent tokens of training data, a reduced draft vocabulary
(``budgetdraft.decoding.draftvocab``)."""

from pathlib import Path

from budgetdraft.decoding.draftvocab import frequent_tokens, save_vocab


def configure_parser(parser) -> None:
    parser.add_argument("--data", required=True, nargs="+", type=Path, help="parquet files with an input_ids column")
    parser.add_argument("--size", required=True, type=int, help="tokens in the draft vocabulary")
    parser.add_argument("--out", required=True, type=Path, help=".safetensors file (tensor 'ids')")


def run(args) -> None:
    import pandas as pd

    sequences = [ids for path in args.data for ids in pd.read_parquet(path, columns=["input_ids"])["input_ids"]]
    ids = frequent_tokens(sequences, args.size)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_vocab(ids, args.out)
    print(f"{args.out}: {len(ids)} tokens from {sum(len(s) for s in sequences):,} tokens of {len(sequences)} rows")
