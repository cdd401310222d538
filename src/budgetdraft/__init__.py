"""BudgetDraft: sparse-KV drafters trained to stay accepted under any KV budget.

Library layout (one module per noun of the paper):
  models     load verifier / drafter (hub id, local dir, or a GGUF shipped in a PyPI package)
  kvcache    pre-allocated KV cache, attention scoring, sparse policies (TopKChunks, streaming, full)
  drafter    the Drafter protocol every drafter follows, and what it reads of the verifier's prefill
  decoding   prefill, AR greedy, greedy speculative decoding (Algorithm 2)
  hf         the same decoding inside transformers' generate (custom_generate)
  metrics    per-sample timings, acceptance, peak memory
  data       prompts per dataset x context, training texts
  targets    verifier greedy teacher targets (Algorithm 1, step 1)
  training   L_A + lambda * L_C (Algorithm 1)
  prefill    the verifier's prefill of each evaluation prompt, computed once for every grid cell
  cells      one evaluation grid cell -> one parquet file
  grid       the measured cells of a run (loaded, checked lossless) and the settings that lay them out
  tables     the paper's LaTeX tables from a grid;  figures: its figures
  paper      `budgetdraft paper`: build one table or figure from cell files, trace a table's numbers to its cells
  claims     which of the paper's findings hold in a run (bootstrap, evidence, verdicts, findings: its parts)
  settings   the typed contract of the settings and hyper-parameters the pipeline hands the library
  baselines  TriForce, EAGLE-3
  names      cell labels and artifact names, shared with the workflow
  atomic     writes that appear whole or not at all;  jsonarg: JSON objects given on the command line
  warm       one pre-imported process for the pipeline's commands (forking on the CPU, resident on a GPU)
  estimate   a configuration's cost before it runs;  revisions: hub commits a config is read at
  importgraph  which modules each command runs (a rule's code inputs);  configcheck: what the schema cannot check
"""

__version__ = "0.1.0"
