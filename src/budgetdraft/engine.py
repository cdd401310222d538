"""How the decode steps run: ``eager`` (op by op) or ``graphs`` (captured as CUDA graphs)."""

from __future__ import annotations

ENGINES = ("eager", "graphs")
