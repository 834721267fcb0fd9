"""CSV/TSV: byte-range cuts only at proven record boundaries; bad rows counted and listed."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline.errors import PrepError
from pipeline.readers import BadRecords, WorkUnit
from pipeline.readers import csv as csv_reader
from pipeline.readers.csv import Dialect
from pipeline.recipe import SourceConfig
from tests.conftest import read_spooled

FIELD = st.text(alphabet=st.sampled_from(list('ab ,;|"\t\n\r\u00e9x')), max_size=12)
# quoted (source.quoting: csv) and not (quoting: none): every path must give the csv module's rows
DIALECTS = st.sampled_from([Dialect(","), Dialect("\t"), Dialect(",", False), Dialect("\t", False)])


def write_csv(rows, delimiter=",", quoting=csv.QUOTE_MINIMAL) -> bytes:
    f = io.StringIO(newline="")
    csv.writer(f, delimiter=delimiter, quoting=quoting).writerows(rows)
    return f.getvalue().encode("utf-8")


def record_starts(data: bytes, delimiter: str) -> set[int]:
    """Byte offsets where csv.reader starts a record (ground truth, by a sequential parse)."""
    lines = data.splitlines(keepends=True)
    starts, offset, at_start = set(), 0, True
    class It:
        def __iter__(self):
            return self
        def __next__(self):
            nonlocal offset, at_start
            if not lines:
                raise StopIteration
            if at_start:
                starts.add(offset)
                at_start = False
            line = lines.pop(0)
            offset += len(line)
            text = line.decode("utf-8", "replace")  # same length in lines, so the same record starts
            # the readers drop a UTF-8 byte order mark at the file start (Excel writes one)
            return text[1:] if offset == len(line) and text.startswith("\ufeff") else text
    for _ in csv.reader(It(), delimiter=delimiter):
        at_start = True
    return starts


def read_all(path: Path, source: SourceConfig, unit_bytes: int, policy: str = "skip"):
    units = csv_reader.plan(source, 0, [str(path)], unit_bytes)
    texts, positions, bad = [], [], []
    for u in units:
        b = BadRecords(u, policy)
        for batch in csv_reader.iter_batches(u, source, b, 7):
            texts += batch.texts
            positions += batch.positions.tolist()
        bad += b.rows
    return units, texts, positions, bad


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(FIELD, FIELD), min_size=1, max_size=40), st.sampled_from([",", "\t", ";", "|"]),
       st.integers(1, 64))
def test_cuts_are_record_starts_and_units_read_every_row_once(tmp_path_factory, rows, delimiter, unit_bytes):
    """";" and "|": source.delimiter, for a .csv file."""
    data = write_csv([("id", "text"), *rows], delimiter)
    cuts = [c for c in csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter)) if c < len(data)]
    truth = record_starts(data, delimiter)
    assert set(cuts) <= truth
    assert cuts == sorted(set(cuts))
    greedy, target = [], unit_bytes  # well-formed CSV: every record start is proven, so the cuts are
    for start in sorted(truth):      # the first record start at or after each target
        if start >= target:
            greedy.append(start)
            target = start + unit_bytes
    assert cuts == greedy
    for scan in (1, 7, 64):  # quotes and newlines straddling scan blocks change nothing
        orig = csv_reader.SCAN_BLOCK
        csv_reader.SCAN_BLOCK = scan
        try:
            assert [c for c in csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter)) if c < len(data)] == cuts
        finally:
            csv_reader.SCAN_BLOCK = orig
    path = tmp_path_factory.mktemp("c") / ("c.tsv" if delimiter == "\t" else "c.csv")
    path.write_bytes(data)
    source = SourceConfig(path=str(path), text_field="text", max_record_bytes=None,
                          delimiter=delimiter if delimiter in ";|" else None)
    orig = csv_reader.SCAN_BLOCK
    csv_reader.SCAN_BLOCK = 16  # many scan blocks: quotes and newlines straddle block ends
    try:
        units, texts, _, bad = read_all(path, source, 1 << 16)
        units_small = csv_reader.plan(source, 0, [str(path)], 1 << 16)
    finally:
        csv_reader.SCAN_BLOCK = orig
    assert units == units_small
    want = [r[1] for r in csv.reader(io.StringIO(data.decode(), newline=""), delimiter=delimiter)][1:]
    assert texts == want and not bad


def assert_fast_equals_exact(data: bytes, block: int, limit: int, dialect) -> None:
    """numpy record boundaries + whole-record parsing (`_iter_rows`, reading `block` bytes at a time)
    give the rows of the csv module fed physical lines (`_slow_rows`)."""
    old = csv_reader.READ_BLOCK
    csv_reader.READ_BLOCK = block
    try:
        fast = list(csv_reader._iter_rows(io.BytesIO(data), 0, -1, limit, dialect))
        exact = list(csv_reader._slow_rows(io.BytesIO(data), 0, -1, limit, dialect))
    finally:
        csv_reader.READ_BLOCK = old
    assert fast == exact


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab,"\n\r\t\u00e9 ')), max_size=80), st.integers(1, 23),
       st.integers(3, 60), DIALECTS)
def test_fast_record_path_equals_the_exact_line_path_on_any_input(text, block, limit, dialect):
    """numpy record boundaries + whole-record parsing == the csv module fed physical lines, for any
    bytes (stray quotes, lone \r, unclosed quotes), block size and max_record_bytes."""
    data = text.encode()
    assert_fast_equals_exact(data, block, limit, dialect)


PIECE = st.sampled_from([b"a", b"b", b",", b'"', b'""', b"\n", b"\r", b"\r\n", b"\t", b" ",
                         "\u00e9".encode(), b"\xff", b"\x00", b"\n\n"])


@pytest.mark.skipif(csv_reader._CSV_REFUSES_NUL, reason="this Python's csv module refuses NUL: nothing to compare with")
@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(PIECE, st.sampled_from([b"\x00", b'"\x00"', b"\x00\n"])), max_size=60), st.integers(3, 60),
       DIALECTS)
def test_nul_goes_around_a_csv_module_that_refuses_it(pieces, limit, dialect):
    """Python 3.10's csv module raises on a line holding NUL, which failed the whole unit there; its
    rows with NUL passed as U+D800 and restored are the rows 3.11's module gives, records over the
    limit included."""
    data = b"".join(pieces)
    want = list(csv_reader._slow_rows(io.BytesIO(data), 0, -1, limit, dialect))
    csv_reader._CSV_REFUSES_NUL = True
    try:
        got = list(csv_reader._slow_rows(io.BytesIO(data), 0, -1, limit, dialect))
    finally:
        csv_reader._CSV_REFUSES_NUL = False
    assert got == want
    assert not any("\ud800" in f for _, _, row, _ in got if row for f in row)


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECE, max_size=60), st.integers(1, 23), st.integers(3, 60), DIALECTS, st.booleans())
def test_columnar_path_gives_the_csv_modules_rows(pieces, block, limit, dialect, last_column):
    """pyarrow's blocks (ArrowColumn) == the csv module fed physical lines, on any bytes: every text
    it hands over is the text column of a non-blank row with the header's field count, at the same
    offset, and the rows it skips are blank; everything else is the exact path's own tuples."""
    data = b"".join(pieces)
    exact = list(csv_reader._slow_rows(io.BytesIO(data), 0, -1, limit, dialect))
    header: list | None = None

    class Columnar:
        arrow = None

        def ready(self):
            return header is not None

        def take(self, *block_):
            if self.arrow is None:
                self.arrow = csv_reader.ArrowColumn(dialect, header, len(header) - 1 if last_column else 0)
            return self.arrow(*block_)

    old = csv_reader.READ_BLOCK
    csv_reader.READ_BLOCK = block
    got = []
    try:
        for item in csv_reader._iter_rows(io.BytesIO(data), 0, -1, limit, dialect, Columnar()):
            got.append(item)
            if header is None and type(item) is tuple and item[2]:
                header = item[2]
    finally:
        csv_reader.READ_BLOCK = old
    column = (len(header) - 1 if last_column else 0) if header else 0
    blanks = {item[0] for item in exact if item[2] == []}  # blank lines are no records: either path may skip them
    rest = iter([item for item in exact if item[2] != []])
    for item in got:
        if type(item) is tuple:
            assert item == next(rest) if item[2] != [] else item[0] in blanks
            continue
        for offset, text in zip(item.offsets, item.texts):
            pos, _, row, not_utf8 = next(rest)
            assert (pos, text) == (offset, row[column]) and len(row) == len(header) and not not_utf8
    assert next(rest, None) is None


