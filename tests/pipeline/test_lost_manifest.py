"""A finished dataset whose manifest.json is gone (deleted, or not copied with the shards) keeps only
.prep/lock beside its split folders. verify, inspect, bench-loader and the loader called it an unfinished
run ("re-run the same `prep tokenize` command to finish it"), and that re-run refused the directory as
not a prep output, --overwrite included: a dead end. Now they say the manifest is gone, and --overwrite
rebuilds the dataset."""

from __future__ import annotations

import pytest

from pipeline.cli import app
from tests.conftest import demo_texts, tree_bytes, write_jsonl, write_recipe
from tests.pipeline.test_tokenize import run_cli


@pytest.fixture
def lost(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(40))
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=out)
    code, output = run_cli("--recipe", recipe)
    assert code == 0, output
    assert sorted(p.name for p in (out / ".prep").iterdir()) == ["lock"]  # what a finished run leaves
    finished = tree_bytes(out)
    (out / "manifest.json").unlink()
    return recipe, out, finished


@pytest.mark.parametrize("command", ["verify", "inspect", "bench-loader"])
def test_the_tools_say_the_manifest_is_gone_not_that_a_run_is_unfinished(lost, command):
    from typer.testing import CliRunner
    _, out, _ = lost
    result = CliRunner().invoke(app, [command, str(out)])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "was deleted or not copied" in said and "--overwrite" in said, said
    assert "finish it" not in said


def test_the_loader_says_the_manifest_is_gone(lost):
    from loaders import MemmapLoader
    from pipeline.errors import PrepError
    _, out, _ = lost
    with pytest.raises(PrepError, match="was deleted or not copied with them"):
        MemmapLoader(str(out), seq_len=8, batch_size=2)


def test_tokenize_names_the_fix_and_overwrite_rebuilds_the_dataset(lost):
    recipe, out, finished = lost
    code, output = run_cli("--recipe", recipe)
    assert code == 1 and "no manifest.json" in output and "add --overwrite" in output, output
    assert not (out / "manifest.json").exists()
    code, output = run_cli("--recipe", recipe, "--overwrite")
    assert code == 0, output
    assert tree_bytes(out) == finished


def test_a_stray_file_beside_the_shards_keeps_the_directory_foreign(lost):
    recipe, out, _ = lost
    (out / "train" / "notes.txt").write_text("keep me")
    code, output = run_cli("--recipe", recipe, "--overwrite")
    assert code == 1 and "is not a prep output" in output, output
    assert (out / "train" / "notes.txt").read_text() == "keep me"


def test_a_folder_named_rejects_jsonl_keeps_the_directory_foreign(lost):
    """Any entry named rejects.jsonl passed for the run's rejects file: --overwrite then deleted a folder
    of that name with the user's files in it (review). Only a regular file is the run's."""
    recipe, out, _ = lost
    (out / "rejects.jsonl").mkdir()
    (out / "rejects.jsonl" / "notes.txt").write_text("keep me")
    code, output = run_cli("--recipe", recipe, "--overwrite")
    assert code == 1 and "is not a prep output" in output, output
    assert (out / "rejects.jsonl" / "notes.txt").read_text() == "keep me"
