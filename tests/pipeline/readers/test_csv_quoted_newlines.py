"""CSV plan scan: a long quoted field full of newlines and quotes costs a bounded number of Python
steps, and the cuts are the same whichever way the newlines outside quotes are found."""

from __future__ import annotations

import csv
import io

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline.readers import csv as csv_reader
from pipeline.readers.csv import Dialect
from tests.pipeline.readers.test_reader_csv import CSV_PIECE, PIECE, record_starts


def _csv_with_a_long_field(field_bytes: int) -> bytes:
    """Short rows, one row whose text is `field_bytes` of pretty-printed JSON (a newline and a quote
    every few bytes, written as "" inside the field), then short rows again."""
    body = '{\n "k": "v",\n' * (field_bytes // 14)
    f = io.StringIO(newline="")
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["id", "text"])
    w.writerows([i, f"row {i}"] for i in range(2000))
    w.writerow([2000, body])
    w.writerows([i, f"row {i}"] for i in range(2001, 4000))
    return f.getvalue().encode()


def test_a_megabyte_field_of_quoted_newlines_is_scanned_in_few_steps(monkeypatch):
    """Each quoted newline of the field was one bytes.find and one np.searchsorted in the parent's
    scan (~180,000 for this field, ~1 s per 8 MiB block): the rest of the field's newlines are now
    listed at once. The cuts are record starts either way."""
    data = _csv_with_a_long_field(2 << 20)
    calls = 0
    searchsorted = np.searchsorted

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return searchsorted(*args, **kwargs)

    monkeypatch.setattr(np, "searchsorted", counted)
    cuts = csv_reader.record_cuts(io.BytesIO(data), 1 << 16, Dialect(","))
    monkeypatch.setattr(np, "searchsorted", searchsorted)
    assert calls < 2_000
    limit = csv.field_size_limit(len(data))  # the ground truth's csv module reads the field whole
    try:
        assert set(cuts) <= record_starts(data, ",") | {len(data)}
    finally:
        csv.field_size_limit(limit)
    field_start = data.index(b'2000,"')
    field_end = data.index(b"\n2001,") + 1
    assert field_end in cuts  # the first record start after the target inside the field
    assert not [c for c in cuts if field_start < c < field_end]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(CSV_PIECE, PIECE), max_size=60), st.sampled_from([",", "\t"]), st.integers(1, 40),
       st.integers(0, 3), st.integers(1, 8), st.sampled_from([1, 5, 1 << 20]))
def test_listing_newlines_gives_the_cuts_that_stepping_gives(pieces, delimiter, unit_bytes, steps, list_bytes,
                                                            scan_block):
    """On any bytes: the cuts with every quoted newline stepped past one at a time equal those with
    the newlines listed after `steps` of them, in stretches of `list_bytes`, whatever the blocks."""
    data = b"".join(p.replace(b",", delimiter.encode()) if delimiter == "\t" else p for p in pieces)
    assume(not csv_reader._CSV_REFUSES_NUL or b"\x00" not in data)
    old = csv_reader.SCAN_BLOCK, csv_reader.FIND_STEPS, csv_reader.LIST_BYTES
    try:
        csv_reader.SCAN_BLOCK, csv_reader.FIND_STEPS = scan_block, 1 << 30
        stepped = csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter))
        csv_reader.FIND_STEPS, csv_reader.LIST_BYTES = steps, list_bytes
        listed = csv_reader.record_cuts(io.BytesIO(data), unit_bytes, Dialect(delimiter))
    finally:
        csv_reader.SCAN_BLOCK, csv_reader.FIND_STEPS, csv_reader.LIST_BYTES = old
    assert listed == stepped
    assert set(listed) <= record_starts(data, delimiter) | {len(data)}