def test_big_file_is_cut_and_read_exactly_once(tmp_path):
    rows = [(i, f'line {i}, "quoted"\nsecond line\r\n{"x" * (i % 50)}') for i in range(3000)]
    path = tmp_path / "c.csv"
    path.write_bytes(write_csv([("id", "text"), *rows]))
    source = SourceConfig(path=str(path))
    units, texts, positions, bad = read_all(path, source, 1 << 16)
    assert len(units) > 3 and all(u.start in record_starts(path.read_bytes(), ",") for u in units)
    assert texts == [r[1] for r in rows] and not bad
    assert positions == sorted(positions) and len(set(positions)) == len(rows)


def test_input_bytes_is_what_any_plan_covers(tmp_path):
    import zstandard
    rows = [(i, f'row {i}, "q"\n' + "x" * (i % 70)) for i in range(2000)]
    plain = tmp_path / "c.csv"
    plain.write_bytes(write_csv([("id", "text"), *rows]))
    packed = tmp_path / "d.csv.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    files = [str(plain), str(packed)]
    source = SourceConfig(path=str(tmp_path / "*.csv*"), format="csv")
    for unit_bytes in (1 << 10, 1 << 14, 1 << 30):
        assert sum(u.size for u in csv_reader.plan(source, 0, files, unit_bytes)) == \
            csv_reader.input_bytes(source, files, unit_bytes)


def test_a_stray_quote_is_parsed_past_and_cutting_goes_on(tmp_path):
    """A quote inside an unquoted field (or one that opens a field running over lines) ended the
    cuts: the rest of the file was one unit. Its record is parsed by the csv module and the proof
    starts again after it, so the units after it are cut too, each at a record start; after
    MAX_RESYNCS such records cutting stops (a file whose fields are never quoted)."""
    good = [(i, f"row {i} " + "y" * 40) for i in range(4000)]
    for stray_row in (b'5,a "stray" quote in an unquoted field\n', b'5,"Hi," she said\n',
                      b'5,"opens\n6,and runs on\n7,to a close" and on\n'):
        data = write_csv([("id", "text"), *good[:2000]]) + stray_row + write_csv(good[2000:])
        path = tmp_path / "c.csv"
        path.write_bytes(data)
        stray = data.index(stray_row)
        truth = record_starts(data, ",")
        for scan_block in (1 << 23, 1000, 37):
            old, csv_reader.SCAN_BLOCK = csv_reader.SCAN_BLOCK, scan_block
            try:
                cuts = csv_reader.record_cuts(io.BytesIO(data), 1 << 16, Dialect(","))
            finally:
                csv_reader.SCAN_BLOCK = old
            assert set(cuts) <= truth and any(c > stray for c in cuts)
            assert cuts == sorted(cuts) and all(b - a >= 1 << 16 for a, b in zip(cuts, cuts[1:]))
        units, texts, _, bad = read_all(path, SourceConfig(path=str(path)), 1 << 16)
        assert len(units) > 2 and units[-1].start > stray
        want = [r[1] for r in csv.reader(io.StringIO(data.decode(), newline=""))][1:]
        assert texts == want and not bad
    many = write_csv([("id", "text")]) + b"".join(b'%d,said "x" %s\n' % (i, b"y" * 200) for i in range(2000))
    cuts = csv_reader.record_cuts(io.BytesIO(many), 1 << 12, Dialect(","))
    assert len(cuts) < csv_reader.MAX_RESYNCS + 1 and set(cuts) <= record_starts(many, ",")


def test_bad_rows_are_rejected_by_reason(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b"\xef\xbb\xbfid,text\n1,good\n2,too,many\n3\n4,bad \xff utf8\n5,\"multi\nline\"\n\n"
                     b"6," + b"z" * 300 + b"\n7,last\n")
    source = SourceConfig(path=str(path), max_record_bytes=200)
    _, texts, positions, bad = read_all(path, source, 1 << 20)
    assert texts == ["good", "multi\nline", "last"]
    assert [(r["reason"], r["row"]) for r in bad] == [
        ("wrong_column_count", 1), ("wrong_column_count", 2), ("invalid_utf8", 3), ("record_too_large", 5)]
    data = path.read_bytes()
    assert [r["position"] for r in bad] == [data.index(b"2,"), data.index(b"3\n"), data.index(b"4,"),
                                            data.index(b"6,")]
    replaced = read_all(path, SourceConfig(path=str(path), encoding_errors="replace"), 1 << 20)[1]
    assert "bad \ufffd utf8" in replaced


