"""What every reader shares: work units, document batches, input opening, the bad-record policy.

A reader module provides two functions:
    plan(source, source_index, files, unit_bytes) -> list[WorkUnit]     (parent: sizes, footers; see
                                                                         readers/__init__.py for each format)
    iter_batches(unit, source, bad, batch_docs) -> Iterator[DocBatch]     (worker)
Positions are stable identities of a record inside its file (the byte offset of a JSONL line or CSV
record in the decompressed stream, a row number for Parquet and saved HF datasets, a row number within
the shard for streamed HF datasets), so the train/val split and the rejects list do not depend on how
the file was cut into units. Positions differ between formats (a byte offset is not a row number),
so the same documents in two formats get the same train/val split only at val_fraction 0.

Compressed inputs (.gz, .zst, .bz2, .xz) are decompressed here with end-of-stream checks: a truncated one stops its
unit with an error naming the file and the compressed byte offset, never a silently short read
(zstandard's stream reader returns EOF at a truncated frame; members.ZstdMembers does not), member
by member, so that bytes after the last member are told from damage (members.py).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import queue
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import BinaryIO

import numpy as np

from pipeline import signed_urls
from pipeline.crc import crc32
from pipeline.errors import RESUME_FIX, PrepError, SchemaError
from pipeline.readers.members import Bz2Members, GzipMembers, InputCorrupt, XzMembers, ZstdMembers
from pipeline.source_formats import COMPRESSION_SUFFIXES, COMPRESSIONS, is_url, local_path, url_name

__all__ = ["ByteProgress", "no_ranges_why", "batches_by_group", "WorkUnit", "DocBatch", "BadRecords", "open_input", "compression_of", "file_size", "get_field",
           "REJECT_PREVIEW_CHARS", "value_preview", "READ_ROWS", "decode_errors", "decompressed_size", "unreadable", "planned_decompressed_size", "planned_head", "planning_damage", "note_planning_damage", "is_damage", "decompressor", "planning", "compressed_ranges", "open_unit", "local_path", "open_raw", "decode_utf8", "InputCorrupt", "trailing_note"]

REJECT_PREVIEW_CHARS = 200
# Rows per columnar read (Parquet record batches, datasets slices): at most this many, whatever the
# worker's batch size, so a large one (joined encoders take 8x batch_docs: pipeline/joined.py) does
# not hold thousands of long documents as Arrow buffers and Python strings at once; the Batcher gathers
# reads into batches and caps them by characters.
READ_ROWS = 512


# Not frozen, though never changed after planning (dataclasses.replace makes changed copies): a frozen
# dataclass sets each field through object.__setattr__, 1.9 us a unit against 0.33 us, and a plan
# of 100,000 small files makes 100,000 units. Hashable as before (unsafe_hash: by its identity fields).
@dataclass(unsafe_hash=True)
class WorkUnit:
    """One independent piece of work; `index` is its place in the dataset order. Treat as immutable."""

    index: int
    source: int        # index of the recipe source
    file_index: int    # index of the file within that source's expanded file list
    path: str
    format: str
    start: int         # first byte (or row group), inclusive
    end: int           # last byte (or row group), exclusive; -1 = to the end of the file
    size: int          # input bytes covered, for progress and ETA
    paths: tuple[str, ...] = ()  # several whole files in one unit (text, one document per file)
    # several small whole files of one source, each the unit it would be alone (readers.group_small_files)
    group: tuple[WorkUnit, ...] = ()
    # reader-private data from plan() to the worker (a pickled HF shard); not part of the unit's identity
    payload: bytes = field(default=b"", compare=False, repr=False)
    # a split compressed file's unit (pipeline.spool): the window file the parent decompresses its
    # bytes into, named when the unit is submitted; not part of the unit's identity
    spool: str = field(default="", compare=False, repr=False)

    @property
    def is_spooled(self) -> bool:
        """Read from a window file the parent writes (pipeline.spool): a range of a compressed JSONL,
        CSV/TSV or text file's decompressed bytes, a range of a CSV/TSV URL's bytes (readers.csv.plan: the
        object fetched once), or a part of a Parquet row group (rows in the payload).
        Other formats' start/end are rows or row groups, whatever the file is called; a text unit of
        whole files lists them in `paths`."""
        if self.format == "parquet":
            return bool(self.payload)
        return ((self.start, self.end) != (0, -1) and self.format in ("jsonl", "text", "csv", "tsv")
                and not self.paths and not self.group
                and (bool(compression_of(self.path)) or self.format in ("csv", "tsv") and is_url(self.path)))

    def files(self) -> tuple[str, ...]:
        """The files this unit reads: its own, its group's, its list (text files; a dataset's Arrow
        files). A Hugging Face unit's `path` names its dataset, not a file."""
        if self.group:
            return tuple(path for m in self.group for path in m.files())
        return self.paths or ((self.path,) if self.format != "hf" else ())

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DocBatch:
    texts: list[str]
    positions: np.ndarray  # int64[len(texts)]: stable position of each document in its file
    nbytes: int            # input bytes consumed since the previous batch (progress)
    chars: int | None = None  # characters in `texts`, when the maker counted them (Batcher does)
    # what a position counts (for messages): "byte" (JSON Lines, CSV, text pieces: the record's first
    # byte), "row" (Parquet, Hugging Face, a JSON list's records), "file" (text, one document per file:
    # the file's number in its source)
    position_kind: str = "byte"


