"""Split compressed files: the parent decompresses each once into per-unit windows for the workers.

A .zst or .gz stream cannot be entered in the middle, so a compressed file used to be one work unit:
one worker read all of it while the others idled (a single 2 GB .jsonl.zst ran on one core whatever
-j said). Now such a file is planned as ranges of its decompressed bytes (readers.jsonl: a unit owns
the lines whose first byte lies in its range, as for a plain file), and a thread here reads the
stream once and writes each unit's bytes into a window file:

    window of unit [start, end) = decompressed bytes [start - 1, just past the first newline at or
                                  after end - 1), or to the end of the stream for the last unit

The worker reads the window as if it were the plain file at those offsets (`open_window`), so lines,
positions (the train/val split), rejects and therefore the output bytes are exactly those of reading
the whole stream in one unit, and of any -j.

One thread decompresses one file (zstandard and zlib release the GIL); one file per
SPOOL_THREADS_PER_WORKERS workers is spooled at once, in plan order, each at most `ahead` (workers + 2)
windows in front of the units that consumed them (a window is deleted once its unit's result is
journaled), so the spool holds at most that many windows of up to unit_bytes (+ one line) per file. A damaged stream ends its
file's spooling: the unit it was in, and every later unit of that file, fail with the error that
a whole-file unit would have raised (under on_bad_record: skip the earlier units keep their
documents). A resumed run decompresses from the start again but writes windows for unfinished
units only.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.errors import PrepError
from pipeline.readers.base import WorkUnit, decode_errors, open_input

__all__ = ["Spooler", "open_window", "WindowFile", "SPOOL_BLOCK"]

# decompressed bytes per read1(). One thread spools 460 MB of JSONL from a zstd -3 file into windows
# in 0.78-0.85 s on the 2-core VM whether this is 256 KiB, 1 MiB or 4 MiB (4 interleaved rounds):
# ~0.6 s of decompression plus the window writes, ~560 MB/s, which ~5 workers consume
SPOOL_BLOCK = 1 << 20
SPOOL_THREADS_PER_WORKERS = 8  # files spooled at once: one per this many workers. On the GPU machine's
# 16 cores one spooling thread kept 16 workers on one 460 MB .zst at 2.05-2.25 s, against 1.52-1.59 s
# for the plain file: a single file is spool-bound there; several files spool in parallel


class WindowFile:
    """A window file read at the offsets of the decompressed stream it was cut from."""

    def __init__(self, f, base: int):
        self._f, self._base = f, base

    def seek(self, offset: int, whence: int = 0) -> int:
        assert whence == 0
        return self._f.seek(max(0, offset - self._base)) + self._base

    def tell(self) -> int:
        return self._f.tell() + self._base

    def read(self, n: int = -1) -> bytes:
        return self._f.read(n)

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def window_base(unit: WorkUnit) -> int:
    return max(0, unit.start - 1)


def open_window(unit: WorkUnit) -> WindowFile:
    """The unit's window once the parent has written it (the worker waits: units are submitted
    ahead of the spooling); a spooling error becomes this unit's PrepError."""
    path, delay = unit.spool, 0.001
    if not path:
        raise PrepError(f"{unit.path}: unit {unit.index} is a range of a compressed file but has no window")
    while True:
        try:
            return WindowFile(open(path, "rb"), window_base(unit))
        except FileNotFoundError:
            pass
        try:
            with open(path + ".error", encoding="utf-8") as f:
                raise PrepError(f.read())
        except FileNotFoundError:
            pass
        time.sleep(delay)
        delay = min(2 * delay, 0.02)


