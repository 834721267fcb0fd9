"""JSONL fast line path: `iter_lines` (memoryview slices, split for short lines) gives the same
lines and offsets as an in-memory split and as the previous copying splitter, and `iter_batches` on top of it the same
texts, positions, rejects and progress as the previous implementation, for any block size and cut."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from unittest import mock

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import pipeline.readers.jsonl as jsonl
from pipeline.filters import Batcher, RecordError, TextExtractor
from pipeline.readers.base import BadRecords, ByteProgress, decode_errors, open_input
from pipeline.recipe import SourceConfig
from pipeline.spool import Spooler, open_window
from tests.conftest import reads_as_text
from tests.pipeline.readers import readerkit


def previous_iter_lines(f, start: int, end: int, max_bytes: int | None = None) -> Iterator[tuple[int, bytes]]:
    """The line splitter before memoryviews (copies every line), kept as the reference.

    (offset, line without newline) for lines whose first byte is in [start, end); end=-1: to EOF.

    `f` is positioned at `start` (a line start: 0, or right after a newline found by the caller).
    A line longer than `max_bytes` is yielded cut short (but still longer than `max_bytes`, so the
    caller can tell), and never held whole in memory.
    """
    pos = start
    pending: list[bytes] = []  # pieces of a line longer than one block (no O(n^2) re-concatenation)
    pending_len = 0
    cap = max_bytes + 2 if max_bytes is not None else None  # as iter_line_groups: + 2, a CR cut too
    while True:
        chunk = f.read(jsonl.READ_BLOCK)
        if not chunk:
            if pending and not 0 <= end <= pos:
                yield pos, b"".join(pending)
            return
        first_nl = chunk.find(b"\n")
        if first_nl < 0:
            if cap is None or pending_len < cap:
                pending.append(chunk)
            pending_len += len(chunk)
            continue
        if pending:
            if cap is None or pending_len < cap:
                pending.append(chunk[:first_nl])
            length = pending_len + first_nl
            line = b"".join(pending)
            pending, pending_len = [], 0
            if 0 <= end <= pos:
                return
            yield pos, line
            pos += length + 1
            chunk = chunk[first_nl + 1:]
        lines = chunk.split(b"\n")
        tail = lines.pop()
        for line in lines:
            if 0 <= end <= pos:
                return
            yield pos, line
            pos += len(line) + 1
        if 0 <= end <= pos:
            return
        if tail:
            pending.append(tail)
            pending_len = len(tail)

# DENSE_LINE_BYTES: 0 = always memoryviews, 512 = as shipped, huge = split every block after the first
DENSE = st.sampled_from([0, 512, 1 << 40])


@contextmanager
def blocks(read_block: int, dense: int):
    with (mock.patch.object(jsonl, "READ_BLOCK", read_block),
          mock.patch.object(jsonl, "DENSE_LINE_BYTES", dense)):
        yield


def _json_or_none(data: bytes, replace: bool):
    while data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for attempt in (data, data.decode("utf-8", "replace")) if replace else (data,):
        try:
            return orjson.loads(attempt)
        except orjson.JSONDecodeError:
            continue
    return None


def reference_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, line) of every line, from the whole file in memory."""
    out, offset = [], 0
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()  # a final newline ends the last line; it does not start an empty one
    for p in parts:
        out.append((offset, p))
        offset += len(p) + 1
    return out


def read_units(data: bytes, cut: int, reader, max_bytes: int | None):
    """Lines of each unit of `cut` bytes, and where each unit stopped reading (no read past what it needs)."""
    per_unit, stopped = [], []
    for start in range(0, max(len(data), 1), cut):
        end = min(start + cut, len(data))
        f = io.BytesIO(data)
        pos = jsonl.seek_line_start(f, start)
        got = list(reader(f, pos, end, max_bytes)) if pos < end else []
        per_unit.append([(o, bytes(line)) for o, line in got])
        stopped.append(f.tell())
    return per_unit, stopped


line_bytes = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b" ", b"\r", b"\t \x0c", b'{"text": "a"}\r']),
    st.integers(0, 200).map(lambda n: b"x" * n),  # long enough to span many small blocks
)


@settings(max_examples=300, deadline=None)
@given(st.lists(line_bytes, max_size=30), st.booleans(), st.integers(1, 64), DENSE, st.integers(1, 80),
       st.one_of(st.none(), st.integers(1, 60)))
