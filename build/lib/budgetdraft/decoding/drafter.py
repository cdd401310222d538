"""The drafter protocol: what ``decoding.speculative`` asks of a drafter, and what of the verifier it hands one.

A drafter declares what it reads of the verifier (``Reads``); the decoding loop records exactly that while the
verifier prefills the prompt (``PrefillCapture``: forward hooks that live for that one prefill, nothing registered
afterwards) and hands it to ``Drafter.prefill`` as a ``VerifierPrefill``. So no drafter runs a second verifier
prefill of its own: TriForce reads the verifier's prefix cache and last prompt queries, EAGLE-3 the outputs of its
feature layers, the ``verifier_guided`` policy the verifier's window attention. When the verifier's prefill was
copied in from a shared file (``budgetdraft.evaluation.prefill``), which holds only its cache, the loop runs the prompt through
the verifier once more to record them (charged to ``drafter_prefill_s``, as a drafter's own prefill was).
Implementations: ``decoding.SparseDrafter``, ``baselines.triforce.TriForceDrafter``,
``baselines.eagle3.Eagle3Drafter``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from budgetdraft.decoding.kvcache import PreallocatedCache, attention_queries, decoder_layers


@dataclass(frozen=True)
class Reads:
    """What a drafter reads of the verifier, declared up front (the loop records only what is asked)."""

    layers: tuple[int, ...] = ()  # outputs [1, P, H] of these verifier decoder layers over the prompt (EAGLE-3)
    last_queries: bool = False  # every verifier layer's query of the last prompt token (TriForce's retrieval)
    window_scores: int = 0  # > 0: the verifier's attention of its last N prompt queries (policy verifier_guided)
    hidden_states: bool = False  # every layer's hidden states in each verify forward's output (EAGLE-3)


READS_NOTHING = Reads()  # AR, and a drafter whose policy reads nothing of the verifier


@dataclass
class VerifierPrefill:
    """The verifier right after its prefill of the prompt, as ``Drafter.prefill`` gets it: its KV cache (to read,
    never to write: decoding continues on it) and what the drafter's ``reads`` asked for (empty / None otherwise)."""

    cache: PreallocatedCache
    layer_outputs: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [1, P, H]
    last_queries: list[torch.Tensor] | None = None  # per layer [1, H_q, 1, D], after RoPE
    window_scores: torch.Tensor | None = None  # [P], summed over the verifier's layers and heads


class Drafter(Protocol):
    """Everything ``speculative`` calls; every member is required (nothing is probed with hasattr)."""

    model: torch.nn.Module  # the model whose token ids it drafts (its vocabulary must be the verifier's)
    device: torch.device
    reads: Reads
    samples: bool  # whether draft_sampled draws from the drafter's distribution q (sampling mode)

    def prefill(self, prompt: torch.Tensor, capacity: int, verifier: VerifierPrefill) -> None:
        """Read the prompt [1, P] (``capacity`` more tokens will follow) and what it needs of the verifier."""

    def draft(self, pending: list[int], gamma: int) -> list[int]:
        """Feed the emitted tokens it has not seen (``pending``), then propose ``gamma`` greedy drafts."""

    def draft_sampled(self, pending: list[int], gamma: int, sampler) -> tuple[list[int], torch.Tensor]:
        """``draft`` for sampling mode: drafts drawn from q, and q [gamma, V]; refused where ``samples`` is False."""

    def rollback(self, kept_new: int) -> None:
        """Keep only the first ``kept_new`` tokens fed during the last ``draft``."""

    def after_verify(self, verifier_output, accepted: int, bonus: int) -> None:
        """The verify forward's decoder output (``last_hidden_state``, ``past_key_values``, and ``hidden_states``
        when ``reads.hidden_states``), the number of drafts accepted and the verifier's bonus token."""

    def kv_bytes(self) -> int:
        """Allocated bytes of its KV caches (the memory columns)."""

    def weight_tensors(self) -> Iterable[torch.Tensor]:
        """The weights it runs (storages the verifier also holds count once)."""


class GreedyDrafter:
    """For a drafter that drafts greedily only (the baselines): sampling mode refuses it by ``samples``."""

    samples = False

    def draft_sampled(self, pending: list[int], gamma: int, sampler) -> tuple[list[int], torch.Tensor]:
        raise ValueError(f"the {type(self).__name__} drafter drafts greedily only")


class PrefillCapture:
    """Forward hooks on a verifier, from ``with`` to its end, recording what ``reads`` asks of a prefill: the outputs
    of decoder layers ``reads.layers`` (concatenated over the calls of a chunked prefill) and, with
    ``reads.last_queries``, every layer's attention inputs at the last position fed."""

    def __init__(self, model, reads: Reads):
        self.model, self.reads = model, reads
        self.hidden: dict[int, list[torch.Tensor]] = {i: [] for i in reads.layers}
        self.query_in: dict[int, tuple] = {}
        self.handles: list = []

    def __enter__(self) -> PrefillCapture:
        layers = decoder_layers(self.model)
        for i in self.reads.layers:
            self.handles.append(layers[i].register_forward_hook(self._layer(i)))
        if self.reads.last_queries:
            for i, layer in enumerate(layers):
                self.handles.append(layer.self_attn.register_forward_pre_hook(self._attn(i), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

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

    def layer_outputs(self) -> dict[int, torch.Tensor]:
        return {i: torch.cat(chunks, dim=1) for i, chunks in self.hidden.items()}

    def last_queries(self) -> list[torch.Tensor] | None:
        """Per layer, the query [1, H_q, 1, D] (after RoPE) of the last position fed; None if not asked for."""
        if not self.reads.last_queries:
            return None
        layers = decoder_layers(self.model)
        return [attention_queries(layer.self_attn, *self.query_in[i]) for i, layer in enumerate(layers)]
