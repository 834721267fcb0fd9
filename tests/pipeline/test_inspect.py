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


def test_control_characters_in_a_document_print_as_visible_escapes(tmp_path, demo_tokenizer):
    """A document's ESC sequences reached the terminal raw (ESC [2J clears it, ESC ]0; sets the window
    title), and rich dropped CR, BS, BEL and FF without a trace: the text shown was not the text stored."""
    text = "red \x1b[31mtext\x1b[0m, cr\rover bs\b bell\x07 ff\x0c nul\x00 \u202eltr\u202c end\ttab\nline"
    out = make_dataset(tmp_path, demo_tokenizer, [text])
    result = runner.invoke(app, ["inspect", str(out), "-n", "1"])
    assert result.exit_code == 0, result.output
    assert "red \\x1b[31mtext\\x1b[0m, cr\\rover bs\\b bell\\x07 ff\\f nul\\0 \\u202eltr\\u202c end" in result.output
    assert "tab\nline<|endoftext|>" in result.output, result.output  # a tab and a newline stay (rich expands the tab)
    assert not any(c in result.output for c in "\x1b\r\b\x07\x0c\x00\u202e")


def test_a_long_document_is_cut_saying_how_much_is_left_out(tmp_path, demo_tokenizer):
    """One document of a whole book printed all of it (200,000 tokens: ~200 KB), scrolling the summary
    away; --max-chars N sets the cut, 0 prints it whole."""
    out = make_dataset(tmp_path, demo_tokenizer, ["ab" * 5000, "short"])
    result = runner.invoke(app, ["inspect", str(out), "-n", "2"])
    assert result.exit_code == 0, result.output
    doc = "ab" * 5000 + "<|endoftext|>"
    assert "ab" * 1000 + f"\n[... {len(doc) - 2000:,} more characters; --max-chars 0 prints the whole document]" \
        in result.output and "ab" * 1001 not in result.output, result.output
    assert "short<|endoftext|>" in result.output
    whole = runner.invoke(app, ["inspect", str(out), "-n", "1", "--max-chars", "0"])
    assert doc in whole.output and "more characters" not in whole.output
    tiny = runner.invoke(app, ["inspect", str(out), "-n", "2", "--max-chars", "3"])
    assert "aba\n[... " in tiny.output and "sho\n[... 15 more characters" in tiny.output, tiny.output


def test_asking_for_more_documents_than_the_split_holds_says_so(tmp_path, demo_tokenizer):
    """`-n 5` of a split of 2 printed the 2 and stopped; of an empty split (--allow-empty) it printed
    nothing at all, as if -n had been ignored."""
    out = make_dataset(tmp_path, demo_tokenizer, ["one", "two"])
    result = runner.invoke(app, ["inspect", str(out), "-n", "5"])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("two<|endoftext|>\n--- train holds 2 document(s): all of them are above")
    assert "all of them" not in runner.invoke(app, ["inspect", str(out), "-n", "2"]).output
    corpus = write_jsonl(tmp_path / "e.jsonl", [""])
    recipe = write_recipe(tmp_path / "e.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "empty")
    assert runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress", "--allow-empty"]).exit_code == 0
    result = runner.invoke(app, ["inspect", str(tmp_path / "empty"), "-n", "3", "--split", "val"])
    assert result.exit_code == 0 and result.output.rstrip().endswith("--- val holds no documents")


def test_emoji_codes_in_a_document_print_as_written(tmp_path, demo_tokenizer):
    """rich made `:thumbs_up:` a 👍 even with markup off: the text shown was not the text stored (review)."""
    out = make_dataset(tmp_path, demo_tokenizer, ["Great job :thumbs_up: see :smile: café 😀"])
    result = runner.invoke(app, ["inspect", str(out), "-n", "1"])
    assert result.exit_code == 0, result.output
    assert "Great job :thumbs_up: see :smile: café 😀<|endoftext|>" in result.output, result.output
