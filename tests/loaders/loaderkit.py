"""Synthetic datasets for loader tests, written with the real on-disk format code.

`token_ids="position"` makes every token unique: token = its global position in the split + 1
(+ `offset`, int32), so a test can tell exactly which tokens a batch holds and which document (and
dataset, with distinct offsets) each one is in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.manifest import Manifest, SplitInfo, write_manifest
from pipeline.shards import RollingShardWriter

__all__ = ["make_dataset", "doc_of_token", "lognormal_lengths", "collect", "OFFSET_B"]

OFFSET_B = 10_000_000  # the second test dataset's tokens are above this, the first's below


def lognormal_lengths(n: int, seed: int = 0, mean: float = 4.0, sigma: float = 1.0, hi: int | None = None):
    lens = np.maximum(1, np.random.default_rng(seed).lognormal(mean, sigma, n).astype(np.int64))
    return np.minimum(lens, hi) if hi else lens


def make_dataset(root: str | Path, lengths, *, split: str = "train", dtype=np.int32, shard_tokens: int = 1 << 30,
                 token_ids: str = "position", tokenizer: dict | None = None, extra_splits: dict | None = None,
                 seed: int = 0, offset: int = 0) -> Path:
    """Write DIR/<split>/*.bin/.idx + manifest.json for documents of `lengths` tokens."""
    root = Path(root)
    splits = {}
    for name, lens in {split: lengths, **(extra_splits or {})}.items():
        lens = np.asarray(lens, dtype=np.int64)
        total = int(lens.sum())
        if token_ids == "position":
            ids = (np.arange(total, dtype=np.int64) + 1 + offset).astype(dtype)
        else:
            ids = np.random.default_rng(seed).integers(0, 50257, total).astype(dtype)
        with RollingShardWriter(root / name, "part", np.dtype(dtype), shard_tokens) as w:
            step = 1 << 20  # documents per call; keeps memory flat for 10^7 documents
            ends = np.concatenate([[0], np.cumsum(lens)])
            for a in range(0, lens.size, step):
                b = min(a + step, lens.size)
                w.add_documents(ids[ends[a]:ends[b]], lens[a:b])
        splits[name] = SplitInfo(int(lens.size), total, tuple(w.shards))
    tok = tokenizer or {"name": "gpt2", "backend": "test", "sha256": "ab" * 32, "boundary": "eos"}
    vocab = 1 << 24 if np.dtype(dtype) == np.int32 else 50257
    write_manifest(root, Manifest(dtype=np.dtype(dtype).name, vocab_size=vocab, tokenizer=tok, splits=splits))
    return root


def doc_of_token(tokens: np.ndarray, lengths) -> np.ndarray:
    """Position-id datasets: the document index of each token id (token = position + 1)."""
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    return np.searchsorted(ends, np.asarray(tokens, dtype=np.int64) - 1, side="right")


def collect(loader, limit=None):
    """All batches of one pass as numpy dicts."""
    out = []
    for i, b in enumerate(loader):
        out.append({k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.items()})
        if limit is not None and i + 1 >= limit:
            break
    return out