def test_line_views_match_an_in_memory_split(lines, final_newline, block, dense, cut, max_bytes):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    with blocks(block, dense):
        fast, fast_stopped = read_units(data, cut, jsonl.iter_lines, max_bytes)
        slow, slow_stopped = read_units(data, cut, previous_iter_lines, max_bytes)
    assert fast == slow  # same offsets, and long lines cut at the same place
    assert fast_stopped == slow_stopped  # and no block read beyond the unit's last line
    for u, got in enumerate(fast):  # each unit owns the lines whose first byte lies in its range
        assert all(u * cut <= o < (u + 1) * cut for o, _ in got)
    got = [x for unit in fast for x in unit]
    expect = reference_lines(data)
    assert [o for o, _ in got] == [o for o, _ in expect]
    for (_, line), (_, whole) in zip(got, expect):
        if max_bytes is None or len(whole) <= max_bytes:
            assert line == whole
        else:  # cut short, still recognisably too long, never much more than the cap plus a block
            # (a line of max_bytes + 1 comes whole)
            assert whole.startswith(line) and (line == whole or max_bytes + 1 < len(line) <= max_bytes + 2 + block)


def test_lines_inside_a_block_are_views_not_copies():
    data = b"".join(b'{"text": "%d"}\n' % i for i in range(50))
    with blocks(1 << 20, 0):
        got = list(jsonl.iter_lines(io.BytesIO(data), 0, -1))
    assert all(isinstance(line, memoryview) for _, line in got)
    assert [(o, bytes(v)) for o, v in got] == reference_lines(data)
    with blocks(64, 1 << 40):  # short lines after the first block: split, as iter_lines does
        got = list(jsonl.iter_lines(io.BytesIO(data), 0, -1))
    assert [(o, bytes(v)) for o, v in got] == reference_lines(data)
    assert any(isinstance(line, bytes) for _, line in got)


# -- iter_batches, against the implementation it replaced ------------------------------------------

def old_iter_batches(unit, source, bad, batch_docs):
    """pipeline/readers/jsonl.py iter_batches before the memoryview line path (bytes lines via
    iter_lines, blankness checked before parsing)."""
    stream, raw = open_input(unit.path, source.storage_options)
    extract = TextExtractor(source.text_field, source.text_template)
    batcher = Batcher(source, bad, batch_docs)
    max_bytes = source.max_record_bytes
    limit = max_bytes if max_bytes is not None else float("inf")
    replace = source.encoding_errors == "replace"
    meter = ByteProgress(unit, stream, raw)
    count_lines = unit.start == 0
    with raw, stream, decode_errors(unit.path, raw):
        pos = jsonl.seek_line_start(stream, unit.start)
        lines = (previous_iter_lines(stream, pos, unit.end, max_bytes) if unit.end < 0 or pos < unit.end
                 else iter(()))
        for lineno, (offset, line) in enumerate(lines, 1):
            at = lineno if count_lines else None
            if len(line) > limit:
                bad.reject("record_too_large", offset, line, f"line longer than max_record_bytes {max_bytes}",
                           line=at)
                continue
            rest = line.lstrip(b"\0")
            if line.startswith(b"\0") and (not rest.strip() or _json_or_none(rest, replace) is not None):
                # session 32: NUL bytes after a crash, alone or before a record appended after it
                nul = len(line) - len(rest)
                bad.reject("nul_bytes", offset, line[:min(nul, 16)], f"{nul:,} NUL bytes, where a crash lost a file's last "
                           "writes (the filesystem had extended it)", line=at)
                if not line[nul:].strip():
                    continue
                line, offset = line[nul:], offset + nul
            body = line  # session 31: a BOM opening a line in the middle of a file is cut (cat of Windows files)
            while body.startswith(b"\xef\xbb\xbf"):
                body = body[3:]
            if not body.strip():
                continue
            try:
                record = orjson.loads(body)
            except orjson.JSONDecodeError as e:
                if "utf-8" not in str(e).lower():
                    bad.reject("malformed_json", offset, line, _malformed_detail(body, e), line=at)
                    continue
                if not replace:
                    bad.reject("invalid_utf8", offset, line, str(e)[:120], line=at)
                    continue
                try:
                    record = orjson.loads(body.decode("utf-8", "replace"))
                except orjson.JSONDecodeError as e2:
                    bad.reject("malformed_json", offset, line, str(e2)[:120], line=at)
                    continue
            try:
                text = extract(record)
            except RecordError as e:
                bad.reject(e.reason, offset, line, e.detail, line=at)
                continue
            if batcher.add(text, offset):
                yield batcher.take(meter.delta())
    yield batcher.take(meter.rest())


