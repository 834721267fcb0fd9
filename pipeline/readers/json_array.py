"""A `.json` file holding one JSON array of records (Alpaca-style `[{"instruction": ...}, ...]`), read
by the JSONL reader when a file's first byte past whitespace (and a UTF-8 BOM) is `[` and the whole
file parses as one array (else it is JSON Lines whose first record is an array: a bad record).

Before, such a file gave one `malformed_json` reject per line (pretty-printed) or a record that "is
list, not an object" (one line), and an empty dataset. `datasets.load_dataset("json")` reads both
forms, so users expect prep to. An array has no line boundaries to cut at: the file is one unit, read
and parsed whole (memory: the parsed records, several times the file's size). A record's position is
its index in the array (`row` in rejects).
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from pipeline.filters import Batcher, RecordError, TextExtractor
from pipeline.readers.base import (
    BOM,
    READ_ROWS,
    BadRecords,
    ByteProgress,
    DocBatch,
    WorkUnit,
    batches_by_group,
)

__all__ = ["starts_an_array", "head_starts_an_array", "parse", "iter_array_batches"]

_WHITESPACE = b" \t\r\n"


def starts_an_array(stream) -> bool:
    """Whether the stream's first byte past whitespace and a BOM is `[`, without consuming it (peek
    where the stream has it; else read and seek back; a stream that can do neither: False)."""
    if hasattr(stream, "peek"):
        head = stream.peek(256)[:256]
    elif getattr(stream, "seekable", lambda: False)():
        pos = stream.tell()
        head = stream.read(256)
        stream.seek(pos)
    else:
        return False
    return head_starts_an_array(head)


def head_starts_an_array(head: bytes) -> bool:
    """Whether a file's first bytes, past a BOM and whitespace, open a JSON array."""
    head = head[len(BOM):] if head.startswith(BOM) else head
    return head.lstrip(_WHITESPACE)[:1] == b"["


def parse(data: bytes) -> list | None:
    """The records of a file that is one JSON array, or None when it is not (JSON Lines whose first
    record is an array, or a damaged array: then read as lines, whose rejects say what is wrong)."""
    try:
        records = orjson.loads(data[len(BOM):] if data.startswith(BOM) else data)
    except orjson.JSONDecodeError:
        return None
    return records if isinstance(records, list) else None


def iter_array_batches(unit: WorkUnit, source, bad: BadRecords, batch_docs: int, records: list,
                       meter: ByteProgress) -> Iterator[DocBatch]:
    """The documents of a whole-file unit holding a JSON array (`records`, parsed)."""
    extract = TextExtractor(source.text_field, source.text_template)
    batcher = Batcher(source, bad, batch_docs)
    limit = source.max_record_bytes

    def fast(rows: list) -> list[str] | None:
        texts = extract.many(rows)
        if texts is None or (limit is not None and max(map(len, texts), default=0) * 4 > limit
                             and any(len(t.encode("utf-8", "surrogatepass")) > limit for t in texts)):
            return None
        return texts

    def slow(positions: list[int], rows: list, before: int) -> None:
        for i, record in zip(positions, rows):
            try:
                text = extract(record)
            except RecordError as e:
                bad.reject(e.reason, i, orjson.dumps(record)[:1000], e.detail, row=i)
                continue
            if limit is not None and len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
                bad.reject("record_too_large", i, text, f"text longer than max_record_bytes {limit}", row=i)
                continue
            batcher.add(text, i)

    groups = ((list(range(i, min(i + READ_ROWS, len(records)))), records[i:i + READ_ROWS])
              for i in range(0, len(records), READ_ROWS))
    yield from batches_by_group(groups, batcher, meter, fast, slow)