class BadRecords:
    """Per-unit collector of rejected records: counts by reason, and rows for DIR/rejects.jsonl."""

    def __init__(self, unit: WorkUnit, policy: str):
        self.unit = unit
        self.policy = policy
        self.counts: dict[str, int] = {}
        self.rows: list[dict] = []
        self.notices: dict[str, str] = {}  # kind -> the first such notice (the run's notes)

    def notice(self, kind: str, message: str) -> None:
        """Something about the input the user should hear of, though no record was lost (a CSV quote
        inside a field): the unit keeps the first of each kind; the parent prints them as notes."""
        self.notices.setdefault(kind, message)

    def reject(self, reason: str, position: int, raw, detail: str = "", line: int | None = None,
               row: int | None = None, path: str | None = None, piece: int | None = None) -> None:
        """One bad record: `position` as in DocBatch; `line` (1-based), `row` (0-based) or `piece` (1-based,
        a text file's document split on a doc_separator other than "\n") when known."""
        if raw is None:  # a null value (Parquet, HF): JSON null, not the text "None" (a document's text?)
            preview = None
        elif isinstance(raw, (bytes, bytearray, memoryview)):
            preview = bytes(raw[:4 * REJECT_PREVIEW_CHARS]).decode("utf-8", "replace")[:REJECT_PREVIEW_CHARS]
        else:
            preview = str(raw)[:REJECT_PREVIEW_CHARS]
        path = path or self.unit.path
        at = (f"piece {piece}" if piece is not None else f"line {line}" if line is not None else
              f"row {row}" if row is not None else f"byte {position}")
        if self.policy == "error":
            shown = "the value is null" if preview is None else f"record starts {preview[:60]!r}"
            raise PrepError(f"{path} at {at}: {reason}{': ' + detail if detail else ''} ({shown}); fix the record, "
                            "or set on_bad_record: skip to count and list such records")
        self.counts[reason] = self.counts.get(reason, 0) + 1
        entry = {"source": path, "position": int(position), "reason": reason, "text": preview}
        if piece is not None:  # "piece 5" is on some later line; `line` stays: scripts read it for the number
            entry["piece"] = entry["line"] = piece
        if line is not None:
            entry["line"] = line
        if row is not None:
            entry["row"] = row
        if detail:
            entry["detail"] = detail
        self.rows.append(entry)

    def absorb(self, other: BadRecords) -> None:
        """Add another collector's counts and rows (a group member's, pipeline.worker)."""
        for reason, n in other.counts.items():
            self.counts[reason] = self.counts.get(reason, 0) + n
        self.rows += other.rows
        for kind, message in other.notices.items():
            self.notices.setdefault(kind, message)

    def count(self, reason: str, n: int = 1) -> None:
        """A document dropped by a filter (min/max chars): counted in the manifest, not listed."""
        self.counts[reason] = self.counts.get(reason, 0) + n

    def write(self, path: str | os.PathLike) -> int:
        """Write the rows as JSON lines; returns the file's crc32 for the unit's journal entry (like
        its parts, the file is not fsynced: a resumed run checks it and redoes the unit if it differs)."""
        data = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in self.rows).encode()
        with open(path, "wb") as f:
            f.write(data)
        return crc32(data)


def value_preview(value) -> str | None:
    """A rejected Parquet/HF value as rejects.jsonl shows it: None stays None (JSON null), a record or
    list is JSON (its nulls null, not Python's `None`, as the JSON readers show theirs), else str()."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)  # default: a timestamp or bytes field
    return str(value)


def compression_of(path: str) -> str | None:
    """gzip, zstd, bz2 or xz from the path's suffix (source_formats.COMPRESSIONS), else None. ~0.37 us: the
    plan asks twice per file (0.14 s of planning 100,000 files at the 0.7 us of a dictionary lookup
    on the suffix first). An http(s) URL's query is no part of its name (a pre-signed d.jsonl.gz?X-Amz-...)."""
    if "?" in path:
        path = url_name(path)
    if path.lower().endswith(COMPRESSION_SUFFIXES):
        return COMPRESSIONS[path[path.rfind("."):].lower()]
    return None


