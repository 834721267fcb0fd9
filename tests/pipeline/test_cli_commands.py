"""`prep inspect` and `prep bench-loader` on a small dataset made by `prep tokenize`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.conftest import demo_texts, write_jsonl, write_recipe

runner = CliRunner()


def make_dataset(tmp_path, demo_tokenizer):
    texts = demo_texts(300)
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          output__val_fraction=0.0)
    result = runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"])
    assert result.exit_code == 0, result.output
    return tmp_path / "out", texts


def test_inspect_prints_splits_and_decodes_documents(tmp_path, demo_tokenizer):
    out, texts = make_dataset(tmp_path, demo_tokenizer)
    result = runner.invoke(app, ["inspect", str(out), "--docs", "2"])
    assert result.exit_code == 0, result.output
    assert "train" in result.output and f"{len([t for t in texts if t]):,}" in result.output
    assert texts[0] + "<|endoftext|>" in result.output and texts[1] in result.output


def test_inspect_missing_dataset_is_one_line(tmp_path):
    result = runner.invoke(app, ["inspect", str(tmp_path)])
    assert result.exit_code == 1 and "no manifest.json" in result.output


def test_inspect_decodes_with_a_tokenizer_given_where_the_recorded_path_does_not_resolve(
        tmp_path, demo_tokenizer, monkeypatch):
    out, texts = make_dataset(tmp_path, demo_tokenizer)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tokenizer"]["name"] = "tok/tokenizer.json"  # as given, relative, to `prep tokenize`
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["inspect", str(out), "--docs", "1"])
    assert result.exit_code == 1 and "--tokenizer PATH" in result.output
    result = runner.invoke(app, ["inspect", str(out), "--docs", "1", "--tokenizer", str(demo_tokenizer)])
    assert result.exit_code == 0, result.output
    assert texts[0] in result.output


def _cut(path):
    path.write_bytes(path.read_bytes()[:100])


def _swap_offsets(idx):
    """Documents 1 and 2 of a shard swap their byte offsets: sizes stay right, the index does not tile."""
    import struct
    raw = bytearray(idx.read_bytes())
    at = 34 + 4 * struct.unpack_from("<Q", raw, 18)[0] + 8
    raw[at:at + 16] = raw[at + 8:at + 16] + raw[at:at + 8]
    idx.write_bytes(bytes(raw))


def _shift_length(idx):
    """One token moves from document 1's length to document 0's: every document prints cut or run on."""
    import struct
    raw = bytearray(idx.read_bytes())
    a, b = struct.unpack_from("<ii", raw, 34)
    struct.pack_into("<ii", raw, 34, a + 1, b - 1)
    idx.write_bytes(bytes(raw))


def _write_id(out, token, value):
    """Token `token` of the first shard becomes `value`; with the manifest's sha256 kept or updated."""
    import hashlib
    import struct
    b = out / "train" / "shard-000000.bin"
    with open(b, "r+b") as f:
        f.seek(2 * token)
        f.write(struct.pack("<H", value))
    return hashlib.sha256(b.read_bytes()).hexdigest()


def _oov_resealed(out):
    """An id past the vocabulary, with a sha256 that matches (a tool that rewrote the manifest)."""
    sha = _write_id(out, 3, 65000)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["sha256"] = sha
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, fragment", [
    (lambda out: _cut(out / "train" / "shard-000000.bin"), "truncated"),
    (lambda out: (out / "train" / "shard-000000.bin").write_bytes(b""), "truncated"),
    (lambda out: (out / "train" / "shard-000000.idx").unlink(), "missing"),
    (lambda out: (out / "manifest.json").write_text("[]"), "not a JSON object"),
    (lambda out: (out / "manifest.json").write_bytes(b"\xff\xfe{"), "not valid JSON"),
    # sizes right, contents not: these printed wrong documents, exit 0
    (lambda out: _swap_offsets(out / "train" / "shard-000000.idx"), "byte offset of document 1"),
    (lambda out: _shift_length(out / "train" / "shard-000000.idx"), "byte offset of document 1"),
    (lambda out: _write_id(out, 3, 7), "sha256"),
    (_oov_resealed, "token id 65000 at token 3 (document 0) is not below the vocabulary size"),
    (lambda out: (out / "train" / "shard-000099.bin").write_bytes(b"\0\0"), "not listed in the manifest"),
])
def test_inspect_of_a_damaged_dataset_names_the_damage_and_prints_no_documents(
        tmp_path, demo_tokenizer, damage, fragment):
    out, texts = make_dataset(tmp_path, demo_tokenizer)
    damage(out)
    result = runner.invoke(app, ["inspect", str(out), "--docs", "2"])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # one line, not a traceback
    assert fragment in result.output
    assert "--- train/" not in result.output  # a cut .bin once printed other documents' tokens, exit 0


