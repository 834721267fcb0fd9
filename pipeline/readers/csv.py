"""CSV and TSV (plain, .gz, .zst): a header row, then one record per row; text from a column.

Parsing is Python's `csv` module (excel dialect: `"` quotes, `""` escapes; `,` or a tab), so quoted
fields may hold delimiters and newlines, and any field size is accepted up to `max_record_bytes`.

Work units. A quoted field may contain newlines, so a byte offset after a newline is not always a
record boundary. For a plain file larger than `unit_bytes` the parent scans it once (numpy, about
1 GB/s) and cuts only after a newline that is *proven* outside quotes: the number of `"` before it is
even, and every quote up to there is well formed (an opening quote follows a delimiter, a line end,
another quote or the file start; a closing quote is followed by a delimiter, a line end, another quote
or the end). Under those conditions the csv module's state machine and quote parity agree, so the
cut is where the csv module would start a record. At the first quote that is not well formed (a
stray `"` inside an unquoted field, `"a"b`) the scan stops and the rest of the file is one unit:
parsed sequentially exactly as a single reader would. Compressed files are one unit each.

Inside a unit the same proof runs per read block: complete records are found with numpy and handed
to csv.reader one whole record at a time (about 2x faster than line by line); from the first record
the proof does not cover (a stray quote, a lone \r, a record over the limit, the end of the file)
the rest of the unit is fed to csv.reader line by line, which is exact for any input. Both paths give
the same rows on any bytes (a property test checks this).

Bad records: a row whose number of fields differs from the header (`wrong_column_count`), invalid
UTF-8 (`invalid_utf8`, or replaced with encoding_errors: replace), a record over `max_record_bytes`
(`record_too_large`: its lines are skipped by quote parity without being held in memory), and the
text_field problems of every reader (`null_text` cannot happen: CSV has no null, an empty field is "").
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator

import numpy as np

from pipeline.errors import PrepError
from pipeline.filters import Batcher, RecordError, TextExtractor, get_value
from pipeline.readers.base import (
    BadRecords,
    ByteProgress,
    DocBatch,
    WorkUnit,
    compression_of,
    decode_errors,
    file_size,
    open_input,
    open_raw,
)
from pipeline.recipe import SourceConfig

__all__ = ["plan", "iter_batches", "record_cuts", "delimiter_of"]

READ_BLOCK = 4 << 20
SCAN_BLOCK = 8 << 20
_QUOTE = ord('"')


def delimiter_of(source: SourceConfig) -> str:
    return "\t" if source.resolved_format() == "tsv" else ","


# -- parent: proven record boundaries --------------------------------------------------------------

def record_cuts(f, unit_bytes: int, delimiter: str) -> list[int]:
    """Offsets right after a newline outside quotes, about `unit_bytes` apart (see the module doc).

    Scans the whole stream once; stops cutting at the first quote that is not well formed.
    """
    ok_near = np.zeros(256, dtype=bool)  # bytes allowed before an opening / after a closing quote
    ok_near[[ord(delimiter), 10, 13, _QUOTE]] = True
    parity = 0            # quotes seen so far, mod 2
    offset = 0            # stream offset of the current block
    prev = 10             # the byte before the current block (file start acts like a line start)
    check_next = False    # the previous block ended with a closing quote: its next byte is to be checked
    target = unit_bytes
    cuts: list[int] = []
    while True:
        block = f.read(SCAN_BLOCK)
        if not block:
            return cuts
        a = np.frombuffer(block, dtype=np.uint8)
        anomaly = None
        if check_next and not ok_near[a[0]]:
            return cuts
        q = np.flatnonzero(a == _QUOTE)
        check_next = False
        if q.size:
            closing = ((np.arange(q.size) + parity) & 1).astype(bool)
            before = np.where(q > 0, a[q - 1], prev)
            has_after = q + 1 < a.size
            after = a[np.minimum(q + 1, a.size - 1)]
            bad = (~closing & ~ok_near[before]) | (closing & has_after & ~ok_near[after])
            if bad.any():
                anomaly = offset + int(q[int(np.argmax(bad))])
            check_next = bool(closing[-1] and not has_after[-1])
        nl = np.flatnonzero(a == 10)
        if nl.size:
            outside = ((np.searchsorted(q, nl) + parity) & 1) == 0
            cands = nl[outside] + offset + 1
            if anomaly is not None:
                cands = cands[cands <= anomaly]
            while True:
                i = int(np.searchsorted(cands, target))
                if i >= cands.size:
                    break
                cuts.append(int(cands[i]))
                target = cuts[-1] + unit_bytes
        if anomaly is not None:
            return cuts
        parity = (parity + int(q.size)) & 1
        prev = int(a[-1])
        offset += a.size


def plan(source: SourceConfig, source_index: int, files: list[str], unit_bytes: int) -> list[WorkUnit]:
    fmt, delimiter = source.resolved_format(), delimiter_of(source)
    units = []
    for fi, path in enumerate(files):
        size = file_size(path, source.storage_options)
        cuts: list[int] = []
        if not compression_of(path) and size > unit_bytes:
            with open_raw(path, source.storage_options) as f:
                cuts = [c for c in record_cuts(f, unit_bytes, delimiter) if c < size]
        bounds = [0, *cuts, size]
        if not cuts:
            units.append(WorkUnit(0, source_index, fi, path, fmt, 0, -1, size))
            continue
        for start, end in zip(bounds[:-1], bounds[1:]):
            units.append(WorkUnit(0, source_index, fi, path, fmt, start, end if end < size else -1, end - start))
    return units


# -- worker ----------------------------------------------------------------------------------------

class _TooLarge(Exception):
    pass


class _Long:
    """A physical line longer than the limit: only its length and quote count were kept."""

    __slots__ = ("length", "quotes")

    def __init__(self, length: int, quotes: int):
        self.length, self.quotes = length, quotes


def _line_blocks(f, cap: int, prefix: bytes = b"") -> Iterator[list]:
    """Lists of physical lines (with their endings; a _Long for a line longer than `cap`), a read block
    at a time, of `prefix` and then `f`. Lines end at \n, \r or \r\n, the csv module's own rule."""
    buf = prefix
    while True:
        chunk = f.read(READ_BLOCK)
        if not chunk:
            if buf:
                yield buf.splitlines(keepends=True)  # more than one line when it is all of `prefix`
            return
        data = buf + chunk if buf else chunk
        pieces = data.splitlines(keepends=True)
        buf = b"" if pieces[-1].endswith(b"\n") else pieces.pop()  # "\r" may be half of "\r\n"
        if pieces:
            yield pieces
        if len(buf) > cap:  # one line longer than the limit: count it through to its end
            length, quotes = len(buf), buf.count(b'"')
            pending_cr = buf.endswith(b"\r")  # a line end, unless a "\n" follows in the next read
            buf = b""
            while True:
                chunk = f.read(READ_BLOCK)
                if not chunk:
                    yield [_Long(length, quotes)]
                    return
                if pending_cr:
                    if chunk[:1] == b"\n":
                        length, chunk = length + 1, chunk[1:]
                    yield [_Long(length, quotes)]
                    buf = chunk
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
                buf = chunk[i:]
                break


