"""pipeline.assemble: parts -> final shards in unit order (greedy groups, links or concatenation)."""

from __future__ import annotations

import errno
import hashlib
import os
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import faults
from pipeline.assemble import PartStream, ShardAssembler, group_parts
from pipeline.manifest import read_idx
from pipeline.shards import ShardWriter


def _write_parts(root, sizes_per_part, seed=0):
    """Parts u<k> under root/train, each a list of document lengths; returns (part dicts, docs)."""
    rng = np.random.default_rng(seed)
    parts, docs = [], []
    for k, lengths in enumerate(sizes_per_part):
        lengths = np.asarray(lengths, dtype=np.int64)
        ids = rng.integers(0, 50_000, int(lengths.sum()), dtype=np.uint16)
        with ShardWriter(root / "train", f"u{k:03d}", np.uint16, checksum=False) as w:
            w.add_documents(ids, lengths)
        parts.append({**w.info.to_dict()})
        docs.append((ids, lengths))
    return parts, docs


def _read_shard(path_base):
    lengths = np.array(read_idx(path_base.with_suffix(".idx"), mmap=False)[1], dtype=np.int64)
    data = path_base.with_suffix(".bin").read_bytes()
    return np.frombuffer(data, np.uint16), lengths, hashlib.sha256(data).hexdigest()


def _assert_placing_fails_cleanly(tmp_path, parts, errno_wanted, **stream_kwargs) -> None:
    """Feeding `parts` fails with `errno_wanted` naming the first shard's temporary, and abort()
    leaves no temporaries."""
    stream = PartStream(tmp_path / "parts", tmp_path / "out", ("train",), np.uint16, 10_000, **stream_kwargs)
    with pytest.raises(OSError) as e:
        for p in parts:
            stream.feed({"shards": {"train": [p]}})
        stream.finish()
    stream.abort()
    assert e.value.errno == errno_wanted
    assert e.value.filename.endswith("/out/train/shard-000000.bin.tmp")
    assert not list((tmp_path / "out").rglob("*tmp*"))


part_lists = st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=5), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=part_lists, shard_tokens=st.integers(1, 200), background=st.booleans())
def test_shards_are_the_greedy_groups_of_parts_in_order(tmp_path_factory, sizes, shard_tokens, background):
    root = tmp_path_factory.mktemp("asm")
    parts, docs = _write_parts(root / "parts", sizes)
    stream = PartStream(root / "parts", root / "out", ("train",), np.uint16, shard_tokens, background=background)
    for p in parts:
        stream.feed({"shards": {"train": [p]}})
    shards = stream.finish()["train"]

    groups = group_parts(parts, shard_tokens)
    assert len(shards) == len(groups) > 0
    k = 0
    for info, group in zip(shards, groups, strict=True):
        ids, lengths, sha = _read_shard(root / "out" / "train" / info.name)
        want_ids = np.concatenate([docs[parts.index(p)][0] for p in group])
        want_len = np.concatenate([docs[parts.index(p)][1] for p in group])
        assert np.array_equal(ids, want_ids) and np.array_equal(lengths, want_len)
        assert info.sha256 == sha  # hashed while copying, or by reading a linked single part
        assert (info.num_docs, info.num_tokens) == (len(want_len), int(want_len.sum()))
        assert info.name == f"shard-{k:06d}"
        k += 1
    assert not list((root / "out").rglob("*.tmp"))


def test_a_full_disk_while_copying_names_the_shard_and_leaves_no_temporaries(tmp_path):
    parts, _ = _write_parts(tmp_path / "parts", [[30, 30]] * 4)
    faults.configure("enospc:100")  # this process: the first copied block fails
    try:
        _assert_placing_fails_cleanly(tmp_path, parts, errno.ENOSPC)
    finally:
        faults.configure(None)
    assert sorted(p.name for p in (tmp_path / "parts" / "train").iterdir())[:2] == ["u000.bin", "u000.idx"]


