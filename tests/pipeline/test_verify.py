"""`prep verify` / `pipeline.verify`: every check fires on the damage it is for, names the file, and
stays quiet on an intact dataset. Each damaged case asserts the exact problem lines, so a check that
silently stopped working (a vacuous pass) fails here."""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest
from typer.testing import CliRunner

import pipeline.verify as verify_mod
from pipeline.cli import app
from pipeline.manifest import (
    IDX_HEADER_BYTES,
    Manifest,
    SplitInfo,
    read_idx,
    read_manifest,
    write_manifest,
)
from pipeline.shards import ShardWriter
from pipeline.verify import check_dataset, verify_dataset
from tests.conftest import DEMO_TOKENIZER, demo_texts, write_jsonl, write_recipe

runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A real dataset: 600 demo documents, 2 splits, several train shards."""
    from pipeline.executor import tokenize
    from pipeline.recipe import Recipe

    tmp = tmp_path_factory.mktemp("verify")
    corpus = write_jsonl(tmp / "c.jsonl", demo_texts(600))
    recipe = write_recipe(tmp / "r.yaml", corpus=corpus, tokenizer=DEMO_TOKENIZER, out=tmp / "out",
                          output__shard_tokens=20000)
    tokenize(Recipe.from_yaml(recipe), show_progress=False)
    m = read_manifest(tmp / "out")
    assert len(m.splits["train"].shards) >= 3 and m.splits["val"].num_docs > 0
    return tmp / "out"


@pytest.fixture
def ds(tmp_path, built):
    out = tmp_path / "ds"
    shutil.copytree(built, out)
    return out


def problems(root, level="full"):
    return verify_dataset(root, level).problems


def edit_manifest(root, fn):
    path = root / "manifest.json"
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def shard(root, split="train", k=1):
    return root / split / f"shard-{k:06d}.bin", root / split / f"shard-{k:06d}.idx"


def patch(path, offset, data: bytes):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def only(found, path, *fragments):
    """Exactly one problem, naming `path`, containing every fragment."""
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}: "), found
    for frag in fragments:
        assert frag in found[0], (frag, found[0])


# -- intact ---------------------------------------------------------------------------------------
def test_intact_dataset_passes_every_level(ds):
    for level in verify_mod.LEVELS:
        report = verify_dataset(ds, level)
        assert report.ok and report.problems == [], report.problems
        assert report.num_shards == sum(len(s.shards) for s in read_manifest(ds).splits.values())
    assert verify_dataset(ds, "sizes").bytes_read == 0  # the cheap level reads no arrays
    full = verify_dataset(ds, "full")
    assert full.bytes_read == sum(p.stat().st_size for p in ds.rglob("*") if p.suffix in (".bin", ".idx")
                                  and ".prep" not in p.parts)
    assert check_dataset(ds) == [] and check_dataset(ds, quick=False) == []


def test_cli_ok_and_exit_codes(ds, tmp_path):
    r = runner.invoke(app, ["verify", str(ds), "--no-progress"])
    assert r.exit_code == 0 and r.output.startswith("ok: "), r.output
    r = runner.invoke(app, ["verify", "--quick", str(ds), "--no-progress"])
    assert r.exit_code == 0 and "sizes and indexes" in r.output
    r = runner.invoke(app, ["verify", str(tmp_path / "nope"), "--no-progress"])
    assert r.exit_code == 1 and "no such directory" in r.output


def test_cli_one_line_per_problem(ds):
    b1, _ = shard(ds, k=0)
    _, i2 = shard(ds, k=2)
    patch(b1, 10, b"\xff\x00")
    i2.write_bytes(i2.read_bytes()[:-3])
    r = runner.invoke(app, ["verify", str(ds), "--no-progress"])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert lines[0].startswith(f"{i2}: ") and "truncated" in lines[0]  # size problems first
    assert lines[1].startswith(f"{b1}: sha256 ")
    assert "problem(s)" in lines[-1] and "prep tokenize --overwrite" in lines[-1]


# -- manifest -------------------------------------------------------------------------------------
def test_missing_manifest(ds):
    import shutil
    (ds / "manifest.json").unlink()
    shutil.rmtree(ds / ".prep", ignore_errors=True)  # shards alone: no sign of prep (a finished run leaves its lock)
    only(problems(ds), ds / "manifest.json", "missing", "not a complete prep dataset")
    (ds / ".prep").mkdir(exist_ok=True)
    (ds / ".prep" / "journal.jsonl").write_text("")
    only(problems(ds), ds / "manifest.json", "unfinished `prep tokenize` run", "re-run")


def test_a_finished_dataset_without_its_manifest_is_told_to_restore_it_or_rebuild(ds):
    """A finished run leaves .prep/lock alone: with its manifest gone, verify_dataset called it "not a
    complete prep dataset" and the CLI an unfinished run to finish (tests/pipeline/test_lost_manifest.py)."""
    (ds / "manifest.json").unlink()
    (ds / ".prep").mkdir(exist_ok=True)
    (ds / ".prep" / "lock").write_text("")
    only(problems(ds), ds / "manifest.json", "missing", "deleted or not copied", "--overwrite")


