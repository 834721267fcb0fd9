"""Edge data: splits whose documents give a mode nothing (or nothing to learn) to batch."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaders import MemmapLoader
from pipeline.errors import PrepError

from .loaderkit import collect, make_dataset


@pytest.fixture(scope="module")
def empty_docs(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("empty") / "e", [0, 0, 0], offset=5_000_000)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("small") / "s", [30, 40, 50, 60, 70])


def test_all_empty_documents_alone_is_one_clear_error(empty_docs):
    # was TooSmallForABatch "0 samples ... or pass drop_last=False", with drop_last=False already given
    loader = MemmapLoader(empty_docs, batch_size=1, seq_len=16, mode="packed", cache_dir=False, drop_last=False)
    with pytest.raises(PrepError, match="all of them are empty") as e:
        next(iter(loader))
    assert "drop_last" not in str(e.value) and str(empty_docs) in str(e.value)


@pytest.mark.parametrize("spe", [None, 6])
def test_mix_with_an_all_empty_source_is_refused(small, empty_docs, spe):
    # was: an epoch of 1 sample, silently (spe None), or an IndexError from the empty pack plan (spe 6)
    loader = MemmapLoader([(small, 0.5), (empty_docs, 0.5)], batch_size=1, seq_len=16, mode="packed",
                          cache_dir=False, samples_per_epoch=spe)
    with pytest.raises(PrepError, match="all of them are empty") as e:
        collect(loader)
    assert str(empty_docs) in str(e.value)
    with pytest.raises(PrepError, match="all of them are empty"):
        loader.stats()  # was ZeroDivisionError in the fill


def test_mix_with_nonempty_sources_still_works(small):
    with pytest.warns(UserWarning, match="listed 2 times in the mix"):  # the same dataset twice: legal, but warned
        loader = MemmapLoader([(small, 0.5), (small, 0.5)], batch_size=1, seq_len=16, mode="packed", cache_dir=False)
    got = collect(loader)
    assert len(got) > 1 and all(np.all(b["input_ids"] >= 0) for b in got)


@pytest.fixture(scope="module")
def short_docs(tmp_path_factory):
    """Empty and 1-token documents (no next-token target) among ordinary ones, across shards."""
    lens = np.array([0, 1, 1, 0, 1, 40, 50, 60, 1, 70, 30, 20, 25, 1, 0, 2, 33, 1, 1, 9, 0])
    return make_dataset(tmp_path_factory.mktemp("short") / "s", lens, shard_tokens=60), lens


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("max_tokens", [None, 64])
def test_grouped_rows_all_have_a_target(short_docs, shuffle, max_tokens):
    # was: empty / 1-token documents became rows (an empty one with an all-False attention_mask row),
    # sorted together into batches whose labels were all -100
    path, lens = short_docs
    kw = dict(batch_size=2, seq_len=32, mode="grouped", pad_multiple=8, shuffle=shuffle, max_tokens=max_tokens,
              cache_dir=False, drop_last=False)
    batches = collect(MemmapLoader(path, **kw))
    firsts = []
    for b in batches:
        assert (b["labels"] != -100).sum() > 0  # every batch trains on something
        real = b["attention_mask"].sum(axis=1) > 0
        assert np.all((b["labels"][real] != -100).sum(axis=1) > 0)  # and so does every real row
        firsts.extend((b["input_ids"][real, 0] - 1).tolist())
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    assert sorted(firsts) == sorted(starts[lens >= 2].tolist())  # each document with a target once
    with_worker = collect(MemmapLoader(path, num_workers=1, **kw))  # the worker maps samples the same way
    assert len(with_worker) == len(batches)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(batches, with_worker) for k in a)


def test_grouped_split_of_only_targetless_documents_is_refused(tmp_path):
    path = make_dataset(tmp_path / "ones", [1, 0, 1, 1])
    loader = MemmapLoader(path, batch_size=1, seq_len=16, mode="grouped", cache_dir=False, drop_last=False)
    with pytest.raises(PrepError, match="none of its 4 documents has 2 or more tokens"):
        next(iter(loader))


def test_close_releases_shard_files_and_the_loader_still_works(tmp_path):
    import os

    path = make_dataset(tmp_path / "many", np.full(60, 20), shard_tokens=40)  # 30 shards
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = fds()
    loader = MemmapLoader(path, batch_size=4, seq_len=16, cache_dir=False)
    first = collect(loader)
    assert fds() > before + 10  # guard: a pass with num_workers=0 opens the shards in this process
    loader.close()
    assert fds() == before  # was: open until the loader was garbage collected
    again = collect(loader)  # the next epoch re-opens what it reads
    assert len(again) == len(first) and all(np.all(np.diff(b["input_ids"], axis=1) == 1) for b in again)
    loader.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lens=st.lists(st.integers(0, 40), min_size=1, max_size=40).filter(lambda x: max(x) >= 2),
       batch=st.integers(1, 4), shuffle=st.booleans(), seed=st.integers(0, 3))
def test_grouped_covers_each_document_with_a_target_once(tmp_path_factory, lens, batch, shuffle, seed):
    lens = np.asarray(lens)
    path = make_dataset(tmp_path_factory.mktemp("g") / "d", lens, shard_tokens=50)
    loader = MemmapLoader(path, batch_size=batch, seq_len=16, mode="grouped", pad_multiple=4, shuffle=shuffle,
                          seed=seed, cache_dir=False, drop_last=False)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    firsts = []
    for b in collect(loader):
        real = b["attention_mask"].sum(axis=1) > 0
        assert np.all((b["labels"][real] != -100).sum(axis=1) >= 1)  # every row has a target
        assert np.all(b["labels"][~real] == -100)  # padding rows none
        firsts.extend((b["input_ids"][real, 0] - 1).tolist())
    assert sorted(firsts) == sorted(starts[lens >= 2].tolist())


@pytest.mark.parametrize("mode", ["windows", "packed", "grouped"])
def test_more_ranks_than_rows_get_clean_padding_rows(small, mode):
    """batch_size 1, drop_last=False, more ranks than the epoch's last global batch has rows: a rank left
    without a row gets a padding row. In windows mode its input_ids held -100 (masking the labels wrote
    through a view into the tokens): an out-of-range embedding index on the GPU."""
    world, seen, padding = 8, [], 0
    for rank in range(world):
        loader = MemmapLoader(small, batch_size=1, seq_len=20, mode=mode, rank=rank, world_size=world,
                              drop_last=False, cache_dir=False)
        batches = collect(loader)
        seen.append(len(batches))
        for b in batches:
            assert b["input_ids"].min() >= 0
            if b["input_ids"].max() == 0:  # a padding row (position ids start at 1): nothing to learn
                assert np.all(b["labels"] == -100)
                padding += 1
    assert len(set(seen)) == 1  # every rank takes the same number of steps
    assert padding  # guard: 12 windows, 13 packed rows, 5 documents for 8 ranks: some ranks pad


# 42 rows of 4 tokens each mode: one global batch of 4 ranks x 8 rows, and a tail of 10 rows
TAIL_OF_TEN = {"windows": [169], "packed": [4] * 42, "grouped": [4] * 42}


@pytest.mark.parametrize("mode", sorted(TAIL_OF_TEN))
def test_a_partial_last_batch_gives_every_rank_a_target_so_no_rank_loss_is_nan(tmp_path, mode):
    """drop_last=False, 4 ranks of batch_size 8, a last global batch of 10 rows: it was cut into slices
    of 8, so ranks 2 and 3 got padding rows only and their mean cross_entropy was NaN (under DDP the
    all-reduce spreads it to every rank). The 10 rows are now spread 2, 3, 2, 3, in order."""
    torch = pytest.importorskip("torch")
    path = make_dataset(tmp_path / "d", TAIL_OF_TEN[mode])
    lasts = []
    for rank in range(4):
        batches = collect(MemmapLoader(path, batch_size=8, seq_len=4, mode=mode, rank=rank, world_size=4,
                                       drop_last=False, cache_dir=False))
        assert len(batches) == 2  # guard: one full global batch, then the tail
        lasts.append(batches[-1])
    targets = [int((b["labels"] != -100).any(axis=1).sum()) for b in lasts]
    assert targets == [2, 3, 2, 3]
    for b in lasts:
        labels = torch.from_numpy(b["labels"]).reshape(-1)
        loss = torch.nn.functional.cross_entropy(torch.zeros(labels.numel(), 256), labels)
        assert torch.isfinite(loss)
    # the tail once, in order: rank after rank, the first token of each real row
    firsts = np.concatenate([b["input_ids"][b["input_ids"][:, 0] > 0, 0] for b in lasts])
    whole = collect(MemmapLoader(path, batch_size=32, seq_len=4, mode=mode, drop_last=False, cache_dir=False))[-1]
    assert firsts.tolist() == whole["input_ids"][:10, 0].tolist() and whole["input_ids"][10:].max() == 0


@pytest.mark.parametrize("kw, advice", [
    ({"batch_size": 1, "world_size": 8}, "global batch of 8; use fewer than 8 ranks, or pass drop_last=False"),
    ({"batch_size": 2, "world_size": 4}, "lower batch_size (now 2), use fewer than 4 ranks, or pass drop_last=False"),
    ({"batch_size": 8, "world_size": 1}, "global batch of 8; lower batch_size (now 8), or pass drop_last=False"),
    ({"batch_size": 1, "world_size": 8, "mode": "grouped", "max_tokens": 64},
     "lower max_tokens (now 64), use fewer than 8 ranks, or pass drop_last=False"),
])
def test_an_epoch_under_one_global_batch_names_what_to_change(small, kw, advice):
    """The advice was "lower batch_size, or pass drop_last=False" also where batch_size was already 1 (the
    ranks make the global batch) and with max_tokens (where batch_size sets no batch's size)."""
    kw = {"mode": "grouped", "seq_len": 16, "cache_dir": False, **kw}
    with pytest.raises(PrepError) as e:
        next(iter(MemmapLoader(small, rank=0, **kw)))
    assert str(e.value).startswith("an epoch has ") and str(e.value).endswith(advice)


@pytest.mark.parametrize("mode", ["windows", "packed"])
def test_an_empty_val_split_names_the_split_to_read_and_the_val_fraction(tmp_path, mode):
    """A small corpus tokenized with val_fraction 0.0005 has a val split of no document: windows said
    "0 tokens, fewer than seq_len + 1; lower seq_len or add data", packed "has no documents", neither
    with a fix. Both now name the split that holds documents and the fraction the val split was made with."""
    import json
    root = make_dataset(tmp_path / "d", [30, 40, 50], extra_splits={"val": []})
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["recipe"] = {"output": {"val_fraction": 0.0005}}
    (root / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
    with pytest.raises(PrepError) as e:
        MemmapLoader(root, split="val", batch_size=1, seq_len=16, mode=mode, cache_dir=False)
    assert str(e.value) == (f"{root}: split 'val' has no documents; read split='train' or re-tokenize with a larger "
                            "output.val_fraction (it was 0.0005: each document goes to val with that chance)")
