"""JSONL (plain, .gz, .zst): one JSON object per line, text under a dotted key.

Plain files are cut into byte ranges of about `unit_bytes`; a unit owns every line whose first
byte lies in [start, end), so any cut gives each line to exactly one unit. Compressed files cannot
be entered mid-stream and are one unit each.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import orjson

from pipeline.errors import PrepError
from pipeline.readers.base import (
    BadRecords,
    DocBatch,
    WorkUnit,
    compression_of,
    file_size,
    get_field,
    open_input,
)
from pipeline.recipe import SourceConfig

__all__ = ["plan", "iter_batches", "iter_lines", "plan_byte_ranges"]

READ_BLOCK = 4 << 20  # bytes per read(): big enough to amortise syscalls, small next to a worker's budget


def plan_byte_ranges(source_index: int, files: list[str], unit_bytes: int, fmt: str) -> list[WorkUnit]:
    units = []
    for fi, path in enumerate(files):
        size = file_size(path)
        if compression_of(path) or size <= unit_bytes:
            units.append(WorkUnit(0, source_index, fi, path, fmt, 0, -1, size))
            continue
        for start in range(0, size, unit_bytes):
            end = min(start + unit_bytes, size)
            units.append(WorkUnit(0, source_index, fi, path, fmt, start, end, end - start))
    return units


def plan(source: SourceConfig, source_index: int, files: list[str], unit_bytes: int) -> list[WorkUnit]:
    return plan_byte_ranges(source_index, files, unit_bytes, "jsonl")


def iter_lines(f, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line without newline) for lines whose first byte is in [start, end); end=-1: to EOF.

    `f` is positioned at `start` (a line start: 0, or right after a newline found by the caller).
    """
    pos = start
    pending: list[bytes] = []  # pieces of a line longer than one block (no O(n^2) re-concatenation)
    while True:
        chunk = f.read(READ_BLOCK)
        if not chunk:
            if pending and not 0 <= end <= pos:
                yield pos, b"".join(pending)
            return
        first_nl = chunk.find(b"\n")
        if first_nl < 0:
            pending.append(chunk)
            continue
        if pending:
            pending.append(chunk[:first_nl])
            line = b"".join(pending)
            pending = []
            if 0 <= end <= pos:
                return
            yield pos, line
            pos += len(line) + 1
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


def seek_line_start(f, start: int) -> int:
    """Position `f` at the first line starting at or after `start`; returns that offset."""
    if start == 0:
        return 0
    f.seek(start - 1)
    skipped = f.readline()  # the rest of the line that started before `start` (b"\n" if none)
    return start - 1 + len(skipped)


def iter_batches(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    stream, raw = open_input(unit.path)
    field = source.text_field
    texts: list[str] = []
    positions: list[int] = []
    raw_start = unit.start if stream is raw else 0
    reported = 0  # input bytes reported so far; the last batch tops it up to unit.size

    def progress() -> int:
        nonlocal reported
        delta = max(0, min(raw.tell() - raw_start, unit.size) - reported)
        reported += delta
        return delta

    try:
        with stream:
            pos = seek_line_start(stream, unit.start)
            lines = iter_lines(stream, pos, unit.end) if unit.end < 0 or pos < unit.end else iter(())
            for offset, line in lines:
                if not line.strip():
                    continue  # blank lines are not records
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    reason = "invalid_utf8" if "utf-8" in str(e).lower() else "malformed_json"
                    bad.reject(reason, offset, line, str(e)[:120])
                    continue
                try:
                    text = get_field(record, field)
                except KeyError:
                    bad.reject("missing_field", offset, line, f"no {field!r}")
                    continue
                if not isinstance(text, str):
                    bad.reject("null_text" if text is None else "non_string_text", offset, line,
                               f"{field!r} is {type(text).__name__}")
                    continue
                texts.append(text)
                positions.append(offset)
                if len(texts) >= batch_docs:
                    yield DocBatch(texts, np.asarray(positions, dtype=np.int64), progress())
                    texts, positions = [], []
    except PrepError:
        raise
    except FileNotFoundError:
        raise PrepError(f"{unit.path}: file disappeared during the run") from None
    except Exception as e:  # gzip: EOFError/BadGzipFile; zstd: ZstdError; both mean a damaged file
        if not isinstance(e, (EOFError, OSError)) and not type(e).__module__.startswith("zstd"):
            raise
        raise PrepError(f"{unit.path}: corrupt or truncated input near compressed byte {raw.tell()} "
                        f"({type(e).__name__}: {e}); replace the file and re-run to resume") from None
    yield DocBatch(texts, np.asarray(positions, dtype=np.int64), unit.size - reported)
