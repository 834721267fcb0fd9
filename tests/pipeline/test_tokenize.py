"""End-to-end `prep tokenize`: round trip, worker-count determinism, resume, safety, empty docs."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

import pipeline.executor as executor
import pipeline.run_units as run_units
from pipeline.cli import app
from pipeline.manifest import read_manifest
from pipeline.recipe import Recipe
from tests.conftest import demo_texts, read_split, tree_bytes, write_jsonl, write_recipe

runner = CliRunner()


def run_cli(*args) -> tuple[int, str]:
    result = runner.invoke(app, ["tokenize", *map(str, args), "--no-progress"])
    return result.exit_code, result.output


def tokenize(tmp: Path, corpus: Path, tokenizer: Path, out: Path, workers: int = 1, **kw) -> Path:
    recipe = write_recipe(tmp / f"r_{out.name}.yaml", corpus=corpus, tokenizer=tokenizer, out=out, **kw)
    code, output = run_cli("--recipe", recipe, "--num-workers", workers)
    assert code == 0, output
    return out


def decoded_docs(out: Path, tokenizer: Path) -> list[str]:
    tok = Tokenizer.from_file(str(tokenizer))
    eos = read_manifest(out).tokenizer["eos_id"]
    texts = []
    for split in read_manifest(out).splits:
        for ids in read_split(out, split):
            assert ids[-1] == eos and eos not in ids[:-1].tolist()  # exactly one boundary, at the end
            texts.append(tok.decode(ids[:-1].tolist(), skip_special_tokens=False))
    return texts


@pytest.mark.parametrize("workers", [1, 3])
def test_round_trip_every_document_in_order(tmp_path, demo_tokenizer, workers):
    texts = demo_texts(600)
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / f"out{workers}", workers, output__val_fraction=0.0)
    m = read_manifest(out)
    assert m.splits["train"].num_docs == len([t for t in texts if t])  # the empty one is counted, not written
    assert m.skipped == {"empty": 1}
    assert len(m.splits["train"].shards) > 1  # guard: the run really cut several shards from several units
    assert decoded_docs(out, demo_tokenizer) == [t for t in texts if t]


def test_the_workers_have_exited_when_tokenize_returns(tmp_path, demo_tokenizer, monkeypatch):
    """The pool is shut down without waiting once the last unit is in, so its workers exit while the
    last shard is placed; the run joins them before it returns: no worker outlives it, even one that
    takes a second to exit (shutdown(wait=False) forgets the thread that joins them: a later
    shutdown(wait=True) joined nothing)."""
    import multiprocessing

    from pipeline import run_units
    from tests.pipeline.slow_exit_context import SlowExitContext

    if "forkserver" in multiprocessing.get_all_start_methods():
        monkeypatch.setattr(run_units, "pool_context", SlowExitContext)
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(600))
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out", 3)
    assert read_manifest(out).splits["train"].num_docs > 0
    assert multiprocessing.active_children() == []


def test_val_split_partitions_documents(tmp_path, demo_tokenizer):
    texts = demo_texts()
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out", 2, output__val_fraction=0.1)
    m = read_manifest(out)
    n_val, n_train = m.splits["val"].num_docs, m.splits["train"].num_docs
    assert n_val + n_train == len(texts) - 1
    assert 0.06 < n_val / (n_val + n_train) < 0.14
    assert sorted(decoded_docs(out, demo_tokenizer)) == sorted(t for t in texts if t)


def test_output_identical_for_1_2_and_3_workers(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts())
    trees = [tree_bytes(tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / f"w{n}", n)) for n in (1, 2, 3)]
    assert len(trees[0]) > 6 and "manifest.json" in trees[0]
    assert trees[0] == trees[1] == trees[2]


def test_manifest_fields(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(200))
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out")
    raw = json.loads((out / "manifest.json").read_text())
    for key in ("format_version", "dtype", "vocab_size", "tokenizer", "splits", "skipped", "recipe", "created_by"):
        assert key in raw
    assert raw["dtype"] == "uint16" and raw["tokenizer"]["eos_id"] == 0
    assert raw["recipe"]["output"]["seed"] == 7 and "dir" not in raw["recipe"]["output"]
    for name, split in raw["splits"].items():
        for s in split["shards"]:
            assert len(s["sha256"]) == 64
            assert os.path.getsize(out / name / f"{s['name']}.bin") == 2 * s["num_tokens"]


def test_shards_respect_shard_tokens(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts())
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out", output__shard_tokens=20_000)
    shards = read_manifest(out).splits["train"].shards
    assert len(shards) >= 5
    assert all(s.num_tokens <= 20_000 for s in shards)
    for s in shards:
        assert (out / "train" / f"{s.name}.bin").stat().st_size == 2 * s.num_tokens


def test_rerun_on_complete_dataset_is_a_no_op_and_other_recipe_refused(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(100))
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out")
    before = tree_bytes(out)
    recipe = tmp_path / "r_out.yaml"
    code, output = run_cli("--recipe", recipe)
    assert code == 0 and "already complete" in output
    assert tree_bytes(out) == before
    other = write_recipe(tmp_path / "other.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=out,
                         output__seed=8)
    code, output = run_cli("--recipe", other)
    assert code == 1 and "different recipe" in output and "--overwrite" in output
    code, output = run_cli("--recipe", other, "--overwrite")
    assert code == 0 and read_manifest(out).recipe["output"]["seed"] == 8


def test_a_complete_dataset_whose_tokenizer_file_changed_is_refused_not_complete(tmp_path, demo_tokenizer):
    """The same recipe, its tokenizer.json edited in place: "already complete" before (an unfinished
    run was refused for the same change), and `prep inspect` then refused to decode the dataset."""
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(100))
    tok = tmp_path / "tok.json"
    d = json.loads(demo_tokenizer.read_text())
    tok.write_text(json.dumps(d))
    out = tokenize(tmp_path, corpus, tok, tmp_path / "out")
    made_with = read_manifest(out).tokenizer["sha256"]
    vocab = d["model"]["vocab"]
    a, b = (k for k, v in vocab.items() if v in (301, 302))
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two ids swapped
    tok.write_text(json.dumps(d))
    code, output = run_cli("--recipe", tmp_path / "r_out.yaml")
    assert code == 1 and "already holds a dataset made with another tokenizer at" in output and "--overwrite" in output
    code, output = run_cli("--recipe", tmp_path / "r_out.yaml", "--overwrite")
    assert code == 0, output
    assert read_manifest(out).tokenizer["sha256"] != made_with


def test_a_complete_dataset_whose_input_changed_says_so(tmp_path, demo_tokenizer):
    """"already complete, nothing to do" once said nothing when an input was edited after the run."""
    import os
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(100))
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out")
    code, output = run_cli("--recipe", tmp_path / "r_out.yaml")
    assert code == 0 and "already complete" in output and "changed after" not in output
    made = (out / "manifest.json").stat().st_mtime_ns
    write_jsonl(corpus, demo_texts(50))
    os.utime(corpus, ns=(made + 10**9, made + 10**9))  # a coarse clock could give both one stamp
    code, output = run_cli("--recipe", tmp_path / "r_out.yaml")
    assert code == 0 and "already complete" in output
    assert f"note: {corpus} changed after this dataset was made" in " ".join(output.split()), output
    assert "--overwrite rebuilds it" in output


def test_overwrite_deletes_the_old_output_while_units_run(tmp_path, demo_tokenizer, monkeypatch):
    """--overwrite renames the old files into .prep/trash and deletes them on a thread that the run
    joins at the end: the run starts without waiting, and nothing of the old output (nor the trash of
    an earlier run killed mid-delete) is left once it ends."""
    import threading

    import pipeline.journal as journal
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(100))
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out", output__shard_tokens=2000)
    old = {p.name for p in (out / "train").iterdir()}
    (out / "stray.txt").write_text("left by a user")
    stale = out / ".prep" / "trash" / "999-0"  # a run killed while it deleted
    stale.mkdir(parents=True)
    (stale / "old.bin").write_bytes(b"x" * 10)
    seen, release = [], threading.Event()
    real = journal._remove_all

    def held(paths):  # the deleter waits until units have run
        release.wait(30)
        real(paths)
    monkeypatch.setattr(journal, "_remove_all", held)
    real_accept = __import__("pipeline.run_units", fromlist=["_accept"])._accept

    def accept(*a, **k):  # a unit finishes while the old output is still in the trash
        seen.append(sorted(p.name for p in (out / ".prep" / "trash").iterdir()))
        release.set()
        return real_accept(*a, **k)
    monkeypatch.setattr("pipeline.run_units._accept", accept)
    recipe = write_recipe(tmp_path / "r2.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=out, output__seed=9,
                          output__shard_tokens=2000)
    code, output = run_cli("--recipe", recipe, "--overwrite")
    assert code == 0, output
    assert seen and "999-0" in seen[0] and len(seen[0]) >= 2  # the stale batch and this run's
    assert not (out / ".prep" / "trash").exists() and not (out / "stray.txt").exists()
    assert read_manifest(out).recipe["output"]["seed"] == 9 and len(old) > 2
    shards = read_manifest(out).splits["train"].shards
    assert {p.name for p in (out / "train").iterdir()} == {f"{x.name}.{e}" for x in shards for e in ("bin", "idx")}


@pytest.mark.parametrize("with_bare_state_dir", [False, True])
def test_refuses_foreign_nonempty_output(tmp_path, demo_tokenizer, with_bare_state_dir):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(10))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    if with_bare_state_dir:  # another tool's .prep/, or one left by a run killed before its plan
        (tmp_path / "out" / ".prep").mkdir()
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")
    code, output = run_cli("--recipe", recipe)
    assert code == 1 and "not a prep output" in output
    assert (tmp_path / "out" / "precious.txt").read_text() == "keep me"
    assert {p.name for p in (tmp_path / "out").iterdir()} <= {"precious.txt", ".prep"}


def test_overwrite_replaces_only_prep_output_and_never_what_the_run_reads(tmp_path, demo_tokenizer, monkeypatch):
    """--overwrite once emptied any directory: one of notes holding the run's own corpus (deleted, then
    a FileNotFoundError traceback), and with `-o ""` (an unset $OUT) the current directory."""
    import shutil
    texts = demo_texts(20)
    data = tmp_path / "data"
    corpus = write_jsonl(data / "c.jsonl", texts)
    (data / "notes.txt").write_text("keep me")
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=data)
    code, output = run_cli("--recipe", recipe, "--overwrite")
    assert code == 1 and "is not a prep output" in output and "--overwrite replaces only" in output, output
    assert sorted(p.name for p in data.iterdir()) == ["c.jsonl", "notes.txt"]

    monkeypatch.chdir(data)
    code, output = run_cli("--recipe", recipe, "--output", "", "--overwrite")
    assert code == 1 and "output.dir: empty" in output, output
    assert sorted(p.name for p in data.iterdir()) == ["c.jsonl", "notes.txt"]

    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out")  # a prep dataset, then inputs put in it
    inside = out / "c.jsonl"
    shutil.copy(corpus, inside)
    tok_inside = out / "tok.json"
    shutil.copy(demo_tokenizer, tok_inside)
    for corpus_at, tok_at, named in [(inside, demo_tokenizer, inside), (corpus, tok_inside, tok_inside)]:
        again = write_recipe(tmp_path / "r2.yaml", corpus=corpus_at, tokenizer=tok_at, out=out, output__seed=5)
        code, output = run_cli("--recipe", again, "--overwrite")
        assert code == 1 and f"--overwrite would delete {named}, which this run reads" in " ".join(output.split())
        assert inside.exists() and tok_inside.exists() and (out / "manifest.json").exists()


def test_a_run_killed_before_its_plan_leaves_an_output_that_a_rerun_takes(tmp_path, demo_tokenizer):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(10))
    (tmp_path / "out" / ".prep").mkdir(parents=True)
    (tmp_path / "out" / ".prep" / "lock").write_text("")
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")
    code, output = run_cli("--recipe", recipe)
    assert code == 0, output
    assert read_manifest(tmp_path / "out").splits["train"].num_docs > 0


def test_an_output_dir_that_cannot_be_made_or_written_is_one_line(tmp_path, demo_tokenizer, monkeypatch):
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(10))
    (tmp_path / "afile").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")  # mkdir said "cannot create ... (File exists)"
    for out, want in [(tmp_path / "afile", "is a file, not a directory"),
                      (tmp_path / "afile" / "sub", r"cannot create .*sub \(Not a directory\)"),
                      (tmp_path / "dangling", r"dangling is a symbolic link to .*gone, which does not exist; create "
                                              "that directory, or choose another --output")]:
        recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=out)
        code, output = run_cli("--recipe", recipe)
        assert code == 1 and output.startswith(f"error: {recipe}:4: output.dir: ") and str(out) in output, output
        assert re.search(want, output) and "Traceback" not in output, output
    # a permission error under the output directory during the run (as for a non-root user)
    import pipeline.journal as journal
    real = journal.write_json_atomic

    def refuse(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(journal, "write_json_atomic", refuse)
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=out)
    code, output = run_cli("--recipe", recipe)
    assert code == 1 and f"error: {out / '.prep'}" in output and "cannot write (Permission denied)" in output, output
    monkeypatch.setattr(journal, "write_json_atomic", real)


def test_resume_after_kill_equals_uninterrupted_run(tmp_path, demo_tokenizer):
    texts = demo_texts() * 6  # ~7 MB: ~110 units of 64 KiB
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    clean = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "clean", 2)
    out = tmp_path / "killed"
    recipe = write_recipe(tmp_path / "killed.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=out)
    cmd = [sys.executable, "-m", "pipeline.cli", "tokenize", "--recipe", str(recipe), "-j", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    journal = out / ".prep" / "journal.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and not (journal.exists() and journal.read_text().count("\n") >= 5):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the parent and its workers, like a lost machine
    proc.wait()
    finished = journal.read_text().count("\n")
    assert 5 <= finished < 100, finished  # guard: killed mid-run, not before or after
    assert not (out / "manifest.json").exists()
    units = [json.loads(x) for x in journal.read_text().splitlines() if '"status"' in x]
    result = executor.tokenize(Recipe.from_yaml(str(recipe), []), num_workers=3, show_progress=False)
    assert tree_bytes(out) == tree_bytes(clean)
    # the summary's rates are the resumed run's own: its units' bytes and tokens, not the dataset's
    total = sum(s.num_tokens for s in read_manifest(out).splits.values())
    assert result.units_run == result.units_total - len(units)
    assert result.tokens_run == total - sum(sum(u["num_tokens"].values()) for u in units) < total


def test_pool_broken_at_submit_is_a_named_error_not_a_traceback(tmp_path, demo_tokenizer, monkeypatch):
    """A worker that dies while another unit's result comes out of the same wait() breaks the pool
    before the next submit(): that is the dead-worker error too (it escaped as a traceback)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool


    class BreaksOnFifthSubmit(ProcessPoolExecutor):
        submits = 0

        def submit(self, *args, **kwargs):
            type(self).submits += 1
            if type(self).submits == 5:  # after the first 2 x workers, i.e. once a unit is accepted
                raise BrokenProcessPool("A child process terminated abruptly, the process pool is not usable anymore")
            return super().submit(*args, **kwargs)

    monkeypatch.setattr(run_units, "ProcessPoolExecutor", BreaksOnFifthSubmit)
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts() * 2)
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer, out=tmp_path / "out")
    result = runner.invoke(app, ["tokenize", "--recipe", str(recipe), "-j", "2", "--no-progress"])
    assert BreaksOnFifthSubmit.submits == 5  # guard: the pool did break at a submit
    assert result.exit_code == 1 and not isinstance(result.exception, BrokenProcessPool), result.exception
    assert "a worker process died" in result.output and "re-run the same command to resume" in result.output
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_large_vocabulary_gives_int32_and_ids_never_wrap(tmp_path):
    from tokenizers import models, pre_tokenizers
    vocab = {f"w{i}": i for i in range(70_000)}
    vocab["<|endoftext|>"] = 70_000
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(tmp_path / "big.json"))
    corpus = write_jsonl(tmp_path / "c.jsonl", ["w69999 w65536 w1", "w65535 w12"])
    out = tokenize(tmp_path, corpus, tmp_path / "big.json", tmp_path / "out", output__val_fraction=0.0)
    m = read_manifest(out)
    assert m.dtype == "int32"
    docs = read_split(out, "train")
    assert [d.tolist() for d in docs] == [[69999, 65536, 1, 70000], [65535, 12, 70000]]


