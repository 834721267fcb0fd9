"""Opening datasets safely: clear errors naming the file and the fix; lazy per-process reads."""

import json
import os
import pickle
import shutil

import numpy as np
import pytest

from loaders import MemmapLoader
from loaders.cache import ArrayCache
from loaders.shards import TokenShards
from pipeline.errors import PrepError

from .loaderkit import make_dataset


@pytest.fixture
def fresh(tmp_path):
    # its ids are positions, not documents ending with an EOS id: a manifest saying `boundary: eos`
    # would be false, and `verify=True` (prep verify's full check) now checks each document's end
    tok = {"name": "gpt2", "backend": "test", "sha256": "ab" * 32, "boundary": "none"}
    return make_dataset(tmp_path / "d", [5, 7, 3, 9, 4, 6], shard_tokens=12, tokenizer=tok)


def shard_files(root, ext):
    return sorted((root / "train").glob(f"*.{ext}"))


def test_reads_cross_shard_boundaries(fresh):
    shards = TokenShards(fresh)
    assert len(shards.names) > 2 and shards.num_docs == 6 and shards.num_tokens == 34  # guard: several shards
    out = np.zeros(40, dtype=np.int32)
    shards.read_into([0, 10, 33], [34, 5, 1], out, [0, 34, 39])
    assert np.array_equal(out[:34], np.arange(1, 35))
    assert np.array_equal(out[34:39], np.arange(11, 16)) and out[39] == 34
    with pytest.raises(IndexError):
        shards.read_into([30], [5], out, [0])


def test_doc_index_matches_lengths(fresh):
    idx = TokenShards(fresh).doc_index(ArrayCache(None))
    assert np.array_equal(idx["lengths"], [5, 7, 3, 9, 4, 6])
    assert np.array_equal(idx["starts"], [0, 5, 12, 15, 24, 28, 34])


def test_file_descriptors_are_per_process(fresh):
    shards = TokenShards(fresh)
    out = np.zeros(3, dtype=np.int32)
    shards.read_into([0], [3], out, [0])
    assert shards._fds  # opened lazily, on first read
    clone = pickle.loads(pickle.dumps(shards))
    assert not clone._fds  # a spawned worker opens its own
    clone.read_into([5], [3], out, [0])
    assert np.array_equal(out, [6, 7, 8])
    pid = os.fork()
    if pid == 0:  # forked child: must not reuse the parent's descriptors
        try:
            shards.read_into([12], [3], out, [0])
            ok = np.array_equal(out, [13, 14, 15]) and shards._pid == os.getpid()
        finally:
            os._exit(0 if ok else 1)
    assert os.waitpid(pid, 0)[1] == 0


def test_missing_manifest(tmp_path):
    with pytest.raises(PrepError, match="no manifest.json.*prep tokenize"):
        MemmapLoader(tmp_path, batch_size=1, seq_len=4)


