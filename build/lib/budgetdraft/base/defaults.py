"""Defaults that several entry points share, each in one place: the config schema's defaults, the command-line
parsers and the hyper-parameters read these (tests/test_defaults.py checks the schema against them)."""

import math

# Defaults that several entry points share, each in one place: the config schema's defaults, the command-line
# parsers (eval-cell, decode, prefill, targets) and the hparams below read these (tests/test_defaults.py checks
# the schema against them).
CHUNK_SIZE = 8  # s: prefix tokens per chunk of the sparse cache (the paper's)


SCORE_WINDOW = 32  # last prefill queries whose attention scores the prefix chunks (TopKChunks)


THREADS = 1  # torch CPU threads of one job: Snakemake runs jobs side by side, each its share of the cores


# torch's CPU allocator puts every tensor of 2 MB or more in transparent huge pages when THP_MEM_ALLOC_ENABLE=1
# (c10's alloc_cpu; the kernel's THP mode "madvise" suffices): a model's weights then need 1/512 of the page-table
# entries. The warm process (budgetdraft.pipeline.warm) forks a keeper and a child per job, and each fork copies
# and each exit tears down the page tables: with huge pages config/ci.yaml's `snakemake all` spends 8-20 % fewer
# CPU-seconds, and a decode step is 6-9 % faster (fewer TLB misses); tokens, acceptance and trained weights are
# the same to the bit (bench/README.md, "Huge pages"). `python -m budgetdraft` sets it unless the environment has
# it (0 turns it off), and so do the machine probe's processes and tests/conftest.py; torch reads it when it is
# loaded, so it is set before torch is imported (tests/test_huge_pages.py).
# glibc's malloc does the same for its own heap with the tunable glibc.malloc.hugetlb=1 (glibc 2.35+; older ones and
# other C libraries ignore it): a tensor under 2 MB (a 576 x 576 projection, oneDNN's packed copy of it) and
# Python's objects come from that heap, in 4 KB pages without it. glibc reads it when a process starts, so it acts
# in the processes started with this environment: the warm process that Snakemake starts (rules/warm.smk) or a
# cell does (`warm.autostart`), whose forks then copy and tear down fewer page tables: a job forked from a warm
# process holding the default's models spent 0.1 s in the kernel instead of 0.3 (bench/README.md, "Huge pages").
CPU_ALLOCATOR_ENV = {"THP_MEM_ALLOC_ENABLE": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def with_cpu_allocator(environ) -> None:
    """Give ``environ`` (``os.environ`` before torch is imported, or a child process's environment) each variable of
    ``CPU_ALLOCATOR_ENV`` it does not already set."""
    for name, value in CPU_ALLOCATOR_ENV.items():
        environ.setdefault(name, value)


DEVICE = "cpu"  # torch device of a job (config `device`, a command's --device)
DTYPE = "float32"  # dtype models are loaded in (config `verifier_dtype` / `drafter_dtype`, a command's --*dtype)


# How the decode steps run (budgetdraft.decoding.engine): op by op, or captured as CUDA graphs.
EAGER, GRAPHS = "eager", "graphs"
ENGINES = (EAGER, GRAPHS)
ENGINE = EAGER  # the default engine (the paper's kind of baseline)


POLICY = "topk_chunks"  # the default sparse policy of a drafter's prefix cache (the paper's TopKChunks)
# The sparse policies the workflow's `policies` target compares, one line each (config `policies.names`).
COMPARED_POLICIES = ("topk_chunks", "streaming", "snapkv", "verifier_guided")


SEEDS = 2**32  # a seed is an integer in [0, 2^32 - 1]: the config schema's `seed`s, decode --seed, numpy's seeding


GAMMA = 5  # the default draft length γ (config `gamma_fixed` and `policies.gamma`, decode --gamma, hf.generate)


PREFILL_RUNS = 2  # timed runs of a shared verifier prefill (`budgetdraft prefill --repeats`); their median is charged


# TriForce's settings (budgetdraft.decoding.baselines.triforce; config `baselines.triforce`, a cell's --extra): a
# cell's own chunk size wins over this one.
TRIFORCE_DEFAULTS = {
    "retrieval_budget": 256,  # verifier retrieval-cache prefix tokens
    "streaming_budget": 16,  # small drafter StreamingLLM cache tokens
    "sinks": 4,  # attention-sink tokens within streaming_budget
    "chunk_size": CHUNK_SIZE,  # retrieval chunk size (tokens)
    "gamma_inner": 1,  # small-drafter tokens per retrieval verify
}


# A fixed-shape cache's capacity is rounded up to a multiple of SLOT_ROUNDING slots (budgetdraft.decoding.engine): the
# mask's last dimension stays aligned for the memory-efficient kernel, and prompts of one context share one shape.
SLOT_ROUNDING = 16


def rounded_capacity(tokens: float) -> int:
    """The slots of a fixed-shape cache that holds ``tokens`` (the cost estimate passes fractional counts)."""
    return -(-math.ceil(tokens) // SLOT_ROUNDING) * SLOT_ROUNDING
