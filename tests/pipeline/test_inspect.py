"""`prep inspect` as a user meets it: manifests prep did not quite write, documents whose text is not
plain prose (control characters, very long ones)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.conftest import write_jsonl, write_recipe

runner = CliRunner()


def make_dataset(tmp_path, tokenizer, texts):
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=tokenizer, out=tmp_path / "out",
                          output__val_fraction=0.0)
    result = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"])
    assert result.exit_code == 0, result.output
    return tmp_path / "out"


def edit_manifest(out, fn):
    path = out / "manifest.json"
    data = json.loads(path.read_text())
    fn(data["tokenizer"])
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("edit", [lambda t: t.update(boundary=None), lambda t: t.pop("boundary")],
                         ids=["null", "absent"])
def test_docs_decode_whatever_boundary_the_manifest_records(tmp_path, demo_tokenizer, edit):
    """`tokenizer.boundary: null` (which verify passes with a note: no boundary to check) made
    `inspect -n` a KeyError traceback from load_tokenizer; decoding needs no boundary id."""
    out = make_dataset(tmp_path, demo_tokenizer, ["hello world", "second one"])
    edit_manifest(out, edit)
    result = runner.invoke(app, ["inspect", str(out), "-n", "2"])
    assert result.exit_code == 0, result.output
    assert "hello world<|endoftext|>" in result.output and "second one<|endoftext|>" in result.output
