# config `base_drafter`; without it the exported drafter is the base (the paper's llama-68m)
if BASE:

    rule train_base:
        """The base drafter: the exported drafter trained with L_A alone on short full-cache windows (config
        `base_drafter`), so that it is a working generic drafter before any evaluation, as llama-68m is in the paper.
        SD (sparse/full), TriForce's bottom level and every BudgetDraft variant start from it.
        """
        input:
            init="results/models/drafter_untrained",
            targets="results/targets/base.safetensors",
            code=SRC["train"],
        output:
            model="results/models/drafter_base/model.safetensors",
            loss="results/models/drafter_base/loss_log.csv",
        log:
            "logs/models/drafter_base.log",
        benchmark:
            "benchmarks/models/drafter_base.tsv"
        priority: 50  # the training chain is the critical path: before any grid cell
        conda:
            "../../envs/budgetdraft.yaml"
        threads: config["training"].get("threads", config["threads"])
        resources:
            gpu=train_gpu,
        params:
            out=lambda wc, output: output.model.rsplit("/", 1)[0],
            hparams=base_hparams(),
        shell:
            "python -m budgetdraft train --init {input.init} --targets {input.targets} --out {params.out}"
            " --hparams {params.hparams:q} > {log} 2>&1"


rule train:
    """One drafter variant: the base drafter trained with L_A + lambda_c * L_C (config `training` + overrides).

    No --variant flag: the config's merged --hparams are the whole truth (training.py's built-in variant
    values are the paper's, e.g. single_budget B=1024, which would override a scaled config).
    Training works in results/drafters/{variant}.tmp/ (checkpoints/ there) and renames it when done: a failed
    or interrupted job keeps its checkpoints, and re-running resumes.
    """
    input:
        init=base_drafter_file(),
        targets="results/targets/budgetdraft.safetensors",
        code=SRC["train"],
    output:
        model="results/drafters/{variant}/model.safetensors",
        loss="results/drafters/{variant}/loss_log.csv",
    log:
        "logs/drafters/{variant}.log",
    benchmark:
        "benchmarks/drafters/{variant}.tsv"
    wildcard_constraints:
        variant="|".join(re.escape(v) for v in VARIANTS),
    priority: 50  # the training chain is the critical path: before any grid cell
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["training"].get("threads", config["threads"])
    resources:
        gpu=train_gpu,
    params:
        init=lambda wc, input: drafter_flag_dir(input.init),
        out=lambda wc, output: output.model.rsplit("/", 1)[0],
        hparams=lambda wc: variant_hparams(wc.variant),
    shell:
        "python -m budgetdraft train --init {params.init} --targets {input.targets} --out {params.out}"
        " --hparams {params.hparams:q} > {log} 2>&1"


rule train_eagle3:
    """The EAGLE-3 draft head baseline (only when baselines.enabled lists eagle3)."""
    input:
        verifier="results/models/verifier",
        targets="results/targets/budgetdraft.safetensors",
        code=SRC["eagle3"],
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
        gpu=gpu,
    params:
        hparams=json.dumps(
            config["baselines"].get("eagle3", {}).get("training", {}), sort_keys=True
        ),
    shell:
        "python -m budgetdraft train-eagle3 --verifier {input.verifier} --targets {input.targets}"
        " --out {output} --hparams {params.hparams:q} > {log} 2>&1"
