"""The hyper-parameters of training: `budgetdraft train --hparams` (`TrainingHparams`, the paper's §3.5 plus the
machine knobs) and `budgetdraft train-eagle3 --hparams` (`Eagle3Hparams`), typed once, each with its default."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from budgetdraft.base.defaults import CHUNK_SIZE, DEVICE, DTYPE, SCORE_WINDOW, THREADS
from budgetdraft.base.jsonio import JsonRecord, checked_keys


class _Hparams(JsonRecord):
    """Read-only mapping access (``hp["lr"]``, ``{**hp}``) for callers outside the library (tests, bench/)."""

    def keys(self):
        return [f.name for f in fields(self)]

    def items(self):
        return self.to_json().items()

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)


def _non_finite(value) -> bool:
    """NaN or ±inf, or text that ``float`` reads as one ("nan", "inf"); never a name or a boolean."""
    try:
        return not math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):
        return False


def _refuse_non_finite(data: dict, what: str) -> None:
    """An error naming the first key whose number (or a number in its list) is NaN or infinite: NaN passes every
    bound check (``lambda_c > 0`` and ``< 0`` are both False: "L_A only" without a word), and an infinite lr or
    lambda_c makes the training loss NaN from its first step."""
    for key, value in data.items():
        if any(_non_finite(v) for v in (value if isinstance(value, (list, tuple)) else [value])):
            raise ValueError(f"{what} key '{key}' must be a finite number, got {value!r}")


LEARNING_RATES = (0.0, 1.0)  # (exclusive, inclusive): an lr of 1e308 passed as finite and ended in a RuntimeError
MAX_THREADS = 1024  # torch threads of one job: no machine gives it more (the config schema's bound); 0: torch's default
MAX_POSITIONS = 2**20  # positions of a sequence the pipeline trains on at most (the schema's verifier_max_positions)


def _whole_numbers(cls, data: dict, what: str) -> dict:
    """``data`` with each value of a whole-number field of ``cls`` (annotated ``int``) read as that integer: a
    whole-number float (``1e8``, as JSON writes it) is the integer it is; any other value (``2.5``, ``true``,
    ``"5"``) is refused naming the key, not cut to an integer or left for ``range()`` to refuse mid-run."""
    counts = {f.name for f in fields(cls) if f.type == "int"}
    out = dict(data)
    for key in counts & set(data):
        value = data[key]
        if isinstance(value, float) and value.is_integer():
            out[key] = int(value)
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{what} key '{key}' must be a whole number, got {value!r}")
    return out


def _refuse_out_of_range(hp, what: str) -> None:
    """The bounds every trainer's hyper-parameters share, which the config schema gives the pipeline's and a
    command line's ``--hparams`` must meet too: a learning rate in (0, 1] (a finite 1e308 passes the finite check
    and ends in a RuntimeError at the first step), and torch threads in [0, ``MAX_THREADS``] (-3 reached
    ``torch.set_num_threads``)."""
    low, high = LEARNING_RATES
    if not low < hp.lr <= high:
        raise ValueError(f"{what} key 'lr' must be a learning rate in ({low:g}, {high:g}], got {hp.lr!r}")
    if not 0 <= hp.threads <= MAX_THREADS:
        raise ValueError(
            f"{what} key 'threads' must be in [0, {MAX_THREADS}] (torch threads; 0: torch's default), got "
            f"{hp.threads!r}"
        )


@dataclass(frozen=True)
class TrainingHparams(_Hparams):
    """`budgetdraft train --hparams`: the paper's §3.5, plus the machine knobs. A variant (L_A only, λ = 1,
    single budget) is nothing but these: the pipeline merges `training:` with the config's `variants:`."""

    steps: int = 5000
    lr: float = 1e-5
    weight_decay: float = 0.01
    warmup_steps: int = 150
    grad_clip: float = 1.0
    budgets: list = field(default_factory=lambda: [256, 512, 1024, 2048])
    budget_weights: list = field(default_factory=lambda: [0.4, 0.3, 0.2, 0.1])
    chunk_size: int = CHUNK_SIZE
    score_window: int = SCORE_WINDOW
    lambda_c: float = 0.5
    seed: int = 0
    checkpoint_every: int = 250
    dtype: str = DTYPE
    device: str = DEVICE
    threads: int = THREADS  # torch CPU threads; 0 leaves torch's default
    prefill_chunk: int = 2048  # prefix tokens per prefill forward (no grad)
    heldout: int = 0  # the last `heldout` sequences are not trained on; L_A/L_C on them go to eval_log.csv
    freeze_embeddings: bool = False  # keep the token embedding and LM head fixed: on CPU they are 2/3 of a small
    #                                  drafter's parameters and most of its optimizer's time (bench/README.md)

    @classmethod
    def from_json(cls, data: dict | None = None) -> TrainingHparams:
        d = checked_keys(cls, dict(data or {}), "hparams")
        _refuse_non_finite(d, "hparams")
        d = _whole_numbers(cls, d, "hparams")
        hp = {**TrainingHparams().to_json(), **d}
        counts = ("steps", "warmup_steps", "chunk_size", "score_window", "seed", "checkpoint_every", "threads")
        for name in (*counts, "prefill_chunk", "heldout"):
            hp[name] = int(hp[name])
        for name in ("lr", "weight_decay", "grad_clip", "lambda_c"):
            hp[name] = float(hp[name])
        hp["budgets"] = [int(b) for b in hp["budgets"]]
        hp["budget_weights"] = [float(w) for w in hp["budget_weights"]]
        return cls(**hp)

    def __post_init__(self):
        """What the schema cannot check (budgets and weights pair up; λ > 0 needs attention scores), and what it
        does, for calls without the pipeline."""
        b, w = self.budgets, self.budget_weights
        if len(b) != len(w) or not b:
            raise ValueError(f"budgets {b} and budget_weights {w} must pair up")
        if not all(x >= 0 for x in w) or not sum(w) > 0:  # so that NaN fails too
            raise ValueError(f"budget_weights must be non-negative with a positive sum: {w}")
        if any(x < 1 for x in b):
            raise ValueError(f"budgets must be positive: {b}")
        if not isinstance(self.freeze_embeddings, bool):
            raise ValueError(f"freeze_embeddings must be true or false, got {self.freeze_embeddings!r}")
        if self.steps < 1 or self.checkpoint_every < 1 or self.chunk_size < 1 or self.prefill_chunk < 1:
            raise ValueError("steps, checkpoint_every, chunk_size and prefill_chunk must be >= 1")
        if not self.lambda_c >= 0:  # NaN too: it must not read as lambda_c == 0
            raise ValueError(f"lambda_c must be >= 0, got {self.lambda_c}")
        if self.lambda_c > 0 and self.score_window < 1:
            raise ValueError("TopKChunks needs attention scores: score_window must be >= 1 when lambda_c > 0")
        _refuse_out_of_range(self, "hparams")


