# What `snakemake --report report.html` shows besides the figures (workflow/report/): each table rendered from its
# .tex, the cells behind each artifact, results/claims.md (also the report's first page), the configuration and
# the runtimes. Pages are derived from the files the rules write (workflow/report/render.py), never typed in.
# Every rule here is a local rule: on a cluster (docs/slurm.md) it runs in the submitting Snakemake, seconds of
# reading finished files, instead of waiting in the queue for a job of its own.
RENDER = "workflow/report/render.py"
REPORT_PAGES = [
    "results/report/configuration.html",
    "results/report/runtimes.html",
]


# the labels of an artifact's entries in the report (a table of them per category), by table key or figure stem,
# from each artifact's declaration (budgetdraft.report.artifacts)
REPORT_LABELS = {
    a.stem or key: {"artifact": a.stem or key, "paper": a.paper}
    for key, a in PLAN.cells.artifacts.items()
}
REPORT_LABELS["claims"] = {"artifact": "claims", "paper": "findings F1-F8"}
# {stage: the benchmark files of the jobs `all` runs}, from each rule's own `benchmark:` pattern; read by the
# runtimes page, and computed only when rule run_summary is planned
STAGE_BENCHMARKS = {
    "export_model": lambda: expand(
        rules.export_model.benchmark, role=["verifier", "drafter_untrained"]
    ),
    "targets": lambda: expand(
        rules.targets.benchmark, stage=PLAN.drafters.training_stages
    ),
    "train_base": lambda: (
        expand(rules.train_base.benchmark, replicate=PLAN.replicates)
        if PLAN.base
        else []
    ),
    "train": lambda: expand(
        rules.train.benchmark, replicate=PLAN.replicates, variant=PLAN.labels.variants
    ),
    "train_eagle3": lambda: (
        [str(rules.train_eagle3.benchmark)]
        if methods.EAGLE3 in PLAN.labels.baselines
        else []
    ),
    "verifier_prefill": lambda: (
        expand(
            rules.verifier_prefill.benchmark,
            dataset=PLAN.datasets,
            context=PLAN.contexts,
        )
        if config["share_verifier_prefill"]
        else []
    ),
    "eval (cells)": lambda: [
        str(r.benchmark.apply_wildcards(r.get_wildcards(path)))
        for path in PLAN.cells.all_cells()
        for r in (rules.eval_replicate_cell.rule, rules.eval_cell.rule)
        if r.is_producer(path)
    ],
}


rule settings:
    """What one artifact (or the claims) lays out where, as a file its job reads: never in a report item's params,
    which Snakemake's report embeds verbatim inside an inline <script> (a name holding </script> would run there).
    Here in params, so that a change of the settings reruns this job and so the artifact's.
    """
    input:
        setaside=lambda wc: set_aside_marker(f"results/settings/{wc.name}.json"),
    output:
        "results/settings/{name}.json",
    log:
        "logs/settings/{name}.log",
    wildcard_constraints:
        name="|".join(
            [
                *PLAN.cells.all_tables,
                *PLAN.cells.all_figures.values(),
                "claims",
                "paper_diff",
            ]
        ),
    localrule: True
    params:
        settings=lambda wc: PLAN.settings.artifact_settings(wc.name),
    run:
        Path(output[0]).write_text(params.settings, encoding="utf-8")


rule table:
    """One LaTeX table of the paper from its cells (formatting changes rerun only this rule, never the grid)."""
    input:
        cells=lambda wc: PLAN.cells.artifact_cells(wc.artifact),
        settings="results/settings/{artifact}.json",
        drafters=artifact_drafter_dirs,
        code=PLAN.code.digest("paper"),
        render=RENDER,
    output:
        tex=report(
            "results/tables/{artifact}.tex",
            caption="../report/table.rst",
            category="Tables",
            subcategory="LaTeX source",
            labels=lambda wc: REPORT_LABELS[wc.artifact],
        ),
        sources="results/tables/{artifact}.sources.json",  # provenance: cells + settings by sha256, see `trace_file`
        html=report(
            "results/tables/{artifact}.html",
            caption="../report/table.rst",
            category="Tables",
            subcategory="Rendered",
            labels=lambda wc: REPORT_LABELS[wc.artifact],
        ),
        cells=report(
            "results/report/cells/{artifact}.html",
            caption="../report/cells.rst",
            category="Cells",
            labels=lambda wc: REPORT_LABELS[wc.artifact],
        ),
    log:
        "logs/tables/{artifact}.log",
    wildcard_constraints:
        artifact="|".join(PLAN.cells.all_tables),
    localrule: True  # see the top of this file
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        drafters=drafters_flag,
        name=lambda wc: f"{REPORT_LABELS[wc.artifact]['paper']} ({wc.artifact})",
    shell:
        "python -m budgetdraft paper --artifact {wildcards.artifact} --out {output.tex}"
        " --settings {input.settings} {params.drafters} --cells {input.cells} > {log} 2>&1; "
        "python {input.render} table {output.tex} {output.html} --name {params.name:q} >> {log} 2>&1; "
        "python {input.render} cells {output.cells} --title {params.name:q} --sources {output.sources} >> {log} 2>&1"


