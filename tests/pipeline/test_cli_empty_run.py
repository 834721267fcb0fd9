"""`prep tokenize` of inputs that yield no document: it exited 0 with an empty dataset and a note among
the summary's lines, so `prep tokenize ... && python train.py` trained on nothing. It now exits 1
naming why the records were skipped, and writes no manifest; `--allow-empty` writes the empty dataset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.manifest import read_manifest
from tests.conftest import demo_texts, write_jsonl, write_recipe

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _all_rejected(tmp_path: Path, demo_tokenizer: Path) -> Path:
    """A recipe whose every record is skipped: two without the field, one not UTF-8, one empty."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b'{"body": "a"}\n{"body": "b"}\n\xff\xfe not utf-8\n{"text": ""}\n')
    return write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")


def test_a_run_that_produced_no_document_fails_naming_the_reasons(tmp_path, demo_tokenizer):
    recipe = _all_rejected(tmp_path, demo_tokenizer)
    result = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"])
    assert result.exit_code == 1, result.output
    out = tmp_path / "out"
    assert result.output.strip() == (
        f"error: {out}: the run produced no documents: every record was skipped (missing_field 2, empty 1, "
        f"invalid_utf8 1); the first: {tmp_path / 'c.jsonl'} line 1: missing_field (no 'text'; the record has "
        "'body'): '{\"body\": \"a\"}'. No dataset was written: fix the input or the recipe and re-run with "
        "--overwrite, or re-run with --allow-empty to write the empty dataset (and rejects.jsonl)"), result.output
    assert not (out / "manifest.json").exists()


def test_allow_empty_finishes_the_refused_run_and_a_fixed_recipe_overwrites_it(tmp_path, demo_tokenizer):
    recipe = _all_rejected(tmp_path, demo_tokenizer)
    assert runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"]).exit_code == 1
    allowed = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress", "--allow-empty"])
    assert allowed.exit_code == 0, allowed.output
    m = read_manifest(tmp_path / "out")
    assert sum(s.num_docs for s in m.splits.values()) == 0
    assert m.skipped == {"empty": 1, "invalid_utf8": 1, "missing_field": 2}
    assert "note: the dataset holds no documents" in allowed.output
    fixed = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress", "--overwrite",
                                "--set", "source.text_field=body"])
    assert fixed.exit_code == 0, fixed.output
    assert sum(s.num_docs for s in read_manifest(tmp_path / "out").splits.values()) == 2


def test_a_run_with_documents_still_exits_0(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(20) + [""])
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")
    result = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"])
    assert result.exit_code == 0, result.output
    m = read_manifest(tmp_path / "out")
    assert m.skipped["empty"] >= 1 and sum(s.num_docs for s in m.splits.values()) > 0


def test_the_console_script_reads_allow_empty_itself(tmp_path, demo_tokenizer):
    """pipeline.launch runs tokenize without typer when it can read every option: --allow-empty too
    (an option it did not know went to the typer CLI, which also takes it; both must agree)."""
    recipe = _all_rejected(tmp_path, demo_tokenizer)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", "from pipeline.launch import main; main()", "tokenize", "-r", str(recipe),
               "--no-progress"]
    refused = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode == 1 and "the run produced no documents" in refused.stderr, refused.stderr
    allowed = subprocess.run([*command, "--allow-empty"], capture_output=True, text=True, env=env, timeout=120)
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "out" / "manifest.json").exists()
