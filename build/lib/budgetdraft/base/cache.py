"""Where budgetdraft keeps what it derives on this machine (converted models, GGUF files, machine measures):
one home, read by the loaders (``decoding.loading``), the layout measure (``decoding.layout``) and the machine
probe (``pipeline.machine``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$BUDGETDRAFT_CACHE``, default ``~/.cache/budgetdraft``. A setting that is empty or relative is refused: the
    cache would be the working directory (or move with it), and whoever writes there would decide what
    ``embedded:smollm2`` is."""
    value = os.environ.get("BUDGETDRAFT_CACHE")
    if value is None:
        return Path.home() / ".cache" / "budgetdraft"
    fix = "unset it (the cache is then ~/.cache/budgetdraft) or set it to an absolute path"
    if not value.strip():
        raise ValueError(f"BUDGETDRAFT_CACHE is set but empty, which would make the working directory the cache: {fix}")
    if not os.path.isabs(os.path.expanduser(value)):
        raise ValueError(
            f"BUDGETDRAFT_CACHE={value} is a relative path (the cache would move with the working directory): {fix}"
        )
    return Path(os.path.expanduser(value))
