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
    scope = load({os.path.join(library, "launcher.py"): "def launch(build):\n    return build()\n"})
    site = scope["launch"](build_here)
    line = build_here.__code__.co_firstlineno + 1
    assert site[0] == f"test_rank_settings.py:build_here:{line}"
    assert not any(s.startswith("launcher.py") for s in site) and "/" not in site[0]
    assert site[1].startswith("test_rank_settings.py:test_the_build_site_is_the_users_frames_only:")


def load(files: dict[str, str]) -> dict:
    """Functions compiled as if read from `files` (path -> source), in one namespace."""
    scope = {"build_site": build_site}
    for path, source in files.items():
        exec(compile(source, path, "exec"), scope)
    return scope


def test_training_code_installed_as_a_package_is_the_users_code():
    """A training package installed in site-packages (a wheel in a Docker image) was left out with the
    libraries: every loader had the same site, so a rank-0 peek built by the package's code took the place
    of the other ranks' training loader (a sound job refused). Its frames are the site now; a framework's
    frames around it (another installed package) stay out."""
    lib = sysconfig.get_paths()["purelib"]
    scope = load({
        os.path.join(lib, "mytrain", "data.py"): "def make():\n    return build_site()\n",
        os.path.join(lib, "mytrain", "train.py"): "def peek():\n    return make()\ndef fit():\n    return make()\n",
        os.path.join(lib, "framework", "loop.py"): "def run(hook):\n    return hook()\n",
    })
    peek, fit = scope["run"](scope["peek"]), scope["run"](scope["fit"])
    assert peek == ["data.py:make:2", "train.py:peek:2"]
    assert fit == ["data.py:make:2", "train.py:fit:4"]


def test_callers_far_from_the_build_line_do_not_split_the_ranks_pairing():
    """Rank 0 reaching train() through another outer path (`with wandb.init(): main()` on rank 0 alone, a
    rank run in the launching process beside mp.Process children) keyed its loaders apart from the other
    ranks': nothing was compared, a per-rank seed went unseen. The innermost SITE_DEPTH frames are the site."""
    scope = load({"/job/train.py": "def make():\n    return build_site()\ndef train():\n    return make()\n"
                                   "def main():\n    return train()\ndef on_rank0():\n    return main()\n"
                                   "def on_others():\n    return main()\n"})
    assert scope["on_rank0"]() == scope["on_others"]() == ["train.py:make:2", "train.py:train:4", "train.py:main:6"]
    assert rank_settings.SITE_DEPTH == 3


def test_frozen_modules_frames_are_no_part_of_the_site():
    """importlib's frozen frames (a loader built while a module is imported) number their lines per patch
    release (_find_and_load:1178 on 3.11.2, 1176 on 3.11.7): a node on another one was never compared."""
    scope = load({"<frozen importlib._bootstrap>": "def _find_and_load(run):\n    return run()\n"})
    site = scope["_find_and_load"](build_here)
    assert site[0].startswith("test_rank_settings.py:build_here:") and not any("<frozen" in s for s in site)


def test_a_refused_construction_is_not_counted(dataset):
    """A loader refused while it was built (epoch=-1 here) had been counted at its build site already: a
    rank that caught the error and built it again paired its loader with the others' next one."""
    before = dict(rank_settings._BUILT)
    with pytest.raises(PrepError, match="epoch must be an integer >= 0"):
        MemmapLoader(dataset, batch_size=2, seq_len=32, rank=0, world_size=2, epoch=-1, cache_dir=False)
    assert rank_settings._BUILT == before
    MemmapLoader(dataset, batch_size=2, seq_len=32, rank=0, world_size=2, cache_dir=False)
    assert rank_settings._BUILT != before  # a loader built is counted


def test_building_a_distributed_loader_keys_it_without_the_order_fields(dataset, monkeypatch):
    """The identity counted at construction (world_size > 1) names the datasets by their fingerprints
    alone. It took them from plan.order_fields(), whose dataclasses.asdict of the config (a deepcopy per
    field) doubled the RankSettings cost of a construction (~0.2 ms, 0.3 -> 0.55 ms for a packed loader
    on the 2-core VM, benchmarks/results/regression_check_cpu2_202611.md). Same key as before."""
    from loaders import loader as loader_module
    from loaders.plan import EpochPlan

    made = []
    monkeypatch.setattr(loader_module, "RankSettings", lambda identity: made.append(identity))
    loader = MemmapLoader(dataset, batch_size=2, seq_len=32, rank=0, world_size=2, cache_dir=False)
    assert made == [{"site": made[0]["site"], "datasets": loader.plan.order_fields()["datasets"], "split": "train"}]
    monkeypatch.setattr(EpochPlan, "order_fields", lambda self: pytest.fail("order_fields at construction"))
    MemmapLoader(dataset, batch_size=2, seq_len=32, rank=0, world_size=2, cache_dir=False)
    assert len(made) == 2 and made[1]["datasets"] == made[0]["datasets"]


def test_the_build_site_resolves_each_code_file_once(monkeypatch):
    """A file's part in build sites is worked out once (abspath, the package and standard-library
    prefixes): per frame walked, at each construction with world_size > 1 (build_site 9.8 -> 4.9 us from a
    4-frame script). The same site."""
    sites, resolved, real = [], [], os.path.abspath
    for counting in (False, True):  # one line: both sites name it
        if counting:
            monkeypatch.setattr(os.path, "abspath", lambda p: resolved.append(p) or real(p))
        sites.append(build_here())
    assert sites[1] == sites[0] and sites[0][0].startswith("test_rank_settings.py:build_here:")
    assert resolved == []  # every frame's file is an absolute path or frozen here: resolved at the first call
