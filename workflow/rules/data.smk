rule prepare_prompts:
    """Prompts of exactly the context's length for one dataset (the same documents at every context)."""
    input:
        verifier="results/models/verifier",
        code=SRC["data"],
    output:
        "results/data/prompts/{dataset}/{context}.parquet",
    log:
        "logs/data/prompts/{dataset}/{context}.log",
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        source=lambda wc: config["datasets"][wc.dataset]["source"],
        length=lambda wc: config["contexts"][wc.context],
        select=" ".join(str(n) for n in config["contexts"].values()),
        samples=lambda wc: samples(wc.dataset),
        seed=config["seed"],
    shell:
        "python -m budgetdraft prepare prompts --dataset {wildcards.dataset} --source {params.source}"
        " --context {wildcards.context} --length {params.length} --select-length {params.select}"
        " --samples {params.samples} --seed {params.seed} --tokenizer {input.verifier}"
        " --out {output} > {log} 2>&1"


rule prepare_train:
    """P + C token training sequences from documents no evaluation prompt uses (asserted)."""
    input:
        verifier="results/models/verifier",
        prompts=expand(
            "results/data/prompts/{dataset}/{context}.parquet",
            dataset=DATASETS,
            context=CONTEXTS,
        ),
        code=SRC["data"],
    output:
        "results/data/train.parquet",
    log:
        "logs/data/train.log",
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        source=config["training_data"]["source"],
        length=config["training_data"]["prefix_len"]
        + config["training_data"]["cont_len"],
        sequences=config["training_data"]["sequences"],
        seed=config["seed"],
    shell:
        "python -m budgetdraft prepare train --source {params.source} --length {params.length}"
        " --sequences {params.sequences} --seed {params.seed} --tokenizer {input.verifier}"
        " --exclude {input.prompts} --out {output} > {log} 2>&1"
