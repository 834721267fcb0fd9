"""Parquet: units are file x row groups (a big row group in parts of its rows when a source has few
units), only the text column is read, damage names the row group."""

from __future__ import annotations

import json
import random
import re
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import PrepError
from pipeline.readers import parquet as pq_reader
from pipeline.readers.base import BadRecords
from pipeline.recipe import SourceConfig
from tests.conftest import read_spooled
from tests.pipeline.readers import readerkit


def read_all(source: SourceConfig, files: list[str], unit_bytes: int = 1 << 16, policy: str = "skip"):
    return readerkit.read_all(pq_reader, source, files, unit_bytes, policy=policy)


def test_row_group_units_and_projection(tmp_path, monkeypatch):
    n = 3000
    texts = [f"document {i} " + "w" * (i % 97) for i in range(n)]
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": list(range(n)), "blob": [b"\x00" * 200] * n, "text": texts}), path,
                   row_group_size=250)
    seen_columns = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        seen_columns.append(tuple(kwargs.get("columns") or ()))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    units, got, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)], unit_bytes=12_000)
    assert len(units) > 1 and units[0].start == 0 and units[-1].end == 12
    assert all(u2.start == u1.end for u1, u2 in zip(units, units[1:]))  # row groups tile the file
    assert got == texts and positions == list(range(n)) and not bad
    assert set(seen_columns) == {("text",)}


def test_null_and_non_string_values_and_template(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"title": ["A", None, "C"], "text": ["x", "y", None],
                             "meta": [{"n": 1}, {"n": 2}, {"n": 3}]}), path)
    _, got, _, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert got == ["x", "y"] and [(r["reason"], r["row"]) for r in bad] == [("null_text", 2)]
    _, got, _, bad = read_all(SourceConfig(path=str(path), text_template="{title}: {text} #{meta.n}"), [str(path)])
    assert got == ["A: x #1"] and [r["reason"] for r in bad] == ["null_text", "null_text"]
    _, got, _, bad = read_all(SourceConfig(path=str(path), text_field="meta.n"), [str(path)])
    assert got == [] and {r["reason"] for r in bad} == {"non_string_text"}


def test_a_null_value_is_listed_as_json_null_not_the_text_none(tmp_path):
    """A null text was written to rejects.jsonl as "text": "None", which reads as a document whose text
    was "None"; a template's record showed Python's repr ({'text': None}). Now: JSON null, and the
    record as JSON; under on_bad_record: error the message says the value is null."""
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"title": ["A", "B"], "text": ["x", None]}), path)
    _, _, _, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert [(r["reason"], r["text"]) for r in bad] == [("null_text", None)]
    collector = BadRecords(pq_reader.plan(SourceConfig(path=str(path)), 0, [str(path)], 1 << 16)[0], "skip")
    collector.rows = bad
    collector.write(tmp_path / "rejects.jsonl")
    assert '"text": null' in (tmp_path / "rejects.jsonl").read_text() and '"None"' not in (tmp_path / "rejects.jsonl").read_text()
    _, _, _, bad = read_all(SourceConfig(path=str(path), text_template="{title}: {text}"), [str(path)])
    assert [json.loads(r["text"]) for r in bad] == [{"title": "B", "text": None}]
    with pytest.raises(PrepError, match=r"row 1: null_text: 'text' is null \(the value is null\); fix the record"):
        read_all(SourceConfig(path=str(path)), [str(path)], policy="error")


def test_a_column_named_with_a_dot_is_read_as_named(tmp_path):
    """pyarrow's Table.flatten() names a struct's fields `meta.body`: a template naming such a column was
    refused ("'meta' is not a column"). The literal column wins, also over a struct `meta`'s field that
    a projection onto `meta.body` reads beside it (pyarrow selects by column path)."""
    path = tmp_path / "flat.parquet"
    table = pa.table({"title": ["A", "B"], "meta": [{"body": "x"}, {"body": "y"}]}).flatten()
    assert table.column_names == ["title", "meta.body"]
    pq.write_table(table, path)
    _, got, _, bad = read_all(SourceConfig(path=str(path), text_template="{title}|{meta.body}"), [str(path)])
    assert got == ["A|x", "B|y"] and not bad
    assert read_all(SourceConfig(path=str(path), text_field="meta.body"), [str(path)])[1] == ["x", "y"]
    both = tmp_path / "both.parquet"  # the struct column first: the projection's column 0
    pq.write_table(pa.table({"meta": [{"body": "nested"}], "meta.body": ["literal"], "title": ["T"]}), both)
    for how, want in (({"text_field": "meta.body"}, "literal"), ({"text_template": "{title}|{meta.body}"}, "T|literal")):
        _, got, _, bad = read_all(SourceConfig(path=str(both), **how), [str(both)])
        assert got == [want] and not bad, how
    with pytest.raises(PrepError, match=r"text_template field 'other\.body' is not a column; the file has 'title', "
                                        r"'meta\.body'"):
        read_all(SourceConfig(path=str(path), text_template="{title} {other.body}"), [str(path)])


