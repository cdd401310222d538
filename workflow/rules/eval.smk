rule verifier_prefill:
    """The verifier's prefill of every prompt of one dataset x context, computed and timed once for all its cells
    (`share_verifier_prefill`): each cell copies the cache in and is charged the recorded seconds.
    """
    input:
        verifier="results/models/verifier",
        prompts="results/data/prompts/{dataset}/{context}.parquet",
        code=PLAN.code.digest("prefill"),
        setaside=lambda wc: set_aside_marker(
            f"results/prefill/{wc.dataset}/{wc.context}.safetensors"
        ),
    output:
        "results/prefill/{dataset}/{context}.safetensors",
    log:
        "logs/prefill/{dataset}/{context}.log",
    benchmark:
        "benchmarks/prefill/{dataset}/{context}.tsv"
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["threads"]
    resources:
        gpu=PLAN.jobs.gpu_slots(config["device"]),
    params:
        device=config["device"],
        dtype=config["verifier_dtype"],
        runs=defaults.PREFILL_RUNS,
    shell:
        "python -m budgetdraft prefill --verifier {input.verifier} --prompts {input.prompts} --repeats {params.runs}"
        " --device {params.device} --dtype {params.dtype} --threads {threads} --out {output} > {log} 2>&1"


rule eval_cell:
    """One grid cell = (label, dataset, context, budget B, draft length γ) of a drafter trained once or not at all
    (AR cells are B0_g0); `eval_replicate_cell` below is the same for one training replicate of a trained drafter.

    The command writes its parquet atomically: a failed cell leaves no file and, with keep-going, stops nothing.
    """
    input:
        unpack(cell_inputs),
    output:
        "results/cells/{label}/{dataset}/{context}/B{budget}_g{gamma}.parquet",
    log:
        "logs/cells/{label}/{dataset}/{context}/B{budget}_g{gamma}.log",
    benchmark:
        "benchmarks/cells/{label}/{dataset}/{context}/B{budget}_g{gamma}.tsv"
    wildcard_constraints:
        **PLAN.cells.cell_wildcards(replicated=False),
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["threads"]
    resources:
        gpu=PLAN.jobs.gpu_slots(config["device"]),
    params:
        # every flag but --out, rendered from the cell's CellSpec (the plan's), on the threads Snakemake gives the job
        flags=lambda wc, threads: PLAN.jobs.eval_cell_flags(cell_spec(wc, threads)),
    shell:
        "python -m budgetdraft eval-cell {params.flags} --out {output} > {log} 2>&1"


use rule eval_cell as eval_replicate_cell with:
    output:
        "results/cells/{label}/r{replicate}/{dataset}/{context}/B{budget}_g{gamma}.parquet",
    log:
        "logs/cells/{label}/r{replicate}/{dataset}/{context}/B{budget}_g{gamma}.log",
    benchmark:
        "benchmarks/cells/{label}/r{replicate}/{dataset}/{context}/B{budget}_g{gamma}.tsv"
    wildcard_constraints:
        **PLAN.cells.cell_wildcards(replicated=True),


rule positions_targets:
    """The verifier's greedy next token at every position of the longest context's prompts, once for every
    replicate's positional profile (rule positions): the 30-layer verifier's forward with logits at every position is
    most of the profile's work.
    """
    input:
        verifier="results/models/verifier",
        prompts=expand(
            "results/data/prompts/{dataset}/{context}.parquet",
            dataset=PLAN.datasets,
            context=PLAN.longest_context,
        ),
        code=PLAN.code.digest("positions"),
        setaside=lambda wc: set_aside_marker("results/positions/verifier.parquet"),
    output:
        "results/positions/verifier.parquet",
    log:
        "logs/positions/verifier.log",
    benchmark:
        "benchmarks/positions/verifier.tsv"
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["threads"]
    resources:
        gpu=PLAN.jobs.gpu_slots(config["device"]),
    params:
        datasets=" ".join(PLAN.datasets),
        device=config["device"],
        dtype=config["verifier_dtype"],
    shell:
        "python -m budgetdraft positions --verifier {input.verifier} --prompts {input.prompts}"
        " --datasets {params.datasets} --device {params.device} --verifier-dtype {params.dtype}"
        " --threads {threads} --out {output} > {log} 2>&1"


rule positions:
    """The positional profile of one training replicate: each drafter's teacher-forced top-1 agreement with the
    verifier's next tokens (rule positions_targets) by position bucket (buckets of the base drafter's native range),
    full cache, real positions (`budgetdraft positions`); the claims report's section and figure read it.
    """
    input:
        targets="results/positions/verifier.parquet",
        prompts=expand(
            "results/data/prompts/{dataset}/{context}.parquet",
            dataset=PLAN.datasets,
            context=PLAN.longest_context,
        ),
        drafters=lambda wc: list(PLAN.drafters.profiled(wc.replicate).values()),
        code=PLAN.code.digest("positions"),
        setaside=lambda wc: set_aside_marker(
            f"results/positions/r{wc.replicate}.parquet"
        ),
    output:
        "results/positions/r{replicate}.parquet",
    log:
        "logs/positions/r{replicate}.log",
    benchmark:
        "benchmarks/positions/r{replicate}.tsv"
    wildcard_constraints:
        replicate=r"\d+",
    conda:
        "../../envs/budgetdraft.yaml"
    threads: config["threads"]
    resources:
        gpu=PLAN.jobs.gpu_slots(config["device"]),
    params:
        drafters=lambda wc: " ".join(
            f"--drafter {shlex.quote(f'{label}={path}')}"
            for label, path in PLAN.drafters.profiled(wc.replicate).items()
        ),
        datasets=" ".join(PLAN.datasets),
        device=config["device"],
        drafter_dtype=config["drafter_dtype"],
    shell:
        "python -m budgetdraft positions --targets {input.targets} --prompts {input.prompts}"
        " --datasets {params.datasets} {params.drafters} --replicate {wildcards.replicate}"
        " --device {params.device} --drafter-dtype {params.drafter_dtype}"
        " --threads {threads} --out {output} > {log} 2>&1"