def run(reader, units, source, spool_dir=None):
    """Every unit through `reader`. With `spool_dir`, the ranges of a compressed file are read from
    windows a Spooler writes there (as a run does); their progress is then compared per unit (window
    bytes, not compressed bytes, between batches)."""
    units = [replace(u, index=i) for i, u in enumerate(units)]
    spooler = None
    if spool_dir is not None and any(u.is_spooled for u in units):
        spooler = Spooler(units, {u.index for u in units}, spool_dir, {0: None}, workers=1, ahead=2)
        units = [replace(u, spool=spooler.window(u)) if u.is_spooled else u for u in units]
    texts, positions, nbytes, rows, counts = [], [], [], [], []
    try:
        for u in units:
            bad = BadRecords(u, "skip")
            unit_bytes = []
            for batch in reader(u, source, bad, 3):
                texts.append(batch.texts)
                positions.append(batch.positions.tolist())
                unit_bytes.append(batch.nbytes)
            nbytes += [sum(unit_bytes)] if u.is_spooled else unit_bytes
            rows.append(bad.rows)
            counts.append(bad.counts)
            if spooler is not None:
                spooler.done(u.index)  # frees a slot: ahead=2 keeps the spooler two windows in front
    finally:
        if spooler is not None:
            spooler.close()
    return texts, positions, nbytes, rows, counts


def _malformed_detail(body: bytes, e: Exception) -> str:
    """The reader's detail for a line that is no JSON (session 36: a line holding a lone CR says so and
    names the fix, as classic-Mac line endings made a whole file one reject)."""
    if b"\r" in body.rstrip():
        return (str(e)[:80] + "; the line holds a lone carriage return (\\r) between values: convert the "
                "file's line endings (tr '\\r' '\\n')")
    return str(e)[:120]


good_record = st.one_of(
    st.text(max_size=30).map(lambda t: orjson.dumps({"text": t})),
    st.text(min_size=40, max_size=120).map(lambda t: orjson.dumps({"id": 1, "text": t})),  # over small caps
)
record = st.one_of(
    good_record,
    st.sampled_from([b"", b"   ", b"\r", b"\t\x0b\x0c", b'{"text": "crlf"}\r', b'  {"text": "pad"}  ',
                     b'{"text": ', b'{"text": "a"} x', b"not json", b'{"other": 1}', b'{"text": null}',
                     b'{"text": 5}', b'{"text": "bad \xff utf8"}', b'{"text": "\xc3"}', b"\xff\xfe",
                     b'["text"]', b'{"text": "mac"}\r{"text": "eol"}', b'{"text": "caf\xc3\xa9"}', b'\xef\xbb\xbf{"text": "after a BOM"}',
                     b"\xef\xbb\xbf", b"\xef\xbb\xbf\xef\xbb\xbf {broken", b'\xef\xbb\xbf{"text": "\xff"}',
                     b"\0" * 37, b"\0\0 ", b'\0\0{"text": "appended after a crash"}', b"\0 \0", b" \0"]),
    st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(record, max_size=25), st.booleans(), st.integers(1, 64), DENSE, st.integers(1, 300),
       st.one_of(st.none(), st.integers(1, 80)), st.sampled_from(["skip", "replace"]), st.integers(0, 3),
       st.booleans())
def test_iter_batches_matches_the_previous_implementation(tmp_path_factory, records, final_newline, block,
                                                          dense, unit_bytes, max_bytes, errors, min_chars,
                                                          gz):
    data = b"\n".join(records) + (b"\n" if final_newline and records else b"")
    # a file starting with "[" is planned whole and may be one JSON array (test_json_array.py); a BOM
    # at the start is cut (base.without_bom: test_reader_text's reference, test_formats' BOM test),
    # where this reference rejects the first line
    assume(data.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] != b"[" and not data.startswith(b"\xef\xbb\xbf"))
    # bytes that are gzip or UTF-16 under a plain name stop the run instead (test_sniff.py)
    assume(reads_as_text(data))
    path = tmp_path_factory.mktemp("jl") / ("d.jsonl.gz" if gz else "d.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    source = SourceConfig(path=str(path), max_record_bytes=max_bytes, encoding_errors=errors,
                          min_chars=min_chars)
    units = jsonl.plan(source, 0, [str(path)], unit_bytes)
    with blocks(block, dense):
        new = run(jsonl.iter_batches, units, source, spool_dir=path.parent / "spool")
        old = run(old_iter_batches, units, source)  # reads a .gz range by decompressing up to it
    assert new == old


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.lists(good_record, max_size=25), st.lists(record, max_size=25)), st.booleans(),
       st.sampled_from([b"", b"", b"", b"\xef\xbb\xbf", b"[", b"{\n", b"\n"]),
       st.one_of(st.none(), st.integers(1, 80)), st.sampled_from(["skip", "replace"]), st.integers(0, 3))
