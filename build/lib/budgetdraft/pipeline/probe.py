"""What one probe of the machine times, and the roofline constants solved from it (`budgetdraft.pipeline.machine`
runs the probes, each in a fresh process, and caches what they measured).

A probe of a few seconds times what the jobs do, on the run's own device and dtypes, with random-weight models of
the configured shapes: the verifier scaled down to a few of its layers (its width, vocabulary and layers as they
are, only fewer of them), the drafter whole. It times our decode loop's steps on each model, a verify, a prefill,
the drafter's training steps and a model's load from disk. The roofline constants the estimate uses
(`budgetdraft.pipeline.roofline.Device`) are solved from the timings:

- the verifier's decode step, extrapolated: measured at ``SHALLOW_LAYERS`` and at ``PROBE_LAYERS`` layers (fewer
  when it has fewer or they do not fit), it is ``fixed + layers × per_layer`` (its head and embedding once, then
  each layer), the line through the two, taken to the verifier's own layers (bench/README.md, "The machine probe":
  30 layers from 2 and 6 against 30 measured);
- bandwidth and the fixed cost per layer: a decode step takes ``layers × overhead + bytes / bandwidth`` (its weights
  and KV cache read once); the verifier's probe and the drafter give two equations for the two unknowns;
- matmul throughput: a 256-token prefill, less its fixed cost, over its FLOPs;
- disk: the bytes of a model over the seconds ``from_pretrained`` takes to load it.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from budgetdraft.pipeline.roofline import BYTES

PROBE_LAYERS = 6  # layers of the verifier's deeper probe at most (its width, vocabulary and per-layer cost are the
# verifier's); the shallower one at SHALLOW_LAYERS separates the per-layer cost from the head's. 16 and 4 took 47 s
# of a 2-core CPU for SmolLM2's 30 layers; 6 and 2 extrapolate its step within a few % (bench/README.md)
SHALLOW_LAYERS = 2
DECODE_TOKENS = 16  # steps timed per model, each on its own (the median), after UNTIMED_STEPS
UNTIMED_STEPS = 3  # a generation's first steps (the cache fixed, the first step's allocations)
PREFILL_TOKENS = 256
VERIFY_ROWS = 6


@dataclass(frozen=True)
class Probe:
    """What one probe process measured (seconds), and the shapes it measured them on."""

    verifier_step_s: float
    drafter_step_s: float
    prefill_s: float
    load_s: float
    load_bytes: int
    verifier_layers: int
    drafter_layers: int
    verifier_bytes: float  # weights + KV a verifier step reads
    drafter_bytes: float
    prefill_flops: float
    verifier_step2_s: float = 0.0  # a step of the verifier at `shallow_layers`: the head's share apart
    shallow_layers: int = 0
    verify_rows_s: float = 0.0  # a step of VERIFY_ROWS tokens (a γ = 5 verify) of the verifier's probe
    train_steps_s: tuple = ()  # ((P, C, branches), seconds of one training step of the drafter), per recipe


def llama(shape, layers: int, dtype: str, device: str, trainable: bool = False):
    """A Llama of ``shape`` (budgetdraft.pipeline.roofline.Shape) at ``layers`` layers, as the pipeline loads a model
    (our attention, the decoding layout; ``trainable``: transformers' own layout, as a model to train is loaded), made
    on ``device`` in ``dtype`` (a 7B's layers are not first made in float32 on the host). Its weights are a constant,
    not drawn at random: a dense forward's time does not depend on its values, and drawing them took a second of a
    probe's CPU per model (the rotary buffers are computed)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from budgetdraft.decoding import attention
    from budgetdraft.decoding.layout import decode_layout
    from budgetdraft.decoding.loading import torch_dtype

    config = LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn, num_hidden_layers=layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, tie_word_embeddings=shape.tied,
        max_position_embeddings=8192, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(dtype=torch_dtype(dtype))
    model.to_empty(device=device)
    with torch.no_grad():
        for param in model.parameters():
            param.fill_(0.02 if param.dim() > 1 else 1.0)  # HF's initializer range; norms at one
    with torch.device(device):
        model.model.rotary_emb = LlamaRotaryEmbedding(config)
    if shape.tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.set_attn_implementation(attention.NAME)
    return model.eval() if trainable else decode_layout(model.eval(), device, dtype)


def step_seconds(model, context: int) -> float:
    """Seconds of one decode step of our loop (`autoregressive`) after a ``context``-token prompt: the median of
    DECODE_TOKENS steps of one generation, each timed on its own between the tokens it emits (the loop's observer
    sees each as it is decided), after UNTIMED_STEPS. One prefill, not one per generation length."""
    from budgetdraft.decoding.loop import autoregressive

    emitted = []
    autoregressive(model, list(range(3, 3 + context)), 1 + UNTIMED_STEPS + DECODE_TOKENS, eos_token_id=[],
                   observer=lambda _round: emitted.append(time.perf_counter()))  # fmt: skip
    steps = [b - a for a, b in zip(emitted, emitted[1:])][UNTIMED_STEPS:]
    return max(statistics.median(steps), 1e-6)


def rows_seconds(model, context: int, rows: int, repeats: int = 3) -> float:
    """Median seconds of one forward of ``rows`` tokens over a ``context``-token cache (a verify, or a step), with
    the LM head on as many rows as a verify runs it on: on a CPU the last row only (the verifier's ``lazy_head``:
    the others only where the first draft holds), on an accelerator all of them."""
    import torch
    from transformers import DynamicCache

    ids = torch.arange(3, 3 + context + rows, device=model.device)[None]
    head_rows = 1 if model.device.type == "cpu" else rows
    times = []
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(ids[:, :context], past_key_values=cache, logits_to_keep=1)
        for _ in range(repeats + 1):
            start = time.perf_counter()
            model(ids[:, context:], past_key_values=cache, logits_to_keep=head_rows)
            times.append(time.perf_counter() - start)
            cache.crop(-rows)
    return statistics.median(times[1:])


def train_step_seconds(drafter, hparams: dict, prefix: int, cont: int, untimed: int = 1) -> float:
    """Seconds of one training step (`budgetdraft.training.train.train_step`, both branches when λ > 0) of
    ``drafter`` (trained in place: a probe) on random sequences of ``prefix`` + ``cont`` tokens, after ``untimed``
    steps (a drafter that has taken a step of another recipe needs none: `train_steps`)."""
    import torch

    from budgetdraft.training.train import optimizer_and_schedule, resolve_hparams, train_step

    hp = resolve_hparams({**hparams, "steps": 4, "warmup_steps": 1, "checkpoint_every": 4})
    drafter.train()
    vocab = drafter.config.vocab_size
    g = torch.Generator().manual_seed(0)
    data = {
        "input_ids": torch.randint(3, vocab, (2, prefix + cont), generator=g),
        "targets": torch.randint(3, vocab, (2, cont), generator=g),
        "prefix_len": prefix,
    }
    optimizer, scheduler = optimizer_and_schedule(drafter, hp)
    for step in range(untimed):
        train_step(drafter, optimizer, scheduler, data, step, hp, 2)
    start = time.perf_counter()
    train_step(drafter, optimizer, scheduler, data, untimed, hp, 2)
    return time.perf_counter() - start


def train_steps(drafter, recipes: tuple) -> tuple:
    """((P, C, branches), seconds) of one training step of each recipe ((hparams JSON, P, C), ...) on ``drafter``,
    one model for all, none untimed: in a process whose models have decoded already, a drafter's first step took
    what its later ones take (0.70 against 0.66-0.72 s, SmolLM2's 4 layers at P + C = 128; 1.18 against 1.21 s at
    1,024), and a step's time does not depend on the values of its weights."""
    return tuple(
        ((p, c, 1 + (float(json.loads(h).get("lambda_c", 0)) > 0)),
         train_step_seconds(drafter, json.loads(h), p, c, untimed=0))
        for h, p, c in recipes
    )  # fmt: skip


def shallow_layers(layers: int) -> int:
    """The layers of the verifier's shallower probe beside a deeper one of ``layers``."""
    return max(1, min(SHALLOW_LAYERS, layers - 1))


def probe_once(verifier_shape, drafter_shape, verifier_dtype: str, drafter_dtype: str, device: str, threads: int,
               context: int, recipes: tuple = (), layers: int = PROBE_LAYERS) -> Probe:  # fmt: skip
    """One probe process's timings (its own torch threads) with the verifier at ``layers`` layers at most
    (``probe_layers``) and at `shallow_layers` of them; ``recipes``: ((hparams JSON, P, C), ...) of the training
    steps to time on the drafter."""
    import torch
    from transformers import AutoModelForCausalLM

    from budgetdraft.decoding.loading import torch_dtype

    torch.set_num_threads(threads)
    layers = min(layers, PROBE_LAYERS, verifier_shape.layers)
    # the shallow one first: the first model of these linear shapes measures their layout (decoding.layout), and
    # the fewer its layers the sooner
    shallow = llama(verifier_shape, shallow_layers(layers), verifier_dtype, device)
    verifier_step2 = step_seconds(shallow, context)
    del shallow
    v = llama(verifier_shape, layers, verifier_dtype, device)
    verifier_step = step_seconds(v, context)
    d = llama(drafter_shape, drafter_shape.layers, drafter_dtype, device)
    drafter_step = step_seconds(d, context)
    del d
    verify = rows_seconds(v, context, VERIFY_ROWS) / rows_seconds(v, context, 1) * verifier_step
    trained = ()
    if recipes:  # in transformers' own layout, as `budgetdraft train` loads the drafter: in the decoding layout a step
        # of the default's variants took 0.97 s against 1.28 (its training jobs: 1.43 s alone)
        trained = train_steps(llama(drafter_shape, drafter_shape.layers, "float32", device, trainable=True), recipes)
    ids = torch.arange(3, 3 + PREFILL_TOKENS, device=device)[None]
    with torch.no_grad():
        v(ids, logits_to_keep=1)
        start = time.perf_counter()
        v(ids, logits_to_keep=1)
        prefill = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        v.save_pretrained(tmp)
        size = sum(f.stat().st_size for f in Path(tmp).glob("*.safetensors"))
        start = time.perf_counter()
        AutoModelForCausalLM.from_pretrained(tmp, dtype=torch_dtype(verifier_dtype), device_map=device)
        load = time.perf_counter() - start
    sv = verifier_shape.__class__(**{**asdict(verifier_shape), "layers": layers})
    return Probe(
        verifier_step, drafter_step, prefill, load, size, layers, drafter_shape.layers,
        sv.read * BYTES[verifier_dtype] + sv.kv_bytes(context, BYTES[verifier_dtype]),
        drafter_shape.read * BYTES[drafter_dtype] + drafter_shape.kv_bytes(context, BYTES[drafter_dtype]),
        2 * sv.body * PREFILL_TOKENS + 2 * sv.vocab * sv.hidden + 4 * layers * sv.hidden * PREFILL_TOKENS**2 / 2,
        verifier_step2, shallow_layers(layers), verify, trained,
    )  # fmt: skip


def solve(probes: list[Probe]) -> dict:
    """The roofline constants of the median probe: bandwidth and per-layer cost from the two decode steps, matmul
    throughput from the prefill, disk from the load."""
    p = {k: statistics.median(getattr(x, k) for x in probes) for k in asdict(probes[0]) if k != "train_steps_s"}
    trained = {}
    for probe in probes:
        for recipe, seconds in probe.train_steps_s:
            trained.setdefault(tuple(recipe), []).append(seconds)
    lv, ld, tv, td, bv, bd = (p[k] for k in ("verifier_layers", "drafter_layers", "verifier_step_s",
                                             "drafter_step_s", "verifier_bytes", "drafter_bytes"))  # fmt: skip
    # tv = lv·o + bv / w, td = ld·o + bd / w: solved for 1 / w and o
    det = lv * bd - ld * bv
    inv_bw = (lv * td - ld * tv) / det if det else 0.0
    overhead = (tv - bv * inv_bw) / lv if inv_bw > 0 else 0.0
    if inv_bw <= 0 or overhead < 0:  # the steps do not separate the two (one model's step is all fixed cost)
        overhead, inv_bw = 0.0, tv / bv
    flops = p["prefill_flops"] / max(p["prefill_s"] - lv * overhead, 1e-6)
    # a decode step of the verifier as an affine function of its layers (its head and embedding once, then each
    # layer): the line through its probes at lv and at `shallow_layers` (the verifier's own layers: no second probe)
    shallow = p["shallow_layers"] or shallow_layers(int(lv))
    per_layer = (tv - p["verifier_step2_s"]) / (lv - shallow) if lv > shallow else 0.0
    return {
        "bandwidth": 1 / inv_bw,
        "layer_overhead_s": overhead,
        "flops": flops,
        "disk": p["load_bytes"] / max(p["load_s"], 1e-6),
        "verifier_step": {"fixed_s": max(tv - lv * per_layer, 0.0), "per_layer_s": max(per_layer, 0.0)},
        "drafter_step_s": td,
        "verify_factor": p["verify_rows_s"] / tv if tv else 1.0,
        "train_step_s": {json.dumps(list(k)): statistics.median(v) for k, v in trained.items()},
        "timings": p,
    }
