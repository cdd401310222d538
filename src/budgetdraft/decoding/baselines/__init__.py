"""Baselines of the paper's comparison table (tab:comparison), run by our own verify loop and timers.

Each module provides ``drafter_factory(verifier, draft, extra, load) -> () -> drafter`` (``draft``: a
``budgetdraft.decoding.draftspec.DraftSpec``, a cell's ``CellSpec.draft``) (see ``budgetdraft.evaluation.cells``):
``triforce`` (hierarchical speculation with a retrieval cache, Sun et al. 2024) and ``eagle3`` (a draft head over
the verifier's fused hidden states, Li et al. 2025; ``python -m budgetdraft train-eagle3`` trains it).

Both drafters are ``budgetdraft.decoding.drafter.Drafter``s that need something the verifier computes during *its* prefill
(TriForce: the full prefix KV cache and the last prompt query; EAGLE-3: the prompt's hidden states). They declare
it (``reads``) and ``speculative`` hands it to their ``prefill`` (``VerifierPrefill``): no verifier work is
repeated, and nothing is armed on the verifier between runs. Both draft greedily only (``GreedyDrafter``).
Each is declared once, with its module as its factory, in ``budgetdraft.base.methods``.
"""
