"""Our engine's decode steps on a GPU, as `bench/gpu_decode.py` measured them: the estimate's GPU step costs.

A measurement is the benchmark's json (``--out X.md`` writes ``X.json``) kept in ``gpu_steps/`` beside this module
(package data), named ``DEVICE-DATE.json``. What the estimate takes from it is a ratio per engine, so that it
carries to another GPU: a step's time ÷ its memory-bandwidth bound (the bench's bound: the model's weights + the KV
of its prompt, at the device's measured copy bandwidth), per context for the verifier's AR step and per budget B
for the drafter's step, and a verify of γ + 1 tokens ÷ an AR step. On a device of the estimate
(`budgetdraft.pipeline.roofline.DEVICES`) a step then costs its own bound there × that ratio (`Slowdown`).

It applies only to the models it was measured on (the paper's verifier and drafter shapes and dtypes); any other
config is costed by the roofline's guessed efficiencies, and the estimate says which it used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from budgetdraft.base.defaults import ENGINES, GRAPHS

FOLDER = Path(__file__).with_name("gpu_steps")
VERIFIER, DRAFTER = "NousResearch/Yarn-Llama-2-7b-128k", "JackFram/llama-68m"  # what gpu_decode.py builds
DTYPES = {VERIFIER: "float16", DRAFTER: "float32"}


def interpolate(points, x: float) -> float:
    """The value at ``x`` of (x, y) points sorted by x: linear between them, constant beyond (numpy's ``interp``)."""
    xs, ys = zip(*points)
    return float(np.interp(x, xs, ys))


@dataclass(frozen=True)
class Slowdown:
    """A step as measured, in two parts: the device's (``device``: the graphs step ÷ its bandwidth bound, by context
    or budget, which a device of another bandwidth scales) and the host's (``host_ms``: what the eager step takes
    beyond the graphs step, kernel launches and Python, which no faster memory removes; none under graphs).
    ``verify``: a verify of ``verify_rows`` tokens ÷ an AR step (1 for a drafter)."""

    device: tuple[tuple[float, float], ...]
    host_ms: tuple[tuple[float, float], ...] = ()
    verify: float = 1.0
    verify_rows: int = 6

    def seconds(self, bound_s: float, x: float, tokens: int = 1) -> float:
        """A step of ``tokens`` queries at ``x`` whose bandwidth bound on this device is ``bound_s``."""
        host = interpolate(self.host_ms, x) / 1e3 if self.host_ms else 0.0
        rows = 1 + (tokens - 1) * (self.verify - 1) / (self.verify_rows - 1)
        return (bound_s * interpolate(self.device, x) + host) * rows

    def share(self, bound_ms: float, x: float) -> float:
        """The step's share of its bound where it was measured (``bound_ms`` there): what the report states."""
        return bound_ms / (self.seconds(bound_ms / 1e3, x) * 1e3)


@dataclass(frozen=True)
class Measured:
    """One run of the benchmark: where and when, the bounds it measured against (context -> ms, and the bandwidth),
    and the slowdowns of each engine's verifier (by context) and drafter (by budget B)."""

    device: str
    date: str
    source: str
    bandwidth_gbs: float
    bounds_ms: tuple[tuple[float, float], ...]
    verifier: dict[str, Slowdown]
    drafter: dict[str, Slowdown]

    def says(self, engine: str) -> str:
        v, d = self.verifier[engine], self.drafter.get(engine)
        ar = " / ".join(f"{v.share(b, x):.2f} at {x:,.0f}" for x, b in self.bounds_ms)
        budgets = sorted({x for x, _ in d.device} | {x for x, _ in d.host_ms}) if d else []
        shares = (f"{d.share(drafter_bound_ms(b, self.bandwidth_gbs), b):.2f} at B = {b:,.0f}" for b in budgets)
        return (
            f"{engine} steps as measured by bench/gpu_decode.py on {self.device} ({self.date}; {self.source}): the AR "
            f"step at {ar} tokens of context of its bandwidth bound, a verify of {v.verify_rows} tokens {v.verify:.2f} "
            f"AR steps, the drafter's step at {' / '.join(shares) or 'the roofline (not measured)'} of its bound. A "
            "step here costs its bound on this device x the graphs step's slowdown there, plus (eager) the eager "
            "step's excess over graphs there as host time; graphs' slowdown held constant past the contexts it reached"
        )


def drafter_bound_ms(budget: float, bandwidth_gbs: float) -> float:
    """The drafter's step bound as the bench would state it: its weights + the KV of B tokens, at ``bandwidth``."""
    from budgetdraft.pipeline.roofline import BYTES, shape

    s, dtype = shape(DRAFTER), BYTES[DTYPES[DRAFTER]]
    return (s.params * dtype + s.kv_bytes(budget, dtype)) / (bandwidth_gbs * 1e9) * 1e3


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def slowdowns(steps: dict[float, dict[str, float]], bound_ms, verify: dict[str, list[float]]) -> dict[str, Slowdown]:
    """{engine: Slowdown} from {x: {engine: ms}} and each x's bound (``bound_ms(x)``): the device part from the
    graphs steps (the engine's own where graphs was measured nowhere), eager's excess over it as host time."""
    graphs = tuple((x, ms[GRAPHS] / bound_ms(x)) for x, ms in sorted(steps.items()) if GRAPHS in ms)
    out = {}
    for engine in sorted({e for ms in steps.values() for e in ms}):
        own = [(x, ms[engine]) for x, ms in sorted(steps.items()) if engine in ms]
        if engine == GRAPHS or not graphs:
            device, host = tuple((x, ms / bound_ms(x)) for x, ms in own), ()
        else:
            device = graphs
            host = tuple((x, max(ms - bound_ms(x) * interpolate(graphs, x), 0.0)) for x, ms in own)
        out[engine] = Slowdown(device, host, median(verify[engine]) if engine in verify else 1.0)
    return out


def read(path: Path) -> Measured:
    """A benchmark json as the estimate's slowdowns; a file that is not one is refused, naming it."""
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
        bandwidth = float(run["bandwidth_gbs"])
        bounds = {float(row["context"]): float(row["bound_ms"]) for row in run["rows"]}
        ar, drafts, verify = {}, {}, {}
        for row in run["rows"]:
            for engine, steps in row["ours"].items():
                if engine not in ENGINES:  # another attention's rows ("eager flex"): not what a cell runs today
                    continue
                ar.setdefault(float(row["context"]), {})[engine] = steps["ar"]["ms"]
                verify.setdefault(engine, []).append(steps["verify"]["ms"] / steps["ar"]["ms"])
                for name, sample in steps.items():
                    if name.startswith("draft B="):
                        budget = float(name.removeprefix("draft B="))
                        drafts.setdefault(budget, {}).setdefault(engine, []).append(sample["ms"])
        drafter_ms = {b: {e: median(v) for e, v in by.items()} for b, by in drafts.items()}
        measured = Measured(
            device=run["device"],
            date=run["date"],
            source=run.get("source", path.name),
            bandwidth_gbs=bandwidth,
            bounds_ms=tuple(sorted(bounds.items())),
            verifier=slowdowns(ar, bounds.__getitem__, verify),
            drafter=slowdowns(drafter_ms, lambda b: drafter_bound_ms(b, bandwidth), {}),
        )
        figures = [ms for by in ar.values() for ms in by.values()] + [v for r in verify.values() for v in r]
        figures += [ms for by in drafts.values() for r in by.values() for ms in r] + [bandwidth, *bounds.values()]
        if not measured.verifier or not all(math.isfinite(y) and y > 0 for y in figures):
            raise ValueError("a step, bound or bandwidth that is not a positive number")
        return measured
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        raise ValueError(f"{path}: not a measurement of bench/gpu_decode.py ({type(e).__name__}: {e})") from None


@cache
def latest() -> Measured | None:
    """The newest measurement in ``gpu_steps/`` (by its date), or None when there is none."""
    runs = [read(p) for p in sorted(FOLDER.glob("*.json"))]
    return max(runs, key=lambda m: m.date) if runs else None


def applying(verifier, drafter, dtypes: tuple[str, str], engine: str) -> tuple | None:
    """(the measurement, the verifier's slowdown, the drafter's or None) that apply to models of these shapes
    (`budgetdraft.pipeline.roofline.Shape`) and dtypes on ``engine``; None where no measurement is of them."""
    from budgetdraft.pipeline.roofline import shape

    run = latest()
    if run is None or engine not in run.verifier or (verifier, drafter) != (shape(VERIFIER), shape(DRAFTER)):
        return None
    if dtypes != (DTYPES[VERIFIER], DTYPES[DRAFTER]):
        return None
    return run, run.verifier[engine], run.drafter.get(engine)