rule figure:
    """One figure (.pdf for LaTeX, .png next to it), captioned in the Snakemake report: the paper's, and the
    extra ones of their own targets (`policies`)."""
    input:
        cells=lambda wc: PLAN.cells.artifact_cells(PLAN.cells.all_figures[wc.figure]),
        settings=lambda wc: f"results/settings/{PLAN.cells.all_figures[wc.figure]}.json",
        code=PLAN.code.digest("paper"),
        render=RENDER,
    output:
        pdf="results/figures/{figure}.pdf",
        png=report(
            "results/figures/{figure}.png",
            caption="../report/figure.rst",
            category="Figures",
            labels=lambda wc: REPORT_LABELS[wc.figure],
        ),
        sources="results/figures/{figure}.sources.json",  # provenance: cells, outputs, plotted values
        cells=report(
            "results/report/cells/{figure}.html",
            caption="../report/cells.rst",
            category="Cells",
            labels=lambda wc: REPORT_LABELS[wc.figure],
        ),
    log:
        "logs/figures/{figure}.log",
    wildcard_constraints:
        figure="|".join(PLAN.cells.all_figures),
    localrule: True  # see the top of this file
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        artifact=lambda wc: PLAN.cells.all_figures[wc.figure],
        name=lambda wc: f"{REPORT_LABELS[wc.figure]['paper']} ({wc.figure})",
    shell:
        "python -m budgetdraft paper --artifact {params.artifact} --out {output.pdf}"
        " --settings {input.settings} --cells {input.cells} > {log} 2>&1; "
        "python {input.render} cells {output.cells} --title {params.name:q} --sources {output.sources} >> {log} 2>&1"


rule claims:
    """Which findings of the paper hold in this run: this run's figure, a 95 % bootstrap interval over prompts and
    a verdict per finding (results/claims.md and .json), from every cell of the grid."""
    input:
        cells=PLAN.cells.all_cells(),
        positions=PLAN.cells.profile_files(),
        settings="results/settings/claims.json",
        code=PLAN.code.digest("claims"),
        render=RENDER,
    output:
        md="results/claims.md",
        json="results/claims.json",
        positions="results/figures/positions.pdf",
        positions_png=report(
            "results/figures/positions.png",
            caption="../report/positions.rst",
            category="Figures",
            labels={"artifact": "positions", "paper": "not in the paper"},
        ),
        html=report(
            "results/claims.html",
            caption="../report/claims.rst",
            category="Claims",
            labels=REPORT_LABELS["claims"],
        ),
        cells=report(
            "results/report/cells/claims.html",
            caption="../report/cells.rst",
            category="Cells",
            labels=REPORT_LABELS["claims"],
        ),
    log:
        "logs/claims.log",
    localrule: True  # see the top of this file
    conda:
        "../../envs/budgetdraft.yaml"
    shell:
        "python -m budgetdraft claims --out {output.md} --settings {input.settings}"
        " --cells {input.cells} --positions {input.positions} --positions-figure {output.positions} > {log} 2>&1; "
        "python {input.render} markdown {output.md} {output.html} >> {log} 2>&1; "
        "python {input.render} cells {output.cells} --title 'Findings F1-F8 (claims)' --files {input.cells} >> {log} 2>&1"


rule paper_diff:
    """Every value the paper reports beside this run's, by table, row and column: within the authors' tolerance
    for a rerun (±2 pp, ±0.05×) or not, or, when any part of the measurement is not the paper's, only a
    counterpart; and the authors' sanity checks.
    """
    input:
        tables=PLAN.cells.artifact_files(
            [a for a in PLAN.cells.in_all if a in PLAN.cells.all_tables]
        ),
        settings="results/settings/paper_diff.json",
        cells=PLAN.cells.paper_diff_cells(),
        drafters=PLAN.drafters.trained_drafters(),
        code=PLAN.code.digest("paper_diff"),
    output:
        md="results/paper_diff.md",
        csv="results/paper_diff.csv",
    log:
        "logs/paper_diff.log",
    localrule: True  # see the top of this file
    conda:
        "../../envs/budgetdraft.yaml"
    shell:
        "python -m budgetdraft paper-diff --tables {input.tables} --settings {input.settings}"
        " --cells {input.cells} --drafters {input.drafters}"
        " --out {output.md} > {log} 2>&1"


rule run_record:
    """What the report's pages about the run show (the configuration, its files, the benchmark files of every job),
    as a file rule run_summary reads: its params would be embedded in the report's <script> (see rule settings).
    """
    input:
        cells=PLAN.cells.all_cells(),
        setaside=lambda wc: set_aside_marker(RUN_RECORD),
    output:
        RUN_RECORD,
    log:
        "logs/report/run_record.log",
    localrule: True
    params:
        run=lambda wc: run_record_json(),
    run:
        Path(output[0]).write_text(params.run, encoding="utf-8")


rule run_summary:
    """The report's pages about the run: its configuration (the schema's defaults filled in) and the wall time of
    every job per stage, from their benchmark files (every such job is upstream of the cells).
    """
    input:
        run="results/report/run.json",
        render=RENDER,
    output:
        config=report(
            REPORT_PAGES[0], caption="../report/configuration.rst", category="Run"
        ),
        runtimes=report(
            REPORT_PAGES[1], caption="../report/runtimes.rst", category="Run"
        ),
    log:
        "logs/report/run_summary.log",
    localrule: True
    conda:
        "../../envs/budgetdraft.yaml"
    shell:
        "python {input.render} config {output.config} --run {input.run} > {log} 2>&1; "
        "python {input.render} runtimes {output.runtimes} --run {input.run} >> {log} 2>&1"