# file sizes seen while planning (readers.plan_units): unit_bytes auto plans twice, and a directory of
# 100,000 one-document text files took 1.15 s of the parent's stat() calls to plan (0.27 s per pass).
# With each, what tells a file changed in place at the same size: its mtime in ns, a remote object's
# ETag or modification time (pipeline.input_changes compares them when a run resumes)
_sizes: dict[str, int] | None = None
_stamps: dict[str, int | str | None] | None = None


@contextmanager
def planning():
    """Within: each file's size, and each compressed file's planned size, is looked up once."""
    global _sizes, _stamps
    _sizes, _stamps = {}, {}
    _planned.clear()
    _heads.clear()
    _damaged.clear()
    try:
        yield
    finally:
        _sizes = _stamps = None
        _planned.clear()
        _heads.clear()
        _damaged.clear()


# listeners (path, bytes scanned, file size) of the plan's scans of whole files (CSV's quote parity,
# a JSON array's structure: ~1 GB/s, so seconds for big files before any worker starts), told every
# SCAN_REPORT_BYTES; the executor shows them on a status line
_scan_listeners: list = []
SCAN_REPORT_BYTES = 64 << 20


@contextmanager
def scan_progress(listener):
    """Within: `listener(path, done, size)` as plan-time scans read their files (scan_blocks)."""
    _scan_listeners.append(listener)
    try:
        yield
    finally:
        _scan_listeners.remove(listener)


class ScanMeter:
    """Bytes a plan-time scan has read of one file (its threads share one), told to the scan_progress
    listeners every SCAN_REPORT_BYTES."""

    def __init__(self, path: str, size: int):
        self.path, self.size = path, size
        self.done = self.reported = 0
        self.lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        with self.lock:
            self.done += nbytes
            if self.done - self.reported < SCAN_REPORT_BYTES:
                return
            self.reported = self.done
            for listener in _scan_listeners:
                listener(self.path, self.done, self.size)


def scan_blocks(f, block_bytes: int, meter: ScanMeter, limit: int = -1) -> Iterator[bytes]:
    """The blocks of `f` from where it is, read in order for a plan-time scan (`limit` bytes at
    most; -1: to the end), counted on `meter`."""
    while limit:
        block = f.read(block_bytes if limit < 0 else min(block_bytes, limit))
        if not block:
            return
        limit -= len(block) if limit > 0 else 0
        yield block
        meter.add(len(block))


