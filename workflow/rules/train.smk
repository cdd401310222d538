# config `base_drafter`; without it the exported drafter is the base (the paper's llama-68m)
if PLAN.base:

    rule train_base:
        """The base drafter: the exported drafter trained with L_A alone on short full-cache windows (config
        `base_drafter`), so that it is a working generic drafter before any evaluation, as llama-68m is in the paper.
        SD (sparse/full), TriForce's bottom level and every BudgetDraft variant start from it. One per training
        replicate (config `replicates`), each with its own seed.
        """
        input:
            init="results/models/drafter_untrained",
            targets="results/targets/base.safetensors",
            code=PLAN.code.digest("train"),
        output:
            directory("results/models/drafter_base/r{replicate}"),
        log:
            "logs/models/drafter_base/r{replicate}.log",
        benchmark:
            "benchmarks/models/drafter_base/r{replicate}.tsv"
        wildcard_constraints:
            replicate=r"\d+",
        priority: 50  # the training chain is the critical path: before any grid cell
        conda:
            "../../envs/budgetdraft.yaml"
        threads: config["training"].get("threads", config["threads"])
        resources:
            gpu=PLAN.jobs.gpu_slots(PLAN.drafters.training_device),
        params:
            hparams=lambda wc: PLAN.drafters.base_hparams(wc.replicate),
        shell:
            "python -m budgetdraft train --init {input.init} --targets {input.targets} --out {output}"
            " --hparams {params.hparams:q} --variant drafter_base --replicate {wildcards.replicate} > {log} 2>&1"


rule train:
    """One drafter variant of one training replicate: the replicate's base drafter trained with L_A + lambda_c * L_C
    (config `training` + overrides, seed + replicate).

    A variant is its merged --hparams, nothing else.
    Training works in results/drafters/r{replicate}/{variant}.tmp/ (checkpoints/ there) and renames it when done: a failed
    or interrupted job keeps its checkpoints, and re-running resumes.
    """
    input:
        init=lambda wc: PLAN.drafters.base_drafter_dir(wc.replicate),
        targets="results/targets/budgetdraft.safetensors",
        code=PLAN.code.digest("train"),
    output:
        directory("results/drafters/r{replicate}/{variant}"),
    log:
        "logs/drafters/r{replicate}/{variant}.log",
    benchmark:
        "benchmarks/drafters/r{replicate}/{variant}.tsv"
    wildcard_constraints:
        variant="|".join(re.escape(v) for v in PLAN.labels.trained) or "(?!)",  # no variant trained here: none
        replicate=r"\d+",
    priority: 50  # the training chain is the critical path: before any grid cell
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["training"].get("threads", config["threads"])
    resources:
        gpu=PLAN.jobs.gpu_slots(PLAN.drafters.training_device),
    params:
        hparams=lambda wc: PLAN.drafters.variant_hparams(wc.variant, wc.replicate),
    shell:
        "python -m budgetdraft train --init {input.init} --targets {input.targets} --out {output}"
        " --hparams {params.hparams:q} --variant {wildcards.variant} --replicate {wildcards.replicate} > {log} 2>&1"


rule train_eagle3:
    """The EAGLE-3 draft head baseline (only when baselines.enabled lists eagle3): trained once, not per replicate."""
    input:
        verifier="results/models/verifier",
        targets="results/targets/budgetdraft.safetensors",
        code=PLAN.code.digest("eagle3"),
    output:
        directory("results/drafters/eagle3"),
    log:
        "logs/drafters/eagle3.log",
    benchmark:
        "benchmarks/drafters/eagle3.tsv"
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["threads"]
    resources:
        gpu=PLAN.jobs.gpu_slots(PLAN.drafters.eagle3_training["device"]),
    params:
        hparams=PLAN.drafters.eagle3_hparams(),
    shell:
        "python -m budgetdraft train-eagle3 --verifier {input.verifier} --targets {input.targets}"
        " --out {output} --hparams {params.hparams:q} > {log} 2>&1"


rule interpolate:
    """The drafter of a method of drafter kind `interpolated` (budgetdraft.base.methods; PI, a control the paper did
    not run, config `controls`): the base drafter of a replicate (or the untrained drafter, shared, when no base
    drafter is trained) with its rotary positions interpolated to cover the longest context (`export-model
    --cover`), no training: how much of what BudgetDraft recovers interpolation alone does.
    """
    input:
        base=lambda wc: PLAN.drafters.base_drafter_dir(wc.get("replicate")),
        code=PLAN.code.digest("models"),
    output:
        directory("results/drafters/r{replicate}/{label}"),
    log:
        "logs/drafters/r{replicate}/{label}.log",
    benchmark:
        "benchmarks/drafters/r{replicate}/{label}.tsv"
    wildcard_constraints:
        replicate=r"\d+",
        label="|".join(
            re.escape(label) for label in PLAN.drafters.made_from_base("interpolated")
        )
        or "(?!)",
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        cover=PLAN.drafters.longest_tokens(),
        dtype=PLAN.drafters.export_dtype("drafter"),
    shell:
        "python -m budgetdraft export-model --spec {input.base} --cover {params.cover} --dtype {params.dtype}"
        " --out {output} > {log} 2>&1"


use rule interpolate as interpolate_shared with:
    output:
        directory("results/drafters/{label}"),
    log:
        "logs/drafters/{label}.log",
    benchmark:
        "benchmarks/drafters/{label}.tsv"


rule export_given:
    """A variant given as a checkpoint (config `variants.X.checkpoint`, e.g. the authors' released drafters), not
    trained here: exported once, in the drafter's dtype, refused before anything is written when its vocabulary is
    not the verifier's or its weights are damaged (budgetdraft.decoding.export); measured like a trained variant, as
    one external draw (no training replicate). A local checkpoint's files are its inputs and their sha256 its params
    (a hub one's repository and revision): a checkpoint replaced at the same path is exported and measured again.
    """
    input:
        verifier="results/models/verifier",
        checkpoint=lambda wc: PLAN.drafters.given_files(wc.variant),
        code=PLAN.code.digest("models"),
    output:
        directory("results/drafters/given/{variant}"),
    log:
        "logs/drafters/given/{variant}.log",
    benchmark:
        "benchmarks/drafters/given/{variant}.tsv"
    wildcard_constraints:
        variant="|".join(re.escape(v) for v in PLAN.labels.given) or "(?!)",
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        flags=lambda wc: PLAN.drafters.export_given_flags(wc.variant),
        dtype=PLAN.drafters.export_dtype("drafter"),
        digest=lambda wc: PLAN.drafters.given_digest(wc.variant),
    shell:
        "python -m budgetdraft export-model {params.flags} --dtype {params.dtype} --verifier {input.verifier}"
        " --out {output} > {log} 2>&1"