@pytest.mark.parametrize("backend", ["auto", "hf"])
@pytest.mark.parametrize("moved_to, dtype", [(5_000, "uint16"), (70_000, "int32")])
def test_a_vocabulary_with_holes_gets_the_size_of_its_largest_id(tmp_path, demo_tokenizer, backend, moved_to, dtype):
    """A tokenizer.json whose ids are not 0..n-1 (one token moved past the others): the manifest's
    vocab_size was the count of tokens, so an id of 5000 went into a dataset of "vocab_size 1000" that
    `prep verify` then called damaged, and an id of 70000 failed every unit ("does not fit uint16")."""
    from pipeline.verify import verify_dataset
    d = json.loads(demo_tokenizer.read_text())
    vocab = d["model"]["vocab"]
    word = next(w for w, i in vocab.items() if i > 300 and w.startswith("\u0120") and w[1:].isalpha())
    vocab[word] = moved_to
    tok_path = tmp_path / "holes.json"
    tok_path.write_text(json.dumps(d))
    texts = [f"a {word[1:]} and {word[1:]} again", "nothing moved here"]
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    out = tokenize(tmp_path, corpus, tok_path, tmp_path / "out", output__val_fraction=0.0,
                   tokenizer__backend=backend)
    m = read_manifest(out)
    assert (m.vocab_size, m.dtype) == (moved_to + 1, dtype)
    ids = np.concatenate(read_split(out, "train"))
    assert moved_to in ids.tolist()  # guard: the moved token is in the dataset
    assert verify_dataset(out).problems == []
    assert decoded_docs(out, tok_path) == texts