def read_ahead(read, depth: int = 4) -> Iterator[bytes]:
    """The blocks `read()` gives until an empty one, read on a thread up to `depth` blocks ahead of
    the consumer, so that reading (a decompression: zstandard and zlib release the GIL) overlaps
    what the consumer does with each block. An exception in `read` is raised to the consumer. Close
    the generator (or exhaust it) before closing what `read` reads: that ends the thread."""
    blocks: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            while not stop.is_set():
                block = read()
                blocks.put(block)
                if not block:
                    return
        except BaseException as e:  # the consumer raises it
            blocks.put(e)

    thread = threading.Thread(target=produce, name="prep-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            block = blocks.get()
            if isinstance(block, BaseException):
                raise block
            if not block:
                return
            yield block
    finally:
        stop.set()
        while thread.is_alive():  # a producer blocked on a full queue: let it put, see `stop` and end
            try:
                blocks.get(timeout=0.01)
            except queue.Empty:
                pass


def planning_sizes() -> tuple[dict[str, int], dict[str, int | str | None]] | None:
    """The size and stamp caches while `planning()`, for the file listing to fill (source_files.expand_files)."""
    return None if _sizes is None else (_sizes, _stamps)


def file_size(path: str, storage_options: dict | None = None) -> int:
    return file_identity(path, storage_options)[0]


def file_identity(path: str, storage_options: dict | None = None) -> tuple[int, int | str | None]:
    """(size, stamp): the stamp tells a file rewritten at the same size apart (see `_stamps`)."""
    if _sizes is not None:
        if path not in _sizes or path not in _stamps:
            _sizes[path], _stamps[path] = _file_identity(path, storage_options)
        return _sizes[path], _stamps[path]
    return _file_identity(path, storage_options)


def _file_identity(path: str, storage_options: dict | None) -> tuple[int, int | str | None]:
    try:
        if is_url(path):
            import fsspec

            # first: its import sets fsspec's http(s) stall timeout, which a filesystem takes when made
            from pipeline.readers.url_reads import retrying, size_of, stamp_of
            fs, p = fsspec.core.url_to_fs(signed_urls.address(path), **(storage_options or {}))
            info = retrying(path, lambda: fs.info(p))  # a 503 or a reset: tried again before the plan stops
            return size_of(path, fs, p, info), stamp_of(info)
        st = os.stat(local_path(path))
        return st.st_size, st.st_mtime_ns
    except FileNotFoundError as e:
        if is_url(path):  # fsspec's http info() raises FileNotFoundError for any failed GET: a 403 said "does not exist"
            from pipeline.readers.url_reads import http_answer
            if (answer := http_answer(e)) is not None and answer.status != 404:
                raise PrepError(f"source.path: cannot read {path} (its server answered {answer.status} "
                                f"{getattr(answer, 'message', '')}); check the URL (a pre-signed one may have expired) "
                                "and source.storage_options") from None
        from pipeline.source_files import missing_bucket  # here: pipeline.recipe imports source_files
        raise PrepError(is_url(path) and missing_bucket(path, storage_options)
                        or f"source.path: {path} does not exist") from None
    except PrepError:
        raise
    except Exception as e:  # network, credentials
        raise PrepError(f"source.path: cannot read {path} ({type(e).__name__}: {signed_urls.redact(str(e))}); check the URL and "
                        "source.storage_options") from None


def decompressed_size(path: str, size: int, storage_options: dict | None = None) -> int | None:
    """The decompressed size a .zst or .gz file declares, or None: zstd's frame header content size
    (written by the zstd tool for files; the first frame's only), gzip's ISIZE trailer (the size mod
    2**32, of the last member only). A declared size below the compressed size is not believed."""
    comp = compression_of(path)
    try:
        with open_raw(path, storage_options, ahead_to=0) as f:  # a URL: 18 or 4 bytes fetched, no more
            if comp == "zstd":
                import zstandard
                found = zstandard.get_frame_parameters(f.read(18)).content_size
                found = None if found in (0, zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR) else found
            elif comp == "gzip" and size >= 18:
                f.seek(size - 4)
                found = int.from_bytes(f.read(4), "little")
            else:
                return None
    except Exception:  # unreadable here: the unit that reads it reports the error
        return None
    return found if found is not None and found >= size else None


# How a compressed file's ranges are planned (compressed_ranges): the first SAMPLE_BYTES
# of it are decompressed to measure its expansion (~3 ms locally; a file that small is measured
# exactly). A declared size is a lower bound (zstd's first frame only; gzip's ISIZE mod 2**32, last
# member only): it is used when it is at least TRUST_DECLARED x the sample's estimate, else the
# plan covers max(declared, PLAN_MARGIN x estimate). Text past the planned size all goes to the last
# unit, a straggler one worker runs alone: a 1.5 GB .gz of 6 GB (ISIZE 1.7 GB) put 4.3 GB there, and
# an unsized .zst planned at a fixed 4x put everything past 4x there. Planning too much only leaves
# empty units at the end: 186 of them cost 0.25 s on 2 workers (460 MB .zst, ~1.3 ms each).
SAMPLE_BYTES = 1 << 20
TRUST_DECLARED = 0.8
PLAN_MARGIN = 1.5
_planned: dict[tuple[str, int], int] = {}  # (path, size): planned size, within `planning()`
# path: the first HEAD_BYTES of the decompressed sample, within `planning()`: whether the file
# is JSON Lines or one JSON value is told from them (readers.jsonl) without opening it again, which
# for a URL is one more request per file (a 5 MB block on s3fs)
_heads: dict[str, bytes] = {}
HEAD_BYTES = 256
# path: what is wrong with a compressed file whose plan decoded it whole and met damage after some good
# bytes, within `planning()` (planning_damage)
_damaged: dict[str, str] = {}


def planning_damage() -> dict[str, str]:
    """{path: "PATH: corrupt or truncated input ..."} for the compressed files the plan decoded whole
    and found damaged, in plan order. Their ranges are planned from the bytes before the damage, so the
    file replaced whole gets another plan: under `on_bad_record: error` the plan stops on them
    (readers.plan_units) before any unit runs, where the fix is to replace the file and re-run."""
    return dict(_damaged)


def note_planning_damage(path: str, good: int, error: BaseException) -> None:
    """The plan decoded compressed `path` to its byte `good` of text, then met `error` (planning_damage).
    Not after 0 bytes: a file that is not of its compression (one named .gz, say) fails at once and is
    told by the unit that reads it (sniff.misnamed_compression)."""
    if good and _sizes is not None:
        _damaged.setdefault(path, f"{path}: corrupt or truncated input: it decodes to byte {good:,} of its "
                                  f"decompressed text, then {type(error).__name__}: {error}")


def planned_head(path: str) -> bytes | None:
    """The first HEAD_BYTES of a compressed file's decompressed bytes, as its planned size's sample
    read them (None: not sampled while planning)."""
    return _heads.get(path)


def planned_decompressed_size(path: str, size: int, storage_options: dict | None = None) -> int:
    """The decompressed bytes to plan a compressed file's ranges for (see SAMPLE_BYTES). Where the
    sample meets damage: a zstd frame header's size when it covers the bytes decoded (the header is
    intact, and the same file replaced whole then gets the same plan, so the run resumes), else the
    bytes before the damage (a gzip ISIZE read from a damaged file is noise). The ranges before the
    damage keep their documents; those from it on fail with the error."""
    if _sizes is None:
        return _plan_size(path, size, storage_options)
    key = (path, size)
    if key not in _planned:
        _planned[key] = _plan_size(path, size, storage_options, keep_head=True)
    return _planned[key]


def _plan_size(path: str, size: int, storage_options: dict | None, keep_head: bool = False) -> int:
    """`keep_head`: keep the sample's first HEAD_BYTES (planned_head)."""
    declared = decompressed_size(path, size, storage_options) or 0
    sampled = size > SAMPLE_BYTES  # else the whole file is decompressed: its size, exactly
    out = 0
    try:
        raw = open_raw(path, storage_options, ahead_to=SAMPLE_BYTES if sampled else None)
        # the decompressor sees the first SAMPLE_BYTES as the whole file: what it gives for exactly
        # those bytes (it may read ahead of what it has decoded, so raw.tell() would not say)
        stream, _ = decompressor(path, _Prefix(raw, SAMPLE_BYTES) if sampled else raw)
        read = stream.read
        if not sampled:  # a damaged file: all the bytes before the damage, as the spool gives them (isal's
            # read lost up to a block: 589,824 of 611,343, one unit fewer to keep its documents)
            from pipeline.readers.salvage import salvaging_reader
            read = salvaging_reader(stream.read, path, storage_options)
        with raw, stream:
            head = b""
            while block := read(1 << 16):
                out += len(block)
                if len(head) < HEAD_BYTES:
                    head += block[:HEAD_BYTES - len(head)]
                    if keep_head:
                        _heads[path] = head
    except Exception as e:  # cut short by the sample's end; else damaged (or unreadable: 0, one unit, which reports why)
        if not sampled:
            if compression_of(path) == "zstd" and declared >= out:  # planned as its replacement will be
                return declared
            if is_damage(e):  # not a read error (EIO, a URL's timeout): the unit that reads the file again
                # says what it meets; "replace the file" would be the wrong advice
                note_planning_damage(path, out, e)
            return out
    if not sampled:
        return out
    estimate = out * size // SAMPLE_BYTES
    return declared if declared >= TRUST_DECLARED * estimate else max(declared, int(PLAN_MARGIN * estimate))


class _Prefix(io.RawIOBase):
    """The first `limit` bytes of a file, as if they were all of it."""

    def __init__(self, f, limit: int):
        self._f, self._left = f, limit

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self._left)
        data = self._f.read(n) if n > 0 else b""
        b[:len(data)] = data
        self._left -= len(data)
        return len(data)


