"""The paper's report: what lays the cells out (``settings``), the tables (``tables``) and figures (``figures``)
built by ``paper``, and which findings hold (``claims``, from ``findings``, ``evidence``, ``verdicts`` and the
two-way ``bootstrap``). Reads cells through ``budgetdraft.evaluation``; never measures."""
