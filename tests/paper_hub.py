"""The paper's hub repositories, laid out as the hub lays them out, tiny, for the local hub (tests/localhub.py):

- ``NousResearch/Yarn-Llama-2-7b-128k``: its config.json as published (tests/paper_models.py) at a tiny width,
  random weights in two safetensors shards with their index, its remote-code files (never run:
  ``trust_remote_code`` stays off), a SentencePiece ``tokenizer.model`` with no tokenizer.json;
- ``JackFram/llama-68m``: its config.json as published at a tiny width (2 layers, 2,048 positions, vocabulary
  32,000), weights as ``pytorch_model.bin`` (the 2023 upload has no safetensors), the same tokenizer files;
- ``qwe123wjb/BudgetDraft-checkpoints``: the authors' release, ``main/`` (L_A + 0.5 L_C), ``aonly/`` (L_A only)
  and ``ac/`` (λ = 1.0), each a llama-68m directory (config.json, model.safetensors, tokenizer files);
- ``emozilla/pg19`` (dataset): ``data/{train,validation,test}-00000-of-00001.parquet``, PG-19's fields
  (``short_book_title``, ``publication_date``, ``url``, ``text``): Shakespeare's plays as books;
- ``THUDM/LongBench`` (dataset): its loading script and ``data.zip`` holding ``data/qmsum.jsonl`` (LongBench's
  fields: ``input``, ``context``, ``answers``, ``length``, ``dataset``, ``language``, ``all_classes``, ``_id``):
  State-of-the-Union addresses as meetings;
- ``deepmind/narrativeqa`` (dataset): ``data/train-00000-of-00001.parquet`` with NarrativeQA's nested fields
  (``document`` {id, kind, url, file_size, word_count, start, end, summary {text, tokens, url, title}, text},
  ``question``, ``answers``), 4,551 rows: King James Bible books at the paper's 20 LWM rows, short stories else.

The texts are the embedded default's (PyPI packages), so nothing here needs the network.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import paper_models
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from budgetdraft.training import data

VERIFIER, DRAFTER = "NousResearch/Yarn-Llama-2-7b-128k", "JackFram/llama-68m"
RELEASE = "qwe123wjb/BudgetDraft-checkpoints"
RELEASED = {"main": 11, "aonly": 12, "ac": 13}  # subfolder -> the seed of its random weights
PG19, LONGBENCH, NARRATIVEQA = "emozilla/pg19", "THUDM/LongBench", "deepmind/narrativeqa"
DRAFTER_HIDDEN = 128  # llama-68m's 768, narrowed: the release holds three copies of it


def llama_68m(hidden: int = DRAFTER_HIDDEN) -> dict:
    """llama-68m's config.json as published, at ``hidden`` width (12 heads of 64 become hidden / 64)."""
    return {**paper_models.LLAMA_68M, "hidden_size": hidden, "intermediate_size": 4 * hidden,
            "num_attention_heads": hidden // 64}  # fmt: skip


def files_of(folder: Path, prefix: str = "") -> dict[str, Path]:
    return {prefix + p.name: p for p in sorted(Path(folder).iterdir()) if p.is_file()}


def publish_models(hub, tokenizer, work: Path) -> None:
    """The verifier, the drafter and the authors' release, each a commit of its own repository."""
    verifier = paper_models.write_model(paper_models.yarn_llama_2_7b_128k(), work / "verifier", tokenizer, seed=1)
    model = AutoModelForCausalLM.from_pretrained(verifier)
    sharded = work / "verifier-sharded"
    model.save_pretrained(sharded, max_shard_size="4MB")  # two shards and model.safetensors.index.json
    shards = {n: p for n, p in files_of(sharded).items() if n.startswith("model") and "safetensors" in n}
    assert len(shards) >= 3, shards  # the index and at least two shards
    files = {**files_of(verifier), **shards}
    del files["model.safetensors"]
    files["configuration_llama.py"] = "# remote code of the repository: never run (trust_remote_code stays off)\n"
    files["modeling_llama_together_yarn.py"] = "# remote code of the repository: never run\n"
    hub.add(VERIFIER, files, message="Yarn-Llama-2-7b-128k (tiny width)")

    drafter = paper_models.write_model(llama_68m(), work / "drafter", tokenizer, seed=2)
    weights = load_file(drafter / "model.safetensors")
    torch.save(weights, drafter / "pytorch_model.bin")
    (drafter / "model.safetensors").unlink()
    hub.add(DRAFTER, files_of(drafter), message="llama-68m (tiny width)")

    release = {}
    for sub, seed in RELEASED.items():
        folder = paper_models.write_model(llama_68m(), work / "release" / sub, tokenizer, seed=seed)
        release.update(files_of(folder, f"{sub}/"))
    release["README.md"] = "# BudgetDraft checkpoints\n\nmain/: L_A + 0.5 L_C; aonly/: L_A only; ac/: L_A + L_C\n"
    hub.add(RELEASE, release, message="BudgetDraft checkpoints")


def parquet(rows: list[dict]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def publish_datasets(hub) -> None:
    """PG-19, LongBench and NarrativeQA in their own layouts, from the embedded texts."""
    plays = sorted(t for d, t in data.shakespeare_texts().items() if d.endswith("_gut"))
    books = [
        {"short_book_title": f"Play {i}", "publication_date": 1623, "url": f"http://www.gutenberg.org/ebooks/{1000 + i}",
         "text": text}
        for i, text in enumerate(plays)
    ]  # fmt: skip
    hub.add(
        PG19,
        {
            "README.md": "---\nlicense: apache-2.0\n---\n# PG-19\n",
            "data/test-00000-of-00001.parquet": parquet(books[:6]),
            "data/validation-00000-of-00001.parquet": parquet(books[6:8]),
            "data/train-00000-of-00001.parquet": parquet(books[8:]),
        },
        kind="dataset",
    )
    speeches = list(data.sotu_texts().values())[-6:]
    qmsum = [
        {"input": "What did the speaker propose?", "context": text, "answers": ["A plan."], "length": len(text.split()),
         "dataset": "qmsum", "language": "en", "all_classes": None, "_id": f"qmsum-{i:04d}"}
        for i, text in enumerate(speeches)
    ]  # fmt: skip
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("data/qmsum.jsonl", "".join(json.dumps(r) + "\n" for r in qmsum))
        zf.writestr("data/gov_report.jsonl", json.dumps({"input": "", "context": "short", "_id": "g0"}) + "\n")
    hub.add(
        LONGBENCH,
        {"README.md": "# LongBench\n", "LongBench.py": "# the dataset's loading script (datasets >= 4 refuses it)\n",
         "data.zip": archive.getvalue()},
        kind="dataset",
    )  # fmt: skip
    kjv = list(data.kjv_texts().values())
    long_books = [t for t in kjv if len(t) > 60_000]
    rows = []
    for i in range(max(data.LWM_NARRATIVEQA_ROWS) + 1):
        text = long_books[data.LWM_NARRATIVEQA_ROWS.index(i) % len(long_books)] if i in data.LWM_NARRATIVEQA_ROWS else (
            f"A short story number {i}."
        )  # fmt: skip
        rows.append({
            "document": {"id": f"doc{i}", "kind": "gutenberg", "url": f"http://www.gutenberg.org/ebooks/{5000 + i}",
                         "file_size": len(text), "word_count": len(text.split()), "start": "", "end": "",
                         "summary": {"text": "A summary.", "tokens": ["A", "summary", "."], "url": "", "title": ""},
                         "text": text},
            "question": {"text": "Who?", "tokens": ["Who", "?"]},
            "answers": [{"text": "Someone.", "tokens": ["Someone", "."]}],
        })  # fmt: skip
    hub.add(
        NARRATIVEQA,
        {"README.md": "# NarrativeQA\n", "data/train-00000-of-00001.parquet": parquet(rows),
         "data/test-00000-of-00001.parquet": parquet(rows[:3]), "data/validation-00000-of-00001.parquet": parquet(rows[:3])},
        kind="dataset",
    )  # fmt: skip