def test_bench_loader_reports_each_mode(tmp_path, demo_tokenizer):
    pytest.importorskip("torch")  # an optional dependency: the next test covers its absence
    out, _ = make_dataset(tmp_path, demo_tokenizer)
    result = runner.invoke(app, ["bench-loader", str(out), "--mode", "windows", "--mode", "packed",
                                 "--workers", "0", "--batch-size", "2", "--seq-len", "64", "--num-batches", "5"])
    assert result.exit_code == 0, result.output
    assert "windows" in result.output and "packed" in result.output


def test_bench_loader_on_a_split_smaller_than_a_batch_gives_advice_it_can_take(tmp_path, demo_tokenizer):
    pytest.importorskip("torch")
    out, _ = make_dataset(tmp_path, demo_tokenizer)  # ~36,000 tokens: ~35 windows of 1024
    result = runner.invoke(app, ["bench-loader", str(out), "--mode", "windows", "--workers", "0",
                                 "--batch-size", "64", "--num-batches", "1"])
    assert result.exit_code == 1, result.output
    assert "fewer than one batch of 64" in result.output and "--batch-size" in result.output
    assert "drop_last" not in result.output  # the loader's own advice names an option this command lacks


def test_bench_loader_without_torch_says_how_to_install_it(tmp_path, demo_tokenizer, monkeypatch):
    import importlib.util
    out, _ = make_dataset(tmp_path, demo_tokenizer)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    result = runner.invoke(app, ["bench-loader", str(out)])
    assert result.exit_code == 1
    assert "PyTorch, which is not installed here" in result.output and "torch>=2.4" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args, name", [(["--workers", "-1"], "--workers"), (["--step-ms", "-5"], "--step-ms"),
                                        (["--num-batches", "0"], "--num-batches")])
def test_bench_loader_refuses_values_that_cannot_be_measured(tmp_path, args, name):
    """A traceback (torch's num_workers check, time.sleep of a negative time) or a table of zeros, exit 0."""
    (tmp_path / "manifest.json").write_text("{}")
    result = runner.invoke(app, ["bench-loader", str(tmp_path), *args])
    assert result.exit_code == 2 and result.output.startswith(f"error: {name}: "), result.output


def test_inspect_reads_the_manifest_once(tmp_path, demo_tokenizer, monkeypatch):
    """It read manifest.json itself, then again through check_dataset's quick check; the output is the same."""
    from pathlib import Path

    out, _ = make_dataset(tmp_path, demo_tokenizer)
    before = runner.invoke(app, ["inspect", str(out)])
    reads, real = [], Path.read_bytes

    def counting(self):
        if self.name == "manifest.json":
            reads.append(self)
        return real(self)
    monkeypatch.setattr(Path, "read_bytes", counting)
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output == before.output and len(reads) == 1
    reads.clear()  # and a re-run of a complete dataset: read for "already complete", checked with that one
    again = runner.invoke(app, ["tokenize", "-r", str(tmp_path / "r.yaml"), "--no-progress"])
    assert again.exit_code == 0 and "already complete" in again.output and len(reads) == 1


@pytest.mark.parametrize("command", ["verify", "inspect", "bench-loader"])
def test_a_url_dataset_is_told_to_use_a_local_copy(command):
    """typer's Path made `s3://bucket/ds` into `s3:/bucket/ds` and the command said "no such directory"
    (verify) or "no manifest.json" (inspect) of a path the user never gave."""
    result = runner.invoke(app, [command, "s3://bucket/ds"])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: s3://bucket/ds: a URL; `prep {command}` reads a local directory: "
                                    "give it the run's staging copy (output.local_dir"), result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_file_url_dataset_is_its_local_directory(tmp_path, demo_tokenizer):
    out, _ = make_dataset(tmp_path, demo_tokenizer)
    for command in ("verify", "inspect"):
        result = runner.invoke(app, [command, f"file://{out}"])
        assert result.exit_code == 0, result.output