def test_abort_stops_between_blocks_and_drops_the_shard_being_built(tmp_path):
    parts, _ = _write_parts(tmp_path / "parts", [[50]] * 3)
    asm = ShardAssembler(tmp_path / "parts" / "train", tmp_path / "out", np.uint16, 1000)
    (tmp_path / "out").mkdir()
    asm.add(parts[0])
    asm.add(parts[1])  # a concatenation is open now
    assert list((tmp_path / "out").glob("*.tmp"))
    asm.stop.set()
    with pytest.raises(KeyboardInterrupt):
        asm.add(parts[2])
    asm.discard()
    assert not list((tmp_path / "out").iterdir())


def _concatenated(tmp_path, name):
    """Three parts placed as one concatenated shard under tmp_path/name: (bytes, sha256 recorded)."""
    parts, docs = _write_parts(tmp_path / "parts", [[30, 20], [25], [40, 1]], seed=3)
    out = tmp_path / name
    out.mkdir()
    asm = ShardAssembler(tmp_path / "parts" / "train", out, np.uint16, 10_000)
    for p in parts:
        asm.add(p)
    (info,) = asm.close()
    want = np.concatenate([ids for ids, _ in docs]).tobytes()
    return (out / "shard-000000.bin").read_bytes(), info.sha256, want


@pytest.mark.parametrize("refusal", [errno.EXDEV, errno.ENOSYS, errno.EINVAL, 0])
def test_the_copy_falls_back_to_write_when_the_kernel_will_not_copy(tmp_path, monkeypatch, refusal):
    """copy_file_range refused (another filesystem, an old kernel, seccomp) or answering 0: the
    shard is written with write(2), same bytes and sha256, and the kernel is not asked again."""
    calls = []

    def refuse(src, dst, count, offset_src=None, offset_dst=None):
        calls.append(count)
        if refusal:
            raise OSError(refusal, "refused")
        return 0
    monkeypatch.setattr("os.copy_file_range", refuse, raising=False)
    data, sha, want = _concatenated(tmp_path, "out")
    assert data == want
    assert sha == hashlib.sha256(want).hexdigest()
    assert len(calls) == 1


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_parts_hashed_a_page_at_a_time_and_dropped_keep_their_bytes(tmp_path, monkeypatch, kernel_copy):
    """Parts of many pages, hashed HASH_STEP bytes at a time with each step's pages dropped from the
    mapping (madvise) while the copy (kernel, or write(2) from the same mapping) runs beside: the
    shard holds every byte, in order, and its recorded sha256 is theirs."""
    import mmap

    from pipeline import assemble
    monkeypatch.setattr(assemble, "HASH_STEP", mmap.PAGESIZE)
    monkeypatch.setattr(assemble, "COPY_BLOCK", 3 * mmap.PAGESIZE)
    if not kernel_copy:
        monkeypatch.setattr("os.copy_file_range", lambda *a: 0, raising=False)
    parts, docs = _write_parts(tmp_path / "parts", [[9000, 1, 7000], [12_345], [1, 2, 3], [20_000, 4097]], seed=5)
    out = tmp_path / "out"
    out.mkdir()
    asm = ShardAssembler(tmp_path / "parts" / "train", out, np.uint16, 1 << 20)
    for p in parts:
        asm.add(p)
    (info,) = asm.close()
    want = np.concatenate([ids for ids, _ in docs]).tobytes()
    data = (out / "shard-000000.bin").read_bytes()
    assert len(want) > 20 * mmap.PAGESIZE
    assert data == want
    assert info.sha256 == hashlib.sha256(want).hexdigest()


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="no copy_file_range here (not Linux)")
def test_a_short_kernel_copy_is_continued(tmp_path, monkeypatch):
    """copy_file_range may copy less than asked: the rest follows, in order."""
    real = os.copy_file_range

    def short(src, dst, count, offset_src=None, offset_dst=None):
        return real(src, dst, min(count, 7), offset_src, offset_dst)
    monkeypatch.setattr("os.copy_file_range", short)
    data, sha, want = _concatenated(tmp_path, "out")
    assert data == want and sha == hashlib.sha256(want).hexdigest()


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="no copy_file_range here (not Linux)")
def test_a_full_disk_in_the_kernel_copy_names_the_shard(tmp_path, monkeypatch):
    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("os.copy_file_range", full)
    parts, _ = _write_parts(tmp_path / "parts", [[30], [30]])
    _assert_placing_fails_cleanly(tmp_path, parts, errno.ENOSPC)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=part_lists, shard_tokens=st.integers(1, 200), cut=st.integers(0, 20), damaged=st.booleans())
