"""CSV and TSV (plain, .gz, .zst, .bz2, .xz): a header row, then one record per row; text from a column.

Parsing is Python's `csv` module (excel dialect: `"` quotes, `""` escapes; `,` or a tab), so quoted
fields may hold delimiters and newlines, and any field size is accepted up to `max_record_bytes`.

Work units. A quoted field may contain newlines, so a byte offset after a newline is not always a
record boundary. For a plain file larger than `unit_bytes` the parent scans it once (numpy, about
1 GB/s) and cuts only after a newline that is *proven* outside quotes: the number of `"` before it is
even, and every quote up to there is well formed (an opening quote follows a delimiter, a line end,
another quote or the file start; a closing quote is followed by a delimiter, a line end, another quote
or the end). A delimiter of several bytes in UTF-8 (`§`, `│`) counts only whole, and a UTF-8 byte order
mark (which the readers drop) is part of the file start (_Near). Under those conditions the csv module's
state machine and quote parity agree, so the cut is where the csv module would start a record. At a
quote that is not well formed (a stray `"` inside an unquoted field, `"a"b`) the record holding it is
parsed by the csv module from its start (proven) to its end, and the proof starts again there
(CutScanner); after MAX_RESYNCS of them the scan stops and the rest of the file is one unit, parsed
sequentially exactly as a single reader would.
A compressed file is planned as ranges of its decompressed bytes, which the spooler moves to the
cuts the same scan finds on the stream. `source.quoting: none`: no quotes, every line a record.

Inside a unit the same proof runs per read block: complete records are found with numpy, and once the
header is known a block's records go to pyarrow's CSV reader whole (`ArrowColumn`: 61 MB of CSV read
in 0.38 instead of 0.76 s; with an ASCII delimiter only, as pyarrow takes no other). A block pyarrow
refuses (a row with another field count, invalid UTF-8) goes to csv.reader one whole record at a time
(about 2x faster than line by line). A record the proof does not cover (a stray quote, a lone \r) is
parsed by csv.reader, and the proof resumes after it; from a record over the limit, the end of the
file, or past MAX_RESYNCS such records, the rest of the unit is fed to csv.reader line by line, which
is exact for any input. All paths give the same rows on any
bytes (property tests check this).

Bad records: a row whose number of fields differs from the header (`wrong_column_count`), a quoted
field still open at the end of the file (`unclosed_quote`: the csv module would end it there, holding
every later line; the run's note then names `source.quoting: none`), invalid
UTF-8 (`invalid_utf8`, or replaced with encoding_errors: replace), a record over `max_record_bytes`
(`record_too_large`: its lines are skipped by quote parity without being held in memory), and the
text_field problems of every reader (`null_text` cannot happen: CSV has no null, an empty field is "").
"""

from __future__ import annotations

import csv
import io
import logging
import re
import sys
from collections.abc import Iterator
from functools import partial
from typing import NamedTuple

import numpy as np

from pipeline.errors import PrepError, SchemaError, not_a_column, refuse_repeated_columns
from pipeline.filters import Batcher, RecordError, TextExtractor, get_value
from pipeline.readers.base import (
    BOM,
    BadRecords,
    ByteProgress,
    DocBatch,
    ScanMeter,
    WorkUnit,
    compressed_ranges,
    compression_of,
    decode_errors,
    file_size,
    open_input,
    open_raw,
    open_unit,
    ranged_input_bytes,
    scan_blocks,
    serves_ranges,
)
from pipeline.readers.sniff import refuse_mislabeled_stream
from pipeline.recipe import SourceConfig
from pipeline.source_formats import is_url

__all__ = ["plan", "input_bytes", "iter_batches", "ArrowColumn", "record_cuts", "Dialect", "dialect_of"]

log = logging.getLogger("prep")

READ_BLOCK = 4 << 20
HEADER_BLOCK = 64 << 10
SCAN_BLOCK = 8 << 20
_QUOTE = ord('"')


class Dialect(NamedTuple):
    """How a source's records are split: the field delimiter, and whether `"` quotes fields."""

    delimiter: str
    quoted: bool = True  # False: source.quoting none, every `"` is text and every line a row


def dialect_of(source: SourceConfig) -> Dialect:
    delimiter = source.delimiter
    if delimiter is None:
        delimiter = "\t" if source.resolved_format() == "tsv" else ","
    return Dialect(delimiter, source.quoting == "csv")


def _quote_positions(a: np.ndarray, quoted: bool) -> np.ndarray:
    """Where the quotes of a block are (none count when fields are not quoted)."""
    return np.flatnonzero(a == _QUOTE) if quoted else _NO_QUOTES


_NO_QUOTES = np.zeros(0, dtype=np.intp)


class _Near:
    """Whether the quotes of a block are well formed: an opening quote follows a line end, a quote, the
    file start (a UTF-8 byte order mark there too: the csv module is given the first line without it)
    or the delimiter; a closing quote is followed by a line end, a quote, the end or the delimiter.

    The delimiter is one character, 1 to 4 bytes in UTF-8 (`;` 1, `§` 2, `│` 3). One byte: a 256-entry
    table looked up at each quote's neighbour. More: all its bytes must be there, not one of them: `ç"`
    (C3 A7 22) ends in `§`'s last byte A7 but is no delimiter to the csv module, which reads that quote
    as text, so a one-byte rule flipped quote parity and cut inside a quoted field. The bytes of such a
    delimiter start with a lead byte, never a continuation byte, so they decode as the delimiter whatever
    precedes them (strict or "replace"), and no quote or line end is ever inside another character."""

    def __init__(self, dialect: Dialect):
        self.delimiter = dialect.delimiter.encode("utf-8")
        self.reach = len(self.delimiter)  # the bytes around a quote that decide it
        self.table = np.zeros(256, dtype=bool)  # bytes allowed right before an opening / after a closing quote
        self.table[[10, 13, _QUOTE]] = True
        if self.reach == 1:
            self.table[self.delimiter[0]] = True

    def bad(self, a: np.ndarray, q: np.ndarray, closing: np.ndarray, head: bytes, bom: int = -1
            ) -> tuple[np.ndarray, bytes | None]:
        """Which quotes `q` of the block `a` are not well formed (`closing`: those that close a field, by
        parity), and, when the last closes one and the bytes after it in `a` may yet be the delimiter's
        first ones, those bytes (its check waits for more; else None). `head`: the last bytes before the
        block (b"\n" at a record start); `bom`: where a quote right after the file's byte order mark is."""
        table, n = self.table, a.size
        before = np.where(q > 0, a[q - 1], head[-1])
        has_after = q + 1 < n
        after = a[np.minimum(q + 1, n - 1)]
        bad = (~closing & ~table[before]) | (closing & has_after & ~table[after])
        if bom >= 0 and bad.any():
            bad &= closing | (q != bom)
        if self.reach > 1 and bad.any():  # the quotes next to a multi-byte delimiter, all its bytes compared
            i = np.flatnonzero(bad)
            at = np.where(closing[i], q[i] + 1, q[i] - self.reach)  # where the delimiter would start
            match = np.ones(i.size, dtype=bool)
            for k, byte in enumerate(self.delimiter):
                match &= self._bytes_at(a, at + k, head) == byte
            bad[i[match]] = False
        waiting = None
        if q.size and closing[-1] and n - 1 - int(q[-1]) < self.reach:
            rest = a[int(q[-1]) + 1:].tobytes()
            if len(rest) < self.reach and self.delimiter.startswith(rest):  # b"" at the very end, as with one byte
                bad[-1], waiting = False, rest
        return bad, waiting

    def after_ok(self, seen: bytes) -> bool | None:
        """Whether the bytes after a closing quote (`seen`, those known) make it well formed; None: not
        known yet (all of them so far are the delimiter's first bytes)."""
        if seen and self.table[seen[0]]:
            return True
        if len(seen) < self.reach and self.delimiter.startswith(seen):
            return None
        return seen.startswith(self.delimiter)

    @staticmethod
    def _bytes_at(a: np.ndarray, at: np.ndarray, head: bytes) -> np.ndarray:
        """a[at], with a negative `at` in `head` (the bytes before `a`), -1 past either end."""
        inside = (at >= 0) & (at < a.size)
        got = np.where(inside, a[np.clip(at, 0, a.size - 1)].astype(np.int16), -1)
        back = (at < 0) & (at >= -len(head))
        if back.any():
            h = np.frombuffer(head, dtype=np.uint8)
            got[back] = h[at[back] + len(head)]
        return got


