"""A dataset rewritten under an open loader (`prep tokenize --overwrite`, a shard replaced by rename,
a file cut in place) is refused with one line, never mixed into the batches of the planned one.

Before: the loader read the new shards at the old offsets (new tokens in the old plan's windows, the
next pass entirely on the new files) or stopped with "short read"."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from loaders import MemmapLoader
from loaders.shards import DatasetChanged
from pipeline.errors import PrepError
from pipeline.executor import tokenize
from pipeline.recipe import Recipe
from tests.conftest import DEMO_TOKENIZER, demo_texts

from .loaderkit import make_dataset

KW = dict(batch_size=4, seq_len=64, cache_dir=False)


def _recipe(tmp_path, out, seed: int) -> Recipe:
    corpus = tmp_path / "c.jsonl"
    if not corpus.exists():
        corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in demo_texts(300) if t))
    # 3,000-token shards: the 300 documents (~35 K tokens) make ~12 shards, so a pass opens shards
    # after the rewrite; another seed routes other documents to val, so the new train split differs
    return Recipe.from_dict({"name": "t", "source": {"path": str(corpus)}, "tokenizer": {"path": str(DEMO_TOKENIZER)},
                             "output": {"dir": str(out), "shard_tokens": 3_000, "val_fraction": 0.2, "seed": seed},
                             "num_workers": 1})


def _ids(batch) -> np.ndarray:
    return batch["input_ids"].numpy().copy()


@pytest.mark.parametrize("workers", [0, 2])
def test_prep_overwrite_under_an_open_loader_stops_it_instead_of_mixing_datasets(tmp_path, workers):
    out = tmp_path / "ds"
    tokenize(_recipe(tmp_path, out, seed=1), show_progress=False)
    reference = [_ids(b) for b in MemmapLoader(out, **KW)]  # an uninterrupted pass over the first dataset
    loader = MemmapLoader(out, num_workers=workers, **KW)
    it = iter(loader)
    got = [_ids(next(it))]
    tokenize(_recipe(tmp_path, out, seed=2), overwrite=True, show_progress=False)
    with pytest.raises(DatasetChanged) as e:
        for b in it:  # the rest of this pass: the old files still open, then a shard opened after the rewrite
            got.append(_ids(b))
        next(iter(loader))  # the next pass: the manifest was replaced
    # every batch handed out is the planned dataset's; none holds the new one's tokens
    assert len(got) <= len(reference)
    for k, b in enumerate(got):
        np.testing.assert_array_equal(b, reference[k])
    message = str(e.value)
    assert message.startswith(f"{out}: the dataset changed while this loader was using it") and "\n" not in message
    assert "Construct a new MemmapLoader over the new dataset" in message
    # the position saved is the old dataset's: the new dataset's loader refuses it, naming the datasets
    state = loader.state_dict()
    assert (state["epoch"], state["consumed"]) in {(0, len(got) * 4), (1, 0)}  # mid-pass, or the pass ran out
    with pytest.raises(PrepError, match="loader state was saved for another run: datasets"):
        MemmapLoader(out, **KW).load_state_dict(state)
    loader.close()


@pytest.fixture
def synthetic(tmp_path):
    """Position-id tokens in 4 shards of 600 tokens (part-0000 .. part-0003)."""
    return make_dataset(tmp_path / "d", np.full(60, 40), shard_tokens=600)


def _replace_by_rename(path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_replaced_by_rename_is_refused_on_open_naming_it(synthetic, workers):
    loader = MemmapLoader(synthetic, num_workers=workers, **KW)
    shard = synthetic / "train" / "part-0002.bin"
    _replace_by_rename(shard, (np.fromfile(shard, dtype=np.int32) + 7).tobytes())  # same size, other tokens
    with pytest.raises(DatasetChanged, match=r"\(part-0002.bin of split 'train' was replaced or modified; ") as e:
        for b in loader:
            ids = b["input_ids"].numpy()
            assert (ids <= 2400).all()  # position ids + 1: 60 x 40 tokens; +7 would be the replaced file's
    assert "Traceback" not in str(e.value) and "worker" not in str(e.value)


def test_a_removed_manifest_stops_the_next_pass(synthetic):
    loader = MemmapLoader(synthetic, **KW)
    next(iter(loader))
    (synthetic / "manifest.json").unlink()  # prep's --overwrite removes it first, writes it last
    with pytest.raises(DatasetChanged, match=r"\(manifest.json was removed; was it rebuilt"):
        next(iter(loader))


def test_a_shard_cut_in_place_while_open_is_named(synthetic):
    loader = MemmapLoader(synthetic, shuffle=False, **KW)  # in order: part-0000 is read first, then kept open
    it = iter(loader)
    next(it)
    os.truncate(synthetic / "train" / "part-0000.bin", 100)
    with pytest.raises(DatasetChanged, match=r"\(part-0000.bin of split 'train' was cut to 100 bytes while open; "):
        for _ in it:
            pass
        next(iter(loader))


def test_an_unchanged_dataset_reads_as_before(synthetic):
    """No false alarm: reading the files (atime) and passing epochs change nothing."""
    first = [_ids(b) for b in MemmapLoader(synthetic, num_workers=2, **KW)]
    loader = MemmapLoader(synthetic, **KW)
    (synthetic / "train" / "part-0001.bin").read_bytes()
    for _ in range(2):
        loader.set_epoch(0)
        again = [_ids(b) for b in loader]
        assert len(again) == len(first)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)
