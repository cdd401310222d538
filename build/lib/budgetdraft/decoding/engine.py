"""How the decode steps run: fixed shapes, eager or captured as CUDA graphs.

A decode step is one forward of a decoder over a fixed-capacity ``PreallocatedCache`` in fixed mode: q new
tokens are written at the device slot, and the queries attend over all ``capacity`` slots through a mask (slot
index ≤ the query's own slot). What every layer shares is made once a step, not once a layer: the slots written and
the mask, additive in the cache's dtype. Its shapes depend on q and the capacity alone, never on how far decoding has got:
the verifier's AR step (q = 1), its verify (q = γ + 1, padded on the last round), the drafter's step (q = 1). The
slot and the real position (slot + a per-generation offset: a sparse drafter's cache holds fewer slots than the
positions it has seen) are device tensors, so a step reads nothing from the host.

Engines (one for AR and every speculative method of a run, so that every speedup is a ratio on one engine):
- ``eager``: each step runs op by op (the paper's kind of baseline, hundreds of kernel launches a step).
- ``graphs``: each step is ``torch.compile(mode="reduce-overhead", dynamic=False, fullgraph=True)``: Inductor's
  kernels captured as a CUDA graph per shape and replayed, one launch a step. Chosen over a hand-held
  ``torch.cuda.CUDAGraph`` because Inductor also fuses the step's elementwise work and its cudagraph trees manage
  the static inputs and memory pool; the cache buffers are static addresses (``mark_static_address``) that the
  graph reads and writes in place. The first calls compile and record: a run warms up outside its timed region.
  On a CPU there are no CUDA graphs: there ``graphs`` captures the same steps whole (``fullgraph``, AOT-traced,
  backend ``aot_eager``) and runs the captured graph op by op. That proves on any machine what a CUDA graph needs
  (one graph per shape, no recompilation, no graph break, the same tokens) without a minute of C++ compilation a
  shape; it is no CPU speed-up, and the pipeline refuses ``engine: graphs`` off CUDA.

Attention kernel on CUDA: the masked decode attention is pinned to PyTorch's memory-efficient kernel (math as the
fallback). Flash attention takes no arbitrary mask, and left to choose, SDPA may pick cuDNN, whose plan is built
for each new key length: with a growing cache that was every step (~1.9 ms of host time per layer on an H100).
With a fixed capacity one plan would do, but the choice is made here, deliberately, not by a heuristic.

Captures are kept across generations: a ``Steps`` keeps one cache per rounded capacity, so a process that runs many
cells (the pipeline's ``warm`` server: budgets for a drafter, contexts for the verifier) meets a capacity again with
the very buffers its captured graphs read and write (static addresses): it replays, where a new buffer would
re-record. The rule that bounds them: the caches of capacities not in use, over every model and role on a device,
take at most ``KEPT_SHARE`` of the device's memory (CUDA: the GPU's; else the machine's RAM; ``KEPT_BYTES`` sets
bytes instead); when a generation starts, the least recently used go first until they fit. A quarter, because the
caches a generation uses are the ones that must fit: a 7B verifier's cache is 0.5 MB a token in fp16, 2 GB at 4K
and 64 GB at 128K, so on an 80 GB GPU the short contexts' caches stay (20 GB) and a 128K one never lingers. A new
capacity's cache is allocated when it starts (its layers shaped as a kept cache of the same model, else by the
prefill's first write); should that run out of memory, every kept cache of the device is dropped and it is tried
once more, so a kept cache never makes a new one fail. A cell's CUDA peak (``max_memory_allocated``) counts the
caches kept for other capacities, as it counts everything else the process holds.

How many compilations: by default a captured step is compiled for each (capacity, query length), so every new
context and every drafter budget compiles the whole decoder again (on an H200, 37 s for the 7B's AR step and 36 s
for its verify, at each context: issue 55). With ``DYNAMIC_CAPACITY`` the cache's capacity is a dynamic dimension
of the compiled step (``torch._dynamo.mark_dynamic`` on the buffers, the mask's slot index): one compilation per
(model, query length) serves every capacity, and a new capacity only records its CUDA graph. The query length stays
static (``dynamic=False``: no automatic dynamic shapes), so the AR step and the verify keep their own kernels. It is
the option beside today's until a GPU has compared their steps (``bench/gpu_decode.py --capacities static
dynamic``); on the CPU its graphs are counted (``tests/test_engine.py``).

A round's host traffic: token ids go to the device without waiting for it (``device_tokens``: on CUDA from pinned
memory, queued), so the one synchronisation of a greedy round is the verify's read of drafts, verdict and bonus
together, which the host needs to decide the round (``tests/test_graph_reuse.py`` counts them).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import weakref

import torch

# capacities are rounded up to a multiple of SLOT_ROUNDING (budgetdraft.base.defaults, which the cost estimate reads too)
from budgetdraft.base.defaults import ENGINE, ENGINES, GRAPHS, rounded_capacity
from budgetdraft.decoding.kvcache import PreallocatedCache, num_layers
from budgetdraft.decoding.metrics import cache_bytes

DYNAMIC_CAPACITY = False  # graphs: one compilation per (model, query length) for every capacity (see above)
KEPT_SHARE = 0.25  # the caches of capacities not in use take at most this share of the device's memory
KEPT_BYTES: int | None = None  # or at most this many bytes (None: KEPT_SHARE)


def check_engine(engine: str) -> str:
    """The engine a caller of the library's public entries named (``speculative``, ``autoregressive``, a
    ``SparseDrafter``), checked there once; ``Steps`` and ``steps_for`` take it as checked."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    return engine


