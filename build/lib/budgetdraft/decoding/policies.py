"""Sparse policies: which prefix positions a drafter keeps within a budget of B tokens, a registry of one function
each (`@sparse_policy`), and the checks of what a policy answers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from budgetdraft.base.defaults import CHUNK_SIZE, SCORE_WINDOW

OBSERVATIONS = {  # what a policy may ask for in ``needs``, and what fills it
    "scores": "per drafter layer [P]: attention of the last score_window prompt queries, heads summed",
    "head_scores": "per drafter layer [H_kv, P]: the same, summed per KV head (its query heads pooled)",
    "verifier_scores": "[P]: the verifier's attention of the last score_window prompt queries, layers and heads summed",
}


@dataclass(frozen=True)
class PolicyInputs:
    """What a sparse policy chooses from: the prefix length P, the budget B, and the observations it ``needs``
    (None otherwise; ``OBSERVATIONS`` says what each holds)."""

    prefix_len: int
    budget: int
    chunk_size: int = CHUNK_SIZE
    num_layers: int = 1
    window: int = SCORE_WINDOW  # score_window: the last prompt queries the scores come from (the observation window)
    scores: list[torch.Tensor] | None = None
    head_scores: list[torch.Tensor] | None = None
    verifier_scores: torch.Tensor | None = None


@dataclass(frozen=True)
class SparsePolicy:
    name: str
    select: Callable[[PolicyInputs], list[torch.Tensor]]
    needs: frozenset[str]
    budgeted: bool = True  # keeps at most B positions (checked); False only for `full`


REGISTRY: dict[str, SparsePolicy] = {}


POLICIES = REGISTRY.keys()  # a live view: a policy registered later is in it too


def sparse_policy(name: str, needs: tuple[str, ...] = (), budgeted: bool = True):
    """Register ``f(inputs: PolicyInputs) -> list[Tensor]`` as the sparse policy ``name`` (decorator): from then on
    ``keep_indices``, ``SparseDrafter`` and the ``--policy`` flags know it. ``needs``: keys of ``OBSERVATIONS``;
    ``budgeted=False``: the policy may keep more than B positions (only ``full`` does)."""
    unknown = sorted(set(needs) - set(OBSERVATIONS))
    if unknown:
        raise ValueError(f"sparse policy {name!r} needs {unknown}: not among {', '.join(OBSERVATIONS)}")

    def register(select):
        if name in REGISTRY:
            raise ValueError(f"sparse policy {name!r} is registered already")
        REGISTRY[name] = SparsePolicy(name, select, frozenset(needs), budgeted)
        return select

    return register


def get_policy(name: str) -> SparsePolicy:
    if name not in REGISTRY:
        raise ValueError(f"unknown sparse policy {name!r}; choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def check_budget(budget: int, chunk_size: int, policy: str | None = None) -> None:
    """A budget of B > 0 tokens; 0 only under an unbudgeted policy (``full``: no budget, every position kept)."""
    if budget < 0 or (budget == 0 and (policy is None or get_policy(policy).budgeted)):
        raise ValueError(f"budget must be a positive number of tokens, got {budget} (0 only with policy full)")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")


def keep_indices(policy: str, inputs: PolicyInputs) -> list[torch.Tensor]:
    """Per drafter layer, the sorted prefix positions the drafter keeps: [n] for all heads, or [H_kv, n]."""
    declared = get_policy(policy)
    check_budget(inputs.budget, inputs.chunk_size, policy)
    missing = [key for key in sorted(declared.needs) if getattr(inputs, key) is None]
    if missing:
        raise ValueError(
            f"policy {policy!r} needs {', '.join(missing)}: prefill with score_window > 0 (and for "
            "verifier_scores, decode with `speculative`, which hands the drafter the verifier)"
        )
    idx = declared.select(inputs)
    check_kept(declared, idx, inputs)
    return idx


def check_kept(declared: SparsePolicy, idx: list[torch.Tensor], inputs: PolicyInputs) -> None:
    """A policy's answer: one tensor per layer, [n] or [H_kv, n], the same n ≤ B everywhere, positions in [0, P)."""
    policy = declared.name
    if len(idx) != inputs.num_layers:
        raise ValueError(f"policy {policy!r} returned {len(idx)} index tensors for {inputs.num_layers} layers")
    kept = {int(i.shape[-1]) for i in idx}
    if any(i.dim() not in (1, 2) for i in idx) or len(kept) != 1:
        raise ValueError(f"policy {policy!r}: every layer must keep the same number of positions, got {kept}")
    n = kept.pop()
    if n > (min(inputs.budget, inputs.prefix_len) if declared.budgeted else inputs.prefix_len):
        raise ValueError(f"policy {policy!r} keeps {n} positions, over B = {inputs.budget} / P = {inputs.prefix_len}")
    if n and any(int(i.min()) < 0 or int(i.max()) >= inputs.prefix_len for i in idx):
        raise ValueError(f"policy {policy!r} keeps positions outside [0, {inputs.prefix_len})")


