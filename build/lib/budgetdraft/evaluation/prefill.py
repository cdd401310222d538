"""The verifier's prefill of every evaluation prompt, computed once and shared by the grid cells that decode it.

On a CPU the verifier's prefill is most of a grid cell at long contexts (≈ 5 s for a 1,024-token prompt at one
thread, against ≈ 3 s for 16 new tokens), and every cell of a (dataset, context) recomputes the same one: same
model, same prompt, same numbers. ``budgetdraft prefill`` computes it once per prompt, times it (median of
``--repeats`` runs after a warm-up, in the same conditions as a cell) and saves the KV cache, the first token and
the last position's logits (sampling mode draws the first token from them).
A cell given ``--verifier-prefill`` copies that cache in instead of recomputing it and is charged the recorded
seconds, so every end-to-end time still includes the verifier's prefill, the same figure for every method. The
cache is the verifier's own output, bit for bit: tokens, acceptance and losslessness are unchanged.

For a 7B verifier at 16K tokens the cache would be ~8 GB per prompt: the paper config leaves it off
(``share_verifier_prefill: false``) and every run computes its own prefill.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from budgetdraft.base.atomic import atomic_path
from budgetdraft.decoding.kvcache import num_layers
from budgetdraft.decoding.verifier import SharedPrefill, Verifier, ids_tensor, prompt_key
from budgetdraft.evaluation.measure import Stopwatch
from budgetdraft.evaluation.sealed import Damaged, check_tensors, sealed_metadata

METADATA_KEY = "budgetdraft_prefill"


def record_prefills(verifier_model, prompts: list[list[int]], repeats: int, warmup_tokens: int = 64):
    """Per prompt: the verifier's prefill KV cache, first token and median seconds over ``repeats`` timed runs
    (one short discarded prefill first). Returns (tensors, metadata) in the layout of ``save_prefills``."""
    verifier = Verifier(verifier_model)
    device = verifier_model.device
    verifier.prefill(ids_tensor(prompts[0][-warmup_tokens:], device), warmup_tokens)
    tensors, meta = {}, {}
    for ids in prompts:
        prompt, seconds = ids_tensor(ids, device), []
        for _ in range(repeats):
            with Stopwatch(device) as t:
                first = verifier.prefill(prompt, len(ids))
            seconds.append(t.seconds)
        key = prompt_key(ids)
        for layer in range(num_layers(verifier_model)):
            k, v = verifier.cache.kv(layer)
            tensors[f"{key}.{layer}.k"], tensors[f"{key}.{layer}.v"] = k.clone(), v.clone()  # the buffers are reused
        tensors[f"{key}.logits"] = verifier.last_logits.contiguous()
        meta[key] = {
            "first_token": first,
            "seconds": statistics.median(seconds),
            "runs_s": seconds,
            "prompt_tokens": len(ids),
        }
    return tensors, meta


class BadPrefill(Damaged):
    """A verifier prefill file that is not what ``budgetdraft prefill`` wrote (cut short, damaged, edited)."""

    fix = "write it again with `budgetdraft prefill` (the workflow sets it aside and makes it again)"


def save_prefills(tensors: dict, meta: dict, out: str | Path) -> None:
    """Write the prefills sealed (`budgetdraft.evaluation.sealed`: a digest of every tensor and the metadata)."""
    with atomic_path(out) as tmp:
        save_file(tensors, str(tmp), metadata=sealed_metadata(tensors, {METADATA_KEY: json.dumps(meta)}))


def load_prefills(path: str | Path, device="cpu") -> dict[str, SharedPrefill]:
    """prompt_key -> SharedPrefill, from a file written by ``budgetdraft prefill``, its seal checked first; one that is
    cut short, damaged or edited is a `BadPrefill` naming it."""
    check_tensors(path, BadPrefill)
    try:
        return _read_prefills(path, device)
    except (SafetensorError, OSError) as err:
        raise BadPrefill(path, f"cannot be read ({err})") from None


def _read_prefills(path, device) -> dict[str, SharedPrefill]:
    with safe_open(str(path), framework="pt", device=str(device)) as f:
        metadata = f.metadata() or {}
        if METADATA_KEY not in metadata:
            raise ValueError(f"{path} is not a verifier prefill file (no {METADATA_KEY!r} metadata)")
        meta = json.loads(metadata[METADATA_KEY])
        names = set(f.keys())
        layers = len({name.split(".")[1] for name in names if name.endswith((".k", ".v"))}) if meta else 0
        return {
            key: SharedPrefill(
                [(f.get_tensor(f"{key}.{i}.k"), f.get_tensor(f"{key}.{i}.v")) for i in range(layers)],
                m["first_token"],
                m["seconds"],
                f.get_tensor(f"{key}.logits") if f"{key}.logits" in names else None,
            )
            for key, m in meta.items()
        }


def check_covers(prefilled: dict[str, SharedPrefill], prompts: list[list[int]], path) -> None:
    """Every prompt a run will decode has its prefill in the file (else the file is from other prompts)."""
    missing = sum(prompt_key(ids) not in prefilled for ids in prompts)
    if missing:
        raise ValueError(
            f"--verifier-prefill {path}: {missing} of {len(prompts)} prompts are not in it (computed "
            "for other prompts or another tokenizer; rebuild it with `budgetdraft prefill`)"
        )
