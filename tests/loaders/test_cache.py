"""Derived arrays are built once, keyed by their inputs, and stored where they can be."""

import numpy as np
import pytest

import loaders.cache as cache_mod
import loaders.plan as plan_mod
from loaders import MemmapLoader
from loaders.cache import ArrayCache

from .loaderkit import collect, lognormal_lengths, make_dataset


@pytest.fixture
def ds(tmp_path):
    return make_dataset(tmp_path / "d", lognormal_lengths(300, seed=5, hi=300), shard_tokens=4000)


def test_pack_plan_built_once_and_reused(ds, monkeypatch):
    a = collect(MemmapLoader(ds, batch_size=2, seq_len=64, mode="packed"), limit=3)
    entries = sorted(p.name for p in (ds / ".cache" / "loaders").glob("packbfd-*.json"))
    assert len(entries) == 1
    monkeypatch.setattr(plan_mod, "plan_bfd", lambda *a, **k: pytest.fail("plan rebuilt despite the cache"))
    b = collect(MemmapLoader(ds, batch_size=2, seq_len=64, mode="packed"), limit=3)
    assert all(np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))
    # another seed is another plan: a new entry, not a stale hit
    monkeypatch.undo()
    collect(MemmapLoader(ds, batch_size=2, seq_len=64, mode="packed", seed=1), limit=1)
    assert len(list((ds / ".cache" / "loaders").glob("packbfd-*.json"))) == 2


def test_cached_arrays_are_memory_mapped(ds):
    loader = MemmapLoader(ds, batch_size=2, seq_len=64, mode="grouped")
    next(iter(loader))
    order = loader.plan.grouped_order(0)["order"]
    assert isinstance(order, np.memmap) and not order.flags.writeable


def test_read_only_dataset_falls_back_to_user_cache(ds, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    real = cache_mod._writable
    monkeypatch.setattr(cache_mod, "_writable", lambda d: False if str(d).startswith(str(ds)) else real(d))
    collect(MemmapLoader(ds, batch_size=2, seq_len=64, mode="packed"), limit=1)
    assert not (ds / ".cache").exists()
    assert list((tmp_path / "xdg" / "prep" / "loaders").glob("packbfd-*.npy"))


def test_explicit_and_disabled_cache(ds, tmp_path):
    collect(MemmapLoader(ds, batch_size=2, seq_len=64, mode="grouped", cache_dir=tmp_path / "c"), limit=1)
    assert list((tmp_path / "c").glob("grouped-*.npy")) and not (ds / ".cache").exists()
    collect(MemmapLoader(ds, batch_size=2, seq_len=64, mode="grouped", cache_dir=False), limit=1)
    assert not (ds / ".cache").exists()


def test_half_written_entry_is_rebuilt(tmp_path):
    cache = ArrayCache(tmp_path)
    got = cache.get("x", {"a": 1}, lambda: {"v": np.arange(5)})
    marker = next(tmp_path.glob("x-*.json"))
    marker.unlink()  # as if the builder died before writing the marker
    calls = []
    again = ArrayCache(tmp_path).get("x", {"a": 1}, lambda: calls.append(1) or {"v": np.arange(5)})
    assert calls and np.array_equal(got["v"], again["v"])


def test_constructing_writes_nothing(ds):
    loader = MemmapLoader(ds, batch_size=2, seq_len=64, mode="packed")
    assert loader.num_docs == 300 and not (ds / ".cache").exists()
    next(iter(loader))
    assert (ds / ".cache" / "loaders").is_dir()


def test_prune_leaves_an_entry_it_cannot_read_and_deletes_the_stale_ones(tmp_path):
    """A marker without "fields" (another version, an edit) was unlinked, then a KeyError traceback
    from the loader's iteration, its arrays left behind."""
    import json
    cache = ArrayCache(tmp_path)
    for epoch in range(3):
        cache.get("grouped", {"plan": 1, "epoch": epoch}, lambda: {"order": np.arange(4)})
    odd = tmp_path / "grouped-odd.json"
    odd.write_text(json.dumps({"inputs": {"plan": 1, "epoch": 0}}))
    assert cache.prune("grouped", lambda inputs: inputs["epoch"] < 2) == 2
    left = sorted(p.name for p in tmp_path.glob("grouped-*"))
    assert odd.name in left and len([n for n in left if n.endswith(".npy")]) == 1
