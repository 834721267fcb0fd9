"""A tokenizer engine that raises on a document stops the run in one line naming that document, and the
run resumes on the reference engine. It used to be a worker's traceback that named no document."""

from __future__ import annotations

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
