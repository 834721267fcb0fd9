"""A `.json` file that is JSON but not JSON Lines:

* one array of records (Alpaca-style `[{"instruction": ...}, ...]`): its records;
* several objects one after another, pretty-printed (`jq . data.jsonl`): each one a record;
* one object holding the records in a list (`{"version": 1, "data": [{...}, ...]}`): the list under
  `source.records_field` (`data`), as `datasets.load_dataset("json", field=...)`. With records_field
  set, every file of the source is read so. Without it, a file whose first line is a lone `{` (a
  pretty-printed object) is a SchemaError that names its keys and which of them hold lists, when it
  holds a list of objects and not the text;
* one pretty-printed object that is not such a holder (`json.dump(record, f, indent=2)`): one record,
  as the same object on one line is in JSON Lines. Before, it was that SchemaError, whose fix (set
  records_field) cannot apply to a file holding no list.

The JSONL reader tells them from JSON Lines by a file's first bytes past whitespace (and a UTF-8
BOM): `[`, or `{` alone on its line; the whole file must then parse as one value, or as objects one
after another (else it is JSON Lines after all, whose bad lines are rejects). Before, such files gave one `malformed_json` reject
per line (pretty-printed), or one record without the text field, and an empty dataset.

A value has no line boundaries to cut at. An array, objects one after another, or a records_field
list, over unit_bytes (compressed or not) is cut between its records by a scan at plan time
(json_cuts.py), and each unit reads its range a piece at a time (iter_range_groups). Anything else
(a smaller file; one the scan cannot follow) is one unit, read and parsed whole
(memory: the parsed records, several times the file's size). A record's position is its index in its
list (`row` in rejects), however the file was cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import orjson

from pipeline.errors import PrepError, SchemaError
from pipeline.filters import PANDAS_FIX, Batcher, RecordError, TextExtractor, list_keys, pandas_layout
from pipeline.readers import surrogates
from pipeline.readers.base import (
    BOM,
    READ_ROWS,
    BadRecords,
    ByteProgress,
    DocBatch,
    WorkUnit,
    batches_by_group,
)
from pipeline.readers.sniff import peek_head

__all__ = ["starts_a_document", "head_starts_a_document", "parse", "holder_past_deep_members", "too_deep", "records_of", "read_document", "concatenated_objects",
           "range_payload", "range_first", "iter_range_groups", "record_groups",
           "iter_array_batches"]

_WHITESPACE = b" \t\r\n"
_JQ_GAP = re.compile(rb"\n\}\n\{")  # between two objects as jq writes them (concatenated_objects)


def starts_a_document(stream) -> bool:
    """Whether the stream opens one JSON array or pretty-printed object (head_starts_a_document),
    without consuming it (peek where the stream has it; else read and seek back; a stream that can do
    neither: False)."""
    return head_starts_a_document(peek_head(stream, 256))


def head_starts_a_document(head: bytes) -> bool:
    """Whether a file's first bytes, past a BOM and whitespace, open a JSON array, or an object whose
    `{` is alone on its line (`json.dump(..., indent=...)`, jq, JSON.stringify with a space argument)
    or opens a line that ends in `,`, `{` or `[` (writers that keep the first key on the brace's line:
    `{"text": "a",`). A JSON Lines record opens with `{` too, but its line ends with the record's `}`
    (before, such an object was read as lines: every line a malformed_json reject, no document)."""
    head = head[len(BOM):] if head.startswith(BOM) else head
    head = head.lstrip(_WHITESPACE)
    if head[:1] == b"[":
        return True
    newline = head.find(b"\n")
    return head[:1] == b"{" and newline > 0 and head[:newline].rstrip(_WHITESPACE)[-1:] in (b"{", b",", b"[")


def parse(data: bytes, place: _Place | None = None) -> tuple[list | dict | None, str]:
    """(the file's one JSON array or object, ""), or (None, why not): JSON Lines whose first record
    is an array, or a damaged file (then read as lines, whose rejects say what is wrong). A value
    that only Python's json reads (NaN, Infinity, a lone surrogate escape: what `json.dump` writes
    from a float NaN or a cut string) comes with its non-JSON records as Malformed (records_of).
    `place`: where `data` lies in its file (None: it is the file, from its start)."""
    bom = len(BOM) if data.startswith(BOM) else 0
    place = (place or _Place(data)).shifted(bom)
    data = data[bom:]
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        value = _lenient(data)
        if value is None:  # a record nested too deep for either parser?
            value = _records_one_by_one(data, place)
        if value is None:  # an array, then more?
            value = _array_then_more(data, place)
        if value is None:
            return None, str(e)
    return (value, "") if isinstance(value, (list, dict)) else (None, f"it is one {type(value).__name__}")


class Malformed:
    """A record of a JSON array or of objects one after another that is not JSON, as JSON Lines reads
    it (orjson: no NaN or Infinity, no lone surrogate): one `malformed_json` reject, as its line would
    be in a JSON Lines file. Before, one NaN in a non-text field of one record (Python's json.dump
    writes a float NaN so) made the whole file unparsable: read as lines, every record lost (exit 0),
    or a cut array's whole unit failed. A lone surrogate is a `lone_surrogate` reject, or with
    encoding_errors: replace the record `mended` (each one U+FFFD), as in JSON Lines (surrogates.py)."""

    __slots__ = ("raw", "detail", "reason", "mended")

    def __init__(self, raw: str, detail: str, reason: str = "malformed_json", mended=None):
        self.raw, self.detail, self.reason, self.mended = raw, detail, reason, mended


def _lenient(data: bytes | str):
    """`data` parsed by Python's json (NaN, Infinity, lone surrogates allowed), each record that
    orjson would refuse replaced by a Malformed; None when Python's json cannot parse it either."""
    import json  # only here: such files are rare
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    if isinstance(value, list):
        return [_strict(r) for r in value]
    if isinstance(value, dict):  # records_of finds its list: strict-checked there
        return _LenientObject(value)
    return value


