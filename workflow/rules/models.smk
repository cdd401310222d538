rule export_model:
    """Materialise the verifier / the untrained drafter once as plain Hugging Face directories, in the dtype each is
    used in (`export_dtype`)."""
    input:
        code=PLAN.code.digest("models"),
    output:
        directory("results/models/{role}"),
    log:
        "logs/models/{role}.log",
    benchmark:
        "benchmarks/models/{role}.tsv"
    wildcard_constraints:
        role="verifier|drafter_untrained",
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        spec=lambda wc: (
            config["verifier"] if wc.role == "verifier" else config["drafter"]
        ),
        dtype=lambda wc: PLAN.drafters.export_dtype(wc.role),
        revision=model_revision_flag,
    shell:
        "python -m budgetdraft export-model --spec {params.spec:q} --dtype {params.dtype} {params.revision}"
        " --out {output} > {log} 2>&1"