class _Lines:
    """Decoded physical lines of the records starting in [start, end), fed to csv.reader one by one;
    keeps the byte offset, size and quote count of the record being read. An iterator object (not a
    generator) so that raising _TooLarge from it leaves it usable."""

    def __init__(self, f, start: int, end: int, limit: int, prefix: bytes = b""):
        self.blocks = _line_blocks(f, limit, prefix)
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

    def __iter__(self):
        return self

    def _next_line(self):
        if self.i >= len(self.lines):
            self.lines = next(self.blocks)  # StopIteration at the end of the file
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
            self.bad_utf8 = False
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
        while self.record_quotes % 2:
            try:
                self._next_line()
            except StopIteration:
                break
        self.at_record_start = True


def _reader(lines: _Lines, delimiter: str):
    return csv.reader(lines, delimiter=delimiter, quotechar='"', doublequote=True, strict=False)


def _raise_field_limit() -> None:
    limit = sys.maxsize
    while True:  # our own max_record_bytes check replaces the csv module's 128 KiB field limit
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


def _read_header(unit: WorkUnit, source: SourceConfig, delimiter: str) -> list[str]:
    stream, raw = open_input(unit.path, source.storage_options)
    with stream, decode_errors(unit.path, raw):
        lines = _Lines(stream, 0, -1, source.max_record_bytes or sys.maxsize)
        try:
            for row in _reader(lines, delimiter):
                lines.next_record()
                if row:
                    return row
            return []
        except _TooLarge:
            raise PrepError(f"{unit.path}: the header row is larger than max_record_bytes "
                            f"{source.max_record_bytes}; is this a {source.resolved_format()} file?") from None


def _slow_rows(f, start: int, end: int, limit: int, delimiter: str, prefix: bytes = b""
               ) -> Iterator[tuple[int, int, list | None, bool]]:
    """(offset, bytes, row or None when over `limit`, not UTF-8) per record: the csv module fed one
    physical line at a time. Exact for any input; used from the first record the fast path cannot prove."""
    lines = _Lines(f, start, end, limit, prefix)
    reader = _reader(lines, delimiter)
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
        yield lines.record_start, lines.record_bytes, row, lines.bad_utf8


