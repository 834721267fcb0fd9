"""Document text from records, and the filters between reading and encoding.

* `TextExtractor`: a record's text from `text_field` (a dotted key) or from `text_template`
  ("{title}\\n\\n{text}", dotted names allowed), with the bad-record reasons readers report.
* `Batcher`: collects documents into `DocBatch`es and applies `min_chars` / `max_chars`. Filtered
  documents are counted in the manifest (`too_short`, `too_long`) but not listed in rejects.jsonl:
  they are a choice of the recipe, not bad input, and a length filter may drop a large share of a corpus.
* Exact dedup (`dedup: exact`): each worker writes a 128-bit BLAKE2b hash of every document it
  wrote, in unit order, next to its part shards (`DedupLog`); at finalize the parent orders all hashes
  by (hash, dataset position) and keeps the first occurrence of each text (`drop_duplicates`), so the
  result depends only on the dataset order, never on the number of workers or on resumes. Parts that
  lost documents are rewritten (others are untouched). Memory in the parent at finalize: 17 bytes per
  document on disk, ~42 bytes per document while sorting (100 M documents: ~4.2 GB).
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
import string
import sys
from itertools import accumulate
from pathlib import Path

import numpy as np

from pipeline.errors import PrepError
from pipeline.readers import surrogates
from pipeline.readers.base import DocBatch

__all__ = ["RecordError", "TextExtractor", "parse_template", "get_value", "list_keys", "Batcher", "DedupLog",
           "drop_duplicates", "DEDUP_DIR"]

DEDUP_DIR = "dedup"  # under the run's parts directory, so a reset of the run removes it too
_HASH_DTYPE = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("val", "u1")])
REWRITE_DOCS = 1 << 16  # documents copied per step when a part is rewritten (bounded memory)


class RecordError(Exception):
    """A record that yields no text: `reason` is the manifest's key, `detail` the human part."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def get_value(record, name: str):
    """record[name] if that key exists (CSV headers may contain dots), else the dotted path a.b.c, where
    a part that is an integer indexes a list (`messages.0.content`, `messages.-1.content` the last; as
    jq's .messages[0].content). Before, a list on the path was "'messages' is list, not an object"."""
    if isinstance(record, dict) and name in record:
        return record[name]
    node = record
    parts = name.split(".")
    for depth, part in enumerate(parts):
        # an object first: the common case (meta.text) costs one type check per part (the list check first
        # added one more per part: 160,000 isinstance calls, +3-4% CPU, over 80,000 Parquet rows)
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and _is_index(part) and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            raise RecordError("missing_field", f"no {name!r}; {_has(node, '.'.join(parts[:depth]), part)}")
    return node


_INDEX = re.compile(r"-?[0-9]+")  # ASCII digits: str.isdigit() took "²", which int() refuses (a traceback)


def _is_index(part: str) -> bool:
    """A dotted path's part that indexes a list: digits, or `-` and digits (from the end)."""
    return _INDEX.fullmatch(part) is not None


def _has(node, where: str, part: str = "") -> str:
    """What a record holds at `where` ("": its top), where a field was looked for: its keys there
    (the first 10), or its type; a list, its length and how to index it (`part`: what was looked for).
    Only on the way to a rejection, so never on the fast path."""
    where = repr(where) if where else "the record"
    if isinstance(node, list):
        if _is_index(part):
            return f"{where} is a list of {len(node):,} item{'' if len(node) == 1 else 's'}, with no index {part}"
        return f"{where} is a list, not an object; index it with a number ({where.strip(chr(39))}.0.{part})"
    if not isinstance(node, dict):  # a JSON null record was "NoneType"
        return f"{where} is {'null' if node is None else type(node).__name__}, not an object"
    return f"{where} has {list_keys(node)}" if node else f"{where} has no keys"


def list_keys(node: dict) -> str:
    """An object's keys (the first 10), and which of them hold lists of objects, where the records of
    a file that is one JSON object would be: "'version', 'data' ['data': a list of 5 objects]"."""
    keys = list(node)
    shown = f"{', '.join(map(repr, keys[:10]))}{' ...' if len(keys) > 10 else ''}"
    lists = [f"{k!r}: a list of {len(v):,} object{'' if len(v) == 1 else 's'}" for k, v in node.items()
             if isinstance(v, list) and v and isinstance(v[0], dict)][:3]
    return f"{shown} [{'; '.join(lists)}]" if lists else shown


