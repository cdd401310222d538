"""Files: atomic writes (a file or directory appears complete under its final name, or not at all) and content
digests (sha256) that identify what a result was made from."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def running(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def remove_stale_temps(out: Path) -> None:
    """Remove the temporary siblings ``.NAME.PID.tmp`` of ``out`` that killed writers left: those whose PID is no
    running process, or is this process's own (called before this process writes ``out``, such a temp is an
    earlier process's that had the same PID)."""
    for tmp in out.parent.glob(f".{glob.escape(out.name)}.*.tmp"):
        pid = tmp.name[len(out.name) + 2 : -len(".tmp")]
        if pid.isdigit() and (int(pid) == os.getpid() or not running(int(pid))):
            _remove(tmp)


@contextmanager
def atomic_path(out: str | Path, *, keep_existing: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``out`` to write a file or a directory into; on success it replaces ``out``
    in one ``os.replace``, on failure it is removed and ``out`` is left as it was. With ``keep_existing``, an
    ``out`` that exists once the writing is done (another process finished first) is kept and the temporary
    path is removed instead. Temporary paths that killed writers left beside ``out`` are removed first
    (``remove_stale_temps``)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if keep_existing and out.exists():
            return
        if out.is_dir() and tmp.is_dir():  # os.replace cannot replace a non-empty directory
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        _remove(tmp)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through `atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, read in 16 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def files_sha256(paths) -> str:
    """sha256 (hex) over the names and the ``file_sha256`` of several files, in the given order."""
    return hashlib.sha256("".join(f"{Path(p).name} {file_sha256(p)}\n" for p in paths).encode()).hexdigest()