# -- parent: proven record boundaries --------------------------------------------------------------

def record_cuts(f, unit_bytes: int, dialect: Dialect, path: str = "", size: int = 0, on_stop=None) -> list[int]:
    """Record starts about `unit_bytes` apart: right after a newline outside quotes, or where the csv
    module ends the record of a stray quote (see CutScanner).

    Scans the whole stream once; when cutting stops (CutScanner.stopped) it tells `on_stop` the stream
    offset of the quote it stopped at. `path` and `size` name it to the plan's progress display
    (base.scan_progress).
    """
    scan = CutScanner(unit_bytes, dialect)
    cuts: list[int] = []
    for block in scan_blocks(f, SCAN_BLOCK, ScanMeter(path, size)):
        cuts += scan.feed(block)
        if scan.stopped:
            if on_stop is not None:
                on_stop(scan.anomaly)
            break
    return cuts


class CutScanner:
    """`record_cuts` a block at a time, for a stream read once in order (the parent's scan of a plain
    file; the spooler's pass over a compressed one, pipeline.spool).

    A quote that is not well formed (`said "hi" then`, `"Hi," she said.`) ends the quote-parity proof,
    but not the cutting: the record holding it is parsed by the csv module from its start (the last
    newline outside quotes before it, proven), and the proof starts again where that record ends, a
    record start the csv module itself found. A file with a stray quote in its first MB was one unit,
    one worker's, to its end. Each such record costs a rescan of the rest of its block, so after
    MAX_RESYNCS of them (a file whose fields are never quoted: source.quoting: none) cutting stops."""

    def __init__(self, unit_bytes: int, dialect: Dialect):
        self.unit_bytes = unit_bytes
        self.dialect = dialect
        self.quoted = dialect.quoted
        self.near = _Near(dialect)
        self.parity = 0           # quotes seen so far, mod 2
        self.offset = 0           # stream offset of the next block
        self.head = b"\n"         # the last bytes before the next block (file start acts like a line start)
        self.lead = b""           # the stream's first 3 bytes (a UTF-8 byte order mark?), once read
        # the bytes after a closing quote that ended the blocks so far (its check waits for the next
        # block: b"", or the first bytes of a delimiter of several), or None
        self.after: bytes | None = None
        self.target = unit_bytes  # the next cut is the first proven record start at or after this
        self.stopped = False      # no cut from here on (too many stray quotes, or a record too long)
        self.anomaly = -1         # the stream offset of the stray quote cutting stopped at
        self.resyncs = 0          # records parsed by the csv module so far
        # the stream's bytes from the last proven record start up to the next block (None: longer than
        # MAX_RESYNC_BYTES); while a stray quote's record is parsed across blocks, (its bytes so far,
        # the quote's position in them)
        self.tail: bytes | None = b""
        self.pending: tuple[bytes, int] | None = None

    def feed(self, block: bytes) -> list[int]:
        """The cuts in this block (stream offsets, in order); none once stopped."""
        cuts: list[int] = []
        if self.stopped or not block:
            return cuts
        rest = self._step(block, cuts)
        if not rest:
            return cuts
        # the proof starts again after a stray quote's record, a piece at a time: each stray quote has
        # the rest of its piece scanned again (the rest of an 8 MiB block: 26 stray quotes in 55 MB of
        # CSV cost the plan 0.24 s), and a piece is all that is copied out of the block's rest
        view, at, front = memoryview(rest), 0, None
        while not self.stopped:
            if front:  # what followed a stray quote's record in the last piece
                piece, front = front, None
            elif at < len(view):
                piece, at = bytes(view[at:at + SCAN_PIECE]), at + SCAN_PIECE
            else:
                break
            front = self._step(piece, cuts)
        return cuts

    def _step(self, data: bytes, cuts: list[int]) -> bytes | None:
        """Scan `data`, the stream's next bytes; what follows a stray quote's record, if one ends in it."""
        if self.pending is None:
            return self._scan(data, cuts)
        held, at = self.pending  # a stray quote's record started in earlier bytes
        self.pending = None
        self.offset -= len(held)
        return self._resync(held + data, at, cuts)

    def _scan(self, block: bytes, cuts: list[int]) -> bytes | None:
        """Cuts of `block` (at self.offset) by quote parity, up to its first stray quote; then what
        follows that quote's record, for the caller to scan next (None: the block is done)."""
        near, parity, offset = self.near, self.parity, self.offset
        a = np.frombuffer(block, dtype=np.uint8)
        if offset < 3:
            self.lead = (self.lead[:offset] + block[:3])[:3]
        waiting = None
        if self.after is not None:  # the closing quote that ended the blocks before: what follows decides
            seen = self.after + block[:near.reach]
            ok = near.after_ok(seen)
            if ok is False:
                return self._stray(block, -1 - len(self.after), cuts)
            if ok is None:  # all of this block is the delimiter's first bytes so far: no quote, no newline
                waiting = seen
        anomaly = None
        q = _quote_positions(a, self.quoted)
        self.after = waiting
        if q.size:
            closing = ((np.arange(q.size) + parity) & 1).astype(bool)
            bom = 3 - offset if offset <= 3 and self.lead == BOM else -1
            bad, self.after = near.bad(a, q, closing, self.head, bom)
            if bad.any():
                anomaly = int(q[int(np.argmax(bad))])
        # the first newline outside quotes at or after each target (_first_outside)
        while self.target - 1 - offset < a.size:
            i = _first_outside(block, a, q, parity, max(0, self.target - 1 - offset))
            if i < 0 or (anomaly is not None and i + 1 > anomaly):
                break
            cuts.append(offset + i + 1)
            self.target = cuts[-1] + self.unit_bytes
        if anomaly is not None:
            return self._stray(block, anomaly, cuts)
        self._keep_tail(block, q, parity)
        self.parity = (parity + int(q.size)) & 1
        reach = near.reach
        self.head = block[-reach:] if len(block) >= reach else (self.head + block)[-reach:]
        self.offset = offset + a.size
        return None

    def _keep_tail(self, block: bytes, q: np.ndarray, parity: int) -> None:
        """The bytes after the block's last newline outside quotes (or the tail grown by the block)."""
        i = _last_outside(block, np.frombuffer(block, dtype=np.uint8), q, parity)
        if i >= 0:
            self.tail = block[i + 1:]
        elif self.tail is not None:
            self.tail = self.tail + block if len(self.tail) + len(block) <= MAX_RESYNC_BYTES else None

    def _stray(self, block: bytes, at: int, cuts: list[int]) -> bytes | None:
        """A stray quote at `at` in `block` (-1: the last byte of the one before): parse its record."""
        if self.tail is None or self.resyncs >= MAX_RESYNCS:
            self.stopped, self.anomaly = True, self.offset + at
            return None
        held = self.tail
        self.offset -= len(held)
        return self._resync(held + block, len(held) + at, cuts)

    def _resync(self, data: bytes, at: int, cuts: list[int]) -> bytes | None:
        """`data` (at self.offset) starts at a proven record start, and a stray quote is at `at`: the
        csv module parses from the last newline outside quotes before it to the end of its record,
        a record start; a cut there if due, and the bytes after it are returned for the proof."""
        a = np.frombuffer(data, dtype=np.uint8, count=at) if at > 0 else np.zeros(0, dtype=np.uint8)
        nl = np.flatnonzero(a == 10)
        nl = nl[(np.searchsorted(_quote_positions(a, self.quoted), nl) & 1) == 0]
        start = int(nl[-1]) + 1 if nl.size else 0
        end = _record_end(data, start, at, self.dialect, file_start=self.offset + start == 0)
        if end is None:  # the record goes on in the next block
            if len(data) - start > MAX_RESYNC_BYTES:
                self.stopped, self.anomaly = True, self.offset + at
                return None
            self.pending = (data[start:], at - start)
            self.offset += len(data)
            return None
        self.resyncs += 1
        if self.offset + end >= self.target:
            cuts.append(self.offset + end)
            self.target = cuts[-1] + self.unit_bytes
        self.offset += end
        # the record ends with a line end: what came before it cannot make a delimiter with what follows
        self.parity, self.head, self.after, self.tail = 0, data[max(0, end - self.near.reach):end], None, b""
        return data[end:] or None