class _Place:
    """Where the bytes being parsed lie in their file, so that a reject names the file's line, not the
    line inside its record (orjson counts from the bytes it was given: "line 1 column 1045" of a record
    on line 5,000). `file`: the file's bytes from its start, when held (a whole file, or a cut unit's
    first piece); else a reject names the byte. `base`: the file offset of the parsed bytes' first."""

    __slots__ = ("file", "base")

    def __init__(self, file: bytes | None = None, base: int = 0):
        self.file, self.base = file, base

    def shifted(self, by: int) -> _Place:
        return _Place(self.file, self.base + by)

    def of(self, raw: bytes, offset: int, error) -> str:
        """The file's place of `error`, an orjson error met parsing `raw`, which lies at `offset` of the
        parsed bytes (orjson names a character of `raw`: "(char 1045)")."""
        char = re.search(r"\(char (\d+)\)", str(error))
        inside = len(raw.decode("utf-8", "surrogateescape")[:int(char[1])].encode("utf-8", "surrogateescape")) if char else 0
        at = self.base + offset + inside
        if self.file is None or at > len(self.file):
            return f"at byte {at:,} of the file"
        line, line_start = self.file.count(b"\n", 0, at) + 1, self.file.rfind(b"\n", 0, at) + 1
        column = len(self.file[line_start:at].decode("utf-8", "replace")) + 1  # in characters, as orjson counts
        return f"at line {line:,} column {column:,} of the file"


def too_deep(e: orjson.JSONDecodeError) -> bool:
    """orjson's refusal of a value nested deeper than 1,024 levels (Python's json stops at ~1,000)."""
    return "depth limit" in str(e)


# a JSON string (escapes unrolled: no backtracking per character), or a bracket or comma outside one
_STRUCTURE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')


