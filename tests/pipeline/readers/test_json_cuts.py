"""A big JSON array (or jq's objects one after another) is cut between its records (json_cuts.py):
its units read exactly the records, positions and rejects of the file read whole."""

from __future__ import annotations

import io
import json
import re

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.errors import PrepError
from pipeline.readers import json_cuts
from pipeline.readers import jsonl as jsonl_reader
from pipeline.readers.base import BadRecords
from pipeline.recipe import SourceConfig
from pipeline.spool import HEADER, Spooler
from tests.conftest import read_spooled
from tests.pipeline.readers import readerkit

WHOLE = 1 << 40  # a unit_bytes no file reaches: the file is one unit, parsed whole


def read_all(path, unit_bytes: int, **source):
    units, texts, positions, bad = readerkit.read_all(jsonl_reader, SourceConfig(path=str(path), **source),
                                                      [str(path)], unit_bytes)
    return units, (texts, positions, [(r["row"], r["reason"]) for r in bad])


# strings that look like structure: quotes, backslash runs (escaping the quote after them or not),
# brackets, commas, the jq gap, non-ASCII
nasty = st.lists(st.sampled_from(['a', ' ', '"', '\\', ',', '{', '}', '[', ']', '\n', '\n}\n{', 'é', '😀', ':',
                                  '\\"', '\\\\']), max_size=12).map("".join)
json_value = st.recursive(st.none() | st.booleans() | st.integers(-9, 9) | nasty,
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(nasty, inner, max_size=3),
                          max_leaves=6)
record = st.one_of(
    st.builds(lambda t, m: {"text": t, "meta": m}, nasty, json_value),
    st.builds(lambda t: {"text": t}, nasty),
    json_value,  # not a record with text: a reject, at its row, in both readings
)


def layout(records: list, how: str, indent, ascii_only: bool) -> bytes:
    if how == "array":
        return json.dumps(records, indent=indent, ensure_ascii=ascii_only).encode()
    # objects one after another, jq's layout when indented; the first `{` alone on its line marks the file
    body = "\n".join(json.dumps(r, indent=2 if i == 0 else indent, ensure_ascii=ascii_only)
                     for i, r in enumerate(records)) + "\n"
    return body.encode()


