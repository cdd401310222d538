"""Values as JSON writes them: one conversion for every file of results that records numbers."""

from __future__ import annotations

import math

import numpy as np


def plain(value, strict: bool = False):
    """``value`` with dict keys as str, tuples as lists and numpy scalars as Python ints / floats, so it compares
    equal after a JSON round trip. ``strict``: NaN / ±inf become None (strict JSON has no such numbers: claims.json);
    otherwise they stay floats (Python's JSON writes NaN: a figure's plotted values)."""
    if isinstance(value, dict):
        return {str(k): plain(v, strict) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, strict) for v in value]
    if isinstance(value, (np.integer, int)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return None if strict and not math.isfinite(value) else value
    return value
