"""Files that prove they are whole: what a stage measures is written sealed and every reader checks the seal, so a
file cut short (a full disk, a killed copy), damaged (a flipped bit) or edited by hand is refused by every reader
alike, named with the reason, and the workflow sets it aside and measures it again (budgetdraft.pipeline.setaside).

- **Parquet** (grid cells, `budgetdraft.evaluation.cellfile`; the positional profile, `budgetdraft.evaluation.
  profile`): a sha256 digest of the rows (every column's name, type and values, and the schema's metadata;
  `table_digest`) is stored in the parquet footer's key-value metadata under `DIGEST_KEY`, and every data page
  carries its CRC (`write_page_checksum`), verified on read (`read_sealed`).
- **safetensors** (the shared verifier prefills, `budgetdraft.evaluation.prefill`): a sha256 digest of every tensor
  (name, dtype, shape, bytes) and of the file's own metadata is stored in its metadata under `TENSORS_KEY`
  (`sealed_metadata` when written; `check_tensors` reads the file's own header and bytes, no torch).

The seal is an integrity check, not a signature: the digest is an unkeyed sha256 that anyone can recompute, so it
proves that a file is whole and unchanged since it was sealed, not who wrote it; what a file must also hold (a
cell's invariants, a profile's counts) its reader checks beside it. Only the standard library, numpy and pyarrow
at import time: the workflow imports this module at plan time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from budgetdraft.base.atomic import atomic_path

DIGEST_KEY = b"budgetdraft.sha256"  # a parquet file's digest of its rows
TENSORS_KEY = "budgetdraft.sha256"  # a safetensors file's digest of its tensors and metadata
PARQUET_MAGIC = b"PAR1"


class Damaged(ValueError):
    """A sealed file that is not what it must be: ``str()`` is one line, ``PATH: REASON: FIX``; ``reason`` alone is
    what a step that sets it aside says of it."""

    fix = "write it again (the workflow sets such a file aside and makes it again)"

    def __init__(self, path, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path}: {reason}: {self.fix}")


# ---------------------------------------------------------------------------------------------------- parquet


def _feed(h, array: pa.Array | pa.ChunkedArray) -> None:
    """Hash one column's values canonically: the same values and type give the same bytes however pyarrow lays
    them out (chunks, offsets, validity buffers)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    nested = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    # a list's type without its item's name (parquet reads list<item: T> back as list<element: T>)
    h.update(f"{'list' if nested else kind}|{len(array)}|{array.null_count};".encode())
    if nested:
        lengths = pc.list_value_length(array).cast(pa.int64()).fill_null(-1)
        h.update(np.asarray(lengths, dtype="<i8").tobytes())
        _feed(h, pc.list_flatten(array))
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        h.update(np.asarray(array.is_null(), dtype=bool).tobytes())
        values = array.to_numpy(zero_copy_only=False)
        if not pa.types.is_boolean(kind) and array.null_count:
            values = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False))
        values = np.asarray(values)
        h.update(values.astype(values.dtype.newbyteorder("<")).tobytes())
    else:  # strings and anything else: their Python values, each length-prefixed
        for value in array.to_pylist():
            data = b"\xff" if value is None else repr(value).encode()
            h.update(len(data).to_bytes(8, "little") + data)


def table_digest(table: pa.Table) -> str:
    """sha256 (hex) of a table's rows: its columns' names, types and values, and its schema's key-value metadata
    (pandas' description of the frame) other than the digest itself."""
    h = hashlib.sha256(f"rows {table.num_rows}\n".encode())
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != DIGEST_KEY}
    for key in sorted(meta):
        h.update(len(key).to_bytes(8, "little") + key + len(meta[key]).to_bytes(8, "little") + meta[key])
    for name, column in zip(table.column_names, table.columns):
        h.update(f"\ncolumn {name!r}\n".encode())
        _feed(h, column)
    return h.hexdigest()


def seal(table: pa.Table) -> pa.Table:
    """The table with its digest (`table_digest`) in its schema's metadata."""
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != DIGEST_KEY}
    table = table.replace_schema_metadata(meta)
    return table.replace_schema_metadata({**meta, DIGEST_KEY: table_digest(table).encode()})


def os_reason(error: OSError) -> str:
    """What went wrong, in the system's words ("no space left on device"), or the error's first line when it
    carries no errno (pyarrow words its errors "Error writing bytes to file. Detail: [errno 28] ...")."""
    if error.errno:
        return os.strerror(error.errno).lower()
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def write_sealed(table: pa.Table, out: str | Path) -> None:
    """Write ``table`` to ``out`` atomically, sealed (`seal`, page checksums); a write that fails (a full disk) is a
    ValueError naming the file, with nothing left behind."""
    table = seal(table)
    try:
        with atomic_path(out) as tmp:
            pq.write_table(table, tmp, write_page_checksum=True)
    except OSError as e:  # a full disk, a read-only directory: one line, not pyarrow's traceback
        raise ValueError(f"{os_reason(e)} writing {out}: nothing was written") from None


