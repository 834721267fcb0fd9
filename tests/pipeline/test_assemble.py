"""pipeline.assemble: parts -> final shards in unit order (greedy groups, links or concatenation)."""

from __future__ import annotations

import errno
import hashlib

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
        stream = PartStream(tmp_path / "parts", tmp_path / "out", ("train",), np.uint16, 10_000)
        with pytest.raises(OSError) as e:
            for p in parts:
                stream.feed({"shards": {"train": [p]}})
            stream.finish()
        stream.abort()
    finally:
        faults.configure(None)
    assert e.value.errno == errno.ENOSPC
    assert e.value.filename.endswith("/out/train/shard-000000.bin.tmp")
    assert not list((tmp_path / "out").rglob("*tmp*"))
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
