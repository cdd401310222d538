"""A JSON object given on the command line, inline or as a file path (``--hparams``, ``--settings``, ``--extra``)."""

import json
from pathlib import Path


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