# Compressed files up to unit_bytes / MAX_EXPANSION are one unit without being opened; bigger ones
# are measured (base.planned_decompressed_size).
MAX_EXPANSION = 16


def compressed_ranges(source_index: int, file_index: int, path: str, size: int, unit_bytes: int, fmt: str,
                      storage_options: dict | None = None) -> list[WorkUnit]:
    """A compressed file of `size` bytes as ranges [k * unit_bytes, (k + 1) * unit_bytes) of its
    decompressed bytes, planned from a sample of it and the size it declares (see
    base.planned_decompressed_size); the last runs to the end of the stream. One whole-file unit
    when that is not above `unit_bytes`."""
    total = planned_decompressed_size(path, size, storage_options) if size * MAX_EXPANSION > unit_bytes else 0
    if total <= unit_bytes:
        return [WorkUnit(0, source_index, file_index, path, fmt, 0, -1, size)]
    starts = range(0, total, unit_bytes)
    return [WorkUnit(0, source_index, file_index, path, fmt, a, -1 if a == starts[-1] else a + unit_bytes,
                     min(unit_bytes, total - a)) for a in starts]


def ranged_input_bytes(files: list[str], unit_bytes: int, fmt: str, storage_options: dict | None = None) -> int:
    """What a plan of byte ranges at `unit_bytes` covers (the sum of its units' sizes: plain files
    whole, compressed ones as compressed_ranges plans them), without planning each range. A reader's
    `input_bytes` (readers.plan_units sizes `unit_bytes: auto` with it): planning 18,515 small JSONL
    files twice, at the largest unit size and at the one chosen, cost 0.05 s of the parent's time."""
    total = 0
    for fi, path in enumerate(files):
        size = file_size(path, storage_options)
        if compression_of(path):
            size = sum(u.size for u in compressed_ranges(0, fi, path, size, unit_bytes, fmt, storage_options))
        total += size
    return total