def test_binary_column_and_invalid_utf8(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": pa.array([b"ok", b"bad \xff", b"fine"], pa.binary())}), path)
    _, got, _, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert got == ["ok", "fine"] and [r["reason"] for r in bad] == ["invalid_utf8"]
    _, got, _, _ = read_all(SourceConfig(path=str(path), encoding_errors="replace"), [str(path)])
    assert got == ["ok", "bad \ufffd", "fine"]


@pytest.mark.parametrize("layout", ["dictionary", "string_view", "binary_view", "binary dictionary"])
def test_invalid_utf8_in_a_dictionary_or_view_column_rejects_its_row_only(tmp_path, layout):
    """A dictionary-encoded or string_view text column holding one value that is not UTF-8 raised
    UnicodeDecodeError out of to_pylist: the unit failed as "row group 0 does not decode" and its good
    rows were lost; a binary_view column's bytes were non_string_text. Now each layout reads as a
    string or binary column does: the bad row rejected (or replaced), the others kept."""
    if layout.endswith("_view") and not hasattr(pa, layout):
        pytest.skip(f"pyarrow {pa.__version__} has no {layout} (added in 16; the floor is 14)")
    raw = pa.array([b"ok", b"bad \xff", None, b"fine", b"ok"], pa.binary())
    # built lazily: a dict of built columns called pa.binary_view() for every layout, so on pyarrow
    # 14-15 the dictionary cases failed too (AttributeError)
    column = {"dictionary": lambda: raw.view(pa.string()).dictionary_encode(),
              "string_view": lambda: raw.cast(pa.binary_view()).view(pa.string_view()),
              "binary_view": lambda: raw.cast(pa.binary_view()),
              "binary dictionary": lambda: raw.dictionary_encode()}[layout]()
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": column}), path)
    assert pq.read_schema(path).field("text").type == column.type  # pyarrow reads back the layout written
    _, got, positions, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert got == ["ok", "fine", "ok"] and positions == [0, 3, 4]
    assert [(r["reason"], r["row"]) for r in bad] == [("invalid_utf8", 1), ("null_text", 2)]
    _, got, _, _ = read_all(SourceConfig(path=str(path), encoding_errors="replace"), [str(path)])
    assert got == ["ok", "bad \ufffd", "fine", "ok"]


def test_corrupt_row_group_names_it_and_missing_footer_fails_its_unit(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [f"t{i} " + "z" * 300 for i in range(400)]}), path, row_group_size=100,
                   compression="snappy")
    meta = pq.ParquetFile(path).metadata
    col = meta.row_group(2).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + 20:start + col.total_compressed_size - 20] = b"\x55" * (col.total_compressed_size - 40)
    path.write_bytes(bytes(data))
    source = SourceConfig(path=str(path))
    with pytest.raises(PrepError, match=r"a\.parquet: row group 2 \(rows from 200\) does not decode"):
        read_all(source, [str(path)], unit_bytes=1)
    cut = tmp_path / "b.parquet"
    cut.write_bytes(bytes(data[:1000]))
    units = pq_reader.plan(source, 0, [str(cut)], 1 << 16)
    assert len(units) == 1 and units[0].end == -1
    with pytest.raises(PrepError, match=r"b\.parquet: not a readable Parquet file \(footer"):
        read_all(source, [str(cut)])


def test_missing_column_is_a_file_error(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"body": ["x"]}), path)
    with pytest.raises(PrepError, match=r"text_field 'text' is not a column; the file has 'body'"):
        read_all(SourceConfig(path=str(path)), [str(path)])