def test_resuming_from_any_journaled_shard_gives_the_same_shards(tmp_path_factory, sizes, shard_tokens, cut,
                                                                 damaged):
    """A run journals shards 0..n-1 and deletes their parts; a re-run given the first `cut` of those
    lines (the rest lost) feeds every part again (the deleted ones included) and must end with the
    same shards as an uninterrupted run. A kept shard whose file was damaged is not kept."""
    from pipeline.assemble import usable_placed

    root = tmp_path_factory.mktemp("asm")
    parts, _ = _write_parts(root / "parts", sizes)
    ref_root = tmp_path_factory.mktemp("ref")
    _write_parts(ref_root / "parts", sizes)
    ref = PartStream(ref_root / "parts", ref_root / "out", ("train",), np.uint16, shard_tokens, background=False)
    for p in parts:
        ref.feed({"shards": {"train": [p]}})
    want = ref.finish()["train"]

    journal = []
    first = PartStream(root / "parts", root / "out", ("train",), np.uint16, shard_tokens, background=False,
                       journal=lambda split, k, info, names: journal.append({"placed": split, "shard": k, **info,
                                                                                "parts": names}))
    for p in parts:
        first.feed({"shards": {"train": [p]}})
    first.finish()
    assert [e["shard"] for e in journal] == list(range(len(want)))
    left = {f.name for f in (root / "parts" / "train").iterdir()}
    assert left == set(), left  # every placed shard's parts were deleted

    kept = journal[:cut]
    if damaged and kept:
        victim = root / "out" / "train" / f"{kept[-1]['name']}.idx"
        victim.write_bytes(victim.read_bytes()[:-8])
    usable = usable_placed(root / "out" / "train", kept, np.uint16)
    assert len(usable) == len(kept) - (1 if damaged and kept else 0)
    consumed = {n for e in usable for n in e["parts"]}
    _write_parts(root / "parts", sizes)  # the redone units write their parts again (same bytes)
    for p in parts:
        if p["name"] in consumed:
            for ext in ("bin", "idx"):
                (root / "parts" / "train" / f"{p['name']}.{ext}").unlink()
    again = PartStream(root / "parts", root / "out", ("train",), np.uint16, shard_tokens, background=False,
                       placed={"train": usable}, journal=lambda *a: None)
    for p in parts:
        again.feed({"shards": {"train": [p]}})
    got = again.finish()["train"]
    assert got == want
    for info in want:
        _, lengths, sha = _read_shard(root / "out" / "train" / info.name)
        _, ref_lengths, ref_sha = _read_shard(ref_root / "out" / "train" / info.name)
        assert sha == ref_sha == info.sha256 and np.array_equal(lengths, ref_lengths)
    assert sorted(f.name for f in (root / "out" / "train").iterdir()) == sorted(
        f"{i.name}.{ext}" for i in want for ext in ("bin", "idx"))


