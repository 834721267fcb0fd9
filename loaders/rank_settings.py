"""Ranks that build their loaders with different settings (a seed of 1000 + rank, shuffle on one rank
only, another samples_per_epoch, a state loaded on some ranks) split no common epoch: their samples
overlap and others are never read, silently (or their batch counts differ and DDP hangs at its next
collective). `RankSettings` compares each rank's loader with the first rank's to start it, through the
process group's key-value store.

Why the store and not a collective (all_gather_object): a collective at the first pass hung a loader
iterated on some ranks only (an evaluation loader on rank 0: it waited for ranks that never came),
and NCCL's object collectives need each rank's CUDA device set (unset, every rank used cuda:0). The
store waits for nobody: at its first pass each rank offers its settings with one compare_set, which
keeps the first rank's and answers them; a rank whose own differ stops there, in one line. Whichever
rank is first, every rank that differs from it is told at its first pass (a rank that waited for rank
0's settings missed them when it started first, and a one-pass job never looked again). Cost: one
request per rank and loader, ~30 us on a loopback store.

Which loaders are compared: the n-th to start a pass in each process among those of the same identity:
the data and every setting but PER_RANK_SUSPECTS, the ones a script wrongly sets per rank. A loader
read on one rank alone (an evaluation, a peek) with another shape (batch_size, seq_len, split, mode)
pairs with nothing (review: keyed by data, split and mode alone, a rank-0 evaluation over the training
split took the place of the next training loader, refused hours into a sound job); one with the
training loader's very shape, started before it, shifts that count: the error then says to give it
rank=0, world_size=1, which takes it out of the comparison.
"""

from __future__ import annotations

import hashlib
import json

import torch.distributed as dist

from pipeline.errors import PrepError

__all__ = ["RankSettings", "PER_RANK_SUSPECTS"]

# settings compared between ranks but no part of a loader's identity: those scripts set per rank by
# mistake (a seed of base + rank, a flag on one rank, an epoch size from a rank's share, a state
# loaded on some ranks only)
PER_RANK_SUSPECTS = ("seed", "shuffle", "samples_per_epoch", "epoch", "consumed")

# loaders that started a pass in this process, per identity
_STARTED: dict[str, int] = {}


class RankSettings:
    """One loader's settings against those of the first rank to start its counterpart."""

    def __init__(self, identity: dict):
        key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
        n = _STARTED[key] = _STARTED.get(key, -1) + 1
        self.key = f"prep/loader/{key}/{n}"
        self.done = False

    def check(self, rank: int, settings: dict) -> None:
        """`settings`: a flat JSON-able dict (config fields, datasets, position) at this loader's first pass."""
        if self.done:
            return
        self.done = True
        store = _default_store()
        if store is None:
            return
        mine = json.loads(json.dumps(settings, sort_keys=True, default=str))  # as the others read it back
        offer = json.dumps({"rank": rank, "settings": mine}, sort_keys=True)
        first = json.loads(store.compare_set(self.key, "", offer))  # the key's value: ours when we came first
        theirs = first["settings"]
        differ = [k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
        if not differ:
            return
        ranks = sorted([(first["rank"], theirs), (rank, mine)], key=lambda rs: rs[0])
        told = "; ".join(f"{k}: " + ", ".join(f"{s.get(k)!r} on rank {r}" for r, s in ranks) for k in differ[:3])
        raise PrepError(f"the ranks' MemmapLoaders differ ({told}), so their batches are not one split of a common "
                        "epoch: samples repeat across ranks and others are never read. Build the loader with the "
                        "same settings on every rank (one seed for all: the loader splits the data by rank itself), "
                        "and load the same saved state on every rank or on none. (A loader read on one rank alone "
                        "over the same data and mode, a peek before training, is taken for that rank's part of "
                        "the training loader: give it rank=0, world_size=1)")


def _default_store():
    """The default process group's store, or None (a group made some other way: no check)."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None
