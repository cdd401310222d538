rule prepare_prompts:
    """Prompts of exactly the context's length for one dataset (the same documents at every context); the authors'
    own prompts file, when a dataset's source is one (`authors_*`), is an input."""
    input:
        verifier="results/models/verifier",
        code=PLAN.code.digest("data"),
        authors=lambda wc: PLAN.jobs.prompts_file(wc.dataset),
    output:
        "results/data/prompts/{dataset}/{context}.parquet",
    log:
        "logs/data/prompts/{dataset}/{context}.log",
    priority: 50  # prepare_train waits for every prompts file (it excludes their documents)
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        source=lambda wc: config["datasets"][wc.dataset]["source"],
        length=lambda wc: config["contexts"][wc.context],
        select=" ".join(str(n) for n in config["contexts"].values()),
        samples=lambda wc: PLAN.settings.samples(wc.dataset),
        seed=config["seed"],
        revision=lambda wc: data_revision_flag(config["datasets"][wc.dataset]["source"]),
        path=lambda wc, input: (
            f" --path {shlex.quote(input.authors[0])}" if input.authors else ""
        ),
    shell:
        "python -m budgetdraft prepare prompts --dataset {wildcards.dataset} --source {params.source}"
        " --context {wildcards.context} --length {params.length} --select-length {params.select}"
        " --samples {params.samples} --seed {params.seed} --tokenizer {input.verifier}"
        " {params.revision}{params.path} --out {output} > {log} 2>&1"


rule prepare_train:
    """P + C token training sequences of one training stage (base drafter / BudgetDraft), from documents no
    evaluation prompt uses (asserted)."""
    input:
        verifier="results/models/verifier",
        prompts=expand(
            "results/data/prompts/{dataset}/{context}.parquet",
            dataset=PLAN.datasets,
            context=PLAN.contexts,
        ),
        code=PLAN.code.digest("data"),
    output:
        "results/data/train/{stage}.parquet",
    log:
        "logs/data/train/{stage}.log",
    wildcard_constraints:
        stage="|".join(PLAN.drafters.training_stages),
    priority: 50  # the training chain is the critical path: before any grid cell
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        source=lambda wc: PLAN.drafters.training_data(wc.stage)["source"],
        length=lambda wc: PLAN.drafters.training_data(wc.stage)["prefix_len"]
        + PLAN.drafters.training_data(wc.stage)["cont_len"],
        sequences=lambda wc: PLAN.drafters.training_data(wc.stage)["sequences"],
        seed=config["seed"],
        revision=lambda wc: data_revision_flag(
            PLAN.drafters.training_data(wc.stage)["source"]
        ),
    shell:
        "python -m budgetdraft prepare train --source {params.source} --length {params.length}"
        " --sequences {params.sequences} --seed {params.seed} --tokenizer {input.verifier}"
        " --exclude {input.prompts} {params.revision} --out {output} > {log} 2>&1"