def test_special_token_text_is_plain_text(tmp_path, demo_tokenizer):
    text = "before <|endoftext|> after"
    corpus = write_jsonl(tmp_path / "c.jsonl", [text])
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out", output__val_fraction=0.0)
    (ids,) = read_split(out, "train")
    eos = read_manifest(out).tokenizer["eos_id"]
    assert ids.tolist().count(eos) == 1 and ids[-1] == eos  # only the boundary we added
    assert Tokenizer.from_file(str(demo_tokenizer)).decode(ids[:-1].tolist()) == text


def test_tokenizer_json_truncation_is_switched_off(tmp_path, demo_tokenizer):
    tok = Tokenizer.from_file(str(demo_tokenizer))
    tok.enable_truncation(max_length=5)
    tok.enable_padding(length=64)
    tok.save(str(tmp_path / "trunc.json"))
    text = " ".join(["the loader packs long documents deterministically"] * 40)
    corpus = write_jsonl(tmp_path / "c.jsonl", [text])
    out = tokenize(tmp_path, corpus, tmp_path / "trunc.json", tmp_path / "out", output__val_fraction=0.0)
    (ids,) = read_split(out, "train")
    assert len(ids) > 100
    assert Tokenizer.from_file(str(demo_tokenizer)).decode(ids[:-1].tolist()) == text