def topk_chunks(scores: torch.Tensor, prefix_len: int, budget: int, chunk_size: int) -> torch.Tensor:
    """TopKChunks: split [0, P) into chunks of ``chunk_size``, score each chunk by the summed attention of its
    tokens, keep ⌊B/s⌋ chunks in original order. B ≥ P keeps everything.

    When P is not a multiple of s, the trailing partial chunk (the P mod s most recent tokens) is always one of
    the kept chunks, so every layer keeps exactly the same number of tokens (≤ B) and the caches of all layers
    stay one length.
    """
    if budget >= prefix_len:
        return torch.arange(prefix_len, device=scores.device)
    n_full, tail = divmod(prefix_len, chunk_size)
    keep = budget // chunk_size
    if keep == 0:
        return torch.arange(0, device=scores.device)
    chunk_scores = scores[: n_full * chunk_size].float().view(n_full, chunk_size).sum(dim=1)
    chunks = torch.topk(chunk_scores, keep - (tail > 0)).indices.sort().values
    idx = (chunks[:, None] * chunk_size + torch.arange(chunk_size, device=scores.device)).flatten()
    return torch.cat([idx, torch.arange(n_full * chunk_size, prefix_len, device=scores.device)])


def streaming(prefix_len: int, budget: int, sinks: int = 4) -> torch.Tensor:
    """StreamingLLM: the first ``sinks`` tokens (attention sinks) plus the most recent B − sinks tokens."""
    if budget >= prefix_len:
        return torch.arange(prefix_len)
    sinks = min(sinks, budget)
    return torch.cat([torch.arange(sinks), torch.arange(prefix_len - (budget - sinks), prefix_len)])


SNAPKV_KERNEL = 7  # SnapKV pools the window's scores over neighbouring positions (kernel 5-7 in its paper)


def snapkv(head_scores: torch.Tensor, prefix_len: int, budget: int, window: int, kernel: int = SNAPKV_KERNEL):
    """SnapKV: per KV head, the observation window (the last min(w, B) prompt positions) plus the B − w earlier
    positions whose window scores [H_kv, P], max-pooled over ``kernel`` neighbours (so a kept token brings its
    neighbours), are highest. Returns [H_kv, n] sorted per head; B ≥ P keeps everything."""
    heads = head_scores.shape[0]
    device = head_scores.device
    if budget >= prefix_len:
        return torch.arange(prefix_len, device=device).expand(heads, prefix_len)
    w = min(window, budget)
    candidates = prefix_len - w
    pooled = torch.nn.functional.max_pool1d(
        head_scores[None, :, :candidates].float(), kernel, stride=1, padding=kernel // 2
    )[0, :, :candidates]
    chosen = torch.topk(pooled, budget - w, dim=-1).indices.sort(dim=-1).values
    recent = torch.arange(candidates, prefix_len, device=device).expand(heads, w)
    return torch.cat([chosen, recent], dim=-1)


@sparse_policy("full", budgeted=False)
def full_policy(inputs: PolicyInputs) -> list[torch.Tensor]:
    """Every prefix position (no sparsification, whatever B)."""
    return [torch.arange(inputs.prefix_len)] * inputs.num_layers


@sparse_policy("topk_chunks", needs=("scores",))
def topk_chunks_policy(inputs: PolicyInputs) -> list[torch.Tensor]:
    """The paper's TopKChunks, each layer by its own window scores."""
    return [topk_chunks(s, inputs.prefix_len, inputs.budget, inputs.chunk_size) for s in inputs.scores]


@sparse_policy("streaming")
def streaming_policy(inputs: PolicyInputs) -> list[torch.Tensor]:
    """StreamingLLM: attention sinks + the most recent tokens, the same in every layer."""
    return [streaming(inputs.prefix_len, inputs.budget)] * inputs.num_layers


@sparse_policy("snapkv", needs=("head_scores",))
def snapkv_policy(inputs: PolicyInputs) -> list[torch.Tensor]:
    """SnapKV: each KV head of each layer keeps its own positions (``snapkv``)."""
    return [snapkv(s, inputs.prefix_len, inputs.budget, inputs.window) for s in inputs.head_scores]


@sparse_policy("verifier_guided", needs=("verifier_scores",))
def verifier_guided_policy(inputs: PolicyInputs) -> list[torch.Tensor]:
    """The chunks the verifier's own attention ranks highest (TopKChunks on its scores), in every drafter layer."""
    idx = topk_chunks(inputs.verifier_scores, inputs.prefix_len, inputs.budget, inputs.chunk_size)
    return [idx] * inputs.num_layers
