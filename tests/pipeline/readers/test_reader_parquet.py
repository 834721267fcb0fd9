"""Parquet: units are file x row groups, only the text column is read, damage names the row group."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import PrepError
from pipeline.readers import parquet as pq_reader
from pipeline.recipe import SourceConfig
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


def test_binary_column_and_invalid_utf8(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": pa.array([b"ok", b"bad \xff", b"fine"], pa.binary())}), path)
    _, got, _, bad = read_all(SourceConfig(path=str(path)), [str(path)])
    assert got == ["ok", "fine"] and [r["reason"] for r in bad] == ["invalid_utf8"]
    _, got, _, _ = read_all(SourceConfig(path=str(path), encoding_errors="replace"), [str(path)])
    assert got == ["ok", "bad \ufffd", "fine"]


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