# Newlines outside quotes are found with bytes.find from where the search starts, a quoted newline
# stepped past to the next quote (55 MB of CSV in 0.044 s, against 0.10 s listing every newline of a
# block), but only for FIND_STEPS quoted newlines: past those, the rest are listed with numpy, LIST_BYTES
# at first, twice as many bytes each time after. One step per quoted newline made a field of megabytes
# with a newline and a quote every few bytes (pretty-printed JSON, source code, dialogue) cost the
# parent's plan ~1 s per 8 MiB block: 66 MB of such CSV planned in 6.6 s, before any worker started.
FIND_STEPS = 32
LIST_BYTES = 64 << 10


def _outside(q: np.ndarray, parity: int, newlines: np.ndarray) -> np.ndarray:
    """Which of `newlines` lie outside quotes: an even count of quotes before them (with `parity`, the
    quotes before the block, mod 2)."""
    return ((np.searchsorted(q, newlines) + parity) & 1) == 0


def _first_outside(block: bytes, a: np.ndarray, q: np.ndarray, parity: int, start: int) -> int:
    """The first newline of `block` (`a`, its bytes; `q`, its quotes) at or after `start` outside
    quotes, or -1."""
    i = block.find(b"\n", start)
    for _ in range(FIND_STEPS):
        if i < 0:
            return -1
        k = int(np.searchsorted(q, i))  # quotes of this block before the newline
        if not (k + parity) & 1:
            return i
        if k == q.size:  # inside quotes to the block's end
            return -1
        i = block.find(b"\n", int(q[k]) + 1)
    span = LIST_BYTES
    while i >= 0:
        end = min(i + span, a.size)
        newlines = np.flatnonzero(a[i:end] == 10) + i
        ok = np.flatnonzero(_outside(q, parity, newlines))
        if ok.size:
            return int(newlines[ok[0]])
        i, span = (end if end < a.size else -1), span * 2
    return -1


def _last_outside(block: bytes, a: np.ndarray, q: np.ndarray, parity: int) -> int:
    """The last newline of `block` outside quotes, or -1 (as _first_outside, from the end)."""
    i = block.rfind(b"\n")
    for _ in range(FIND_STEPS):
        if i < 0:
            return -1
        k = int(np.searchsorted(q, i))
        if not (k + parity) & 1:
            return i
        if not k:  # inside quotes opened before the block
            return -1
        i = block.rfind(b"\n", 0, int(q[k - 1]))  # before the quote that opened the stretch
    span = LIST_BYTES
    while i >= 0:
        begin = max(0, i + 1 - span)
        newlines = np.flatnonzero(a[begin:i + 1] == 10) + begin
        ok = np.flatnonzero(_outside(q, parity, newlines))
        if ok.size:
            return int(newlines[ok[-1]])
        i, span = begin - 1, span * 2
    return -1


# stray quotes parsed past (CutScanner) before cutting stops, and the longest record so parsed; a
# worker parses past one only this far after the last (RESYNC_GAP), else reads the unit's rest slowly
RESYNC_GAP = 256 << 10
SCAN_PIECE = 1 << 20
MAX_RESYNCS = 64
MAX_RESYNC_BYTES = 64 << 20
# a physical line as the csv module sees one: ended by \n, \r\n, or a \r whose next byte is known
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\n|\r(?=[^\n]))")


def _record_end(data: bytes, start: int, at: int, dialect: Dialect, file_start: bool = False) -> int | None:
    """The end of the record holding byte `at`, as the csv module reads `data` from the record start
    `start`: its records one by one until one ends past `at`. None when the complete lines of `data` end
    first (its end is in bytes not yet read). `file_start`: `start` is the file's, whose byte order mark
    the readers drop (_Lines), which decides whether a quote after it opens a quoted field."""
    pos, ran_out = start, False

    def lines():
        nonlocal pos, ran_out
        # each line matched where the last ended, and no further once one is incomplete (no line end
        # yet, or a \r at the very end): finditer went on trying every later byte of such a line, each
        # attempt to its end, so a stray quote before a line longer than a read (a 5 MB field without
        # newlines) never finished (its square: ~10^13 steps)
        while m := _LINE.match(data, pos):
            text = m.group().decode("utf-8", "replace")
            if file_start and pos == start and text.startswith("\ufeff"):
                text = text[1:]
            pos = m.end()
            yield text
        ran_out = True

    reader = _reader(lines(), dialect)
    while True:
        try:
            next(reader)
        except StopIteration:
            return None
        if ran_out:  # the record may go on past the lines read
            return None
        if pos > at:
            return pos