def _array_elements(data: bytes, brackets: bytes = b"[]") -> list[tuple[int, bytes]] | None:
    """The top-level elements of the JSON array `data` (with brackets b"{}": the members of the object),
    as (offset in `data`, byte slice) cut at its depth-1 commas (found past its strings); None when its
    brackets do not balance or it is not one array (object)."""
    body = data.strip(_WHITESPACE)
    lead = len(data) - len(data.lstrip(_WHITESPACE))
    if body[:1] != brackets[:1] or body[-1:] != brackets[1:]:
        return None
    elements, start, depth = [], 1, 0
    for m, c, depth in _depths(body):
        if c in b"]}":
            if depth < 0 or depth == 0 and m.end() != len(body):
                return None
        elif c == 0x2C and depth == 1:  # a comma between two records
            elements.append((lead + start, body[start:m.start()]))
            start = m.end()
    if depth:
        return None
    if body[start:-1].strip(_WHITESPACE) or elements:
        elements.append((lead + start, body[start:-1]))
    return elements


def _records_one_by_one(data: bytes, place: _Place) -> list | None:
    """The records of the JSON array `data`, each parsed alone, a record nested deeper than orjson reads
    (1,024 levels) as a Malformed; None when anything else does not parse (damage: the callers' errors).
    Only once the whole array has failed both parsers (another record's NaN may be what orjson met
    first), so a sound file never costs this scan.
    Why: one such record (a 10,000-level list in a field that is not the text) made its whole array
    unparsable: a small file became one malformed_json reject of its first line, every record lost,
    and a cut file's unit failed whole. `place`: where `data` lies in its file (a reject names the line)."""
    import json
    elements = _array_elements(data)
    if elements is None:
        return None
    records = []
    for offset, raw in elements:
        try:
            records.append(orjson.loads(raw))
            continue
        except orjson.JSONDecodeError as e:
            if too_deep(e):
                records.append(_nested_too_deep(raw.strip(_WHITESPACE)[:1000].decode("utf-8", "replace"),
                                                place.of(raw, offset, e)))
                continue
        try:  # NaN, a lone surrogate: as _lenient reads them
            records.append(_strict(json.loads(raw)))
        except (ValueError, RecursionError):
            return None
    return records


def _nested_too_deep(raw: str, where: str) -> Malformed:
    """A record nested deeper than a parser here reads, as one malformed_json reject; `where`: _Place.of
    (orjson's own "line 1 column 1045" counts inside the record, which misled: the record's first line
    is line 1 to it wherever it lies in the file)."""
    return Malformed(raw, f"nested deeper than the 1,024 levels a JSON parser here reads (depth limit exceeded {where})")


_KEY = re.compile(rb'[ \t\r\n]*("[^"\\]*(?:\\.[^"\\]*)*")[ \t\r\n]*:')  # an object member's key and its colon


def _holder_one_by_one(data: bytes, field: list[str], place: _Place, unique: bool = False):
    """The object `data` holding records in a list under the dotted `field` (source.records_field), that
    list read record by record (_records_one_by_one: a record nested deeper than 1,024 levels is one
    Malformed); a member off that path which is nested too deep is None (it holds no records). None
    when anything else does not parse (damage: read_document's error).
    Why: one such record made the whole object unparsable: exit 1, "not one JSON object (depth limit
    exceeded)", every record of the file lost (a file large enough to be cut read its pieces so).
    `place`: where `data` lies in its file; `unique`: a key twice in an object on the way is None too
    (json_cuts.py checks the bytes around a list so: orjson keeps the last of two)."""
    import json
    members = _array_elements(data, b"{}")
    if members is None:
        return None
    holder = {}
    for offset, member in members:
        key = _KEY.match(member)
        if key is None:
            return None
        try:  # a key that is not valid JSON text (latin-1 bytes, a raw tab): damage, read_document's error
            name = orjson.loads(key[1])
        except orjson.JSONDecodeError:
            try:  # a lone surrogate escape, as _lenient reads it
                name = json.loads(key[1])
            except ValueError:
                return None
        if unique and name in holder:
            return None
        value, at = member[key.end():], place.shifted(offset + key.end())
        if name == field[0]:
            holder[name] = (_records_one_by_one(value, at) if len(field) == 1
                            else _holder_one_by_one(value, field[1:], at, unique))
            if holder[name] is None:
                return None
            continue
        try:
            holder[name] = orjson.loads(value)
        except orjson.JSONDecodeError as e:
            if too_deep(e):
                holder[name] = None
                continue
            try:  # NaN: as _lenient reads it
                holder[name] = json.loads(value)
            except (ValueError, RecursionError):
                return None
    return holder