def test_oversized_quoted_record_is_skipped_by_quote_parity(tmp_path):
    huge = "q" * 50_000 + "\n" + "r" * 50_000
    path = tmp_path / "c.csv"
    path.write_bytes(write_csv([("id", "text"), (1, "before"), (2, huge), (3, "after")]))
    orig = csv_reader.READ_BLOCK
    csv_reader.READ_BLOCK = 4096
    try:
        _, texts, _, bad = read_all(path, SourceConfig(path=str(path), max_record_bytes=10_000), 1 << 20)
    finally:
        csv_reader.READ_BLOCK = orig
    assert texts == ["before", "after"]
    assert [r["reason"] for r in bad] == ["record_too_large"]


def test_template_and_missing_column(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_bytes(write_csv([("title", "body"), ("T1", "B1"), ("T2", "B2")], "\t"))
    source = SourceConfig(path=str(path), text_template="{title}\n\n{body}")
    assert read_all(path, source, 1 << 20)[1] == ["T1\n\nB1", "T2\n\nB2"]
    with pytest.raises(PrepError, match=r"text_field 'text' is not a column; the header has 'title', 'body'"):
        read_all(path, SourceConfig(path=str(path)), 1 << 20)



def test_a_text_column_named_twice_in_the_header_stops_the_run(tmp_path):
    """`text,id,text`: the text was the first `text` column for text_field and the last for a template
    "{text}" (records became dicts, the last key kept), each read silently. A repeated other column is
    no matter."""
    path = tmp_path / "c.csv"
    path.write_bytes(write_csv([("text", "id", "text"), ("first", "1", "last")]))
    for source in (SourceConfig(path=str(path)), SourceConfig(path=str(path), text_template="{text}!")):
        with pytest.raises(PrepError, match=r"c\.csv: the header has 2 columns named 'text' \(columns 1, 3, counting "
                                            r"from 1\), so which holds the text is unclear; rename them apart"):
            read_all(path, source, 1 << 20)
    other = tmp_path / "d.csv"
    other.write_bytes(write_csv([("a", "a", "text"), ("x", "y", "body")]))
    assert read_all(other, SourceConfig(path=str(other)), 1 << 20)[1] == ["body"]
    assert read_all(other, SourceConfig(path=str(other), text_template="{text}."), 1 << 20)[1] == ["body."]

def test_error_policy_names_file_and_row(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b"id,text\n1,ok\n2,x,y\n")
    unit = WorkUnit(0, 0, 0, str(path), "csv", 0, -1, path.stat().st_size)
    with pytest.raises(PrepError, match=r"c\.csv at row 1: wrong_column_count: 3 fields, the header has 2"):
        list(csv_reader.iter_batches(unit, SourceConfig(path=str(path)), BadRecords(unit, "error"), 10))


CSV_PIECE = st.one_of(st.tuples(FIELD, FIELD).map(lambda r: write_csv([r])),
                      st.sampled_from([b'x "stray" y,1\n', b"\n", b"1,2,3\n", b"bad \xff,utf8\n", b"lone\rcr,1\n"]))


@settings(max_examples=120, deadline=None)
@given(st.lists(CSV_PIECE, min_size=1, max_size=40), st.sampled_from([",", "\t"]), st.integers(8, 200),
       st.booleans())
def test_a_compressed_csv_is_cut_at_the_plain_files_cuts(tmp_path_factory, pieces, delimiter, unit_bytes, gz):
    """A .gz/.zst CSV is planned as ranges of its decompressed bytes; the spooler moves each range's
    start to the cut the plain file's scan makes (a proven record start), so unit by unit the windows
    hold the plain file's units' records, and together every record once, as one sequential read."""
    import gzip

    import zstandard
    data = write_csv([("id", "text")], delimiter) + b"".join(
        p.replace(b",", delimiter.encode()) if delimiter == "\t" else p for p in pieces)
    d = tmp_path_factory.mktemp("c")
    name = "c.tsv" if delimiter == "\t" else "c.csv"
    plain, packed = d / name, d / (name + (".gz" if gz else ".zst"))
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data) if gz else zstandard.ZstdCompressor().compress(data))
    source = SourceConfig(path=str(plain), max_record_bytes=None)
    def read(path, unit_bytes, spool):
        units = csv_reader.plan(source, 0, [str(path)], unit_bytes)
        return read_spooled(csv_reader, source, units, d / spool, 7, csv_dialects={0: Dialect(delimiter)})

    whole = [(t, p) for _, ts, ps, _ in read(plain, 1 << 30, "s0")[1] for t, p in zip(ts, ps)]
    plain_units, want = read(plain, unit_bytes, "s1")
    got_units, got = read(packed, unit_bytes, "s2")

    def flat(per_unit):
        return ([(t, p) for _, ts, ps, _ in per_unit for t, p in zip(ts, ps)], [r for *_, rows in per_unit for r in rows])

    assert flat(got) == flat(want) and flat(got)[0] == whole
    truth = record_starts(data, delimiter) | {len(data)}
    bases = [base for base, *_ in got if base is not None]
    assert all(base in truth for base in bases) and bases == sorted(bases)
    if len(got_units) > 1:  # spooled; the first cuts are the plain file's (it may have fewer units)
        assert all(u.is_spooled for u in got_units)
        assert bases[:len(plain_units)] == [u.start for u in plain_units][:len(bases)]