def test_part_intact_checks_sizes_and_crc32(tmp_path):
    from pipeline.shards import RollingShardWriter, part_intact

    rng = np.random.default_rng(3)
    lengths = np.array([5, 7, 3], dtype=np.int64)
    with RollingShardWriter(tmp_path, "u0000000", np.uint16, 1000, checksum=False, sync=False, crc=True) as w:
        w.add_documents(rng.integers(0, 60_000, int(lengths.sum()), dtype=np.uint16), lengths)
    (info,), ((crc, idx_crc),) = w.shards, w.crcs
    part = {**info.to_dict(), "crc32": crc, "idx_crc32": idx_crc}
    binf = tmp_path / f"{info.name}.bin"
    assert crc == zlib.crc32(binf.read_bytes()) and idx_crc == zlib.crc32((tmp_path / f"{info.name}.idx").read_bytes())
    assert part_intact(tmp_path, part, 2)
    good = binf.read_bytes()
    binf.write_bytes(good[:-1] + bytes([good[-1] ^ 0x80]))  # same size
    assert not part_intact(tmp_path, part, 2)
    assert part_intact(tmp_path, info.to_dict(), 2)  # an entry without crc32s: sizes only
    binf.write_bytes(good[:-2])
    assert not part_intact(tmp_path, part, 2) and not part_intact(tmp_path, info.to_dict(), 2)
    binf.unlink()
    assert not part_intact(tmp_path, part, 2)


@pytest.mark.parametrize("fail", [False, True])
def test_periodic_syncs_run_beside_the_copy_and_a_failed_one_names_the_shard(tmp_path, monkeypatch, fail):
    """The fdatasync every SYNC_EVERY bytes runs on a helper thread (the next parts are hashed and
    copied meanwhile); the shard is still fsynced whole at close, and a sync that failed (EIO: the
    disk lost the writes) fails the shard, naming it, with no temporaries left."""
    import threading

    import pipeline.assemble as assemble

    monkeypatch.setattr(assemble, "SYNC_EVERY", 64)  # a sync after every part
    real, threads = os.fdatasync, []

    def fdatasync(fd):
        threads.append(threading.current_thread().name)
        if fail:
            raise OSError(errno.EIO, "Input/output error")
        real(fd)
    monkeypatch.setattr("os.fdatasync", fdatasync)
    parts, docs = _write_parts(tmp_path / "parts", [[40], [40], [40], [40]])
    if fail:
        _assert_placing_fails_cleanly(tmp_path, parts, errno.EIO, background=False)
    else:
        stream = PartStream(tmp_path / "parts", tmp_path / "out", ("train",), np.uint16, 10_000, background=False)
        for p in parts:
            stream.feed({"shards": {"train": [p]}})
        (info,) = stream.finish()["train"]
        ids, _, sha = _read_shard(tmp_path / "out" / "train" / info.name)
        assert np.array_equal(ids, np.concatenate([d[0] for d in docs])) and sha == info.sha256
    assert threads and all(t.startswith("prep-place") for t in threads)  # never on the placing thread
    assert not [t for t in threading.enumerate() if t.name.startswith("prep-place")]  # helpers stopped



@pytest.mark.parametrize("fail", [False, True])
def test_the_index_is_written_beside_the_data_sync_and_a_full_disk_there_names_the_shard(tmp_path, monkeypatch, fail):
    """A concatenated shard's .idx is written (and fsynced) on a helper thread while the shard's
    thread fsyncs its .bin; a write that fails there (ENOSPC, which names no file) fails the shard,
    naming it, with no temporaries left."""
    import threading

    import pipeline.assemble as assemble

    real, threads = assemble.write_idx_blocks, []

    def write_idx_blocks(path, num_seqs, blocks, dtype, sync=True):
        threads.append(threading.current_thread().name)
        if fail:
            path.write_bytes(b"MMIDIDX")  # a partial index, left for the cleanup to remove
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, num_seqs, blocks, dtype, sync)
    monkeypatch.setattr(assemble, "write_idx_blocks", write_idx_blocks)
    parts, docs = _write_parts(tmp_path / "parts", [[40, 3], [40], [5, 40], [40]])
    if fail:
        _assert_placing_fails_cleanly(tmp_path, parts, errno.ENOSPC)
    else:
        stream = PartStream(tmp_path / "parts", tmp_path / "out", ("train",), np.uint16, 10_000)
        for p in parts:
            stream.feed({"shards": {"train": [p]}})
        (info,) = stream.finish()["train"]
        ids, lengths, sha = _read_shard(tmp_path / "out" / "train" / info.name)
        assert np.array_equal(ids, np.concatenate([d[0] for d in docs])) and sha == info.sha256
        assert lengths.tolist() == [40, 3, 40, 5, 40, 40]
    assert len(threads) == 1 and threads[0].startswith("prep-place_")  # a helper, not the shard's own thread

