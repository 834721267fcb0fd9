"""Property tests for the packing planners."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loaders.packing import (
    best_fit_decreasing,
    concat_max_segments,
    concat_num_rows,
    concat_row_segments,
    plan_bfd,
    split_long_docs,
)

from .loaderkit import lognormal_lengths


def naive_bfd_rooms(sizes, capacity):
    """Textbook sequential best-fit-decreasing; returns the sorted remaining room of every bin."""
    rooms = []
    for s in sorted(sizes, reverse=True):
        fits = [i for i, r in enumerate(rooms) if r >= s]
        if fits:
            best = min(fits, key=lambda i: rooms[i])
            rooms[best] -= s
        else:
            rooms.append(capacity - s)
    return sorted(rooms)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 64))
def test_bfd_equals_sequential_best_fit(data, capacity):
    sizes = np.array(data.draw(st.lists(st.integers(1, capacity), max_size=120)), dtype=np.int64)
    bins, num_bins = best_fit_decreasing(sizes, capacity)
    loads = np.bincount(bins, weights=sizes, minlength=num_bins).astype(int)
    assert loads.max(initial=0) <= capacity and (num_bins == 0 or loads.min() > 0)
    assert sorted((capacity - loads).tolist()) == naive_bfd_rooms(sizes.tolist(), capacity)


def row_tokens(plan):
    """Every token offset the plan covers, row by row."""
    return np.concatenate([np.arange(s, s + n) for s, n in zip(plan.starts, plan.lengths)] or [np.zeros(0, int)])


@settings(max_examples=150, deadline=None)
@given(lens=st.lists(st.integers(0, 200), min_size=1, max_size=200), seq_len=st.integers(1, 64),
       seed=st.integers(0, 3))
def test_plan_bfd_split_covers_every_token_once(lens, seq_len, seed):
    lens = np.array(lens)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    plan = plan_bfd(starts, lens, seq_len, "split", seed)
    per_row = np.add.reduceat(plan.lengths.astype(int), plan.row_ptr[:-1]) if plan.num_rows else np.zeros(0)
    assert np.all(per_row <= seq_len) and np.all(plan.lengths >= 1)
    assert np.array_equal(np.sort(row_tokens(plan)), np.arange(int(lens.sum())))
    for r in range(plan.num_rows):  # pieces longest first within a row
        assert np.all(np.diff(plan.row(r)[1]) <= 0)


@settings(max_examples=100, deadline=None)
@given(lens=st.lists(st.integers(0, 200), min_size=1, max_size=200), seq_len=st.integers(1, 64))
def test_plan_bfd_truncate_keeps_prefixes(lens, seq_len):
    lens = np.array(lens)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    plan = plan_bfd(starts, lens, seq_len, "truncate")
    keep = lens > 0
    want = np.concatenate([np.arange(s, s + min(n, seq_len)) for s, n in zip(starts[keep], lens[keep])]
                          or [np.zeros(0, int)])
    assert np.array_equal(np.sort(row_tokens(plan)), np.sort(want))


def test_split_long_docs_pieces():
    starts, lens = split_long_docs(np.array([0, 10, 35]), np.array([10, 25, 0]), 8)
    assert starts.tolist() == [0, 8, 10, 18, 26, 34] and lens.tolist() == [8, 2, 8, 8, 8, 1]


def test_bfd_fill_on_realistic_lengths():
    """Lognormal document lengths (web text-like: median ~150, long tail): >= 99% fill."""
    lens = lognormal_lengths(200_000, seed=0, mean=5.0, sigma=1.1)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    for seq_len in (512, 2048):
        plan = plan_bfd(starts, lens, seq_len)
        assert plan.fill >= 0.99, (seq_len, plan.fill)
        assert plan.num_tokens == lens.sum()  # split: nothing dropped
        assert plan.max_pieces > 2  # guard: rows really are shared by several documents


@settings(max_examples=100, deadline=None)
@given(lens=st.lists(st.integers(0, 50), min_size=1, max_size=60), seq_len=st.integers(1, 32))
def test_concat_rows_tile_the_stream(lens, seq_len):
    lens = np.array(lens)
    total = int(lens.sum())
    starts = np.concatenate([[0], np.cumsum(lens)])
    rows = concat_num_rows(total, seq_len)
    k_max = concat_max_segments(starts, seq_len, total) if total else 1
    covered = []
    for r in range(rows):
        s, n = concat_row_segments(starts, r, seq_len, total)
        assert n.sum() <= seq_len and np.all(n > 0) and s.size <= k_max
        covered.extend(np.arange(a, a + b) for a, b in zip(s, n))
        for a, b in zip(s, n):  # a segment never crosses a document start
            inside = starts[(starts > a) & (starts < a + b)]
            assert inside.size == 0
    got = np.concatenate(covered) if covered else np.zeros(0, int)
    assert np.array_equal(got, np.arange(total))


def test_bfd_room_search_is_not_linear_in_seq_len(monkeypatch):
    """Finding the best-fitting room scanned every room from the piece's length to seq_len, once per
    (length, room) step: quadratic in seq_len (200 K documents at seq_len 131072: 19 s). Counted here
    as the room-count entries handed to np.flatnonzero per search, against sqrt(seq_len)."""
    import loaders.packing as packing

    seq_len = 1 << 14
    scanned, calls = [0], [0]
    real = np.flatnonzero

    class CountingNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def flatnonzero(a):
            if a.size <= seq_len + 1 and a.dtype == np.int64:  # a slice of the room counts (or blocks)
                scanned[0] += a.size
                calls[0] += 1
            return real(a)

    monkeypatch.setattr(packing, "np", CountingNumpy())
    sizes = np.arange(1, seq_len + 1, dtype=np.int64)  # every length once: one search per length at least
    bins, num_bins = packing.best_fit_decreasing(sizes, seq_len)
    loads = np.bincount(bins, weights=sizes, minlength=num_bins)
    # lengths above T/2 open a bin each; T/2 opens one more; each length s below it fills the room s left
    assert num_bins == seq_len // 2 + 1
    assert sorted(loads.tolist()) == [seq_len // 2] + [seq_len] * (seq_len // 2)
    assert calls[0] >= seq_len // 2
    assert scanned[0] / calls[0] < 4 * np.sqrt(seq_len), (scanned[0], calls[0])


def test_concat_max_segments_holds_no_per_row_memory(monkeypatch):
    """It made four int64 arrays of one entry per row at once (32 B per row; 10^7 rows: 305 MiB in every
    rank at each loader construction); now a block of rows at a time, with the same answer."""
    import tracemalloc

    import loaders.packing as packing

    lens = np.random.default_rng(0).integers(1, 8, 1_000_000)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])  # 8 MB
    total, seq_len = int(lens.sum()), 2
    rows = concat_num_rows(total, seq_len)  # ~2 M
    tracemalloc.start()
    try:
        got = concat_max_segments(starts, seq_len, total)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * rows, f"{peak / rows:.1f} bytes per row"
    assert got == 2  # a 2-token row holds at most 2 pieces, and 1-token documents make such rows

    # blocks that cut anywhere give every row's count: the most pieces of all rows, computed row by row
    small = lens[:300] * 5
    small_starts = np.concatenate([[0], np.cumsum(small)[:-1]])
    small_total = int(small.sum())
    want = max(concat_row_segments(small_starts, r, 64, small_total)[0].size
               for r in range(concat_num_rows(small_total, 64)))
    for block in (1, 7, 1 << 18):
        monkeypatch.setattr(packing, "CONCAT_ROWS_BLOCK", block, raising=False)
        assert concat_max_segments(small_starts, 64, small_total) == want
