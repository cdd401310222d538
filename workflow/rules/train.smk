rule train:
    """One drafter variant: the untrained drafter trained with L_A + lambda_c * L_C (config `training` + overrides).

    No --variant flag: the config's merged --hparams are the whole truth (training.py's built-in variant
    values are the paper's, e.g. single_budget B=1024, which would override a scaled config).
    Training works in results/drafters/{variant}.tmp/ (checkpoints/ there) and renames it when done: a failed
    or interrupted job keeps its checkpoints, and re-running resumes.
    """
    input:
        init="results/models/drafter_untrained",
        targets="results/targets/targets.safetensors",
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
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["training"].get("threads", config["threads"])
    resources:
        gpu=lambda wc: (
            1 if str(config["training"].get("device", "cpu")).startswith("cuda") else 0
        ),
    params:
        out=lambda wc, output: output.model.rsplit("/", 1)[0],
        hparams=lambda wc: variant_hparams(wc.variant),
    shell:
        "python -m budgetdraft train --init {input.init} --targets {input.targets} --out {params.out}"
        " --hparams {params.hparams:q} > {log} 2>&1"


rule train_eagle3:
    """The EAGLE-3 draft head baseline (only when baselines.enabled lists eagle3)."""
    input:
        verifier="results/models/verifier",
        targets="results/targets/targets.safetensors",
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