def test_invalid_utf8_in_another_column_is_rejected_on_the_columnar_path(tmp_path):
    """pyarrow checks UTF-8 only in columns it converts: every column is converted, so a block whose
    only flaw is a bad byte outside the text column still goes to the csv module, which rejects it."""
    path = tmp_path / "c.csv"
    path.write_bytes(b"id,text\n" + b"".join(b"%d,row %d\n" % (i, i) for i in range(50)) + b"\xff7,bad id\n")
    _, texts, _, bad = read_all(path, SourceConfig(path=str(path)), 1 << 20)
    assert texts == [f"row {i}" for i in range(50)]
    assert [(r["reason"], r["row"]) for r in bad] == [("invalid_utf8", 50)]


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECE, max_size=80), DIALECTS)
def test_record_ends_looking_only_outside_quotes_equals_listing_every_newline(pieces, dialect):
    """The two ways `_record_ends` finds newlines and CRs outside quotes agree on any bytes."""
    import numpy as np
    a = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    near = csv_reader._Near(dialect)
    gathered = csv_reader._record_ends(a, near, gather_fraction=1.0, quoted=dialect.quoted)
    listed = csv_reader._record_ends(a, near, gather_fraction=-1.0, quoted=dialect.quoted)
    assert gathered[0].tolist() == listed[0].tolist() and gathered[1] == listed[1]


UNQUOTED_FIELD = st.text(alphabet=st.sampled_from(list('ab ,;"\'\u00e9x')), max_size=10)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(UNQUOTED_FIELD, min_size=1, max_size=3), min_size=1, max_size=40),
       st.sampled_from(["\t", ","]), st.integers(1, 64), st.booleans())
def test_quoting_none_reads_every_line_as_a_row(tmp_path_factory, rows, delimiter, unit_bytes, crlf):
    """source.quoting: none. Every line is a row split at the delimiter, its quotes kept as text,
    whatever they look like (`"Hi," she said.` lost its quotes and `"open` ran on under CSV quoting);
    a line with another field count is rejected; cuts fall after any newline, so units read each
    line once."""
    rows = [[f.replace(delimiter, "") for f in r] for r in rows]
    end = "\r\n" if crlf else "\n"
    data = ("id" + delimiter + "text" + end + "".join(delimiter.join(r) + end for r in rows)).encode()
    path = tmp_path_factory.mktemp("q") / ("q.tsv" if delimiter == "\t" else "q.csv")
    path.write_bytes(data)
    source = SourceConfig(path=str(path), quoting="none", max_record_bytes=None)
    dialect = Dialect(delimiter, quoted=False)
    assert csv_reader.dialect_of(source) == dialect
    line_starts = {0} | {i + 1 for i, b in enumerate(data) if b == 10}
    cuts = [c for c in csv_reader.record_cuts(io.BytesIO(data), unit_bytes, dialect) if c < len(data)]
    greedy, target = [], unit_bytes  # the first line start at or after each target: every newline is a record end
    for start in sorted(line_starts - {len(data)}):
        if start >= target:
            greedy.append(start)
            target = start + unit_bytes
    assert cuts == greedy
    units, texts, _, bad = read_all(path, source, unit_bytes)
    offsets = np.cumsum([len(("id" + delimiter + "text" + end).encode())]
                        + [len((delimiter.join(r) + end).encode()) for r in rows]).tolist()
    records = [(r, at) for r, at in zip(rows, offsets) if r != [""]]  # an empty line is no record
    assert texts == [r[1] for r, _ in records if len(r) == 2]
    assert [(b["reason"], b["position"]) for b in bad] == [("wrong_column_count", at) for r, at in records
                                                           if len(r) != 2]
    assert all(u.start in line_starts for u in units)


def read_notices(path: Path, source: SourceConfig, unit_bytes: int) -> tuple[list[str], list[dict], list[dict]]:
    """Texts, rejects and each unit's notices (readers.base.BadRecords.notice)."""
    texts, bad, notices = [], [], []
    for u in csv_reader.plan(source, 0, [str(path)], unit_bytes):
        b = BadRecords(u, "skip")
        for batch in csv_reader.iter_batches(u, source, b, 7):
            texts += batch.texts
        bad += b.rows
        notices.append(b.notices)
    return texts, bad, notices


def test_a_quote_left_open_at_the_end_is_rejected_not_read_as_the_rest_of_the_file(tmp_path):
    """`2,"open` with no closing quote: the csv module (not strict) gave one record holding every later
    line, silently (pandas and pyarrow refuse the file). It is rejected as unclosed_quote, with a
    notice naming source.quoting: none, which reads the lines as rows."""
    path = tmp_path / "c.tsv"
    data = b"id\ttext\n1\tok\n2\t\"open\n" + b"".join(b"%d\tline %d\n" % (i, i) for i in range(3, 400))
    path.write_bytes(data)
    for unit_bytes in (1 << 20, 256):  # a plan cut into ranges: no cut after the open quote (parity)
        texts, bad, notices = read_notices(path, SourceConfig(path=str(path)), unit_bytes)
        assert texts == ["ok"]
        assert [(b["reason"], b["position"], b["text"][:15]) for b in bad] == [
            ("unclosed_quote", data.index(b"2\t"), "2\topen\n3\tline 3")]
        opened = [n["unclosed_quote"] for n in notices if "unclosed_quote" in n]
        assert opened == [f"{path}: the quoted field of the record at byte {data.index(b'2'):,} never closes; its "
                          f"{len(data) - data.index(b'2'):,} bytes to the end of the file were rejected as "
                          "unclosed_quote; if its fields are never quoted (a TSV from cut or psql, a sentence "
                          "corpus), set source.quoting: none"]
    texts, bad, notices = read_notices(path, SourceConfig(path=str(path), quoting="none"), 256)
    assert texts == ["ok", '"open'] + [f"line {i}" for i in range(3, 400)] and not bad
    assert not any(notices)
    closed = tmp_path / "closed.tsv"  # a quoted field running over lines and closed is no notice
    closed.write_bytes(b'id\ttext\n1\t"two\nlines"\n2\t"x"\n')
    assert read_notices(closed, SourceConfig(path=str(closed)), 1 << 20) == (["two\nlines", "x"], [], [{}])


