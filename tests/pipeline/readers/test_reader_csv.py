"""CSV/TSV: byte-range cuts only at proven record boundaries; bad rows counted and listed."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import PrepError
from pipeline.readers import BadRecords, WorkUnit
from pipeline.readers import csv as csv_reader
from pipeline.recipe import SourceConfig

FIELD = st.text(alphabet=st.sampled_from(list('ab ,"\t\n\r\u00e9x')), max_size=12)


def write_csv(rows, delimiter=",") -> bytes:
    f = io.StringIO(newline="")
    csv.writer(f, delimiter=delimiter).writerows(rows)
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
            return line.decode("utf-8")
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
@given(st.lists(st.tuples(FIELD, FIELD), min_size=1, max_size=40), st.sampled_from([",", "\t"]),
       st.integers(1, 64))
def test_cuts_are_record_starts_and_units_read_every_row_once(tmp_path_factory, rows, delimiter, unit_bytes):
    data = write_csv([("id", "text"), *rows], delimiter)
    cuts = [c for c in csv_reader.record_cuts(io.BytesIO(data), unit_bytes, delimiter) if c < len(data)]
    truth = record_starts(data, delimiter)
    assert set(cuts) <= truth
    assert cuts == sorted(set(cuts))
    path = tmp_path_factory.mktemp("c") / ("c.tsv" if delimiter == "\t" else "c.csv")
    path.write_bytes(data)
    source = SourceConfig(path=str(path), text_field="text", max_record_bytes=None)
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


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab,"\n\r\t\u00e9 ')), max_size=80), st.integers(1, 23),
       st.integers(3, 60), st.sampled_from([",", "\t"]))
def test_fast_record_path_equals_the_exact_line_path_on_any_input(text, block, limit, delimiter):
    """numpy record boundaries + whole-record parsing == the csv module fed physical lines, for any
    bytes (stray quotes, lone \r, unclosed quotes), block size and max_record_bytes."""
    data = text.encode()
    old = csv_reader.READ_BLOCK
    csv_reader.READ_BLOCK = block
    try:
        fast = list(csv_reader._iter_rows(io.BytesIO(data), 0, -1, limit, delimiter))
        exact = list(csv_reader._slow_rows(io.BytesIO(data), 0, -1, limit, delimiter))
    finally:
        csv_reader.READ_BLOCK = old
    assert fast == exact


def test_big_file_is_cut_and_read_exactly_once(tmp_path):
    rows = [(i, f'line {i}, "quoted"\nsecond line\r\n{"x" * (i % 50)}') for i in range(3000)]
    path = tmp_path / "c.csv"
    path.write_bytes(write_csv([("id", "text"), *rows]))
    source = SourceConfig(path=str(path))
    units, texts, positions, bad = read_all(path, source, 1 << 16)
    assert len(units) > 3 and all(u.start in record_starts(path.read_bytes(), ",") for u in units)
    assert texts == [r[1] for r in rows] and not bad
    assert positions == sorted(positions) and len(set(positions)) == len(rows)


def test_stray_quote_stops_cutting_but_not_reading(tmp_path):
    good = [(i, f"row {i} " + "y" * 40) for i in range(4000)]
    data = write_csv([("id", "text"), *good[:2000]]) + b'5,a "stray" quote in an unquoted field\n' + write_csv(good[2000:])
    path = tmp_path / "c.csv"
    path.write_bytes(data)
    stray = data.index(b'a "stray"')
    cuts = csv_reader.record_cuts(io.BytesIO(data), 1 << 16, ",")
    assert cuts and all(c <= stray for c in cuts)  # cut before the anomaly, never after
    units, texts, _, bad = read_all(path, SourceConfig(path=str(path)), 1 << 16)
    assert units[-1].end == -1 and units[-1].start <= stray
    want = [r[1] for r in csv.reader(io.StringIO(data.decode(), newline=""))][1:]
    assert texts == want and not bad


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


def test_error_policy_names_file_and_row(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b"id,text\n1,ok\n2,x,y\n")
    unit = WorkUnit(0, 0, 0, str(path), "csv", 0, -1, path.stat().st_size)
    with pytest.raises(PrepError, match=r"c\.csv at row 1: wrong_column_count: 3 fields, the header has 2"):
        list(csv_reader.iter_batches(unit, SourceConfig(path=str(path)), BadRecords(unit, "error"), 10))