def test_a_small_whole_file_read_at_once_gives_what_the_line_reader_gives(tmp_path_factory, records, final_newline,
                                                                          head, max_bytes, errors, min_chars):
    """jsonl._all_good_lines: a whole plain file of at most READ_BLOCK is read at once and, when every
    line is a good record, parsed in one go; anything else (a bad line, a BOM, a JSON value) falls back
    to the line reader. Either way the documents, positions, rejects and counts are the line reader's,
    which reads the same file as a byte range (not whole, so never at once)."""
    data = head + b"\n".join(records) + (b"\n" if final_newline and records else b"")
    assume(reads_as_text(data))  # test_sniff.py
    path = tmp_path_factory.mktemp("small") / "d.jsonl"
    path.write_bytes(data)
    source = SourceConfig(path=str(path), max_record_bytes=max_bytes, encoding_errors=errors, min_chars=min_chars)
    whole = jsonl.plan(source, 0, [str(path)], 1 << 20)
    assert [(u.start, u.end) for u in whole] == [(0, -1)]
    as_range = [replace(whole[0], end=len(data) + 1)]  # the same lines, through iter_line_groups
    got, want = run(jsonl.iter_batches, whole, source), run(jsonl.iter_batches, as_range, source)
    flat = lambda r: (sum(r[0], []), sum(r[1], []), sum(r[2]), r[3], r[4])  # noqa: E731 (batches may differ)
    if not (data.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] == b"[" or data.lstrip(b"\xef\xbb\xbf").startswith(b"{\n")):
        assert flat(got) == flat(want)  # a JSON value is read whole only as a whole file: test_json_array.py


def test_iter_batches_on_a_real_shaped_file(tmp_path):
    """Big blocks (as shipped), long and short docs, every kind of bad line, several units."""
    lines = []
    for i in range(3000):
        k = i % 10
        lines.append(b"" if k == 3 else b'{"text": "\xff"}' if k == 5 else b"{broken" if k == 7 else
                     orjson.dumps({"text": "word " * (i % 400), "id": i}) + (b"\r" if k == 8 else b""))
    data = b"\n".join(lines)
    path = tmp_path / "d.jsonl"
    path.write_bytes(data)
    source = SourceConfig(path=str(path), max_record_bytes=1500)
    for unit_bytes, block in [(1 << 30, jsonl.READ_BLOCK), (200_000, 4096), (70_001, 1000)]:
        units = jsonl.plan(source, 0, [str(path)], unit_bytes)
        with blocks(block, jsonl.DENSE_LINE_BYTES):
            new = run(jsonl.iter_batches, units, source)
            old = run(old_iter_batches, units, source)
        assert new == old
        texts = [t for unit in new[0] for t in unit]
        assert len(texts) == sum(1 for i in range(3000) if i % 10 not in (3, 5, 7) and len(lines[i]) <= 1500)


# -- the block-at-a-time pieces: TextExtractor.many, Batcher.extend -----------------------------------

json_value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5)),
                          lambda inner: st.dictionaries(st.sampled_from(["text", "a", "b", "a.b"]), inner, max_size=3)
                          | st.lists(inner, max_size=2), max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(json_value, max_size=6), st.sampled_from([("text", None), ("a.b", None), ("x", "{a} {b}")]))
def test_extract_many_is_extract_on_each_record_or_none(records, how):
    """many() gives exactly what calling the extractor on each record gives, and None (one record at
    a time, then) exactly when one of those calls would raise."""
    extract = TextExtractor(*how)
    want = []
    for r in records:
        try:
            want.append(extract(r))
        except RecordError:
            want = None
            break
    assert extract.many(records) == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=8), max_size=30), st.integers(0, 4), st.one_of(st.none(), st.integers(0, 6)),
       st.integers(1, 7), st.integers(0, 30), st.one_of(st.none(), st.integers(1, 25)))
