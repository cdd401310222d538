"""The one line said when a model cannot be loaded or fetched: which file is missing and what makes it again, or that
the hub cannot be reached from here (offline), or that a download was cut off mid-transfer (it resumes when run
again). `budgetdraft.decoding.loading` (from_pretrained) and `budgetdraft.decoding.export` (a hub checkpoint's files)
both say them; the hub failure is read from the exception's type, never from its words (``hub_failure``).
"""

from __future__ import annotations

from pathlib import Path

from budgetdraft.base.revisions import hub_model


def load_error(model_spec: str, path: str, err: OSError) -> str:
    """One line for an OSError of transformers' ``from_pretrained``: which file is missing and what recreates it,
    or that a hub model cannot be reached offline, else transformers' first line."""
    text, local = str(err), Path(path)
    weights = [*local.glob("*.safetensors"), *local.glob("*.bin")] if local.is_dir() else []
    if (local / "config.json").is_file() and not weights:
        return f"cannot load model {model_spec!r}: {local / 'model.safetensors'} is missing: " + remake_text(local)
    if hub_model(model_spec) and not local.exists() and unreachable(err):
        return offline_text(model_spec)
    if hub_model(model_spec) and not local.exists() and hub_failure(err) == "dropped":
        return dropped_text(model_spec, err)
    return f"cannot load model {model_spec!r}: {text.strip().splitlines()[0] if text.strip() else type(err).__name__}"


def unreachable(err: BaseException) -> bool:
    """Whether ``err`` (transformers' or the hub client's) says the hub cannot be reached: offline or no network."""
    return hub_failure(err) == "unreachable"


def hub_failure(err: BaseException) -> str | None:
    """What went wrong with the hub, read from the type of ``err`` or of an exception it was raised from
    (transformers raises an OSError from the hub client's): "unreachable" (offline, not in the hub cache, no
    connection made), "dropped" (a transfer begun and cut off: it resumes when run again) or None (anything else).
    Never a word of the message: "connection" is also in "peer closed connection without sending complete message
    body", a dropped transfer, which offline_text would send the user to the wrong fix for."""
    unreachable, dropped = _network_errors()
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, dropped):
            return "dropped"
        if isinstance(err, unreachable):
            return "unreachable"
        err = err.__cause__ or err.__context__
    return None


def _network_errors() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(the exception types that say no connection to the hub was made, those that say a transfer was cut off), of
    the hub client (huggingface_hub and its HTTP library, httpx2) and of requests / urllib3 where installed."""
    import http.client
    import importlib
    import socket

    unreachable: list[type] = [ConnectionRefusedError, socket.gaierror]
    dropped: list[type] = [ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.IncompleteRead]
    httpx = (
        ("ConnectError", "ConnectTimeout", "ProxyError", "PoolTimeout"),
        ("ReadError", "ReadTimeout", "WriteError", "WriteTimeout", "RemoteProtocolError", "CloseError"),
    )
    named = {  # module: (its names of no connection, its names of a transfer cut off)
        "huggingface_hub.errors": (("OfflineModeIsEnabled", "LocalEntryNotFoundError"), ()),
        "httpx2": httpx,  # huggingface_hub's HTTP library
        "httpx": httpx,
        "requests.exceptions": (("ConnectionError",), ("ChunkedEncodingError", "ReadTimeout")),
        "urllib3.exceptions": (("NewConnectionError",), ("ProtocolError", "IncompleteRead")),
    }
    for module_name, (no_connection, cut_off) in named.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        unreachable += [getattr(module, n) for n in no_connection if hasattr(module, n)]
        dropped += [getattr(module, n) for n in cut_off if hasattr(module, n)]
    return tuple(unreachable), tuple(dropped)


def offline_text(model_spec: str) -> str:
    """The line for a hub model that cannot be reached here, and how to bring it."""
    return (
        f"model {model_spec!r} cannot be reached offline (no network here, or HF_HUB_OFFLINE=1) and is not in the local "
        f"hub cache: fetch it where the hub is reachable (`huggingface-cli download {model_spec}`, pinned by `python -m "
        "budgetdraft pin`) and run with HF_HUB_OFFLINE=1, or export it there (snakemake results/models/verifier) "
        "and set verifier / drafter to that local directory"
    )


def dropped_text(model_spec: str, err: BaseException) -> str:
    """The line for a download of a hub model cut off mid-transfer (the network dropped it): the hub client keeps
    what arrived and resumes it on the next run."""
    while err.__cause__ is not None and hub_failure(err.__cause__) == "dropped":
        err = err.__cause__  # the hub client's own error, not transformers' wrapping of it
    first = str(err).strip().splitlines()[0] if str(err).strip() else "no reason given"
    return (
        f"the download of {model_spec!r} was cut off mid-transfer ({type(err).__name__}: {first}): the network dropped it; "
        "run the command again to resume it"
    )


def remake_text(directory: Path) -> str:
    """What recreates a model directory: a pipeline output (results/...) is a directory() output of its rule, which
    Snakemake runs again once the directory is gone; any other is exported again."""
    parts = directory.parts
    if "results" in parts:
        target = Path(*parts[parts.index("results") :])
        return f"recreate it with `rm -r {target} && snakemake {target}` (with the run's --configfile)"
    return f"restore it, or export it again: python -m budgetdraft export-model --spec SPEC --out {directory}"
