"""The iteration protocol: passes, breaks, several iterators, len(), pickling."""

import pickle

import numpy as np
import pytest

from loaders import MemmapLoader
from pipeline.errors import PrepError

from .loaderkit import collect

KW = dict(batch_size=4, seq_len=32, mode="windows", seed=2)
WORKERS = [{"num_workers": 0}, {"num_workers": 2}, {"num_workers": 2, "persistent_workers": True}]
WIDS = ["0", "2", "2-persistent"]


def ids(batch) -> np.ndarray:
    return batch["input_ids"].numpy()


@pytest.fixture(scope="module")
def epoch0(dataset):
    return [ids(b) for b in MemmapLoader(dataset, **KW)]


@pytest.mark.parametrize("kw", WORKERS, ids=WIDS)
def test_an_older_iterator_stops_once_a_newer_one_starts(dataset, epoch0, kw):
    """Both ran from one counter: the older one handed out a batch the newer one had already handed out
    (0 workers), or the two split one persistent-worker stream, and state_dict() undercounted."""
    loader = MemmapLoader(dataset, **KW, **kw)
    old = iter(loader)
    assert np.array_equal(ids(next(old)), epoch0[0])
    new = iter(loader)
    assert np.array_equal(ids(next(new)), epoch0[1])  # a new pass continues where the last one stopped
    with pytest.raises(PrepError, match="iterated again .* while this iterator was still open"):
        next(old)
    assert np.array_equal(ids(next(new)), epoch0[2])  # the newest one goes on unharmed
    assert loader.state_dict()["consumed"] == 3 * 4
    rest = collect(loader)  # and a later pass after it, too
    assert len(rest) == len(epoch0) - 3 and np.array_equal(rest[0]["input_ids"], epoch0[3])
    loader.close()


@pytest.mark.parametrize("kw", WORKERS, ids=WIDS)
def test_break_resumes_and_a_full_pass_is_the_next_epoch(dataset, epoch0, kw):
    """As the docstring says: a pass after a `break` continues the epoch; a pass after a full one is the
    next epoch (the same as a fresh loader's epoch 1); len() counts a full epoch."""
    loader = MemmapLoader(dataset, **KW, **kw)
    assert len(loader) == len(epoch0)
    for i, _ in enumerate(loader):
        if i == 4:
            break
    assert loader.state_dict()["consumed"] == 5 * 4
    rest = [ids(b) for b in loader]
    assert len(rest) == len(epoch0) - 5 and all(np.array_equal(a, b) for a, b in zip(rest, epoch0[5:]))
    assert loader.state_dict()["epoch"] == 1
    second = [ids(b) for b in loader]
    fresh = [ids(b) for b in MemmapLoader(dataset, epoch=1, **KW)]
    assert len(second) == len(fresh) and all(np.array_equal(a, b) for a, b in zip(second, fresh))
    assert not np.array_equal(second[0], epoch0[0])
    loader.close()


@pytest.mark.parametrize("kw", WORKERS, ids=WIDS)
def test_a_loader_pickles_mid_epoch_and_the_copy_continues(dataset, epoch0, kw):
    """With persistent workers alive, pickling raised torch's NotImplementedError
    ('_MultiProcessingDataLoaderIter cannot be pickled')."""
    loader = MemmapLoader(dataset, **KW, **kw)
    it = iter(loader)
    next(it), next(it)
    copy = pickle.loads(pickle.dumps(loader))
    assert copy.state_dict() == loader.state_dict()
    got = collect(copy, limit=2)
    assert np.array_equal(got[0]["input_ids"], epoch0[2]) and np.array_equal(got[1]["input_ids"], epoch0[3])
    assert np.array_equal(ids(next(it)), epoch0[2])  # the original goes on by itself
    copy.close()
    loader.close()


@pytest.mark.parametrize("move", ["set_epoch", "load_state_dict"])
def test_an_open_pass_stops_when_its_position_is_moved(dataset, epoch0, move):
    """set_epoch(5) mid-pass left the pass handing out epoch 0's batches and writing their count over the
    new position: state_dict() then said epoch 5 with epoch 0's count, and a resume skipped epoch 5's start."""
    loader = MemmapLoader(dataset, **KW)
    it = iter(loader)
    next(it), next(it)
    if move == "set_epoch":
        loader.set_epoch(5)
    else:
        loader.load_state_dict({**loader.state_dict(), "epoch": 5, "consumed": 0})
    with pytest.raises(PrepError, match="its position set .* while this iterator was still open"):
        next(it)
    assert (loader.state_dict()["epoch"], loader.state_dict()["consumed"]) == (5, 0)
    got = [ids(b) for b in loader]
    want = [ids(b) for b in MemmapLoader(dataset, epoch=5, **KW)]
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