def test_batcher_extend_is_add_for_each(texts, min_chars, max_chars, batch_docs, cut, batch_chars):
    """extend() then take() while full() == add() one by one with take() on each full batch: the same
    batches and the same filter counts in the same order."""
    source = SourceConfig(path="x", min_chars=min_chars, max_chars=max_chars)
    unit = jsonl.WorkUnit(0, 0, 0, "x", "jsonl", 0, -1, 0)

    def batches(one_by_one: bool):
        bad = BadRecords(unit, "skip")
        b, out = Batcher(source, bad, batch_docs, batch_chars), []
        groups = [(texts[:cut], list(range(len(texts[:cut])))), (texts[cut:], list(range(cut, len(texts))))]
        for group, positions in groups:
            if one_by_one:
                for t, p in zip(group, positions):
                    if b.add(t, p):
                        out.append(b.take(0))
            else:
                b.extend(group, positions)
                while b.full():
                    out.append(b.take(0))
        out.append(b.take(0))
        # each batch's `chars` is what the Encoder's join test reads instead of counting again
        assert all(x.chars == sum(map(len, x.texts)) for x in out)
        return [(x.texts, x.positions.tolist()) for x in out], list(bad.counts.items())

    assert batches(False) == batches(True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=40), st.integers(1, 8), st.integers(1, 30), st.integers(0, 40))
def test_batches_close_at_batch_docs_or_at_batch_chars(lengths, batch_docs, batch_chars, cut):
    """Each batch taken while full() is the shortest prefix of the queue that has batch_docs documents
    or batch_chars characters; the documents come out once each, in order."""
    texts = ["x" * n for n in lengths]
    unit = jsonl.WorkUnit(0, 0, 0, "x", "jsonl", 0, -1, 0)
    b = Batcher(SourceConfig(path="x"), BadRecords(unit, "skip"), batch_docs, batch_chars)
    out = []
    for group in (slice(0, cut), slice(cut, None)):
        b.extend(texts[group], list(range(len(texts)))[group])
        while b.full():
            batch = b.take(0)
            sizes = [len(t) for t in batch.texts]
            assert 0 < len(sizes) <= batch_docs
            assert sum(sizes[:-1]) < batch_chars  # no shorter prefix had reached the budget
            assert len(sizes) == batch_docs or sum(sizes) >= batch_chars
            out.append(batch)
    rest = b.take(0)
    assert len(rest.texts) < batch_docs and sum(map(len, rest.texts)) < batch_chars and b.chars == 0
    out.append(rest)
    assert [p for x in out for p in x.positions.tolist()] == list(range(len(texts)))


def test_the_spooler_stays_at_most_ahead_windows_in_front(tmp_path):
    """Windows are written in plan order, no more than `ahead` before their units are done."""
    lines = [orjson.dumps({"text": f"doc {i} " + "x" * (i % 50)}) for i in range(4000)]
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(gzip.compress(data))
    source = SourceConfig(path=str(path))
    units = [replace(u, index=i) for i, u in enumerate(jsonl.plan(source, 0, [str(path)], 20_000))]
    assert len(units) > 5 and all(u.is_spooled for u in units)
    spooler = Spooler(units, {u.index for u in units}, tmp_path / "spool", {0: None}, workers=1, ahead=2)
    try:
        seen = b""
        for u in units:
            u = replace(u, spool=spooler.window(u))
            with open_window(u) as f:  # waits for the window
                window = f.read()
            assert data[max(0, u.start - 1):max(0, u.start - 1) + len(window)] == window
            seen = data[:max(0, u.start - 1)] + window
            on_disk = sorted(p.name for p in (tmp_path / "spool").glob("*.win"))
            assert len(on_disk) <= 2 and on_disk[0] == f"u{u.index:07d}.win"
            spooler.done(u.index)
        assert seen == data  # the last window runs to the end of the stream
    finally:
        spooler.close()
    assert not (tmp_path / "spool").exists()