def cuts_of(data: bytes, unit_bytes: int = 1, block: int = 7, segment: int = 50, threads: int = 1):
    """scan_cuts over bytes in memory, read `block` bytes at a time, in segments of ~`segment` bytes."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(json_cuts, "SCAN_BLOCK", block)
        mp.setattr(json_cuts, "SEGMENT_BYTES", segment)
        mp.setattr(json_cuts, "NEWLINE_SEARCH", 16)
        return json_cuts.scan_cuts(lambda: io.BytesIO(data), len(data), unit_bytes, threads=threads)


def reference_cuts(data: bytes, how: str, piece: int, start: int = 0) -> list[tuple[int, int]]:
    """The first record separator at or after each multiple of `piece`, with the records before it,
    found one byte at a time: an array's commas at depth 1, the ends of objects back at depth 0. From
    `start` (a records_field list's `[`) to where the array closes."""
    seps, depth, in_string, escaped, opened = [], 0, False, False, False
    for i, b in enumerate(data[start:], start):
        if how == "array" and opened and depth == 0:
            break
        opened = opened or depth > 0
        if in_string:
            in_string, escaped = (in_string, False) if escaped else (b != 0x22, b == 0x5C)
        elif b == 0x22:
            in_string = True
        elif b in b"[{":
            depth += 1
        elif b in b"]}":
            depth -= 1
            if how == "objects" and depth == 0:
                seps.append(i + 1)
        elif b == 0x2C and depth == 1 and how == "array":
            seps.append(i)
    if how == "objects":
        seps = seps[:-1]  # none after the last object
    cuts = []
    for k in range(1, len(data) // piece + 1):
        n = next((n for n, at in enumerate(seps) if at >= k * piece), None)
        if n is not None and (not cuts or cuts[-1][0] != seps[n]):
            cuts.append((seps[n], n + 1))
    return cuts


@settings(max_examples=300, deadline=None)
@given(st.lists(record, min_size=1, max_size=25), st.sampled_from(["array", "objects"]),
       st.sampled_from([None, 0, 1, 2]), st.booleans(), st.booleans(), st.integers(1, 200), st.integers(1, 64),
       st.integers(1, 9), st.integers(1, 300), st.sampled_from([b"", b"\n", b" \r\n\t "]))
def test_a_cut_value_reads_as_the_value_read_whole(tmp_path_factory, records, how, indent, ascii_only, bom,
                                                   unit_bytes, piece, block, segment, trailing):
    if how == "objects":  # objects only; the first with a key, so that its `{` is alone on its line
        records = [{"text": "first"}, *(r if isinstance(r, dict) else {"value": r} for r in records)]
    data = (b"\xef\xbb\xbf" if bom else b"") + layout(records, how, indent, ascii_only) + trailing
    path = tmp_path_factory.mktemp("cuts") / "a.json"
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as mp:  # pieces, read blocks, segments of a few bytes: every split
        mp.setattr(json_cuts, "PIECE_BYTES", piece)
        mp.setattr(json_cuts, "SCAN_BLOCK", block)
        mp.setattr(json_cuts, "SEGMENT_BYTES", segment)
        mp.setattr(json_cuts, "NEWLINE_SEARCH", 16)
        units, cut = read_all(path, unit_bytes)
        # the cuts depend on the bytes only: one thread or several, the same; a valid file is always
        # followed (else it would be read whole, and a wrong scan could hide behind that)
        cuts, kind, why = cuts_of(data, piece, block, segment, threads=1)
        assert (kind, why) == (how, "") and cuts == cuts_of(data, piece, block, segment, threads=3)[0]
        assert cuts == reference_cuts(data, how, piece)
        # a compressed file's decompressed stream, read once in order: the same cuts, and its size
        assert json_cuts.scan_stream_cuts(io.BytesIO(data), piece) == (cuts, how, "", (0, len(data)))
    _, whole = read_all(path, WHOLE)
    assert cut == whole
    assert whole[1] == [i for i, r in enumerate(records) if isinstance(r, dict) and isinstance(r.get("text"), str)]
    # every unit but the first opens at a separator: an array's comma, or right after an object
    assert sum(u.size for u in units) == len(data)
    for u in units[1:]:
        assert (data[u.start:u.start + 1] == b",") if how == "array" else (data[u.start - 1:u.start] == b"}")
        assert data[u.start:u.end if u.end >= 0 else len(data)].strip(b" \t\r\n,]")  # each holds a record


@pytest.mark.parametrize("block", [1, 2, 3, 5, 64])
def test_backslash_runs_split_between_blocks_still_escape_or_not(block):
    """`\\\\"` ends a string, `\\"` does not: the run of backslashes before a quote may begin in an
    earlier block, and blocks of 1-5 bytes split every run there is."""
    records = [{"text": "\\" * n + '"' + "\\" * m + ", ]}" * (n + 1)} for n in range(6) for m in range(4)]
    data = json.dumps(records).encode()
    found, kind, why = cuts_of(data, block=block, segment=1 << 20)
    assert kind == "array" and not why
    commas = [i for i in range(len(data)) if data[i:i + 3] == b', {']  # record separators: no text has "{ "
    assert [c for c, _ in found] == commas and [n for _, n in found] == list(range(1, len(records)))


@pytest.mark.parametrize("body, why", [
    ('"just a string"', "first value opens with"),
    ('[{"text": "a"}, {"text": "b"}] [{"text": "c"}]', "more follows the array's closing bracket"),
    ('[{"text": "a"}, {"text": "b"}]\n{"text": "c"}', "more follows the array's closing bracket"),
    ('[{"text": "a"}, {"text": "b"}', "ends inside a string or an open bracket"),
    ('[{"text": "a"}, {"text": "b}]', "ends inside a string or an open bracket"),
    ('[{"text": "a"}]], {"text": "b"}]', "closes nothing"),
    ('[{"text": "a"}, {"text": "b"}]\n\n\n, 5', "more follows the array's closing bracket"),
    ('[{"text": "a"},\n{"text": "b"}]\n[\n]', "more follows the array's closing bracket"),
    # a segment's scan begins after a line break: one there inside a string (invalid JSON) is seen
    # when a segment begins there (else the unit holding it fails to parse, as the whole file would)
    ('[{"text": "a\nb"},\n{"text": "b"}]', "a string runs across a line break"),
    ('{\n"text": "a"}\n}\n{"text": "b"}', "closes nothing"),
])
def test_a_file_the_scan_cannot_follow_is_not_cut(tmp_path, body, why):
    """Such a file stays one unit, read as before: one JSON value, or JSON Lines after all (a file
    that does not open like a JSON value is JSON Lines, cut at its lines)."""
    for segment in (3,) if "line break" in why else (3, 1 << 20):  # segments after each line break, or one
        assert cuts_of(body.encode(), segment=segment)[0] == [] and why in cuts_of(body.encode(), segment=segment)[2]
    if "line break" not in why:  # a compressed file's stream: one segment, in blocks of 3 bytes
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(json_cuts, "SCAN_BLOCK", 3)
            cuts, _, stream_why, _ = json_cuts.scan_stream_cuts(io.BytesIO(body.encode() + b" \n"), 1)
        assert cuts == [] and why in stream_why
    path = tmp_path / "a.json"
    path.write_text(body)
    if body[0] in "[{" and "line break" not in why:
        assert [(u.start, u.end) for u in jsonl_reader.plan(SourceConfig(path=str(path)), 0, [str(path)], 1)] == [
            (0, -1)]


def test_a_big_array_is_cut_into_units_of_about_unit_bytes(tmp_path):
    records = [{"text": f"record {i} " + "word " * (i % 13), "id": i} for i in range(3000)]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(records, indent=2))
    size = path.stat().st_size
    units, cut = read_all(path, 65536)
    assert len(units) == pytest.approx(size / 65536, abs=1)
    # each unit ends at the first record boundary at or past a multiple of unit_bytes (records < 400 B)
    assert [u.end // 65536 for u in units[:-1]] == list(range(1, len(units))) and units[-1].end == -1
    assert all(u.end % 65536 < 400 for u in units[:-1])
    assert all(u.payload for u in units)  # the kind, the records before it and its pieces: not its identity
    assert cut == read_all(path, WHOLE)[1]
    assert cut[1] == list(range(3000))


@pytest.mark.parametrize("how", ["array", "objects"])
@pytest.mark.parametrize("compress", ["gzip", "zstd"])
def test_a_compressed_value_is_cut_as_the_plain_file_into_spooled_windows(tmp_path, how, compress):
    """Its decompressed bytes are scanned at plan time: the units are the plain file's (offsets in
    the decompressed stream), read from windows the spooler cuts at exactly those bytes."""
    import gzip

    import zstandard
    records = [{"text": f"record {i} " + "word, [ } " * (i % 13)} if i % 50 else {"id": i} for i in range(3000)]
    data = layout(records, how, 1, True)
    plain, packed = tmp_path / "a.json", tmp_path / f"a.json.{'gz' if compress == 'gzip' else 'zst'}"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data) if compress == "gzip" else zstandard.ZstdCompressor().compress(data))
    want_units, want = read_all(plain, 8192)
    got_units, got = read_all(packed, 8192)
    assert len(got_units) > 5 and all(u.is_spooled for u in got_units)
    assert [(u.start, u.end, u.size, u.payload) for u in got_units] == [
        (u.start, u.end, u.size, u.payload) for u in want_units]
    assert got == want == read_all(packed, WHOLE)[1]
    assert len(got[0]) == 3000 - 60 and len(got[2]) == 60
    # each window holds exactly its unit's bytes: it starts at the unit's start (a line's window
    # starts one byte early, at the newline before) and is as long as the unit
    sizes = []
    real_close = Spooler._close

    def close(self, out, unit, written):
        sizes.append(out.tell() - HEADER if out is not None else None)
        real_close(self, out, unit, written)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Spooler, "_close", close)
        _, per_unit = read_spooled(jsonl_reader, SourceConfig(path=str(packed)), got_units, tmp_path / "spool")
    assert [base for base, *_ in per_unit] == [u.start for u in got_units]
    assert sizes == [u.size for u in got_units]