def test_an_unfinished_run_is_told_to_finish_not_to_point_verify_elsewhere(ds):
    """A run stopped before its manifest: the problem line said "re-run the same command to finish it",
    the summary under it "point `prep verify` at the directory holding its manifest.json, or make the
    dataset with `prep tokenize`"; `prep verify` now says it in the one line inspect and bench-loader do."""
    (ds / "manifest.json").unlink()
    (ds / ".prep").mkdir(exist_ok=True)
    (ds / ".prep" / "plan.json").write_text("{}")
    summary = verify_dataset(ds).summary()
    assert "point `prep verify`" not in summary and "make the dataset" not in summary, summary
    assert summary.startswith(f"{ds}: a `prep tokenize` run that has not finished"), summary
    r = runner.invoke(app, ["verify", str(ds), "--no-progress"])
    assert r.exit_code == 1
    assert r.output.strip() == (
        f"error: {ds}: no manifest.json yet: a `prep tokenize` run is writing this dataset or stopped before "
        f"finishing it ({ds / '.prep'} holds its state); wait for it to end, or re-run the same `prep tokenize` "
        "command to finish it, then run `prep verify` again"), r.output


def test_manifest_not_json(ds):
    (ds / "manifest.json").write_text('{"format_version": 1, "dty')
    only(problems(ds), ds / "manifest.json", "not valid JSON")
    # the fix is named: the summary once ended at "not a complete prep dataset"
    r = runner.invoke(app, ["verify", str(ds), "--no-progress"])
    assert r.exit_code == 1 and r.output.splitlines()[-1].endswith(
        "restore manifest.json from a copy, or rebuild with `prep tokenize --overwrite`"), r.output


def test_manifest_other_format_version(ds):
    edit_manifest(ds, lambda d: d.update(format_version=2))
    only(problems(ds, "sizes"), ds / "manifest.json", "format_version 2")


def test_manifest_missing_field(ds):
    edit_manifest(ds, lambda d: d.pop("splits"))
    only(problems(ds), ds / "manifest.json", "malformed manifest", "splits")


@pytest.mark.parametrize("damage, fragment", [
    (lambda m: m.write_text("[]"), "not a JSON object"),
    (lambda m: m.write_bytes(b"\xff\xfe\x00{"), "not valid JSON"),
    (lambda m: (m.unlink(), m.mkdir()), "cannot be read"),
])
def test_manifest_of_another_shape_is_one_problem(ds, damage, fragment):
    damage(ds / "manifest.json")
    only(problems(ds, "sizes"), ds / "manifest.json", fragment)


@pytest.mark.parametrize("value", [123.5, "7", True, None])
def test_counts_that_are_not_whole_numbers_are_refused(ds, value):
    # int(123.5) == 123 and int("7") == 7 once let a hand-edited manifest through
    edit_manifest(ds, lambda d: d["splits"]["train"]["shards"][0].update(num_docs=value))
    only(problems(ds, "sizes"), ds / "manifest.json", "num_docs", "not a whole number")