def _depths(body: bytes, at: int = 0):
    """(match, its first byte, the bracket depth after it) for each string, bracket and comma of `body`
    from `at`."""
    depth = 0
    for m in _STRUCTURE.finditer(body, at):
        c = body[m.start()]
        if c in b"[{":
            depth += 1
        elif c in b"]}":
            depth -= 1
        yield m, c, depth


def _array_then_more(data: bytes, place: _Place, opens: bytes = b"[") -> list | None:
    """The records of a file that is one JSON array followed by more JSON values (`cat a.json b.json`:
    two array exports; `[...]` then `{...}`: a record appended to an array file; an array on one line,
    then JSON Lines): each array gives its records and each object is one, as jq reads such a file and
    as objects one after another are read (concatenated_objects). From the first value that does not
    parse on, the rest is one Malformed record (one malformed_json reject at the next row, naming the
    byte where the last value read closed); after an array on one line, a Malformed per bad line, as
    JSON Lines rejects them. None when the file is not so (an array on one line that holds no objects
    is JSON Lines' first record still: `[1, 2]` then records, one reject, the rest read).
    Before: two arrays joined kept the first's records only (the second was that one reject), a record
    appended was that reject, and an array of records on one line then lines was read as JSON Lines,
    its records one missing_field reject. Read as JSON Lines, an array over several lines was a reject
    per line (60,002 for 20,000 pretty-printed records).
    `opens` b"{": a file of objects one after another with an array among them (objects_then_arrays)."""
    body = data.lstrip(_WHITESPACE)
    lead = len(data) - len(body)
    if body[:1] != opens:
        return None
    end = _value_end(body, 0)
    if end < 0 or not body[end:].strip(_WHITESPACE):
        return None
    one_line = opens == b"[" and body.find(b"\n", 0, end) < 0
    records, _ = parse(body[:end], place.shifted(lead))
    if isinstance(records, dict) and opens == b"{":  # the first object is a record, as in concatenated_objects
        records = [_strict(dict(records)) if type(records) is _LenientObject else records]
    if not isinstance(records, list) or one_line and not (records and all(isinstance(r, (dict, Malformed))
                                                                          for r in records)):
        return None
    if one_line and (values := _lines_unless_spanning(body[end:])) is not None:
        # JSON Lines from here: read a line at a time (review: the value walk below, a Python regex pass
        # over every string and bracket, read 50 MB of lines in 2.5 s, not 0.15 s)
        return records + _flattened(values)
    at = end
    while (at := _GAP.match(body, at).end()) < len(body) and body[at] in b"[{":
        stop = _value_end(body, at)
        value, _ = parse(body[at:stop], place.shifted(lead + at)) if stop > 0 else (None, "")
        if value is None:
            break
        records += _flattened([_strict(dict(value)) if type(value) is _LenientObject else value])
        end = at = stop
    rest = body[at:].rstrip(_WHITESPACE)
    if not rest:
        return records
    if one_line:  # from a line that is no JSON value on: JSON Lines, a bad line its own reject
        return records + _flattened([_line_value(line) for line in rest.split(b"\n") if line.strip(_WHITESPACE)])
    closes = place.base + lead + end - 1  # the file offset of the last value's closing bracket
    return [*records, Malformed(rest[:1000].decode("utf-8", "replace"),
                                f"{len(rest):,} bytes follow the file's JSON values, the last of which closes at "
                                f"byte {closes:,}, and are not a JSON array or object (the records before them "
                                "were read); repair or remove them")]


_GAP = re.compile(rb"[ \t\r\n]*")


