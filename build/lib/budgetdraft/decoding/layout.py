"""The memory layout a CPU decodes fastest with: a decode step is a matrix-vector product per weight and a verify a
product of a few rows, and which layout of the same weights the BLAS reads faster is the machine's, not the model's.
Measured on two 2-core VMs (bench/README.md, "Column-major weights on the CPU", "oneDNN's packed weights on the
CPU"): on an AMD EPYC, MKL read SmolLM2's LM head column-major twice as fast as row-major (an SD cell's decoding
18-26 % faster), and oneDNN multiplied a verify's six rows by the layers' weights packed in its own format in half
MKL's time; on an Intel Xeon, column-major was 3-4 % slower for AR. So it is decided per machine: measured once per
model shape, a step's and a verify's forward in each layout, and cached.

`decode_layout` gives a float32 model loaded on a CPU the layout measured fastest there: ``row`` (transformers' own),
``column`` (every linear weight stored column-major, ``W.t().contiguous().t()``, the same values; the tied embedding
shares the LM head's) or ``packed`` (column-major, and every linear but the LM head multiplying more than one row
through oneDNN's packed copy of its weight, `budgetdraft.decoding.packed`). A model to train keeps transformers' layout
(``load_model(..., trainable=True)``), and an accelerator or half precision is left as loaded. A model in another
layout still saves as transformers' own (`_row_major_state`; a packed copy is never saved).

The choice is measured by the first process that needs it, per distinct shapes of the linear weights (a verifier and
the drafter cut from its first layers share one), and written under ``$BUDGETDRAFT_CACHE/machine/`` with a lock
held, so every process of a run on the machine decodes with the same layout (the layout changes the order of float32
additions, so a cell and the AR cell it is checked against must share it).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time

COLUMN, ROW, PACKED = "column", "row", "packed"
LAYOUTS = (ROW, COLUMN, PACKED)
FASTER = 0.97  # another layout is taken only when it is at least 3 % faster: a tie keeps transformers' own


def decode_layout(model, device: str, dtype: str, layout: str | None = None):
    """``model`` in the layout it decodes fastest in on this machine (``layout``: force one of ``LAYOUTS``)."""
    import torch

    if torch.device(device).type != "cpu" or dtype != "float32":
        return model
    return LAID_OUT[layout or machine_layout(model)](model)


def _columns(model):
    """``model`` with every linear weight stored column-major (the same values; a tied embedding shares its head's)."""
    import torch

    moved: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            w = module.weight
            if id(w) not in moved:
                moved[id(w)] = torch.nn.Parameter(w.detach().t().contiguous().t(), requires_grad=w.requires_grad)
            module.weight = moved[id(w)]
    embedding = model.get_input_embeddings()
    if embedding is not None and id(embedding.weight) in moved:
        embedding.weight = moved[id(embedding.weight)]
    model.register_state_dict_post_hook(_row_major_state)
    return model


def _packed(model):
    """``model`` with every linear weight column-major (`_columns`) and every linear but the LM head multiplying more
    than one row through oneDNN's packed copy of its weight (`budgetdraft.decoding.packed`: a verify's rows; a
    vocabulary's head runs one row in a verify on the CPU, where column-major is the faster)."""
    import torch

    from budgetdraft.decoding.packed import PackedLinear

    model = _columns(model)
    head = model.get_output_embeddings()
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and module is not head:
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, PackedLinear(module))
    return model


LAID_OUT = {ROW: lambda model: model, COLUMN: _columns, PACKED: _packed}


def _row_major_state(module, state_dict, prefix, local_metadata) -> None:
    """A column-layout model's ``state_dict`` in transformers' own layout (row-major copies; a tensor tied to another
    stays one tensor), so that ``save_pretrained`` and safetensors, which need contiguous tensors, save it as they
    save a model they loaded."""
    copies: dict[tuple, object] = {}
    for key, tensor in state_dict.items():
        if hasattr(tensor, "is_contiguous") and not tensor.is_contiguous():
            where = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
            state_dict[key] = copies.setdefault(where, tensor.contiguous())


