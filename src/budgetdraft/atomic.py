"""Atomic writes: a file or directory appears complete under its final name, or not at all."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(out: str | Path, *, keep_existing: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``out`` to write a file or a directory into; on success it replaces ``out``
    in one ``os.replace``, on failure it is removed and ``out`` is left as it was. With ``keep_existing``, an
    ``out`` that exists once the writing is done (another process finished first) is kept and the temporary
    path is removed instead."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if keep_existing and out.exists():
            return
        if out.is_dir() and tmp.is_dir():  # os.replace cannot replace a non-empty directory
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp)
        elif tmp.exists():
            tmp.unlink()