def objects_then_arrays(data: bytes) -> list | None:
    """The records of a file of pretty-printed objects one after another with a JSON array among them (`jq .
    a.jsonl` then `cat b.json`, an array export appended): each object one record, each array its
    records, in file order, as a file that opens with the array reads them (_array_then_more). None
    when no array is among its values (concatenated_objects found it is not objects one after
    another: JSON Lines after all, whose rejects say what is wrong). Only once concatenated_objects
    has failed, so jq's files keep its fast path (the walk here is a Python regex pass over every string
    and bracket). Before, such a file was read as JSON Lines: every line a malformed_json reject, no
    document (exit 1)."""
    bom = len(BOM) if data.startswith(BOM) else 0
    body = data[bom:]
    at = _GAP.match(body).end()
    while at < len(body) and body[at:at + 1] == b"{":  # is an array among the values?
        at = _value_end(body, at)
        if at < 0:
            return None
        at = _GAP.match(body, at).end()
    if body[at:at + 1] != b"[":
        return None
    return _array_then_more(body, _Place(data, bom), opens=b"{")


def _value_end(body: bytes, at: int) -> int:
    """One past the bracket closing the array or object that opens at `body[at]`, or -1 (its brackets do
    not balance)."""
    for m, c, depth in _depths(body, at):
        if c in b"]}" and depth <= 0:
            return m.end() if depth == 0 else -1
    return -1


def _lines_unless_spanning(data: bytes) -> list | None:
    """The values of `data`'s non-blank lines (a line that is not JSON a Malformed), or None when a line
    that is not JSON opens like an array or object: a pretty-printed value after a one-line array (`cat
    a.json b.json`, b indented) spans lines, and the value walk reads it (review: split into lines, each
    was a reject). orjson over all lines at once when every one parses: 200,000 lines in ~0.35 s; else a
    line at a time (a NaN that json.dump wrote, a damaged line), not the walk (6x slower)."""
    lines = [line for line in data.split(b"\n") if line.strip(_WHITESPACE)]
    try:
        return list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        pass
    values = list(map(_line_value, lines))
    spans = any(type(v) is Malformed and line.lstrip(_WHITESPACE)[:1] in (b"[", b"{") for v, line in zip(values, lines))
    return None if spans else values


def _flattened(values: list) -> list:
    """Records of JSON values after the file's first array: an array of objects gives its objects, as the
    first array did (review: one after a bad line was one record, a missing_field reject, its documents
    lost); any other value is one record (`[1, 2]` and `[]` too, on the walk as on JSON Lines: their
    count moved the positions after them, which the train/val split hashes)."""
    if not any(type(v) is list for v in values):
        return values
    return [r for v in values
            for r in (v if type(v) is list and v and all(isinstance(x, (dict, Malformed)) for x in v) else [v])]


def _line_value(line: bytes):
    """One line's value, or a Malformed (not JSON)."""
    import json
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as e:
        try:  # NaN, a lone surrogate: as _lenient reads them
            return _strict(json.loads(line))
        except (ValueError, RecursionError):
            return Malformed(line[:1000].decode("utf-8", "replace"), f"not JSON ({str(e)[:120]})")


def holder_past_deep_members(data: bytes, field: str) -> dict | None:
    """The object `data` parsed member by member along the dotted `field` (_holder_one_by_one): a member
    nested deeper than 1,024 levels off that path is None; None when anything else does not parse or a
    key on the way repeats (json_cuts.py checks the bytes around a records_field list so)."""
    return _holder_one_by_one(data, field.split("."), _Place(), unique=True)


class _LenientObject(dict):
    """A file's one object parsed by _lenient: records_of checks the records of its list."""


