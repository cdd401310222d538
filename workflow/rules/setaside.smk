rule set_aside:
    """A file the workflow made that can no longer be used (damaged, cut short, edited, a cell whose record is not the
    plan's: found when Snakemake planned, budgetdraft.pipeline.setaside.guard) is checked again as it was then
    (planned_files, planned_cell) and moved aside (a settings file, made from the config alone, removed), under
    Snakemake's lock like every job, and its marker written; the rule that made the file makes it again. The marker
    stays, the file's input from then on, and says what was done.
    """
    output:
        "results/setaside/{guarded}.{n}",
    log:
        "logs/setaside/{guarded}.{n}.log",
    wildcard_constraints:
        guarded=r"(cells|positions|prefill|settings|report)/.+",
        n=r"\d+",
    localrule: True
    run:
        # one write of the whole line: this job runs in a thread of Snakemake's (force-use-threads), beside its log
        sys.stderr.write(set_aside(output[0], planned_files(), planned_cell) + "\n")
        sys.stderr.flush()
