"""Files: atomic writes (a file or directory appears complete under its final name, or not at all), outputs that
never replace what their command did not write, and content digests (sha256) that identify what a result was made
from."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shlex
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
        pid = tmp.name[len(out.name) + 2 : -len(".tmp")].removeprefix("old.")  # .NAME.old.PID.tmp: set aside
        if pid.isdigit() and (int(pid) == os.getpid() or not running(int(pid))):
            _remove(tmp)


@contextmanager
def atomic_path(out: str | Path, *, keep_existing: bool = False, command: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``out`` to write a file or a directory into; on success it becomes ``out`` by
    a rename, on failure it is removed and ``out`` is left as it was. A directory replaces an existing ``out`` only
    when ``out`` is an earlier output of the same ``command`` (`publish_dir`); any other directory there is refused,
    never removed. With ``keep_existing``, an ``out`` that exists once the writing is done (another process
    finished first) is kept and the temporary path is removed instead. Temporary paths that killed writers left
    beside ``out`` are removed first (``remove_stale_temps``)."""
    out = Path(os.path.abspath(out))  # `.` and `x/..` have a name to put a sibling beside
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if keep_existing and os.path.lexists(out):
            return
        if command is not None and tmp.is_dir():
            publish_dir(tmp, out, command)
        elif out.is_dir() and not out.is_symlink():  # os.replace cannot put anything over a directory
            raise ValueError(f"{out} is a directory: name a path that is not an existing directory")
        else:
            os.replace(tmp, out)
    finally:
        _remove(tmp)


# ------------------------------------------------------------------------------------------------------------
# Directory outputs: a command replaces only what it wrote itself

OUTPUT_MARKER = ".budgetdraft-output.json"  # in every directory a command writes as its output: {"command": NAME}


def untouchable(path: Path) -> str | None:
    """What ``path`` is when no command may ever replace it, whatever it holds: the working directory, $HOME, or a
    folder above either (replacing one would take the user's tree with it); None for any other path."""
    where = Path(os.path.realpath(path))
    home = os.path.expanduser("~")
    bases = {"the working directory": os.getcwd(), "your home directory": home if home not in ("", "~") else None}
    bases = {name: Path(os.path.realpath(base)) for name, base in bases.items() if base}
    for name, base in bases.items():
        if where == base:
            return name
    for name, base in bases.items():
        if where in base.parents:
            return f"a folder above {name} ({base})"
    return None


def output_command(path: Path) -> str | None:
    """The command whose output the directory ``path`` is (its OUTPUT_MARKER), or None: not a directory, a
    symbolic link, or no (readable) marker."""
    if path.is_symlink() or not path.is_dir():
        return None
    try:
        command = json.loads((path / OUTPUT_MARKER).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        return None
    return command if isinstance(command, str) else None


def output_problem(path: str | Path, command: str) -> str | None:
    """Why ``command`` may not write its output directory at ``path`` (the end of a sentence that starts with the
    path), or None: nothing is there, or an earlier output of ``command`` (which it may replace)."""
    path = Path(os.path.abspath(path))
    if what := untouchable(path):
        return f"is {what}, which budgetdraft never replaces: name a new folder, e.g. {path / 'out'}"
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_dir():  # a mistyped path to a file of the user's: never advise deleting it
        kind = "a symbolic link" if path.is_symlink() else "a file"
        return f"is {kind}, not a folder budgetdraft {command} wrote: it is never replaced; choose another path"
    owner = output_command(path)
    if owner == command or not any(path.iterdir()):  # an empty folder holds nothing to lose
        return None
    if owner:  # a folder of ours: deleting it loses only what budgetdraft wrote there
        return (
            f"exists and is not an earlier output of budgetdraft {command} (the output of budgetdraft {owner}): it "
            f"is never replaced; choose another path, or delete it (rm -r {shlex.quote(str(path))}) if that output "
            "is no longer needed"
        )
    return (
        f"exists and is not an earlier output of budgetdraft {command} (no {OUTPUT_MARKER}: not a folder budgetdraft "
        "wrote): it is never replaced; choose another path"
    )


def check_out(out: str | Path, command: str, flag: str = "--out") -> None:
    """A ValueError, before any work, when ``command`` may not write its output directory ``out``
    (``output_problem``); ``flag``: how the line names it."""
    if problem := output_problem(out, command):
        raise ValueError(f"{flag} {out} {problem}")


def mark_output(directory: Path, command: str) -> None:
    """Mark ``directory`` as ``command``'s output, which that command may replace later (OUTPUT_MARKER)."""
    (Path(directory) / OUTPUT_MARKER).write_text(json.dumps({"command": command}) + "\n")


def publish_dir(tmp: Path, out: Path, command: str) -> None:
    """Make the directory ``tmp`` (written by this process) ``out``, marked as ``command``'s: an earlier output of
    ``command`` there is renamed aside first and removed after, so ``out`` never holds a mix; an empty folder is
    renamed over (which fails if something was put in it meanwhile); anything else there is refused
    (``check_out``) and left as it was."""
    out = Path(os.path.abspath(out))
    mark_output(tmp, command)
    check_out(out, command)
    if output_command(out) != command:  # nothing there, or an empty folder
        os.replace(tmp, out)
        return
    aside = out.with_name(f".{out.name}.old.{os.getpid()}.tmp")
    os.replace(out, aside)
    try:
        os.replace(tmp, out)
    except OSError:
        os.replace(aside, out)  # put the earlier output back
        raise
    _remove(aside)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through `atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


@contextmanager
def file_lock(path: str | Path, timeout: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``PATH.lock`` (made if missing) while the block runs: the processes of a run that
    measure one thing and cache it at ``path`` (the decoding layout, the machine probe) take turns, so the second
    reads what the first wrote instead of measuring it again beside it. ``timeout``: seconds to wait for another
    holder at most, then TimeoutError (None: as long as it holds it)."""
    import fcntl
    import time

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if deadline is None else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path}.lock: held by another process for {timeout:g} s") from None
                time.sleep(0.1)
        yield


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