def _stream_with_journal(tmp_path, shard_tokens=60):
    journal = []
    stream = PartStream(tmp_path / "parts", tmp_path / "out", ("train",), np.uint16, shard_tokens,
                        journal=lambda split, index, info, names: journal.append((index, info["name"], names)))
    return stream, journal


def test_shards_are_built_at_once_and_still_journaled_in_order(tmp_path, monkeypatch):
    """Shard 0's build waits (inside its part hashing) until shard 1's build has started: possible
    only if they run on separate threads at once. Shard 1 is then sealed first, yet the journal
    (and the manifest's list) sees shard 0 first, and each shard's parts are deleted after its line."""
    import threading

    import pipeline.assemble as assemble

    parts, docs = _write_parts(tmp_path / "parts", [[30], [30], [30], [30], [30], [30]])  # 3 shards of 2 parts
    second_started = threading.Event()
    real_append = assemble._ShardBuild._append

    def append(self, part):
        if self.index == 1:
            second_started.set()
        elif self.index == 0 and part is self.group[-1]:
            assert second_started.wait(10), "shard 1 did not start while shard 0 was being built"
        real_append(self, part)
    monkeypatch.setattr(assemble._ShardBuild, "_append", append)
    stream, journal = _stream_with_journal(tmp_path)
    for p in parts:
        stream.feed({"shards": {"train": [p]}})
    shards = stream.finish()["train"]
    assert [s.name for s in shards] == ["shard-000000", "shard-000001", "shard-000002"]
    assert [(i, n) for i, n, _ in journal] == [(0, "shard-000000"), (1, "shard-000001"), (2, "shard-000002")]
    assert [names for *_, names in journal] == [[p["name"] for p in parts[k:k + 2]] for k in (0, 2, 4)]
    ids, _, sha = _read_shard(tmp_path / "out" / "train" / "shard-000001")
    assert np.array_equal(ids, np.concatenate([docs[2][0], docs[3][0]])) and sha == shards[1].sha256
    assert not list((tmp_path / "parts" / "train").iterdir())  # every part deleted once journaled


def test_a_failed_shard_stops_the_journal_there(tmp_path, monkeypatch):
    """Shard 0 fails (EIO at its fsync) after shard 1 is whole: shard 1 is not journaled (a re-run
    must rebuild from shard 0), the error names shard 0, and no temporaries are left."""
    import pipeline.assemble as assemble

    parts, _ = _write_parts(tmp_path / "parts", [[30], [30], [30], [30]])
    real_seal = assemble._ShardBuild._seal

    def seal(self):
        if self.index == 0:
            raise OSError(errno.EIO, "Input/output error", str(self.tmp_bin))
        return real_seal(self)
    monkeypatch.setattr(assemble._ShardBuild, "_seal", seal)
    stream, journal = _stream_with_journal(tmp_path)
    with pytest.raises(OSError) as e:
        for p in parts:
            stream.feed({"shards": {"train": [p]}})
        stream.finish()
    stream.abort()
    assert e.value.errno == errno.EIO and e.value.filename.endswith("shard-000000.bin.tmp")
    assert journal == []
    assert not list((tmp_path / "out").rglob("*tmp*"))
    assert sorted(p.name for p in (tmp_path / "parts" / "train").iterdir())[:2] == ["u000.bin", "u000.idx"]


