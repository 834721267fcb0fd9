"""Ranks that build their loaders with different settings (a seed of 1000 + rank, shuffle on one rank
only, a state loaded on some ranks) split no common epoch: their samples overlap and others are never
read, silently. `RankSettings` compares each rank's loader with rank 0's through the process group's
key-value store.

Why the store and not a collective (all_gather_object): a collective at the first pass hung a loader
iterated on some ranks only (an evaluation loader on rank 0: it waited for ranks that never came),
and NCCL's object collectives need each rank's CUDA device set (unset, every rank used cuda:0). The
store waits for nobody: rank 0 publishes a loader's settings at its first pass; every other rank, at
each of its pass starts until rank 0's are there, reads them and compares. Any two ranks that differ
means one differs from rank 0, and that rank stops at a pass start in one line (torchrun then ends the
others). Cost: rank 0 one set; each other rank one check per pass start until found, then one get;
~30 us each on a loopback store, O(world_size) requests in all (comparing every pair was
2 W (W - 1): 2 M requests to one store on 1,024 ranks).

Which of rank 0's loaders a loader is compared with: the n-th to start a pass among those with the
same identity (the data, and every setting but the seed, shuffle and position, which are what may
wrongly differ). A loader read on rank 0 alone over the same data and settings (a peek before
training) shifts that count: the error then says to give it rank=0, world_size=1, which skips it.
"""

from __future__ import annotations

import hashlib
import json

import torch.distributed as dist

from pipeline.errors import PrepError

__all__ = ["RankSettings", "COMPARED"]

# the settings compared between ranks; all others are the loader's identity (loaders/loader.py)
COMPARED = ("seed", "shuffle", "epoch", "consumed")

# loaders that started a pass in this process, per identity
_STARTED: dict[str, int] = {}


class RankSettings:
    """One loader's COMPARED settings against rank 0's loader of the same identity and ordinal."""

    def __init__(self, identity: dict):
        key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
        n = _STARTED[key] = _STARTED.get(key, -1) + 1
        self.key = f"prep/loader/{key}/{n}"
        self.done = False

    def check(self, rank: int, settings) -> None:
        """`settings()`: {name: JSON-able value} for COMPARED, taken at this loader's first pass."""
        if self.done:
            return
        store = _default_store()
        if store is None:
            self.done = True
            return
        if not hasattr(self, "mine"):
            self.mine = json.loads(json.dumps(settings(), sort_keys=True, default=str))  # as rank 0's reads back
        if rank == 0:
            store.set(self.key, json.dumps(self.mine, sort_keys=True))
            self.done = True
            return
        if not store.check([self.key]):
            return  # rank 0 has not started this loader yet: again at the next pass start
        first = json.loads(store.get(self.key))
        self.done = True
        differ = [k for k in self.mine if first.get(k) != self.mine[k]]
        if differ:
            told = "; ".join(f"{k}: {first.get(k)!r} on rank 0, {self.mine[k]!r} on rank {rank}" for k in differ)
            raise PrepError(f"the ranks' MemmapLoaders differ ({told}), so their batches are not one split of a "
                            "common epoch: samples repeat across ranks and others are never read. Build the loader "
                            "with the same settings on every rank (one seed for all: the loader splits the data by "
                            "rank itself), and load the same saved state on every rank or on none. (A loader read "
                            "on rank 0 alone over the same data, a peek or an evaluation, is taken for rank 0's "
                            "part of this one: give it rank=0, world_size=1)")


def _default_store():
    """The default process group's store, or None (a group made some other way: no check)."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None