@pytest.fixture
def signal_handlers():
    """The test process's SIGINT/SIGTERM handlers, put back after a test that signals itself."""
    import signal
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_second_ctrl_c_does_not_cut_the_cleanup_short(signal_handlers, capsys):
    """The first Ctrl-C stops the command; a second one (an impatient double press) arrived while the
    run stopped its workers and dropped its shard being built, and cut that short: a traceback per cut,
    the process killed by SIGINT."""
    import os
    import signal

    from pipeline.tokenize_command import exit_code
    cleaned = []

    def run():
        try:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, mid-run
            raise AssertionError("not interrupted")
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # and again, while the run stops its workers
            cleaned.append(True)

    assert exit_code(run, hint="finished units are kept") == 130
    assert cleaned == [True]
    assert capsys.readouterr().err == "interrupted: finished units are kept\n"


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_ctrl_c_in_a_command_with_nothing_to_resume_says_only_interrupted(tmp_path, demo_tokenizer, monkeypatch,
                                                                          command):
    """The resume hint ("finished units are kept; re-run the same command to resume") is tokenize's:
    every command printed it."""
    from pipeline import manifest
    out, _ = make_dataset(tmp_path, demo_tokenizer)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(manifest, "read_manifest", ctrl_c)
    monkeypatch.setattr("pipeline.verify.verify_dataset", ctrl_c)
    result = runner.invoke(app, [command, str(out)])
    assert result.exit_code == 130
    assert result.output == "interrupted\n"


@pytest.mark.parametrize("command", ["tokenize", "verify", "inspect", "bench-loader"])
def test_help_cuts_no_option_text_on_80_columns(command):
    """Rich cuts a word longer than the help column with "…": --set's example was
    `output.shard_toke…` on an 80-column terminal (and in a log)."""
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and "--help" in result.output
    assert "…" not in result.output, result.output


def test_inspect_decodes_a_tiktoken_dataset(tmp_path, monkeypatch):
    """A `tokenizer.path: tiktoken:<name>` dataset: inspect loaded every tokenizer with backend hf, which
    refuses tiktoken names, and told the user to pass a tokenizer.json (whose sha256 could never match)."""
    tiktoken = pytest.importorskip("tiktoken")
    import numpy as np

    import pipeline.tokenizers as tok_mod
    from pipeline.manifest import Manifest, SplitInfo, write_manifest
    from pipeline.recipe import TokenizerConfig
    from pipeline.shards import ShardWriter

    # a byte-level encoding built here: the named ones are downloaded on first use (no network in tests)
    enc = tiktoken.Encoding("bytes", pat_str=r"\S+|\s+", mergeable_ranks={bytes([i]): i for i in range(256)},
                            special_tokens={"<|endoftext|>": 256})
    monkeypatch.setattr(tok_mod, "_tiktoken_encoding", lambda name: enc)
    spec = tok_mod.load_tokenizer(TokenizerConfig(path="tiktoken:bytes", backend="tiktoken"))
    texts = ["first document", "second one"]
    docs = [enc.encode_ordinary(t) + [spec.eos_id] for t in texts]
    out = tmp_path / "out"
    with ShardWriter(out / "train", "shard-000000", np.dtype(np.uint16)) as w:
        w.add_documents(np.concatenate(docs).astype(np.uint16), np.array([len(d) for d in docs]))
    write_manifest(out, Manifest(dtype="uint16", vocab_size=spec.vocab_size, tokenizer=spec.manifest_dict(),
                                 splits={"train": SplitInfo(2, w.info.num_tokens, (w.info,))}))
    result = runner.invoke(app, ["inspect", str(out), "--docs", "2"])
    assert result.exit_code == 0, result.output
    assert "first document<|endoftext|>" in result.output and "second one<|endoftext|>" in result.output


@pytest.mark.parametrize("args", [["--docs", "1"], []])
def test_inspect_refuses_an_unknown_split_first_naming_the_splits(tmp_path, demo_tokenizer, args):
    """With -n it printed the whole summary, then the error; without it a bad --split was ignored, exit 0."""
    out, _ = make_dataset(tmp_path, demo_tokenizer)
    result = runner.invoke(app, ["inspect", str(out), "--split", "trian", *args])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == (f"error: --split trian: {out} has no split of that name; it has train "
                             '(did you mean "train"?)\n')


def test_inspect_without_split_or_docs_reads_a_dataset_that_has_no_train_split(tmp_path, demo_tokenizer):
    """--split's default (train) is only the split --docs prints: a summary asks for no split."""
    out, _ = make_dataset(tmp_path, demo_tokenizer)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["splits"]["corpus"] = manifest["splits"].pop("train")
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "train").rename(out / "corpus")
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0 and "corpus" in result.output, result.output
    result = runner.invoke(app, ["inspect", str(out), "-n", "1"])
    assert result.exit_code == 1 and result.output.startswith(f"error: --split train: {out} has no split of that "
                                                              "name; it has corpus\n"), result.output