def parse_template(template: str, where: str = "text_template") -> tuple[list[str], str]:
    """(field names, the template with positional fields): "{a.b} {c}" -> (["a.b", "c"], "{0} {1}")."""
    fields: list[str] = []
    out = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise PrepError(f"{where}: {template!r} is not a valid template ({e}); write fields as {{name}} and "
                        "literal braces as {{ }}") from None  # this half is no f-string: its braces are as printed
    for literal, name, spec, conversion in parsed:
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if name is None:
            continue
        if not name or name.isdigit() or "[" in name:
            raise PrepError(f"{where}: field {{{name}}} in {template!r}: name a record field, e.g. {{title}} "
                            "or {meta.title}")
        _check_spec(name, spec, conversion, template, where)
        if name not in fields:
            fields.append(name)
        out.append("{" + str(fields.index(name)) + (f"!{conversion}" if conversion else "")
                   + (f":{spec}" if spec else "") + "}")
    if not fields:
        raise PrepError(f"{where}: {template!r} names no field; write fields as {{name}}")
    return fields, "".join(out)


def _field_text(name: str, spec: str, conversion: str | None) -> str:
    """A template field as written: {name!conversion:spec}."""
    return "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"


# what a template's field can hold (TextExtractor takes these; a bool, null, list or object is a reject)
_FIELD_SAMPLES = ("", 0, 0.0)
# the largest width, and number precision, a template's spec may give: either makes a string that long of
# every value ({text:>1000000000}: 1 GB at validation, when a sample was formatted with it, and 1 GB per
# record after); far past any alignment or number format. A string's precision only cuts it: any is taken
_SPEC_MAX = 10_000
# [[fill]align] [sign] [z] [#] [0][width] [grouping] [.precision]: the digit runs of a format spec
_SPEC_NUMBERS = re.compile(r"[-+ ]?z?#?(\d*)[,_]?(?:\.(\d+))?")


def _spec_numbers(spec: str) -> tuple[int, int]:
    """(width, precision) of a format spec, 0 for one it does not give: ">20.5" -> (20, 5)."""
    rest = spec[2:] if spec[1:2] and spec[1] in "<>=^" else spec[1:] if spec[:1] in "<>=^" else spec
    m = _SPEC_NUMBERS.match(rest)  # matches every string (each part is optional)
    return int(m[1] or 0), int(m[2] or 0)


def _check_spec(name: str, spec: str, conversion: str | None, template: str, where: str) -> None:
    """PrepError for a field's conversion or format spec that no record could pass: str.format raised
    its ValueError mid-run, a traceback ({title!x}, {text:zz}). A spec that fits some of the kinds of
    value a field holds ({n:05d}: an integer) is checked per record: a value it does not fit is a
    bad record (`unformattable_field`, TextExtractor)."""
    field_ = _field_text(name, spec, conversion)
    if conversion and conversion not in "rsa":
        raise PrepError(f"{where}: {field_} in {template!r}: !{conversion} is not a conversion; use !r, !s or !a, "
                        "or none")
    if "{" in spec or "}" in spec:  # "{text:{width}}": the width would be looked up as a field of its own
        raise PrepError(f"{where}: {field_} in {template!r}: a format spec cannot hold a field; write the "
                        "spec out, as {text:>20}")
    if not spec:
        return
    width, precision = _spec_numbers(spec)
    if width > _SPEC_MAX:
        raise PrepError(f"{where}: {field_} in {template!r}: width {width:,} pads every value to that many "
                        f"characters; give at most {_SPEC_MAX:,} (a width aligns short values, as {{text:>20}})")
    if precision > _SPEC_MAX:
        try:
            format("", spec)  # a string's precision cuts it: nothing that long is made
            return
        except ValueError:
            raise PrepError(f"{where}: {field_} in {template!r}: precision {precision:,} writes every number with "
                            f"that many digits; give at most {_SPEC_MAX:,} (only a string's precision, which cuts "
                            "it, may be larger)") from None
    errors = []
    for sample in ("",) if conversion else _FIELD_SAMPLES:  # a conversion makes every value a string
        try:
            format(sample, spec)
            return
        except ValueError as e:
            errors.append(e)
    what = f"no string (what !{conversion} makes of every value)" if conversion else "no value"
    raise PrepError(f"{where}: {field_} in {template!r}: :{spec} formats {what} ({errors[0]}); fix the format "
                    "spec after the colon, or remove it")


