"""Writers for the on-disk format in `manifest.py`.

`ShardWriter` writes one `.bin`/`.idx` pair: tokens go to `NAME.bin.tmp<pid>` in large buffered
writes (sha256 updated on the way, unless `checksum=False`: a worker's parts are hashed once, when
pipeline.assemble places them), the index is written at close, then both are fsynced and renamed
into place (`.bin` first) and the directory is fsynced. A worker's parts are written with
`sync=False, crc=True` instead: no fsyncs, and the crc32 of both files goes into the unit's journal
entry, so a resumed run checks them (`part_intact`) and redoes a unit whose parts a power cut (or
anything else) damaged. Most parts are deleted seconds after they are written, once their final
shard is placed; unsynced, they usually never reach the disk at all. 460 MB of JSONL, 2 workers, 8
interleaved pairs: median 3.02 s with the parts fsynced, 2.79 s with crc32s instead (57.6 MB: 1.14
-> 1.11 s); crc32 costs ~1 ms per 10 MB of tokens (isal; zlib's ~3 ms). Any failure on the way (ENOSPC included)
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
from pipeline.crc import crc32
from pipeline.errors import PrepError
from pipeline.manifest import ShardInfo, idx_bytes, write_idx

__all__ = ["ShardWriter", "RollingShardWriter", "check_id_range", "fsync_dir", "named", "part_intact"]

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
                        "the tokenizer gave an id past the vocabulary it reports (its largest id sets the dtype, "
                        "and no recipe setting changes it): please report this with the tokenizer file")


def named(e: OSError, path) -> OSError:
    """`e`, naming `path` when it names no file (a failed write() doesn't): ENOSPC then says which disk."""
    return e if e.filename is not None else OSError(e.errno, e.strerror, str(path))


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def part_intact(directory: Path, part: dict, itemsize: int) -> bool:
    """A journaled part (a worker's result entry; or a placed shard's entry, sizes only) still on
    disk as written: sizes, and the crc32 of both files where recorded (reads them: a resume checks
    only parts not yet in a placed shard)."""
    bin_path, idx_path = Path(directory) / f"{part['name']}.bin", Path(directory) / f"{part['name']}.idx"
    try:
        if (bin_path.stat().st_size != part["num_tokens"] * itemsize
                or idx_path.stat().st_size != idx_bytes(part["num_docs"])):
            return False
        if "crc32" not in part:
            return True
        if crc32(idx_path.read_bytes()) != part["idx_crc32"]:
            return False
        crc = 0
        with open(bin_path, "rb") as f:
            while block := f.read(8 << 20):
                crc = crc32(block, crc)
        return crc == part["crc32"]
    except FileNotFoundError:
        return False


class ShardWriter:
    """One shard: `with ShardWriter(dir, name, dtype) as w: w.add_documents(ids, lengths)`."""

    def __init__(self, directory: str | os.PathLike, name: str, dtype: np.dtype, checksum: bool = True,
                 sync: bool = True, crc: bool = False):
        self.directory = Path(directory)
        self.sync = sync  # False: closed without fsync (a worker's part: checked by crc32 on resume)
        self.crc32 = 0 if crc else None  # of the .bin bytes; `idx_crc32` of the .idx, set at close
        self.idx_crc32: int | None = None
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
        if self.crc32 is not None:
            self.crc32 = crc32(data, self.crc32)
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
            if self.sync:
                os.fsync(self._file.fileno())
            self._file.close()
            lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
            idx_crc32 = write_idx(self._tmp_idx, lengths, self.dtype, sync=self.sync)
            if self.crc32 is not None:
                self.idx_crc32 = idx_crc32
            faults.point("shard-tmp")
            os.replace(self._tmp_bin, self.bin_path)
            faults.point("shard-bin")
            os.replace(self._tmp_idx, self.idx_path)
        except BaseException as e:  # ENOSPC at the last write or at fsync: no tmp left to fill the disk
            self._discard()
            if isinstance(e, OSError):
                raise named(e, self._tmp_bin) from None
            raise
        if self.sync:
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
                 checksum: bool = True, sync: bool = True, crc: bool = False):
        self.directory = Path(directory)
        self.checksum, self.sync, self.crc = checksum, sync, crc
        self.crcs: list[tuple[int, int]] = []  # (bin crc32, idx crc32) per shard when crc=True
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
        self._current = ShardWriter(self.directory, name, self.dtype, self.checksum, self.sync,
                                    self.crc).__enter__()

    def _roll(self) -> None:
        self._current.__exit__(None, None, None)
        self.shards.append(self._current.info)
        if self.crc:
            self.crcs.append((self._current.crc32, self._current.idx_crc32))
        self._current = None

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._current is None:
            return
        if exc_type is not None:
            self._current.__exit__(exc_type, exc, tb)
            self._current = None
            return
        self._roll()