def _strict(record):
    """`record`, or a Malformed when it holds what orjson refuses (NaN or Infinity, a lone surrogate)."""
    import json
    try:
        json.dumps(record, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # (a ValueError too: first)
        mended = surrogates.mend_strings(record)
        if type(_strict(mended)) is Malformed:  # a NaN as well: not JSON, however its text is read
            return _strict(mended)
        return Malformed(json.dumps(record)[:1000], surrogates.detail(), surrogates.REASON, mended)
    except ValueError:
        return Malformed(json.dumps(record)[:1000], "not JSON: NaN or Infinity (json.dump writes a float NaN so)")
    return record


def records_of(value: list | dict, records_field: str | None, path: str,
               extract: TextExtractor | None = None) -> list:
    """The records of a file that is one JSON value: an array itself, the list under the dotted
    `records_field` of an object, or (without records_field) an object that is one record. SchemaError
    when the file is not of the shape the recipe says. `extract`: the source's text, which a record
    holds and a holder of records under a key does not (None: judged by its lists alone)."""
    if records_field is None:
        if isinstance(value, list):
            return value
        first = next(iter(value.values()), None)  # orient='columns': an object of row label -> value
        layout = pandas_layout(list(value), False) or (isinstance(first, dict) and pandas_layout(list(first), True))
        if layout:
            raise SchemaError(f"{path}: the file is one JSON object, a table in pandas' DataFrame.to_json layout "
                              f"({layout}); {PANDAS_FIX}")
        held = _list_of_objects(value)
        if held and not _has_text(value, extract):
            nested = f" (there is one under {held!r})" if "." in held else ""
            raise SchemaError(f"{path}: the file is one JSON object (keys {list_keys(value)}), not JSON Lines or an array "
                              f"of records; set source.records_field to the key of its list of records{nested}")
        # one record, pretty-printed: as the same object on one line in JSON Lines (a missing text
        # field is its reject, which the worker turns into an error naming the field)
        return [_strict(dict(value)) if isinstance(value, _LenientObject) else value]
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
    return [_strict(r) for r in node] if isinstance(value, _LenientObject) else node


def _list_of_objects(node: dict, depth: int = 3) -> str:
    """The dotted key of the first non-empty list of objects in an object or the objects under it
    (`depth` levels at most, not inside lists), where a file's records would be; "" when none."""
    for key, v in node.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            return key
    if depth > 1:
        for key, v in node.items():
            if isinstance(v, dict) and (inner := _list_of_objects(v, depth - 1)):
                return f"{key}.{inner}"
    return ""


def _has_text(value: dict, extract: TextExtractor | None) -> bool:
    """Whether an object holds every field the text is made of (whatever their values)."""
    if extract is None:
        return False
    try:
        extract(value)
    except RecordError as e:
        return e.reason != "missing_field"
    return True


def read_document(data: bytes, records_field: str | None, path: str,
                  extract: TextExtractor | None = None) -> list | None:
    """The records of a whole file read as one JSON value; None when it is JSON Lines after all (only
    without records_field: with it, a file that does not parse is damaged, a PrepError). `extract`:
    as for records_of."""
    value, why = parse(data)
    if value is None and records_field is not None:  # a record nested too deep (and perhaps a NaN)?
        bom = len(BOM) if data.startswith(BOM) else 0
        value = _holder_one_by_one(data[bom:], records_field.split("."), _Place(data, bom))
    if value is None:
        if records_field is None:
            return concatenated_objects(data) or objects_then_arrays(data)
        raise PrepError(f"{path}: not one JSON object ({why}); source.records_field reads each file as one "
                        "JSON object holding its records")
    return records_of(value, records_field, path, extract)


def range_payload(kind: str, first: int, pieces: list[int], closes: bool) -> bytes:
    """What a unit that is a range of one big JSON value (json_cuts.py) carries to its worker: the
    value's kind ("array" or "objects"), how many records come before the range, the offsets inside
    it where records end, about every PIECE_BYTES (cut by the same scan), and whether it ends with
    the array's `]` (the file's last unit; a records_field list's, which ends before its file)."""
    return f"{kind}:{first}:{','.join(map(str, pieces))}:{int(closes)}".encode()


def range_first(payload: bytes) -> int:
    """How many records of its file come before a range of one big JSON value (range_payload)."""
    return int(payload.split(b":", 2)[1])


def iter_range_groups(stream, unit: WorkUnit) -> Iterator[tuple[list[int], list]]:
    """(positions, records) of a unit that is a range of one big JSON value cut by json_cuts.py, a
    piece at a time: `stream` is positioned at unit.start.

    Why pieces: parsed whole, a 8 MiB range (its bytes sliced and joined, then ~5x that in records,
    all fresh memory) read 485 MB in 2.0 s against 0.75 s for the same records as JSON Lines; a
    scan of its own in the worker to find them cost 0.45 s more.

    A piece of an array opens with the comma before its first record (the file's first: with the
    BOM, whitespace and `[`; a records_field list's first: with its `[`), and the array's last ends
    with `]`. Each piece parses alone; so the records are the whole value's exactly when every piece
    parses. A piece that does not is a damaged file: a PrepError naming its bytes (read whole, the
    file would have been JSON Lines, one reject per line)."""
    kind, first, inner, closes = unit.payload.decode().split(":")
    bounds = [unit.start, *(int(p) for p in inner.split(",") if p), unit.end]
    row = int(first)
    for at, end in zip(bounds[:-1], bounds[1:]):
        data = stream.read(end - at if end >= 0 else -1)
        records = _piece_records(data, kind, at, closes == "1" and end == unit.end, unit.path)
        yield list(range(row, row + len(records))), records
        row += len(records)


def _piece_records(data: bytes, kind: str, at: int, last: bool, path: str) -> list:
    """The records of a piece of one big JSON value (iter_range_groups) at file offset `at`; `last`:
    the piece that ends with the array's `]`."""
    where = f"{path}: bytes {at}-{at + len(data)}"
    if kind == "objects":
        records = concatenated_objects(data, least=1, place=_Place(data if at == 0 else None, at))
        if records is None and data.strip(_WHITESPACE):
            raise PrepError(f"{where}: not JSON objects one after another, though the file opens like them (a "
                            "lone `{` on its first line): the file is damaged, or it is JSON Lines whose first "
                            "record spans several lines; repair it, or write that record on one line")
        return records or []
    piece = data
    if at == 0:
        data = data[len(BOM):] if data.startswith(BOM) else data
        data = data.lstrip(_WHITESPACE)[1:]  # the `[` (json_cuts.py began the array there)
    else:
        data = data[1:]  # the comma before the piece's first record
    # b"[" + data below: its byte k is the file's byte at + (bytes cut before data) + k - 1
    place = _Place(piece if at == 0 else None, at + len(piece) - len(data) - 1)
    if last:
        data = data.rstrip(_WHITESPACE)[:-1]  # the `]` (json_cuts.py ended the array there)
    try:
        return orjson.loads(b"[" + data + b"]")
    except orjson.JSONDecodeError as e:
        records = _lenient(b"[" + data + b"]")
        if records is None:  # a record nested too deep for either parser?
            records = _records_one_by_one(b"[" + data + b"]", place)
        if records is None:
            raise PrepError(f"{where}: these records of the file's JSON array do not parse ({e}); the file is "
                            "damaged: repair or re-export it") from None
        return records


def concatenated_objects(data: bytes, least: int = 2, place: _Place | None = None) -> list[dict] | None:
    """The objects of a file holding several JSON objects one after another, pretty-printed (what
    `jq . file.jsonl` writes: `{\n  "text": ...\n}\n{\n ...`), or None when it is not such a file.
    An object that Python's json reads and orjson does not (NaN, a lone surrogate) is a Malformed
    record; one that neither reads, or a gap that is not whitespace, leaves the file to the line
    reader, whose rejects say what is wrong. Where the layout is not jq's, the stdlib decoder finds where each object
    ends (orjson cannot stop at a value's end). Fewer than `least` objects: None. Before, each line
    of such a file was a `malformed_json` reject. `place`: where `data` lies in its file (None: it is the
    file, from its start)."""
    body = data[len(BOM):] if data.startswith(BOM) else data
    if body.lstrip(_WHITESPACE)[:1] != b"{":
        return None
    # jq's layout first: an object's closing brace alone at the start of a line, the next object's
    # opening brace on the line after. A JSON string holds no raw newline, so such braces are outside
    # any string; and when every piece between them parses as one object, the pieces are the file's
    # objects (an object ends at one place only; each piece opens with `{`, so it parses to a dict).
    # 18 MB of jq output: 0.30 -> 0.16 s (a regex split allowing any whitespace there took 0.23 s of
    # that alone); parsing views of the body, 0.037 s where split() copied each object twice, 0.045 s
    # (joined with commas into one array to parse: 0.086 s).
    # Anything else: the stdlib scan below.
    lead = len(data) - len(body.lstrip(_WHITESPACE))  # the file offset of body's first byte, past place.base
    body = body.strip(_WHITESPACE)
    seps = [m.start() for m in _JQ_GAP.finditer(body)]
    if seps:
        view = memoryview(body)
        objects = map(view.__getitem__, map(slice, [0, *(i + 3 for i in seps)], [*(i + 2 for i in seps), len(body)]))
        try:
            records = list(map(orjson.loads, objects))
            return records if len(records) >= least else None
        except orjson.JSONDecodeError:
            pass
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    import json  # only here: most runs never read such a file
    find_end = json.JSONDecoder().raw_decode
    gap = re.compile(r"[ \t\r\n]*")
    records, at = [], gap.match(text).end()
    try:
        while at < len(text):
            if text[at] != "{":
                return None
            try:
                record, end = find_end(text, at)
            except RecursionError:  # nested deeper than Python's json reads (~1,000 levels): one reject
                # Why: this made the whole file "not objects one after another", read as JSON Lines:
                # a reject per line, 0 documents (exit 0)
                end = _object_end(text, at)
                if end < 0:
                    return None
                try:  # orjson reads 1,024 levels
                    records.append(orjson.loads(text[at:end]))
                except orjson.JSONDecodeError as e:
                    where = (place or _Place(data)).of(text[at:end].encode("utf-8", "surrogatepass"),
                                                       lead + len(text[:at].encode("utf-8", "surrogatepass")), e)
                    records.append(_nested_too_deep(text[at:at + 1000], where) if too_deep(e)
                                   else Malformed(text[at:at + 1000], f"not JSON ({e})"))
                at = gap.match(text, end).end()
                continue
            try:
                records.append(orjson.loads(text[at:end]))
            except orjson.JSONDecodeError:  # NaN, a lone surrogate: Python's json read it, orjson does not
                records.append(_strict(record))
            at = gap.match(text, end).end()
    except (ValueError, RecursionError):  # json.JSONDecodeError is a ValueError
        return None
    return records if len(records) >= least else None


_STRUCTURE_TEXT = re.compile(_STRUCTURE.pattern.decode())


def _object_end(text: str, at: int) -> int:
    """One past the `}` that closes the object opening at `text[at]`, or -1 (its brackets do not balance)."""
    depth = 0
    for m in _STRUCTURE_TEXT.finditer(text, at):
        c = m[0]
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth <= 0:
                return m.end() if depth == 0 else -1
    return -1


def record_groups(records: list) -> Iterator[tuple[list[int], list]]:
    """(positions, records) of a whole file's records (their indexes), READ_ROWS at a time."""
    for i in range(0, len(records), READ_ROWS):
        yield list(range(i, min(i + READ_ROWS, len(records)))), records[i:i + READ_ROWS]


def iter_array_batches(source, bad: BadRecords, batch_docs: int, groups, meter: ByteProgress) -> Iterator[DocBatch]:
    """The documents of the (positions, records) groups of a file that is JSON but not JSON Lines
    (record_groups, iter_range_groups); a record's position is its index in its file's list."""
    extract = TextExtractor(source.text_field, source.text_template, source.encoding_errors)
    batcher = Batcher(source, bad, batch_docs, position_kind="row")
    limit = source.max_record_bytes
    replace = source.encoding_errors == "replace"

    def fast(rows: list) -> list[str] | None:
        texts = extract.many(rows)
        if texts is None or (limit is not None and max(map(len, texts), default=0) * 4 > limit
                             and any(len(t.encode("utf-8", "surrogatepass")) > limit for t in texts)):
            return None
        return texts

    def slow(positions: list[int], rows: list, before: int) -> None:
        for i, record in zip(positions, rows):
            if type(record) is Malformed:
                if record.mended is None or not replace:
                    bad.reject(record.reason, i, record.raw, record.detail, row=i)
                    continue
                record = record.mended
            try:
                text = extract(record)
            except RecordError as e:
                bad.reject(e.reason, i, orjson.dumps(record)[:1000], e.detail, row=i)
                continue
            if limit is not None and len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
                bad.reject("record_too_large", i, text, f"text longer than max_record_bytes {limit}", row=i)
                continue
            batcher.add(text, i)

    yield from batches_by_group(groups, batcher, meter, fast, slow)