def _format_error(template: str, fields: list[str], values: list) -> RecordError:
    """The record's reject when a template's spec does not fit one of its values ({n:d} on a string):
    the first field whose own spec fails, and why. Only on the way to a rejection."""
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        field_ = _field_text(name, spec, conversion)
        value = values[fields.index(name)]
        try:
            ("{0" + field_[len(name) + 1:]).format(value)
        except (ValueError, OverflowError) as e:
            shown = repr(value[:40] + "..." if type(value) is str and len(value) > 40 else value)
            return RecordError("unformattable_field", f"{field_} does not fit {name!r}, "
                                                      f"{type(value).__name__} {shown} ({e})")
    return RecordError("unformattable_field", f"{template!r} does not format this record")


SURROGATE_REASON = surrogates.REASON
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _char_fields(template: str, fields: list[str]) -> list[int]:
    """The indexes in `fields` of the fields `template` formats as a character (a spec ending in `c`:
    {n:c}, {n:>3c}; a fill character comes before an alignment, so `c` last is the type)."""
    return sorted({fields.index(name) for _, name, spec, _ in string.Formatter().parse(template)
                   if name is not None and spec and spec.endswith("c")})


class TextExtractor:
    """record -> text, raising RecordError(missing_field | null_text | non_string_text | unformattable_field)."""

    def __init__(self, text_field: str, template: str | None = None, encoding_errors: str = "skip"):
        if template is None:
            self.fields, self.format = [text_field], None
        else:
            self.fields, self.format = parse_template(template)
        self.template = template
        self.field = self.fields[0]
        # the fields a template writes as a character ({n:c}): one of 0xD800-0xDFFF is a lone surrogate
        self.chars = _char_fields(template, self.fields) if template else []
        self.replace = encoding_errors == "replace"

    def columns_in(self, names) -> tuple[list[str], list[str]]:
        """(the columns among `names` a columnar reader must load for the fields (Parquet projection,
        HF select_columns), the fields none of them holds). A field's column is the one its whole name
        names, when there is one, as get_value looks a literal key up first: Dataset.flatten() and
        pyarrow's Table.flatten() name a struct's fields `meta.body`. Else it is the top-level column
        its dotted path enters (`meta`, holding structs: checked per record). Once per file or dataset."""
        have = set(names)
        columns, missing = [], []
        for name in self.fields:
            column = name if name in have else name.split(".")[0]
            if column not in have:
                missing.append(name)
            elif column not in columns:
                columns.append(column)
        return columns, missing

    def __call__(self, record) -> str:
        if self.format is None:
            text = get_value(record, self.field)
            if type(text) is not str:
                raise _type_error(self.field, text)
            return text
        values = []
        for name in self.fields:
            v = get_value(record, name)
            if type(v) is not str and (isinstance(v, bool) or not isinstance(v, (str, int, float))):
                raise _template_null(name) if v is None else _type_error(name, v)
            values.append(v)
        lone = [i for i in self.chars if type(values[i]) is int and 0xD800 <= values[i] <= 0xDFFF]
        if lone and not self.replace:
            raise self._lone_surrogate(self.fields[lone[0]], values[lone[0]])
        try:
            text = self.format.format(*values)
        except (ValueError, OverflowError):  # {n:d} on a string, {n:c} past U+10FFFF: this record is bad
            raise _format_error(self.template, self.fields, values) from None
        # the character itself becomes U+FFFD, not the field's value: `{n} is {n:c}` keeps its number
        return _LONE_SURROGATE.sub("\ufffd", text) if lone else text

    def _lone_surrogate(self, name: str, value: int) -> RecordError:
        """The reject of a {n:c} value that is a lone surrogate (under encoding_errors: replace it is written
        as U+FFFD instead). Why: Python formats it (chr(0xD800) is a str), but no UTF-8 text holds one, and
        the tokenizer refused it in a worker (`TextInputSequence must be str`): as the JSON readers treat an
        escaped one (readers/surrogates.py)."""
        return RecordError(SURROGATE_REASON, f"{{{name}:c}} makes U+{value:04X} of {name!r} {value}, a lone UTF-16 "
                                            "surrogate (U+D800-U+DFFF), which no UTF-8 text can hold; set "
                                            "source.encoding_errors: replace to write it as U+FFFD")

    def many(self, records: list) -> list[str] | None:
        """The texts of all `records`, or None if any record would raise (the caller then goes one
        record at a time, naming each bad one). A plain key is one list comprehension: 324 K short
        records, 0.30 s through __call__ -> ~0.03 s."""
        if self.format is None and "." not in self.field:
            name = self.field
            try:
                texts = [r[name] for r in records]
            except (KeyError, TypeError, IndexError):  # no such key; a list, string or number record
                return None
        else:
            try:
                texts = list(map(self, records))
            except RecordError:
                return None
        if texts and set(map(type, texts)) != {str}:
            return None
        return texts

    def check(self, name: str, value) -> str:
        """Type check for a value a columnar reader fetched itself (the plain text_field case)."""
        if type(value) is not str:
            raise _type_error(name, value)
        return value


