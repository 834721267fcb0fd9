"""Edge data: splits whose documents give a mode nothing (or nothing to learn) to batch."""

import numpy as np
import pytest

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
    got = collect(MemmapLoader([(small, 0.5), (small, 0.5)], batch_size=1, seq_len=16, mode="packed", cache_dir=False))
    assert len(got) > 1 and all(np.all(b["input_ids"] >= 0) for b in got)
