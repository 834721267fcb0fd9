"""A `.json` file that is JSON but not JSON Lines, read whole, as one unit:

* one array of records (Alpaca-style `[{"instruction": ...}, ...]`): its records;
* several objects one after another, pretty-printed (`jq . data.jsonl`): each one a record;
* one object holding the records in a list (`{"version": 1, "data": [{...}, ...]}`): the list under
  `source.records_field` (`data`), as `datasets.load_dataset("json", field=...)`. With records_field
  set, every file of the source is read so. Without it, a file whose first line is a lone `{` (a
  pretty-printed object) is a SchemaError that names its keys and which of them hold lists.

The JSONL reader tells them from JSON Lines by a file's first bytes past whitespace (and a UTF-8
BOM): `[`, or `{` alone on its line; the whole file must then parse as one value, or as objects one
after another (else it is JSON Lines after all, whose bad lines are rejects). Before, such files gave one `malformed_json` reject
per line (pretty-printed), or one record without the text field, and an empty dataset.

A value has no line boundaries to cut at: the file is one unit, read and parsed whole (memory: the
parsed records, several times the file's size). A record's position is its index in its list (`row`
in rejects).
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from pipeline.errors import PrepError, SchemaError
from pipeline.filters import Batcher, RecordError, TextExtractor, list_keys
from pipeline.readers.base import (
    BOM,
    READ_ROWS,
    BadRecords,
    ByteProgress,
    DocBatch,
    WorkUnit,
    batches_by_group,
)

__all__ = ["starts_a_document", "head_starts_a_document", "parse", "records_of", "read_document", "concatenated_objects",
           "iter_array_batches"]

_WHITESPACE = b" \t\r\n"


def starts_a_document(stream) -> bool:
    """Whether the stream opens one JSON array or pretty-printed object (head_starts_a_document),
    without consuming it (peek where the stream has it; else read and seek back; a stream that can do
    neither: False)."""
    if hasattr(stream, "peek"):
        head = stream.peek(256)[:256]
    elif getattr(stream, "seekable", lambda: False)():
        pos = stream.tell()
        head = stream.read(256)
        stream.seek(pos)
    else:
        return False
    return head_starts_a_document(head)


def head_starts_a_document(head: bytes) -> bool:
    """Whether a file's first bytes, past a BOM and whitespace, open a JSON array, or an object whose
    `{` is alone on its line (`json.dump(..., indent=...)`, jq, JSON.stringify with a space argument).
    A JSON Lines record opens with `{` too, but holds a key on its first line."""
    head = head[len(BOM):] if head.startswith(BOM) else head
    head = head.lstrip(_WHITESPACE)
    if head[:1] == b"[":
        return True
    newline = head.find(b"\n")
    return head[:1] == b"{" and newline > 0 and not head[1:newline].strip(_WHITESPACE)


def parse(data: bytes) -> tuple[list | dict | None, str]:
    """(the file's one JSON array or object, ""), or (None, why not): JSON Lines whose first record
    is an array, or a damaged file (then read as lines, whose rejects say what is wrong)."""
    try:
        value = orjson.loads(data[len(BOM):] if data.startswith(BOM) else data)
    except orjson.JSONDecodeError as e:
        return None, str(e)
    return (value, "") if isinstance(value, (list, dict)) else (None, f"it is one {type(value).__name__}")


def records_of(value: list | dict, records_field: str | None, path: str) -> list:
    """The records of a file that is one JSON value: an array itself, or the list under the dotted
    `records_field` of an object. SchemaError when the file is not of the shape the recipe says."""
    if records_field is None:
        if isinstance(value, list):
            return value
        raise SchemaError(f"{path}: the file is one JSON object (keys {list_keys(value)}), not JSON Lines or an array "
                          "of records; set source.records_field to the key of its list of records")
    if isinstance(value, list):
        raise SchemaError(f"{path}: the file is one JSON array, not an object with records under "
                          f"{records_field!r}; remove source.records_field for this source")
    node, parts = value, records_field.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            at = repr(".".join(parts[:depth])) if depth else "the file's object"
            held = f"has {list_keys(node)}" if isinstance(node, dict) else f"is {type(node).__name__}, not an object"
            raise SchemaError(f"{path}: records_field {records_field!r}: {at} has no {part!r}; it {held}; set "
                              "source.records_field to the key of the list of records")
        node = node[part]
    if not isinstance(node, list):
        raise SchemaError(f"{path}: records_field {records_field!r} is {type(node).__name__}, not a list of "
                          "records; set source.records_field to the key of the list of records")
    return node


def read_document(data: bytes, records_field: str | None, path: str) -> list | None:
    """The records of a whole file read as one JSON value; None when it is JSON Lines after all (only
    without records_field: with it, a file that does not parse is damaged, a PrepError)."""
    value, why = parse(data)
    if value is None:
        if records_field is None:
            return concatenated_objects(data)
        raise PrepError(f"{path}: not one JSON object ({why}); source.records_field reads each file as one "
                        "JSON object holding its records")
    return records_of(value, records_field, path)


def concatenated_objects(data: bytes) -> list[dict] | None:
    """The objects of a file holding several JSON objects one after another, pretty-printed (what
    `jq . file.jsonl` writes: `{\n  "text": ...\n}\n{\n ...`), or None when it is not such a file.
    Each object must parse with orjson, as a JSON Lines record would (no NaN, no lone surrogates);
    one that does not, or a gap that is not whitespace, leaves the file to the line reader, whose
    rejects say what is wrong. Where the layout is not jq's, the stdlib decoder finds where each object
    ends (orjson cannot stop at a value's end). Before, each line of such a file was a
    `malformed_json` reject."""
    body = data[len(BOM):] if data.startswith(BOM) else data
    if body.lstrip(_WHITESPACE)[:1] != b"{":
        return None
    # jq's layout first: an object's closing brace alone at the start of a line, the next object's
    # opening brace on the line after. A JSON string holds no raw newline, so such braces are outside
    # any string; and when every piece between them parses as one object, the pieces are the file's
    # objects (an object ends at one place only; each piece opens with `{`, so it parses to a dict).
    # 18 MB of jq output: 0.30 -> 0.16 s (a regex split allowing any whitespace there took 0.23 s of
    # that alone). Anything else: the stdlib scan below.
    pieces = body.strip(_WHITESPACE).split(b"\n}\n{")
    if len(pieces) > 1:
        pieces = [pieces[0] + b"\n}", *(b"{" + p + b"\n}" for p in pieces[1:-1]), b"{" + pieces[-1]]
        try:
            return list(map(orjson.loads, pieces))
        except orjson.JSONDecodeError:
            pass
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    import json  # only here: most runs never read such a file
    import re
    find_end = json.JSONDecoder().raw_decode
    gap = re.compile(r"[ \t\r\n]*")
    records, at = [], gap.match(text).end()
    try:
        while at < len(text):
            if text[at] != "{":
                return None
            _, end = find_end(text, at)
            records.append(orjson.loads(text[at:end]))
            at = gap.match(text, end).end()
    except (ValueError, orjson.JSONDecodeError):  # json.JSONDecodeError is a ValueError
        return None
    return records if len(records) > 1 else None


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