def input_bytes(source: SourceConfig, files: list[str], unit_bytes: int) -> int:
    """What `plan` at `unit_bytes` covers (the sum of its units' sizes), without its scan of plain
    files (readers.plan_units sizes unit_bytes: auto with it)."""
    return ranged_input_bytes(files, unit_bytes, "csv", source.storage_options)


def plan(source: SourceConfig, source_index: int, files: list[str], unit_bytes: int) -> list[WorkUnit]:
    """Plain files: ranges between proven cuts (one parent scan). Compressed files: ranges of the
    decompressed bytes as for JSONL; the spooler (pipeline.spool) moves each range's ends to the
    cuts its own pass over the stream finds, with this same scan."""
    fmt, dialect = source.resolved_format(), dialect_of(source)
    units = []
    for fi, path in enumerate(files):
        size = file_size(path, source.storage_options)
        if compression_of(path):
            units += compressed_ranges(source_index, fi, path, size, unit_bytes, fmt, source.storage_options)
            continue
        if size > unit_bytes and is_url(path) and serves_ranges(path, source.storage_options):
            # ranges of its bytes, cut at records by the parent's spooler (pipeline.spool) with this same
            # scan as it fetches the object once: scanned here, a URL was fetched twice (the plan's scan,
            # then every unit's range), 2.0x its bytes; the windows' cuts are those the scan gives here
            units += [WorkUnit(0, source_index, fi, path, fmt, a, a + unit_bytes if a + unit_bytes < size else -1,
                               min(unit_bytes, size - a)) for a in range(0, size, unit_bytes)]
            continue
        cuts: list[int] = []
        if size > unit_bytes and serves_ranges(path, source.storage_options):
            with open_raw(path, source.storage_options) as f:
                # first: a UTF-16 file's or an archive's bytes scanned as CSV warned of stray quotes
                # ("the file is not quoted as CSV") before the worker's error named what it is
                refuse_mislabeled_stream(path, f)
                cuts = [c for c in record_cuts(f, unit_bytes, dialect, path, size,
                                               lambda at, p=path, n=size: _warn_one_unit(p, at, n, unit_bytes))
                        if c < size]
        bounds = [0, *cuts, size]
        if not cuts:
            units.append(WorkUnit(0, source_index, fi, path, fmt, 0, -1, size))
            continue
        for start, end in zip(bounds[:-1], bounds[1:]):
            units.append(WorkUnit(0, source_index, fi, path, fmt, start, end if end < size else -1, end - start))
    return units


def _warn_one_unit(path: str, at: int, size: int, unit_bytes: int) -> None:
    """The plan stopped cutting at a stray quote (`at`; MAX_RESYNCS of them parsed past, or one whose
    record is longer than MAX_RESYNC_BYTES): the rest of the file is one unit, one worker's. Said at
    once when that rest is several units' worth, not only in the run's closing note."""
    if size - at > 2 * unit_bytes:
        log.warning("%s: the quote at byte %s is inside a field, and many before it were: the file is not "
                    "quoted as CSV, so its last %.1f MB are not cut into units and one worker reads them; %s "
                    "(every line a row, shared by every worker)", path, f"{at:,}", (size - at) / 1e6, _UNQUOTED_FIX)


# -- worker ----------------------------------------------------------------------------------------

class _TooLarge(Exception):
    pass


class _Long:
    """A physical line longer than the limit: only its length and quote count were kept."""

    __slots__ = ("length", "quotes")

    def __init__(self, length: int, quotes: int):
        self.length, self.quotes = length, quotes


def _physical_lines(data: bytes) -> list[bytes]:
    """`data` split after each \n, \r\n or lone \r (bytes.splitlines: no other line breaks)."""
    return data.splitlines(keepends=True)


def _line_blocks(f, cap: int, prefix: bytes = b"", block: int = READ_BLOCK) -> Iterator[list]:
    """Lists of physical lines (with their endings; a _Long for a line longer than `cap`), a read of
    `block` bytes at a time, of `prefix` and then `f`. Lines end at \n, \r or \r\n, the csv module's
    own rule.

    Reads that hold no line end are kept apart (`more`) until one ends the line they continue, then
    split once with it: joined and split again on every read, a line of 50 MB took 2.3 s, of 25 MB
    0.64 s (the square of its length)."""
    buf = prefix  # bytes not yet split into lines
    one_line = False  # `buf` is one line without its end (the rest of a split), not bytes never split
    more: list[bytes] = []  # the reads since, each holding no line end
    more_len = 0
    while True:
        chunk = f.read(block)
        if not chunk:
            buf = b"".join([buf, *more])
            if buf:
                yield buf.splitlines(keepends=True)  # more than one line when it is all of `prefix`
            return
        if one_line and buf[-1:] != b"\r" and b"\n" not in chunk and b"\r" not in chunk:
            more.append(chunk)  # `buf`'s line goes on
            more_len += len(chunk)
            if len(buf) + more_len <= cap:
                continue
            buf, more, more_len = b"".join([buf, *more]), [], 0  # over the limit: counted through below
        else:
            data = b"".join([buf, *more, chunk]) if buf or more else chunk
            more, more_len = [], 0
            pieces = _physical_lines(data)
            buf = b"" if pieces[-1].endswith(b"\n") else pieces.pop()  # "\r" may be half of "\r\n"
            one_line = True
            if pieces:
                yield pieces
        if len(buf) > cap:  # one line longer than the limit: count it through to its end
            length, quotes = len(buf), buf.count(b'"')
            pending_cr = buf.endswith(b"\r")  # a line end, unless a "\n" follows in the next read
            buf = b""
            while True:
                chunk = f.read(block)
                if not chunk:
                    yield [_Long(length, quotes)]
                    return
                if pending_cr:
                    if chunk[:1] == b"\n":
                        length, chunk = length + 1, chunk[1:]
                    yield [_Long(length, quotes)]
                    buf, one_line = chunk, False
                    break
                ends = [i for i in (chunk.find(b"\n"), chunk.find(b"\r")) if i >= 0]
                if not ends:
                    length += len(chunk)
                    quotes += chunk.count(b'"')
                    continue
                i = min(ends) + 1
                if chunk[i - 1:i] == b"\r" and i == len(chunk):
                    length, quotes, pending_cr = length + i, quotes + chunk.count(b'"'), True
                    continue
                if chunk[i - 1:i] == b"\r" and chunk[i:i + 1] == b"\n":
                    i += 1
                yield [_Long(length + i, quotes + chunk.count(b'"', 0, i))]
                buf, one_line = chunk[i:], False
                break


