"""The on-disk format: the .idx bytes follow Megatron's MMIDIDX v1 layout exactly; writers cut right."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeline.readers.jsonl as jsonl
from pipeline.errors import PrepError
from pipeline.manifest import dtype_for_vocab, read_idx, write_idx, write_idx_blocks
from pipeline.shards import RollingShardWriter, check_id_range


def test_idx_layout_byte_for_byte(tmp_path):
    lengths = np.array([3, 0, 7], dtype=np.int64)
    write_idx(tmp_path / "a.idx", lengths, np.uint16)
    raw = (tmp_path / "a.idx").read_bytes()
    expect = (b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8) + struct.pack("<Q", 3)
              + struct.pack("<Q", 4) + struct.pack("<3i", 3, 0, 7) + struct.pack("<3q", 0, 6, 6)
              + struct.pack("<4q", 0, 1, 2, 3))
    assert raw == expect
    header, got_len, got_ptr = read_idx(tmp_path / "a.idx")
    assert header.num_seqs == 3 and header.dtype == np.uint16
    assert got_len.tolist() == [3, 0, 7] and got_ptr.tolist() == [0, 6, 6]


def _reference_idx(lengths: list[int], code: int, itemsize: int) -> bytes:
    """The MMIDIDX v1 bytes, built here from the layout, independently of pipeline.manifest."""
    n = len(lengths)
    pointers = [itemsize * sum(lengths[:i]) for i in range(n)]
    return (b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, n, n + 1) + struct.pack(f"<{n}i", *lengths)
            + struct.pack(f"<{n}q", *pointers) + struct.pack(f"<{n + 1}q", *range(n + 1)))


@settings(max_examples=60, deadline=None)
@given(blocks=st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=7), max_size=6),
       block_docs=st.integers(1, 4), wide=st.booleans())
def test_an_index_written_in_blocks_is_the_index_written_whole(tmp_path_factory, blocks, block_docs, wide):
    """write_idx_blocks (a final shard's index from its parts' indexes, a block at a time) writes the
    layout's bytes, whatever the blocks and the block size (pointers carried across blocks, past 2^32
    bytes for int32 ids), and returns the file's crc32."""
    import zlib

    import pipeline.manifest as manifest

    path = tmp_path_factory.mktemp("idx") / "a.idx"
    lengths = [n for b in blocks for n in b]
    dtype, code = (np.int32, 4) if wide else (np.uint16, 8)
    real = manifest.IDX_BLOCK_DOCS
    manifest.IDX_BLOCK_DOCS = block_docs  # not monkeypatch: hypothesis runs examples in one test call
    try:
        crc = write_idx_blocks(path, len(lengths), lambda: [np.array(b, dtype="<i4") for b in blocks], dtype)
    finally:
        manifest.IDX_BLOCK_DOCS = real
    assert path.read_bytes() == _reference_idx(lengths, code, np.dtype(dtype).itemsize)
    assert crc == zlib.crc32(path.read_bytes())


def test_idx_crc_and_sync(tmp_path, monkeypatch):
    """write_idx returns the file's crc32 (a worker's journal entry carries it); only a final shard's
    index is fsynced, never a worker's part."""
    import os
    import zlib
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    crc = write_idx(tmp_path / "part.idx", np.array([5, 1]), np.uint16, sync=False)
    assert crc == zlib.crc32((tmp_path / "part.idx").read_bytes()) and synced == []
    assert write_idx(tmp_path / "shard.idx", np.array([5, 1]), np.uint16) == crc and len(synced) == 1
    with RollingShardWriter(tmp_path / "parts", "u0", np.uint16, 100, checksum=False, sync=False, crc=True) as w:
        w.add_documents(np.arange(6, dtype=np.uint16), np.array([5, 1]))
    assert synced == [synced[0]]  # the part's .bin and .idx: no fsync
    assert w.crcs[0][1] == crc == zlib.crc32((tmp_path / "parts" / "u0-0000.idx").read_bytes())


def test_int32_pointers_are_int64(tmp_path):
    lengths = np.full(3, 2**30, dtype=np.int64)  # 4 GiB of int32 tokens per doc: offsets beyond 2^32
    write_idx(tmp_path / "big.idx", lengths, np.int32)
    _, _, ptr = read_idx(tmp_path / "big.idx")
    assert ptr.tolist() == [0, 2**32, 2**33]


def test_dtype_rule():
    assert dtype_for_vocab(50257) == np.uint16
    assert dtype_for_vocab(65536) == np.uint16  # Megatron's < 65500 rule would waste 2x here
    assert dtype_for_vocab(65537) == np.int32
    assert dtype_for_vocab(128256) == np.int32


def test_id_range_check_refuses_wrap():
    check_id_range(np.array([0, 65535]), np.dtype(np.uint16), "x")
    with pytest.raises(PrepError, match="65536 does not fit uint16"):
        check_id_range(np.array([1, 65536]), np.dtype(np.uint16), "x")


def test_truncated_idx_is_refused(tmp_path):
    write_idx(tmp_path / "a.idx", np.array([1, 2]), np.uint16)
    data = (tmp_path / "a.idx").read_bytes()
    (tmp_path / "a.idx").write_bytes(data[:-3])
    with pytest.raises(PrepError, match="truncated or corrupt"):
        read_idx(tmp_path / "a.idx")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=40), st.integers(1, 60), st.integers(1, 4))
def test_rolling_writer_never_splits_documents(tmp_path_factory, lengths, shard_tokens, batches):
    d = tmp_path_factory.mktemp("roll")
    lengths = np.array(lengths, dtype=np.int64)
    ids = np.arange(lengths.sum(), dtype=np.uint16)
    cuts = np.array_split(np.arange(len(lengths)), batches)
    with RollingShardWriter(d, "u", np.uint16, shard_tokens) as w:
        for c in cuts:
            if len(c):
                lo, hi = int(lengths[:c[0]].sum()), int(lengths[:c[-1] + 1].sum())
                w.add_documents(ids[lo:hi], lengths[c])
    got_lengths, got_ids = [], []
    for s in w.shards:
        _, ln, _ = read_idx(d / f"{s.name}.idx")
        got_lengths += ln.tolist()
        got_ids.append(np.fromfile(d / f"{s.name}.bin", dtype=np.uint16))
        assert s.num_tokens <= shard_tokens or s.num_docs == 1
    assert got_lengths == lengths.tolist()
    assert np.array_equal(np.concatenate(got_ids), ids)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=30),
       st.integers(1, 50), st.integers(1, 16), st.booleans())
def test_byte_range_units_give_each_line_to_exactly_one_unit(lines, cut, block, final_newline):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    old = jsonl.READ_BLOCK
    jsonl.READ_BLOCK = block
    try:
        got = []
        for start in range(0, len(data), cut):
            f = io.BytesIO(data)
            pos = jsonl.seek_line_start(f, start)
            end = min(start + cut, len(data))
            if pos < end:
                got += list(jsonl.iter_lines(f, pos, end))
    finally:
        jsonl.READ_BLOCK = old
    expect = data.split(b"\n") if data else []
    if data.endswith(b"\n"):
        expect.pop()
    assert [line for _, line in got] == expect
    assert all(data[o:o + len(line)] == line for o, line in got)