@pytest.mark.parametrize("boundary,expect", [("bos", "bos"), ("both", "both"), ("none", "none")])
def test_boundary_policies(tmp_path, demo_tokenizer, boundary, expect):
    corpus = write_jsonl(tmp_path / "c.jsonl", ["alpha beta", "gamma"])
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out", output__val_fraction=0.0,
                   tokenizer__boundary=boundary)
    tok = Tokenizer.from_file(str(demo_tokenizer))
    raw = [tok.encode(t, add_special_tokens=False).ids for t in ("alpha beta", "gamma")]
    b = read_manifest(out).tokenizer["eos_id"]
    want = {"bos": [[b] + r for r in raw], "both": [[b] + r + [b] for r in raw], "none": raw}[expect]
    assert [d.tolist() for d in read_split(out, "train")] == want


def test_bad_records_counted_and_listed(tmp_path, demo_tokenizer):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "good one"}\n{"text": \n{"body": "x"}\n{"text": null}\n{"text": 5}\n{"text": "ok"}\n')
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "out", output__val_fraction=0.0)
    m = read_manifest(out)
    assert m.splits["train"].num_docs == 2
    assert m.skipped == {"malformed_json": 1, "missing_field": 1, "null_text": 1, "non_string_text": 1}
    rows = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rows] == ["malformed_json", "missing_field", "null_text", "non_string_text"]
    assert rows[1]["position"] == len('{"text": "good one"}\n{"text": \n')