class _Lines:
    """Decoded physical lines of the records starting in [start, end), fed to csv.reader one by one;
    keeps the byte offset, size and quote count of the record being read. An iterator object (not a
    generator) so that raising _TooLarge from it leaves it usable."""

    def __init__(self, f, start: int, end: int, limit: int, prefix: bytes = b"", block: int = READ_BLOCK,
                 quoted: bool = True):
        self.blocks = _line_blocks(f, limit, prefix, block)
        self.quoted = quoted  # False: a record is one line, whatever its quotes
        self.lines: list = []
        self.i = 0
        self.offset = start
        self.end = end
        self.limit = limit
        self.record_start = start
        self.record_bytes = 0
        self.record_quotes = 0
        self.bad_utf8 = False
        self.at_record_start = True
        self.eof_in_quotes = False  # the csv module asked for a line past the end, inside a record

    def __iter__(self):
        return self

    def _next_line(self):
        if self.i >= len(self.lines):
            try:
                self.lines = next(self.blocks)  # StopIteration at the end of the file
            except StopIteration:
                # the csv module asks for another line inside a record only when the last one ended
                # inside a quoted field: a quote left open at the end of the file
                self.eof_in_quotes = not self.at_record_start
                raise
            self.i = 0
        line = self.lines[self.i]
        self.i += 1
        if type(line) is bytes:
            length, quotes = len(line), line.count(b'"')
        else:
            length, quotes, line = line.length, line.quotes, None
        self.offset += length
        self.record_bytes += length
        self.record_quotes += quotes
        return line

    def __next__(self) -> str:
        if self.at_record_start:
            if 0 <= self.end <= self.offset:
                raise StopIteration
            self.record_start, self.record_bytes, self.record_quotes = self.offset, 0, 0
            self.bad_utf8 = self.eof_in_quotes = False
            self.at_record_start = False
        i = self.i
        if i < len(self.lines) and type(self.lines[i]) is bytes:  # the common case, inline
            line = self.lines[i]
            self.i = i + 1
            self.offset += len(line)
            self.record_bytes += len(line)
            self.record_quotes += line.count(b'"')
        else:
            line = self._next_line()
        if line is None or self.record_bytes > self.limit:
            raise _TooLarge
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            text = line.decode("utf-8", "replace")
            self.bad_utf8 = True
        if self.record_start == 0 and self.record_bytes == len(line) and text.startswith("\ufeff"):
            text = text[1:]  # a UTF-8 byte order mark (Excel) is not part of the first column's name
        return text

    def next_record(self) -> None:
        self.at_record_start = True

    def skip_record(self) -> None:
        """After _TooLarge: consume lines until the record's quotes balance (its end), keeping none."""
        while self.quoted and self.record_quotes % 2:
            try:
                self._next_line()
            except StopIteration:
                break
        self.at_record_start = True


# Python 3.10's csv module refuses a line holding NUL ("line contains NUL"; accepted from 3.11), which
# failed the whole unit there. So on 3.10 lines go in with NUL as U+D800, which no UTF-8 decoding here
# ("strict" or "replace") can give, and the fields come back with NUL restored: the rows 3.11 gives.
# map() objects, unlike generators, stay usable after _TooLarge passes through them.
_CSV_REFUSES_NUL = sys.version_info < (3, 11)


def _reader(lines, dialect: Dialect):
    quoting = csv.QUOTE_MINIMAL if dialect.quoted else csv.QUOTE_NONE  # QUOTE_NONE: a quote is text
    options = dict(delimiter=dialect.delimiter, quotechar='"', doublequote=True, strict=False, quoting=quoting)
    if _CSV_REFUSES_NUL:
        return map(_nul_back, csv.reader(map(_nul_out, lines), **options))
    return csv.reader(lines, **options)


def _nul_out(line: str) -> str:
    return line.replace("\x00", "\ud800") if "\x00" in line else line


def _nul_back(row: list[str]) -> list[str]:
    return [f.replace("\ud800", "\x00") if "\ud800" in f else f for f in row]


def _raise_field_limit() -> None:
    limit = sys.maxsize
    while True:  # our own max_record_bytes check replaces the csv module's 128 KiB field limit
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


def _read_header(unit: WorkUnit, source: SourceConfig, dialect: Dialect) -> list[str]:
    # ahead_to=0: from a URL, the small reads below and no more (else a 4 MiB request per unit)
    stream, raw = open_input(unit.path, source.storage_options, ahead_to=0)
    with raw, stream, decode_errors(unit.path, raw, storage_options=source.storage_options):
        # small reads: every unit but the first reads the header, which is usually one short line
        lines = _Lines(stream, 0, -1, source.max_record_bytes or sys.maxsize, block=HEADER_BLOCK,
                       quoted=dialect.quoted)
        try:
            for row in _reader(lines, dialect):
                lines.next_record()
                if row:
                    return row
            return []
        except _TooLarge:
            raise PrepError(f"{unit.path}: the header row is larger than max_record_bytes "
                            f"{source.max_record_bytes}; is this a {source.resolved_format()} file?") from None


class Unclosed(list):
    """The fields of a record whose quoted field never closes: the csv module (not strict) ends it at
    the end of the file, with every line after the quote in it; pandas and pyarrow refuse the file."""


def _slow_rows(f, start: int, end: int, limit: int, dialect: Dialect, prefix: bytes = b""
               ) -> Iterator[tuple[int, int, list | None, bool]]:
    """(offset, bytes, row or None when over `limit`, not UTF-8) per record: the csv module fed one
    physical line at a time. Exact for any input; used from the first record the fast path cannot prove."""
    lines = _Lines(f, start, end, limit, prefix, quoted=dialect.quoted)
    reader = _reader(lines, dialect)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except _TooLarge:
            lines.skip_record()
            yield lines.record_start, lines.record_bytes, None, False
            continue
        lines.next_record()
        if lines.eof_in_quotes:
            row = Unclosed(row)
        yield lines.record_start, lines.record_bytes, row, lines.bad_utf8


