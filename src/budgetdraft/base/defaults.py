"""Defaults that several entry points share, each in one place: the config schema's defaults, the command-line
parsers and the hyper-parameters read these (tests/test_defaults.py checks the schema against them)."""

# Defaults that several entry points share, each in one place: the config schema's defaults, the command-line
# parsers (eval-cell, decode, prefill, targets) and the hparams below read these (tests/test_defaults.py checks
# the schema against them).
CHUNK_SIZE = 8  # s: prefix tokens per chunk of the sparse cache (the paper's)


SCORE_WINDOW = 32  # last prefill queries whose attention scores the prefix chunks (TopKChunks)


THREADS = 1  # torch CPU threads of one job: Snakemake runs jobs side by side, each its share of the cores
