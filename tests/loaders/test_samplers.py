"""Property tests for the pure-numpy orderings."""

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from loaders.samplers import (
    MIX_PERIOD,
    derive_key,
    epoch_rng,
    longest_batch_first,
    megabatch_order,
    mixture_lookup_batch,
    mixture_pattern,
    mixture_weights,
    padded_width,
    permute_batch,
    rank_slice,
    token_budget_batches,
)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 5000), key=st.integers(0, 2**64 - 1))
def test_permutation_is_a_bijection(n, key):
    p = permute_batch(np.arange(n), n, key)
    assert np.array_equal(np.sort(p), np.arange(n))
    if n > 1:  # any subset of positions gives the same images (workers evaluate pieces)
        sub = np.arange(n)[:: max(1, n // 7)]
        assert np.array_equal(permute_batch(sub, n, key), p[sub])


def test_permutation_depends_on_key_and_is_stable():
    a = permute_batch(np.arange(1000), 1000, derive_key(0, 0))
    b = permute_batch(np.arange(1000), 1000, derive_key(0, 1))
    assert not np.array_equal(a, b) and not np.array_equal(a, np.arange(1000))
    # pinned values: the order must never change between releases (resume would silently break)
    assert permute_batch(np.arange(8), 10, 12345).tolist() == [2, 7, 0, 1, 9, 5, 3, 4]
    assert derive_key(1, 2, 3) == derive_key(1, 2, 3) != derive_key(1, 2, 4)


@settings(max_examples=300, deadline=None)
@given(w=st.lists(st.integers(1, 20), min_size=1, max_size=6), n=st.integers(1, 500))
def test_mixture_interleave_is_exact(w, n):
    counts = mixture_weights(w)
    assert np.allclose(counts / counts.sum(), np.array(w) / sum(w))
    pattern = mixture_pattern(counts)
    src, running = mixture_lookup_batch(np.arange(n), counts, pattern)
    share = np.array(w) / sum(w)
    for k in range(len(w)):
        mine = src == k
        drawn = np.cumsum(mine)
        assert np.all(np.abs(drawn - share[k] * np.arange(1, n + 1)) <= 1.0 - 1 / (2 * max(2, len(w)) - 2) + 1e-9)
        assert np.array_equal(running[mine], np.arange(mine.sum()))  # each source read in order, no gaps
    period = int(counts.sum())
    if n >= period:
        assert np.array_equal(np.bincount(src[:period], minlength=len(w)), counts)


def test_mixture_weights_from_floats():
    assert mixture_weights([0.7, 0.3]).tolist() == [7, 3]
    assert mixture_weights([1 / 3, 2 / 3]).tolist() == [1, 2]


@settings(max_examples=300, deadline=None)
@given(w=st.lists(st.floats(1e-3, 1e7), min_size=2, max_size=6))
def test_mixture_weights_of_any_floats_keep_their_shares(w):
    """Weights with no short exact period (token counts such as [1234567, 2345678, 987654]) were refused
    with a ValueError ("need a period of 12495753059 samples; round them"): any weights whose shares are
    at least 1 in MIX_PERIOD now get counts of at most that period, each share kept within 1e-4."""
    share = np.array(w) / sum(w)
    assume(share.min() * MIX_PERIOD >= 1)  # smaller ones are refused, naming their dataset (mixing.check_weights)
    counts = mixture_weights(w)
    assert counts.min() >= 1 and counts.sum() <= MIX_PERIOD
    assert np.abs(counts / counts.sum() - share).max() <= len(w) * 1e-4
    assert mixture_weights([1234567, 2345678, 987654]).sum() <= MIX_PERIOD


@settings(max_examples=100, deadline=None)
@given(lens=st.lists(st.integers(0, 300), min_size=1, max_size=400), mega=st.integers(1, 64),
       seed=st.integers(0, 100), batch=st.integers(1, 16))
def test_megabatch_order(lens, mega, seed, batch):
    lens = np.array(lens)
    order = megabatch_order(lens, epoch_rng(seed), mega)
    assert np.array_equal(np.sort(order), np.arange(lens.size))
    for a in range(0, lens.size, mega):
        assert np.all(np.diff(lens[order[a:a + mega]]) <= 0)  # longest first in every megabatch
    first = longest_batch_first(order, lens, batch)
    assert np.array_equal(np.sort(first), np.arange(lens.size))
    full = lens.size // batch * batch
    if full:
        assert lens[first[:batch]].max() == lens[order[:full]].max()


@settings(max_examples=100, deadline=None)
@given(lens=st.lists(st.integers(1, 256), min_size=1, max_size=300), mega=st.integers(1, 50),
       budget=st.integers(256, 4096), mult=st.sampled_from([1, 8, 64]))
def test_token_budget_batches(lens, mega, budget, mult):
    lens = np.array(lens)
    order = megabatch_order(lens, epoch_rng(0), mega)
    sorted_lens = lens[order]
    bounds = token_budget_batches(sorted_lens, mega, budget, mult, 256)
    assert bounds[0] == 0 and bounds[-1] == lens.size and np.all(np.diff(bounds) >= 1)
    for a, b in zip(bounds[:-1], bounds[1:]):
        width = padded_width(sorted_lens[a:b].max(), mult, 256)
        assert (b - a) * width <= budget
        assert a // mega == (b - 1) // mega  # never spans two megabatches


@given(start=st.integers(0, 100), n=st.integers(0, 40), bs=st.integers(1, 8), world=st.integers(1, 5))
def test_rank_slices_partition_the_global_batch(start, n, bs, world):
    """In rank order, each rank batch_size rows of a full batch and an even share of a short one."""
    stop = start + min(n, bs * world)
    rows = [rank_slice(start, stop, r, world) for r in range(world)]
    covered = [i for a, b in rows for i in range(a, b)]
    assert covered == list(range(start, stop))
    sizes = [b - a for a, b in rows]
    assert max(sizes) - min(sizes) <= 1 and max(sizes) <= bs
    if stop - start == bs * world:
        assert rows == [(start + r * bs, start + (r + 1) * bs) for r in range(world)]


def test_token_budget_batches_hold_no_per_row_memory():
    """The jump chain reads each batch's first row; it computed every row's step first (numpy arrays,
    then a Python list of them): ~57 bytes per row at once, 566 MiB for 10^7 rows of a grouped epoch."""
    import tracemalloc

    n = 1_000_000
    lens = np.sort(np.random.default_rng(0).integers(1, 2049, n))[::-1].copy()  # 8 MB of int64 input
    tracemalloc.start()
    try:
        bounds = token_budget_batches(lens, 1 << 20, 65536, 64, 2048)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert bounds[0] == 0 and bounds[-1] == n and np.all(np.diff(bounds) > 0)
    assert peak < 2 * lens.nbytes // 8, f"{peak / n:.1f} bytes per row"  # the bounds, ~1 byte per row here