def test_counts_past_int64_are_refused(ds):
    edit_manifest(ds, lambda d: d["splits"]["train"]["shards"][0].update(num_tokens=10**30))
    only(problems(ds, "sizes"), ds / "manifest.json", "num_tokens is 1000000000000000000000000000000", "int64")


def test_split_totals_disagree_with_shards(ds):
    edit_manifest(ds, lambda d: d["splits"]["train"].update(num_docs=d["splits"]["train"]["num_docs"] + 1))
    only(problems(ds, "sizes"), ds / "manifest.json", "split 'train' says")


def test_dtype_too_narrow_for_vocab(ds):
    edit_manifest(ds, lambda d: (d.update(vocab_size=70000), d["tokenizer"].update(vocab_size=70000)))
    only(problems(ds, "sizes"), ds / "manifest.json", "cannot hold ids of a 70000-token vocabulary")


@pytest.mark.parametrize("vocab", [0, -1])
def test_vocab_size_not_positive_is_one_problem(ds, vocab):
    """Not also one 'token id ... not below the vocabulary size -1' line per shard."""
    edit_manifest(ds, lambda d: d.update(vocab_size=vocab))
    only(problems(ds), ds / "manifest.json", f"vocab_size {vocab} is not positive")


def test_shard_list_out_of_order(ds):
    edit_manifest(ds, lambda d: d["splits"]["train"]["shards"].reverse())
    only(problems(ds, "sizes"), ds / "manifest.json", "out of name order")


def test_unsafe_shard_name(ds):
    edit_manifest(ds, lambda d: d["splits"]["val"]["shards"][0].update(name="../../etc/passwd"))
    found = problems(ds, "sizes")
    assert any("'../../etc/passwd'" in p and "not a plain file name" in p for p in found), found


def test_bad_sha256_field(ds):
    edit_manifest(ds, lambda d: d["splits"]["val"]["shards"][0].update(sha256="abc"))
    found = problems(ds)
    assert found[0].startswith(f"{ds / 'manifest.json'}: ") and "no valid sha256" in found[0]
    assert len(found) == 2 and "does not match the manifest" in found[1]  # and the hash differs


# -- sizes and headers ----------------------------------------------------------------------------
@pytest.mark.parametrize("ext", ["bin", "idx"])
def test_missing_shard_file(ds, ext):
    path = ds / "train" / f"shard-000001.{ext}"
    path.unlink()
    only(problems(ds, "sizes"), path, "missing", "train/shard-000001")


def test_truncated_idx(ds):
    _, idx = shard(ds)
    idx.write_bytes(idx.read_bytes()[:-1])
    for level in verify_mod.LEVELS:
        only(problems(ds, level), idx, "truncated")


def test_idx_shorter_than_its_header(ds):
    _, idx = shard(ds)
    idx.write_bytes(idx.read_bytes()[:20])
    only(problems(ds, "sizes"), idx, "index is truncated (20 bytes")


def test_idx_bad_magic(ds):
    _, idx = shard(ds)
    patch(idx, 0, b"NOTANIDX!")
    only(problems(ds, "sizes"), idx, "not a Megatron MMIDIDX index")


def test_idx_dtype_code_differs_from_manifest(ds):
    _, idx = shard(ds)
    patch(idx, 17, bytes([4]))  # int32
    only(problems(ds, "sizes"), idx, "index dtype is int32, the manifest says uint16")


def test_idx_document_count_differs_from_manifest(ds):
    _, idx = shard(ds)
    s, _ = struct.unpack_from("<QQ", idx.read_bytes(), 18)
    patch(idx, 18, struct.pack("<QQ", s - 1, s))
    found = problems(ds, "sizes")
    assert len(found) == 2 and all(p.startswith(f"{idx}: ") for p in found), found
    assert f"index holds {s - 1} documents, the manifest says {s}" in found[0]
    assert "trailing bytes" in found[1]


@pytest.mark.parametrize("delta", [-2, 2])
def test_bin_size_differs_from_manifest(ds, delta):
    b, _ = shard(ds, "val", 0)
    data = b.read_bytes()
    b.write_bytes(data[:delta] if delta < 0 else data + b"\0" * delta)
    only(problems(ds, "sizes"), b, "truncated" if delta < 0 else "trailing bytes")


