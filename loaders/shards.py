"""TokenShards: lazy, per-process access to one split of one dataset, through its manifest.

Opening reads `manifest.json` and the 34-byte header of each `.idx`, and compares file sizes with
what the manifest and headers promise (a stat per file); nothing else. Token reads use `os.preadv`
straight into the caller's batch buffer: no persistent memmap of the `.bin` files, so the resident
set stays flat (a persistent memmap grows file-backed RSS toward the dataset size; nanoGPT#428) and
many shards do not exhaust file descriptors (fds are opened lazily, at most MAX_OPEN_FILES, LRU).
File descriptors never cross a fork or a pickle: a worker re-opens what it reads.

A dataset rewritten while a loader reads it (`prep tokenize --overwrite` renames new files over the
old ones) is refused, not mixed in: the manifest's and each `.bin`'s identity (size, mtime in ns) is
recorded on open; `check_unchanged` (one stat, at each pass start) compares the manifest's, and a shard
file opened later (by a worker, or after the LRU closed it) is fstat-ed once against its own. Before,
the loader read the new shards at the old offsets (two datasets in one run) or stopped on a "short read".

The global document index (token offset of every document, int64[N+1], and lengths, int32[N]) is
derived from the `.idx` files once, checked against them, and cached on disk (12 B per document).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np

from pipeline.dataset_path import (
    FILE,
    FOLDER,
    LOST_MANIFEST,
    MANIFEST,
    UNFINISHED,
    URL,
    lost_manifest_message,
    not_a_dataset,
    unfinished_message,
    url_message,
)
from pipeline.errors import PrepError
from pipeline.manifest import MANIFEST_NAME, idx_bytes, read_idx, read_idx_header, read_manifest, shard_paths

from .cache import ArrayCache

__all__ = ["DatasetChanged", "TokenShards", "check_tokenizer", "file_identity"]

MAX_OPEN_FILES = 128


class DatasetChanged(PrepError):
    """The dataset on disk is no longer the one a loader planned its batches over."""

    @classmethod
    def of(cls, root: Path, what: str) -> DatasetChanged:
        return cls(f"{root}: the dataset changed while this loader was using it ({what}; was it rebuilt, e.g. "
                   "`prep tokenize --overwrite`?); its batches would mix two datasets. Construct a new "
                   "MemmapLoader over the new dataset (a state saved on the old one resumes only if the new "
                   "one is identical), and do not rewrite a dataset a training run is reading: write the "
                   "new one to another directory")


def file_identity(st: os.stat_result) -> tuple[int, int]:
    """(size, mtime in ns): what tells a file replaced by rename from the one recorded. Not the inode:
    FUSE mounts (gcsfuse and the like) may number the same file anew after the kernel forgets it, and a
    false alarm would stop a training run; a rebuilt file has a later mtime (ns clocks: ext4, xfs)."""
    return st.st_size, st.st_mtime_ns


def check_tokenizer(tokenizer: dict, expect: str | None, where: str) -> None:
    """Refuse a dataset made with another tokenizer; `expect` is its name or sha256."""
    if expect is None or expect in (tokenizer.get("name"), tokenizer.get("sha256")):
        return
    raise PrepError(f"{where}: dataset was tokenized with {tokenizer.get('name')!r} "
                    f"(sha256 {str(tokenizer.get('sha256'))[:16]}...), not {expect!r}; re-tokenize it with "
                    "that tokenizer, or pass the matching expect_tokenizer")


def _check_root(root: Path) -> None:
    """A path that is not a dataset directory, told apart (pipeline.dataset_path, shared with the CLI)
    and worded for a loader: read_manifest's "missing or incomplete (finish it with `prep tokenize`)" was
    the advice for a split folder (DIR/train, a Megatron-style prefix's folder), a shard file and a run
    still writing, and the manifest.json itself was told to pass split='manifest.json'."""
    case = not_a_dataset(root)
    if case is None:
        return
    ds, split = case.dataset, f" (with split={case.split!r} for this folder's split)" if case.split else ""
    if case.kind == MANIFEST:
        raise PrepError(f"{root}: the dataset's manifest, not its directory; pass the directory that holds it: {ds}")
    if case.kind == FILE and ds is not None:
        raise PrepError(f"{root}: a file inside the dataset {ds}, not a dataset directory; pass {ds}{split}")
    if case.kind == FOLDER:
        raise PrepError(f"{root}: no {MANIFEST_NAME}; it is inside the dataset {ds}: pass {ds}{split}")
    if case.kind == UNFINISHED:
        raise PrepError(unfinished_message(root, "build the loader again"))
    if case.kind == LOST_MANIFEST:
        raise PrepError(lost_manifest_message(root, "build the loader again"))
    if case.kind == URL:
        raise PrepError(url_message(case, "the loader"))
    what = "a file, not a directory" if case.kind == FILE else "no such directory"
    raise PrepError(f"{root}: {what}; pass the directory `prep tokenize` wrote (the one holding {MANIFEST_NAME})")


class TokenShards:
    """`TokenShards(dir, split)`: sizes checked on open; `verify=True` also checks sha256 of every file."""

    def __init__(self, root: str | os.PathLike, split: str = "train", *, expect_tokenizer: str | None = None,
                 verify: bool = False):
        if sys.byteorder != "little":
            raise PrepError("prep shards are little-endian; this loader does not support big-endian hosts")
        self.root = Path(root)
        self.split = split
        _check_root(self.root)
        self._manifest_id = self._manifest_identity()  # before reading it: a rewrite during the open is caught below
        self.manifest = read_manifest(self.root)
        where = str(self.root / MANIFEST_NAME)
        if split not in self.manifest.splits:
            raise PrepError(f"{where}: no split {split!r}; it has {sorted(self.manifest.splits)}")
        check_tokenizer(self.manifest.tokenizer, expect_tokenizer, where)
        info = self.manifest.splits[split]
        self.dtype = self.manifest.np_dtype
        self.names = [s.name for s in info.shards]
        docs = np.array([s.num_docs for s in info.shards], dtype=np.int64)
        toks = np.array([s.num_tokens for s in info.shards], dtype=np.int64)
        self.doc_base = np.concatenate([[0], np.cumsum(docs)]).astype(np.int64)  # int64[S+1]
        self.tok_base = np.concatenate([[0], np.cumsum(toks)]).astype(np.int64)  # int64[S+1]
        self.num_docs, self.num_tokens = int(self.doc_base[-1]), int(self.tok_base[-1])
        if (self.num_docs, self.num_tokens) != (info.num_docs, info.num_tokens):
            raise PrepError(f"{where}: split {split!r} says {info.num_docs} docs / {info.num_tokens} tokens "
                            f"but its shards add up to {self.num_docs} / {self.num_tokens}; the manifest is "
                            "corrupt (re-run `prep tokenize`)")
        # file_identity of each .idx / .bin, recorded by _check_sizes
        self._idx_ids: list[tuple[int, int]] = []
        self._bin_ids: list[tuple[int, int]] = []
        self._check_sizes()
        self.check_unchanged()  # the manifest was replaced while the shards were being checked
        if verify:
            self.verify()
        self.fingerprint = hashlib.sha256(json.dumps({
            "split": split, "dtype": self.manifest.dtype,
            "shards": [[s.name, s.num_docs, s.num_tokens, s.sha256] for s in info.shards],
        }, sort_keys=True).encode()).hexdigest()
        self._tok_base_list = self.tok_base.tolist()
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._pid = os.getpid()

    # -- checks ---------------------------------------------------------------------------------

    def _manifest_identity(self) -> tuple[int, int] | None:
        try:
            return file_identity(os.stat(self.root / MANIFEST_NAME))
        except FileNotFoundError:
            return None

    def check_unchanged(self) -> None:
        """Refuse a dataset whose manifest was replaced or removed since the open (one stat). prep writes
        the manifest last and removes it first when it rebuilds, so every rewrite changes it."""
        now = self._manifest_identity()
        if now != self._manifest_id:
            raise DatasetChanged.of(self.root, f"{MANIFEST_NAME} " + ("was removed" if now is None else "was replaced"))

    def _check_file(self, path: Path, want: tuple[int, int], fd: int | None = None) -> None:
        """`path` (or its open `fd`) is still the file recorded on open; else DatasetChanged, naming the
        manifest when that changed too (a rebuild: the usual cause)."""
        try:
            st = os.fstat(fd) if fd is not None else os.stat(path)
        except FileNotFoundError:
            st = None
        if st is None or file_identity(st) != want:
            self.check_unchanged()
            how = "was removed" if st is None else "was replaced or modified"
            raise DatasetChanged.of(self.root, f"{path.name} of split {self.split!r} {how}")

    def _check_sizes(self) -> None:
        itemsize = self.dtype.itemsize
        for shard in self.manifest.splits[self.split].shards:
            bin_path, idx_path = shard_paths(self.root, self.split, shard.name)
            for p in (bin_path, idx_path):
                if not p.is_file():
                    raise PrepError(f"{p}: missing, but {self.root / MANIFEST_NAME} lists shard {shard.name!r}; "
                                    "restore the file or re-run `prep tokenize`")
            header = read_idx_header(idx_path)
            if header.dtype != self.dtype or header.num_seqs != shard.num_docs:
                raise PrepError(f"{idx_path}: index holds {header.num_seqs} {header.dtype.name} documents, the "
                                f"manifest says {shard.num_docs} {self.dtype.name}; the file belongs to another "
                                "dataset or run (re-run `prep tokenize`)")
            ids = []
            for p, want in ((idx_path, idx_bytes(shard.num_docs)), (bin_path, shard.num_tokens * itemsize)):
                st = os.stat(p)
                if st.st_size != want:
                    raise PrepError(f"{p}: {st.st_size} bytes, the manifest implies {want}; the file is truncated "
                                    "or from another run (re-run `prep tokenize`, or `prep verify` for details)")
                ids.append(file_identity(st))
            self._idx_ids.append(ids[0])
            self._bin_ids.append(ids[1])

    def verify(self) -> None:
        """Full check, the one `prep verify` runs: sha256 of every .bin, every .idx against its .bin,
        token ids below the vocabulary size."""
        from pipeline.verify import verify_dataset

        problems = verify_dataset(self.root, level="full").problems
        if problems:
            more = f" (and {len(problems) - 1} more: `prep verify {self.root}` lists them)" if len(problems) > 1 else ""
            raise PrepError(f"{problems[0]}{more}; re-run `prep tokenize` to rebuild the dataset")

    def _check_index(self, idx_path: Path, num_tokens: int):
        _, lengths, pointers = read_idx(idx_path)
        lens = np.asarray(lengths, dtype=np.int64)
        expect = np.zeros(lens.size, dtype=np.int64)
        np.cumsum(lens[:-1] * self.dtype.itemsize, out=expect[1:])
        if lens.size and (lens.min() < 0 or int(lens.sum()) != num_tokens
                          or not np.array_equal(expect, np.asarray(pointers))):
            raise PrepError(f"{idx_path}: document lengths/offsets do not tile its .bin of {num_tokens} "
                            "tokens; the index is corrupt (re-run `prep tokenize`)")
        return lens

    # -- derived index --------------------------------------------------------------------------

    def doc_index(self, cache: ArrayCache) -> dict[str, np.ndarray]:
        """{"starts": int64[N+1] global token offset of each document (and the end), "lengths": int32[N]}."""
        def build():
            lengths = np.empty(self.num_docs, dtype=np.int32)
            for k, name in enumerate(self.names):
                _, idx_path = shard_paths(self.root, self.split, name)
                # read once per cache build (first pass), so the one stat is no cost: an index rebuilt
                # since the open would give the new dataset's documents the old one's offsets
                self._check_file(idx_path, self._idx_ids[k])
                lens = self._check_index(idx_path, int(self.tok_base[k + 1] - self.tok_base[k]))
                lengths[self.doc_base[k]:self.doc_base[k + 1]] = lens
            starts = np.zeros(self.num_docs + 1, dtype=np.int64)
            np.cumsum(lengths, out=starts[1:])
            return {"starts": starts, "lengths": lengths}
        return cache.get("docindex", {"fingerprint": self.fingerprint}, build)

    # -- reads ----------------------------------------------------------------------------------

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_fds"], state["_pid"] = OrderedDict(), None  # the receiving process opens its own
        return state

    def _fd(self, k: int) -> int:
        if self._pid != os.getpid():  # forked: the inherited descriptors are the parent's; drop them
            for fd in self._fds.values():
                os.close(fd)
            self._fds, self._pid = OrderedDict(), os.getpid()
        fd = self._fds.get(k)
        if fd is None:
            if len(self._fds) >= MAX_OPEN_FILES:
                os.close(self._fds.popitem(last=False)[1])
            fd = self._open_checked(k)
            self._fds[k] = fd
        else:
            self._fds.move_to_end(k)
        return fd

    def _open_checked(self, k: int) -> int:
        """Open shard k's .bin and check it is the file recorded on open: one fstat per open (each process
        opens a shard once, up to MAX_OPEN_FILES at a time), never per batch."""
        path = shard_paths(self.root, self.split, self.names[k])[0]
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self._check_file(path, self._bin_ids[k])  # raises, naming the manifest or the file
            raise
        try:
            self._check_file(path, self._bin_ids[k], fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_into(self, starts, lengths, out: np.ndarray, offsets) -> None:
        """Copy tokens [starts[i], starts[i] + lengths[i]) of the split into out[offsets[i]:...].

        `out` is a flat, C-contiguous array of this dataset's dtype (a batch buffer); spans may cross
        shard boundaries. One `preadv` per span and shard: no intermediate copies.
        """
        if not out.flags.c_contiguous or out.dtype != self.dtype:
            raise ValueError(f"read_into needs a C-contiguous {self.dtype} buffer, got {out.dtype}")
        itemsize = self.dtype.itemsize
        view = memoryview(out.reshape(-1)).cast("B")
        for s, n, o in zip(np.asarray(starts).tolist(), np.asarray(lengths).tolist(), np.asarray(offsets).tolist()):
            if s < 0 or s + n > self.num_tokens:
                raise IndexError(f"tokens [{s}, {s + n}) outside the split's {self.num_tokens}")
            while n > 0:
                k = bisect.bisect_right(self._tok_base_list, s) - 1
                take = min(n, self._tok_base_list[k + 1] - s)
                pos, end, at = o * itemsize, (o + take) * itemsize, (s - self._tok_base_list[k]) * itemsize
                while pos < end:  # preadv may return short counts; zero means the file shrank
                    got = os.preadv(self._fd(k), [view[pos:end]], at)
                    if got <= 0:
                        # a file truncated in place (a rename-replaced one is caught on open): the fd's size now
                        raise DatasetChanged.of(self.root, f"{self.names[k]}.bin of split {self.split!r} was cut to "
                                             f"{os.fstat(self._fd(k)).st_size} bytes while open")
                    pos, at = pos + got, at + got
                s, n, o = s + take, n - take, o + take

    def close(self) -> None:
        if self._pid == os.getpid():
            for fd in self._fds.values():
                os.close(fd)
        self._fds = OrderedDict()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