def _record_ends(a: np.ndarray, near: _Near, gather_fraction: float = 1 / 8, quoted: bool = True, bom: int = -1,
                 parity: int = 0, head: bytes = b"\n") -> tuple[np.ndarray, int | None]:
    """Ends (exclusive) of the complete records of a block that starts at a record start, and the
    position of the first byte that breaks the proof (a quote that is not well formed, or a lone \r
    outside quotes, which ends a record where a \n-only split would not), or None. `bom`: 3 when the
    block is the file's start and a UTF-8 byte order mark begins it, else -1. A block that starts
    inside a record (_OpenRecord) gives the quotes before it, mod 2 (`parity`), and its last bytes
    before the block (`head`, for the quotes' neighbours).

    Only newlines and CRs outside quotes matter. When the bytes outside quotes are at most
    `gather_fraction` of the block (quoted multi-line texts), only those bytes are looked at; listing
    every newline of such a block (110,000 in 4 MiB of docs.jsonl as CSV, 570 of them record ends)
    took 5.2 ms of the block's numpy time, this ~1.5 ms."""
    q = _quote_positions(a, quoted)
    closing = ((np.arange(q.size) + parity) & 1).astype(bool)
    # a closing quote at the very end (or before the first bytes of a delimiter of several) waits for the
    # next block: no newline follows it here, so it is in the carry
    bad, _ = near.bad(a, q, closing, head, bom)
    anomaly = int(q[int(np.argmax(bad))]) if bad.any() else None
    # the stretches outside quotes: [0, q0), (q1, q2), ... and (q_last, end) after a closing quote;
    # starting inside quotes: (q0, q1), (q2, q3), ... and (q_last, end) after a closing quote
    if parity:
        lo = q[0::2] + 1
        hi = np.concatenate([q[1::2], [a.size]]) if q.size % 2 else q[1::2]
    else:
        lo = np.concatenate([[0], q[1::2] + 1])
        hi = np.concatenate([q[0::2], [a.size]]) if q.size % 2 == 0 else q[0::2]
    lengths = hi - lo
    total = int(lengths.sum())
    if total <= gather_fraction * a.size:
        at = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)  # those bytes' positions
        byte = a[at]
        nl, cr = at[byte == 10], at[byte == 13]
    else:
        nl, cr = np.flatnonzero(a == 10), np.flatnonzero(a == 13)
        nl = nl[_outside(q, parity, nl)]
        if cr.size:
            cr = cr[_outside(q, parity, cr)]
    if cr.size:
        cr = cr[cr + 1 < a.size]
        lone = cr[a[np.minimum(cr + 1, a.size - 1)] != 10]
        if lone.size and (anomaly is None or lone[0] < anomaly):
            anomaly = int(lone[0])
    ends = nl + 1
    if anomaly is not None:
        ends = ends[ends <= anomaly]
    return ends, anomaly


class _Texts(NamedTuple):
    """A block's records taken whole by the columnar path: the byte offsets and texts of its rows."""

    offsets: list[int]
    texts: list[str]


class ArrowColumn:
    """The text column of a block's proven records, parsed by pyarrow's CSV reader (C++) instead of
    the csv module: 100,000 rows of ~600 characters (61 MB) read in 0.55 s through csv.reader, of
    which 0.13 s in pyarrow plus 0.10 s to make the Python strings.

    Given only records the numpy proof covers (every quote at a field's start or end, no lone \r
    outside quotes), pyarrow splits them exactly as the csv module does (excel dialect, `""` escapes,
    quoted newlines). Anything else it refuses (a row with another number of fields, invalid UTF-8),
    and a row count that differs from the non-blank records, sends the block back to the csv module,
    which names each bad record. Not used for text_template (records become dicts there)."""

    def __init__(self, dialect: Dialect, names: list[str], column: int):
        import pyarrow as pa
        import pyarrow.csv as pa_csv  # imported by CSV units only: ~0.1 s that JSONL runs do not pay

        self._pa, self._read = pa, pa_csv.read_csv
        keys = [f"c{i}" for i in range(len(names))]  # header names may repeat; positions do not
        self._parse = pa_csv.ParseOptions(delimiter=dialect.delimiter, quote_char='"' if dialect.quoted else False,
                                          double_quote=True, escape_char=False, newlines_in_values=True,
                                          ignore_empty_lines=True)
        # every column as a string: that is what checks each field is UTF-8 (the csv module's path
        # rejects a record with invalid UTF-8 in any field, not only in the text column)
        self._convert = pa_csv.ConvertOptions(column_types=dict.fromkeys(keys, pa.string()),
                                              strings_can_be_null=False, quoted_strings_can_be_null=False)
        self._keys, self._column = keys, column

    def __call__(self, a: np.ndarray, data: bytes, starts: np.ndarray, ends: np.ndarray, offset: int
                 ) -> _Texts | None:
        """Offsets and texts of the non-blank records [starts, ends) of `data` (`a`: its bytes as
        uint8), or None when pyarrow does not take them all."""
        lo, hi = int(starts[0]), int(ends[-1])
        sizes = ends - starts
        first = a[starts]
        # blank lines ("\n", "\r\n") are no records: csv.reader gives [] and pyarrow skips them
        blank = ((sizes == 1) & (first == 10)) | ((sizes == 2) & (first == 13))
        pa = self._pa
        try:
            table = self._read(pa.BufferReader(pa.py_buffer(memoryview(data)[lo:hi])),
                               read_options=self._pa_read_options(hi - lo), parse_options=self._parse,
                               convert_options=self._convert)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        rows = starts[~blank] if blank.any() else starts
        if table.num_rows != rows.size:
            return None
        return _Texts((rows + offset).tolist(), table.column(self._column).to_pylist())

    def _pa_read_options(self, size: int):
        import pyarrow.csv as pa_csv
        # one pyarrow block for the whole region: a record must not straddle two of its blocks
        return pa_csv.ReadOptions(column_names=self._keys, use_threads=False, block_size=max(1 << 20, size + 1))


def _exact_records(data: bytes, starts: list[int], ends: list[int], offset: int, limit: int, dialect: Dialect
                   ) -> Iterator[tuple[int, int, list | None, bool]]:
    """(offset, bytes, row or None when over `limit`, not UTF-8) for records [starts, ends) of
    `data`, each handed whole to the csv module."""
    texts, bad_utf8, spans = [], [], []
    for s_, e_ in zip(starts, ends):
        if e_ - s_ > limit:
            spans.append((offset + s_, e_ - s_, False))
            continue
        try:
            texts.append(data[s_:e_].decode("utf-8"))
            bad_utf8.append(False)
        except UnicodeDecodeError:
            texts.append(data[s_:e_].decode("utf-8", "replace"))
            bad_utf8.append(True)
        spans.append((offset + s_, e_ - s_, True))
    if texts and spans[0][0] == 0 and texts[0].startswith("\ufeff"):
        texts[0] = texts[0][1:]  # a UTF-8 byte order mark (Excel) is not part of the first column's name
    rows = _reader(iter(texts), dialect)
    k = 0
    for pos, size, parsed in spans:
        if parsed:
            yield pos, size, next(rows), bad_utf8[k]
            k += 1
        else:
            yield pos, size, None, False