def test_stray_files(ds):
    (ds / "train" / "shard-000099.bin").write_bytes(b"\0\0")
    (ds / "train" / "shard-000001.bin.tmp123").write_bytes(b"")
    (ds / "extra").mkdir()
    (ds / "extra" / "x.idx").write_bytes(b"")
    (ds / "extra" / "notes.txt").write_text("fine")
    (ds / ".cache").mkdir()
    (ds / ".cache" / "y.bin").write_bytes(b"")  # dot-directories (caches, run state) are not looked at
    assert problems(ds, "sizes") == []  # harmless to a loader: not checked on open
    found = problems(ds, "index")
    fix = "; delete it, or move it out of the dataset"
    assert found == [
        f"{ds / 'extra' / 'x.idx'}: shard file in extra/, a split the manifest does not have" + fix,
        f"{ds / 'train' / 'shard-000001.bin.tmp123'}: in split directory train/ but not listed in the manifest "
        "(left over from another run?)" + fix,
        f"{ds / 'train' / 'shard-000099.bin'}: in split directory train/ but not listed in the manifest "
        "(left over from another run?)" + fix,
    ]


def test_stray_files_are_to_be_deleted_not_restored(ds):
    """The summary said "restore the files named above" of files that belong to no dataset."""
    (ds / "train" / "shard-000099.bin").write_bytes(b"\0\0")
    last = verify_dataset(ds).summary()
    assert last.endswith("file(s) the manifest does not list, which `cat <split>/*.bin` would read; delete them, "
                         "or move them out of the dataset") and "restore" not in last, last
    b, _ = shard(ds, k=0)
    patch(b, 10, b"\xff\x00")  # and real damage besides: both fixes named
    assert verify_dataset(ds).summary().endswith(
        "restore the files named above and delete the ones the manifest does not list, or rebuild it with "
        "`prep tokenize --overwrite`")


# -- index structure ------------------------------------------------------------------------------
def _arrays(idx):
    _, lengths, pointers = read_idx(idx, mmap=False)
    return len(lengths), IDX_HEADER_BYTES, IDX_HEADER_BYTES + 4 * len(lengths), IDX_HEADER_BYTES + 12 * len(lengths)


def test_non_monotone_offsets(ds):
    _, idx = shard(ds)
    n, _, ptr_at, _ = _arrays(idx)
    raw = idx.read_bytes()
    p3, p4 = raw[ptr_at + 24:ptr_at + 32], raw[ptr_at + 32:ptr_at + 40]
    patch(idx, ptr_at + 24, p4 + p3)  # swap offsets of documents 3 and 4
    assert problems(ds, "sizes") == []  # same size: only the index level sees it
    only(problems(ds, "index"), idx, "byte offset of document 3 is", "offsets must start at 0, increase")


def test_first_offset_not_zero(ds):
    _, idx = shard(ds)
    _, _, ptr_at, _ = _arrays(idx)
    patch(idx, ptr_at, struct.pack("<q", 2))
    only(problems(ds, "index"), idx, "byte offset of document 0 is 2")


def test_negative_length(ds):
    _, idx = shard(ds)
    _, len_at, _, _ = _arrays(idx)
    patch(idx, len_at + 4 * 5, struct.pack("<i", -1))
    only(problems(ds, "index"), idx, "document 5 has negative length -1")


def test_lengths_do_not_sum_to_tokens(ds):
    _, idx = shard(ds)
    n, len_at, _, _ = _arrays(idx)
    (last,) = struct.unpack_from("<i", idx.read_bytes(), len_at + 4 * (n - 1))
    patch(idx, len_at + 4 * (n - 1), struct.pack("<i", last + 1))  # the last length moves no offset
    only(problems(ds, "index"), idx, "document lengths add up to", "the manifest and the .bin size say")


def test_document_indices_corrupt(ds):
    _, idx = shard(ds)
    n, _, _, doc_at = _arrays(idx)
    patch(idx, doc_at + 8 * 3, struct.pack("<q", 7))
    only(problems(ds, "index"), idx, "document_indices[3] is 7, expected 3")
    patch(idx, doc_at + 8 * 3, struct.pack("<q", 3))
    patch(idx, doc_at + 8 * n, struct.pack("<q", n + 1))
    only(problems(ds, "index"), idx, f"document_indices[{n}] is {n + 1}, expected {n}")