def open_raw(path: str, storage_options: dict | None = None, ahead_to: int | None = None) -> BinaryIO:
    """`ahead_to`: for a URL, the offset past which no read fetches more than it asks (a unit's end;
    readers.url_reads)."""
    if is_url(path):
        import fsspec
        if not serves_ranges(path, storage_options):  # read it as one stream from its start
            from pipeline.readers.url_reads import checked_info, expects
            if expects(path):  # in a run: the object its plan saw (url_reads.check_unchanged)
                fs, p = fsspec.core.url_to_fs(signed_urls.address(path), **(storage_options or {}))
                checked_info(path, fs, p)
            from pipeline.readers.url_reads import retrying
            body = retrying(path, fsspec.open(signed_urls.address(path), "rb", block_size=0, **(storage_options or {})).open)
            return io.BufferedReader(_OneStream(body, path), buffer_size=1 << 20)  # peek() for the readers' looks
        from pipeline.readers.url_reads import open_url
        return open_url(path, storage_options, ahead_to)
    return open(local_path(path), "rb")


class _OneStream(io.RawIOBase):
    """A response body read once (fsspec's HTTPStreamFile says it is seekable, and a look that read
    ahead and sought back lost the bytes it read): not seekable, so readers peek through a
    BufferedReader instead. A body cut short (aiohttp's ClientPayloadError: "not enough data to
    satisfy content length") or any other failed read is an InputUnreachable naming the URL, as a
    ranged read's is (readers.url_reads): it was aiohttp's traceback out of the run."""

    def __init__(self, body, path: str):
        self._body, self._path = body, path
        self._read = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:  # bytes read so far (progress)
        return self._read

    def readinto(self, b) -> int:
        try:
            data = self._body.read(len(b))
        except (FileNotFoundError, PrepError):
            raise
        except Exception as e:
            from pipeline.readers.url_reads import unreachable
            raise unreachable(self._path, e, self._read) from None
        b[:len(data)] = data
        self._read += len(data)
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


_RANGES: dict[str, bool] = {}  # http(s) URL: whether its server answers range requests (per process)
_UNSIZED: set[str] = set()  # those of them whose server declared no size (why they get no range requests)


def no_ranges_why(path: str) -> tuple[str, str]:
    """Why a URL of `serves_ranges` False gets no range requests, and what its server would need, as a
    message says them."""
    if path in _UNSIZED:
        return ("its server declares no size (no Content-Length: a chunked body, or a Content-Encoding such as gzip), "
                "so no range of it can be asked", "serve it with its size and range requests")
    return "its server answers range requests with the whole file", "serve it with range requests"


def serves_ranges(path: str, storage_options: dict | None = None) -> bool:
    """False for an http(s) URL whose server answers a range request with the whole file (Python's
    `http.server`, some plain servers): fsspec then refuses every read past its first block ("The HTTP
    server doesn't appear to support range requests"), which stopped a run with a traceback. Such a
    file is planned as one unit (plain) and read as one stream from its start. Asked once per URL and
    process, with a 1-byte range request past the start (fsspec raises before reading the body); True
    for any other URL scheme, and when the probe fails otherwise (the read then says why)."""
    if not path.startswith(("http://", "https://")):
        return True
    if path not in _RANGES:
        import fsspec

        # its import sets fsspec's http(s) stall timeout (not at module level: a local run's workers and
        # parent never import fsspec, ~30-60 ms of start-up each)
        from pipeline.readers import url_reads  # noqa: F401
        try:
            with fsspec.open(signed_urls.address(path), "rb", block_size=1, **(storage_options or {})).open() as f:
                if f.size is None:  # no declared size (url_reads.size_of): fsspec opened a stream, no ranges
                    _RANGES[path] = False
                    _UNSIZED.add(path)
                    return False
                f.seek(1)
                f.read(1)
            _RANGES[path] = True
        except ValueError as e:
            _RANGES[path] = "range requests" not in str(e)
        except Exception:
            _RANGES[path] = True
    return _RANGES[path]


def _gzip():
    """isal's igzip when installed (ISA-L: 57.6 MB of JSONL from gzip -6 in 0.070 s instead of the
    standard library's 0.199 s, one core), else the standard library's gzip."""
    try:
        from isal import igzip
        return igzip
    except ImportError:
        return gzip


def _inflate():
    """The inflate module of _gzip(): isal_zlib, or the standard library's zlib (GzipMembers)."""
    if _gzip() is gzip:
        return zlib
    from isal import isal_zlib
    return isal_zlib


def decode_failures() -> tuple[type, ...]:
    """What a decompressing stream raises on damaged input. gzip: EOFError/BadGzipFile/zlib.error
    (isal: its IsalError); zstd: InputCorrupt; bz2: EOFError/OSError; xz: EOFError/LZMAError."""
    import lzma
    try:
        from isal.isal_zlib import error
        return (EOFError, OSError, zlib.error, lzma.LZMAError, error)
    except ImportError:
        return (EOFError, OSError, zlib.error, lzma.LZMAError)