@pytest.mark.parametrize("lines_cap, bytes_cap", [(1, 1 << 20), (7, 1 << 20), (4096, 300), (4096, 4 << 20)])
def test_whole_small_files_gives_each_good_file_what_iter_batches_gives(tmp_path, monkeypatch, lines_cap, bytes_cap):
    """jsonl.whole_small_files parses a group's files together, in chunks: for each plain file of good
    records it gives iter_batches' documents and positions; every other file (a bad line, a BOM, a
    JSON value, compressed, empty, gone) it leaves to iter_batches (None), in order."""
    monkeypatch.setattr(jsonl, "GROUP_PARSE_LINES", lines_cap)
    monkeypatch.setattr(jsonl, "GROUP_PARSE_BYTES", bytes_cap)
    good = lambda i, n: "".join(orjson.dumps({"text": f"doc {i}.{k} " + "w" * k}).decode() + "\n"  # noqa: E731
                                for k in range(n)).encode()
    bodies = {"a.jsonl": good(0, 5), "b.jsonl": good(1, 1), "b2.jsonl": good(9, 2),
              "c.jsonl": good(2, 3) + b'{"text": 5}\n', "d.jsonl": b"\xef\xbb\xbf" + good(3, 2),
              "e.jsonl": good(4, 9)[:-1], "e2.jsonl": good(10, 3), "f.jsonl": b'[{"text": "x"}]',
              "g.jsonl.gz": gzip.compress(good(5, 2)), "h.jsonl": b"", "i.jsonl": good(6, 2) + b"\n" + good(7, 1),
              "j.jsonl": good(8, 4)}
    paths = []
    for name, body in bodies.items():
        (tmp_path / name).write_bytes(body)
        paths.append(str(tmp_path / name))
    source = SourceConfig(path=str(tmp_path / "*"))
    members = jsonl.plan(source, 0, paths, 1 << 20)
    (tmp_path / "j.jsonl").unlink()  # gone since the plan
    got = list(jsonl.whole_small_files(tuple(members), source))
    assert [m for m, _ in got] == members
    quick = {}
    for member, read in got:
        name = member.path.rsplit("/", 1)[1]
        if read is None:
            continue
        texts, positions, _, rows, _ = run(jsonl.iter_batches, [member], source)
        assert read == (sum(positions, []), sum(texts, [])) and rows == [[]], name
        quick[name] = len(read[1])
    assert quick == {"a.jsonl": 5, "b.jsonl": 1, "b2.jsonl": 2, "e.jsonl": 9, "e2.jsonl": 3}


def test_files_with_a_bom_concatenated_read_every_record(tmp_path):
    """`cat a.jsonl b.jsonl > all.jsonl` of files a Windows tool wrote: each part's BOM opens a line in
    the middle. The record after it is read (it was rejected as invalid_utf8, "BOM is not supported")."""
    parts = [b"\xef\xbb\xbf" + b"".join(orjson.dumps({"text": f"part {p} doc {i}"}) + b"\r\n" for i in range(50))
             for p in range(3)]
    path = tmp_path / "all.jsonl"
    path.write_bytes(b"".join(parts))
    source = SourceConfig(path=str(path))
    texts, _, _, rows, counts = run(jsonl.iter_batches, jsonl.plan(source, 0, [str(path)], 1 << 20), source)
    assert sum(texts, []) == [f"part {p} doc {i}" for p in range(3) for i in range(50)]
    assert rows == [[]] and counts == [{}]


def test_nul_bytes_a_crash_left_are_one_reject_each_and_the_record_after_them_is_read(tmp_path):
    """A filesystem that extended a file before a crash reads its lost writes back as NUL bytes: at the
    end of the file, or up to the end of the first record the writer appended after restarting. Each
    run of them is one `nul_bytes` reject (it was one `malformed_json`, 200 NULs in its preview, and
    the appended record went with it)."""
    path = tmp_path / "crash.jsonl"
    good = [orjson.dumps({"text": f"doc {i}"}) + b"\n" for i in range(6)]
    path.write_bytes(b"".join(good[:3]) + b"\0" * 3000 + orjson.dumps({"text": "after the restart"}) + b"\n"
                     + b"".join(good[3:]) + b"\0" * 4096)
    units, texts, positions, bad = readerkit.read_all(jsonl, SourceConfig(path=str(path)), [str(path)])
    assert texts == ["doc 0", "doc 1", "doc 2", "after the restart", "doc 3", "doc 4", "doc 5"]
    assert [(r["reason"], r["line"], r["detail"].split(",", 1)[0]) for r in bad] == [("nul_bytes", 4, "3"),
                                                                                     ("nul_bytes", 8, "4")]
    assert bad[0]["detail"].startswith("3,000 NUL bytes, where a crash lost") and bad[1]["text"] == "\0" * 16
    assert positions[3] == sum(map(len, good[:3])) + 3000  # the record's own first byte