class Spooler:
    """Writes the windows of the spooled units in `todo`, one thread per file, in plan order."""

    def __init__(self, units: list[WorkUnit], todo: set[int], directory: Path, storage_options: dict,
                 workers: int, ahead: int | None = None):
        self.dir = Path(directory)
        shutil.rmtree(self.dir, ignore_errors=True)  # an interrupted run's windows: remade as needed
        self.dir.mkdir(parents=True, exist_ok=True)
        files: dict[tuple[int, int], list[WorkUnit]] = {}
        for u in units:
            if u.is_spooled:
                files.setdefault((u.source, u.file_index), []).append(u)
        files = {k: v for k, v in files.items() if any(u.index in todo for u in v)}
        self._todo = todo
        self._slots = {k: threading.Semaphore(ahead or workers + 2) for k in files}
        self._file_of = {u.index: k for k, us in files.items() for u in us}
        self._stop = threading.Event()
        threads = max(1, min(len(files), -(-workers // SPOOL_THREADS_PER_WORKERS)))
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="prep-spool") if files else None
        for key, us in files.items():  # FIFO: the earliest unfinished file always has a thread
            self._pool.submit(self._spool_file, key, us, storage_options.get(us[0].source))

    def window(self, unit: WorkUnit) -> str:
        return str(self.dir / f"u{unit.index:07d}.win")

    def done(self, index: int) -> None:
        """The unit's result is journaled: its window goes, and its file may spool one more."""
        key = self._file_of.get(index)
        if key is None:
            return
        for p in (self.dir / f"u{index:07d}.win", self.dir / f"u{index:07d}.win.error"):
            p.unlink(missing_ok=True)
        self._slots[key].release()

    def close(self) -> None:
        """Stop spooling and delete the windows (after the run, or when it stops early)."""
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- one file ---------------------------------------------------------------------------------
    def _spool_file(self, key, units: list[WorkUnit], storage_options) -> None:
        written: set[int] = set()
        try:
            stream, raw = open_input(units[0].path, storage_options)
            with stream, decode_errors(units[0].path, raw):
                self._windows(key, stream, units, written)
        except _Stopped:
            return
        except BaseException as e:  # every later window of this file reports it; nothing else reads it
            message = str(e) if isinstance(e, PrepError) else f"{units[0].path}: {type(e).__name__}: {e}"
            for u in units:
                if u.index in self._todo and u.index not in written:
                    _write_atomic(self.window(u) + ".error", message.encode())

    def _acquire(self, key) -> None:
        while not self._slots[key].acquire(timeout=0.1):
            if self._stop.is_set():
                raise _Stopped

    def _windows(self, key, stream, units: list[WorkUnit], written: set[int]) -> None:
        data, base = bytearray(), 0  # decompressed bytes [base, base + len(data)) not yet dropped

        # read1: what one decompression step gives, so a damaged stream raises after the windows
        # its good bytes complete (read() would first gather a whole block, and lose them with the error)
        read = getattr(stream, "read1", stream.read)

        def fill() -> bool:
            if self._stop.is_set():
                raise _Stopped
            block = read(SPOOL_BLOCK)
            data.extend(block)
            return bool(block)

        for u in units:
            lo = window_base(u)
            while base + len(data) < lo:  # the stream up to this window: dropped unread
                base += len(data)
                data.clear()
                if not fill():
                    break
            drop = min(max(0, lo - base), len(data))
            del data[:drop]
            base += drop
            wanted = u.index in self._todo
            if wanted:
                self._acquire(key)
            tmp = self.window(u) + ".tmp"
            out = open(tmp, "wb") if wanted else None
            try:
                if u.end < 0:  # the last unit: to the end of the stream
                    while True:
                        if out is not None:
                            out.write(data)
                        base += len(data)
                        data.clear()
                        if not fill():
                            break
                else:
                    keep = u.end - 1  # the next window starts here: bytes from it on stay in `data`
                    scan = keep
                    while (i := data.find(b"\n", max(0, scan - base))) < 0:
                        scan = max(keep, base + len(data))  # searched up to here
                        flush = min(len(data), keep - base)  # bytes only this window needs
                        if flush > 0:
                            if out is not None:
                                out.write(memoryview(data)[:flush])
                            del data[:flush]
                            base += flush
                        if not fill():
                            i = len(data) - 1  # the stream ends inside this window's last line
                            break
                    if out is not None:
                        out.write(memoryview(data)[:i + 1])
            finally:
                if out is not None:
                    out.close()
            if out is not None:
                os.replace(tmp, self.window(u))  # whole windows only: the worker opens the final name
                written.add(u.index)


class _Stopped(Exception):
    pass


def _write_atomic(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
