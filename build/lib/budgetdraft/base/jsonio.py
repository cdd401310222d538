"""JSON in and out, one home: a JSON object given on the command line (inline or a file path: ``--hparams``,
``--settings``, ``--extra``), values as JSON writes them (every results file that records numbers), and the typed
records (frozen dataclasses: the report's settings, the hyper-parameters) whose ``from_json`` refuses unknown keys
and names a missing one."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import MISSING, fields
from pathlib import Path

import numpy as np


def json_object(value, flag: str) -> dict:
    """``value`` as a dict: a dict as is, nothing as ``{}``, else JSON text or the path of a JSON file; a bad value
    is an error naming ``flag``."""
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    text = str(value)
    if not text.lstrip().startswith("{"):
        if not Path(text).is_file():
            raise ValueError(f"{flag}: {text!r} is neither a JSON object nor a file")
        text = Path(text).read_text()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{flag} is not valid JSON: {err}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{flag} must be a JSON object")
    return obj


def plain(value, strict: bool = False):
    """``value`` as JSON writes it, so it compares equal after a round trip: a record (dataclass) as its
    ``to_json``, dict keys as str, tuples as lists, numpy scalars as Python ints / floats. ``strict``: NaN / ±inf
    become None (strict JSON has no such numbers: claims.json); otherwise they stay floats (Python's JSON writes
    NaN: a figure's plotted values)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_json()
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


def first_difference(found, planned, where: str = "") -> str | None:
    """Where JSON value ``found`` first differs from ``planned`` (keys in ``planned``'s order, then those only
    ``found`` has), as ``datasets.lwm = 'FORGED-NAME', not 'LWM'``; None when they are equal (``1 == 1.0``, as every
    reader compares them)."""
    at = where or "the file"
    if isinstance(found, dict) and isinstance(planned, dict):
        for key in [*planned, *(k for k in found if k not in planned)]:
            inner = f"{where}.{key}" if where else str(key)
            if key not in found:
                return f"{inner} is missing"
            if key not in planned:
                return f"{inner} = {found[key]!r} is not planned"
            if (difference := first_difference(found[key], planned[key], inner)) is not None:
                return difference
        return None
    if isinstance(found, list) and isinstance(planned, list) and len(found) == len(planned):
        return next(
            (d for i, (f, p) in enumerate(zip(found, planned)) if (d := first_difference(f, p, f"{at}[{i}]"))), None
        )
    if found == planned and (type(found) is bool) == (type(planned) is bool):  # true is not 1 in JSON
        return None
    return f"{at} = {found!r}, not {planned!r}"


def checked_keys(cls, data, what: str, where: str = "") -> dict:
    """``data`` as a dict of the fields of record ``cls``: an error names unknown keys, the first missing required
    one (a field without a default), or the first NaN or infinite number in its values, lists and objects
    (``non_finite``: NaN passes every bound, ``lambda_c > 0`` and ``< 0`` are both False; Python's JSON reads
    ``NaN`` and ``Infinity``)."""
    if not isinstance(data, dict):
        raise ValueError(f"{what} {where or 'settings'} must be a JSON object, got {type(data).__name__}")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} key(s) {unknown}{' in ' + where if where else ''}; known: {', '.join(known)}")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"settings: missing key '{where + '.' if where else ''}{missing[0]}'")
    for key, value in data.items():
        if (found := non_finite(value, f"{where + '.' if where else ''}{key}")) is not None:
            raise ValueError(f"{what} key '{found[0]}' must be a finite number, got {found[1]!r}")
    return dict(data)


def non_finite(value, key: str) -> tuple[str, object] | None:
    """The dotted key and the value of the first NaN or infinite number in ``value``, however deep in its objects
    (``context_tokens.4K``, ``gammas.4K``: they reached the figures as ``int(inf)``'s OverflowError); a list is
    named by its key and shown whole. None when every number is finite."""
    if isinstance(value, dict):
        found = (non_finite(v, f"{key}.{k}") for k, v in value.items())
        return next((f for f in found if f is not None), None)
    if isinstance(value, (list, tuple)):
        inner = next((f for f in (non_finite(v, key) for v in value) if f is not None), None)
        return None if inner is None else (inner[0], value if inner[0] == key else inner[1])
    return (key, value) if isinstance(value, float) and not math.isfinite(value) else None


class JsonRecord:
    """``to_json`` for a frozen dataclass: its fields in declaration order, as JSON writes them (`plain`)."""

    def to_json(self) -> dict:
        return {f.name: plain(getattr(self, f.name)) for f in fields(self)}