def is_damage(e: BaseException) -> bool:
    """A decoder's failure on the bytes (decode_failures), not a failure to read them: bz2 and gzip
    raise OSErrors of no errno on damage, a disk's EIO has one, a URL's timeout or reset is its own."""
    if isinstance(e, (TimeoutError, ConnectionError)) or isinstance(e, OSError) and e.errno is not None:
        return False
    return isinstance(e, decode_failures())


def open_input(path: str, storage_options: dict | None = None, ahead_to: int | None = None
               ) -> tuple[BinaryIO, BinaryIO]:
    """(decompressed stream, raw file): the raw file's tell() gives compressed bytes read (progress).
    Close both (`with raw, stream:`): a GzipFile or the zstd reader leaves the file it reads open.
    A file that cannot be opened is a PrepError naming it (`unreadable`). `ahead_to`: see open_raw."""
    try:
        raw = open_raw(path, storage_options, ahead_to)
    except OSError as e:
        raise unreadable(path, e) from None
    return decompressor(path, raw)


def unreadable(path: str, e: OSError) -> PrepError:
    """An input that does not open, as one line naming it and the fix. A worker's open is the first
    since planning listed the file: one deleted or moved during the run was a FileNotFoundError
    traceback (one line only for a text file read whole), and not the unit's own failure under skip."""
    if isinstance(e, FileNotFoundError) and not is_url(path):  # listed by expand_files: it was there
        return PrepError(f"{path}: file disappeared during the run; put it back and {RESUME_FIX}")
    # fsspec's http errors quote the URL fetched: a pre-signed one's signature (signed_urls)
    return PrepError(f"{path}: cannot open it ({type(e).__name__}: {signed_urls.redact(str(e))}); make it readable "
                     f"and {RESUME_FIX}")


def open_unit(unit: WorkUnit, storage_options: dict | None = None) -> tuple[BinaryIO, BinaryIO]:
    """(stream, raw) of a unit's input: the window the parent spooled for a range of a compressed
    file (read at the decompressed stream's offsets; its `base` is its first byte's), else the file."""
    if unit.is_spooled:
        from pipeline.spool import open_window
        window = open_window(unit)
        return window, window
    # a range of a URL: nothing fetched past its end but what the reader asks (readers.url_reads)
    return open_input(unit.path, storage_options, unit.end if unit.end >= 0 and not unit.group else None)


def decompressor(path: str, raw) -> tuple[BinaryIO, BinaryIO]:
    comp = compression_of(path)
    # member by member, so that bytes after the last one are told apart from damage (members.py)
    if comp == "gzip":
        return io.BufferedReader(GzipMembers(raw, _inflate()), buffer_size=1 << 20), raw
    if comp == "zstd":
        return io.BufferedReader(ZstdMembers(raw), buffer_size=1 << 20), raw
    if comp == "bz2":  # multi-stream (pbzip2's output too); truncated: EOFError, damaged: OSError
        return io.BufferedReader(Bz2Members(raw), buffer_size=1 << 20), raw
    if comp == "xz":  # truncated: EOFError, damaged: lzma.LZMAError
        return io.BufferedReader(XzMembers(raw), buffer_size=1 << 20), raw
    return raw, raw


@contextmanager
def decode_errors(path: str, raw: BinaryIO, what: str = "compressed byte", storage_options: dict | None = None,
                  stream=None, bad: BadRecords | None = None):
    """Turn a damaged input (truncated/corrupt .gz/.zst, vanished file) into a PrepError naming the file
    and the byte offset reached, with the fix; a file whose bytes are not of the compression its suffix
    names (plain JSON Lines called .gz), into a SchemaError naming the rename (sniff.py). With `stream`
    and `bad`: bytes the stream met after its last compressed member become a note (trailing_note)."""
    try:
        yield
        if bad is not None and (note := trailing_note(path, stream)) is not None:
            bad.notice("trailing_garbage", note)
    except PrepError:
        raise
    except FileNotFoundError as e:
        raise unreadable(path, e) from None
    except decode_failures() as e:  # the tuple is only built when an exception reaches this clause
        from pipeline.readers.sniff import misnamed_compression
        if (why := misnamed_compression(path, lambda: open_raw(path, storage_options))) is not None:
            raise SchemaError(f"{path}: {why}") from None  # not damage: the name; stops the run with the rename
        raise PrepError(f"{path}: corrupt or truncated input{_damage_at(path, raw, what, storage_options)} "
                        f"({type(e).__name__}: {e}); "
                        f"replace the file and {RESUME_FIX}") from None


