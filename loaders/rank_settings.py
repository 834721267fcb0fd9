"""Ranks that build their loaders with different settings (a seed of 1000 + rank, shuffle on one rank
only, a state loaded on some ranks) split no common epoch: their samples overlap and others are never
read, silently. `RankSettings` compares them through the process group's key-value store.

Why the store and not a collective (all_gather_object): a collective at the first pass hung a loader
iterated on some ranks only (an evaluation loader on rank 0: it waited for ranks that never came),
and NCCL's object collectives need each rank's CUDA device set (unset, every rank used cuda:0). The
store waits for nobody: at each pass start a rank publishes its loader's settings once, then reads
those of the ranks that have published. Of two ranks that differ, the one that publishes second sees
the difference at its first pass (the store is one server, so its write came after the other's); the
first one at a later pass start. One error stops the job: torchrun ends the other ranks.

Cost: one set, one check, and one get per newly seen rank, each a round trip to the store (~0.1 ms
on loopback), at pass starts only, until every rank was seen; nothing after.
"""

from __future__ import annotations

import hashlib
import json

import torch.distributed as dist

from pipeline.errors import PrepError

__all__ = ["RankSettings"]

# loaders built in this process per identity: the n-th loader over the same data is compared with the
# other ranks' n-th (ranks build their loaders in the same order; one built on rank 0 alone has no peer)
_BUILT: dict[str, int] = {}


class RankSettings:
    """One loader's settings against the other ranks' loaders of the same identity (datasets, split, mode)."""

    def __init__(self, identity: str):
        key = hashlib.sha256(identity.encode()).hexdigest()[:16]
        n = _BUILT[key] = _BUILT.get(key, -1) + 1
        self.prefix = f"prep/loader/{key}/{n}/"
        self.mine: dict | None = None
        self.unseen: set[int] | None = None  # ranks not yet compared with; empty: done

    def check(self, rank: int, world_size: int, settings) -> None:
        """`settings()`: a flat JSON-able dict (config fields, datasets, position), taken at the first call."""
        if self.unseen is not None and not self.unseen:
            return
        store = _default_store()
        if store is None:
            return
        if self.mine is None:
            self.mine = json.loads(json.dumps(settings(), sort_keys=True, default=str))  # as the others read back
            store.set(self.prefix + str(rank), json.dumps(self.mine, sort_keys=True))
            self.unseen = set(range(world_size)) - {rank}
        ready = [r for r in sorted(self.unseen) if store.check([self.prefix + str(r)])]
        theirs = {r: json.loads(store.get(self.prefix + str(r))) for r in ready}
        differ = [k for k in self.mine if any(t.get(k) != self.mine[k] for t in theirs.values())]
        if differ:
            seen = dict(sorted({rank: self.mine, **theirs}.items()))
            told = "; ".join(f"{k}: {_by_value({r: s.get(k) for r, s in seen.items()})}" for k in differ[:3])
            raise PrepError(f"the ranks' MemmapLoaders differ ({told}), so their batches are not one split of a "
                            "common epoch: samples repeat across ranks and others are never read. Build the loader "
                            "with the same settings on every rank (one seed for all: the loader splits the data by "
                            "rank itself), and load the same saved state on every rank or on none")
        self.unseen -= set(ready)


def _default_store():
    """The default process group's store, or None (a group made some other way: no check)."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def _by_value(values: dict[int, object]) -> str:
    """'5 on ranks 0, 2; 7 on rank 1' (at most 4 values, 4 ranks each: a seed of 1000 + rank on 64 ranks
    stays one readable line)."""
    groups: dict[str, list[int]] = {}
    for r, v in values.items():
        groups.setdefault(repr(v), []).append(r)
    parts = []
    for v, ranks in groups.items():
        named = ", ".join(map(str, ranks[:4])) + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")
        parts.append(f"{v} on rank{'s' if len(ranks) > 1 else ''} {named}")
    more = f"; {len(parts) - 4} other values" if len(parts) > 4 else ""
    return "; ".join(parts[:4]) + more
