"""The train/val split: a hash of (seed, source, file, position), whatever the seed."""

from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.worker import val_mask

POSITIONS = np.arange(5000, dtype=np.int64)


def test_the_default_seed_keeps_the_split_it_always_had():
    # pinned from before seeds above ~1.8e7 were fixed: datasets made then re-run to the same bytes
    m = val_mask(2357, 0, 0, POSITIONS, 0.1)
    assert int(m.sum()) == 508 and np.flatnonzero(m)[:8].tolist() == [12, 15, 16, 40, 47, 56, 59, 72]
    assert hashlib.sha256(np.packbits(m).tobytes()).hexdigest()[:16] == "462339bbbff48e83"


@settings(max_examples=60, deadline=None)
@given(seed=st.one_of(st.integers(-(2**63), 2**64), st.sampled_from([20240101, 1234567890, -1])),
       source=st.integers(0, 50), file_index=st.integers(0, 10**6), cut=st.integers(0, 5000))
def test_any_seed_splits_and_the_split_does_not_depend_on_how_positions_are_cut(seed, source, file_index, cut):
    """A seed from ~1.8e7 up (20240101) or below 0 was an OverflowError traceback in every run with
    val_fraction > 0."""
    whole = val_mask(seed, source, file_index, POSITIONS, 0.1)
    parts = np.concatenate([val_mask(seed, source, file_index, POSITIONS[:cut], 0.1),
                            val_mask(seed, source, file_index, POSITIONS[cut:], 0.1)])
    per_doc = val_mask(seed, source, np.full(POSITIONS.size, file_index, dtype=np.int64), POSITIONS, 0.1)
    assert whole.dtype == bool and whole.shape == POSITIONS.shape
    assert np.array_equal(whole, parts) and np.array_equal(whole, per_doc)
    assert 0 < int(whole.sum()) < POSITIONS.size