def test_a_stray_quote_reads_as_pandas_does_and_says_so_once_per_unit(tmp_path):
    """`"Hi," she said.` in a TSV of sentences: read with CSV quoting it becomes `Hi, she said.` (the
    csv module's and pandas' reading, kept), and the unit says where the first such quote is and names
    source.quoting: none, under which the sentence keeps its quotes and no notice is given."""
    sentences = [f"sentence {i}" for i in range(300)]
    sentences[120] = '"Hi," she said.'
    sentences[200] = 'a "word" inside'
    data = b"id\ttext\n" + b"".join(f"{i}\t{s}\n".encode() for i, s in enumerate(sentences))
    path = tmp_path / "s.tsv"
    path.write_bytes(data)
    texts, bad, notices = read_notices(path, SourceConfig(path=str(path)), 1 << 20)
    assert texts == sentences[:120] + ["Hi, she said."] + sentences[121:] and not bad
    at = data.index(b'," she') + 1
    message = (f"{path}: the quote at byte {at:,} is inside a field, not at its start or end "
                                       f"(line '120\\t\"Hi,\" she said.'), so the file is not quoted as CSV; if its "
                                       "fields are never quoted (a TSV from cut or psql, a sentence corpus), set "
                                       "source.quoting: none, else a field that starts with a quote loses it and "
                                       "may run on over the lines after it")
    assert notices == [{"stray_quote": message}]
    second = data.index(b'"word"')  # an opening quote after a space: the next unit's first, or none
    message2 = message.replace(f"byte {at:,}", f"byte {second:,}").replace(
        "'120\\t\"Hi,\" she said.'", "'200\\ta \"word\" inside'")
    assert message2 != message and f"byte {second:,}" in message2 and "'200" in message2
    for unit_bytes in range(16, 400, 3):  # whichever unit holds a quote's line says so, once
        texts, bad, notices = read_notices(path, SourceConfig(path=str(path)), unit_bytes)
        said = [n["stray_quote"] for n in notices if n]
        units = csv_reader.plan(SourceConfig(path=str(path)), 0, [str(path)], unit_bytes)
        apart = any(data.index(b"120\t") < u.start <= second for u in units)  # the quotes in two units
        assert len(notices) >= 2 and texts[120] == "Hi, she said."
        assert said == ([message, message2] if apart else [message])
    texts, bad, notices = read_notices(path, SourceConfig(path=str(path), quoting="none"), 1 << 20)
    assert texts == sentences and not bad and notices == [{}]
    clean = tmp_path / "clean.csv"  # well-formed CSV quoting: no notice
    clean.write_bytes(write_csv([("id", "text"), *((i, f'"{s}", with, commas') for i, s in enumerate(sentences))]))
    assert read_notices(clean, SourceConfig(path=str(clean)), 1 << 20)[2] == [{}]


def test_a_file_without_a_header_row_reads_with_source_columns(tmp_path):
    """Tatoeba's sentences file has no header: `id<TAB>lang<TAB>text` rows from the first line. Its first
    row was taken for the header, and the error said only that 'text' is not a column; it now says the
    header looks like data and names source.columns, with which every row is read, in any unit."""
    rows = [(i, "eng" if i % 2 else "cmn", f"sentence {i} " + "w" * (i % 30)) for i in range(1, 400)]
    rows[5] = (6, "eng", '"Hi," she said.')
    data = "".join(f"{i}\t{lang}\t{text}\n" for i, lang, text in rows).encode()
    path = tmp_path / "sentences.tsv"
    path.write_bytes(data)
    with pytest.raises(PrepError, match=re.escape(
            f"{path}: text_field 'text' is not a column; the header has '1', 'eng', 'sentence 1 w'; set "
            "source.text_field, or, as the header looks like a row of data, name the columns of a file without a "
            "header row: source.columns: [c0, c1, c2] (then text_field: one of them)")):
        read_all(path, SourceConfig(path=str(path)), 1 << 20)
    source = SourceConfig(path=str(path), columns=["id", "lang", "text"], quoting="none")
    for unit_bytes in (1 << 20, 1000):
        units, texts, positions, bad = read_all(path, source, unit_bytes)
        assert texts == [text for _, _, text in rows] and not bad
        assert positions[0] == 0 and (len(units) > 1) == (unit_bytes < len(data))  # the first row is data
    with_template = SourceConfig(path=str(path), columns=["id", "lang", "text"], quoting="none",
                                 text_template="[{lang}] {text}")
    assert read_all(path, with_template, 1000)[1][:2] == ["[eng] sentence 1 w", "[cmn] sentence 2 ww"]
    short = tmp_path / "short.tsv"
    short.write_bytes(b"1\teng\tok\n2\tonly two\n")
    _, texts, _, bad = read_all(short, SourceConfig(path=str(short), columns=["id", "lang", "text"]), 1 << 20)
    assert texts == ["ok"] and [(b["reason"], b["row"]) for b in bad] == [("wrong_column_count", 1)]


def test_the_plan_says_at_once_when_stray_quotes_leave_one_worker_the_rest(tmp_path, caplog):
    """Past MAX_RESYNCS stray quotes the plan stops cutting: the rest of the file is one unit. When that
    rest is several units' worth, the plan warns then (naming the quote cutting stopped at and
    source.quoting: none), not only the run's note at the end. A few stray quotes are parsed past:
    no warning, and the file is cut to its end."""
    lines = [b"%d\tsentence %d\n" % (i, i) for i in range(6000)]
    few = b"id\ttext\n" + b"".join(b'%d\t"Hi," she said.\n' % i if i in (10, 3000) else line
                                   for i, line in enumerate(lines))
    many = b"id\ttext\n" + b"".join(b'%d\t"Hi," she said.\n' % i if i % 50 == 0 else line
                                    for i, line in enumerate(lines))
    path = tmp_path / "s.tsv"
    for data, warned in ((few, False), (many, True)):
        path.write_bytes(data)
        caplog.clear()
        with caplog.at_level("WARNING", logger="prep"):
            units = csv_reader.plan(SourceConfig(path=str(path)), 0, [str(path)], 1 << 12)
        quotes = [m.start() + 1 for m in re.finditer(rb'," she', data)]  # closing quotes followed by a space
        stopped_at = quotes[csv_reader.MAX_RESYNCS] if warned else -1
        assert [r.getMessage().split(" is inside")[0] for r in caplog.records] == (
            [f"{path}: the quote at byte {stopped_at:,}"] if warned else [])
        assert all("set source.quoting: none" in r.getMessage() for r in caplog.records)
        assert (units[-1].start < stopped_at) if warned else (units[-1].start > data.index(b'3000\t"Hi'))
    caplog.clear()
    with caplog.at_level("WARNING", logger="prep"):
        units = csv_reader.plan(SourceConfig(path=str(path), quoting="none"), 0, [str(path)], 1 << 12)
        csv_reader.plan(SourceConfig(path=str(path)), 0, [str(path)], len(many) // 2)  # the rest: under 2 units
    assert len(units) > 4 and not caplog.records


def test_the_stray_quotes_warning_gives_a_small_rest_in_tenths_of_a_mb(tmp_path, caplog):
    """The rest left to one worker is over 2 x unit_bytes, 128 KiB at the smallest unit_bytes a recipe
    takes: it was said in whole MB, "its last 0 MB are not cut" for a rest under 0.5 MB."""
    lines = [b"%d\tsentence number %d of the file\n" % (i, i) for i in range(12000)]
    data = b"id\ttext\n" + b"".join(b'%d\t"Hi," she said.\n' % i if i % 50 == 0 else line
                                    for i, line in enumerate(lines))
    path = tmp_path / "s.tsv"
    path.write_bytes(data)
    with caplog.at_level("WARNING", logger="prep"):
        csv_reader.plan(SourceConfig(path=str(path)), 0, [str(path)], 1 << 16)
        csv_reader._warn_one_unit("big.tsv", 1000, 1000 + 3_456_789_000, 1 << 24)
    stopped_at = [m.start() + 1 for m in re.finditer(rb'," she', data)][csv_reader.MAX_RESYNCS]
    rest = (len(data) - stopped_at) / 1e6
    assert 0.05 < rest < 0.5  # "0 MB" before
    assert [re.search(r"its last (\S+ MB) are not cut", r.getMessage()).group(1) for r in caplog.records] == [
        f"{rest:.1f} MB", "3456.8 MB"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(CSV_PIECE, PIECE), max_size=50), st.sampled_from([",", "\t"]), st.integers(1, 40),
       st.sampled_from([1, 3, 16, 1 << 20]), st.integers(0, 3), st.sampled_from([1, 4, 1 << 20]))