def _template_null(name: str) -> RecordError:
    """A text_template field that is null: the record is rejected, not written with the field empty (a
    `{title}\\n\\n{text}` whose text is null would be a document of its title alone). Why this detail:
    "'title' is null" did not say it was a template field nor what to do (review)."""
    return RecordError("null_text", f"text_template field {name!r} is null; fill it in the data (jq "
                                    f"'.{name} //= \"\"', pandas fillna('')) or leave {{{name}}} out of "
                                    "source.text_template")


def _type_error(name: str, value) -> RecordError:
    if value is None:
        return RecordError("null_text", f"{name!r} is null")
    if isinstance(value, dict):  # its keys: say, row labels (pandas_layout)
        return RecordError("non_string_text", f"{name!r} is an object ({list_keys(value)})")
    if isinstance(value, list) and value and all(type(v) is str for v in value):  # paragraphs, say
        return RecordError("non_string_text", f"{name!r} is a list of {len(value)} string{'s' if len(value) > 1 else ''}, not one")
    return RecordError("non_string_text", f"{name!r} is {type(value).__name__}")


PANDAS_FIX = "write it one record per line, as df.to_json(path, orient='records', lines=True), and read that"


def pandas_layout(keys: list[str], values_are_objects: bool) -> str:
    """pandas' DataFrame.to_json layout of a JSON object with these keys, or "": orient='split'
    (columns, index, data), 'columns' (pandas' default: each column an object of row label -> value;
    `values_are_objects`: the keys are those row labels) or 'index' (row labels -> records)."""
    if {"columns", "index", "data"} <= set(keys[:4]):
        return "orient='split'"
    if keys[:2] == ["0", "1"]:
        return "orient='columns', its default" if values_are_objects else "orient='index'"
    return ""


def pandas_layout_of_reject(detail: str) -> str:
    """pandas_layout of a file's one record from its reject's detail: "no 'text'; the record has '0',
    '1', ..." (index, split) or "'text' is an object ('0', '1', ...)" (columns)."""
    for lead, objects in (("the record has ", False), ("is an object (", True)):
        if lead in detail:
            return pandas_layout(re.findall(r"'([^']*)'", detail.split(lead, 1)[1]), objects)
    return ""


# A batch also closes at this many characters (~0.7 M GPT-2 tokens: the per-document id arrays and
# their concatenation, ~3 MB each as uint32). With 512 documents of docs.jsonl (~3.8 M characters)
# a worker's native heap kept growing for ~10 units (141 -> 164 MiB) as glibc kept the freed
# buffers; at 2 Mi characters it levels at 131 MiB from the fourth unit, no slower (10 units, 4
# interleaved runs: 0.86-0.91 s against 0.91-0.99 s). 1 Mi and 4 Mi gave 141 MiB. End to end, peak
# RSS of all processes, 2 workers: 55 MB 351-354 -> 315-324 MiB, 460 MB 388-399 -> 336-339 MiB.
# Short documents (paragraphs: ~85 K characters per 512) never reach it.
BATCH_CHARS = 2 << 20