def _iter_rows(f, start: int, end: int, limit: int, dialect: Dialect, columnar=None, stray_quote=None
               ) -> Iterator[tuple[int, int, list | None, bool] | _Texts]:
    """Like _slow_rows, about 2x faster: a block's record boundaries are found with numpy (newlines
    outside quotes, as in `record_cuts`) and csv.reader gets one whole record per item; from the first
    record the proof does not cover (or one over `limit`) on, the rest goes through _slow_rows.

    With `columnar` (called as `columnar.take(...)` once `columnar.ready()`, see iter_batches), a
    block's proven records go to it whole and come back as one _Texts; records before it is ready
    (the header) and blocks it refuses are read the exact way. `stray_quote(offset, data, at)` is told
    of the first quote that is not well formed (stream offset; the block's bytes and its position there)."""
    near = _Near(dialect)
    offset, carry, again, resynced, told = start, b"", False, None, False  # resynced: where the last resync was
    unfinished: _OpenRecord | None = None  # the record `carry` begins, scanned already, while it spans reads
    while True:
        chunk = b"" if again else f.read(READ_BLOCK)
        if not chunk and not again:
            if unfinished is not None:
                carry, unfinished = unfinished.joined(), None
            if carry:  # the last record has no line end (or an unclosed quote): the exact path decides
                yield from _slow_rows(f, offset, end, limit, dialect, carry)
            return
        again = False
        if unfinished is not None:
            found = unfinished.scan(chunk)
            if found is None:  # the record goes on past this read too
                if unfinished.size <= limit:
                    continue
                yield from _slow_rows(f, offset, end, limit, dialect, unfinished.joined())
                return
            data, (ends, anomaly), unfinished = unfinished.joined(chunk), found, None
            a = np.frombuffer(data, dtype=np.uint8)
        else:
            data = carry + chunk if carry else chunk
            a = np.frombuffer(data, dtype=np.uint8)
            # at the file's start a quote right after a byte order mark opens a field: _Lines drops the mark
            bom = 3 if offset == 0 and data[:3] == BOM else -1
            ends, anomaly = _record_ends(a, near, quoted=dialect.quoted, bom=bom)
        starts = np.concatenate([[0], ends[:-1]]) if ends.size else ends
        keep = starts + offset < end if end >= 0 else np.ones(starts.size, dtype=bool)
        s_all, e_all = starts[keep], ends[keep]
        i, n = 0, s_all.size
        while columnar is not None and i < n and not columnar.ready():  # the header, record by record
            yield from _exact_records(data, s_all[i:i + 1].tolist(), e_all[i:i + 1].tolist(), offset, limit, dialect)
            i += 1
        if columnar is not None and i < n and int((e_all[i:] - s_all[i:]).max()) <= limit:
            got = columnar.take(a, data, s_all[i:], e_all[i:], offset)
            if got is not None:
                yield got
                i = n
        if i < n:
            yield from _exact_records(data, s_all[i:].tolist(), e_all[i:].tolist(), offset, limit, dialect)
        if not keep.all():
            return  # reached the unit's end
        consumed = int(ends[-1]) if ends.size else 0
        offset += consumed
        carry = data[consumed:]
        if anomaly is None and len(carry) <= limit:
            if len(carry) >= _OpenRecord.least(near):
                unfinished, carry = _OpenRecord(carry, near, dialect.quoted), b""
            continue
        if anomaly is not None and (end < 0 or offset < end):
            if stray_quote is not None and a[anomaly] == _QUOTE and not told:
                stray_quote(offset - consumed + anomaly, data, anomaly)
                told = True
            # the record the proof stopped at (a stray quote, a lone \r) by the csv module, then the
            # proof again from where it ends (as CutScanner does): a stray quote cost the rest of the unit
            # the csv module's line-by-line pace (26 in 55 MB of CSV: workers' CPU 2.15 -> 1.28 s). Each
            # costs a scan of the rest of the read (up to READ_BLOCK), so only where they are sparse: a
            # TSV with one every ~900 bytes took 0.80 instead of 0.52 s a unit doing 64 of them
            sparse = resynced is None or offset - resynced >= RESYNC_GAP
            stop = _record_end(carry, 0, anomaly - consumed, dialect, file_start=offset == 0) if sparse else None
            if stop is not None and stop <= limit:
                resynced = offset
                yield from _slow_rows(io.BytesIO(), offset, end, limit, dialect, carry[:stop])
                offset, carry = offset + stop, carry[stop:]
                again = bool(carry)  # scan what is left of this read before reading on
                if 0 <= end <= offset:
                    return
                continue
        yield from _slow_rows(f, offset, end, limit, dialect, carry)
        return


class _OpenRecord:
    """A record whose start _iter_rows has read but not its end yet: its reads so far, kept apart, and
    what the proof knows of them (no record end and no stray quote in them, but maybe in their last
    bytes, whose neighbours come with the next read: a closing quote or a CR there).

    Each read is scanned alone, with its last OVERLAP bytes before it, and the reads are joined once,
    when the record ends. Rejoined and rescanned whole on every 4 MiB read, one quoted field of
    50 MB took 1.05-1.09 s to read, of 100 MB 3.3-4.3 s (the square of its size); now 0.36-0.42 and
    0.58-0.85 s (best of 3, a loaded 2-core VM)."""

    def __init__(self, data: bytes, near: _Near, quoted: bool):
        self.near, self.quoted = near, quoted
        self.pieces = [data]
        self.size = len(data)
        self.quotes = data.count(b'"') & 1 if quoted else 0  # the quotes read so far, mod 2
        self.keep = self.overlap(near) + near.reach  # the overlap, and the bytes before it a quote there may need
        self.tail = data[-self.keep:]

    @staticmethod
    def overlap(near: _Near) -> int:
        """The last bytes of the record so far that the next read's scan takes again: a quote there
        (or the delimiter's first bytes after it), or a CR, is decided by the bytes after it."""
        return near.reach + 1

    @classmethod
    def least(cls, near: _Near) -> int:
        """The shortest start of a record kept so: with the overlap past its first 3 bytes, where a
        byte order mark would be (_record_ends' `bom`), and a whole `head` before it."""
        return cls.overlap(near) + 4

    def scan(self, chunk: bytes) -> tuple[np.ndarray, int | None] | None:
        """The next read's record ends and stray byte (as _record_ends gives them for the joined
        bytes: offsets from the record's start), or None when it holds neither (it is kept)."""
        n = self.overlap(self.near)
        again = self.tail[-n:]
        parity = (self.quotes - again.count(b'"')) & 1 if self.quoted else 0
        block = again + chunk
        ends, anomaly = _record_ends(np.frombuffer(block, dtype=np.uint8), self.near, quoted=self.quoted,
                                     parity=parity, head=self.tail[:-n])
        if ends.size or anomaly is not None:
            shift = self.size - n
            return ends + shift, None if anomaly is None else anomaly + shift
        self.pieces.append(chunk)
        self.size += len(chunk)
        if self.quoted:
            self.quotes = (self.quotes + chunk.count(b'"')) & 1
        self.tail = (self.tail + chunk[-self.keep:])[-self.keep:]
        return None

    def joined(self, chunk: bytes = b"") -> bytes:
        return b"".join([*self.pieces, chunk])


