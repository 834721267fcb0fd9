"""Parquet: streamed by row groups, reading only the columns the text needs (column projection).

Work units are file x consecutive row groups, about `unit_bytes` of compressed data each (a row group
is never split: it is Parquet's unit of decoding). The parent reads only footers. A record's position
is its row number in the file. A file whose footer cannot be read becomes one unit that fails with an
error naming the file; a row group that does not decode fails its unit with an error naming the file
and the row group (under on_bad_record: skip the other units finish and the manifest lists it).
Strings that are not valid UTF-8 (Parquet requires UTF-8, but writers do not all check) follow
`encoding_errors`; `binary` columns are decoded the same way.
"""

from __future__ import annotations

from collections.abc import Iterator

from pipeline.errors import PrepError, not_a_column
from pipeline.filters import Batcher, RecordError, TextExtractor
from pipeline.readers.base import READ_ROWS, BadRecords, DocBatch, WorkUnit, file_size, open_raw
from pipeline.recipe import SourceConfig

__all__ = ["plan", "iter_batches"]


def _open(path: str, storage_options: dict):
    import pyarrow.parquet as pq
    f = open_raw(path, storage_options)
    try:
        return pq.ParquetFile(f), f
    except Exception as e:  # ArrowInvalid / OSError: no footer, not Parquet
        f.close()
        raise PrepError(f"{path}: not a readable Parquet file (footer: {type(e).__name__}: {e}); replace the "
                        "file and re-run to resume") from None


def _row_group_bytes(meta, i: int) -> int:
    rg = meta.row_group(i)
    return sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))


def plan(source: SourceConfig, source_index: int, files: list[str], unit_bytes: int) -> list[WorkUnit]:
    units = []
    for fi, path in enumerate(files):
        try:
            pf, f = _open(path, source.storage_options)
        except PrepError:
            # planned as one unit that fails with this error in a worker: under `skip` the rest still runs
            units.append(WorkUnit(0, source_index, fi, path, "parquet", 0, -1, file_size(path, source.storage_options)))
            continue
        with f:
            _check_columns(path, pf.schema_arrow.names, source)  # before any worker starts
            meta = pf.metadata
            sizes = [_row_group_bytes(meta, i) for i in range(meta.num_row_groups)]
        first, acc = 0, 0
        for i, size in enumerate(sizes):
            if i > first and acc + size > unit_bytes:
                units.append(WorkUnit(0, source_index, fi, path, "parquet", first, i, acc))
                first, acc = i, 0
            acc += size
        if first < len(sizes):
            units.append(WorkUnit(0, source_index, fi, path, "parquet", first, len(sizes), acc))
    return units


def _check_columns(path: str, names: list[str], source: SourceConfig) -> None:
    """SchemaError unless the file has the column(s) the text is made of (a plain text_field may be a
    dotted column name, or a column holding structs: checked per record)."""
    extract = TextExtractor(source.text_field, source.text_template)
    missing = [c for c in extract.columns if c not in names]
    if missing and not (source.text_template is None and extract.field in names):
        raise not_a_column(path, missing[0], names, "the file", source.text_template is not None)


def _texts_of(column, errors: str) -> list:
    """A column's values as Python objects; strings checked for UTF-8, binary decoded."""
    import pyarrow as pa
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:
            return column.to_pylist()
        except UnicodeDecodeError:
            column = column.cast(pa.large_binary())
            t = column.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [_decode(v, errors) for v in column.to_pylist()]
    return column.to_pylist()


class _BadUtf8:
    """A value that was not UTF-8 (kept for the rejects preview)."""

    def __init__(self, data: bytes):
        self.data = data

    def __str__(self) -> str:
        return self.data.decode("utf-8", "replace")


def _decode(v, errors: str):
    if v is None:
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return v.decode("utf-8", "replace") if errors == "replace" else _BadUtf8(v)


def iter_batches(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    pf, f = _open(unit.path, source.storage_options)
    extract = TextExtractor(source.text_field, source.text_template)
    batcher = Batcher(source, bad, batch_docs)
    limit = source.max_record_bytes
    errors = source.encoding_errors
    with f:
        meta = pf.metadata
        names = pf.schema_arrow.names
        _check_columns(unit.path, names, source)  # again: the file may have been replaced since the plan
        plain = source.text_template is None and extract.field in names  # one column, values are the texts
        columns = [extract.field] if plain else extract.columns
        end = unit.end if unit.end >= 0 else meta.num_row_groups
        row0 = sum(meta.row_group(i).num_rows for i in range(unit.start))
        pending_bytes = 0
        for rg in range(unit.start, end):
            batches = pf.iter_batches(batch_size=min(batch_docs, READ_ROWS), row_groups=[rg], columns=columns,
                                      use_threads=False)
            while True:
                try:
                    rb = next(batches, None)
                    if rb is not None:
                        values = _texts_of(rb.column(0), errors) if plain else _records_of(rb)
                except PrepError:
                    raise
                except Exception as e:  # ArrowInvalid, OSError, decompression errors: a damaged row group
                    raise PrepError(f"{unit.path}: row group {rg} (rows from {row0}) does not decode "
                                    f"({type(e).__name__}: {e}); replace the file and re-run to resume") from None
                if rb is None:
                    break
                for i, value in enumerate(values):
                    pos = row0 + i
                    try:
                        if plain:
                            if type(value) is not str:
                                if isinstance(value, _BadUtf8):
                                    raise RecordError("invalid_utf8", f"{extract.field!r} is not UTF-8")
                                text = extract.check(extract.field, value)
                            else:
                                text = value
                        elif isinstance(value, _BadUtf8):
                            raise RecordError("invalid_utf8", "a field is not UTF-8")
                        else:
                            text = extract(value)
                    except RecordError as e:
                        bad.reject(e.reason, pos, _preview(value), e.detail, row=pos)
                        continue
                    if limit is not None and len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
                        bad.reject("record_too_large", pos, text, f"text longer than max_record_bytes {limit}", row=pos)
                        continue
                    if batcher.add(text, pos):
                        yield batcher.take(pending_bytes)
                        pending_bytes = 0
                row0 += len(values)
            pending_bytes += _row_group_bytes(meta, rg)
    yield batcher.take(pending_bytes)


def _records_of(rb) -> list:
    """Rows as dicts; a row holding a string that is not UTF-8 becomes _BadUtf8 (always rejected)."""
    try:
        return rb.to_pylist()
    except UnicodeDecodeError:
        rows = []
        for i in range(rb.num_rows):
            try:
                rows.append(rb.slice(i, 1).to_pylist()[0])
            except UnicodeDecodeError:
                rows.append(_BadUtf8(b"(a field of this row is not UTF-8)"))
        return rows


def _preview(value) -> str:
    return value if isinstance(value, str) else str(value)
