"""Reading text a user gives (a prompt file): UTF-8, or one line naming the file and the byte that is not."""

from __future__ import annotations

from pathlib import Path


def decode_text(raw: bytes, name, what: str = "prompt file") -> str:
    """``raw`` as UTF-8 text; otherwise a ValueError naming the file (``name``), the offending byte and the fix
    (Python's own UnicodeDecodeError names neither the file nor what to do)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{what} {name} is not UTF-8 text (byte {raw[err.start]:#04x} at offset {err.start}): save it as UTF-8, "
            f"e.g. iconv -f latin1 -t utf-8 {name} > prompt.txt"
        ) from None


def read_text_file(path: str | Path, what: str = "prompt file") -> str:
    """The UTF-8 text of the file ``path`` (e.g. decode's --prompt-file), naming it when it is not UTF-8 or cannot
    be read (a directory, a missing or unreadable file: Python's OSError names neither the flag nor what to do)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        why = "is a directory" if isinstance(err, IsADirectoryError) else f"cannot be read ({err.strerror or err})"
        raise ValueError(f"{what} {path} {why}: name a UTF-8 text file that holds the prompt") from None
    return decode_text(raw, path, what)