def attention_kernels(device: torch.device):
    """The SDPA kernels a decode step may use on ``device`` (a context manager; nothing to choose on a CPU)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def device_tokens(tokens: list[int], device: torch.device | str) -> torch.Tensor:
    """The token ids [q] (long) on ``device``, copied without waiting for it: ``torch.tensor(..., device=cuda)``
    copies from pageable memory and then synchronises the stream, so the host would wait for every step queued
    before (the γ drafter steps, before it could queue the verify); from pinned memory the copy is queued instead."""
    ids, device = torch.tensor(tokens, dtype=torch.long), torch.device(device)
    if device.type == "cuda":
        ids = ids.pin_memory()
    return ids.to(device, non_blocking=True)


def decode_step(decoder, cache: PreallocatedCache, tokens: torch.Tensor, output_hidden_states: bool):
    """One fixed-shape forward of ``tokens`` [1, q] at the cache's device slot: positions slot + offset + i, a mask
    over all ``capacity`` slots; the slot is advanced by q on the device. Returns the decoder's output."""
    q = tokens.shape[1]
    query_slots = cache.slot + torch.arange(q, device=tokens.device)  # [q]
    cache.writes = query_slots  # every layer writes its keys/values there (one index a step, not one a layer)
    # [1, 1, q, capacity], additive (0 / −inf): SDPA would turn a boolean mask into this in every layer
    mask = torch.where(cache.slot_index <= query_slots.view(1, 1, q, 1), *cache.mask_values)
    out = decoder(
        input_ids=tokens,
        past_key_values=cache,
        position_ids=(query_slots + cache.position_offset).view(1, q),
        attention_mask=mask,
        use_cache=True,
        output_hidden_states=output_hidden_states,
    )
    cache.slot.add_(q)
    return out


def decode_step_any_capacity(decoder, cache: PreallocatedCache, tokens: torch.Tensor, output_hidden_states: bool):
    """``decode_step`` compiled once for every capacity (``DYNAMIC_CAPACITY``): a code object of its own, so that
    its compiled entries (the capacity dynamic) never mix with ``decode_step``'s (one per capacity)."""
    return decode_step(decoder, cache, tokens, output_hidden_states)


def any_capacity(engine: str) -> bool:
    """Whether a ``Steps`` of ``engine`` made now compiles once for every capacity (``DYNAMIC_CAPACITY``, graphs)."""
    return engine == GRAPHS and DYNAMIC_CAPACITY


def compiled(fn, device: torch.device):
    """``fn`` captured whole, its shapes fixed but for a dimension marked dynamic (``DYNAMIC_CAPACITY``): CUDA
    graphs on CUDA, an AOT-traced graph elsewhere."""
    if device.type == "cuda":
        return torch.compile(fn, mode="reduce-overhead", dynamic=False, fullgraph=True)
    return torch.compile(fn, backend="aot_eager", dynamic=False, fullgraph=True)


