rule targets:
    """The teacher's token after every prefix of one stage's training sequences: the verifier's greedy choice
    (full cache), or for a base drafter with `teacher: text` the text's own next token (no model runs).
    """
    input:
        verifier="results/models/verifier",
        sequences="results/data/train/{stage}.parquet",
        code=PLAN.code.digest("targets"),
    output:
        "results/targets/{stage}.safetensors",
    log:
        "logs/targets/{stage}.log",
    benchmark:
        "benchmarks/targets/{stage}.tsv"
    wildcard_constraints:
        stage="|".join(PLAN.drafters.training_stages),
    priority: 50  # the training chain is the critical path: before any grid cell
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["training"].get("threads", config["threads"])
    resources:
        gpu=PLAN.jobs.gpu_slots(PLAN.drafters.training_device),
    params:
        prefix_len=lambda wc: PLAN.drafters.training_data(wc.stage)["prefix_len"],
        cont_len=lambda wc: PLAN.drafters.training_data(wc.stage)["cont_len"],
        device=PLAN.drafters.training_device,
        dtype=config["verifier_dtype"],
        teacher=lambda wc: PLAN.base["teacher"] if wc.stage == "base" else "verifier",
    shell:
        "python -m budgetdraft targets --teacher {params.teacher} --verifier {input.verifier}"
        " --sequences {input.sequences}"
        " --prefix-len {params.prefix_len} --cont-len {params.cont_len} --device {params.device}"
        " --dtype {params.dtype} --threads {threads} --out {output} > {log} 2>&1"