def test_unknown_format_version(fresh):
    m = json.loads((fresh / "manifest.json").read_text())
    m["format_version"] = 7
    (fresh / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(PrepError, match="format_version 7"):
        TokenShards(fresh)


def test_missing_split(fresh):
    with pytest.raises(PrepError, match="no split 'val'.*'train'"):
        TokenShards(fresh, "val")


def test_missing_file_is_named(fresh):
    victim = shard_files(fresh, "idx")[1]
    victim.unlink()
    with pytest.raises(PrepError, match=f"{victim.name}: missing.*prep tokenize"):
        TokenShards(fresh)


def test_truncated_bin_is_named(fresh):
    victim = shard_files(fresh, "bin")[0]
    data = victim.read_bytes()
    victim.write_bytes(data[:-4])
    with pytest.raises(PrepError, match=f"{victim.name}: {len(data) - 4} bytes, the manifest implies {len(data)}"):
        MemmapLoader(fresh, batch_size=1, seq_len=4)


def test_index_from_another_dataset(fresh, tmp_path):
    other = make_dataset(tmp_path / "o", [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], shard_tokens=100)
    shutil.copy(shard_files(other, "idx")[0], shard_files(fresh, "idx")[0])
    with pytest.raises(PrepError, match="index holds 10 int32 documents"):
        TokenShards(fresh)


def test_expect_tokenizer(fresh):
    assert MemmapLoader(fresh, batch_size=1, seq_len=4, expect_tokenizer="gpt2")
    assert MemmapLoader(fresh, batch_size=1, seq_len=4, expect_tokenizer="ab" * 32)  # by sha256
    with pytest.raises(PrepError, match="tokenized with 'gpt2'.*not 'llama3'"):
        MemmapLoader(fresh, batch_size=1, seq_len=4, expect_tokenizer="llama3")


def test_verify_catches_same_size_corruption(fresh):
    TokenShards(fresh, verify=True)  # a good dataset verifies
    victim = shard_files(fresh, "bin")[0]
    data = bytearray(victim.read_bytes())
    data[0] ^= 0xFF
    victim.write_bytes(bytes(data))
    TokenShards(fresh)  # sizes still match: the cheap check cannot see it
    with pytest.raises(PrepError, match=f"{victim.name}: sha256 .* does not match"):
        MemmapLoader(fresh, batch_size=1, seq_len=4, verify=True)


def test_too_short_for_windows(tmp_path):
    d = make_dataset(tmp_path / "s", [3, 2])
    with pytest.raises(PrepError, match="fewer than seq_len \\+ 1"):
        MemmapLoader(d, batch_size=1, seq_len=8)


def test_epoch_smaller_than_a_batch(fresh):
    loader = MemmapLoader(fresh, batch_size=64, seq_len=4, mode="grouped")
    with pytest.raises(PrepError, match="fewer than one global batch of 64.*drop_last=False"):
        next(iter(loader))
    assert len(list(MemmapLoader(fresh, batch_size=64, seq_len=4, mode="grouped", drop_last=False))) == 1


def test_bad_config_values(fresh):
    for bad in ({"mode": "pack"}, {"packing": "greedy"}, {"long_docs": "drop"}, {"batch_size": 0}):
        args = {"batch_size": 1, "seq_len": 4, **bad}
        with pytest.raises(PrepError):
            MemmapLoader(fresh, **args)
    with pytest.raises(PrepError, match="rank 2 is outside world_size 2"):
        MemmapLoader(fresh, batch_size=1, seq_len=4, rank=2, world_size=2)


def test_count_past_int64_is_a_prep_error(fresh):
    """numpy's OverflowError escaped MemmapLoader for a hand-edited manifest."""
    m = json.loads((fresh / "manifest.json").read_text())
    m["splits"]["train"]["shards"][0]["num_tokens"] = 10**30
    (fresh / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(PrepError, match="num_tokens is 10+, more than any dataset holds"):
        MemmapLoader(fresh, batch_size=1, seq_len=4)


@pytest.mark.parametrize("name", ["../val/shard-000000", "sub/shard-000000", ".hidden"])
def test_a_shard_name_that_is_a_path_is_a_prep_error(fresh, name):
    """A hand-edited manifest's `../val/shard-000000` raised pathlib's "Invalid name" ValueError from
    TokenShards (prep verify reported it; the loader did not)."""
    m = json.loads((fresh / "manifest.json").read_text())
    m["splits"]["train"]["shards"][0]["name"] = name
    (fresh / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(PrepError, match="is not a plain file name; the manifest is damaged"):
        MemmapLoader(fresh, batch_size=1, seq_len=4)


def _idx_edit(path, fn):
    import struct
    raw = bytearray(path.read_bytes())
    n = struct.unpack_from("<Q", raw, 18)[0]
    fn(raw, n)
    path.write_bytes(bytes(raw))


def _swap_offsets(raw, n):
    at = 34 + 4 * n
    raw[at:at + 16] = raw[at + 8:at + 16] + raw[at:at + 8]


def _shift_length(raw, n):
    import struct
    a, b = struct.unpack_from("<ii", raw, 34)
    struct.pack_into("<ii", raw, 34, a + 1, b - 1)


@pytest.mark.parametrize("damage, match", [
    (lambda raw, n: raw.__setitem__(slice(0, 4), b"XXXX"), "not a Megatron MMIDIDX index"),
    (lambda raw, n: raw.__setitem__(17, 5), "unsupported dtype code 5"),
    (_swap_offsets, "lengths/offsets do not tile"),
    (_shift_length, "lengths/offsets do not tile"),
])
@pytest.mark.parametrize("mode", ["windows", "packed", "grouped"])
def test_damaged_index_is_a_prep_error_before_any_batch(fresh, damage, match, mode):
    """verify=False: a damaged .idx stops the loader with the file named, at construction or at the
    first batch, in every mode that reads document bounds; windows (not doc-aligned) reads no bounds,
    and its tokens stay right."""
    victim = shard_files(fresh, "idx")[0]
    ref = [b["input_ids"].clone() for b in MemmapLoader(fresh, batch_size=2, seq_len=4, mode="windows", seed=0,
                                                        cache_dir=False)]
    _idx_edit(victim, damage)
    try:
        loader = MemmapLoader(fresh, batch_size=2, seq_len=4, mode=mode, seed=0, cache_dir=False)
        batches = [b["input_ids"].clone() for b in loader]
    except PrepError as e:
        assert str(e).startswith(str(victim)) and match in str(e), e
        return
    assert mode == "windows" and "tile" in match, mode  # only windows gets here, only for bounds damage
    assert len(batches) == len(ref) and all((a == b).all() for a, b in zip(batches, ref))


def test_a_directory_without_a_manifest_says_which_case_it_is(fresh, tmp_path):
    """Every case said "missing or incomplete (finish it with `prep tokenize`)": for a split folder
    (DIR/train) and a run still writing, that advice is wrong."""
    with pytest.raises(PrepError, match=rf"{fresh / 'train'}: no manifest.json; it is inside the dataset {fresh}: "
                                        rf"pass {fresh} \(with split='train'"):
        MemmapLoader(fresh / "train", batch_size=1, seq_len=4)
    writing = tmp_path / "writing"
    (writing / ".prep").mkdir(parents=True)
    with pytest.raises(PrepError) as e:
        MemmapLoader(writing, batch_size=1, seq_len=4)
    # the CLI's sentence (pipeline.dataset_path), with the loader's own last step
    assert str(e.value) == (f"{writing}: no manifest.json yet: a `prep tokenize` run is writing this dataset or "
                            f"stopped before finishing it ({writing / '.prep'} holds its state); wait for it to end, "
                            "or re-run the same `prep tokenize` command to finish it, then build the loader again")
    with pytest.raises(PrepError, match="nowhere: no such directory; pass the directory `prep tokenize` wrote"):
        MemmapLoader(tmp_path / "nowhere", batch_size=1, seq_len=4)


def test_a_file_given_for_the_dataset_names_the_dataset(fresh, tmp_path):
    """The manifest.json itself was told to pass "(with split='manifest.json' for this folder's split)", and a
    shard file to "finish it with `prep tokenize`"; each names the dataset directory now, the loader's way."""
    def error(path) -> str:
        with pytest.raises(PrepError) as e:
            MemmapLoader(path, batch_size=1, seq_len=4)
        assert "prep tokenize`)" not in str(e.value) and "split='manifest.json'" not in str(e.value)
        return str(e.value)

    manifest = fresh / "manifest.json"
    assert error(manifest) == (f"{manifest}: the dataset's manifest, not its directory; pass the directory that "
                               f"holds it: {fresh}")
    shard = sorted((fresh / "train").glob("*.bin"))[0]
    assert error(shard) == (f"{shard}: a file inside the dataset {fresh}, not a dataset directory; pass {fresh} "
                            "(with split='train' for this folder's split)")
    (fresh / "notes").mkdir()  # a folder in the dataset that is no split: no split= hint
    assert error(fresh / "notes") == f"{fresh / 'notes'}: no manifest.json; it is inside the dataset {fresh}: pass {fresh}"
    stray = tmp_path / "tokens.bin"
    stray.write_bytes(b"")
    assert error(stray) == (f"{stray}: a file, not a directory; pass the directory `prep tokenize` wrote (the one "
                            "holding manifest.json)")