class _Damaged(Exception):
    pass


class _DamagedAt(io.BytesIO):
    """`data` read as a damaged compressed file is: its first `good` bytes, then _Damaged."""

    def __init__(self, data: bytes, good: int):
        super().__init__(data[:good])

    def read(self, n: int = -1) -> bytes:
        if block := super().read(n):
            return block
        raise _Damaged("the stream breaks here")


@pytest.mark.parametrize("how", ["array", "objects", "records_field"])
def test_a_stream_cut_short_by_damage_has_the_cuts_before_the_damage(how):
    """A stream that fails (one of scan_stream_cuts' `cut_short` errors) after `good` bytes: CutShort
    holds exactly the whole stream's cuts that lie in those bytes, the records' start and `good`.
    Before, the scan's error was all there was: the plan made the file one unit, which failed whole."""
    records = [{"text": f"record {i} " + "word, [ } \\" * (i % 7)} for i in range(400)]
    field = "data" if how == "records_field" else None
    data = (json.dumps({"v": 1, "data": records}, indent=1).encode() if field else
            layout(records, how, 1, True))
    whole, kind, why, (lo, _) = json_cuts.scan_stream_cuts(io.BytesIO(data), 512, field=field)
    assert why == "" and len(whole) > 20
    for good in range(len(data) // 10, len(data) * 9 // 10, len(data) // 13):
        with pytest.MonkeyPatch.context() as mp:  # blocks that do not line up with the damage
            mp.setattr(json_cuts, "SCAN_BLOCK", 1000)
            with pytest.raises(json_cuts.CutShort) as short:
                json_cuts.scan_stream_cuts(_DamagedAt(data, good), 512, field=field, cut_short=(_Damaged,))
        before = [c for c in whole if c[0] < good or (how == "objects" and c[0] == good)]  # an object's cut: after it
        assert short.value.cuts == before and len(before) > 1
        assert (short.value.kind, short.value.why, short.value.start, short.value.end) == (kind, "", lo, good)
        assert isinstance(short.value.error, _Damaged)
    with pytest.raises(_Damaged):  # not named in cut_short: raised as before
        json_cuts.scan_stream_cuts(_DamagedAt(data, len(data) // 2), 512, field=field)


@pytest.mark.parametrize("how", ["array", "objects", "records_field"])
@pytest.mark.parametrize("compress", ["gzip", "zstd"])
def test_a_damaged_compressed_value_keeps_the_units_before_the_damage(tmp_path, how, compress):
    """A compressed array (objects, a records_field list) cut short: the plan scans every byte that
    decodes before the damage (readers.salvage), so its units up to there are the sound file's and read
    its records; the last runs to the end of the stream and fails naming the file and the damage. It was
    one unit, which failed whole: under on_bad_record: skip every record before the damage was lost."""
    import gzip

    import zstandard
    records = [{"text": f"record {i} " + "word, [ } " * (i % 13)} for i in range(4000)]
    field = "data" if how == "records_field" else None
    data = (json.dumps({"v": 1, "data": records}, indent=1).encode() if field else
            layout(records, how, 1, True))
    blob = gzip.compress(data) if compress == "gzip" else zstandard.ZstdCompressor().compress(data)
    sound, damaged = tmp_path / "sound.json.gz", tmp_path / "a.json.gz"
    if compress == "zstd":
        sound, damaged = sound.with_suffix(".zst"), damaged.with_suffix(".zst")
    sound.write_bytes(blob)
    damaged.write_bytes(blob[:len(blob) * 3 // 5])
    source = SourceConfig(path=str(damaged), records_field=field)
    units = jsonl_reader.plan(source, 0, [str(damaged)], 8192)
    want_units, want = read_all(sound, 8192, records_field=field)
    assert len(units) > 10 and units[-1].end == -1 and all(u.is_spooled for u in units)
    kept = units[:-1]
    assert [(u.start, u.end, u.size, u.payload) for u in kept] == [
        (u.start, u.end, u.size, u.payload) for u in want_units[:len(kept)]]
    _, per_unit = read_spooled(jsonl_reader, source, kept, tmp_path / "spool")
    texts = [t for _, ts, _, _ in per_unit for t in ts]
    positions = [p for _, _, ps, _ in per_unit for p in ps]
    assert texts == want[0][:len(texts)] and positions == want[1][:len(texts)]
    assert len(texts) > len(records) // 4  # not vacuous: the records before the damage are read
    with pytest.raises(PrepError, match=f"{damaged}: corrupt or truncated input: it decodes to byte "):
        read_spooled(jsonl_reader, source, units, tmp_path / "spool2")


@pytest.mark.parametrize("how", ["array", "objects"])
def test_a_damaged_piece_fails_its_unit_naming_the_bytes(tmp_path, how):
    """The scan follows only strings and brackets: a bad token inside a record leaves the cuts where
    they were, and the unit holding it fails, naming the file and its bytes. The other units read."""
    records = [{"text": f"record {i}", "ok": True} for i in range(2000)]
    data = re.sub(rb'("record 1500",\s*"ok": )true', rb"\1tru", layout(records, how, 2, True))
    assert data.count(b"tru\n") == 1
    path = tmp_path / "a.json"
    path.write_bytes(data)
    source = SourceConfig(path=str(path))
    units = jsonl_reader.plan(source, 0, [str(path)], 8192)
    assert len(units) > 5
    failed, texts = [], []
    for u in units:
        try:
            texts += [t for b in jsonl_reader.iter_batches(u, source, BadRecords(u, "skip"), 64) for t in b.texts]
        except PrepError as e:
            failed.append((u, str(e)))
    assert len(failed) == 1
    unit, message = failed[0]
    assert unit.start < data.index(b"tru\n") < (unit.end if unit.end >= 0 else len(data))
    assert message.startswith(f"{path}: bytes ") and "damaged" in message
    assert "record 1500" not in texts and "record 0" in texts and "record 1999" in texts


def test_plan_time_scans_report_their_progress_to_the_planning_status(tmp_path, monkeypatch):
    """A big JSON array's or CSV's plan scans the whole file (~1 GB/s) before any worker starts: the
    status line `prep tokenize` draws while planning says which file and how far."""
    import contextlib

    from pipeline import executor
    from pipeline.readers import base
    from pipeline.readers import csv as csv_reader
    monkeypatch.setattr(base, "SCAN_REPORT_BYTES", 64 << 10)
    monkeypatch.setattr(json_cuts, "SCAN_BLOCK", 16 << 10)
    monkeypatch.setattr(csv_reader, "SCAN_BLOCK", 16 << 10)
    records = [{"text": f"record {i} " + "word " * (i % 13)} for i in range(20000)]
    array, table = tmp_path / "a.json", tmp_path / "t.csv"
    array.write_text(json.dumps(records))
    table.write_text("text\n" + "".join(f'"{r["text"]}, quoted"\n' for r in records))
    shown = []

    class Status:
        def update(self, text):
            shown.append(text)

    class Console:
        @contextlib.contextmanager
        def status(self, text):
            shown.append(text)
            yield Status()

    with executor._planning_status(True, Console()):
        jsonl_reader.plan(SourceConfig(path=str(array)), 0, [str(array)], 1 << 20)
        csv_reader.plan(SourceConfig(path=str(table)), 0, [str(table)], 1 << 20)
    assert shown[0] == "planning work units"
    for path in (array, table):
        lines = [t for t in shown if f"scanning {path.name} " in t]
        size = path.stat().st_size
        assert len(lines) >= size // (64 << 10) - 1 and lines[-1].endswith(f"of {size / 1e6:.1f} MB")
    with executor._planning_status(False, None):  # no display: no listener left behind either
        assert base._scan_listeners == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=5), max_size=12), st.integers(1, 3), st.integers(0, 12),
       st.sampled_from(["exhaust", "fail", "close"]))
def test_read_ahead_gives_the_blocks_in_order_and_ends_its_thread(blocks, depth, at, how):
    """base.read_ahead (a compressed value's scan decompresses on it): the blocks in order, an error
    of the reader raised to the consumer after the blocks before it, and no thread left behind when
    the consumer stops early."""
    import threading
    from contextlib import closing

    from pipeline.readers.base import read_ahead
    at = min(at, len(blocks))
    calls = []

    def read() -> bytes:
        calls.append(len(calls))
        if how == "fail" and len(calls) == at + 1:
            raise ValueError("damaged")
        return blocks[len(calls) - 1] if len(calls) <= len(blocks) else b""
    got = []
    with closing(read_ahead(read, depth)) as ahead:
        if how == "fail":
            with pytest.raises(ValueError, match="damaged"):
                got += ahead
        elif how == "close":
            got += (block for _, block in zip(range(at), ahead))
        else:
            got += ahead
    assert got == blocks[:at] if how != "exhaust" else got == blocks
    assert not [t for t in threading.enumerate() if t.name == "prep-read-ahead"]
    assert len(calls) <= at + depth + 2 or how == "exhaust"  # stopped reading soon after the consumer


key = st.text(alphabet='ab"\\[]{},: é', max_size=4)
wrapper = st.dictionaries(key, json_value, max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(record, min_size=1, max_size=20), st.sampled_from(["data", "a.rows", "é\"[.x"]),
       st.lists(st.tuples(wrapper, wrapper), min_size=2, max_size=2), st.sampled_from([None, 0, 2]),
       st.booleans(), st.booleans(), st.integers(1, 200), st.integers(1, 64), st.integers(1, 9))
@example(records=[None, {"text": ""}], field="data", around=[({}, {}), ({}, {})], indent=None, ascii_only=False,
         bom=False, unit_bytes=1, piece=15, block=1)  # a unit under a piece: the plan cuts at unit granularity
def test_a_records_field_list_cut_reads_as_the_object_read_whole(tmp_path_factory, records, field, around, indent,
                                                                 ascii_only, bom, unit_bytes, piece, block):
    """An object holding its records in a list under records_field (keys before and after it, at
    each level of a dotted path, with structure-like strings) is cut between the list's records: the
    records, positions and rejects of the object read whole; the list found is exactly the one under
    the key, and its cuts are those of the byte-at-a-time reference from its `[` to its `]`."""
    parts = field.split(".")
    doc = records
    for part, (before, after) in zip(reversed(parts), around):
        doc = {**{k: v for k, v in before.items() if k != part}, part: doc,
               **{k: v for k, v in after.items() if k != part and k not in before}}
    data = (b"\xef\xbb\xbf" if bom else b"") + json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    path = tmp_path_factory.mktemp("field") / "a.json"
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(json_cuts, "PIECE_BYTES", piece)
        mp.setattr(json_cuts, "SCAN_BLOCK", block)
        units, cut = read_all(path, unit_bytes, records_field=field)
        cuts, kind, why, (lo, hi) = json_cuts.scan_stream_cuts(io.BytesIO(data), piece, field=field)
        # the plan scans in pieces of at most a unit (jsonl._value_units): its candidate cuts
        planned = json_cuts.scan_stream_cuts(io.BytesIO(data), min(unit_bytes, piece), field=field)[0]
    assert (kind, why) == ("array", "") and orjson.loads(data[lo:hi]) == records
    assert cuts == reference_cuts(data, "array", piece, lo)
    assert cut == read_all(path, WHOLE, records_field=field)[1]
    assert units[0].start in (0, lo) and all(u.start > lo and data[u.start:u.start + 1] == b"," for u in units[1:])
    # cut wherever a unit's worth of the list lies before one of its cuts (not only when convenient)
    if len(data) > unit_bytes:
        assert (len(units) > 1) == any(c >= (lo // unit_bytes + 1) * unit_bytes for c, _ in planned)


@pytest.mark.parametrize("body, why", [
    ('{"data": [{"text": "a"}, {"text": "b"}], "data": [{"text": "c"}]}', "a key appears twice"),
    ('{"a": {"data": [{"text": "a"}, {"text": "b"}]}, "a": {"data": [{"text": "c"}]}}', "a key appears twice"),
    ('{"data": [{"text": "a"}, {"text": "b"}], "z": "' + "x" * 200 + '"}', "more than 100 bytes follow"),
    ('{"z": "' + "x" * 200 + '", "data": [{"text": "a"}, {"text": "b"}]}', "does not begin in the file's first 100"),
    ('{"data": [{"text": "a"}, {"text": "b"}', "is not closed"),
    ('{"data": [{"text": "a"}, {"text": "b"}]] }', "do not make one JSON object"),
    ('{"data": {"text": "a"}, "b": [{"text": "b"}, {"text": "c"}]}', "'data' is not a list"),
    ('{"other": [{"text": "a"}, {"text": "b"}]}', "no key 'data'"),
    ('[{"text": "a"}, {"text": "b"}]', "does not open with an object"),
])
def test_a_records_field_list_that_cannot_be_cut_is_read_whole(tmp_path, monkeypatch, body, why):
    """A later key of the same name (orjson keeps the last), a list not near the file's start or
    end, a damaged file, or one not of the recipe's shape: one unit, read whole as before."""
    monkeypatch.setattr(json_cuts, "HEAD_BYTES", 100)
    monkeypatch.setattr(json_cuts, "TAIL_BYTES", 100)
    field = "a.data" if body.startswith('{"a"') else "data"
    found = json_cuts.scan_stream_cuts(io.BytesIO(body.encode()), 1, field=field)
    assert found[0] == [] and why in found[2]
    path = tmp_path / "a.json"
    path.write_text(body)
    assert [(u.start, u.end) for u in jsonl_reader.plan(SourceConfig(path=str(path), records_field=field), 0,
                                                        [str(path)], 1)] == [(0, -1)]


def test_the_records_field_key_is_found_past_values_that_look_like_it():
    head = (b'\xef\xbb\xbf {"note": "\\"data\\": [", "n": -1.5e3, "t": true, "x": null, "deep": {"data": [1, ["]"]]},'
            b' "list": [{"data": []}, "}"], "d\\u0061ta" : \n [ {"text": "a"}')
    at, why = json_cuts.field_start(head, "data")
    assert why == "" and head[at:at + 3] == b"[ {" and head[:at].endswith(b': \n ')
    assert json_cuts.field_start(b'{"deep": {"x": 1, "data": [', "deep.data") == (26, "")
    assert "does not begin" in json_cuts.field_start(b'{"a": "unterminated', "data")[1]