MEASURED_UP_TO = 2e9  # parameters: a larger float32 model on a CPU keeps transformers' layout (no second copy)


def forward_seconds(model, rows: int) -> float:
    """Seconds of one forward of ``model`` over ``rows`` tokens with no cache: a decode step's products (1 row) or a
    γ = 5 verify's (6 rows), the LM head on the last row only, as a verify on the CPU runs it while the first draft
    is rejected (`budgetdraft.decoding.verifier`, ``lazy_head``). Six rows of the head weighed against the
    column layout where a verify seldom pays them: the shallow probe, whose cost is mostly its head, chose
    transformers' layout on the AMD EPYC (2026-12-07, bench/README.md, "oneDNN's packed weights on the CPU")."""
    import torch

    ids = torch.arange(3, 3 + rows)[None]
    with torch.no_grad():
        start = time.perf_counter()
        model(ids, logits_to_keep=1)
        return time.perf_counter() - start


def candidates() -> tuple:
    """The layouts this torch build can lay a model out in (``packed`` needs oneDNN)."""
    from budgetdraft.decoding.packed import available

    return LAYOUTS if available() else (ROW, COLUMN)


def measure_layouts(model, repeats: int = 7) -> dict:
    """Seconds (median of ``repeats``) of a decode step's and a verify's products of ``model`` in each layout (a
    copy of it in each other layout for the measure), and the choice: the fastest, if at least 3 % faster than
    transformers' own. The layouts alternate, run by run, so that another job's load on the machine weighs on all
    alike (measured one after the other under a second job, the choice flipped on an Intel Xeon)."""
    import copy

    layouts = {name: model if name == ROW else LAID_OUT[name](copy.deepcopy(model)) for name in candidates()}
    times: dict[str, dict[int, list[float]]] = {name: {1: [], 6: []} for name in layouts}
    for run in range(repeats + 1):
        for rows in (1, 6):
            for name, m in layouts.items():
                took = forward_seconds(m, rows)
                if run:  # the first run of each warms up
                    times[name][rows].append(took)
    seconds = {name: {rows: statistics.median(t) for rows, t in s.items()} for name, s in times.items()}
    total = {name: sum(s.values()) for name, s in seconds.items()}
    fastest = min(total, key=total.get)
    choice = fastest if total[fastest] < FASTER * total[ROW] else ROW
    return {"choice": choice, "seconds": {k: {str(r): v for r, v in s.items()} for k, s in seconds.items()}}


def linear_shapes(model) -> list:
    """The distinct shapes of ``model``'s linear weights: what a step's products are. Not how many of each: a model
    cut to fewer layers (the drafter, `estimate`'s probe of the verifier) reads its layers in the same layout as the
    whole model, measured once for all of them."""
    import torch

    return sorted({tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)})


def machine_key(model) -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "linears": linear_shapes(model),
        "layouts": list(candidates()),  # a choice measured among fewer layouts is measured again
    }


def machine_layout(model) -> str:
    """This machine's layout for ``model``'s weights (its linear shapes): cached, or measured now under a lock."""
    from budgetdraft.base.atomic import file_lock
    from budgetdraft.base.cache import cache_root

    if sum(p.numel() for p in model.parameters()) > MEASURED_UP_TO:
        return ROW
    key = machine_key(model)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root() / "machine" / f"layout-{digest}.json"
    with file_lock(path):
        try:
            found = json.loads(path.read_text())
            if found.get("choice") in LAYOUTS:
                return found["choice"]
        except (OSError, ValueError):
            pass
        measured = {**measure_layouts(model), "key": key, "measured": time.strftime("%F %T")}
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(measured, indent=1))
        os.replace(tmp, path)
        return measured["choice"]