def test_bench_loader_refuses_an_unknown_split_naming_the_option(tmp_path, demo_tokenizer):
    """The loader's "manifest.json: no split 'nope'; it has ['train']" named neither the option nor its fix."""
    out, _ = make_dataset(tmp_path, demo_tokenizer)
    result = runner.invoke(app, ["bench-loader", str(out), "--split", "nope"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == f"error: --split nope: {out} has no split of that name; it has train\n"


def test_verify_help_names_the_document_boundary_check():
    """The check every document's boundary id went into `prep verify` without a word in its -h."""
    result = runner.invoke(app, ["verify", "-h"], env={"COLUMNS": "200"})
    text = " ".join(result.output.split())
    assert result.exit_code == 0
    assert "every document starting / ending with the boundary id the manifest records" in text, text
    assert "(no sha256, no token-id check, no boundary check)" in text, text  # --quick skips it


@pytest.mark.parametrize("command", ["verify", "inspect", "bench-loader"])
def test_an_empty_dataset_argument_is_refused_not_taken_for_the_current_directory(tmp_path, demo_tokenizer,
                                                                                   monkeypatch, command):
    """`prep verify "$OUT"` with OUT unset: Path("") is ".", and a dataset there was checked: "ok: ."."""
    out, _ = make_dataset(tmp_path, demo_tokenizer)
    monkeypatch.chdir(out)
    result = runner.invoke(app, [command, ""])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.output == (f"error: `prep {command}` was given an empty DIR (an unset shell variable?); give the "
                             "dataset's directory, the one holding manifest.json (`.` for the current one)\n")


def test_inspect_tokenizer_option_errors_name_the_option(tmp_path, demo_tokenizer):
    """An empty --tokenizer was ignored (the manifest's path decoded instead); a bad one was reported as
    the recipe key "tokenizer.path", which inspect has no recipe for."""
    out, _ = make_dataset(tmp_path, demo_tokenizer)
    result = runner.invoke(app, ["inspect", str(out), "-n", "1", "--tokenizer", ""])
    assert result.exit_code == 1 and result.output.startswith("error: --tokenizer is empty"), result.output
    assert "--- train/" not in result.output
    result = runner.invoke(app, ["inspect", str(out), "-n", "1", "--tokenizer", str(tmp_path)])
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]  # after the summary, as the tokenizer's other errors
    assert last.startswith(f"error: --tokenizer {tmp_path} is a directory without tokenizer.json"), result.output


@pytest.mark.parametrize("command", ["inspect", "bench-loader"])
def test_a_run_stopped_before_its_manifest_is_named_with_how_to_finish_it(tmp_path, demo_tokenizer, command):
    """A `prep tokenize` output whose run is still writing or stopped (DIR/.prep, no manifest.json yet):
    inspect said "the dataset is missing or incomplete (finish it with `prep tokenize`)", bench-loader
    "point bench-loader at a `prep tokenize` output", though it is one. Both now say a run is writing it
    or stopped, and that re-running the same command finishes it; which it does."""
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(300))
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out",
                          output__val_fraction=0.0)
    tokenize = [sys.executable, "-m", "pipeline.cli", "tokenize", "-r", str(recipe), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PREP_FAULT": "start:1:int"}
    stopped = subprocess.run(tokenize, capture_output=True, text=True, env=env, timeout=120)  # Ctrl-C at its start
    assert stopped.returncode == 130 and (tmp_path / "out" / ".prep").is_dir(), stopped.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()
    result = runner.invoke(app, [command, str(tmp_path / "out")])
    assert result.exit_code == 1
    out = tmp_path / "out"
    assert result.output.strip() == (
        f"error: {out}: no manifest.json yet: a `prep tokenize` run is writing this dataset or stopped before "
        f"finishing it ({out / '.prep'} holds its state); wait for it to end, or re-run the same `prep tokenize` "
        f"command to finish it, then run `prep {command}` again"), result.output
    del env["PREP_FAULT"]
    assert subprocess.run(tokenize, capture_output=True, text=True, env=env, timeout=120).returncode == 0
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0


def test_verify_of_a_dataset_from_a_newer_prep_says_to_use_that_prep_not_to_restore_it(tmp_path, demo_tokenizer):
    """Its summary said "restore manifest.json from a copy", as for a damaged manifest, below the line
    saying to upgrade prep: a newer format is not damage."""
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(30))
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")
    assert runner.invoke(app, ["tokenize", "-r", str(recipe), "--no-progress"]).exit_code == 0
    manifest = tmp_path / "out" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"format_version": 1', '"format_version": 2'))
    result = runner.invoke(app, ["verify", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "format_version 2; this prep reads version 1 (upgrade prep" in result.output
    assert "restore manifest.json" not in result.output
    assert f"{tmp_path / 'out'}: written by a newer prep" in result.output
