"""BudgetDraft: sparse-KV drafters trained to stay accepted under any KV budget.

The library in layers, each a folder; a layer imports only the layers below it (tests/test_layers.py), and
docs/architecture.md draws the diagram:

  pipeline/    the command line, the workflow's plan, config checks, warm start, the cost estimate
  report/      the paper's settings, tables, figures, and the claims (findings, evidence, verdicts, bootstrap)
  evaluation/  one grid cell (its run and its file), the shared verifier prefill, the grid of measured cells
  training/    prompts and training data, teacher targets, hyper-parameters, L_A + λ·L_C, the EAGLE-3 head
  decoding/    models, caches and sparse policies, attention, the engine, the verifier, drafters, the loop,
               sampling, transformers' generate, the TriForce / EAGLE-3 baselines
  base/        names, defaults, files, JSON, hub revisions, text, the import graph

Public names that stay where users import them: ``budgetdraft.decoding.speculative`` / ``autoregressive``,
``budgetdraft.models.load_model`` / ``load_tokenizer``, ``budgetdraft.hf.generate`` (the published
``custom_generate`` files import it); ``python -m budgetdraft`` is ``budgetdraft.pipeline.cli``.
"""

__version__ = "0.1.0"
