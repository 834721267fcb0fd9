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
built it: file name, function and line of the innermost frames of the user's code, see build_site) over the same
data and split. Every other setting is compared, not part of the identity: it was all but seed, shuffle, samples_per_epoch,
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
import site as site_module
import sys
import sysconfig

import torch.distributed as dist

from pipeline.errors import PrepError

__all__ = ["RankSettings", "build_site"]

# loaders built in this process, per identity (build site, data, split)
_BUILT: dict[str, int] = {}
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# the build site's depth in frames of the user's code: the line that builds the loader and two callers,
# which tell apart a factory called for a peek and for training. Callers further out (the entry point, a
# `with wandb.init()` on rank 0 alone, mp.Process children beside a rank run in the parent) differ by rank
# in sound jobs: keyed with them, the ranks' loaders were never compared (review)
SITE_DEPTH = 3


def _dirs(paths) -> tuple[str, ...]:
    """Directories as prefixes ("/x/" not "/x"), longest first: a site-packages inside the standard
    library's folder (a system Python without a venv) is matched before the standard library."""
    return tuple(sorted({os.path.join(os.path.abspath(p), "") for p in paths if p}, key=len, reverse=True))


def _site_packages() -> list[str]:
    found = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    try:  # Debian's dist-packages, a --system-site-packages venv's base, the user site (~/.local)
        found += site_module.getsitepackages() + [site_module.getusersitepackages()]
    except AttributeError:  # an old virtualenv's site module
        pass
    return found


_LIBRARY_DIRS = _dirs(_site_packages())
_STDLIB_DIRS = _dirs(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib"))


def _package_of(path: str) -> str | None:
    """The installed package a file belongs to ('/venv/.../site-packages/mytrain/'), or None for a
    file of no installed package (a script, the user's checkout)."""
    for lib in _LIBRARY_DIRS:
        if path.startswith(lib):
            return lib + path[len(lib):].split(os.sep, 1)[0]
    return None


_UNSET = object()


def build_site() -> list[str]:
    """Where a loader is built: 'file.py:function:line' of the SITE_DEPTH innermost frames of the code
    that builds it, innermost first. That code is the first caller outside this package; its frames are
    those of the same installed package, or of no installed package when the caller is a script or a
    checkout (so a trainer framework's frames around a user's hook are left out: another patch release of
    it on one node numbered its lines differently). User code installed as a package (a wheel in a Docker
    image) is user code: left out with the libraries, every loader had one site and a rank-0 peek paired
    with the others' training loader (review). The standard library's frames and frozen modules' (runpy,
    importlib: line numbers change between patch releases) are never part of it. File names without their
    directory: two nodes may hold the script under other paths."""
    site, owner, frame = [], _UNSET, sys._getframe(1)
    while frame is not None and len(site) < SITE_DEPTH:
        base, counted, package = _file_kind(frame.f_code.co_filename)
        if counted:
            owner = package if owner is _UNSET else owner
            if package == owner:
                site.append(f"{base}:{frame.f_code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return site


# code file name -> _file_kind's answer, for absolute and frozen names (another, relative or `<string>`,
# resolves against the working directory, which may change). Why: abspath and the prefix tests, per frame
# walked at each build of a loader with world_size > 1: build_site 9.8 -> 4.9 us from a 4-frame script
# (timeit), more under a trainer's deeper stack (benchmarks/results/regression_check_cpu2_202611.md)
_FILE_KINDS: dict[str, tuple[str, bool, str | None]] = {}


def _file_kind(name: str) -> tuple[str, bool, str | None]:
    """(file name without its directory, whether its frames may be part of a build site, its installed
    package or None) of a frame's code file: frozen modules, this package and the standard library
    take no part."""
    kind = _FILE_KINDS.get(name)
    if kind is None:
        path = os.path.abspath(name)
        package = None
        counted = not name.startswith("<frozen") and os.path.dirname(path) != _PACKAGE_DIR
        if counted:
            package = _package_of(path)
            counted = package is not None or not path.startswith(_STDLIB_DIRS)
        kind = (os.path.basename(path), counted, package)
        if os.path.isabs(name) or name.startswith("<frozen"):
            _FILE_KINDS[name] = kind
    return kind


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
