rule targets:
    """The verifier's greedy tokens after every prefix of the training sequences (full cache), computed once."""
    input:
        verifier="results/models/verifier",
        sequences="results/data/train.parquet",
        code=SRC["targets"],
    output:
        "results/targets/targets.safetensors",
    log:
        "logs/targets/targets.log",
    benchmark:
        "benchmarks/targets/targets.tsv"
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["threads"]
    resources:
        gpu=lambda wc: (
            1 if str(config["training"].get("device", "cpu")).startswith("cuda") else 0
        ),
    params:
        prefix_len=config["training_data"]["prefix_len"],
        cont_len=config["training_data"]["cont_len"],
        device=config["training"].get("device", config["device"]),
        dtype=config["verifier_dtype"],
    shell:
        "python -m budgetdraft targets --verifier {input.verifier} --sequences {input.sequences}"
        " --prefix-len {params.prefix_len} --cont-len {params.cont_len} --device {params.device}"
        " --dtype {params.dtype} --threads {threads} --out {output} > {log} 2>&1"
