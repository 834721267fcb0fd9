"""Part shards -> final shards, in dataset order, while the workers are still tokenizing.

Consecutive parts of a split are grouped greedily into shards of at most `shard_tokens` tokens (a
part joins the open shard if it fits, else it starts the next one), so the shard layout depends only
on the parts' token counts in unit order: the same for any worker count. A group of one part is
hard-linked into place (no copy); a larger group is concatenated (each part mapped read-only and
hashed, then appended with copy_file_range, a copy inside the kernel) while its sha256 is computed,
the only place the bytes are hashed (workers do not hash their parts).

`PartStream` does this in a parent thread as units finish in order, instead of all at the end: on
460 MB of JSONL (144 M tokens, 2 workers) placing every shard after the last unit took 0.75 s of a
3.85 s run (hash, copy, then one fsync of 288 MB); streamed, only the last part's copy and the last
shard's fsync remain after the last unit. The thread holds the GIL only between 8 MiB blocks
(hashlib, copy_file_range and write release it).

Given a journal (`on_placed`), each placed shard is made durable (file and directory fsynced),
journaled, and only then are its parts deleted: the parts on disk are those of the shard being
built and of units not yet placed, instead of a second copy of the whole output (460 MB corpus,
peak disk 2.01x the output -> 1.48x with 100 M-token shards, 1.14x with 20 M-token ones; see
benchmarks/bench_disk.py). Deleting 200 MB of parts takes ~0.2 s (the page cache drops them), now
on this thread while units run instead of after the manifest. A re-run keeps the journaled shards
whose files are whole (sizes, sha256: `usable_placed`), skips their parts in the feed and rebuilds the rest of
DIR/<split>/ from the journaled parts; a dataset is complete only once manifest.json exists
(written last), so a crash anywhere is redone exactly.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import queue
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from pipeline import faults, trace
from pipeline.errors import PrepError
from pipeline.interrupts import join_threads_named
from pipeline.manifest import ShardInfo, read_idx_blocks, read_idx_header, write_idx_blocks
from pipeline.shards import fsync_dir, named, part_intact

__all__ = ["ShardAssembler", "PartStream", "group_parts", "usable_placed", "COPY_BLOCK"]

COPY_BLOCK = 8 << 20
HASH_STEP = 1 << 20  # bytes of a mapped part hashed, then dropped from the parent's RSS (see _mapped)
# fdatasync the shard being built every 8 MiB (on a helper thread, one at a time): spreads the disk
# writes over the run, so the sync after the last unit flushes little. fdatasync here: 36 MiB 57 ms,
# 8 MiB 16 ms. 55 MB on 2 workers (one 35 MB shard), last unit -> shard placed: 0.095-0.110 s with
# 64 MiB, 0.031-0.053 s with 8 (interleaved medians 1.21 -> 1.10 s, 8 pairs); 460 MB: the same.
SYNC_EVERY = 8 << 20


def group_parts(parts: list[dict], shard_tokens: int) -> list[list[dict]]:
    """The grouping ShardAssembler makes, all at once (for tests and tools)."""
    groups: list[list[dict]] = []
    total = 0
    for p in parts:
        if groups and total + p["num_tokens"] <= shard_tokens:
            groups[-1].append(p)
            total += p["num_tokens"]
        else:
            groups.append([p])
            total = p["num_tokens"]
    return groups


def usable_placed(dst_dir: Path, entries: list[dict], dtype: np.dtype) -> list[dict]:
    """The journaled shards 0..k-1 of one split (`RunState.placed`) still as placed: sizes, the .bin's
    sha256 and the .idx's lengths and offsets. A re-run keeps these and rebuilds from shard k on
    (the units of a damaged shard are redone: its parts were deleted once it was journaled).

    Reads every kept .bin: a byte flipped in a placed shard otherwise survived the resume into a
    manifest whose sha256 no longer matched it. Hashed on all cores (hashlib releases the GIL):
    1.6 GB/s per core here (hashlib on 256 MiB in memory), against the ~4 MB/s of uint16 tokens per
    core that tokenizing wrote them at (17 MB/s of text on 2 cores)."""
    itemsize = np.dtype(dtype).itemsize
    by_size = []
    for e in entries:
        if not part_intact(dst_dir, e, itemsize):
            break
        by_size.append(e)
    if not by_size:
        return []
    with ThreadPoolExecutor(max_workers=min(len(by_size), os.cpu_count() or 1)) as pool:
        whole = list(pool.map(lambda e: _placed_whole(Path(dst_dir), e), by_size))
    return by_size[:whole.index(False)] if False in whole else by_size


def _placed_whole(dst_dir: Path, entry: dict) -> bool:
    """Its index read a block at a time (read whole: ~28 bytes per document at once, 112 MB for 4 M)."""
    idx = dst_dir / f"{entry['name']}.idx"
    try:
        header = read_idx_header(idx)
        if header.num_seqs != entry["num_docs"]:
            return False
        tokens = 0  # tokens before the block: each document's first token is this plus those before it
        for lengths, pointers in read_idx_blocks(idx, pointers=True):
            sizes = lengths.astype(np.int64)
            starts = np.cumsum(sizes) - sizes + tokens
            if not np.array_equal(pointers, starts * header.dtype.itemsize):
                return False
            tokens += int(sizes.sum())
    except (PrepError, OSError):
        return False
    if tokens != entry["num_tokens"]:
        return False
    return _file_sha256(dst_dir / f"{entry['name']}.bin") == entry["sha256"]


class ShardAssembler:
    """One split: `add(part)` in dataset order, then `close()`; `shards` lists what was placed.

    `placed`: journaled shards already in `dst_dir` (usable_placed); they keep their names, and the
    parts they were built from are skipped when fed again. `on_placed(index, info, part_names)` is
    called once each new shard is durable, in shard order; its parts are deleted when it returns.

    Each shard is built by its own `_ShardBuild` on its own thread, up to MAX_BUILDS at once: the
    grouping happens here, in the caller's thread, and a shard's parts are queued onto its build,
    which hashes and copies them in order. When the parts come faster than one thread hashes them
    (sha256 of one shard is serial: 0.85-1.6 GB/s per core), shard k finishes on its thread while
    shard k+1 starts on another. Measured on 16 cores (1.84 GB of JSONL, 16 workers, 1.15 GB of
    tokens): one placing thread was busy 1.5-2.0 s of a 2.4 s run and still placing 0.5-0.9 s after
    the last unit.
    """

    def __init__(self, src_dir: Path, dst_dir: Path, dtype: np.dtype, shard_tokens: int,
                 placed: list[dict] = (), on_placed=None):
        self.src_dir, self.dst_dir = Path(src_dir), Path(dst_dir)
        self.dtype = np.dtype(dtype)
        self.shard_tokens = int(shard_tokens)
        self.shards: list[ShardInfo] = [ShardInfo(e["name"], int(e["num_docs"]), int(e["num_tokens"]), e["sha256"])
                                        for e in placed]
        self._consumed = {name for e in placed for name in e["parts"]}
        self.on_placed = on_placed
        self._next_index = len(self.shards)
        self._build: _ShardBuild | None = None  # the open group
        self._closing: list[_ShardBuild] = []   # closed groups whose build has not finished, in order
        self._helpers: ThreadPoolExecutor | None = None  # each build's part copy and periodic sync
        self.stop = threading.Event()  # set by another thread: stop between blocks (Ctrl-C)

    def add(self, part: dict) -> None:
        if part["name"] in self._consumed:  # in a shard placed before a resume
            return
        if self.stop.is_set():
            raise KeyboardInterrupt
        self._raise_failed()
        b = self._build
        if b is not None and b.tokens + part["num_tokens"] <= self.shard_tokens:
            b.add(part)
            return
        if b is not None:
            self._close_build()
        while self._closing and len(self._closing) >= MAX_BUILDS - 1:  # bound the threads (and the parts kept on disk)
            self._wait_oldest()
        if self._helpers is None:
            self._helpers = ThreadPoolExecutor(2 * MAX_BUILDS, thread_name_prefix="prep-place")
        prev = self._closing[-1] if self._closing else None
        self._build = _ShardBuild(self, self._next_index, part, prev)
        self._next_index += 1

    def close(self) -> list[ShardInfo]:
        if self._build is not None:
            self._close_build()
        while self._closing:
            self._wait_oldest()
        self._stop_helpers()
        return self.shards

    def _wait_oldest(self) -> None:
        self._closing[0].wait()  # a failed build stays listed: discard() drops its temporaries
        self._closing.pop(0)

    def discard(self) -> None:
        """Stop the builds and drop the temporary files of the shards not yet placed (after a failure)."""
        self.stop.set()
        builds = [*self._closing, *([self._build] if self._build is not None else [])]
        self._build, self._closing = None, []
        for b in builds:
            b.discard()
        self._stop_helpers()

    def _close_build(self) -> None:
        b, self._build = self._build, None
        # listed before close(): a Ctrl-C raised inside it (while its first submit starts the build's
        # thread) left the build to no one, its thread idle forever, and the interpreter waited for it
        # at exit (`python -m pipeline.cli` and library callers hung after "interrupted")
        self._closing.append(b)
        b.close()

    def _raise_failed(self) -> None:
        """A build's error (ENOSPC naming its temporary) surfaces at the next add()."""
        for b in self._closing:
            if b.error is not None:
                raise b.error
        if self._build is not None and self._build.error is not None:
            raise self._build.error

    def _stop_helpers(self) -> None:
        if self._helpers is not None:
            self._helpers.shutdown(wait=True)
            self._helpers = None

    def _placed(self, index: int, info: ShardInfo, group: list[dict]) -> None:
        """On build `index`'s thread, once its shard is durable and shard index-1 was placed."""
        self.shards.append(info)
        trace.event("shard_placed", shard=info.name)
        faults.point("finalize-shard")
        if self.on_placed is not None:
            self._retire(index, info, group)

    def _retire(self, index: int, info: ShardInfo, group: list[dict]) -> None:
        """Shard `index` durable -> journaled -> its parts deleted. The fsyncs make the journal line
        true after a power cut: a linked shard's data was fsynced by its worker, a copied one's
        before its rename; what is left is the directory entry."""
        try:
            fsync_dir(self.dst_dir)
        except OSError as e:
            raise named(e, self.dst_dir) from None
        self.on_placed(index, info, [p["name"] for p in group])
        faults.point("parts-drop")
        for p in group:
            for ext in ("bin", "idx"):
                (self.src_dir / f"{p['name']}.{ext}").unlink(missing_ok=True)