# -- full: sha256 and ids -------------------------------------------------------------------------
def test_flipped_byte_changes_sha256(ds):
    b, _ = shard(ds, "val", 0)
    patch(b, 0, bytes([b.read_bytes()[0] ^ 0x01]))
    assert problems(ds, "index") == []
    found = problems(ds)
    assert found[0].startswith(f"{b}: sha256 ") and "does not match the manifest's" in found[0], found


def test_token_id_beyond_vocab_names_the_document(ds):
    """The id check on its own: the manifest's sha256 is updated to the damaged bytes."""
    import hashlib

    m = read_manifest(ds)
    b, idx = shard(ds, "train", 2)
    _, lengths, _ = read_idx(idx, mmap=False)
    token = int(lengths[:4].sum()) + 1  # second token of document 4
    patch(b, 2 * token, struct.pack("<H", m.vocab_size))
    sha = hashlib.sha256(b.read_bytes()).hexdigest()
    edit_manifest(ds, lambda d: d["splits"]["train"]["shards"][2].update(sha256=sha))
    only(problems(ds), b, f"token id {m.vocab_size} at token {token} (document 4)",
         f"not below the vocabulary size {m.vocab_size}")


def test_failed_units_are_a_note_not_a_problem(ds):
    edit_manifest(ds, lambda d: d.update(failed_units=[{"unit": 3, "path": "x", "error": "bad gzip"}]))
    report = verify_dataset(ds)
    assert report.ok and len(report.notes) == 1 and "1 input unit(s) failed" in report.notes[0]
    r = runner.invoke(app, ["verify", str(ds), "--no-progress"])
    assert r.exit_code == 0 and "note: 1 input unit(s) failed" in r.output


# -- chunking: problems found in any chunk, positions right across chunk edges ---------------------
def make_dataset(root, docs: list[np.ndarray], dtype, vocab_size: int) -> None:
    """A one-shard dataset written by the real ShardWriter, with a matching manifest."""
    dtype = np.dtype(dtype)
    with ShardWriter(root / "train", "shard-000000", dtype) as w:
        w.add_documents(np.concatenate(docs).astype(dtype), np.array([len(d) for d in docs]))
    info = w.info
    write_manifest(root, Manifest(dtype=dtype.name, vocab_size=vocab_size, tokenizer={"name": "synthetic", "sha256": "ab" * 32},
                                  splits={"train": SplitInfo(info.num_docs, info.num_tokens, (info,))}))


@pytest.fixture
def synthetic(tmp_path, monkeypatch):
    monkeypatch.setattr(verify_mod, "INDEX_CHUNK", 7)    # 100 docs -> 15 index chunks
    monkeypatch.setattr(verify_mod, "READ_BLOCK", 64)    # 64-byte reads: many blocks per shard
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 100_000, size=int(n)) for n in rng.integers(1, 40, size=100)]
    make_dataset(tmp_path, docs, np.int32, 100_000)
    return tmp_path, docs


def test_chunked_checks_pass_on_intact_int32_dataset(synthetic):
    root, _ = synthetic
    assert problems(root) == []


def test_chunked_offset_problem_found_in_a_later_chunk(synthetic):
    root, docs = synthetic
    idx = root / "train" / "shard-000000.idx"
    n = len(docs)
    ptr_at = IDX_HEADER_BYTES + 4 * n
    patch(idx, ptr_at + 8 * 51, struct.pack("<q", 3))
    only(problems(root, "index"), idx, "byte offset of document 51 is 3")


@pytest.mark.parametrize("bad", [100_000, -5])
def test_chunked_id_problem_position_across_blocks(synthetic, bad):
    import hashlib

    root, docs = synthetic
    b = root / "train" / "shard-000000.bin"
    doc = 77
    token = sum(len(d) for d in docs[:doc])  # first token of document 77, far past the first block
    patch(b, 4 * token, struct.pack("<i", bad))
    sha = hashlib.sha256(b.read_bytes()).hexdigest()
    edit_manifest(root, lambda d: d["splits"]["train"]["shards"][0].update(sha256=sha))
    only(problems(root), b, f"token id {bad} at token {token} (document {doc})")