def test_a_text_column_named_twice_is_a_file_error_not_a_damaged_row_group(tmp_path):
    """Two fields `text`: the read failed as "row group 0 (rows from 0) does not decode (KeyError: ...);
    replace the file", and a template "{text}" read the last of them silently."""
    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["first"]), pa.array(["last"])], names=["text", "text"]), path)
    for source in (SourceConfig(path=str(path)), SourceConfig(path=str(path), text_template="{text}")):
        with pytest.raises(PrepError, match=r"a\.parquet: the file has 2 columns named 'text' \(columns 1, 2, "
                                            r"counting from 1\), so which holds the text is unclear"):
            read_all(source, [str(path)])

def test_a_file_of_no_row_group_is_a_unit_of_no_documents(tmp_path):
    """A ParquetWriter closed before any write leaves a file of no row groups: it was planned as no
    unit, so a source of such files alone stopped with "source.path: matched no input"."""
    empty = tmp_path / "a.parquet"
    pq.ParquetWriter(empty, pa.schema([("text", pa.string())])).close()
    full = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": ["x", "y"]}), full)
    source = SourceConfig(path=str(tmp_path))
    assert pq.ParquetFile(empty).metadata.num_row_groups == 0
    units, texts, _, bad = read_all(source, [str(empty)])
    assert len(units) == 1 and texts == [] and bad == []
    units, texts, positions, bad = read_all(source, [str(empty), str(full)])
    assert [u.file_index for u in units] == [0, 1] and texts == ["x", "y"] and positions == [0, 1] and bad == []

@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(0, 300)), min_size=1, max_size=4),
       st.integers(2_000, 60_000), st.integers(1, 64), st.booleans(), st.integers(0, 40))
