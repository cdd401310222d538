"""Baselines of the paper's comparison table (tab:comparison), run by our own verify loop and timers.

Each module provides ``drafter_factory(verifier, args, extra) -> () -> drafter`` (see ``budgetdraft.cells``):
``triforce`` (hierarchical speculation with a retrieval cache, Sun et al. 2024) and ``eagle3`` (a draft head over
the verifier's fused hidden states, Li et al. 2025; ``python -m budgetdraft train-eagle3`` trains it).

Both drafters need something the verifier computes during *its* prefill (TriForce: the full prefix KV cache and
the last prompt query; EAGLE-3: the prompt's hidden states). ``speculative`` prefills the verifier and then calls
``drafter.prefill`` without handing the verifier's state over, so a fresh drafter arms a ``PrefillTap`` on the
verifier when it is created (``speculative(new_drafter(), ...)`` creates it before the verifier prefill) and
reads the tap in its own ``prefill``, which disarms it. No verifier work is repeated. Without a tap (a drafter
used outside that order) the drafter runs its own verifier prefill, counted in ``drafter_prefill_s``.
"""

from __future__ import annotations

import torch

from budgetdraft.kvcache import decoder_layers

_ARMED: list[PrefillTap] = []  # at most one live tap per process: a new drafter disarms an unused old one


class PrefillTap:
    """Forward hooks on the verifier recording, until ``remove()``: the cache object it is given, the number of
    tokens it reads, the last position's attention inputs of every layer (``queries=True``) and the outputs of
    the decoder layers in ``layers`` (concatenated over chunked-prefill calls)."""

    def __init__(self, model, layers: tuple[int, ...] = (), queries: bool = False):
        for tap in list(_ARMED):
            tap.remove()
        self.cache, self.tokens = None, 0
        self.hidden: dict[int, list[torch.Tensor]] = {i: [] for i in layers}
        self.query_in: dict[int, tuple] = {}
        self.handles = [model.register_forward_pre_hook(self._top, with_kwargs=True)]
        for i in layers:
            self.handles.append(decoder_layers(model)[i].register_forward_hook(self._layer(i)))
        if queries:
            for i, layer in enumerate(decoder_layers(model)):
                self.handles.append(layer.self_attn.register_forward_pre_hook(self._attn(i), with_kwargs=True))
        _ARMED.append(self)

    def _top(self, module, args, kwargs):
        self.cache = kwargs.get("past_key_values", self.cache)
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.tokens += ids.shape[1] if ids is not None else 0

    def _layer(self, idx):
        def hook(module, args, output):
            self.hidden[idx].append((output if torch.is_tensor(output) else output[0]).detach())

        return hook

    def _attn(self, idx):
        def hook(module, args, kwargs):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            cos, sin = kwargs["position_embeddings"]
            self.query_in[idx] = (hidden[:, -1:].detach(), cos[:, -1:].detach(), sin[:, -1:].detach())

        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        if self in _ARMED:
            _ARMED.remove(self)

    def layer_outputs(self, idx: int) -> torch.Tensor:
        return torch.cat(self.hidden[idx], dim=1)
