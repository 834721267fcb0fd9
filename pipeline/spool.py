"""Split compressed files: the parent decompresses each once into per-unit windows for the workers.
(Parquet row groups split by rows are decoded once here too: their windows are Arrow IPC streams of
each part's rows, readers.parquet.part_batches; the rest of this text is about byte streams.)

A .zst or .gz stream cannot be entered in the middle, so a compressed file used to be one work unit:
one worker read all of it while the others idled (a single 2 GB .jsonl.zst ran on one core whatever
-j said). Now such a file is planned as ranges of its decompressed bytes (readers.jsonl and
readers.text: a unit owns the lines, or pieces between separators, whose first byte lies in its
range, as for a plain file), and a thread here reads the stream once and writes each unit's bytes
into a window file. With `sep` the separator ("\n" for JSONL and text lines; text's doc_separator,
which cannot overlap itself), of n bytes:

    window of unit [start, end) = decompressed bytes [start - n, just past the first `sep` that
                                  begins at or after end - n), or to the end of the stream for the
                                  last unit

The unit's first piece starts after the first `sep` found from start - n (its reader seeks there);
its last piece is the one that starts before `end`, and ends at the first `sep` from end - n on
(an earlier one there would overlap the `sep` before that piece). The worker reads the window as if
it were the plain file at those offsets (`open_window`), so lines, positions (the train/val split),
rejects and therefore the output bytes are exactly those of reading the whole stream in one unit,
and of any -j.

The ranges of one big JSON value, a compressed array say, are cut between its records at plan time
(readers.json_cuts): their windows are exactly [start, end), as with an empty `sep`.

One thread decompresses one file (zstandard and zlib release the GIL); one file per
SPOOL_THREADS_PER_WORKERS workers is spooled at once, in plan order, each at most `ahead` (workers + 2)
windows in front of the units that consumed them (a window is deleted once its unit's result is
journaled), so the spool holds at most that many windows of up to unit_bytes (+ one line) per file. A damaged stream ends its
file's spooling: the unit it was in, and every later unit of that file, fail with the error that
a whole-file unit would have raised (under on_bad_record: skip the earlier units keep their
documents: every byte that decodes before the damage reaches their windows, readers.salvage). A URL's network drop is no damage: its units get the InputUnreachable itself, which stops
the run under skip too (readers.url_reads). A resumed run decompresses from the start again but writes windows for unfinished
units only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline import faults
from pipeline.errors import STOPS_THE_RUN, PrepError
from pipeline.interrupts import join_threads_named
from pipeline.readers.base import WorkUnit, decode_errors, open_input, trailing_note
from pipeline.readers.salvage import salvaging_reader

__all__ = ["Spooler", "open_window", "WindowFile", "SPOOL_BLOCK"]

# decompressed bytes per read1(). One thread spools 460 MB of JSONL from a zstd -3 file into windows
# in 0.78-0.85 s on the 2-core VM whether this is 256 KiB, 1 MiB or 4 MiB (4 interleaved rounds):
# ~0.6 s of decompression plus the window writes, ~560 MB/s, which ~5 workers consume
SPOOL_BLOCK = 1 << 20
SPOOL_THREADS_PER_WORKERS = 8  # files spooled at once: one per this many workers. On the GPU machine's
# 16 cores one spooling thread kept 16 workers on one 460 MB .zst at 2.05-2.25 s, against 1.52-1.59 s
# for the plain file: a single file is spool-bound there; several files spool in parallel


# a spooling error's kind, by the name its .error file's first line gives (wait_window); others are PrepError
_STOPPING_KINDS = {kind.__name__: kind for kind in STOPS_THE_RUN}

# a window that could not be written for a full disk (or quota): its .error's kind is "DiskFull <errno>"
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_KIND = "DiskFull"

HEADER = 8  # a window file starts with its first byte's offset in the stream (uint64, little-endian)
NOTE = ".note"  # beside the window that ends the stream: bytes after its last member (WindowFile.trailing_note)


class WindowFile:
    """A window file read at the offsets of the decompressed stream it was cut from; `base` is the
    stream offset of its first byte."""

    def __init__(self, f, trailing_note: str | None = None):
        self._f = f
        self.base = int.from_bytes(f.read(HEADER), "little")
        # what the stream's end held past its last compressed member (readers.base.trailing_note): said
        # by the unit whose window reaches that end
        self.trailing_note = trailing_note

    def seek(self, offset: int, whence: int = 0) -> int:
        assert whence == 0
        return self._f.seek(HEADER + max(0, offset - self.base)) - HEADER + self.base

    def tell(self) -> int:
        return self._f.tell() - HEADER + self.base

    def read(self, n: int = -1) -> bytes:
        return self._f.read(n)

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_window(unit: WorkUnit) -> WindowFile:
    """The unit's window once the parent has written it (see wait_window)."""
    path = wait_window(unit)
    try:
        with open(path + NOTE, encoding="utf-8") as f:
            note = f.read()
    except FileNotFoundError:
        note = None
    return WindowFile(open(path, "rb"), note)


