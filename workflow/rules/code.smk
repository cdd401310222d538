rule code:
    """The sha256 of every src/ module one stage's command runs (budgetdraft.base.importgraph), one line each: the
    stages' code input. Editing a module rewrites the digests of the stages that run it, and only their jobs rerun;
    each job lists one code file instead of dozens, which Snakemake would re-read for every waiting job at every
    scheduling round.
    """
    input:
        lambda wc: PLAN.code.files(wc.code),
    output:
        "results/code/{code}.sha256",
    log:
        "logs/code/{code}.log",
    wildcard_constraints:
        code="|".join(re.escape(c) for c in PLAN.code.sets),
    localrule: True
    run:
        write_code_digest(input, output[0])