def test_cuts_past_stray_quotes_are_record_starts_whatever_the_blocks(tmp_path_factory, pieces, delimiter, unit_bytes,
                                                                      scan_block, max_resyncs, scan_piece):
    """On any bytes (stray quotes, quotes left open, lone CRs, NUL): every cut is a record start of a
    sequential csv module read, the cuts do not depend on how the stream is split into blocks, and a
    cut falls at or after every target (none before unit_bytes past the last)."""
    data = b"".join(p.replace(b",", delimiter.encode()) if delimiter == "\t" else p for p in pieces)
    assume(not csv_reader._CSV_REFUSES_NUL or b"\x00" not in data)
    truth = record_starts(data, delimiter) | {len(data)}
    old = csv_reader.SCAN_BLOCK, csv_reader.MAX_RESYNCS, csv_reader.SCAN_PIECE
    csv_reader.MAX_RESYNCS = max_resyncs
    try:
        csv_reader.SCAN_BLOCK = 1 << 20
        whole = csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter))
        csv_reader.SCAN_BLOCK, csv_reader.SCAN_PIECE = scan_block, scan_piece  # the rescans' pieces too
        blocks = csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter))
    finally:
        csv_reader.SCAN_BLOCK, csv_reader.MAX_RESYNCS, csv_reader.SCAN_PIECE = old
    assert blocks == whole
    assert set(whole) <= truth
    assert all(b - a >= unit_bytes for a, b in zip([0, *whole], whole))
    path = tmp_path_factory.mktemp("s") / ("s.tsv" if delimiter == "\t" else "s.csv")
    path.write_bytes(b"id" + delimiter.encode() + b"text\n" + data)  # read in units: what one read gives
    source = SourceConfig(path=str(path), max_record_bytes=None)
    csv_reader.MAX_RESYNCS = max_resyncs
    try:
        one = read_all(path, source, 1 << 30)
        cut = read_all(path, source, unit_bytes)
    finally:
        csv_reader.MAX_RESYNCS = old[1]
    assert cut[1:3] == one[1:3]  # texts and positions
    assert [(b["reason"], b["position"]) for b in cut[3]] == [(b["reason"], b["position"]) for b in one[3]]


def test_a_stray_quotes_record_is_parsed_from_its_start_blocks_before(tmp_path):
    """The record holding a stray quote is parsed from its own start, which may be blocks back (a quoted
    field over many lines before the stray quote), and may run on after it (a later field quoted over
    lines, holding what looks like a row): the cut after it is where the csv module's next record
    starts, whatever the scan's block size."""
    before = b"".join(b"%d,plain,row %d\n" % (i, i) for i in range(300))
    odd = b'300,"' + b"quoted line, with a comma\n" * 40 + b'"junk,"runs on\n301,fake,row\nto here"\n'
    after = b"".join(b"%d,plain,row %d\n" % (i, i) for i in range(302, 600))
    again = odd.replace(b"300,", b"600,").replace(b"301,", b"601,")  # a second one, after the proof restarted
    data = b"id,a,text\n" + before + odd + after + again + after
    path = tmp_path / "c.csv"
    path.write_bytes(data)
    truth = record_starts(data, ",")
    got = {}
    for scan_block, scan_piece in ((7, 1 << 20), (64, 5), (500, 1 << 20), (1 << 20, 5), (1 << 20, 300), (1 << 20, 1 << 20)):
        old = csv_reader.SCAN_BLOCK, csv_reader.SCAN_PIECE
        csv_reader.SCAN_BLOCK, csv_reader.SCAN_PIECE = scan_block, scan_piece  # pieces: what follows a stray quote
        try:
            got[scan_block, scan_piece] = csv_reader.record_cuts(io.BytesIO(data), 512, Dialect(","))
        finally:
            csv_reader.SCAN_BLOCK, csv_reader.SCAN_PIECE = old
    cuts = got[1 << 20, 1 << 20]
    assert all(c == cuts for c in got.values()) and set(cuts) <= truth
    old = csv_reader.SCAN_PIECE
    try:
        for unit_bytes in range(40, 400, 9):  # a cut due inside the second one's lines, its record in pieces
            csv_reader.SCAN_PIECE = 1 << 20
            want = csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(","))
            csv_reader.SCAN_PIECE = 5
            assert csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(",")) == want
            assert set(want) <= truth
    finally:
        csv_reader.SCAN_PIECE = old
    assert any(c > data.index(b"junk") for c in cuts) and data.index(b"301,fake") not in cuts
    units, texts, _, bad = read_all(path, SourceConfig(path=str(path)), 512)
    assert len(units) > 10 and not bad
    assert texts == [r[2] for r in csv.reader(io.StringIO(data.decode(), newline=""))][1:]
    assert "runs on\n301,fake,row\nto here" in texts and "runs on\n601,fake,row\nto here" in texts