# -- files that cannot be read: a problem line each, never a traceback -----------------------------
def _failing_open(monkeypatch, path, errno_, after_bytes=None):
    """Opening `path` fails with `errno_` (no permission), or reading it fails after `after_bytes`
    (EIO from a failing disk). Simulated: the tests run as root, whom chmod 000 does not stop."""
    import builtins
    import errno
    import os

    import pipeline.manifest as manifest_mod

    real_open, real_memmap = builtins.open, np.memmap

    class Failing:
        def __init__(self, f):
            self.f, self.left = f, after_bytes

        def readinto(self, b):
            if self.left <= 0:
                raise OSError(errno_, os.strerror(errno_))
            n = self.f.readinto(memoryview(b)[:self.left])
            self.left -= n
            return n

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake_open(p, *a, **k):
        if str(p) == str(path):
            if after_bytes is None:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(p))
            return Failing(real_open(p, *a, **k))
        return real_open(p, *a, **k)

    def fake_memmap(p, *a, **k):
        if str(p) == str(path) and after_bytes is None:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(p))
        return real_memmap(p, *a, **k)
    for mod in (verify_mod, manifest_mod):
        monkeypatch.setattr(mod, "open", fake_open, raising=False)
    monkeypatch.setattr(np, "memmap", fake_memmap)


