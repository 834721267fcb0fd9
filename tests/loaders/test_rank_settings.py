"""RankSettings against an in-process store (torch's HashStore: the compare_set the process group's
store answers), two ranks simulated in one process."""

import os
import sysconfig

import pytest
import torch.distributed as dist

from loaders import MemmapLoader, rank_settings
from loaders.rank_settings import RankSettings, build_site
from pipeline.errors import PrepError


@pytest.fixture
def store(monkeypatch):
    store = dist.HashStore()
    monkeypatch.setattr(rank_settings, "_default_store", lambda: store)
    return store


def pair() -> tuple[RankSettings, RankSettings]:
    """One loader as rank 0 and rank 1 build it (the same key)."""
    first, second = RankSettings({"test": "pair"}), RankSettings({"test": "pair"})
    second.key = first.key
    return first, second


def test_a_refused_rank_is_refused_again_at_its_next_pass(store):
    """The refusal was raised once: a trainer that caught it (a retry, `except Exception: continue` around
    an epoch) went on with the next pass unchecked, on the same mismatched settings."""
    rank0, rank1 = pair()
    rank0.check(0, {"seed": 0, "epoch": 0})
    for epoch in (0, 1):  # the next pass, after set_epoch(1) too: the same refusal, not a new one about epoch
        with pytest.raises(PrepError) as e:
            rank1.check(1, {"seed": 1, "epoch": epoch})
        assert str(e.value).split("differ (")[1].split(")")[0] == "seed: 0 on rank 0, 1 on rank 1"
    rank0.check(0, {"seed": 0, "epoch": 1})  # the first rank's pass goes on


def test_equal_settings_pass_and_are_compared_once(store):
    rank0, rank1 = pair()
    rank0.check(0, {"seed": 3})
    rank1.check(1, {"seed": 3})
    rank1.check(1, {"seed": 4})  # a later pass: the position moved, nothing is compared again
    assert rank0.done and rank1.done


def build_here():
    return build_site()


def test_the_build_site_is_the_users_frames_only():
    """Frames of the standard library and installed packages (a launcher, a trainer framework) are left
    out: another patch release of them on one node numbered its lines differently, and the ranks' loaders
    were never compared. The user's frames name file, function and line (no directory)."""
    library = sysconfig.get_paths()["purelib"]
    launcher = compile("def launch(build):\n    return build()\n", os.path.join(library, "launcher.py"), "exec")
    scope = {}
    exec(launcher, scope)
    site = scope["launch"](build_here)
    line = build_here.__code__.co_firstlineno + 1
    assert site[0] == f"test_rank_settings.py:build_here:{line}"
    assert not any(s.startswith("launcher.py") for s in site) and "/" not in site[0]
    assert site[1].startswith("test_rank_settings.py:test_the_build_site_is_the_users_frames_only:")


def test_a_refused_construction_is_not_counted(dataset):
    """A loader refused while it was built (epoch=-1 here) had been counted at its build site already: a
    rank that caught the error and built it again paired its loader with the others' next one."""
    before = dict(rank_settings._BUILT)
    with pytest.raises(PrepError, match="epoch must be an integer >= 0"):
        MemmapLoader(dataset, batch_size=2, seq_len=32, rank=0, world_size=2, epoch=-1, cache_dir=False)
    assert rank_settings._BUILT == before
    MemmapLoader(dataset, batch_size=2, seq_len=32, rank=0, world_size=2, cache_dir=False)
    assert rank_settings._BUILT != before  # a loader built is counted
