rule table:
    """One LaTeX table of the paper from its cells (formatting changes rerun only this rule, never the grid)."""
    input:
        cells=lambda wc: artifact_cells(wc.artifact),
        drafters=artifact_drafter_dirs,
        code=SRC["paper"],
    output:
        tex="results/tables/{artifact}.tex",
        sources="results/tables/{artifact}.sources.json",  # provenance: cells + settings by sha256, see `trace_file`
    log:
        "logs/tables/{artifact}.log",
    wildcard_constraints:
        artifact="|".join(TABLES),
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        settings=paper_settings(),
        drafters=drafters_flag,
    shell:
        "python -m budgetdraft paper --artifact {wildcards.artifact} --out {output.tex}"
        " --settings {params.settings:q} {params.drafters} --cells {input.cells} > {log} 2>&1"


rule figure:
    """One figure (.pdf for LaTeX, .png next to it), captioned in the Snakemake report: the paper's, and the
    extra ones of their own targets (`policies`)."""
    input:
        cells=lambda wc: artifact_cells(ALL_FIGURES[wc.figure]),
        code=SRC["paper"] + ["src/budgetdraft/figures.py"],
    output:
        pdf=report(
            "results/figures/{figure}.pdf",
            caption="../report/figure.rst",
            category="Figures",
        ),
        png="results/figures/{figure}.png",
        sources="results/figures/{figure}.sources.json",  # provenance: cells, outputs, plotted values
    log:
        "logs/figures/{figure}.log",
    wildcard_constraints:
        figure="|".join(ALL_FIGURES),
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        artifact=lambda wc: ALL_FIGURES[wc.figure],
        settings=lambda wc: artifact_settings(ALL_FIGURES[wc.figure]),
    shell:
        "python -m budgetdraft paper --artifact {params.artifact} --out {output.pdf}"
        " --settings {params.settings:q} --cells {input.cells} > {log} 2>&1"


rule claims:
    """Which findings of the paper hold in this run: this run's figure, a 95 % bootstrap interval over prompts and
    a verdict per finding (results/claims.md and .json), from every cell of the grid."""
    input:
        cells=all_cells(),
        code=SRC["paper"] + ["src/budgetdraft/claims.py"],
    output:
        md="results/claims.md",
        json="results/claims.json",
    log:
        "logs/claims.log",
    conda:
        "../../envs/budgetdraft.yaml"
    params:
        settings=paper_settings(),
    shell:
        "python -m budgetdraft claims --out {output.md} --settings {params.settings:q}"
        " --cells {input.cells} > {log} 2>&1"