@pytest.mark.parametrize("ext", ["idx", "bin"])
def test_unreadable_shard_file_is_a_problem_not_a_traceback(ds, monkeypatch, ext):
    b, i = shard(ds, k=1)
    path = i if ext == "idx" else b
    _failing_open(monkeypatch, path, None)
    for level in ("full", "index") if ext == "bin" else verify_mod.LEVELS:
        if ext == "bin" and level == "index":
            assert problems(ds, level) == []  # --quick reads no .bin
            continue
        only(problems(ds, level), path, "cannot be read (Permission denied)", "read access")
    r = runner.invoke(app, ["verify", str(ds), "--no-progress"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert r.output.startswith(f"{path}: cannot be read"), r.output


def test_read_error_part_way_through_a_bin_is_a_problem(ds, monkeypatch):
    import errno
    b, _ = shard(ds, k=1)
    _failing_open(monkeypatch, b, errno.EIO, after_bytes=100)
    only(problems(ds), b, "cannot be read (Input/output error)")


# -- symbolic links ---------------------------------------------------------------------------------
def test_symlinked_shard_is_checked_through_and_noted(ds, tmp_path):
    """A shard file linked from elsewhere (a subset assembled without copying) is the dataset's data
    when its target's bytes match: exit 0, with a note that copies must follow links."""
    b, _ = shard(ds, k=1)
    target = tmp_path / "elsewhere.bin"
    b.rename(target)
    b.symlink_to(target)
    report = verify_dataset(ds)
    assert report.ok and len(report.notes) == 1 and f"{b} -> {target}" in report.notes[0], report.notes
    r = runner.invoke(app, ["verify", str(ds), "--no-progress"])
    assert r.exit_code == 0 and "note: 1 shard file(s) are symbolic links" in r.output, r.output
    target.write_bytes(target.read_bytes()[:-2])  # the target changed: found as the file's damage
    only(problems(ds), b, "truncated")


def test_dangling_symlink_says_so(ds, tmp_path):
    b, _ = shard(ds, k=1)
    b.unlink()
    b.symlink_to(tmp_path / "gone.bin")
    for level in verify_mod.LEVELS:
        only(problems(ds, level), b, f"a symbolic link to {tmp_path / 'gone.bin'}, which is missing",
             "restore its target")


def test_shard_path_that_is_a_directory(ds):
    b, _ = shard(ds, k=1)
    b.unlink()
    b.mkdir()
    only(problems(ds), b, "not a regular file")


def test_tokens_in_no_document(ds):
    """A shard whose index was replaced by one of no documents (the manifest's count set to match):
    every check passed, and its .bin's tokens were in no document (inspect printed past them)."""
    from pipeline.manifest import write_idx

    _, idx = shard(ds, k=1)
    write_idx(idx, np.zeros(0, np.int64), np.uint16)

    def no_docs(d):
        s = d["splits"]["train"]["shards"][1]
        d["splits"]["train"]["num_docs"] -= s["num_docs"]
        s["num_docs"] = 0
    edit_manifest(ds, no_docs)
    tokens = read_manifest(ds).splits["train"].shards[1].num_tokens
    for level in verify_mod.LEVELS:
        only(problems(ds, level), ds / "manifest.json",
             f"shard train/shard-000001 lists 0 documents but {tokens} tokens, which no document holds")


@pytest.mark.parametrize("field, value, fragment", [
    ("name", None, "tokenizer.name is None, not the tokenizer's path or name"),
    ("name", "", "tokenizer.name is '', not"),
    ("sha256", None, "tokenizer.sha256 is 'None', not the 64 hex digits"),
    ("sha256", "abc", "tokenizer.sha256 is 'abc', not the 64 hex digits"),
])
def test_tokenizer_fields_readers_go_by(ds, field, value, fragment):
    """verify passed a manifest without them; `prep inspect --docs` then stopped with a KeyError
    traceback (no name), or said the tokenizer 'differs from the None that made the dataset'."""
    edit_manifest(ds, lambda d: d["tokenizer"].update({field: value}) if value is not None
                  else d["tokenizer"].pop(field))
    only(problems(ds, "sizes"), ds / "manifest.json", fragment)
    r = runner.invoke(app, ["inspect", str(ds), "--docs", "1"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert fragment in r.output and "--- train/" not in r.output, r.output


@pytest.mark.parametrize("command", ["verify", "inspect", "bench-loader"])
@pytest.mark.parametrize("given, fragment", [
    ("manifest.json", "the dataset's manifest; give `prep {c}` the directory that holds manifest.json: prep {c} {ds}"),
    ("train", "a directory inside the dataset at {ds} (no manifest.json here); give `prep {c}` the dataset's "
              "directory: prep {c} {ds}"),
    ("train/shard-000000.bin", "a file, not a dataset directory (inside the dataset at {ds}); give `prep {c}` the "
                               "directory that holds manifest.json: prep {c} {ds}"),
])
def test_path_inside_a_dataset_names_the_dataset(ds, command, given, fragment):
    """`prep verify DIR/manifest.json` said "no such directory"; `prep inspect` on it, or on a split
    directory, said the dataset was "missing or incomplete (finish it with `prep tokenize`)", and
    `prep bench-loader` "no manifest.json; point bench-loader at a `prep tokenize` output"."""
    r = runner.invoke(app, [command, str(ds / given)] + (["--no-progress"] if command == "verify" else []))
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert fragment.format(c=command, ds=ds) in " ".join(r.output.split()), r.output
    assert "prep tokenize" not in r.output, r.output


def test_vocab_size_raised_over_an_id_past_the_tokenizers_vocabulary(ds):
    """An id past the vocabulary, its sha256 resealed and vocab_size raised over it: every check passed,
    while tokenizer.vocab_size (which prep writes equal to vocab_size) still said the id is no token."""
    import hashlib

    m = read_manifest(ds)
    b, _ = shard(ds, "train", 0)
    patch(b, 2, struct.pack("<H", m.vocab_size + 5))
    sha = hashlib.sha256(b.read_bytes()).hexdigest()

    def reseal(d):
        d["splits"]["train"]["shards"][0]["sha256"] = sha
        d["vocab_size"] = m.vocab_size + 100
    edit_manifest(ds, reseal)
    only(problems(ds), ds / "manifest.json",
         f"vocab_size {m.vocab_size + 100} differs from tokenizer.vocab_size {m.vocab_size}")


def _one_shard_dataset(root, lengths, bad_doc: int, boundary: str | None = None):
    """One train shard of documents of `lengths` tokens (id 1 each; `boundary: eos` ends each with id 0),
    whose document `bad_doc` holds id 1000, past the 1000-token vocabulary; sha256 sealed over it."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ids = np.ones(int(lengths.sum()), dtype=np.uint16)
    if boundary == "eos":
        ids[np.cumsum(lengths) - 1] = 0
    ids[int(lengths[:bad_doc].sum())] = 1000
    with ShardWriter(root / "train", "shard-000000", np.dtype(np.uint16)) as w:
        w.add_documents(ids, lengths)
    tokenizer = {"name": "t.json", "sha256": "0" * 64, "vocab_size": 1000}
    if boundary:
        tokenizer.update(boundary=boundary, eos_id=0)
    write_manifest(root, Manifest(dtype="uint16", vocab_size=1000, tokenizer=tokenizer,
                                  splits={"train": SplitInfo(len(lengths), len(ids), (w.info,))}))
    return shard(root, k=0)


def test_the_document_of_an_id_past_the_vocabulary_is_found_in_bounded_memory(tmp_path, monkeypatch):
    """_doc_of took np.cumsum of the whole index, 8 bytes per document (800 MB for 100 M documents),
    against the module's bounded-memory promise; now it reads INDEX_CHUNK lengths at a time."""
    import tracemalloc

    monkeypatch.setattr(verify_mod, "INDEX_CHUNK", 4096)
    monkeypatch.setattr(verify_mod, "READ_BLOCK", 1 << 16)
    lengths = 1 + np.arange(300_000) % 3  # 600,000 tokens; a whole-index cumsum is 2.4 MB
    bad_doc = 250_001  # many chunks in, not on a chunk's edge
    b, _ = _one_shard_dataset(tmp_path, lengths, bad_doc)
    token = int(lengths[:bad_doc].sum())
    tracemalloc.start()
    try:
        found = verify_dataset(tmp_path, "full", threads=1).problems
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    only(found, b, f"token id 1000 at token {token} (document {bad_doc}) is not below the vocabulary size 1000")
    assert peak < 1 << 20, peak  # chunks of 4096 lengths and 64 KiB reads: well under 1 MiB


@pytest.mark.parametrize("boundary", [None, "eos"])
def test_an_unreadable_idx_found_while_reading_the_bin_is_blamed_on_the_idx(tmp_path, monkeypatch, boundary):
    """The .idx read again for the boundary walk and for the document of a bad id: an OSError there
    was reported as '<shard>.bin: cannot be read'."""
    import builtins
    import errno

    b, i = _one_shard_dataset(tmp_path, [3, 2, 4], bad_doc=1, boundary=boundary)
    failing = []
    real_open, real_check_index = builtins.open, verify_mod._check_index

    def check_index_then_fail(s, *args, **kwargs):  # the index checks pass; a later read of it fails (EIO)
        result = real_check_index(s, *args, **kwargs)
        failing.append(str(s.idx_path))
        return result

    def flaky_open(file, *args, **kwargs):
        if str(file) in failing:
            raise OSError(errno.EIO, "Input/output error", str(file))
        return real_open(file, *args, **kwargs)
    monkeypatch.setattr(verify_mod, "_check_index", check_index_then_fail)
    monkeypatch.setattr(builtins, "open", flaky_open)
    found = verify_dataset(tmp_path, "full", threads=1).problems
    assert found == [f"{i}: cannot be read (Input/output error); give this user read access to it, or restore it "
                     "from a sound copy",
                     f"{b}: token id 1000 at token 3 (document unknown: the .idx cannot be read) is not below the "
                     "vocabulary size 1000"], found


def test_ok_does_not_claim_the_boundaries_it_did_not_check(ds):
    """A manifest without tokenizer.boundary: the note said boundaries were not checked, and the ok line
    under it "sizes, indexes, sha256, token ids and document boundaries all match the manifest"."""
    edit_manifest(ds, lambda d: d["tokenizer"].update(boundary=None))
    r = runner.invoke(app, ["verify", str(ds), "--no-progress"])
    assert r.exit_code == 0, r.output
    note, ok = r.output.strip().splitlines()
    assert note == "note: the manifest records no tokenizer.boundary: document boundaries were not checked"
    assert ok.startswith("ok: ") and ok.endswith("; sizes, indexes, sha256 and token ids all match the manifest"), ok
    assert verify_dataset(ds).summary() == ok  # the library's summary: the same line