def batch_cut(texts: list[str], chars: int, batch_docs: int, batch_chars: int = BATCH_CHARS) -> int:
    """How many of the queued `texts` (holding `chars` characters) make the next batch: `batch_docs`,
    or fewer, up to the one that brings it to `batch_chars` characters (all, when fewer are queued)."""
    n = min(batch_docs, len(texts))
    if chars >= batch_chars:  # the shortest prefix of the first n reaching batch_chars (C-level scan)
        n = min(n, bisect.bisect_left(list(accumulate(map(len, texts[:n]))), batch_chars) + 1)
    return n


class Batcher:
    """Documents -> DocBatches of `batch_docs`, or fewer once they hold `batch_chars` characters;
    drops (and counts) those outside [min_chars, max_chars]."""

    def __init__(self, source, bad, batch_docs: int, batch_chars: int | None = None, position_kind: str = "byte"):
        self.position_kind = position_kind  # DocBatch.position_kind
        self.lo = source.min_chars
        self.hi = source.max_chars if source.max_chars is not None else sys.maxsize
        self.filtering = self.lo > 0 or source.max_chars is not None
        self.bad = bad
        self.batch_docs = batch_docs
        self.batch_chars = BATCH_CHARS if batch_chars is None else batch_chars
        self.texts: list[str] = []
        self.positions: list[int] = []
        self.chars = 0  # in self.texts

    def add(self, text: str, position: int) -> bool:
        """Queue one document; True when a batch is full (call `take`)."""
        n = len(text)
        if self.filtering and not self.lo <= n <= self.hi:
            self.bad.count("too_short" if n < self.lo else "too_long")
            return False
        self.texts.append(text)
        self.positions.append(position)
        self.chars += n
        return len(self.texts) >= self.batch_docs or self.chars >= self.batch_chars

    def extend(self, texts: list[str], positions: list[int]) -> None:
        """Queue many documents (`add` for each, without a Python call per document); then take
        batches while `full()`."""
        if self.filtering:
            lo, hi = self.lo, self.hi
            lengths = list(map(len, texts))
            keep = [i for i, n in enumerate(lengths) if lo <= n <= hi]
            if len(keep) < len(texts):
                for n in lengths:  # in document order, as `add` counts them
                    if not lo <= n <= hi:
                        self.bad.count("too_short" if n < lo else "too_long")
                texts = [texts[i] for i in keep]
                positions = [positions[i] for i in keep]
        self.texts += texts
        self.positions += positions
        self.chars += sum(map(len, texts))

    def full(self) -> bool:
        return len(self.texts) >= self.batch_docs or self.chars >= self.batch_chars

    def take(self, nbytes: int) -> DocBatch:
        """The first `batch_docs` queued documents, or fewer: up to the one that brings the batch to
        `batch_chars` characters (all of them, when the queue holds less than either)."""
        n = batch_cut(self.texts, self.chars, self.batch_docs, self.batch_chars)
        if n >= len(self.texts):
            texts, positions, chars = self.texts, self.positions, self.chars
            self.texts, self.positions, self.chars = [], [], 0
        else:  # from the end of a long queue, one batch at a time would copy the rest each time
            texts, positions = self.texts[:n], self.positions[:n]
            del self.texts[:n], self.positions[:n]
            chars = sum(map(len, texts))
            self.chars -= chars
        return DocBatch(texts, np.asarray(positions, dtype=np.int64), nbytes, chars, self.position_kind)


# -- exact dedup -----------------------------------------------------------------------------------