# delimiters of 2 to 4 bytes in UTF-8, and characters that share a byte with one of them: `ç` (C3 A7) ends
# in `§`'s last byte, `Â` (C3 82) in `│`'s, `─` (E2 94 80) starts with `│`'s first two, `¢` (C2 A2) with
# `§`'s first
WIDE = ["\u00a7", "\u00fe", "\u2502", "\U0001f600"]
WIDE_FIELD = st.text(alphabet=st.sampled_from(list('ab ,"\n\r\u00e7\u00c2\u2500\u00a2\u20ac\U0001f601') + WIDE),
                     max_size=12)


def greedy_cuts(truth: set[int], unit_bytes: int, size: int) -> list[int]:
    """The cuts of a file whose every record start (`truth`) is proven: the first at or after each target."""
    cuts, target = [], unit_bytes
    for start in sorted(truth):
        if start >= target and start < size:
            cuts.append(start)
            target = start + unit_bytes
    return cuts


def csv_text(data: bytes, delimiter: str, column: int = 1) -> list[str]:
    """The column of every row after the header, as Python's csv module reads the file (no BOM)."""
    rows = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""), delimiter=delimiter)
    return [r[column] for r in rows][1:]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(WIDE_FIELD, WIDE_FIELD), min_size=1, max_size=30), WIDE_FIELD,
       st.sampled_from([*WIDE, ","]), st.booleans(), st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]),
       st.integers(1, 64))
def test_a_wide_delimiter_or_a_byte_order_mark_leaves_every_record_start_proven(
        tmp_path_factory, rows, name, delimiter, bom, quoting, unit_bytes):
    """source.delimiter `§`, `þ` (2 bytes in UTF-8), `│` (3), an emoji (4), and a file that starts with a
    UTF-8 byte order mark before a quoted header (`\ufeff"id","text"`, as Excel writes). `│` failed the
    plan with an IndexError; with `§` or `þ` a closing quote before the delimiter (0xC2 or 0xC3 after it,
    not the table's one byte) and with the BOM the header's first quote were stray quotes: parsed past
    one by one, up to MAX_RESYNCS, then the rest of the file was one unit, and the run's note said to set
    source.quoting: none, wrong for such a file. Well-formed CSV: every record start is proven, so the
    cuts are the first record start at or after each target, whatever the blocks, and the units read
    the csv module's rows with no notice."""
    assume(delimiter != "," or bom)
    data = (b"\xef\xbb\xbf" if bom else b"") + write_csv([(name, "text"), *rows], delimiter, quoting)
    greedy = greedy_cuts(record_starts(data, delimiter), unit_bytes, len(data))
    for block in (1, 2, 3, 5, len(data)):  # a delimiter's bytes and the BOM straddling blocks change nothing
        scan = csv_reader.CutScanner(unit_bytes, Dialect(delimiter))
        cuts = [c for i in range(0, len(data), block) for c in scan.feed(data[i:i + block])]
        assert [c for c in cuts if c < len(data)] == greedy
        assert scan.resyncs == 0 and not scan.stopped  # no quote taken for a stray one
    path = tmp_path_factory.mktemp("w") / "w.csv"
    path.write_bytes(data)
    source = SourceConfig(path=str(path), delimiter=delimiter, max_record_bytes=None)
    units = csv_reader.plan(source, 0, [str(path)], unit_bytes)
    assert [u.start for u in units] == [0, *greedy]
    texts, bad, notices = read_notices(path, source, unit_bytes)
    assert texts == csv_text(data, delimiter) and not bad and not any(notices)
    old = csv_reader.READ_BLOCK
    csv_reader.READ_BLOCK = 3  # a worker's reads end inside the delimiter, the BOM, after a closing quote
    try:
        assert read_notices(path, source, unit_bytes) == (texts, [], [{}] * len(units))
    finally:
        csv_reader.READ_BLOCK = old
    templated = SourceConfig(path=str(path), delimiter=delimiter, max_record_bytes=None, text_template="{text}")
    assert read_notices(path, templated, unit_bytes) == (texts, [], [{}] * len(units))


WIDE_PIECE = st.one_of(CSV_PIECE, PIECE, st.sampled_from(["\u00e7", "\u00c2", "\u2500", "\u00a2"]).map(str.encode))


@settings(max_examples=300, deadline=None)
@given(st.lists(WIDE_PIECE, max_size=40), st.integers(1, 23), st.integers(3, 60), st.sampled_from(WIDE), st.booleans(),
       st.booleans())
def test_fast_record_path_equals_the_exact_line_path_with_a_wide_delimiter_or_a_bom(pieces, block, limit, delimiter,
                                                                                   quoted, bom):
    """As test_fast_record_path_equals_the_exact_line_path_on_any_input, with a delimiter of several bytes
    (its bytes, a closing quote's next ones, split across reads) and a byte order mark or none."""
    data = (b"\xef\xbb\xbf" if bom else b"") + b"".join(p.replace(b",", delimiter.encode()) for p in pieces)
    dialect = Dialect(delimiter, quoted)
    assert_fast_equals_exact(data, block, limit, dialect)


@settings(max_examples=200, deadline=None)
@given(st.lists(WIDE_PIECE, max_size=40),
       st.sampled_from(WIDE), st.booleans(), st.integers(1, 40), st.sampled_from([1, 2, 3, 16, 1 << 20]))
def test_cuts_with_a_wide_delimiter_or_a_bom_are_record_starts_on_any_bytes(tmp_path_factory, pieces, delimiter, bom,
                                                                           unit_bytes, scan_block):
    """On any bytes (stray quotes, bytes shared with the delimiter, invalid UTF-8, lone CRs), with a
    delimiter of several bytes and a byte order mark or none: every cut is a record start of a sequential
    csv module read (which drops the BOM), the cuts do not depend on the blocks, and a read in units gives
    the rows of one read."""
    wide = delimiter.encode()
    data = (b"\xef\xbb\xbf" if bom else b"") + b"".join(p.replace(b",", wide) for p in pieces)
    assume(not csv_reader._CSV_REFUSES_NUL or b"\x00" not in data)
    truth = record_starts(data, delimiter) | {len(data)}
    old = csv_reader.SCAN_BLOCK, csv_reader.SCAN_PIECE
    try:
        csv_reader.SCAN_BLOCK = 1 << 20
        whole = csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter))
        csv_reader.SCAN_BLOCK, csv_reader.SCAN_PIECE = scan_block, scan_block
        blocks = csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter))
    finally:
        csv_reader.SCAN_BLOCK, csv_reader.SCAN_PIECE = old
    assert blocks == whole and set(whole) <= truth
    path = tmp_path_factory.mktemp("s") / "s.csv"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"id" + wide + b"text\n" + data[3 if bom else 0:])
    source = SourceConfig(path=str(path), delimiter=delimiter, max_record_bytes=None)
    one, cut = read_all(path, source, 1 << 30), read_all(path, source, unit_bytes)
    assert cut[1:3] == one[1:3]  # texts and positions
    assert [(b["reason"], b["position"]) for b in cut[3]] == [(b["reason"], b["position"]) for b in one[3]]


