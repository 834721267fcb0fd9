"""Property test over tiny datasets: ranks, drop_last, epoch tails and resume, in every mode.

For any documents, mode, batch_size B, world size W, seq_len, drop_last and shuffle: the W rank
batches of each step have one shape and concatenate to the world-1 batch of B * W rows (equal steps
on every rank: no DDP hang), and a rank-0 state taken after any step resumes a world-1 loader onto
exactly the rest of the epoch. It found padding rows of 1-row windows batches with -100 input ids.
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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lens=st.lists(st.integers(0, 30), min_size=1, max_size=10).filter(lambda x: sum(x) >= 8),
       mode=st.sampled_from(sorted(MODES)), batch=st.integers(1, 3), world=st.integers(1, 4),
       seq_len=st.integers(2, 10), drop_last=st.booleans(), shuffle=st.booleans(), seed=st.integers(0, 2))
def test_rank_batches_join_to_the_single_rank_batch_and_resume_exactly(tmp_path_factory, lens, mode, batch, world,
                                                                       seq_len, drop_last, shuffle, seed):
    path = make_dataset(tmp_path_factory.getbasetemp() / f"p{next(_names)}", lens, shard_tokens=20)
    kw = {"seq_len": seq_len, "drop_last": drop_last, "shuffle": shuffle, "seed": seed, "cache_dir": False,
          **MODES[mode]}
    try:
        ref = collect(MemmapLoader(path, batch_size=batch * world, **kw))
    except TooSmallForABatch:
        return
    except PrepError as e:
        assert any(s in str(e) for s in NO_DATA), e
        return
    ranks = [collect(MemmapLoader(path, batch_size=batch, rank=r, world_size=world, **kw)) for r in range(world)]
    assert all(len(r) == len(ref) for r in ranks)
    for step, whole in enumerate(ref):
        parts = [r[step] for r in ranks]
        assert len({p["input_ids"].shape for p in parts}) == 1
        joined = {k: np.concatenate([p[k] for p in parts]) for k in ("input_ids", "labels")}
        assert equal(joined, whole)
        assert whole["input_ids"].min() >= 0
    for cut in sorted({0, 1, len(ref) // 2, len(ref) - 1} & set(range(len(ref)))):  # at the end: next epoch
        first = MemmapLoader(path, batch_size=batch, rank=0, world_size=world, **kw)
        collect(first, limit=cut) if cut else None
        resumed = MemmapLoader(path, batch_size=batch * world, **kw).load_state_dict(first.state_dict())
        rest = collect(resumed)
        assert len(rest) == len(ref) - cut and all(equal(a, b) for a, b in zip(rest, ref[cut:]))