def test_compressed_inputs_match_plain(tmp_path, demo_tokenizer):
    import gzip

    import zstandard
    texts = demo_texts(300)
    plain = write_jsonl(tmp_path / "p" / "c.jsonl", texts)
    data = plain.read_bytes()
    (tmp_path / "g").mkdir()
    (tmp_path / "z").mkdir()
    (tmp_path / "g" / "c.jsonl.gz").write_bytes(gzip.compress(data))
    (tmp_path / "z" / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    outs = [tokenize(tmp_path, p, demo_tokenizer, tmp_path / f"o{i}", output__val_fraction=0.0,
                     output__shard_tokens=10**9)
            for i, p in enumerate([plain, tmp_path / "g" / "c.jsonl.gz", tmp_path / "z" / "c.jsonl.zst"])]
    bins = [(o / "train" / "shard-000000.bin").read_bytes() for o in outs]
    assert len(bins[0]) > 1000 and bins[0] == bins[1] == bins[2]


def test_glob_and_list_of_paths_keep_order(tmp_path, demo_tokenizer):
    texts = demo_texts(90)
    for i in range(3):
        write_jsonl(tmp_path / "d" / f"part{i}.jsonl", texts[i * 30:(i + 1) * 30])
    out = tokenize(tmp_path, str(tmp_path / "d" / "*.jsonl"), demo_tokenizer, tmp_path / "o1",
                   output__val_fraction=0.0)
    assert decoded_docs(out, demo_tokenizer) == [t for t in texts if t]


def test_a_file_two_paths_of_a_source_match_is_read_once_where_first_listed(tmp_path, demo_tokenizer, caplog):
    """[part1.jsonl, *.jsonl] read part1 twice: its documents twice in the dataset, silently."""
    texts = [t for t in demo_texts(90) if t]
    parts = [write_jsonl(tmp_path / "d" / f"part{i}.jsonl", texts[i::3]) for i in range(3)]
    paths = [str(parts[1]), str(tmp_path / "d" / "*.jsonl"), str(tmp_path / "d" / "." / "part2.jsonl")]
    with caplog.at_level(logging.WARNING, logger="prep"):
        out = tokenize(tmp_path, "unused", demo_tokenizer, tmp_path / "o", output__val_fraction=0.0,
                       source__path=paths)
    assert decoded_docs(out, demo_tokenizer) == texts[1::3] + texts[0::3] + texts[2::3]
    warned = [r.message for r in caplog.records if "more than one of its paths" in r.message]
    assert len(warned) == 1 and f"{parts[1]}, {paths[2]} are matched by more than one of its paths; read once, " \
                                "where first listed" in warned[0], warned
    # under two sources a file is read by each (an upsampling, say)
    twice = Recipe.from_dict({"name": "t", "sources": [{"path": str(parts[0])}, {"path": paths[1]}],
                              "tokenizer": {"path": str(demo_tokenizer)}, "output": {"dir": str(tmp_path / "o2")}})
    assert [s.expand_files() for s in twice.sources] == [[str(parts[0])], list(map(str, parts))]


def test_a_file_named_with_glob_characters_is_that_file_and_file_urls_name_local_paths(tmp_path, demo_tokenizer):
    """"data[1].jsonl" was a pattern: it matched nothing, or "data1.jsonl" beside it, read silently in
    its place; an output `file:///x` went to a directory named "file:" under the current one."""
    texts = demo_texts(60)
    named = write_jsonl(tmp_path / "d" / "data[1].jsonl", texts[:30])
    write_jsonl(tmp_path / "d" / "data1.jsonl", texts[30:])  # what the pattern matches
    out = tokenize(tmp_path, named, demo_tokenizer, tmp_path / "o", output__val_fraction=0.0)
    assert decoded_docs(out, demo_tokenizer) == [t for t in texts[:30] if t]
    url_out = tmp_path / "u"
    tokenize(tmp_path, f"file://{named}", demo_tokenizer, url_out, output__val_fraction=0.0,
             output__dir=f"file://{url_out}")
    assert decoded_docs(url_out, demo_tokenizer) == [t for t in texts[:30] if t]
    assert not (Path.cwd() / "file:").exists()


@pytest.mark.parametrize("given", ["dir", "glob"])
def test_an_output_inside_the_source_directory_is_not_read_back(tmp_path, demo_tokenizer, given):
    """The second run read the first's manifest.json and rejects.jsonl as JSON input (its plan
    changed), and --overwrite died with a traceback deleting them."""
    texts = demo_texts(40)
    d = tmp_path / "data"
    write_jsonl(d / "a.jsonl", texts[:20])
    write_jsonl(d / "b.jsonl", texts[20:])
    (d / "a.jsonl").write_text((d / "a.jsonl").read_text() + "not json\n")  # a reject: rejects.jsonl
    source = d if given == "dir" else d / "**" / "*.json*"
    out = tokenize(tmp_path, source, demo_tokenizer, d / "out", output__val_fraction=0.0)
    assert (out / "rejects.jsonl").exists()
    first = decoded_docs(out, demo_tokenizer)
    recipe = tmp_path / "r_out.yaml"
    code, output = run_cli("--recipe", recipe, "--num-workers", 1)
    assert code == 0 and "already complete" in output, output
    code, output = run_cli("--recipe", recipe, "--num-workers", 1, "--overwrite")
    assert code == 0, output
    assert decoded_docs(out, demo_tokenizer) == first == [t for t in texts if t]


def test_another_runs_dataset_inside_the_source_directory_is_not_input(tmp_path, demo_tokenizer):
    """A second dataset from the same directory (`-o data/tok2` after `-o data/tok`) once failed:
    data/tok/manifest.json was read as a JSON object (set records_field), rejects.jsonl as input."""
    texts = demo_texts(40)
    d = tmp_path / "data"
    write_jsonl(d / "a.jsonl", texts)
    (d / "a.jsonl").write_text((d / "a.jsonl").read_text() + "not json\n")  # a reject: rejects.jsonl
    (d / "notes").mkdir()
    (d / "notes" / "manifest.json").write_text(json.dumps({"text": "a user's file of that name"}) + "\n")
    first = tokenize(tmp_path, d, demo_tokenizer, d / "tok", output__val_fraction=0.0)
    assert (first / "rejects.jsonl").exists()
    second = tokenize(tmp_path, d, demo_tokenizer, d / "tok2", output__val_fraction=0.0)
    want = [t for t in texts if t] + ["a user's file of that name"]  # a manifest.json prep did not write is input
    assert sorted(decoded_docs(second, demo_tokenizer)) == sorted(want)
    assert read_manifest(second).splits["train"].num_docs == read_manifest(first).splits["train"].num_docs


def test_another_runs_rejects_listed_by_a_glob_without_its_manifest_is_not_input(tmp_path, demo_tokenizer):
    """`data/**/*.jsonl` lists an earlier run's data/tok/rejects.jsonl but not the manifest.json beside
    it, which was how a dataset was known: its rejects were read as 1 more document. A corpus kept
    inside a dataset's directory (not its own files) is still input."""
    texts = demo_texts(40)
    d = tmp_path / "data"
    write_jsonl(d / "a.jsonl", texts[:30])
    (d / "a.jsonl").write_text((d / "a.jsonl").read_text() + "not json\n")  # a reject: rejects.jsonl
    first = tokenize(tmp_path, d / "a.jsonl", demo_tokenizer, d / "tok", output__val_fraction=0.0)
    assert (first / "rejects.jsonl").exists()
    write_jsonl(d / "tok" / "more" / "b.jsonl", texts[30:])  # a user's corpus inside the dataset's directory
    second = tokenize(tmp_path, d / "**" / "*.jsonl", demo_tokenizer, tmp_path / "tok2", output__val_fraction=0.0)
    assert sorted(decoded_docs(second, demo_tokenizer)) == sorted(t for t in texts if t)


def test_ids_match_direct_encoding(tmp_path, demo_tokenizer):
    texts = demo_texts(50)
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    out = tokenize(tmp_path, corpus, demo_tokenizer, tmp_path / "o", output__val_fraction=0.0)
    tok = Tokenizer.from_file(str(demo_tokenizer))
    tok.encode_special_tokens = True  # doc 11 mentions <|endoftext|>: plain text, as prep encodes it
    want = [np.array(tok.encode(t, add_special_tokens=False).ids + [0]) for t in texts if t]
    got = read_split(out, "train")
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("where", ["recipe", "--output"])
def test_a_tilde_in_the_output_dir_is_the_home_directory(tmp_path, demo_tokenizer, monkeypatch, where):
    """`output.dir: ~/ds` (or `--output=~/ds`, which the shell leaves alone) made a directory named "~"
    in the working directory; source.path and the tokenizer's path expanded ~ already."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    corpus = write_jsonl(tmp_path / "c.jsonl", demo_texts(10))
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=demo_tokenizer,
                          out="~/ds" if where == "recipe" else tmp_path / "unused")
    code, output = run_cli("--recipe", recipe, *(["--output=~/ds"] if where == "--output" else []))
    assert code == 0, output
    assert (home / "ds" / "manifest.json").is_file()
    assert list(work.iterdir()) == []