def test_placed_builds_are_released(tmp_path, monkeypatch):
    """Each build waits for the one before it; once placed, nothing keeps the earlier builds (and
    their per-document lengths, ~8 bytes per document) alive: a run of thousands of shards holds a
    bounded few, not a chain of all of them."""
    import gc
    import weakref

    import pipeline.assemble as assemble

    builds = []
    real_init = assemble._ShardBuild.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        builds.append(weakref.ref(self))
    monkeypatch.setattr(assemble._ShardBuild, "__init__", init)
    parts, _ = _write_parts(tmp_path / "parts", [[30]] * 10)  # 5 concatenated shards
    asm = ShardAssembler(tmp_path / "parts" / "train", tmp_path / "out", np.uint16, 60)
    (tmp_path / "out").mkdir()
    for p in parts:
        asm.add(p)
    for b in list(asm._closing):  # mid-run: the closed shards placed, the last one still open
        b.wait()
    gc.collect()
    alive = [ref() is not None for ref in builds]
    assert len(alive) == 5 and not any(alive[:2])  # at most the closing ones and the open one remain
    assert len(asm.close()) == 5


def test_a_shard_index_is_written_from_its_parts_a_block_at_a_time(tmp_path, monkeypatch):
    """One shard of many tiny documents: the parent kept every document's length (8 bytes each), then
    wrote the .idx from arrays of all of them (~44 bytes per document at once), so its peak memory grew
    with the corpus (4 M documents of ~12 tokens in one shard: 206 MiB against ~60). The index is now
    written from the parts' indexes a block at a time: what placing allocates (tracemalloc, numpy's
    arrays included: the same count on any machine) stays under what the shard's lengths alone take
    as int32, and the index holds every document's length and byte offset."""
    import tracemalloc

    import pipeline.manifest as manifest

    monkeypatch.setattr(manifest, "IDX_BLOCK_DOCS", 1000)
    rng = np.random.default_rng(5)
    sizes = [rng.integers(1, 6, 50_000) for _ in range(4)]  # 200,000 documents of 1-5 tokens
    parts, docs = _write_parts(tmp_path / "parts", sizes)
    out = tmp_path / "out"
    out.mkdir()
    asm = ShardAssembler(tmp_path / "parts" / "train", out, np.uint16, 1 << 30)
    tracemalloc.start()
    try:
        for p in parts:
            asm.add(p)
        (info,) = asm.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    lengths = np.concatenate(sizes)
    assert peak < 4 * lengths.size, peak  # 800 KB; written whole: ~9 MB
    header, got_lengths, pointers = read_idx(out / f"{info.name}.idx")
    assert header.num_seqs == info.num_docs == lengths.size
    assert np.array_equal(got_lengths, lengths)
    assert np.array_equal(pointers, 2 * (np.cumsum(lengths) - lengths))  # uint16: 2 bytes per token
    ids, _, sha = _read_shard(out / info.name)
    assert np.array_equal(ids, np.concatenate([d[0] for d in docs])) and sha == info.sha256


def test_a_kept_shard_index_is_checked_block_by_block(tmp_path, monkeypatch):
    """A resumed run checks a journaled shard's index a block at a time (usable_placed): whole, it is
    kept; one pointer wrong in its last block, it is rebuilt."""
    import pipeline.manifest as manifest
    from pipeline.assemble import usable_placed

    monkeypatch.setattr(manifest, "IDX_BLOCK_DOCS", 3)
    parts, _ = _write_parts(tmp_path / "parts", [[2, 3, 4, 5], [1, 1, 1], [7, 8]])  # 9 documents: 3 blocks
    journal = []
    stream = PartStream(tmp_path / "parts", tmp_path / "out", ("train",), np.uint16, 10_000, background=False,
                        journal=lambda split, k, info, names: journal.append({**info, "parts": names}))
    for p in parts:
        stream.feed({"shards": {"train": [p]}})
    stream.finish()
    dst = tmp_path / "out" / "train"
    assert usable_placed(dst, journal, np.uint16) == journal
    idx = dst / f"{journal[0]['name']}.idx"
    data = bytearray(idx.read_bytes())
    data[34 + 4 * 9 + 8 * 8] ^= 2  # the last document's pointer: 2 bytes more
    idx.write_bytes(bytes(data))
    assert usable_placed(dst, journal, np.uint16) == []
