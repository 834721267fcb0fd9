"""On-disk cache of derived arrays (document offsets, pack plans, grouped epoch orders).

Each entry is a set of `.npy` files plus a `.json` marker written last (atomically), under
`<dir>/<name>-<key>.*`, where key = sha256 of the JSON of every input the arrays depend on
(dataset fingerprint, seq_len, seed, ...). Readers memory-map the arrays, so N processes on a node
share one copy through the page cache and a spawned worker re-opens them by path instead of
unpickling them. A per-entry `flock` makes concurrent builders (ranks, workers) build once.

Directory: `cache_dir` when given; else `DIR/.cache/loaders` of the (first) dataset; if that is not
writable (read-only mount, shared dataset), `$XDG_CACHE_HOME/prep/loaders` (~/.cache/prep/loaders).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path, PurePath

import numpy as np

from pipeline.errors import PrepError

__all__ = ["ArrayCache", "cache_key", "check_cache_dir", "default_cache_dir", "user_cache_dir"]

CACHE_VERSION = 1  # bump when any cached array's meaning changes


def cache_key(inputs: dict) -> str:
    blob = json.dumps({"cache_version": CACHE_VERSION, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def check_cache_dir(cache_dir) -> None:
    """Refuse a cache_dir that names no directory (MemmapLoader's and run_loader_bench's)."""
    if isinstance(cache_dir, (str, os.PathLike)) and not os.fspath(cache_dir) \
            or isinstance(cache_dir, PurePath) and not cache_dir.parts:
        # "" meant the working directory: the cache files were strewn there. Path("") is Path(".")
        # (no parts; os.fspath gives "."): Path(os.environ.get("CACHE", "")) got past a check of ""
        raise PrepError(f"cache_dir={cache_dir!r} names no directory (an empty path; Path('') is Path('.')); "
                        "pass a directory ('.' as a string for the working directory), None (the default: "
                        "DIR/.cache/loaders), or False (derived arrays in memory)")


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "prep" / "loaders"


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".probe{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False


def default_cache_dir(dataset_dir: str | os.PathLike) -> Path:
    """DIR/.cache/loaders when writable, else the user cache dir."""
    d = Path(dataset_dir) / ".cache" / "loaders"
    return d if _writable(d) else user_cache_dir()


class ArrayCache:
    """`cache.get(name, inputs, build)` -> dict of read-only arrays (memory-mapped when on disk).

    `directory=None` keeps everything in memory (nothing written; for tests and one-off use).
    `ArrayCache.for_dataset(DIR)` picks `default_cache_dir(DIR)` on first use, not on construction,
    so opening a loader writes nothing.
    """

    def __init__(self, directory: str | os.PathLike | None):
        self._directory = Path(directory) if directory is not None else None
        self._dataset_dir: Path | None = None
        self._memory: dict[str, dict[str, np.ndarray]] = {}

    @classmethod
    def for_dataset(cls, dataset_dir: str | os.PathLike) -> ArrayCache:
        cache = cls(None)
        cache._dataset_dir = Path(dataset_dir)
        return cache

    @property
    def directory(self) -> Path | None:
        if self._directory is None and self._dataset_dir is not None:
            self._directory = default_cache_dir(self._dataset_dir)
        return self._directory

    def __getstate__(self) -> dict:  # a spawned worker re-opens entries from disk, never unpickles them
        state = dict(self.__dict__)
        state["_memory"] = self._memory if self.directory is None else {}
        return state

    def get(self, name: str, inputs: dict, build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        key = f"{name}-{cache_key(inputs)}"
        if key in self._memory:
            return self._memory[key]
        if self.directory is None:
            arrays = {k: np.asarray(v) for k, v in build().items()}
        else:
            arrays = self._load(key) or self._build_locked(key, inputs, build)
        self._memory[key] = arrays
        return arrays

    def forget(self, name: str, inputs: dict) -> None:
        """Drop an entry from this process's memory (its arrays go once nothing else holds them);
        its files stay on disk."""
        self._memory.pop(f"{name}-{cache_key(inputs)}", None)

    def prune(self, name: str, stale: Callable[[dict], bool]) -> int:
        """Delete the on-disk entries of `name` whose inputs `stale` picks (marker first, so a reader
        that opens one then rebuilds it; a process that has its arrays mapped keeps them); returns how
        many. Grouped orders are one entry per epoch, 12 B per row: 120 MB an epoch for 10 M documents,
        left under DIR/.cache for good before."""
        if self.directory is None or not self.directory.is_dir():
            return 0
        gone = 0
        for marker in self.directory.glob(f"{name}-*.json"):
            try:
                entry = json.loads(marker.read_text())
                fields = list(entry["fields"])  # before the unlink: a marker without them stays, not a traceback
                if not stale(entry["inputs"]):
                    continue
                marker.unlink()
            except (OSError, ValueError, KeyError, TypeError):
                continue  # half-written, or another process pruned it first
            key = marker.name[:-len(".json")]
            for f in fields:
                Path(self.directory / f"{key}.{f}.npy").unlink(missing_ok=True)
            Path(self.directory / f"{key}.lock").unlink(missing_ok=True)
            gone += 1
        return gone

    def _load(self, key: str) -> dict[str, np.ndarray] | None:
        marker = self.directory / f"{key}.json"
        try:
            fields = json.loads(marker.read_text())["fields"]
            return {f: np.load(self.directory / f"{key}.{f}.npy", mmap_mode="r") for f in fields}
        except (OSError, ValueError, KeyError):
            return None  # absent or half-written: (re)build

    def _unwritable(self, e: OSError) -> PrepError:
        # a cache_dir under a missing mount, a file, or a full disk: FileNotFoundError / FileExistsError
        # / OSError tracebacks from the first pass, naming no option
        return PrepError(f"loader cache directory {self.directory} cannot be written ({e.strerror or e}); pass "
                         "cache_dir= a writable directory, or cache_dir=False to keep derived arrays in memory")

    def _build_locked(self, key: str, inputs: dict, build) -> dict[str, np.ndarray]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = open(self.directory / f"{key}.lock", "w")
        except OSError as e:
            raise self._unwritable(e) from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per entry; the others wait, then load
            try:
                got = self._load(key)
                if got is not None:
                    return got
                arrays = build()
                try:
                    self._write(key, inputs, arrays)
                except OSError as e:
                    raise self._unwritable(e) from None
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return self._load(key)

    def _write(self, key: str, inputs: dict, arrays: dict[str, np.ndarray]) -> None:
        for field, arr in arrays.items():
            tmp = self.directory / f"{key}.{field}.npy.tmp{os.getpid()}"
            try:
                with open(tmp, "wb") as f:
                    np.save(f, np.ascontiguousarray(arr))
            except OSError:
                tmp.unlink(missing_ok=True)  # a full disk left the partial file behind
                raise
            os.replace(tmp, self.directory / f"{key}.{field}.npy")
        marker_tmp = self.directory / f"{key}.json.tmp{os.getpid()}"
        marker_tmp.write_text(json.dumps({"fields": list(arrays), "inputs": inputs}, sort_keys=True, default=str))
        os.replace(marker_tmp, self.directory / f"{key}.json")