MAX_BUILDS = 3  # shards being built at once, the open one included (each hashes on its own thread)


class _ShardBuild:
    """One shard: a group of one part is hard-linked into place (no copy); a larger group is
    concatenated into a temporary, each part hashed on this build's thread while a helper copies
    it, then fsynced and renamed. Steps run in order on one thread (`_lane`); the first error stops
    the rest and is kept in `error`."""

    def __init__(self, asm: ShardAssembler, index: int, first: dict, prev: _ShardBuild | None):
        self.asm, self.index, self.prev = asm, index, prev
        self.group = [first]
        self.tokens = first["num_tokens"]
        name = f"shard-{index:06d}"
        self.bin_path, self.idx_path = asm.dst_dir / f"{name}.bin", asm.dst_dir / f"{name}.idx"
        self.tmp_bin, self.tmp_idx = self.bin_path.with_suffix(".bin.tmp"), self.idx_path.with_suffix(".idx.tmp")
        self.error: BaseException | None = None
        # its own name: discard() finds this build's thread by it (see there)
        self._lane_name = f"prep-place-shard-{id(self):x}"
        self._lane = ThreadPoolExecutor(1, thread_name_prefix=self._lane_name)
        self._done: Future | None = None
        self._out = None  # the open .bin.tmp once the group has a second part
        self._sha = None
        self._unsynced = 0
        self._syncing: Future | None = None  # the periodic fdatasync in flight
        self._kernel_copy = hasattr(os, "copy_file_range")

    def add(self, part: dict) -> None:
        if self._out is None:  # a second part: this shard is a concatenation
            self._open()
            self._submit(self._append, self.group[0])
        self.group.append(part)
        self.tokens += part["num_tokens"]
        self._submit(self._append, part)

    def close(self) -> None:
        self._done = self._lane.submit(self._finish)

    def wait(self) -> None:
        """Until this shard is placed (or failed: its error is raised)."""
        try:
            if self._done is None:  # close() was cut short (Ctrl-C): discard() ends this build
                raise KeyboardInterrupt
            self._done.result()
        finally:
            self._lane.shutdown(wait=True)

    def discard(self) -> None:
        self._lane.shutdown(wait=True)  # its steps see asm.stop and end between blocks
        # its thread, if a Ctrl-C cut its start short, is not the pool's to join, and may still be placing
        # this shard (linking, journaling) after the run has let go of its lock
        join_threads_named(self._lane_name + "_")
        if self._syncing is not None:
            wait([self._syncing])  # (its error, if any, is moot now) before its descriptor is closed
            self._syncing = None
        if self._out is not None:
            try:
                self._out.close()
            except OSError:  # the disk that failed the write can fail the close too
                pass
            self._out = None
        for p in (self.tmp_bin, self.tmp_idx):
            p.unlink(missing_ok=True)

    def _submit(self, fn, *args) -> None:
        def step():
            if self.error is None:
                try:
                    fn(*args)
                except BaseException as e:
                    self.error = e
        self._lane.submit(step)

    def _open(self) -> None:
        for p in (self.bin_path, self.idx_path):
            p.unlink(missing_ok=True)
        self._out = open(self.tmp_bin, "wb", buffering=0)  # 8 MiB blocks: no buffer to flush (or fail) at close
        self._sha = hashlib.sha256()

    def _append(self, part: dict) -> None:
        """Hash the part here while a helper thread copies it onto the shard (placing 280 MB of
        parts alone, page cache warm: 400 -> 600 MB/s together with the asynchronous periodic sync;
        hash and copy each take ~half of the 0.35 s of CPU)."""
        src = self.asm.src_dir / part["name"]
        stop = self.asm.stop
        try:
            with open(src.with_name(src.name + ".bin"), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                with _mapped(f, size) as (data, drop):
                    copying = self.asm._helpers.submit(self._copy_part, f, data, size)
                    try:
                        for at in range(0, size, HASH_STEP):
                            if stop.is_set():
                                raise KeyboardInterrupt
                            self._sha.update(data[at:at + HASH_STEP])
                            drop(at, HASH_STEP)
                    finally:
                        wait([copying])  # the copy reads `data`: done before it is unmapped
                    copying.result()
            self._unsynced += size
            if self._unsynced >= SYNC_EVERY and (self._syncing is None or self._syncing.done()):
                # started, not waited for: the disk writes while the next parts are hashed and copied
                # (one sync in flight at most; its error is raised here next time, or at close)
                if self._syncing is not None:
                    self._syncing.result()
                self._syncing = self.asm._helpers.submit(os.fdatasync, self._out.fileno())
                self._unsynced = 0
        except OSError as e:
            raise named(e, self.tmp_bin) from None

    def _copy_part(self, f, data: memoryview, size: int) -> None:
        for at in range(0, size, COPY_BLOCK):
            if self.asm.stop.is_set():
                raise KeyboardInterrupt
            n = min(COPY_BLOCK, size - at)
            faults.charge_write(n, self.tmp_bin)
            self._copy(f, data, at, n)

    def _copy(self, f, data: memoryview, at: int, n: int) -> None:
        """Bytes [at, at + n) of part `f` onto the end of the shard: copy_file_range(2), a copy inside
        the kernel, where it works (Linux; 280 MB of parts, hash + copy: 0.53 -> 0.37 s of CPU), else
        write(2) from the mapped part; both loop over short counts."""
        while n:
            done = 0
            if self._kernel_copy:
                try:
                    done = os.copy_file_range(f.fileno(), self._out.fileno(), n, at)
                except OSError as e:
                    if e.errno not in _NO_KERNEL_COPY:
                        raise
                    self._kernel_copy = False
            if not done:  # not supported here, or 0 (some filesystems say so instead of failing)
                self._kernel_copy = False
                done = self._out.write(data[at:at + n])
            at += done
            n -= done

    def _finish(self) -> None:
        """The last step on this build's thread: make the shard durable under its name, then, once
        the previous shard is placed, record it (journal, part deletion) in shard order."""
        if self.error is not None:
            raise self.error
        try:
            sha = self._link() if self._out is None else self._seal()
        except BaseException as e:
            self.error = e
            raise
        if self.prev is not None:
            self.prev.wait()  # its error (if any) is this one too: nothing after it is journaled
            self.prev = None  # else every build stays reachable from the last
        group = self.group
        info = ShardInfo(self.bin_path.stem, sum(p["num_docs"] for p in group), sum(p["num_tokens"] for p in group), sha)
        try:
            self.asm._placed(self.index, info, group)
        except BaseException as e:
            self.error = e
            raise

    def _link(self) -> str:
        """One part: link it into place, hash it by reading."""
        part = self.group[0]
        for p in (self.bin_path, self.idx_path):
            p.unlink(missing_ok=True)
        for ext, dst in (("bin", self.bin_path), ("idx", self.idx_path)):
            src = self.asm.src_dir / f"{part['name']}.{ext}"
            try:
                os.link(src, dst)
            except OSError:  # another filesystem, or links unsupported
                _copy_durably(src, dst)
                continue
            try:
                _fsync_file(dst)  # workers do not fsync their parts; a final shard must be on disk
            except OSError as e:
                raise named(e, dst) from None
        return part.get("sha256") or _file_sha256(self.bin_path)

    def _part_lengths(self):
        """The group's document lengths, read from its parts' indexes in blocks (write_idx_blocks)."""
        for part in self.group:
            idx = self.asm.src_dir / f"{part['name']}.idx"
            seen = 0
            for lengths, _ in read_idx_blocks(idx):
                seen += lengths.size
                yield lengths
            if seen != part["num_docs"]:
                raise PrepError(f"{idx}: holds {seen} documents, its unit's journal line says {part['num_docs']}; "
                                "the part changed while this run placed it: re-run the same command to redo its unit")

    def _seal(self) -> str:
        try:
            # the index is written and fsynced on a helper while this thread fsyncs the data, so the
            # two syncs overlap: one shard of 324 K paragraphs took 11-13 ms for the .bin's fsync,
            # then 23-25 ms for its 6.5 MB .idx (20 bytes per document), after the last unit. It is
            # written from the parts' indexes a block at a time: the shard's lengths were kept in
            # memory (8 bytes per document, then ~44 while writing), so the parent's peak grew with
            # the documents per shard (one shard of 4 M tiny documents: 203 MiB, now 45)
            num_docs = sum(p["num_docs"] for p in self.group)
            indexing = self.asm._helpers.submit(write_idx_blocks, self.tmp_idx, num_docs, self._part_lengths,
                                                self.asm.dtype)
            try:
                if self._syncing is not None:
                    syncing, self._syncing = self._syncing, None
                    syncing.result()
                os.fsync(self._out.fileno())
                self._out.close()
                self._out = None
            finally:
                wait([indexing])  # done with tmp_idx before any error's cleanup removes it
            indexing.result()
            os.replace(self.tmp_bin, self.bin_path)
            os.replace(self.tmp_idx, self.idx_path)
        except OSError as e:
            raise named(e, self.tmp_bin) from None
        return self._sha.hexdigest()


# copy_file_range refusals that mean "use write(2) instead" (old kernels, other filesystems, seccomp)
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM, errno.EBADF}


