"""Laziness: 10 million documents cost (almost) nothing until used, and little after.

Bounds are on memory, never on time. Measurements run in fresh processes.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .loaderkit import make_dataset

PROBE = Path(__file__).with_name("mem_probe.py")
NUM_DOCS = 10_000_000
BOUND = 16  # bytes of private memory per document
MODES = ["windows", "packed", "grouped"]


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    lens = np.random.default_rng(0).integers(1, 4, NUM_DOCS)  # 1-3 tokens: 10^7 documents, 20M tokens
    return make_dataset(tmp_path_factory.mktemp("big") / "d", lens, dtype=np.uint16, token_ids="random",
                        shard_tokens=8_000_000)


def probe(path, first_batch: bool) -> dict:
    args = [sys.executable, str(PROBE), str(path), "1" if first_batch else "0", *MODES]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_construction_reads_headers_only(big_dataset):
    got = probe(big_dataset, first_batch=False)
    for mode in MODES:
        assert got[mode]["num_docs"] == NUM_DOCS  # guard: the loader did open all 10^7 documents
        assert got[mode]["construct_bytes"] / NUM_DOCS < BOUND
        assert got[mode]["construct_bytes"] < 8 << 20  # in fact: no per-document memory at all
    assert not (Path(big_dataset) / ".cache").exists() or not any((Path(big_dataset) / ".cache").rglob("*.npy"))


def test_derived_arrays_live_on_disk(big_dataset):
    """First batch in a fresh process once the cache exists: document index, pack plan and epoch
    order are memory-mapped from disk, not held privately (the first probe builds the cache)."""
    probe(big_dataset, first_batch=True)
    got = probe(big_dataset, first_batch=True)
    for mode in MODES:
        assert got[mode]["num_docs"] == NUM_DOCS
        assert got[mode]["batch_bytes"] / NUM_DOCS < BOUND, (mode, got[mode])
    cache = list((Path(big_dataset) / ".cache" / "loaders").glob("*.npy"))
    assert sum(p.stat().st_size for p in cache) > 8 * NUM_DOCS  # guard: the arrays exist, on disk


@pytest.mark.parametrize("on_disk", [False, True])
def test_grouped_orders_do_not_pile_up_across_epochs(dataset, tmp_path, on_disk):
    """Each epoch's grouped order (12 B per row) stayed in the cache's memory for good: anonymous RAM
    with cache_dir=False, open memory maps otherwise; now only the current epoch's is held."""
    from loaders import MemmapLoader

    loader = MemmapLoader(dataset, batch_size=4, seq_len=64, mode="grouped", cache_dir=tmp_path if on_disk else False)
    held = []
    for _ in range(4):
        for _ in loader:
            pass
        held.append(sum(k.startswith("grouped-") for k in loader.plan.cache._memory))
    assert held == [1, 1, 1, 1]
    assert loader.epoch == 4  # guard: four different epochs were ordered
    if on_disk:  # and on disk, one order file set per epoch was left for good: now this one's and the last
        markers = [json.loads(p.read_text())["inputs"]["epoch"] for p in tmp_path.glob("grouped-*.json")]
        assert sorted(markers) == [2, 3]
        assert len(list(tmp_path.glob("grouped-*.npy"))) == 2 * len(markers)
