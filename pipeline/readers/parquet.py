"""Parquet: streamed by row groups, reading only the columns the text needs (column projection).

Work units are file x consecutive row groups, about `unit_bytes` of compressed data each. When a
source has few units, a row group bigger than `unit_bytes` is split by rows into parts of about
`unit_bytes` (its rows' part in the unit's payload): pandas' and pyarrow's `to_parquet` write up to
1 Mi rows as one row group, which was one unit that one worker read while the others idled. A page
cannot be entered by row, so a parent thread decodes such a group once and writes each part's rows
(the projected columns) to a window file, an Arrow IPC stream (pipeline.spool, as for a compressed
JSONL file's ranges); the part's worker reads its window. The parent otherwise reads only footers. A record's position
is its row number in the file. A file whose footer cannot be read becomes one unit that fails with an
error naming the file; a row group that does not decode fails its unit with an error naming the file
and the row group (under on_bad_record: skip the other units finish and the manifest lists it).
Strings that are not valid UTF-8 (Parquet requires UTF-8, but writers do not all check) follow
`encoding_errors`; `binary` columns are decoded the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from pipeline.errors import RESUME_FIX, PrepError, not_a_column, refuse_repeated_columns
from pipeline.filters import Batcher, RecordError, TextExtractor
from pipeline.readers.arrow_values import BadRow, BadUtf8, rows_of, texts_of
from pipeline.readers.base import (
    READ_ROWS,
    BadRecords,
    DocBatch,
    WorkUnit,
    file_size,
    no_ranges_why,
    open_raw,
    serves_ranges,
    unreadable,
    value_preview,
)
from pipeline.recipe import SourceConfig
from pipeline.source_formats import is_url

__all__ = ["plan", "iter_batches"]


def _open(path: str, storage_options: dict, streamed: bool = False):
    """(ParquetFile, raw file). `streamed` (a worker reading a local file): column chunks are read 1 MiB
    at a time as their pages decode, not whole first (pyarrow's pre_buffer): a row group of 221 MB of
    text, 102 MB compressed, took a reader 260 MiB whole and 165 MiB so, in the same time, and the
    start of a big row group (a split unit, below) is read without the rest."""
    import pyarrow.parquet as pq
    if is_url(path) and not serves_ranges(path, storage_options):
        why, fix = no_ranges_why(path)
        raise PrepError(f"{path}: {why}, and Parquet is read from its end (the footer) by ranges; download the file "
                        f"and give its local path, or {fix}")
    try:
        # ahead_to=0: from a URL, only the byte ranges pyarrow asks for (its column chunks, footer)
        f = open_raw(path, storage_options, ahead_to=0)
    except OSError as e:
        raise unreadable(path, e) from None
    try:
        if streamed and not is_url(path):
            return pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 20), f
        return pq.ParquetFile(f), f
    except Exception as e:  # ArrowInvalid / OSError: no footer, not Parquet
        f.close()
        raise PrepError(f"{path}: not a readable Parquet file (footer: {type(e).__name__}: {e}); replace the "
                        f"file and {RESUME_FIX}") from None


def _row_group_bytes(meta, i: int) -> int:
    rg = meta.row_group(i)
    return sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))


def plan(source: SourceConfig, source_index: int, files: list[str], unit_bytes: int) -> list[WorkUnit]:
    units: list[WorkUnit] = []
    big: list[tuple[int, int, int, int]] = []  # (unit index, row group, its bytes, its rows) for splitting
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
            rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        first, acc = 0, 0
        for i, size in enumerate(sizes):
            if i > first and (acc + size > unit_bytes or size > unit_bytes):
                units.append(WorkUnit(0, source_index, fi, path, "parquet", first, i, acc))
                first, acc = i, 0
            if size > unit_bytes and rows[i] > 1:
                big.append((len(units), i, size, rows[i]))
            acc += size
        if first < len(sizes):
            units.append(WorkUnit(0, source_index, fi, path, "parquet", first, len(sizes), acc))
        elif not sizes:  # no row group (a ParquetWriter closed before any write): a unit that reads none,
            # as an empty JSONL file is; planned without one, such a file alone stopped the run with
            # "source.path: matched no input", of a path that matched it
            units.append(WorkUnit(0, source_index, fi, path, "parquet", 0, 0, 0))
    if len(units) >= SPLIT_BELOW_UNITS or not big:
        return units
    # too few units to share: each big row group (a unit of its own) in parts
    parts = {at: (rg, size, n) for at, rg, size, n in big}
    return [v for k, u in enumerate(units)
            for v in ([u] if k not in parts else _row_group_parts(u, *parts[k], unit_bytes))]


# Big row groups are split only when the source plans fewer units than this: a dataset of many row
# groups keeps every worker busy as it is, and a split group is decoded by the parent's spooling
# thread (one per SPOOL_THREADS_PER_WORKERS workers) instead of by the workers
SPLIT_BELOW_UNITS = 8


def _row_group_parts(unit: WorkUnit, rg: int, size: int, rows: int, unit_bytes: int) -> list[WorkUnit]:
    """`unit`, row group `rg` alone (`size` compressed bytes, `rows` rows), as units of rows [a, b) of it,
    about `unit_bytes` each: start/end name the row group, the payload the rows (two parts differ only
    in it; the plan's order and count of them are part of its fingerprint). Their count follows the
    group's size, never the workers (a resume must plan the same units)."""
    parts = min(rows, -(-size // unit_bytes))
    bounds = [rows * k // parts for k in range(parts + 1)]
    # sizes that add up to the group's (progress and the input total count each byte once)
    return [replace(unit, size=size * b // rows - size * a // rows, payload=f"{a}:{b}".encode())
            for a, b in zip(bounds, bounds[1:])]


def _rows_of(unit: WorkUnit) -> tuple[int, int | None]:
    """The rows [a, b) of its row group a split unit reads; (0, None): whole row groups."""
    if not unit.payload:
        return 0, None
    a, b = unit.payload.decode().split(":")
    return int(a), int(b)


def _projection(source: SourceConfig, names: list[str]) -> tuple[bool, list[str]]:
    """(plain, the columns to read): plain when the text is one column's values."""
    extract = TextExtractor(source.text_field, source.text_template, source.encoding_errors)
    plain = source.text_template is None and extract.field in names
    return plain, [extract.field] if plain else extract.columns_in(names)[0]


def part_batches(units: list[WorkUnit], source: SourceConfig) -> Iterator[tuple[WorkUnit, object]]:
    """For the spooler: (unit, record batch) of the projected columns, for the rows of each part unit
    of one file (parts of split row groups, in plan order), each group decoded once. A group that does
    not decode raises the PrepError its part's worker would."""
    pf, f = _open(units[0].path, source.storage_options, streamed=True)
    with f:
        meta = pf.metadata
        _, columns = _projection(source, pf.schema_arrow.names)
        groups: dict[int, list[WorkUnit]] = {}
        for u in units:
            groups.setdefault(u.start, []).append(u)
        for rg, parts in groups.items():
            row0 = sum(meta.row_group(i).num_rows for i in range(rg))
            spans = [_rows_of(u) for u in parts]  # rows [a, b) of the group, tiling it
            batches = pf.iter_batches(batch_size=READ_ROWS, row_groups=[rg], columns=columns, use_threads=False)
            k, done = 0, 0  # the part being read; the group's rows passed
            while k < len(parts):
                try:
                    rb = next(batches, None)
                except Exception as e:  # ArrowInvalid, OSError, decompression errors: a damaged row group
                    raise PrepError(f"{units[0].path}: row group {rg} (rows from {row0 + spans[k][0]}) does not "
                                    f"decode ({type(e).__name__}: {e}); replace the file and {RESUME_FIX}") from None
                if rb is None:  # the file was replaced since the plan: its parts would wait for their windows
                    raise PrepError(f"{units[0].path}: row group {rg} ended at row {row0 + done}, before the "
                                    f"{spans[-1][1]} rows planned; the file changed during the run: "
                                    f"{RESUME_FIX} (it is read as it is now)")
                at = 0
                while at < rb.num_rows and k < len(parts):
                    take = min(rb.num_rows - at, spans[k][1] - (done + at))
                    yield parts[k], rb.slice(at, take)
                    at += take
                    if done + at == spans[k][1]:
                        k += 1
                done += rb.num_rows


def _window_batches(unit: WorkUnit, rows: int):
    """The record batches of a part unit's window (see part_batches), `rows` rows at most each."""
    import pyarrow as pa

    from pipeline.spool import HEADER, wait_window
    with pa.memory_map(wait_window(unit)) as mm:  # zero-copy: the strings are copied once, into Python
        mm.seek(HEADER)
        for rb in pa.ipc.open_stream(mm):
            for at in range(0, rb.num_rows, rows):
                yield rb.slice(at, rows)


def _check_columns(path: str, names: list[str], source: SourceConfig) -> None:
    """SchemaError unless the file has the column(s) the text is made of (a dotted name may be a
    column's, as flattening names them, or a path into a column holding structs: checked per record)."""
    columns, missing = TextExtractor(source.text_field, source.text_template, source.encoding_errors).columns_in(names)
    if missing:
        raise not_a_column(path, missing[0], names, "the file", source.text_template is not None)
    refuse_repeated_columns(path, columns, names, "the file", source.text_template is not None)


def iter_batches(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    pf, f = _open(unit.path, source.storage_options, streamed=True)
    extract = TextExtractor(source.text_field, source.text_template, source.encoding_errors)
    batcher = Batcher(source, bad, batch_docs, position_kind="row")
    limit = source.max_record_bytes
    errors = source.encoding_errors
    with f:
        meta = pf.metadata
        names = pf.schema_arrow.names
        _check_columns(unit.path, names, source)  # again: the file may have been replaced since the plan
        plain, columns = _projection(source, names)  # plain: one column, its values are the texts
        end = unit.end if unit.end >= 0 else meta.num_row_groups
        row0 = sum(meta.row_group(i).num_rows for i in range(unit.start))
        row0 += _rows_of(unit)[0]  # a split row group's part: its rows, decoded by the spooler
        pending_bytes = 0
        for rg in range(unit.start, end):
            if unit.is_spooled:
                batches = _window_batches(unit, min(batch_docs, READ_ROWS))
            else:
                batches = pf.iter_batches(batch_size=min(batch_docs, READ_ROWS), row_groups=[rg], columns=columns,
                                          use_threads=False)
            while True:
                try:
                    rb = next(batches, None)
                    if rb is not None:
                        # by name: a projection onto `meta.body` also holds a struct column `meta`'s
                        # field body when the file has both (pyarrow selects by column path)
                        values = texts_of(rb.column(extract.field), errors) if plain else rows_of(rb, errors)
                except PrepError:
                    raise
                except Exception as e:  # ArrowInvalid, OSError, decompression errors: a damaged row group
                    raise PrepError(f"{unit.path}: row group {rg} (rows from {row0}) does not decode "
                                    f"({type(e).__name__}: {e}); replace the file and {RESUME_FIX}") from None
                if rb is None:
                    break
                for i, value in enumerate(values):
                    pos = row0 + i
                    try:
                        if plain:
                            if type(value) is not str:
                                if isinstance(value, BadUtf8):
                                    raise RecordError("invalid_utf8", f"{extract.field!r} is not UTF-8")
                                text = extract.check(extract.field, value)
                            else:
                                text = value
                        elif type(value) is BadRow:  # rows_of's mark: a look at its type, not its values
                            raise RecordError("invalid_utf8", "a field is not UTF-8")
                        else:
                            text = extract(value)
                    except RecordError as e:
                        bad.reject(e.reason, pos, value_preview(value), e.detail, row=pos)
                        continue
                    if limit is not None and len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
                        bad.reject("record_too_large", pos, text, f"text longer than max_record_bytes {limit}", row=pos)
                        continue
                    if batcher.add(text, pos):
                        yield batcher.take(pending_bytes)
                        pending_bytes = 0
                row0 += len(values)
            pending_bytes += unit.size if unit.payload else _row_group_bytes(meta, rg)
    yield batcher.take(pending_bytes)