class DedupLog:
    """Worker side: the hash and split of every document a unit wrote, in the order it wrote them."""

    def __init__(self):
        self._chunks: list[np.ndarray] = []

    def add(self, texts: list[str], keep: np.ndarray, is_val: np.ndarray) -> None:
        """`keep`: documents written (non-empty); `is_val`: their split. Both are bool[len(texts)]."""
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            return
        blake = hashlib.blake2b
        digests = b"".join(blake(texts[i].encode("utf-8", "surrogatepass"), digest_size=16).digest()
                           for i in idx.tolist())
        h = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
        rec = np.empty(idx.size, dtype=_HASH_DTYPE)
        rec["hi"], rec["lo"], rec["val"] = h[:, 0], h[:, 1], is_val[idx]
        self._chunks.append(rec)

    def absorb(self, other: DedupLog) -> None:
        """Append another log's documents (a group member's, pipeline.worker), after this one's."""
        self._chunks += other._chunks

    def write(self, directory: Path, prefix: str) -> str:
        """Write DIR/<prefix>.npy atomically; returns the file name for the unit's journal entry."""
        directory.mkdir(parents=True, exist_ok=True)
        data = np.concatenate(self._chunks) if self._chunks else np.zeros(0, dtype=_HASH_DTYPE)
        name = f"{prefix}.npy"
        tmp = directory / f"{prefix}.tmp.npy"
        with open(tmp, "wb") as f:
            np.save(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / name)
        from pipeline.shards import fsync_dir
        fsync_dir(directory)  # on disk before the unit's journal line, like its shards
        return name


def drop_duplicates(parts_root: Path, ok: list[dict], splits, dtype) -> tuple[list[dict], int]:
    """Parent side, at finalize: results (in unit order) with every later copy of a text removed.

    Returns new result dicts whose part lists point at rewritten parts where documents were dropped,
    and the number of documents dropped. Rewritten parts get new names, so running this again after a
    crash gives the same files.
    """
    logs = []
    for r in ok:
        path = parts_root / DEDUP_DIR / r["dedup"] if r.get("dedup") else None
        if path is not None and not path.exists():
            raise PrepError(f"{path}: the dedup hashes of unit {r['unit']} are missing (deleted by hand?); "
                            "re-run with --overwrite to rebuild the dataset")
        logs.append(np.load(path) if path is not None else np.zeros(0, _HASH_DTYPE))
    if not logs:
        return ok, 0
    sizes = np.array([len(x) for x in logs], dtype=np.int64)
    allh = np.concatenate(logs)
    if allh.size == 0:
        return ok, 0
    hi, lo = allh["hi"], allh["lo"]
    order = np.lexsort((lo, hi))  # stable: equal hashes stay in dataset order, the first one is kept
    hs, ls = hi[order], lo[order]
    dup_sorted = np.zeros(allh.size, dtype=bool)
    dup_sorted[1:] = (hs[1:] == hs[:-1]) & (ls[1:] == ls[:-1])
    del hs, ls
    dup = np.empty(allh.size, dtype=bool)
    dup[order] = dup_sorted
    del order, dup_sorted
    removed = int(dup.sum())
    if removed == 0:
        return ok, 0
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    out = []
    for k, r in enumerate(ok):
        d = dup[bounds[k]:bounds[k + 1]]
        if not d.any():
            out.append(r)
            continue
        is_val = logs[k]["val"].astype(bool)
        shards = dict(r["shards"])
        for split in splits:
            drop = d[is_val] if split == "val" else d[~is_val]
            if drop.any():
                shards[split] = _rewrite_parts(parts_root / split, r["shards"][split], drop, dtype)
        out.append({**r, "shards": shards})
    return out, removed


def _rewrite_parts(directory: Path, parts: list[dict], drop: np.ndarray, dtype) -> list[dict]:
    from pipeline.manifest import read_idx
    from pipeline.shards import ShardWriter

    new_parts = []
    first = 0
    for part in parts:
        n = part["num_docs"]
        d = drop[first:first + n]
        first += n
        if not d.any():
            new_parts.append(part)
            continue
        if d.all():
            continue  # every document of this part was a duplicate
        _, lengths, pointers = read_idx(directory / f"{part['name']}.idx")
        data = np.memmap(directory / f"{part['name']}.bin", dtype=dtype, mode="r")
        keep = ~d
        with ShardWriter(directory, f"{part['name']}.dedup", dtype) as w:
            for a in range(0, n, REWRITE_DOCS):
                b = min(a + REWRITE_DOCS, n)
                lens = np.asarray(lengths[a:b], dtype=np.int64)
                start = int(pointers[a]) // np.dtype(dtype).itemsize
                ids = np.asarray(data[start:start + int(lens.sum())])
                k = keep[a:b]
                if k.any():
                    w.add_documents(ids[np.repeat(k, lens)], lens[k])
        del data
        new_parts.append(w.info.to_dict())
    assert first == drop.size, "dedup log and part shards disagree on the number of documents"
    return new_parts