def parquet_whole(path: Path) -> bool:
    """Whether ``path`` has a parquet file's magic at both ends and a footer that fits inside it (a file cut short
    by a full disk or a killed copy has not)."""
    size = path.stat().st_size
    if size < 12:
        return False
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(-8, os.SEEK_END)
        tail = f.read(8)
    footer = int.from_bytes(tail[:4], "little")
    return head == PARQUET_MAGIC and tail[4:] == PARQUET_MAGIC and footer + 12 <= size


def read_sealed(path: str | Path, error: type[Damaged] = Damaged, what: str = "file") -> pa.Table:
    """A sealed parquet file's whole table, its page checksums verified and its digest recomputed and compared; a
    file cut short (`parquet_whole`), or without a digest (written before it was sealed, or by hand), is refused
    with ``error`` (a `Damaged`) naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    if not parquet_whole(path):
        raise error(path, "not a whole parquet file")
    try:
        # ParquetFile, one thread: a cell file is a few kB, and pq.read_table's dataset path and thread pool cost
        # 3x its read (bench/README.md, "Reading a cell file")
        table = pq.ParquetFile(path, page_checksum_verification=True).read(use_threads=False)
    except Exception as e:  # pyarrow says OSError, ArrowInvalid, ArrowMemoryError, ... for a damaged file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise error(path, f"not a readable parquet file ({type(e).__name__}: {first[:200]})") from None
    stored = (table.schema.metadata or {}).get(DIGEST_KEY)
    if stored is None:
        raise error(path, "no integrity digest (written before it was sealed, or not by budgetdraft)")
    try:
        digest = table_digest(table)
    except Exception as e:  # values a flipped type cannot hold
        raise error(path, f"its rows do not decode ({type(e).__name__}: {str(e)[:200]})") from None
    if stored != digest.encode():
        raise error(path, "its rows do not match the digest written with them (changed after it was written)")
    return table


# ---------------------------------------------------------------------------------------------------- safetensors


# torch dtype -> the dtype name a safetensors header gives it (the digest names each tensor's dtype as its file does)
SAFETENSORS_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}  # fmt: skip


def _digest(entries, metadata: dict[str, str]) -> str:
    """sha256 (hex) of the file's metadata other than the digest itself, then of each (name, dtype, shape, bytes) of
    ``entries`` in name order."""
    h = hashlib.sha256()
    for key in sorted(k for k in metadata if k != TENSORS_KEY):
        h.update(f"meta {key!r} {metadata[key]!r}\n".encode())
    for name, dtype, shape, data in sorted(entries, key=lambda e: e[0]):
        h.update(f"tensor {name!r} {dtype} {list(shape)}\n".encode())
        h.update(data)
    return h.hexdigest()


def tensors_digest(tensors: dict, metadata: dict[str, str]) -> str:
    """The digest a safetensors file of ``tensors`` ({name: tensor}) and ``metadata`` is sealed with (`_digest`)."""
    import torch

    entries = []
    for name, tensor in tensors.items():
        t = tensor.detach().contiguous().cpu()
        entries.append((name, SAFETENSORS_DTYPES[str(t.dtype).removeprefix("torch.")], t.shape,
                        t.reshape(-1).view(torch.uint8).numpy().tobytes()))  # fmt: skip
    return _digest(entries, metadata)


def sealed_metadata(tensors: dict, metadata: dict[str, str]) -> dict[str, str]:
    """``metadata`` with the digest of the file ``tensors`` and it make (`TENSORS_KEY`): what to write it with."""
    return {**metadata, TENSORS_KEY: tensors_digest(tensors, metadata)}


def check_tensors(path: str | Path, error: type[Damaged] = Damaged) -> dict[str, str]:
    """A sealed safetensors file's metadata once its digest holds, read from its own header and bytes (no torch):
    a file cut short or that does not parse, one without a digest or with another one is refused with ``error``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + size])
        body = memoryview(data)[8 + size :]
        metadata = dict(header.pop("__metadata__", None) or {})
        entries = []
        for name, t in header.items():
            start, end = t["data_offsets"]
            if end > len(body) or start > end:
                raise ValueError(f"tensor {name} runs past the end of the file")
            entries.append((name, t["dtype"], t["shape"], body[start:end]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise error(path, f"not a whole safetensors file ({first[:200]})") from None
    stored = metadata.get(TENSORS_KEY)
    if stored is None:
        raise error(path, "no integrity digest (written before it was sealed, or not by budgetdraft)")
    if stored != _digest(entries, metadata):
        raise error(path, "its tensors do not match the digest written with them (changed after it was written)")
    return metadata