@contextlib.contextmanager
def _mapped(f, size: int):
    """(view, drop): the whole part as a read-only memoryview, hashed without a copy into a read
    buffer, and `drop(at, n)`, which unmaps the pages of bytes [at, at + n) from this process (they
    stay in the page cache; touching them again faults them back in). Hashed pages would otherwise
    count in the parent's RSS until the part is closed: up to MAX_BUILDS parts of ~5 MB at once
    with 8 MiB units."""
    if size == 0:
        yield memoryview(b""), lambda at, n: None
        return
    with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
        view = memoryview(m)

        def drop(at: int, n: int) -> None:
            if _DONTNEED is not None:
                m.madvise(_DONTNEED, at, min(n, size - at))

        try:
            yield view, drop
        finally:
            view.release()


_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # not on Windows


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # any descriptor of the file flushes its dirty pages
    finally:
        os.close(fd)


def _copy_durably(src: Path, dst: Path) -> None:
    """A copy of `src` at `dst` that is whole and on disk (tmp, fsync, rename) or absent."""
    tmp = dst.with_name(dst.name + ".tmp")
    try:
        shutil.copyfile(src, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, dst)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise named(e, dst) from None


def _clear_except(dst: Path, keep: set[str]) -> None:
    """DIR/<split>/ holding only the files named in `keep` (what an interrupted run placed and
    journaled); anything else there (shards placed but not journaled, temporaries) is rebuilt."""
    if not keep:
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir(parents=True)
        return
    for entry in os.scandir(dst):
        if entry.name not in keep:
            shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)