def test_big_row_groups_in_parts_read_as_the_whole_file(tmp_path_factory, files, unit_bytes, batch_docs, template,
                                                        nulls):
    """Files of one row group or several (`(rows, row group size)`: 0 is one group), each over
    `unit_bytes` or not: whether or not a row group is cut into parts, every unit's texts, positions and
    rejects together are the file's, in order, once; parts tile their row group."""
    d = tmp_path_factory.mktemp("pq")
    paths, want_texts, want_pos, want_bad = [], [], [], []
    for fi, (n, group) in enumerate(files):
        texts = [None if nulls and i % nulls == 0 else f"f{fi} doc {i} " + "x" * (i * 7 % 300) for i in range(n)]
        path = d / f"f{fi}.parquet"
        pq.write_table(pa.table({"id": list(range(n)), "text": texts}), path, row_group_size=group or None)
        paths.append(str(path))
        for i, t in enumerate(texts):
            if t is None:
                want_bad.append((str(path), i))
            else:
                want_texts.append(f"{i}: {t}" if template else t)
                want_pos.append(i)
    source = SourceConfig(path=paths, text_template="{id}: {text}" if template else None)
    units = pq_reader.plan(source, 0, paths, unit_bytes)
    parts = [u for u in units if u.payload]
    assert all(u.is_spooled == bool(u.payload) for u in units)
    if parts:
        assert len([u for u in units if not u.payload]) + len({(u.path, u.start) for u in parts}) < pq_reader.SPLIT_BELOW_UNITS
    for (path, rg), group_parts in _by_group(parts).items():
        rows = pq.ParquetFile(path).metadata.row_group(rg).num_rows
        size = pq_reader._row_group_bytes(pq.ParquetFile(path).metadata, rg)
        spans = [tuple(map(int, u.payload.decode().split(":"))) for u in group_parts]
        assert spans[0][0] == 0 and spans[-1][1] == rows and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert len(spans) == min(rows, -(-size // unit_bytes)) >= 2  # about unit_bytes each, never fewer rows
    got_texts, got_pos, got_bad = [], [], []
    with tempfile.TemporaryDirectory() as spool:  # parts from the windows the parent's thread writes
        _, per_unit = read_spooled(pq_reader, source, units, Path(spool), batch_docs, rows=True)
    for _, texts, positions, rows in per_unit:
        got_texts += texts
        got_pos += positions
        got_bad += [(r["source"], r["row"]) for r in rows]
    assert got_texts == want_texts and got_pos == want_pos and got_bad == want_bad


def _by_group(parts):
    out = {}
    for u in parts:
        out.setdefault((u.path, u.start), []).append(u)
    return out


def test_one_big_row_group_is_shared_and_many_are_not_split(tmp_path):
    """pandas and pyarrow write up to 1 Mi rows as one row group: it was one unit."""
    texts = [f"document {i} " + "y" * (i % 200) for i in range(4000)]
    one, many = tmp_path / "one.parquet", tmp_path / "many.parquet"
    pq.write_table(pa.table({"text": texts}), one)
    pq.write_table(pa.table({"text": texts}), many, row_group_size=400)
    units = pq_reader.plan(SourceConfig(path=str(one)), 0, [str(one)], 5_000)
    size = pq_reader._row_group_bytes(pq.ParquetFile(one).metadata, 0)
    assert len(units) == -(-size // 5_000) > 4 and all((u.start, u.end) == (0, 1) and u.payload for u in units)
    assert sum(u.size for u in units) == size
    # ten row groups over unit_bytes: enough units already, none split (each part would decode its group again)
    units = pq_reader.plan(SourceConfig(path=str(many)), 0, [str(many)], 2_000)
    assert len(units) == 10 and not any(u.payload for u in units)
    _, got, positions, _ = read_all(SourceConfig(path=str(one)), [str(one)], unit_bytes=5_000)
    assert got == texts and positions == list(range(4000))


def _read_parts(source, units, spool):
    """Each unit as its worker reads it, the parts from the spooler's windows: (texts, positions) or the
    PrepError's text, per unit."""
    from dataclasses import replace

    from pipeline.spool import Spooler
    units = [replace(u, index=i) for i, u in enumerate(units)]
    spooler = Spooler(units, {u.index for u in units}, spool, {0: None}, workers=1, ahead=2,
                      parquet_sources={0: source})
    out = []
    try:
        for u in units:
            u = replace(u, spool=spooler.window(u)) if u.is_spooled else u
            texts, positions = [], []
            try:
                for batch in pq_reader.iter_batches(u, source, BadRecords(u, "skip"), 16):
                    texts += batch.texts
                    positions += batch.positions.tolist()
                out.append((texts, positions))
            except PrepError as e:
                out.append(str(e))
            spooler.done(u.index)
    finally:
        spooler.close()
    return out


def test_a_damaged_page_fails_the_parts_from_it_on_and_a_shrunk_file_fails_not_hangs(tmp_path):
    """The parent decodes a split row group once: the parts before a damaged page keep their rows, the
    part holding it and every later part fail naming the row group; a file replaced by a shorter one
    between the plan and the spooling fails its parts instead of leaving their workers waiting."""
    rng = random.Random(5)
    texts = [f"row {i} " + "".join(rng.choices("abcdefghij ", k=i * 13 % 400)) for i in range(2000)]
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": texts}), path, compression="snappy", data_page_size=4096,
                   write_batch_size=16, use_dictionary=False)  # pages of ~4 kB
    source = SourceConfig(path=str(path))
    units = pq_reader.plan(source, 0, [str(path)], 20_000)
    assert len(units) > 8 and all(u.is_spooled for u in units)
    col = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    data = bytearray(path.read_bytes())
    half = start + col.total_compressed_size // 2
    data[half:half + 3000] = b"\x55" * 3000
    path.write_bytes(bytes(data))
    got = _read_parts(source, units, tmp_path / "spool")
    good = [r for r in got if not isinstance(r, str)]
    failed = got[len(good):]
    assert good and failed and all(isinstance(r, str) for r in failed)
    assert all(re.fullmatch(r".*a\.parquet: row group 0 \(rows from \d+\) does not decode \(.*", r) for r in failed)
    assert [t for ts, _ in good for t in ts] == texts[:len([t for ts, _ in good for t in ts])]
    assert [p for _, ps in good for p in ps] == list(range(sum(len(ts) for ts, _ in good)))

    pq.write_table(pa.table({"text": texts[:500]}), path)  # replaced by a shorter file after the plan
    got = _read_parts(source, units, tmp_path / "spool2")
    assert all(isinstance(r, str) and "row group 0 ended at row 500, before the 2000 rows planned; the file "
               "changed during the run" in r for r in got[-3:])
