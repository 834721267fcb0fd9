"""Property test over tiny datasets: ranks, drop_last, epoch tails and resume, in every mode.

For any documents, mode, batch_size B, world size W, seq_len, drop_last and shuffle: the W rank
batches of each step have one shape and concatenate to the world-1 batch of B * W rows (equal steps
on every rank: no DDP hang), and a rank-0 state taken after any step resumes a world-1 loader onto
exactly the rest of the epoch. It found padding rows of 1-row windows batches with -100 input ids.
A partial last batch (drop_last=False) is spread evenly over the ranks, each padded at its end: there
the ranks' real rows, in rank order, are the world-1 batch's.
"""

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaders import MemmapLoader
from loaders.loader import TooSmallForABatch
from pipeline.errors import PrepError

from .loaderkit import collect, make_dataset

MODES = {"windows": {}, "aligned": {"mode": "windows", "doc_aligned": True}, "packed": {"mode": "packed"},
         "concat": {"mode": "packed", "packing": "concat"}, "grouped": {"mode": "grouped", "pad_multiple": 4}}
NO_DATA = ("seq_len + 1", "none of its", "all of them are empty")  # the split gives this mode no sample
_names = itertools.count()


def equal(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in ("input_ids", "labels"))


def real_rows(batch: dict) -> int:
    """Rows before the padding: a real row's first token is >= 1 (position ids), a padding row is 0s."""
    real = batch["input_ids"][:, 0] > 0
    n = int(real.sum())
    assert real[:n].all() and np.all(batch["labels"][n:] == -100)  # padding only at the end, no targets
    return n


def real_part(batch: dict) -> dict:
    n = real_rows(batch)
    return {k: batch[k][:n] for k in ("input_ids", "labels")}


def loaders_and_reference(tmp_path_factory, lens, mode, batch, world, **kw):
    """The world-1 batches of batch * world rows and the W rank loaders' batches; None when this
    dataset gives no batch (too small for one, or no sample in this mode)."""
    path = make_dataset(tmp_path_factory.getbasetemp() / f"p{next(_names)}", lens, shard_tokens=20)
    kw = {**kw, "cache_dir": False, **MODES[mode]}
    try:
        ref = collect(MemmapLoader(path, batch_size=batch * world, **kw))
    except TooSmallForABatch:
        return None
    except PrepError as e:
        assert any(s in str(e) for s in NO_DATA), e
        return None
    ranks = [collect(MemmapLoader(path, batch_size=batch, rank=r, world_size=world, **kw)) for r in range(world)]
    return path, kw, ref, ranks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lens=st.lists(st.integers(0, 30), min_size=1, max_size=10).filter(lambda x: sum(x) >= 8),
       mode=st.sampled_from(sorted(MODES)), batch=st.integers(1, 3), world=st.integers(1, 4),
       seq_len=st.integers(2, 10), drop_last=st.booleans(), shuffle=st.booleans(), seed=st.integers(0, 2))
def test_rank_batches_join_to_the_single_rank_batch_and_resume_exactly(tmp_path_factory, lens, mode, batch, world,
                                                                       seq_len, drop_last, shuffle, seed):
    got = loaders_and_reference(tmp_path_factory, lens, mode, batch, world, seq_len=seq_len, drop_last=drop_last,
                                shuffle=shuffle, seed=seed)
    if got is None:
        return
    path, kw, ref, ranks = got
    assert all(len(r) == len(ref) for r in ranks)
    for step, whole in enumerate(ref):
        parts = [r[step] for r in ranks]
        assert len({p["input_ids"].shape for p in parts}) == 1
        # a partial last batch is spread over the ranks, each padded at its end: the real rows, rank
        # after rank, are the world-1 batch's real rows
        joined = {k: np.concatenate([real_part(p)[k] for p in parts]) for k in ("input_ids", "labels")}
        assert equal(joined, real_part(whole))
        if step < len(ref) - 1 or real_rows(whole) == batch * world:  # full batches: rank r has rows r*B..
            assert equal({k: np.concatenate([p[k] for p in parts]) for k in ("input_ids", "labels")}, whole)
        assert whole["input_ids"].min() >= 0
    for cut in sorted({0, 1, len(ref) // 2, len(ref) - 1} & set(range(len(ref)))):  # at the end: next epoch
        first = MemmapLoader(path, batch_size=batch, rank=0, world_size=world, **kw)
        collect(first, limit=cut) if cut else None
        resumed = MemmapLoader(path, batch_size=batch * world, **kw).load_state_dict(first.state_dict())
        rest = collect(resumed)
        assert len(rest) == len(ref) - cut and all(equal(a, b) for a, b in zip(rest, ref[cut:]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lens=st.lists(st.integers(0, 30), min_size=1, max_size=10).filter(lambda x: sum(x) >= 8),
       mode=st.sampled_from(sorted(MODES)), batch=st.integers(1, 4), world=st.integers(2, 4),
       seq_len=st.integers(2, 10), shuffle=st.booleans(), seed=st.integers(0, 2))
def test_partial_last_batch_gives_every_rank_a_real_row_and_resumes_across_world_sizes(
        tmp_path_factory, lens, mode, batch, world, seq_len, shuffle, seed):
    """drop_last=False: the m real rows of the last global batch were cut into batch_size slices, so
    world 4, batch_size 8, m = 10 gave ranks 8, 2, 0, 0 rows, and a rank of padding rows only had a
    mean loss of NaN. Now rank r holds rows [r*m//W, (r+1)*m//W) of the tail: >= 1 row whenever m >= W,
    the union is the tail once, in order; and a world-1 state resumes each rank onto its own rest."""
    got = loaders_and_reference(tmp_path_factory, lens, mode, batch, world, seq_len=seq_len, drop_last=False,
                                shuffle=shuffle, seed=seed)
    if got is None:
        return
    path, kw, ref, ranks = got
    last = [r[-1] for r in ranks]
    m = real_rows(ref[-1])
    counts = [real_rows(p) for p in last]
    assert counts == [(r + 1) * m // world - r * m // world for r in range(world)]
    if m >= world:
        assert min(counts) >= 1
    assert max(counts) - min(counts) <= 1  # evenly: no rank holds more than one row over another
    tail = np.concatenate([real_part(p)["input_ids"] for p in last])
    assert np.array_equal(tail, real_part(ref[-1])["input_ids"])  # each tail row once, in order
    for cut in sorted({len(ref) // 2, len(ref) - 1} & set(range(1, len(ref)))):  # mid-epoch; just before the tail
        single = MemmapLoader(path, batch_size=batch * world, **kw)
        collect(single, limit=cut)
        state = single.state_dict()
        for r in range(world):
            resumed = MemmapLoader(path, batch_size=batch, rank=r, world_size=world, **kw).load_state_dict(state)
            rest = collect(resumed)
            assert len(rest) == len(ref) - cut and all(equal(a, b) for a, b in zip(rest, ranks[r][cut:]))
