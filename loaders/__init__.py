"""Shards -> batches: `from loaders import MemmapLoader`. numpy + torch; `pipeline` never imports this.

    shards.py    TokenShards: manifest + .idx headers on open, preadv reads per process
    cache.py     derived arrays (.npy, memory-mapped) keyed by sha256 of their inputs
    samplers.py  pure-numpy orderings: keyed permutations, exact mixtures, length grouping
    packing.py   pure-numpy planners: best-fit-decreasing, concat-split
    mixing.py    checks on a mix: one tokenizer, weights > 0, boundaries, repeated datasets
    plan.py      LoaderConfig, per-dataset sample spaces, epoch -> per-rank rows
    collate.py   rows -> one byte buffer per batch (worker) -> training dict (device)
    prefetch.py  pinned buffers, side-stream H2D copies
    ranks.py     rank / world size from the arguments or torch.distributed, re-checked per pass
    loader.py    MemmapLoader around torch's DataLoader; state_dict / load_state_dict
    bench.py     run_loader_bench, behind `prep bench-loader`
"""

from .loader import MemmapLoader

__all__ = ["MemmapLoader"]
