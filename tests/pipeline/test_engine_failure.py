"""A tokenizer engine that raises on a document stops the run in one line naming that document, and the
run resumes on the reference engine. It used to be a worker's traceback that named no document."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import tokenizers as ptok
from tests.conftest import DEMO_TOKENIZER, demo_texts, read_split, write_jsonl, write_recipe
from tests.pipeline.test_tokenize import run_cli

BAD = "BOOM this document breaks the engine"


@pytest.fixture
def failing_engine(monkeypatch):
    """The fast engine raises on any text holding BAD (the run's single worker is this process)."""
    real = ptok._build_fast_engines

    def build(spec):
        one, _joined = real(spec)

        def encode(text):
            if BAD in text:
                raise ValueError("engine exploded\non two lines")
            return one(text)
        return encode, None
    monkeypatch.setattr(ptok, "_build_fast_engines", build)


@pytest.mark.parametrize("files", [1, 3])  # 3 small files: one unit holding all three (a group)
def test_the_failing_document_is_named_and_the_run_resumes_on_hf(tmp_path, failing_engine, files):
    texts = demo_texts(300)
    texts[200] = "x" * 50 + BAD
    per_file = -(-len(texts) // files)
    paths = [write_jsonl(tmp_path / "in" / f"c{k}.jsonl", texts[k * per_file:(k + 1) * per_file]) for k in range(files)]
    corpus = paths[0] if files == 1 else tmp_path / "in"
    kw = dict(output__val_fraction=0.0, on_bad_record="skip", unit_bytes=1 << 20)
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=DEMO_TOKENIZER, out=tmp_path / "out", **kw)
    code, output = run_cli("--recipe", recipe)
    line = output.strip()
    assert code == 1 and "\n" not in line and "Traceback" not in line, output
    at = paths[200 // per_file].read_bytes().index(b'{"text": "xxxx')  # where its line starts
    assert line.startswith(f"error: {paths[200 // per_file]}: tokenizer backend "), line
    assert f"failed on the document at byte {at} (86 characters, starting 'xxxx" in line
    assert "ValueError: engine exploded on two lines" in line and "--set tokenizer.backend=hf" in line

    code, output = run_cli("--recipe", recipe, "--set", "tokenizer.backend=hf")
    assert code == 0, output
    clean = write_recipe(tmp_path / "clean.yaml", corpus=corpus, tokenizer=DEMO_TOKENIZER, out=tmp_path / "clean",
                         tokenizer__backend="hf", **kw)
    assert run_cli("--recipe", clean)[0] == 0
    got, want = read_split(tmp_path / "out", "train"), read_split(tmp_path / "clean", "train")
    assert len(got) == len(texts) - 1  # the demo corpus's empty document is counted, not written
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def _fails_with(tmp_path, corpus, **kw) -> str:
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=DEMO_TOKENIZER, out=tmp_path / "out",
                          output__val_fraction=0.0, **kw)
    code, output = run_cli("--recipe", recipe)
    assert code == 1 and "Traceback" not in output, output
    return output.strip()


def test_a_whole_file_document_names_its_own_file(tmp_path, failing_engine):
    """Text, one document per file: the unit lists several files, and the position is the file's number
    (the message named the unit's first file, at "byte 3")."""
    d = tmp_path / "txt"
    d.mkdir()
    for i in range(5):
        (d / f"f{i}.txt").write_text((BAD if i == 3 else "") + f" document number {i}" * 5)
    line = _fails_with(tmp_path, d, source__format="text", source__doc_separator=None)
    assert line.startswith(f"error: {d / 'f3.txt'}: tokenizer backend "), line
    assert "failed on the document that is the whole file (" in line


def test_a_json_array_record_is_named_by_its_row(tmp_path, failing_engine):
    records = [{"text": "hello there " * 5}, {"text": "second one " * 5}, {"text": f"{BAD} third " * 5}]
    corpus = tmp_path / "a.json"
    corpus.write_text(json.dumps(records, indent=1))
    line = _fails_with(tmp_path, corpus)
    assert line.startswith(f"error: {corpus}: tokenizer backend ") and "failed on the document at row 2 (" in line


def test_a_tiktoken_encoding_is_not_sent_to_backend_hf():
    """backend hf refuses a tiktoken:<name> encoding, so the line gives no such fix there."""
    from types import SimpleNamespace

    from pipeline.worker import _Sink

    class Failing:
        def __init__(self, name):
            self.spec = SimpleNamespace(backend="tiktoken", backend_version="tiktoken 0.14.0", name=name,
                                        is_tiktoken_name=name.startswith("tiktoken:"))

        def encode_batch(self, texts, *rest):
            raise ValueError("boom")

    said = {}
    for name in ("tiktoken:gpt2", "tokenizer.json"):
        sink = _Sink.__new__(_Sink)
        sink.encoder, sink.where, sink.kinds = Failing(name), "in/a.jsonl", {}
        sink.unit = SimpleNamespace(format="jsonl", group=(), path="in/a.jsonl", paths=(), start=0)
        said[name] = str(sink._engine_failed(["some text"], np.array([0]), 0, ValueError("boom")))
    assert said["tiktoken:gpt2"].startswith("in/a.jsonl: tokenizer backend tiktoken 0.14.0 failed on the document at "
                                            "byte 0 (9 characters, starting 'some text'): ValueError: boom")
    assert "backend=hf" not in said["tiktoken:gpt2"] and "backend=hf" in said["tokenizer.json"]


def test_a_compressed_file_says_its_byte_is_of_the_decompressed_text(tmp_path, failing_engine):
    import gzip

    texts = ["first document here", f"{BAD} second", "third"]
    corpus = tmp_path / "c.jsonl.gz"
    corpus.write_bytes(gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in texts).encode()))
    at = len(json.dumps({"text": texts[0]})) + 1
    line = _fails_with(tmp_path, corpus)
    assert f"failed on the document at byte {at} of its decompressed text (" in line, line
