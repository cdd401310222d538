"""The baselines of the grid (config `baselines.enabled`), run by our own verify loop and timers.

Each module provides ``drafter_factory(verifier, draft, extra, load) -> () -> drafter`` (``draft``: a
``budgetdraft.decoding.draftspec.DraftSpec``, a cell's ``CellSpec.draft``) (see ``budgetdraft.evaluation.cells``):
``triforce`` (hierarchical speculation with a retrieval cache, Sun et al. 2024) and ``eagle3`` (a draft head over
the verifier's fused hidden states, Li et al. 2025; ``python -m budgetdraft train-eagle3`` trains it), the
comparison table's (tab:comparison), and ``lookup`` (the prompt-lookup copier, transformers'
``prompt_lookup_num_tokens``: its cells are the claims' copying findings, CP and CP-long).

Each is a ``budgetdraft.decoding.drafter.GreedyDrafter`` (they draft greedily only) that declares what it needs of
the verifier's own prefill (``reads``): TriForce the full prefix KV cache and the last prompt query, EAGLE-3 the
prompt's hidden states, the copier nothing. ``speculative`` hands it to their ``prefill`` (``VerifierPrefill``): no
verifier work is repeated, and nothing is armed on the verifier between runs. Each is declared once, with its module
as its factory, in ``budgetdraft.base.methods``.
"""