def wait_window(unit: WorkUnit) -> str:
    """The path of the unit's window once the parent has written it (the worker waits: units are
    submitted ahead of the spooling); a spooling error becomes this unit's PrepError, of its kind when it
    stops the run (a URL's network drop: InputUnreachable; a misnamed compression: SchemaError). The window
    stays until the unit's result is journaled."""
    path, delay = unit.spool, 0.001
    if not path:
        raise PrepError(f"{unit.path}: unit {unit.index} is read from a window the parent writes, but has none")
    while True:
        if os.path.exists(path):
            return path
        try:
            with open(path + ".error", encoding="utf-8") as f:
                kind, _, message = f.read().partition("\n")
        except FileNotFoundError:
            pass
        else:
            if kind.startswith(DISK_FULL_KIND + " "):  # raised as the write's own error, in this process
                code = int(kind.split()[1])
                raise OSError(code, os.strerror(code), message)
            raise _STOPPING_KINDS.get(kind, PrepError)(message)
        time.sleep(delay)
        delay = min(2 * delay, 0.02)


class Spooler:
    """Writes the windows of the spooled units in `todo`, one thread per file, in plan order."""

    def __init__(self, units: list[WorkUnit], todo: set[int], directory: Path, storage_options: dict,
                 workers: int, ahead: int | None = None, separators: dict | None = None,
                 csv_dialects: dict | None = None, parquet_sources: dict | None = None):
        """`storage_options`, `separators` (bytes; default b"\n"), for CSV/TSV sources `csv_dialects`
        (their windows end at proven record starts) and for Parquet sources their SourceConfig (the
        columns to read), by source index."""
        self.dir = Path(directory)
        self._storage_options = storage_options
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
        # its own name: close() finds its threads by it (interrupts.join_threads_named)
        self._threads_name = f"prep-spool-{id(self):x}"
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=self._threads_name) if files else None
        seps, dialects = separators or {}, csv_dialects or {}
        try:
            for key, us in files.items():  # FIFO: the earliest unfinished file always has a thread
                src = us[0].source
                if us[0].format == "parquet":  # parts of row groups: decoded once, rows to each part's window
                    cut = (self._parquet_windows, (parquet_sources or {})[src])
                elif src in dialects:
                    cut = (self._csv_windows, dialects[src])
                elif us[0].payload:  # ranges of one JSON value, cut at its records by the plan (readers.json_cuts):
                    cut = (self._windows, b"")  # windows of exactly those bytes (no separator to look for)
                else:
                    cut = (self._windows, seps.get(src, b"\n"))
                self._pool.submit(self._spool_file, key, us, storage_options.get(src), *cut)
        except BaseException:  # a Ctrl-C while a submit starts a thread: the caller never gets this spooler
            self.close()       # to close, and its threads waited for a slot forever (the process, at exit)
            raise

    @classmethod
    def for_recipe(cls, recipe, units: list[WorkUnit], todo: set[int], directory: Path, workers: int,
                   ahead: int | None = None) -> Spooler:
        """The spooler of a run: each source's storage options, and how its windows end."""
        from pipeline.readers.csv import dialect_of
        sources = list(enumerate(recipe.sources))
        return cls(units, todo, directory, {i: s.storage_options for i, s in sources}, workers, ahead,
                   separators={i: s.doc_separator.encode("utf-8") for i, s in sources
                               if s.resolved_format() == "text" and s.doc_separator},
                   csv_dialects={i: dialect_of(s) for i, s in sources if s.resolved_format() in ("csv", "tsv")},
                   parquet_sources={i: s for i, s in sources if s.resolved_format() == "parquet"})

    def window(self, unit: WorkUnit) -> str:
        return str(self.dir / f"u{unit.index:07d}.win")

    def done(self, index: int) -> None:
        """The unit's result is journaled: its window goes, and its file may spool one more."""
        key = self._file_of.get(index)
        if key is None:
            return
        for p in (self.dir / f"u{index:07d}.win", self.dir / f"u{index:07d}.win.error",
                  self.dir / f"u{index:07d}.win{NOTE}"):
            p.unlink(missing_ok=True)
        self._slots[key].release()

    def close(self) -> None:
        """Stop spooling and delete the windows (after the run, or when it stops early)."""
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            join_threads_named(self._threads_name + "_")  # one the pool does not list (a Ctrl-C in its start)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- one file ---------------------------------------------------------------------------------
    def _spool_file(self, key, units: list[WorkUnit], storage_options, windows, how) -> None:
        written: set[int] = set()
        try:
            if units[0].format == "parquet":  # not a byte stream: pyarrow reads it (and its footer) by ranges
                windows(key, units, written, how)
            else:
                stream, raw = open_input(units[0].path, storage_options)
                with raw, stream, decode_errors(units[0].path, raw, storage_options=storage_options):
                    windows(key, stream, units, written, how)
        except _Stopped:
            return
        except BaseException as e:  # every later window of this file reports it; nothing else reads it
            message = str(e) if isinstance(e, PrepError) else f"{units[0].path}: {type(e).__name__}: {e}"
            # its kind too: a URL's network drop (InputUnreachable) must stop the run under `skip` as it does
            # in a worker; as a plain PrepError its units failed and the run finished without their documents
            # (by its STOPS_THE_RUN class: a subclass's name, url_reads.InputChanged, was no kind here)
            kind = next((k.__name__ for k in STOPS_THE_RUN if isinstance(e, k)), "")
            if (full := _disk_full(e)) is not None:
                # the output's disk, not the input: it stops the run as a full disk does anywhere (the
                # executor's one line, then a resume). It was a unit's error (read as the input's damage:
                # "corrupt or truncated input ... replace the file"), and under `skip` the run finished
                # without the units from there on, left out for good (failed_units)
                # a real ENOSPC from write() names no file (filename None): the window being written (review)
                writing = next((self.window(u) + ".tmp" for u in units if u.index not in written), str(self.dir))
                kind, message = f"{DISK_FULL_KIND} {full.errno}", str(full.filename or writing)
                for u in units:  # the partial window goes first: the space it took lets the .error be written
                    with contextlib.suppress(OSError):
                        os.unlink(self.window(u) + ".tmp")
            for u in units:
                if u.index in self._todo and u.index not in written:
                    _write_atomic(self.window(u) + ".error", f"{kind}\n{message}".encode())

    def _acquire(self, key) -> None:
        while not self._slots[key].acquire(timeout=0.1):
            if self._stop.is_set():
                raise _Stopped

    def _open(self, key, unit: WorkUnit, base: int):
        """The window file of `unit` being written (None when the unit is done already: its bytes
        are read past), its header written; waits for a slot."""
        if unit.index not in self._todo:
            return None
        self._acquire(key)
        out = open(self.window(unit) + ".tmp", "wb")
        out.write(base.to_bytes(HEADER, "little"))
        return out

    def _end_of_stream(self, out, unit: WorkUnit, stream) -> None:
        """`unit`'s window (`out`, being written) ends `stream`, read to its end: the bytes the stream
        met after its last compressed member, if any, are told to the unit (readers.base.trailing_note),
        in a file written before the window (its worker reads both once the window is there)."""
        if out is not None and (note := trailing_note(unit.path, stream)) is not None:
            _write_atomic(self.window(unit) + NOTE, note.encode())

    def _close(self, out, unit: WorkUnit, written: set[int]) -> None:
        if out is None:
            return
        faults.charge_write(out.tell(), self.window(unit) + ".tmp")  # tests: a full disk (PREP_FAULT=enospc)
        out.close()
        os.replace(self.window(unit) + ".tmp", self.window(unit))  # whole windows only: the worker opens the final name
        written.add(unit.index)

    def _reader(self, stream, unit: WorkUnit):
        # read1: what one decompression step gives, so a damaged stream raises after the windows
        # its good bytes complete (read() would first gather a whole block, and lose them with the error).
        # Not every reader's step gives them: isal's igzip read1 raises without returning the bytes it
        # decoded in that call (a .gz cut after 611,343 good bytes gave none of them, and its 9 units
        # before the damage failed), so after an error readers.salvage decodes the rest again
        def stop() -> None:
            if self._stop.is_set():
                raise _Stopped
        read = salvaging_reader(getattr(stream, "read1", stream.read), unit.path,
                                self._storage_options.get(unit.source), stop)
        return lambda: read(SPOOL_BLOCK)

    def _windows(self, key, stream, units: list[WorkUnit], written: set[int], sep: bytes) -> None:
        """Windows of lines or separator pieces (see the module doc)."""
        data, base = bytearray(), 0  # decompressed bytes [base, base + len(data)) not yet dropped
        read = self._reader(stream, units[0])

        def fill() -> bool:
            block = read()
            data.extend(block)
            return bool(block)

        for u in units:
            lo = max(0, u.start - len(sep))
            while base + len(data) < lo:  # the stream up to this window: dropped unread
                base += len(data)
                data.clear()
                if not fill():
                    break
            drop = min(max(0, lo - base), len(data))
            del data[:drop]
            base += drop
            out = self._open(key, u, lo)
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
                    keep = u.end - len(sep)  # the next window starts here: bytes from it on stay in `data`
                    scan = keep
                    while (i := data.find(sep, max(0, scan - base))) < 0:
                        # searched up to here (a separator may straddle the next read)
                        scan = max(keep, base + len(data) - len(sep) + 1)
                        flush = min(len(data), keep - base)  # bytes only this window needs
                        if flush > 0:
                            if out is not None:
                                out.write(memoryview(data)[:flush])
                            del data[:flush]
                            base += flush
                        if not fill():
                            i = len(data) - len(sep)  # the stream ends inside this window's last piece
                            break
                    if out is not None:
                        out.write(memoryview(data)[:i + len(sep)])
            except BaseException:
                if out is not None:
                    out.close()
                raise
            if u.end < 0:
                self._end_of_stream(out, u, stream)
            self._close(out, u, written)

    def _csv_windows(self, key, stream, units: list[WorkUnit], written: set[int], dialect) -> None:
        """Windows of whole CSV records: unit k's window runs from the k-th cut to the next, where the
        cuts are those `record_cuts` finds on the decompressed stream at the plan's unit size (the
        same proof as for a plain file: a newline outside quotes, every quote before it well
        formed, or where the csv module ends a stray quote's record). The last planned unit takes the
        rest of the stream; with fewer cuts than units (past csv.MAX_RESYNCS stray quotes cutting stops)
        the units past the last cut get empty windows."""
        from pipeline.readers.csv import CutScanner
        scan = CutScanner(units[0].end - units[0].start, dialect)  # ranges are [k, k + 1) x unit_bytes
        read = self._reader(stream, units[0])
        k, pos = 0, 0  # the unit being written; the stream offset of the next block
        out = self._open(key, units[0], 0)
        try:
            while block := read():
                at = 0
                for cut in scan.feed(block):
                    if k == len(units) - 1:
                        break
                    if out is not None:
                        out.write(memoryview(block)[at:cut - pos])
                    self._close(out, units[k], written)
                    out, at, k = None, cut - pos, k + 1
                    out = self._open(key, units[k], cut)
                if out is not None:
                    out.write(memoryview(block)[at:])
                pos += len(block)
        except BaseException:
            if out is not None:
                out.close()
            raise
        self._end_of_stream(out, units[k], stream)
        self._close(out, units[k], written)
        for u in units[k + 1:]:
            self._close(self._open(key, u, pos), u, written)

    def _parquet_windows(self, key, units: list[WorkUnit], written: set[int], source) -> None:
        """Windows of Parquet parts: each an Arrow IPC stream of its rows' projected columns (after the
        header), decoded once here (readers.parquet.part_batches); groups whose parts are all done are
        not decoded."""
        import pyarrow as pa

        from pipeline.readers.parquet import part_batches
        wanted = {u.start for u in units if u.index in self._todo}
        units = [u for u in units if u.start in wanted]
        current = out = writer = None
        try:
            for unit, rb in part_batches(units, source):
                if self._stop.is_set():
                    raise _Stopped
                if unit is not current:
                    if writer is not None:
                        writer.close()
                    self._close(out, current, written)
                    current, out = unit, self._open(key, unit, 0)
                    writer = None if out is None else pa.ipc.new_stream(out, rb.schema)
                if writer is not None:
                    writer.write_batch(rb)
        except BaseException:
            if out is not None:
                out.close()
            raise
        if writer is not None:
            writer.close()
        if current is not None:
            self._close(out, current, written)


def _disk_full(error: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT that `error` is, or was raised while handling (the decoder's error handling,
    readers.base.decode_errors, turns any OSError into the input's damage): only writes fail so."""
    seen = 0
    while error is not None and seen < 16:
        if isinstance(error, OSError) and error.errno in DISK_FULL:
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


class _Stopped(Exception):
    pass


def _write_atomic(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
