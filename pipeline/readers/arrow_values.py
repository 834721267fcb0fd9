"""Arrow columns (Parquet row groups, Hugging Face Arrow files) as Python values for the text extractor.

Every string and binary layout pyarrow reads counts as text: string, large_string, string_view (pyarrow
keeps it through Parquet's schema metadata), binary / large_binary / binary_view (decoded as UTF-8,
following `encoding_errors`), and a dictionary of any of them. A value that is not UTF-8 becomes
BadUtf8 (one `invalid_utf8` reject) instead of a UnicodeDecodeError out of `to_pylist`, which failed
the whole unit: every good row of a Parquet row group, or of up to `unit_bytes` of a Hugging Face
dataset, was lost for one bad value.
"""

from __future__ import annotations

__all__ = ["BadUtf8", "BadRow", "texts_of", "rows_of", "bad_utf8_columns", "decoded"]


class BadUtf8:
    """A value that was not UTF-8 (kept for the rejects preview)."""

    def __init__(self, data: bytes):
        self.data = data

    def __str__(self) -> str:
        return self.data.decode("utf-8", "replace")


def texts_of(column, errors: str) -> list:
    """A column's (Array or ChunkedArray) values as Python objects: strings checked for UTF-8, binary
    decoded under `errors` (skip: BadUtf8, replace: U+FFFD); other types as pyarrow gives them, and a
    nested value (a struct or list) holding a string that is not UTF-8 as BadUtf8."""
    import pyarrow as pa
    t = column.type
    inner = t.value_type if pa.types.is_dictionary(t) else t
    if _is_binary(inner):
        return [_decode(v, errors) for v in column.cast(pa.large_binary()).to_pylist()]
    try:
        return column.to_pylist()
    except UnicodeDecodeError:  # one bad value: decoded one at a time below, the bad ones become rejects
        pass
    if _is_text(inner):
        return [_decode(v, errors) for v in column.cast(inner).cast(pa.large_binary()).to_pylist()]
    return [_one_value(column.slice(i, 1)) for i in range(len(column))]


def decoded(values: list, errors: str) -> list:
    """Python values of a column (a streamed Hugging Face dataset's batch: `datasets` gives a binary
    column's values as bytes) with each bytes value decoded as texts_of decodes a binary column's; the
    same list when none is bytes (one C-level pass: `bytes in map(type, ...)`).
    Why: a streamed Value("binary") text column was non_string_text on every row (the run stopped:
    "holds no string") where the same dataset saved, or as Parquet, was decoded."""
    if bytes not in map(type, values):
        return values
    return [_decode(v, errors) if type(v) is bytes else v for v in values]


def _one_value(one):
    try:
        return one.to_pylist()[0]
    except UnicodeDecodeError:
        return BadUtf8(b"(a string inside this value is not UTF-8)")


class BadRow(dict):
    """A row of rows_of holding a BadUtf8 value (always rejected; its values kept for the preview)."""


def rows_of(table, errors: str) -> list[dict]:
    """A Table's or RecordBatch's rows as dicts of column -> texts_of value (a text_template's input);
    a row holding a value that is not UTF-8 is a BadRow."""
    import pyarrow as pa
    if not any(_is_binary(t.value_type if pa.types.is_dictionary(t) else t) for t in table.schema.types):
        try:  # pyarrow's own rows (Cython): 80,000 rows of 2 columns in 0.05 s, the zip below 0.08 s
            return table.to_pylist()
        except UnicodeDecodeError:  # one bad value: column by column below, the bad ones become rejects
            pass
    names = table.schema.names
    columns = [texts_of(table.column(i), errors) for i in range(len(names))]
    rows = [dict(zip(names, values)) for values in zip(*columns)]
    if bad_utf8_columns(dict(zip(names, columns))):
        rows = [BadRow(row) if any(isinstance(v, BadUtf8) for v in row.values()) else row for row in rows]
    return rows


def bad_utf8_columns(columns: dict[str, list]) -> list[str]:
    """The names of the columns (name -> texts_of values) holding a BadUtf8: one C-level pass each."""
    return [name for name, values in columns.items() if BadUtf8 in map(type, values)]


def _is_text(t) -> bool:
    import pyarrow as pa
    return pa.types.is_string(t) or pa.types.is_large_string(t) or _is_view(t, "is_string_view")


def _is_binary(t) -> bool:
    import pyarrow as pa
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or _is_view(t, "is_binary_view")


def _is_view(t, test: str) -> bool:
    """pyarrow >= 16 has view types; the floor (pyproject) is 14, which has neither type nor test."""
    import pyarrow as pa
    return getattr(pa.types, test, lambda _t: False)(t)


def _decode(v, errors: str):
    if v is None:
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return v.decode("utf-8", "replace") if errors == "replace" else BadUtf8(v)