@dataclass(frozen=True)
class Eagle3Hparams(_Hparams):
    """`budgetdraft train-eagle3 --hparams`: the EAGLE-3 head's training (values kept as given)."""

    steps: int = 100
    lr: float = 1.0e-3
    weight_decay: float = 0.0
    warmup_steps: int = 10
    grad_clip: float = 1.0
    ttt_steps: int = 7  # training-time-test unroll depth
    step_decay: float = 0.8  # loss weight of unroll step j = step_decay^j
    ttt_window: int = 64  # last base positions unrolled for steps j >= 1
    step0_positions: int = 128  # positions scored at unroll step 0
    layer_ids: list | None = None  # verifier layers whose outputs are the features; None: EAGLE-3's low/mid/high
    seed: int = 0
    dtype: str = DTYPE
    verifier_dtype: str = DTYPE
    device: str = DEVICE
    threads: int = THREADS
    feature_cache_mb: float = 2048  # MB of verifier features kept between visits (any number, as the schema says)
    log_every: int = 10

    @classmethod
    def from_json(cls, data: dict | None = None) -> Eagle3Hparams:
        d = checked_keys(cls, dict(data or {}), "train-eagle3 hparams")
        _refuse_non_finite(d, "train-eagle3 hparams")
        return cls(**_whole_numbers(cls, d, "train-eagle3 hparams"))

    def __post_init__(self):
        for name in ("steps", "ttt_steps", "ttt_window", "step0_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"train-eagle3 hparam {name} must be >= 1, got {getattr(self, name)}")
        for name in ("ttt_window", "step0_positions"):  # positions of one training sequence
            if getattr(self, name) > MAX_POSITIONS:
                raise ValueError(
                    f"train-eagle3 hparam {name} must be at most {MAX_POSITIONS} (positions of a training sequence), "
                    f"got {getattr(self, name)}"
                )
        _refuse_out_of_range(self, "train-eagle3 hparams")


def resolve_hparams(hparams: dict | TrainingHparams | None = None) -> TrainingHparams:
    """The typed hparams (``TrainingHparams``: declared above with their defaults and checked)
    of a JSON dict, or the hparams themselves. A variant (L_A only, lambda = 1, single budget) is nothing but
    hparams: the pipeline hands over `training:` merged with the config's `variants:` overrides."""
    return hparams if isinstance(hparams, TrainingHparams) else TrainingHparams.from_json(hparams)
