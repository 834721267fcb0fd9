"""Rank and world size taken from torch.distributed are checked again at each pass (loaders/ranks.py).
The process group is faked here; test_distributed.py starts real gloo processes."""

import pytest

from loaders import MemmapLoader, ranks
from pipeline.errors import PrepError

from .loaderkit import collect

KW = dict(batch_size=2, seq_len=32, cache_dir=False)


def test_a_process_group_started_after_the_loader_stops_its_pass(dataset, monkeypatch):
    loader = MemmapLoader(dataset, **KW)  # no process group yet: rank 0 of 1
    monkeypatch.setattr(ranks, "process_group", lambda: (1, 4))
    with pytest.raises(PrepError, match=r"built before torch.distributed.init_process_group: it took rank 0 of "
                                        r"world_size 1, but this process is rank 1 of 4"):
        next(iter(loader))
    assert loader.state_dict()["consumed"] == 0  # nothing was handed out


def test_explicit_rank_and_world_size_are_the_callers(dataset, monkeypatch):
    """A loader of one data-parallel group, or an evaluation loader on rank 0 only, names its own."""
    monkeypatch.setattr(ranks, "process_group", lambda: (3, 8))
    loader = MemmapLoader(dataset, rank=1, world_size=2, **KW)
    assert len(collect(loader, limit=2)) == 2
    half = MemmapLoader(dataset, rank=3, **KW)  # world_size from the group, rank given
    assert (half.rank, half.world_size) == (3, 8) and len(collect(half, limit=1)) == 1
    monkeypatch.setattr(ranks, "process_group", lambda: (3, 4))  # the group it took the world size from changed
    with pytest.raises(PrepError, match="this process is rank 3 of 4"):
        collect(half, limit=1)
