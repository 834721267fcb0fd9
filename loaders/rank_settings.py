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

Which loaders are compared: in each process, the n-th built at the same place (the call stack that
built it: file name, function and line of each frame of the user's code, see build_site) over the same data and
split. Every other setting is compared, not part of the identity: it was all but seed, shuffle, samples_per_epoch,
epoch and consumed, so `batch_size=8 if rank == 0 else 4` (or a per-rank seq_len) made two identities that were never
compared, the ranks yielded different numbers of batches and DDP hung at its next collective. A
loader read on one rank alone (an evaluation, a peek) is built at another line, or built on every
rank and read on one: either way no training loader of another rank takes its place (the n-th to
start a pass, the key before, paired a rank-0 peek with the other ranks' training loader). Only a
loader built on some ranks alone at the very place where the others build theirs (a loop that
builds one more on rank 0) still shifts the count: the error says so, and rank=0, world_size=1 takes
it out of the comparison.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig

import torch.distributed as dist

from pipeline.errors import PrepError

__all__ = ["RankSettings", "build_site"]

# loaders built in this process, per identity (build site, data, split)
_BUILT: dict[str, int] = {}
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Python's and the installed packages' own frames (runpy, torch's spawn / elastic launcher, Lightning's
# loop): another patch release on one node numbers their lines differently, which left every loader
# of the job uncompared; the user's frames (train.py, a train_dataloader hook) tell loaders apart
_LIBRARY_DIRS = tuple(sorted({os.path.join(os.path.abspath(p), "") for k, p in sysconfig.get_paths().items()
                              if k in ("stdlib", "platstdlib", "purelib", "platlib")}))


def build_site() -> list[str]:
    """The call stack building a loader, outermost frame last: 'file.py:function:line' of each frame of
    the user's code (not this package's, the standard library's or installed packages'). File names
    without their directory: two nodes may hold the script under other paths, and a path that differs
    would only leave the loaders uncompared."""
    site, frame = [], sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if os.path.dirname(path) != _PACKAGE_DIR and not path.startswith(_LIBRARY_DIRS):
            site.append(f"{os.path.basename(path)}:{frame.f_code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return site


class RankSettings:
    """One loader's settings against those of the first rank to start its counterpart. Made when the
    loader is built (the count is of loaders built), checked at its first pass."""

    def __init__(self, identity: dict):
        key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
        n = _BUILT[key] = _BUILT.get(key, -1) + 1
        self.key = f"prep/loader/{key}/{n}"
        self.done = False
        # the refusal, raised again at every later pass: a trainer that caught it (a retry loop, an
        # `except Exception: continue` around an epoch) went on unchecked at its next pass, on the same
        # mismatched settings (done was set before the comparison)
        self.refused: str | None = None

    def check(self, rank: int, settings: dict) -> None:
        """`settings`: a flat JSON-able dict (config fields, datasets, position) at this loader's first pass."""
        if self.refused:
            raise PrepError(self.refused)
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
        self.refused = (f"the ranks' MemmapLoaders differ ({told}), so their batches are not one split of a common "
                        "epoch: samples repeat across ranks and others are never read, or the ranks' batch counts "
                        "differ and DDP hangs. Build the loader with the same settings on every rank (one seed and "
                        "one batch_size for all: the loader splits the data by rank itself), and load the same "
                        "saved state on every rank or on none. (Loaders are paired by the line that builds them "
                        "and their count there: one built there on some ranks only, e.g. one more in a loop on "
                        "rank 0, takes the next one's place; give such a loader rank=0, world_size=1)")
        raise PrepError(self.refused)


def _default_store():
    """The default process group's store, or None (a group made some other way: no check)."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None