def _file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(COPY_BLOCK):
            sha.update(block)
    return sha.hexdigest()


class PartStream:
    """Feed finished unit results in dataset order (`feed`); a thread places their parts as shards.

    `finish()` closes the last shards and returns {split: [ShardInfo]}; it re-raises the thread's
    error (ENOSPC naming the file). `check()` raises that error early, from the feeding thread.
    `abort()` stops the thread and drops its temporary files.
    """

    def __init__(self, parts_root: Path, out: Path, splits, dtype: np.dtype, shard_tokens: int,
                 background: bool = True, placed: dict[str, list[dict]] | None = None, journal=None):
        """`placed`: {split: usable_placed(...)} kept from an interrupted run; `journal(split, index,
        info_dict, part_names)` records each new shard (RunState.record_placed), after which its parts
        are deleted. Without a journal every shard is rebuilt and parts stay (exact dedup's path)."""
        self.assemblers = {}
        for split in splits:
            dst = Path(out) / split
            keep = (placed or {}).get(split, [])
            _clear_except(dst, {f"{e['name']}.{ext}" for e in keep for ext in ("bin", "idx")})
            on_placed = None
            if journal is not None:
                def on_placed(index, info, names, split=split):
                    journal(split, index, info.to_dict(), names)
            self.assemblers[split] = ShardAssembler(Path(parts_root) / split, dst, dtype, shard_tokens,
                                                    placed=keep, on_placed=on_placed)
        self.error: BaseException | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = None
        if background:
            self._thread = threading.Thread(target=self._loop, name="prep-assemble", daemon=True)
            self._thread.start()

    def feed(self, result: dict) -> None:
        if self._thread is None:
            self._place(result)
        else:
            self._queue.put(result)

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def finish(self) -> dict[str, list[ShardInfo]]:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self.check()
        try:
            shards = {split: a.close() for split, a in self.assemblers.items()}
        except BaseException:
            self.abort()
            raise
        for a in self.assemblers.values():
            fsync_dir(a.dst_dir)
        return shards

    def abort(self) -> None:
        for a in self.assemblers.values():
            a.stop.set()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        for a in self.assemblers.values():
            a.discard()

    def _place(self, result: dict) -> None:
        for split, a in self.assemblers.items():
            for part in result["shards"][split]:
                a.add(part)

    def _loop(self) -> None:
        while (result := self._queue.get()) is not None:
            if self.error is not None:
                continue  # drain: the feeding thread raises the error at its next check()
            try:
                self._place(result)
            except BaseException as e:
                self.error = e
