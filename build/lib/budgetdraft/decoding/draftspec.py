"""What a drafter is built from, as one typed value of the decoding layer: ``DraftSpec``.

Every drafter factory (``budgetdraft.decoding.sparse_drafter.drafter_factory`` and each baseline's,
``budgetdraft.decoding.baselines``) takes one, so the decoding layer names nothing of the layers above it: a grid
cell gives its own (``budgetdraft.evaluation.cellspec.CellSpec.draft``) and `decode` builds one from its flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from budgetdraft.base.defaults import CHUNK_SIZE, DEVICE, DTYPE, ENGINE, POLICY, SCORE_WINDOW


@dataclass(frozen=True, kw_only=True)
class DraftSpec:
    """A drafter: its model (``drafter``: a model spec, a head directory for EAGLE-3, None for a drafter without
    one), loaded on ``device`` in ``drafter_dtype``; the paper's drafter's prefix cache, cut to ``budget`` tokens by
    ``policy`` over chunks of ``chunk_size`` scored by the last ``score_window`` prefill queries; its draft
    vocabulary (``draft_vocab``: a file, None for the whole); the ``engine`` it steps on. TriForce reads the chunk
    size as its retrieval chunks'. Each field is a ``CellSpec`` field of the same name and default, and a flag of
    eval-cell and decode (``_`` as ``-``); the draft length γ is the loop's, not the drafter's."""

    drafter: str | None = None
    budget: int = 0
    policy: str = POLICY
    chunk_size: int = CHUNK_SIZE
    score_window: int = SCORE_WINDOW
    draft_vocab: str | None = None
    device: str = DEVICE
    engine: str = ENGINE
    drafter_dtype: str = DTYPE

    @classmethod
    def of(cls, values: Mapping) -> DraftSpec:
        """The spec of the fields ``values`` holds (a parsed command line's, a cell's); other keys are ignored, a
        field it lacks takes its default."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})
