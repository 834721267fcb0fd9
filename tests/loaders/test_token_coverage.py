"""Property: in the modes that promise it, every token of the split is read exactly once per epoch across
the ranks, also when the epoch is resumed mid-way on another world size at the same global batch; and
every target is the next token (of the same document, outside windows mode).

packed (bfd, long documents split; concat): every token of the split, as an input. windows (tiled):
the inputs of the epoch's windows are num_windows * T consecutive tokens, each once. grouped: the first
min(length, T) tokens of every document of 2+ tokens (test_edges covers it with one rank).
"""

import itertools

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loaders import MemmapLoader
from loaders.loader import TooSmallForABatch
from pipeline.errors import PrepError

from .loaderkit import collect, doc_of_token, make_dataset

MODES = {"packed": {"mode": "packed"}, "concat": {"mode": "packed", "packing": "concat"},
         "windows": {"mode": "windows"}, "grouped": {"mode": "grouped", "pad_multiple": 4}}
_names = itertools.count()


def read_by_ranks(path, kw, batch, world, epoch, cut, other_world) -> tuple[list[dict], int]:
    """Epoch `epoch` read by `world` ranks for `cut` steps, then resumed from rank 0's state by
    `other_world` ranks (batch * world // other_world rows each) to the end; every rank's batches."""
    steps = len(collect(MemmapLoader(path, batch_size=batch * world, epoch=epoch, **kw)))
    cut = min(cut, steps - 1)  # a state on the epoch's last batch resumes onto the next epoch (README)
    first = [MemmapLoader(path, batch_size=batch, rank=r, world_size=world, epoch=epoch, **kw) for r in range(world)]
    out = [b for loader in first for b in collect(loader, limit=cut)] if cut else []
    state = first[0].state_dict()
    rows = batch * world // other_world
    for r in range(other_world):
        rest = MemmapLoader(path, batch_size=rows, rank=r, world_size=other_world, **kw).load_state_dict(state)
        got = collect(rest)
        assert rest.state_dict()["epoch"] == epoch + 1  # the pass ran to the end of this epoch
        out += got
    return out, steps


def stacked(batches: list[dict], key: str, fill: int) -> np.ndarray:
    """The batches' rows in one array; grouped batches differ in width (each is padded to its own widest
    row: 4 and 5 for documents of 2 and 10 tokens at pad_multiple 4, seq_len 5), so narrower ones are
    padded here with `fill` (np.concatenate of the widths raised a ValueError)."""
    width = max(b[key].shape[1] for b in batches)
    return np.concatenate([np.pad(b[key], ((0, 0), (0, width - b[key].shape[1])), constant_values=fill)
                           for b in batches])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lens=st.lists(st.integers(0, 40), min_size=1, max_size=12).filter(lambda x: sum(x) >= 12),
       mode=st.sampled_from(sorted(MODES)), batch=st.sampled_from([1, 2, 4]), world=st.sampled_from([1, 2, 4]),
       other=st.sampled_from([1, 2, 4]), seq_len=st.integers(2, 12), shuffle=st.booleans(),
       seed=st.integers(0, 3), epoch=st.integers(0, 2), cut=st.integers(0, 3))
@example(lens=[2, 10], mode="grouped", batch=1, world=1, other=1, seq_len=5, shuffle=False, seed=0, epoch=0, cut=0)
def test_every_token_once_per_epoch_across_ranks_and_a_resume(tmp_path_factory, lens, mode, batch, world, other,
                                                             seq_len, shuffle, seed, epoch, cut):
    if batch * world % other:
        other = 1
    path = make_dataset(tmp_path_factory.getbasetemp() / f"cov{next(_names)}", lens, shard_tokens=25)
    kw = {"seq_len": seq_len, "shuffle": shuffle, "seed": seed, "drop_last": False, "cache_dir": False, **MODES[mode]}
    try:
        batches, steps = read_by_ranks(path, kw, batch, world, epoch, cut, other)
    except TooSmallForABatch:
        return
    except PrepError as e:  # a split this mode has no sample of: refused in one line, no more
        assert "seq_len + 1" in str(e) or "none of its" in str(e), e
        return
    total = int(sum(lens))
    ids, labels = stacked(batches, "input_ids", 0), stacked(batches, "labels", -100)
    real = ids > 0  # position ids: token = position + 1; 0 is padding
    if mode in ("packed", "concat"):
        assert np.array_equal(np.sort(ids[real]), np.arange(1, total + 1))
    elif mode == "windows":
        firsts = np.sort(ids[real[:, 0], 0])
        got = np.sort(ids[real[:, 0]].reshape(-1))
        assert np.array_equal(got, np.arange(firsts[0], firsts[0] + got.size)) and got.size == (total - 1) // seq_len * seq_len
    else:
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        want = np.concatenate([np.arange(s, s + min(n, seq_len)) + 1 for s, n in zip(starts, lens) if n >= 2])
        assert np.array_equal(np.sort(ids[real]), want)
    # a target is the next token, never on padding; and outside windows (nanoGPT's stream, across
    # documents by design) never across a document end
    has = labels != -100
    assert np.all(real[has]) and np.all(labels[has] == ids[has] + 1)
    if mode != "windows":
        assert np.array_equal(doc_of_token(labels[has], lens), doc_of_token(ids[has], lens))
    assert steps >= 1
