"""Writers for the on-disk format in `manifest.py`.

`ShardWriter` writes one `.bin`/`.idx` pair: tokens go to `NAME.bin.tmp<pid>` in large buffered
writes (sha256 updated on the way, unless `checksum=False`: a worker's parts are hashed once, when
pipeline.assemble places them), the index is written at close, then both are fsynced and renamed
into place (`.bin` first) and the directory is fsynced. Any failure on the way (ENOSPC included)
removes the temporary files and re-raises; a finished name is never a partial file. The pid in the
temporary name keeps two processes that write the same shard (a re-run racing an orphan of a killed
run) off each other's files; both write the same bytes, so either rename is right.
`RollingShardWriter` cuts a stream of documents into shards of at most `shard_tokens` tokens,
never splitting a document (a document longer than that gets a shard of its own).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from pipeline import faults
from pipeline.errors import PrepError
from pipeline.manifest import ShardInfo, write_idx

__all__ = ["ShardWriter", "RollingShardWriter", "check_id_range", "fsync_dir", "named"]

WRITE_BUFFER_BYTES = 8 << 20  # one write() per 8 MiB: large sequential writes, few syscalls
DIRECT_WRITE_BYTES = 1 << 20  # arrays this big are written without copying them into the buffer


def check_id_range(ids: np.ndarray, dtype: np.dtype, where: str) -> None:
    """Refuse any id that would wrap when cast to `dtype` (transformers#2825 lost 45% of ids so)."""
    if ids.size == 0:
        return
    info = np.iinfo(dtype)
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi > info.max:
        raise PrepError(f"{where}: token id {hi if hi > info.max else lo} does not fit {np.dtype(dtype).name}; "
                        "the tokenizer's vocabulary is larger than it reports (set the dtype wider)")


def named(e: OSError, path) -> OSError:
    """`e`, naming `path` when it names no file (a failed write() doesn't): ENOSPC then says which disk."""
    return e if e.filename is not None else OSError(e.errno, e.strerror, str(path))


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ShardWriter:
    """One shard: `with ShardWriter(dir, name, dtype) as w: w.add_documents(ids, lengths)`."""

    def __init__(self, directory: str | os.PathLike, name: str, dtype: np.dtype, checksum: bool = True):
        self.directory = Path(directory)
        self.name = name
        self.dtype = np.dtype(dtype)
        self.bin_path = self.directory / f"{name}.bin"
        self.idx_path = self.directory / f"{name}.idx"
        self._tmp_bin = self.directory / f"{name}.bin.tmp{os.getpid()}"
        self._tmp_idx = self.directory / f"{name}.idx.tmp{os.getpid()}"
        self._lengths: list[np.ndarray] = []
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._sha = hashlib.sha256() if checksum else None
        self.num_docs = 0
        self.num_tokens = 0
        self._file = None
        self.info: ShardInfo | None = None

    def __enter__(self) -> ShardWriter:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._file = open(self._tmp_bin, "wb", buffering=0)
        return self

    def add_documents(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        """Append documents: `ids` is their concatenated tokens (already `dtype`), `lengths` tokens each."""
        if ids.dtype != self.dtype:
            raise TypeError(f"ids are {ids.dtype}, shard is {self.dtype}")
        data = memoryview(np.ascontiguousarray(ids.astype(self.dtype.newbyteorder("<"), copy=False))).cast("B")
        if self._sha is not None:
            self._sha.update(data)
        self._lengths.append(np.asarray(lengths, dtype=np.int64))
        self.num_docs += len(lengths)
        self.num_tokens += int(ids.size)
        if len(data) >= DIRECT_WRITE_BYTES:  # a batch's worth: write it as is, no copy into a buffer
            self._flush()
            self._write(data)
            return
        self._pending.append(bytes(data))
        self._pending_bytes += len(data)
        if self._pending_bytes >= WRITE_BUFFER_BYTES:
            self._flush()

    def _write(self, data) -> None:
        try:
            faults.charge_write(len(data), self._tmp_bin)
            view = memoryview(data)
            while view:  # a raw FileIO does one write(2), which may be short (a nearly full disk)
                view = view[self._file.write(view):]
        except OSError as e:
            raise named(e, self._tmp_bin) from None

    def _flush(self) -> None:
        if self._pending:
            self._write(b"".join(self._pending))
            self._pending.clear()
            self._pending_bytes = 0

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:  # leave no half shard behind; the unit is redone on resume
            self._discard()
            return
        try:
            self._flush()
            os.fsync(self._file.fileno())
            self._file.close()
            lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
            write_idx(self._tmp_idx, lengths, self.dtype)
            faults.point("shard-tmp")
            os.replace(self._tmp_bin, self.bin_path)
            faults.point("shard-bin")
            os.replace(self._tmp_idx, self.idx_path)
        except BaseException as e:  # ENOSPC at the last write or at fsync: no tmp left to fill the disk
            self._discard()
            if isinstance(e, OSError):
                raise named(e, self._tmp_bin) from None
            raise
        fsync_dir(self.directory)  # the renames survive a power cut before the unit is journaled
        self.info = ShardInfo(self.name, self.num_docs, self.num_tokens,
                              self._sha.hexdigest() if self._sha is not None else "")

    def _discard(self) -> None:
        self._pending.clear()
        if self._file is not None and not self._file.closed:
            self._file.close()
        for p in (self._tmp_bin, self._tmp_idx):
            p.unlink(missing_ok=True)


class RollingShardWriter:
    """Documents -> shards `{prefix}-{k:04d}` of at most `shard_tokens` tokens each (docs kept whole)."""

    def __init__(self, directory: str | os.PathLike, prefix: str, dtype: np.dtype, shard_tokens: int,
                 checksum: bool = True):
        self.directory = Path(directory)
        self.checksum = checksum
        self.prefix = prefix
        self.dtype = np.dtype(dtype)
        self.shard_tokens = int(shard_tokens)
        self.shards: list[ShardInfo] = []
        self._current: ShardWriter | None = None

    def __enter__(self) -> RollingShardWriter:
        return self

    def add_documents(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        lengths = np.asarray(lengths, dtype=np.int64)
        start_doc, start_tok = 0, 0
        ends = np.cumsum(lengths)
        while start_doc < len(lengths):
            room = self.shard_tokens - (self._current.num_tokens if self._current else 0)
            # docs [start_doc, stop) fit in the room left; at least one doc goes into a fresh shard
            stop = int(np.searchsorted(ends, start_tok + room, side="right"))
            if stop <= start_doc:
                if self._current is not None and self._current.num_docs > 0:
                    self._roll()
                    continue
                stop = start_doc + 1  # a document longer than shard_tokens: a shard of its own
            if self._current is None:
                self._open()
            end_tok = int(ends[stop - 1])
            self._current.add_documents(ids[start_tok:end_tok], lengths[start_doc:stop])
            start_doc, start_tok = stop, end_tok

    def _open(self) -> None:
        name = f"{self.prefix}-{len(self.shards):04d}"
        self._current = ShardWriter(self.directory, name, self.dtype, self.checksum).__enter__()

    def _roll(self) -> None:
        self._current.__exit__(None, None, None)
        self.shards.append(self._current.info)
        self._current = None

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._current is None:
            return
        if exc_type is not None:
            self._current.__exit__(exc_type, exc, tb)
            self._current = None
            return
        self._roll()