def trailing_note(path: str, stream) -> str | None:
    """What to tell of the bytes after the last complete member of compressed `path` that `stream`
    (decompressor's, read to its end: members.Trailing) met, or the spooler met for a window
    (its WindowFile's trailing_note); None when there were none."""
    note = getattr(stream, "trailing_note", None)
    if note is not None:
        return note
    trailing = getattr(getattr(stream, "raw", None), "trailing", None)
    if trailing is None:
        return None
    member, tool = {"gzip": ("gzip member", "gzip"), "bz2": ("bzip2 stream", "bzip2")}.get(
        compression_of(path), ("zstd frame", "gzip"))
    return (f"{path}: its last {trailing.size:,} bytes, from compressed byte {trailing.at:,} ({trailing.head!r}), "
            f"follow its last complete {member} and are not compressed data: they were ignored, as `{tool} -d` "
            "ignores \"trailing garbage\", and every document before them was read; if the file should hold "
            "more, replace it")


# compressed bytes up to which an error's message counts the text before the damage (decoding the
# file again, on the error path only: ~0.1 s per 16 MB of .gz on the 2-core VM); past it, the offset
# the codec's reads reached is named instead
COUNT_GOOD_BYTES_BELOW = 64 << 20


def _damage_at(path: str, raw: BinaryIO, what: str, storage_options: dict | None) -> str:
    """Where the damage is, for the error. The codecs read ahead, so the compressed offset reached can
    be far past it (the end of a 117 KB .gz damaged from its byte 200), and they hand out nothing of
    the buffer that failed (0 bytes of text before the error, though half the file decoded)."""
    try:
        offset = raw.tell()
    except Exception:  # closed by the error, or not seekable
        offset = None
    if compression_of(path) and offset is not None and offset <= COUNT_GOOD_BYTES_BELOW:
        from pipeline.readers.salvage import iter_salvaged
        good = sum(map(len, iter_salvaged(path, 0, storage_options)))
        return f": it decodes to byte {good:,} of its decompressed text, then fails"
    return f" near {what} {offset if offset is not None else '?'}"


def decode_utf8(data: bytes | memoryview, errors: str) -> str | None:
    """data as str; None when it is not UTF-8 and `errors` is skip (the caller rejects the record)."""
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        return str(data, "utf-8", "replace") if errors == "replace" else None


def get_field(record, dotted: str):
    """record['a']['b'] for 'a.b'; raises KeyError naming the missing part."""
    node = record
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(part)
        node = node[part]
    return node


BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, which Windows tools write at a file's start


def without_bom(groups, at_file_start: bool, max_bytes: int | None = None):
    """A reader's (offsets, lines) groups with a UTF-8 BOM cut from the file's first line (a line
    holding only the BOM becomes blank). Without this the first JSONL record of such a file was
    rejected ("BOM is not supported"), and a text file's first document began with U+FEFF. A line
    longer than `max_bytes` keeps it: it may be one cut short (iter_line_groups), which must stay too
    long to be rejected as such, so the BOM counts towards max_record_bytes."""
    if not at_file_start:
        yield from groups
        return
    for offsets, lines in groups:
        if lines and bytes(lines[0][:3]) == BOM and (max_bytes is None or len(lines[0]) <= max_bytes):
            lines[0] = lines[0][3:]
        yield offsets, lines
        break
    yield from groups


def batches_by_group(groups, batcher, meter: ByteProgress, fast, slow) -> Iterator[DocBatch]:
    """DocBatches from a reader's groups of (offsets, records), a read block at a time.

    `fast(records)` gives the block's texts, or None when any record needs a look of its own; then
    `slow(offsets, records, before)` feeds `batcher` one record at a time (`before`: records in the
    earlier groups, for line numbers). The batches are those of `Batcher.add` one by one.
    """
    before = 0
    for offsets, records in groups:
        texts = fast(records)
        if texts is not None:
            batcher.extend(texts, offsets)
        else:
            slow(offsets, records, before)
        before += len(records)
        while batcher.full():
            yield batcher.take(meter.delta())
    yield batcher.take(meter.rest())


class ByteProgress:
    """Input bytes a unit has consumed, reported as deltas; `rest()` tops the total up to unit.size.

    For a plain file `raw` is the stream itself, positioned from unit.start; for a compressed one it
    is the compressed file under the decompressor, so progress counts bytes on disk either way.
    """

    def __init__(self, unit: WorkUnit, stream, raw):
        self.unit, self.raw = unit, raw
        self.start = unit.start if stream is raw else 0
        self.reported = 0

    def delta(self) -> int:
        d = max(0, min(self.raw.tell() - self.start, self.unit.size) - self.reported)
        self.reported += d
        return d

    def rest(self) -> int:
        d = self.unit.size - self.reported
        self.reported = self.unit.size
        return d