def _record_ends(a: np.ndarray, ok_near: np.ndarray) -> tuple[np.ndarray, int | None]:
    """Ends (exclusive) of the complete records of a block that starts at a record start, and the
    position of the first byte that breaks the proof (a quote that is not well formed, or a lone \r
    outside quotes, which ends a record where a \n-only split would not), or None."""
    q = np.flatnonzero(a == _QUOTE)
    closing = (np.arange(q.size) & 1).astype(bool)
    inner = q + 1 < a.size  # a quote at the very end waits for the next block (it is in the carry)
    before = np.where(q > 0, a[q - 1], 10)
    after = a[np.minimum(q + 1, a.size - 1)]
    bad = (~closing & ~ok_near[before]) | (closing & inner & ~ok_near[after])
    anomaly = int(q[int(np.argmax(bad))]) if bad.any() else None
    cr = np.flatnonzero(a == 13)
    if cr.size:
        outside = ((np.searchsorted(q, cr) & 1) == 0) & (cr + 1 < a.size)
        lone = cr[outside & (a[np.minimum(cr + 1, a.size - 1)] != 10)]
        if lone.size and (anomaly is None or lone[0] < anomaly):
            anomaly = int(lone[0])
    nl = np.flatnonzero(a == 10)
    ends = nl[(np.searchsorted(q, nl) & 1) == 0] + 1
    if anomaly is not None:
        ends = ends[ends <= anomaly]
    return ends, anomaly


def _iter_rows(f, start: int, end: int, limit: int, delimiter: str) -> Iterator[tuple[int, int, list | None, bool]]:
    """Like _slow_rows, about 2x faster: a block's record boundaries are found with numpy (newlines
    outside quotes, as in `record_cuts`) and csv.reader gets one whole record per item; from the first
    record the proof does not cover (or one over `limit`) on, the rest goes through _slow_rows."""
    ok_near = np.zeros(256, dtype=bool)
    ok_near[[ord(delimiter), 10, 13, _QUOTE]] = True
    offset, carry = start, b""
    while True:
        chunk = f.read(READ_BLOCK)
        if not chunk:
            if carry:  # the last record has no line end (or an unclosed quote): the exact path decides
                yield from _slow_rows(f, offset, end, limit, delimiter, carry)
            return
        data = carry + chunk if carry else chunk
        ends, anomaly = _record_ends(np.frombuffer(data, dtype=np.uint8), ok_near)
        starts = np.concatenate([[0], ends[:-1]]) if ends.size else ends
        keep = starts + offset < end if end >= 0 else np.ones(starts.size, dtype=bool)
        texts, bad_utf8, spans = [], [], []
        for s_, e_ in zip(starts[keep].tolist(), ends[keep].tolist()):
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
        if texts and offset == 0 and starts.size and starts[0] == 0 and texts[0].startswith("\ufeff"):
            texts[0] = texts[0][1:]  # a UTF-8 byte order mark (Excel) is not part of the first column's name
        rows = _reader(iter(texts), delimiter)
        k = 0
        for pos, size, parsed in spans:
            if parsed:
                yield pos, size, next(rows), bad_utf8[k]
                k += 1
            else:
                yield pos, size, None, False
        if not keep.all():
            return  # reached the unit's end
        consumed = int(ends[-1]) if ends.size else 0
        offset += consumed
        carry = data[consumed:]
        if anomaly is not None or len(carry) > limit:
            yield from _slow_rows(f, offset, end, limit, delimiter, carry)
            return


def iter_batches(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    _raise_field_limit()
    delimiter = delimiter_of(source)
    extract = TextExtractor(source.text_field, source.text_template)
    batcher = Batcher(source, bad, batch_docs)
    header = _read_header(unit, source, delimiter) if unit.start > 0 else None
    stream, raw = open_input(unit.path, source.storage_options)
    if unit.start > 0:
        stream.seek(unit.start)
    limit = source.max_record_bytes or sys.maxsize
    replace = source.encoding_errors == "replace"
    meter = ByteProgress(unit, stream, raw)
    row_number = 0 if unit.start == 0 else None  # data rows are numbered from the file start only
    column = None


    with stream, decode_errors(unit.path, raw):
        try:
            for pos, size, row, not_utf8 in _iter_rows(stream, unit.start, unit.end, limit, delimiter):
                if header is None:
                    if row is None:
                        raise PrepError(f"{unit.path}: the header row is larger than max_record_bytes "
                                        f"{source.max_record_bytes}; is this a {source.resolved_format()} file?")
                    header = row or None  # blank lines before the header are skipped
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


def _columns(unit: WorkUnit, source: SourceConfig, header: list[str], extract: TextExtractor) -> int:
    """Index of the text column (-1: a template, records go through the extractor as dicts)."""
    for name in extract.fields:
        try:
            get_value(dict.fromkeys(header, ""), name)
        except RecordError:
            what = "text_template field" if source.text_template else "text_field"
            raise PrepError(f"{unit.path}: {what} {name!r} is not a column; the header has "
                            f"{', '.join(map(repr, header[:20]))}{' ...' if len(header) > 20 else ''}; set "
                            f"source.{'text_template' if source.text_template else 'text_field'}") from None
    return header.index(extract.field) if source.text_template is None else -1