def test_every_byte_of_a_wide_delimiter_is_checked_not_one(tmp_path):
    """A rule on one byte of the delimiter is not enough: with `§` (C2 A7), `ç"` (C3 A7 22) passed as a
    quote after a delimiter, and with `│` (E2 94 82), `"─` (22 E2 94 80) as one before a delimiter and
    `Â"` (C3 82 22) as one after; the csv module reads those quotes as text, so quote parity flipped and
    a cut fell inside a quoted field (its lines read as records, or a parse error). Only the delimiter's
    every byte makes a quote well formed."""
    fill = "".join(f"{i}{{d}}row {i}\n" for i in range(40))
    for delimiter, trap in (("\u00a7", '1{d}\u00e7"\n2{d}"\nx \u00e7"\n3{d}y\n'),
                            ("\u2502", '1{d}"a"\u2500\u00c2"\n2{d}"\nx"\n3{d}y\n')):
        data = ("id{d}text\n" + fill + trap + fill).replace("{d}", delimiter).encode()
        truth = record_starts(data, delimiter) | {len(data)}
        assert data.index(b"\nx") + 1 not in truth  # the trap: a line inside a quoted field
        for unit_bytes in range(1, 200, 3):
            assert set(csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter))) <= truth
        path = tmp_path / "t.csv"
        path.write_bytes(data)
        source = SourceConfig(path=str(path), delimiter=delimiter)
        for unit_bytes in range(8, 400, 11):
            units, texts, _, bad = read_all(path, source, unit_bytes)
            assert texts == csv_text(data, delimiter) and not bad
            assert len(units) > len(data) // unit_bytes // 2  # cut all along (the trap is one stray quote)


def test_a_byte_order_mark_before_a_quoted_header_is_the_file_start(tmp_path):
    """`\ufeff"text","id"` (Excel's "CSV UTF-8"): the quote after the BOM opens the header's first field,
    as the csv module reads it once the BOM is dropped, so the file is cut as without a BOM, no notice
    says to set source.quoting: none, and the column is `text`, not `\ufefftext`. A stray quote in the
    header's record is parsed from the file start without the BOM too: in `\ufeff"a\n" x,text` the second
    quote closes the field the first opened; read with the BOM, the first was text and the second opened a
    field over the next lines, and the record's end, a cut, fell inside a later record."""
    rows = [(f'line {i}, "quoted"\nsecond', i) for i in range(2000)]
    data = b"\xef\xbb\xbf" + write_csv([("text", "id"), *rows], ",", csv.QUOTE_ALL)
    path = tmp_path / "b.csv"
    path.write_bytes(data)
    source = SourceConfig(path=str(path))  # text_field: text, the first column
    units = csv_reader.plan(source, 0, [str(path)], 1 << 12)
    assert [u.start for u in units] == [0, *greedy_cuts(record_starts(data, ","), 1 << 12, len(data))]
    assert len(units) > 10
    texts, bad, notices = read_notices(path, source, 1 << 12)
    assert texts == [t for t, _ in rows] == csv_text(data, ",", 0) and not bad and not any(notices)
    odd = b'\xef\xbb\xbf"a\n" x,text\n1,one\n2,"x\ny"\n'
    truth = record_starts(odd, ",") | {len(odd)}
    assert truth == {0, odd.index(b"1,"), odd.index(b"2,"), len(odd)}
    for unit_bytes in range(1, 30):
        for block in (1, 4, 1 << 20):
            scan = csv_reader.CutScanner(unit_bytes, Dialect(","))
            cuts = [c for i in range(0, len(odd), block) for c in scan.feed(odd[i:i + block])]
            assert set(cuts) <= truth
    path.write_bytes(odd)
    for unit_bytes in (1, 8, 1 << 20):
        units, texts, _, bad = read_all(path, SourceConfig(path=str(path)), unit_bytes)
        assert texts == ["one", "x\ny"] == csv_text(odd, ",") and not bad


def test_a_compressed_csv_with_a_wide_delimiter_or_a_bom_is_cut_as_the_plain_file(tmp_path):
    """The spooler cuts a .zst CSV with the same scan (CutScanner) on its decompressed stream: with `│`
    or a BOM before a quoted header, at the plain file's cuts, every record read once."""
    import zstandard
    rows = [(i, f'line {i}, "q"\u2502\n\u00e7\u2500 ' + "x" * (i % 40)) for i in range(1500)]
    for delimiter, bom in (("\u2502", False), ("\u2502", True), (",", True)):
        data = (b"\xef\xbb\xbf" if bom else b"") + write_csv([("id", "text"), *rows], delimiter, csv.QUOTE_ALL)
        plain, packed = tmp_path / "c.csv", tmp_path / "c.csv.zst"
        plain.write_bytes(data)
        packed.write_bytes(zstandard.ZstdCompressor().compress(data))
        source = SourceConfig(path=str(plain), delimiter=delimiter)
        plain_units = csv_reader.plan(source, 0, [str(plain)], 1 << 13)
        units = csv_reader.plan(source, 0, [str(packed)], 1 << 13)
        _, got = read_spooled(csv_reader, source, units, tmp_path / f"spool{delimiter}{bom}", 7,
                              csv_dialects={0: Dialect(delimiter)})
        assert [t for _, ts, _, _ in got for t in ts] == [r[1] for r in rows] == csv_text(data, delimiter)
        assert not any(rejects for *_, rejects in got)
        assert len(plain_units) > 5 and [base for base, *_ in got][:len(plain_units)] == [u.start for u in plain_units]
