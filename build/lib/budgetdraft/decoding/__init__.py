"""The decoding engine: models (``loading``, ``positions``, ``attention``), pre-allocated caches (``kvcache``) and
sparse policies (``policies``), fixed-shape steps (``engine``), the verifier (``verifier``), the drafter protocol
(``drafter``), the paper's sparse drafter (``sparse_drafter``, ``draftvocab``), the loops (``loop``: AR and
speculative decoding), sampling mode (``sampling``), acceptance and memory accounting (``metrics``), transformers'
``generate`` (``hf_generate``) and the TriForce / EAGLE-3 drafters (``baselines``). Imports only
``budgetdraft.base``; its commands (``decode``, ``export-model``, ``draft-vocab``, ``export-hf-generate``) are
``budgetdraft.pipeline.commands``.

``from budgetdraft.decoding import speculative, autoregressive`` is the public face of the loop; it is resolved when
asked (PEP 562), so that importing one module of this layer (``models`` for a tokenizer) does not load the loop, and
a command's code inputs (``budgetdraft.base.importgraph``) stay what it runs. Inside the library, import
``budgetdraft.decoding.loop``."""

import importlib

PUBLIC = {"speculative": "loop", "autoregressive": "loop", "Generation": "loop", "Round": "loop"}


def __getattr__(name: str):
    if name in PUBLIC:
        return getattr(importlib.import_module(f"{__name__}.{PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
