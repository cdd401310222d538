"""A drafter's positional range, and linear rescaling of its rotary positions (position interpolation).

A rotary model knows the positions it was pretrained on: its *native range*, ``config.max_position_embeddings``
(llama-68m: 2,048; SmolLM2-135M: 8,192). The paper runs its drafter far beyond that range (4K-16K prompts) with
explicit real position ids, and names that extrapolation as one cause of the acceptance collapse.

One operation covers both uses of this project, transformers' linear RoPE scaling (``rope_parameters``,
``rope_type: "linear"``: ``inv_freq`` divided by ``factor``, so position p is seen as p / factor):

- ``cover(config, N)`` makes the model see N positions where it saw ``max_position_embeddings``: factor × N / max,
  and ``max_position_embeddings`` becomes N.
- **A short native range** (the embedded default's drafter, spec option ``positions=128``): SmolLM2's layers cut to
  4 and made to cover 128 positions (factor 1/64: every position × 64), so that 128 positions span the 8,192 its
  layers know and everything past 128 extrapolates, as llama-68m's 2,048 do at the paper's scale (2,048 ÷ 16).
- **Position interpolation** (method `pi`, no training): the base drafter made to cover the longest context
  (factor × longest / native: 8 for llama-68m at 16K, 1,024 / 128 = 8 here), so no position extrapolates.

Only ``default`` and ``linear`` rope types can be rescaled this way; any other (yarn, dynamic, llama3, per-layer
types) is refused, naming it. transformers logs a warning for a factor below 1 (it expects interpolation, not
contraction) though it computes it exactly; ``quiet_contraction_warning`` drops that one line.
"""

from __future__ import annotations

import logging

RESCALABLE = ("default", "linear")


def native_range(config) -> int:
    """The positions a model's rotary embedding covers as it stands: ``config.max_position_embeddings``."""
    return int(config.max_position_embeddings)


def linear_factor(config) -> float:
    """The model's linear RoPE factor (1.0 for the default rope); a ValueError for a rope type not rescalable."""
    rope = rope_parameters(config)
    kind = rope.get("rope_type", "default")
    if kind not in RESCALABLE:
        raise ValueError(
            f"rope_type {kind!r} cannot be rescaled linearly (only {', '.join(RESCALABLE)}): its positions "
            "are not a plain multiple of the default rope's"
        )
    return float(rope.get("factor", 1.0)) if kind == "linear" else 1.0


def rope_parameters(config) -> dict:
    rope = getattr(config, "rope_parameters", None) or {}
    if rope and not isinstance(rope.get("rope_type", "default"), str):
        raise ValueError(f"rope_parameters {rope!r} hold one rope per layer type: not rescalable linearly")
    if any(isinstance(v, dict) for v in rope.values()):
        raise ValueError("rope_parameters hold one rope per layer type: not rescalable linearly")
    return dict(rope)


MAX_COVER = 1 << 20  # positions --cover may reach without a verifier to bound it: 8x the paper's 128K verifier


def check_cover(positions: int, native: int, limit: int | None = None) -> None:
    """Position interpolation's bounds (``export-model --cover``): at least the model's native range (fewer would
    contract its positions, which is the spec option ``positions=N``, not interpolation), at most ``limit`` (the
    verifier's positions: a drafter never sees one past them) or ``MAX_COVER``."""
    top = MAX_COVER if limit is None else int(limit)
    if not native <= positions <= top:
        bound = f"the verifier's {top:,} positions" if limit is not None else f"{top:,}"
        raise ValueError(
            f"--cover {positions:,}: must be at least the model's native range ({native:,} positions: fewer would "
            f"contract them, not interpolate) and at most {bound}"
        )


def cover(config, positions: int):
    """``config`` rescaled in place so that ``positions`` positions span what ``native_range(config)`` did (linear
    RoPE scaling; ``max_position_embeddings`` becomes ``positions``). Returns the config."""
    if int(positions) != positions or positions < 1:
        raise ValueError(f"positions must be a whole number >= 1, got {positions!r}")
    factor = linear_factor(config) * int(positions) / native_range(config)
    rope = rope_parameters(config)
    config.rope_parameters = {"rope_type": "linear", "factor": factor, "rope_theta": rope.get("rope_theta", 10000.0)}
    config.max_position_embeddings = int(positions)
    return config


class _Contraction(logging.Filter):
    """Drops transformers' warning about a linear factor below 1 (a contraction, which it computes exactly)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("factor field must be a float or int >= 1" in message and _below_one(message))


def _below_one(message: str) -> bool:
    try:
        return float(message.rsplit(" ", 1)[-1]) < 1
    except ValueError:
        return False


def quiet_contraction_warning() -> None:
    """Silence, once per process, the warning transformers logs for every load of a contracted (factor < 1) rope."""
    logger = logging.getLogger("transformers.modeling_rope_utils")
    if not any(isinstance(f, _Contraction) for f in logger.filters):
        logger.addFilter(_Contraction())
