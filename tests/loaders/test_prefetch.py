"""Host -> device path: the CPU path makes no CUDA call; the CUDA path (gpu marker) equals it."""

import numpy as np
import pytest
import torch

from loaders import MemmapLoader
from loaders.collate import build_batch, finish_batch, to_long, unpack
from loaders.prefetch import Prefetcher
from pipeline.errors import PrepError

from .loaderkit import collect


def test_cpu_path_makes_no_cuda_calls(dataset, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("CUDA touched on the CPU path")
    monkeypatch.setattr(torch.cuda, "Stream", boom)
    monkeypatch.setattr(torch.cuda, "current_stream", boom)
    batches = collect(MemmapLoader(dataset, batch_size=2, seq_len=32, mode="packed"), limit=3)
    assert len(batches) == 3


def test_prefetcher_cpu_is_an_ordered_map():
    raws = [{"v": torch.tensor([i]), "n": i} for i in range(5)]
    out = list(Prefetcher("cpu", lambda r: {"v": r["v"] * 2, "n": r["n"]})(raws))
    assert [o["n"] for o in out] == list(range(5)) and [int(o["v"]) for o in out] == [0, 2, 4, 6, 8]


def test_worker_buffers_are_compact(dataset, dataset_u16):
    """A raw batch is ONE contiguous byte buffer holding the dataset's dtype (never int64)."""
    loader = MemmapLoader(dataset, batch_size=2, seq_len=32, mode="windows")
    raw = build_batch(loader.plan, 0, 0, 0)
    tensors = [v for v in raw.values() if torch.is_tensor(v)]
    assert len(tensors) == 1 and raw["buf"].dtype == torch.uint8 and raw["buf"].is_contiguous()
    assert raw["buf"].numel() == 2 * 33 * 4  # int32 tokens, B x (T + 1)
    assert unpack(raw)["tokens"].dtype == torch.int32
    packed = MemmapLoader(dataset_u16, batch_size=2, seq_len=32, mode="packed")
    raw = build_batch(packed.plan, 0, 0, 0)
    parts = unpack(raw)
    assert parts["tokens"].shape == (2, 2, 32) and parts["tokens"].dtype == torch.uint16
    assert parts["meta"].dtype == torch.int32 and len([v for v in raw.values() if torch.is_tensor(v)]) == 1
    assert finish_batch(raw)["input_ids"].dtype == torch.int64


def test_uint16_to_long_keeps_high_ids():
    t = torch.from_numpy(np.array([0, 1, 32767, 32768, 50256, 65535], dtype=np.uint16))
    assert to_long(t).tolist() == [0, 1, 32767, 32768, 50256, 65535]


def test_cuda_device_without_cuda(dataset):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(PrepError, match="CUDA is not available"):
        MemmapLoader(dataset, batch_size=2, seq_len=32, device="cuda")


def test_a_cuda_index_past_the_devices_names_the_local_rank(dataset, monkeypatch):
    """device=f"cuda:{RANK}" on the second node of 2-GPU nodes (cuda:2): the loader took it, and the first
    batch failed with "CUDA error: invalid device ordinal" as a traceback. (CUDA faked: 2 devices.)"""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(PrepError, match=r"device='cuda:2' but this machine has 2 CUDA device\(s\) \(cuda:0 to "
                                        r"cuda:1\); with several nodes pass the local rank \(LOCAL_RANK"):
        MemmapLoader(dataset, batch_size=2, seq_len=32, device="cuda:2")
    assert MemmapLoader(dataset, batch_size=2, seq_len=32, device="cuda:1").device == torch.device("cuda:1")


@pytest.mark.parametrize("workers", [0, 2])
def test_pin_memory_without_cuda_warns_and_gives_the_same_batches(dataset, workers):
    """As torch's DataLoader does; with 0 workers the batch was allocated pinned and torch raised
    "no pinned memory allocator" (2 workers only warned)."""
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    args = dict(batch_size=2, seq_len=32, seed=3)
    with pytest.warns(UserWarning, match="no CUDA device is available: batches are not pinned"):
        loader = MemmapLoader(dataset, num_workers=workers, pin_memory=True, **args)
    got = collect(loader, limit=3)
    want = collect(MemmapLoader(dataset, **args), limit=3)
    assert len(got) == 3 and all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, want))


@pytest.mark.parametrize("kw, match", [
    ({"mode": "grouped", "pad_multiple": 8, "max_tokens": 16}, "max_tokens=16 cannot hold one row of seq_len=32"),
    ({"samples_per_epoch": 0}, "samples_per_epoch must be >= 1"),
    ({"num_workers": -1}, "num_workers must be an integer >= 0, got -1"),
])
def test_arguments_that_cannot_work_are_refused_at_construction(dataset, kw, match):
    """max_tokens under seq_len was taken, and one-row batches then broke the budget; the other two
    failed on the first batch, with torch's error or advice that did not apply."""
    with pytest.raises(PrepError, match=match):
        MemmapLoader(dataset, batch_size=2, seq_len=32, **kw)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("mode", ["windows", "packed", "grouped"])
def test_cuda_batches_equal_cpu_batches(dataset, mode, workers):
    args = dict(batch_size=4, seq_len=64, mode=mode, seed=3, attention_mask=mode == "packed")
    want = collect(MemmapLoader(dataset, **args), limit=20)
    got = []
    for b in MemmapLoader(dataset, num_workers=workers, device="cuda", **args):
        assert b["input_ids"].is_cuda and b["input_ids"].dtype == torch.int64
        got.append({k: (v.cpu().numpy() if torch.is_tensor(v) else v) for k, v in b.items()})
        if len(got) == 20:
            break
    for w, g in zip(want, got):
        assert w.keys() == g.keys()
        for k in w:
            assert np.array_equal(w[k], g[k]) if isinstance(w[k], np.ndarray) else w[k] == g[k]