class Steps:
    """The decode steps of one model on its own fixed-capacity cache, run by ``engine``.

    ``start(capacity)`` hands out the cache for a new generation (the same buffers whenever the rounded capacity
    comes back, while kept: a captured graph keeps reading them); after the prefill filled it (growing mode), ``fix`` enters
    fixed mode, and every ``__call__`` is a fixed-shape step. ``forwards`` counts the steps since ``start``.
    ``engine`` is one of ``ENGINES``, checked by the public entry that named it (``check_engine``)."""

    def __init__(self, model, engine: str = ENGINE):
        self.model, self.engine = model, engine
        self.dynamic_capacity = any_capacity(engine)  # as the module says when it is made
        self.decoder = model.get_decoder()
        self.device = model.device
        self.cache: PreallocatedCache | None = None  # the one in use
        self.caches: dict[int, PreallocatedCache] = {}  # rounded capacity -> its cache, kept for the next generation
        self.used: dict[int, int] = {}  # rounded capacity -> when it last started (``_USES``)
        _LIVE.add(self)
        self._step = decode_step
        if engine == GRAPHS:
            # every (model, capacity, q) is one entry of one compiled code object: a run of many cells outgrows
            # dynamo's default of 8, and hitting the limit must fail, not silently fall back to eager
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            torch._dynamo.config.fail_on_recompile_limit_hit = True
            self._step = compiled(decode_step_any_capacity if self.dynamic_capacity else decode_step, self.device)

    def start(self, capacity: int) -> PreallocatedCache:
        """The cache of the rounded ``capacity`` for a new generation, empty, in growing mode: the one kept from an
        earlier generation of that capacity (its captured graphs replay), else a new one; caches of other
        capacities stay kept within the device's limit (``evict``)."""
        capacity = rounded_capacity(capacity)
        self.cache = None  # the last generation's cache is kept from here on, no longer in use
        cache = self.caches.get(capacity)
        evict(self.device, other_than=() if cache is None else (cache,))  # before a new allocation: a lower peak
        if cache is None:
            cache = self.caches[capacity] = self.allocated(capacity)
        self.cache, self.used[capacity] = cache, next(_USES)
        cache.release()
        cache.truncate(0)
        self.forwards = 0
        return cache

    def allocated(self, capacity: int) -> PreallocatedCache:
        """A new cache of ``capacity`` slots, its buffers allocated now when a kept cache of this model shows their
        shapes; out of memory, every kept cache of the device is dropped and it is tried once more."""
        cache = PreallocatedCache(num_layers(self.model), capacity)
        like = next((kept for kept in self.caches.values() if kept.layers[0].is_initialized), None)
        if like is None:
            return cache  # the prefill's first write allocates it
        shapes = like.empty_layers()  # taken before a drop: the kept cache may be the one dropped
        try:
            cache.allocate(shapes)
        except torch.OutOfMemoryError:
            drop_kept(self.device)
            cache.allocate(shapes)
        return cache

    def drop(self, capacity: int) -> None:
        """Forget the kept cache of ``capacity`` (its buffers go once nothing else holds them)."""
        self.caches.pop(capacity, None)
        self.used.pop(capacity, None)

    def fix(self, position_offset: int = 0) -> None:
        """The cache holds the prefill (or a gathered prefix): decode steps from here on."""
        self.cache.fix(position_offset)
        if self.engine == GRAPHS:
            for layer in self.cache.layers:
                torch._dynamo.mark_static_address(layer.keys)
                torch._dynamo.mark_static_address(layer.values)
            torch._dynamo.mark_static_address(self.cache.slot)
            torch._dynamo.mark_static_address(self.cache.position_offset)
        if self.dynamic_capacity:
            for layer in self.cache.layers:
                torch._dynamo.mark_dynamic(layer.keys, 2)
                torch._dynamo.mark_dynamic(layer.values, 2)
            torch._dynamo.mark_dynamic(self.cache.slot_index, 3)

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor, output_hidden_states: bool = False):
        """Feed ``tokens`` [1, q] (a device tensor: nothing is read back); returns the decoder's output, whose
        tensors a later step may overwrite under ``graphs`` (use them before the next step)."""
        if self.engine == GRAPHS and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        with attention_kernels(self.device):
            out = self._step(self.decoder, self.cache, tokens, output_hidden_states)
        self.cache.advance(tokens.shape[1])
        self.forwards += 1
        return out


_STEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(engine, role, dynamic capacity): Steps}


def steps_for(model, engine: str, role: str) -> Steps:
    """The ``Steps`` of ``model`` in ``role`` ("verifier", "drafter": a model drafting for itself holds two
    caches) under ``engine``, kept with the model: repeated generations reuse its cache buffers and, under
    ``graphs``, its compiled and captured steps (a cache per rounded capacity, kept as ``evict`` allows)."""
    per_model, key = _STEPS.setdefault(model, {}), (engine, role, any_capacity(engine))
    if key not in per_model:
        per_model[key] = Steps(model, engine)
    return per_model[key]


_LIVE: weakref.WeakSet = weakref.WeakSet()  # every Steps alive, whose kept caches share their device's limit
_USES = itertools.count()  # a clock of starts: the least recently started kept cache goes first


def kept_limit(device: torch.device) -> int:
    """Bytes the kept caches of capacities not in use may take on ``device`` (``KEPT_BYTES``, else ``KEPT_SHARE`` of
    its memory: the GPU's on CUDA, the machine's RAM elsewhere)."""
    if KEPT_BYTES is not None:
        return KEPT_BYTES
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(KEPT_SHARE * total)


def kept_caches(device: torch.device, other_than=()) -> list[tuple[Steps, int, PreallocatedCache]]:
    """The caches kept on ``device`` and not in use (nor in ``other_than``), least recently started first."""
    kept = [
        (steps, capacity, cache)
        for steps in list(_LIVE)
        if steps.device == device
        for capacity, cache in steps.caches.items()
        if cache is not steps.cache and not any(cache is other for other in other_than)
    ]
    return sorted(kept, key=lambda entry: entry[0].used[entry[1]])


def evict(device: torch.device, other_than=()) -> None:
    """Drop kept caches of ``device``, least recently started first, until the rest fit ``kept_limit``."""
    kept = kept_caches(device, other_than)
    held = sum(cache_bytes(cache) for _, _, cache in kept)
    limit = kept_limit(device)
    for steps, capacity, cache in kept:
        if held <= limit:
            break
        held -= cache_bytes(cache)
        steps.drop(capacity)


def drop_kept(device: torch.device) -> None:
    """Drop every cache kept on ``device`` that no generation uses (an allocation ran out of memory)."""
    for steps, capacity, _ in kept_caches(device):
        steps.drop(capacity)
    if device.type == "cuda":
        torch.cuda.empty_cache()
