"""CSV: a record that spans many reads (one huge quoted field) is scanned once, not once per read."""

from __future__ import annotations

import io
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.readers import BadRecords, WorkUnit
from pipeline.readers import csv as csv_reader
from pipeline.readers.csv import Dialect
from pipeline.recipe import SourceConfig

# the inside of a quoted field: doubled quotes, newlines, CRLF, delimiters, a 2-byte delimiter (`§`)
INSIDE = st.lists(st.sampled_from([b"x", b"yz ", b'""', b"\n", b"\r\n", b"\r", b",", b"\t", "\u00a7".encode(),
                                   "\u00e9".encode()]), max_size=120).map(b"".join)
BARE = st.lists(st.sampled_from([b"p", b"q ", b'"', b"\r"]), max_size=6).map(b"".join)  # a stray quote, a lone CR
DIALECTS = st.sampled_from([Dialect(","), Dialect("\t"), Dialect("\u00a7"), Dialect(",", False)])


@st.composite
def csv_bytes(draw) -> tuple[bytes, Dialect]:
    dialect = draw(DIALECTS)
    delimiter = dialect.delimiter.encode()
    rows = []
    for _ in range(draw(st.integers(1, 6))):
        fields = [b'"' + draw(INSIDE) + b'"' if draw(st.booleans()) else draw(BARE)
                  for _ in range(draw(st.integers(1, 3)))]
        rows.append(delimiter.join(fields) + draw(st.sampled_from([b"\n", b"\r\n", b""])))
    return draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + b"".join(rows), dialect


@settings(max_examples=400, deadline=None)
@given(csv_bytes(), st.integers(1, 40), st.sampled_from([5, 60, 300, sys.maxsize]), st.integers(-1, 400))
def test_records_across_many_small_reads_read_as_the_csv_module_reads_them(case, block, limit, end):
    """_iter_rows carrying a record's scan from read to read (_OpenRecord) gives the rows of the csv
    module fed physical lines, for quoted fields over many reads of `block` bytes, stray quotes and
    lone CRs among them, any max_record_bytes and a unit's end anywhere."""
    data, dialect = case
    old = csv_reader.READ_BLOCK
    csv_reader.READ_BLOCK = block
    try:
        fast = list(csv_reader._iter_rows(io.BytesIO(data), 0, end, limit, dialect))
    finally:
        csv_reader.READ_BLOCK = old
    exact = list(csv_reader._slow_rows(io.BytesIO(data), 0, end, limit, dialect))
    assert fast == exact


def test_one_huge_quoted_field_is_scanned_once_not_once_per_read(monkeypatch, tmp_path):
    """Every read of a record not yet ended joined it again and scanned it whole (_record_ends): one
    quoted field of 100 MB took 3.2 s to read against 1.3 s for 50 MB (4 MiB reads). Now each read is
    scanned once, with a few bytes before it: here 180 KB read 4 KiB at a time scanned 180 KB, not 4 MB."""
    field = 'say ""hi"", then\r\nanother line\n' * 6000
    data = b'id,text\n1,"' + field.encode() + b'"\n2,short\n'
    scanned = []
    real = csv_reader._record_ends

    def counting(a, *args, **kwargs):
        scanned.append(a.size)
        return real(a, *args, **kwargs)

    monkeypatch.setattr(csv_reader, "_record_ends", counting)
    monkeypatch.setattr(csv_reader, "READ_BLOCK", 4096)
    csv_reader._raise_field_limit()  # as iter_batches does: the csv module's 128 KiB limit off
    rows = list(csv_reader._iter_rows(io.BytesIO(data), 0, -1, sys.maxsize, Dialect(",")))
    text = field.replace('""', '"')
    assert [row for _, _, row, _ in rows] == [["id", "text"], ["1", text], ["2", "short"]]
    assert len(scanned) > 40  # a read at a time
    assert sum(scanned) < 1.1 * len(data)

    # the same through the reader, pyarrow's path: the one document, whole
    path = tmp_path / "big.csv"
    path.write_bytes(data)
    source = SourceConfig(path=str(path), text_field="text", max_record_bytes=None)
    unit = WorkUnit(0, 0, 0, str(path), "csv", 0, -1, len(data))
    scanned.clear()
    texts = [t for batch in csv_reader.iter_batches(unit, source, BadRecords(unit, "skip"), 16) for t in batch.texts]
    assert texts == [text, "short"]
    assert sum(scanned) < 1.1 * len(data)