def iter_batches(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    _raise_field_limit()
    dialect = dialect_of(source)
    delimiter = dialect.delimiter
    extract = TextExtractor(source.text_field, source.text_template, source.encoding_errors)
    batcher = Batcher(source, bad, batch_docs)
    stream, raw = open_unit(unit, source.storage_options)
    if unit.is_spooled:  # a window of whole records [base, its end) of a compressed file (pipeline.spool)
        start, end = stream.base, -1
    else:
        start, end = unit.start, unit.end
        if start > 0:
            stream.seek(start)
    if source.columns is not None:  # a file without a header row: its first row is data
        header = list(source.columns)
    else:
        header = _read_header(unit, source, dialect) if start > 0 else None
    limit = source.max_record_bytes or sys.maxsize
    replace = source.encoding_errors == "replace"
    meter = ByteProgress(unit, stream, raw)
    row_number = 0 if start == 0 else None  # data rows are numbered from the file start only
    column = None

    class Columnar:  # pyarrow takes whole blocks once the header is known (ArrowColumn)
        arrow = None

        def ready(self) -> bool:
            return header is not None

        def take(self, *block) -> _Texts | None:
            if self.arrow is None:
                self.arrow = ArrowColumn(dialect, header, _columns(unit, source, header, extract))
            return self.arrow(*block)

    # pyarrow's CSV reader takes an ASCII delimiter only ("Expecting an ASCII character" for `§`, `│`):
    # with another every block goes to the csv module whole-record (about half as fast), still exact
    columnar = Columnar() if source.text_template is None and delimiter.isascii() else None

    with raw, stream, decode_errors(unit.path, raw, storage_options=source.storage_options, stream=stream, bad=bad):
        if start == 0:  # gzip, UTF-16, an archive under a plain name: stop with the fix (sniff.py)
            refuse_mislabeled_stream(unit.path, stream)
        try:
            for item in _iter_rows(stream, start, end, limit, dialect, columnar, partial(_stray_quote, unit, bad)):
                if type(item) is _Texts:
                    if row_number is not None:
                        row_number += len(item.texts)
                    batcher.extend(item.texts, item.offsets)
                    while batcher.full():
                        yield batcher.take(meter.delta())
                    continue
                pos, size, row, not_utf8 = item
                if header is None:
                    if row is None:
                        raise PrepError(f"{unit.path}: the header row is larger than max_record_bytes "
                                        f"{source.max_record_bytes}; is this a {source.resolved_format()} file?")
                    header = row or None  # blank lines before the header are skipped
                    continue
                if type(row) is Unclosed:
                    bad.notice("unclosed_quote", f"{unit.path}: the quoted field of the record at byte {pos:,} never "
                                                 f"closes; its {size:,} bytes to the end of the file were rejected as "
                                                 f"unclosed_quote; {_UNQUOTED_FIX}")
                    bad.reject("unclosed_quote", pos, delimiter.join(row), "a quote opened and not closed before "
                               "the end of the file", row=row_number)
                    continue
                if row is not None and not row:
                    continue  # a blank line is not a record
                at = row_number
                if row_number is not None:
                    row_number += 1
                if row is None:
                    bad.reject("record_too_large", pos, "", f"{size} bytes > max_record_bytes "
                               f"{source.max_record_bytes}", row=at)
                    continue
                if column is None:
                    column = _columns(unit, source, header, extract)
                if not_utf8 and not replace:
                    bad.reject("invalid_utf8", pos, delimiter.join(row), "not UTF-8", row=at)
                    continue
                if len(row) != len(header):
                    bad.reject("wrong_column_count", pos, delimiter.join(row),
                               f"{len(row)} fields, the header has {len(header)}", row=at)
                    continue
                try:
                    text = row[column] if column >= 0 else extract(dict(zip(header, row)))
                except RecordError as e:
                    bad.reject(e.reason, pos, delimiter.join(row), e.detail, row=at)
                    continue
                if batcher.add(text, pos):
                    yield batcher.take(meter.delta())
        except csv.Error as e:  # not expected without strict mode; never silently
            raise PrepError(f"{unit.path}: CSV parse error: {e}") from None
    yield batcher.take(meter.rest())


def _stray_quote(unit: WorkUnit, bad: BadRecords, offset: int, data: bytes, at: int) -> None:
    """A unit's first `"` that neither opens nor closes a quoted field: the file is not CSV-quoted, or
    not throughout. Its rows are still read as pandas and the csv module read them, but a field that
    starts with a quote loses it and may run on over the next lines; the run ends with a note."""
    line_start = data.rfind(b"\n", 0, at) + 1
    line_end = data.find(b"\n", at)
    line = data[line_start:line_end if line_end >= 0 else len(data)].decode("utf-8", "replace")
    bad.notice("stray_quote", f"{unit.path}: the quote at byte {offset:,} is inside a field, not at its start "
                              f"or end (line {line[:80]!r}), so the file is not quoted as CSV; "
                              f"{_UNQUOTED_FIX}, else a field that starts with a quote loses it and may run on "
                              "over the lines after it")


_UNQUOTED_FIX = ("if its fields are never quoted (a TSV from cut or psql, a sentence corpus), set "
                 "source.quoting: none")


def _other_delimiter(header: list[str], delimiter: str) -> str | None:
    """The delimiter a header of one column seems to be split by (";", "|", a tab or ","), or None."""
    if len(header) != 1:
        return None
    counts = {d: header[0].count(d) for d in ";|\t," if d != delimiter}
    best = max(counts, key=counts.get)
    return best if counts[best] else None


def _looks_like_data(header: list[str]) -> bool:
    """Whether a header row looks like a record: a field that is a number, or one of several words."""
    return any(f.strip().lstrip("-").replace(".", "", 1).isdigit() or len(f.split()) > 3 for f in header)


def _columns(unit: WorkUnit, source: SourceConfig, header: list[str], extract: TextExtractor) -> int:
    """Index of the text column (-1: a template, records go through the extractor as dicts)."""
    for name in extract.fields:
        try:
            get_value(dict.fromkeys(header, ""), name)
        except RecordError:
            guess = _other_delimiter(header, dialect_of(source).delimiter)
            if guess is not None:  # `id;text` read with ",": one column named so
                raise SchemaError(f"{unit.path}: {name!r} is not a column; the header is one column, "
                                  f"{header[0][:200]!r}, which looks {guess!r}-separated; set source.delimiter: "
                                  f"{guess!r}") from None
            error = not_a_column(unit.path, name, header, "the header", source.text_template is not None)
            if source.columns is None and _looks_like_data(header):
                names = ", ".join(f"c{i}" for i in range(len(header)))
                error = SchemaError(f"{error}, or, as the header looks like a row of data, name the columns of a "
                                    f"file without a header row: source.columns: [{names}] (then text_field: one of "
                                    "them)")
            raise error from None
    refuse_repeated_columns(unit.path, extract.columns_in(header)[0], header, "the header",
                            source.text_template is not None)
    return header.index(extract.field) if source.text_template is None else -1