def _flat(blocks) -> list:
    return [line if type(line) is bytes else ("long", line.length, line.quotes) for lines in blocks for line in lines]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([b"a", b'"', b"\n", b"\r", b"\r\n", b"xyz" * 5]), max_size=60).map(b"".join),
       st.integers(0, 12), st.integers(1, 9), st.integers(2, 80))
def test_physical_lines_over_many_reads_are_the_lines_of_the_whole(data, cut, block, cap):
    """_line_blocks (the csv module's exact path) keeps the reads of a line not ended yet apart and
    splits them once it ends: its lines are those of the whole bytes, or only counted (length, quotes)
    for a line whose unended part outgrew `cap`."""
    got = _flat(csv_reader._line_blocks(io.BytesIO(data[cut:]), cap, data[:cut], block))
    want = data.splitlines(keepends=True)
    assert len(got) == len(want)
    for line, whole in zip(got, want):
        assert line == whole or line == ("long", len(whole), whole.count(b'"')) and len(whole) > cap


class _CountedLine:
    """csv._LINE, counting its match attempts; finditer as the re module's: an attempt at each byte
    from where the last match ended until one matches."""

    def __init__(self, pattern):
        self.pattern, self.attempts = pattern, 0

    def match(self, data, pos=0):
        self.attempts += 1
        return self.pattern.match(data, pos)

    def finditer(self, data, pos=0):
        while pos <= len(data):
            m = self.match(data, pos)
            if m is None:
                pos += 1
                continue
            yield m
            pos = m.end() if m.end() > pos else pos + 1


def test_a_stray_quotes_record_before_a_long_line_is_found_with_one_match_per_line(monkeypatch):
    """_record_end (the csv module's end of a stray quote's record) matched its lines with finditer,
    which tried again from every byte of a line not ended yet, each try to its end: past a stray quote,
    a field without newlines longer than a read (5 MB) never finished. One attempt per line now."""
    counted = _CountedLine(csv_reader._LINE)
    monkeypatch.setattr(csv_reader, "_LINE", counted)
    # a stray quote (x"y), then a quoted field that goes on past these bytes
    data = b'id,text\n1,x"y,"open\r\n' + b"y" * 20_000
    assert csv_reader._record_end(data, 8, 11, Dialect(",")) is None
    assert counted.attempts <= 4  # two lines, and the one not ended
    ended = data + b'"\n2,z\n'
    assert csv_reader._record_end(ended, 8, 11, Dialect(",")) == len(ended) - 4


def test_a_line_longer_than_many_reads_after_a_stray_quote_is_split_once(monkeypatch):
    """After a stray quote the rest of a unit goes through the csv module line by line (_slow_rows):
    each read of a line not ended yet was joined to it and the whole split again, so a 50 MB field
    without newlines took 2.3 s (25 MB: 0.64 s). Its reads are kept apart and split once it ends."""
    split = []
    real = csv_reader._physical_lines

    def counting(data):
        split.append(len(data))
        return real(data)

    monkeypatch.setattr(csv_reader, "_physical_lines", counting, raising=False)  # the lines' split, counted
    data = b'id,text\n1,"x a"b ' + b"y" * 300_000 + b'"\n2,z\n'
    lines = _flat(csv_reader._line_blocks(io.BytesIO(data), sys.maxsize, b"", 4096))  # as _slow_rows reads
    assert lines == data.splitlines(keepends=True)
    assert len(data) <= sum(split) < 1.1 * len(data)
