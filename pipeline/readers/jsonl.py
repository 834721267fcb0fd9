"""JSONL (plain, .gz, .zst, .bz2, .xz): one JSON object per line, text under a dotted key.

Plain files are cut into byte ranges of about `unit_bytes`; a unit owns every line whose first
byte lies in [start, end), so any cut gives each line to exactly one unit. A compressed file cannot
be entered mid-stream: it is cut into ranges of its decompressed bytes, which the parent decompresses
once into a window file per unit (pipeline.spool). A file that is one JSON array of records instead,
pretty-printed objects one after another, or one JSON object holding the records in a list
(`source.records_field`; json_array.py), is cut between its records (json_cuts.py; compressed, at
its decompressed bytes, again through windows). A UTF-8 BOM at a file's start is cut.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from itertools import accumulate

import numpy as np
import orjson

from pipeline import signed_urls
from pipeline.errors import PrepError
from pipeline.filters import Batcher, RecordError, TextExtractor
from pipeline.readers import json_array, json_cuts, surrogates
from pipeline.readers.base import (
    BOM,
    BadRecords,
    ByteProgress,
    DocBatch,
    WorkUnit,
    batches_by_group,
    compressed_ranges,
    compression_of,
    decode_errors,
    decode_failures,
    decompressor,
    file_size,
    is_damage,
    note_planning_damage,
    open_input,
    open_raw,
    open_unit,
    planned_decompressed_size,
    planned_head,
    ranged_input_bytes,
    serves_ranges,
    without_bom,
)
from pipeline.readers.salvage import salvaging_reader
from pipeline.readers.sniff import refuse_mislabeled_stream
from pipeline.recipe import SourceConfig
from pipeline.source_formats import is_url

log = logging.getLogger("prep")

__all__ = ["plan", "input_bytes", "iter_batches", "whole_small_files", "iter_lines", "iter_line_groups",
           "plan_byte_ranges", "seek_line_start"]

# bytes per read(). A block's lines are parsed, queued as texts and batched together, so a worker holds
# about a block, its texts and a batch at once. 1 MiB against 4 MiB, one process running 15 units of
# 8 MiB (docs x8, warm engine): RSS after the last 121 against 128 MiB, tracemalloc's peak per unit
# 10-15 against 16-23 MiB; as fast (8 units, best of 11 alternating: 0.37 against 0.44 s; short
# paragraphs 1.00 s both). The whole tree's peak moved less than its run-to-run spread (x8, 2 workers).
READ_BLOCK = 1 << 20
SEEK_BLOCK = 64 << 10  # bytes per read() while looking for the first line start of a unit
DENSE_LINE_BYTES = 512  # mean line length under which iter_lines splits blocks (see there)
DENSE_SAMPLE = 64 << 10  # bytes of a unit's first block whose lines decide how it is split




def plan_byte_ranges(source_index: int, files: list[str], unit_bytes: int, fmt: str,
                     storage_options: dict | None = None, split_compressed: bool = False) -> list[WorkUnit]:
    """Byte ranges of about `unit_bytes`. A compressed file is one unit, or with `split_compressed`
    ranges of its decompressed bytes (the parent decompresses it once into windows: pipeline.spool),
    planned from the size it declares; its last unit runs to the end of the stream."""
    units = []
    for fi, path in enumerate(files):
        size = file_size(path, storage_options)
        if compression_of(path):
            if split_compressed:
                units += compressed_ranges(source_index, fi, path, size, unit_bytes, fmt, storage_options)
            else:
                units.append(WorkUnit(0, source_index, fi, path, fmt, 0, -1, size))
            continue
        if size <= unit_bytes or not serves_ranges(path, storage_options):  # no ranges: one stream
            units.append(WorkUnit(0, source_index, fi, path, fmt, 0, -1, size))
            continue
        for start in range(0, size, unit_bytes):
            end = min(start + unit_bytes, size)
            units.append(WorkUnit(0, source_index, fi, path, fmt, start, end, end - start))
    return units


def input_bytes(source: SourceConfig, files: list[str], unit_bytes: int) -> int:
    """What `plan` at `unit_bytes` covers: its files' sizes (a compressed file's as its ranges),
    whether a file is cut into ranges or read whole as one JSON value."""
    return ranged_input_bytes(files, unit_bytes, "jsonl", source.storage_options)


def plan(source: SourceConfig, source_index: int, files: list[str], unit_bytes: int) -> list[WorkUnit]:
    so, field = source.storage_options, source.records_field
    units = plan_byte_ranges(source_index, files, unit_bytes, "jsonl", so, split_compressed=True)
    cut = {u.file_index for u in units if (u.start, u.end) != (0, -1)}
    # one JSON array or object has no line boundaries to cut at: cut between its records instead
    # (json_cuts.py), or one unit for the whole file. With records_field every file is one object.
    values = cut if field is not None else {fi for fi in cut if _holds_a_document(files[fi], so)}
    if not values and field is None:
        return units
    out: list[WorkUnit] = []
    for u in units:
        if u.file_index in values:
            if u.start == 0:
                out += _value_units(source_index, u.file_index, u.path, so, unit_bytes, field)
            continue
        if field is not None:
            _warn_big_document(u.path, u.size, "")
        out.append(u)
    return out


def _value_units(source_index: int, fi: int, path: str, storage_options: dict | None,
                 unit_bytes: int, field: str | None) -> list[WorkUnit]:
    """A file holding one big JSON value: ranges between its records, each knowing how many records
    come before it (json_cuts.py), or one unit for the whole file when it cannot be cut. `field`:
    the records are the list under this key of the file's object (source.records_field)."""
    size = file_size(path, storage_options)
    whole = WorkUnit(0, source_index, fi, path, "jsonl", 0, -1, size)
    piece = min(unit_bytes, json_cuts.PIECE_BYTES)
    # the JSON's size: a compressed file's decompressed size (planned here; measured by the scan)
    json_bytes = planned_decompressed_size(path, size, storage_options) if compression_of(path) else size
    damaged = False
    try:
        if compression_of(path) or field is not None:
            # read once from the start: a compressed file's decompressed bytes, scanned here, then
            # spooled into exact windows for the units (pipeline.spool), whose offsets and sizes count
            # decompressed bytes, as compressed JSON Lines' do; or the list under `field` in its object
            stream, raw = open_input(path, storage_options)
            read, cut_short = stream.read, ()
            if compression_of(path):  # damaged: every byte before the damage is scanned, as the spool gives them
                read, cut_short = salvaging_reader(stream.read, path, storage_options), decode_failures()
            with raw, stream, decode_errors(path, raw, storage_options=storage_options):
                try:
                    cuts, kind, why, (start, end) = json_cuts.scan_stream_cuts(
                        _Reads(read), piece, path, json_bytes, field, cut_short)
                except json_cuts.CutShort as short:  # the records before the damage keep their units, as
                    # JSON Lines' do; the last unit holds the damage (it reads to the end) and fails with it
                    if is_damage(short.error):  # a read error: the last unit reads the rest again
                        note_planning_damage(path, short.end, short.error)
                    cuts, kind, why, start, end = short.cuts, short.kind, short.why, short.start, short.end
                    damaged = True
        else:
            cuts, kind, why = json_cuts.scan_cuts(lambda: open_raw(path, storage_options), size, piece, path)
            start, end = 0, size
    except (OSError, PrepError):  # unreadable now, or damaged: one unit, whose worker says why
        return [whole]
    units = json_cuts.unit_bounds(cuts, end, unit_bytes, start)
    if len(units) == 1:
        _warn_big_document(path, max(json_bytes, end), why)
        return [whole]
    # the last unit runs to the file's end (-1), but a records_field list's ends at its `]` (a damaged
    # file's, to the end: its window then meets the damage)
    return [WorkUnit(0, source_index, fi, path, "jsonl", a, -1 if b == end and (field is None or damaged) else b,
                     b - a, payload=json_array.range_payload(kind, first, inner, closes=b == end and not damaged))
            for a, b, first, inner in units]


class _Reads:
    """A stream whose read(n) is `read` (scan_stream_cuts reads a salvaging reader so)."""

    def __init__(self, read):
        self.read = read


# A whole-file JSON value above this gets a warning: one worker parses it whole, holding ~5x its size
# (a 62 MB array: 295 MB), and encodes it alone while the others wait.
BIG_DOCUMENT_BYTES = 256 << 20


def _warn_big_document(path: str, nbytes: int, why: str) -> None:
    """`nbytes`: the JSON's size (a compressed file's decompressed size where it was scanned)."""
    if nbytes > BIG_DOCUMENT_BYTES:
        log.warning("%s: %.0f MB of JSON that is not JSON Lines, read whole by one worker (about %.1f GB of memory, no "
                    "other worker helps%s); as JSON Lines every worker shares it: jq -c '.[]' (an array), "
                    "jq -c '.data[]' (records under data) or jq -c . (objects one after another)",
                    path, nbytes / 1e6, 5 * nbytes / 1e9, f": {why}" if why else "")


def _holds_a_document(path: str, storage_options: dict | None) -> bool:
    """Whether a file to be cut into ranges is one JSON array or object instead (json_array.py). A URL's
    first bytes come in one range request (opening it would fetch a whole read block, 5 MB on s3fs,
    per file of the plan): 256 of a plain file, HEAD_COMPRESSED_BYTES of a compressed one, whose
    decompressed start is looked at: the start its planned size's sample read, when it was (no
    request at all then)."""
    if compression_of(path) and (head := planned_head(path)) is not None:
        return json_array.head_starts_a_document(head)
    if is_url(path):
        head = _url_head(path, storage_options, HEAD_COMPRESSED_BYTES if compression_of(path) else 256)
        if head is None:
            return False
    try:
        if is_url(path):
            if not compression_of(path):
                return json_array.head_starts_a_document(head)
            stream, raw = decompressor(path, io.BytesIO(head))
        else:
            stream, raw = open_input(path, storage_options)
        with raw, stream:
            return json_array.starts_a_document(stream)
    except Exception:  # unreadable or damaged: planned as lines, where its unit reports why
        return False


def _url_head(path: str, storage_options: dict | None, n: int) -> bytes | None:
    """The first `n` bytes of a URL (one range request), or None when it is missing or forbidden (its
    unit says so). A network error stops the plan naming the URL: taken for "not a JSON array", a
    stalled server cost its 60 s here and 60 s more in the unit before the run said why."""
    import fsspec

    from pipeline.readers import url_reads  # its import sets fsspec's http(s) stall timeout
    try:
        fs, p = fsspec.core.url_to_fs(signed_urls.address(path), **(storage_options or {}))
        return url_reads.retrying(path, lambda: fs.cat_file(p, start=0, end=n))
    except (FileNotFoundError, PermissionError, ValueError):  # ValueError: fsspec's of a range it cannot ask
        return None
    except PrepError:
        raise
    except Exception as e:  # a timeout, a reset, a 5xx after its retries
        raise url_reads.unreachable(path, e) from None


# compressed bytes fetched to see how a compressed URL's text starts: a stream's first block decodes
# alone (before, such a file was taken for JSON Lines: a .json.gz array on S3 gave one reject per line)
HEAD_COMPRESSED_BYTES = 64 << 10


def iter_lines(f, start: int, end: int, max_bytes: int | None = None) -> Iterator[tuple[int, bytes | memoryview]]:
    """(offset, line without newline) for lines whose first byte is in [start, end); end=-1: to EOF.

    The lines of `iter_line_groups`, one at a time.
    """
    for offsets, lines in iter_line_groups(f, start, end, max_bytes):
        yield from zip(offsets, lines)


def iter_line_groups(f, start: int, end: int, max_bytes: int | None = None
                     ) -> Iterator[tuple[list[int], list[bytes | memoryview]]]:
    """(offsets, lines without newline), one non-empty group per read block, for the lines whose
    first byte is in [start, end); end=-1: to EOF. Groups let a caller parse a block's lines with
    C-level loops (map over orjson.loads) instead of one Python iteration per line.

    `f` is positioned at `start` (a line start: 0, or right after a newline found by the caller).
    A line that lies inside one read block is a memoryview slice of that block, not a copy
    (orjson.loads reads memoryviews; callers that need bytes methods wrap it in bytes()).

    `chunk.split(b"\\n")` copies every line into a new bytes object; on benchmarks/data/docs.jsonl
    (57.6 MB, 7480 docs of ~7.7 KB) splitting took 50 ms, this 12 ms. Per line, though, `bytes.find`
    plus a slice is ~0.1 us of Python more than split's C loop, which wins on short lines (110-byte
    lines: 105 ms vs 156 ms for 43.5 MB; even at ~300 bytes). So a block whose predecessor's lines
    averaged under DENSE_LINE_BYTES is split as before. Only a line spanning blocks is joined (a copy
    of that line); the partial line at a block's end is copied so no view keeps a whole block alive.
    A line longer than `max_bytes` is yielded cut short (but still longer than `max_bytes` + 1, so the
    caller can tell, after cutting a CR too), and never held whole in memory.
    """
    pos = start  # offset of the next line's first byte
    pending: list[bytes] = []  # pieces of a line that started in an earlier block
    pending_len = 0
    # a line cut short keeps at least max_bytes + 2 bytes: the text reader strips a CR before the
    # newline, and a line cut at max_bytes + 1 that ended in one ("aaaaaa\rb", max 6) became a
    # document of max_bytes, its rest lost (hypothesis found it)
    cap = max_bytes + 2 if max_bytes is not None else None
    stop = end if end >= 0 else sys.maxsize  # lines must start before `stop`
    dense = None  # the previous block's lines were short: split this one (None: no block read yet)
    nl = b"\n"
    while True:
        block = f.read(READ_BLOCK)
        if not block:
            if pending and pos < stop:
                yield [pos], [b"".join(pending)]
            return
        if dense is None:  # the first block: judged by its first 64 KiB
            dense = block.count(nl, 0, DENSE_SAMPLE) * DENSE_LINE_BYTES > min(len(block), DENSE_SAMPLE)
        if dense:
            parts = block.split(nl)
            i = len(parts[0]) if len(parts) > 1 else -1
        else:
            i = block.find(nl)
        if i < 0:
            if cap is None or pending_len < cap:
                pending.append(block)
            pending_len += len(block)
            continue
        offsets: list[int] = []
        lines: list = []
        j = 0  # where the next line starts in `block`
        if pending:
            if cap is None or pending_len < cap:
                pending.append(block[:i])
            length = pending_len + i
            line = b"".join(pending)
            pending, pending_len = [], 0
            if pos >= stop:
                return
            offsets.append(pos)
            lines.append(line)
            pos += length + 1
            j = i + 1
        if dense:
            tail = parts.pop()
            n = len(parts)
            if j:
                del parts[0]
            # starts of the lines: pos, then + (length + 1) per line; int64 cumsum, not a Python loop
            steps = np.fromiter(map(len, parts), np.int64, len(parts)) + 1
            ends = np.cumsum(steps) + pos  # ends[k]: where line k+1 starts
            starts = ends - steps
            keep = int(np.searchsorted(starts, stop)) if parts and starts[-1] >= stop else len(parts)
            offsets += starts[:keep].tolist()
            lines += parts[:keep]
            if keep < len(parts):  # the rest start at or after `stop`: the next unit's
                if offsets:
                    yield offsets, lines
                return
            if parts:
                pos = int(ends[-1])
        else:
            n = 1 if j else 0
            base = pos - j  # file offset of block[0]
            view = memoryview(block)
            find = block.find
            i = find(nl, j)
            while i >= 0:
                if base + j >= stop:
                    if offsets:
                        yield offsets, lines
                    return
                offsets.append(base + j)
                lines.append(view[j:i])
                n += 1
                j = i + 1
                i = find(nl, j)
            pos = base + j
            tail = block[j:]
        if offsets:
            yield offsets, lines
        if pos >= stop:
            return
        dense = len(block) < n * DENSE_LINE_BYTES
        if tail:
            pending.append(tail)
            pending_len = len(tail)


def seek_line_start(f, start: int, end: int = -1) -> int:
    """Position `f` at the first line starting at or after `start`; returns that offset. With `end`
    (>= 0), a line must start before it to count: the scan stops there and returns `end` (the unit
    owns no line) without positioning `f`. Unbounded, every unit of a 150 MB line scanned on to the
    line's end: 144 units of 1 MiB read ~10 GB between them, and the reads grew with the square of
    the line's length (a file's units at 16 MiB: ~32 GB for one 1 GB line)."""
    if start == 0:
        return 0
    pos = start - 1
    f.seek(pos)
    while True:  # the rest of the line that started before `start`, in blocks (it may be huge)
        # a newline at end - 2 at the latest starts a line before `end`
        want = SEEK_BLOCK if end < 0 else min(SEEK_BLOCK, end - 1 - pos)
        if want <= 0:
            return end
        block = f.read(want)
        i = block.find(b"\n")
        if i >= 0 or not block:
            pos += i + 1 if i >= 0 else 0
            f.seek(pos)
            return pos
        pos += len(block)


def iter_batches(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    # a spooled window is read at the decompressed stream's offsets: the same lines, positions, rejects
    stream, raw = open_unit(unit, source.storage_options)
    extract = TextExtractor(source.text_field, source.text_template, source.encoding_errors)
    batcher = Batcher(source, bad, batch_docs)
    max_bytes = source.max_record_bytes
    meter = ByteProgress(unit, stream, raw)
    count_lines = unit.start == 0  # line numbers for the rejects list are known from the file start only

    fast = _good_texts(extract, max_bytes)

    def slow(offsets: list[int], lines: list, before: int) -> None:
        _one_by_one(offsets, lines, before if count_lines else None, source, extract, batcher, bad)

    with raw, stream, decode_errors(unit.path, raw, storage_options=source.storage_options, stream=stream, bad=bad):
        if unit.payload:  # a range of the records of one big JSON value (json_cuts.py)
            stream.seek(unit.start)
            groups = json_array.iter_range_groups(stream, unit)
            yield from json_array.iter_array_batches(source, bad, batch_docs, groups, meter)
            return
        if unit.start == 0:  # gzip, UTF-16, an archive under a plain name: stop with the fix (sniff.py)
            refuse_mislabeled_stream(unit.path, stream)
        whole = (unit.start, unit.end) == (0, -1)
        if whole and stream is raw and unit.size <= READ_BLOCK:
            # a small plain file (a group's member, say) at once: 82 -> 56 us per file of 3.2 KB
            data = stream.read()
            good = None if source.records_field is not None else _all_good_lines(data, fast)
            if good is not None:
                yield from batches_by_group([good], batcher, meter, lambda texts: texts, slow)
                return
            stream = io.BytesIO(data)  # anything else: read as below, from memory
        if whole and (source.records_field is not None or json_array.starts_a_document(stream)):
            data = stream.read()
            records = json_array.read_document(data, source.records_field, unit.path, extract)
            if records is not None:
                del data
                groups = json_array.record_groups(records)
                yield from json_array.iter_array_batches(source, bad, batch_docs, groups, meter)
                return
            stream = io.BytesIO(data)  # JSON Lines after all: its lines, from memory
        pos = seek_line_start(stream, unit.start, unit.end)
        # memoryview lines, see iter_line_groups: reader-only on docs.jsonl ~520 -> ~680 MB/s (best of 5)
        groups = (iter_line_groups(stream, pos, unit.end, max_bytes) if unit.end < 0 or pos < unit.end
                  else iter(()))
        groups = without_bom(groups, pos == 0, max_bytes)
        yield from batches_by_group(groups, batcher, meter, fast, slow)


def _good_texts(extract: TextExtractor, max_bytes: int | None):
    """lines -> their texts when every line is a good record, else None. A block whose every line is
    a good record goes through C-level loops; 324 K short records (62 MB): 1.2 s -> ~0.2 s of Python
    per core. Any blank, too long, malformed or textless line sends its block through `_one_by_one`,
    which names each bad line."""
    loads = orjson.loads

    def fast(lines: list) -> list[str] | None:
        if max_bytes is not None and max(map(len, lines)) > max_bytes:
            return None
        try:
            return extract.many(list(map(loads, lines)))
        except orjson.JSONDecodeError:
            return None
    return fast


def _whole_file_lines(data: bytes) -> list[bytes] | None:
    """A whole file's lines, or None when it opens with a BOM or with a JSON value (json_array.py), or
    holds none: those take the general path."""
    if data.startswith(BOM) or json_array.head_starts_a_document(data[:256]):
        return None
    lines = data.split(b"\n")
    if not lines[-1]:
        lines.pop()
    return lines or None


def _line_offsets(lines: list[bytes]) -> list[int]:
    # line k starts after lines 0..k-1 and their newlines; C-level (no Python lambda per line)
    return list(accumulate(map((1).__add__, map(len, lines[:-1])), initial=0))


def _all_good_lines(data: bytes, fast) -> tuple[list[int], list[str]] | None:
    """(line offsets, texts) of a whole file's JSON Lines when `fast` takes every line (each a good
    record: no blank, malformed, too long or textless line), else None. Not for a file that opens with a
    BOM or is one JSON value (json_array.py): those take the general path, as does any bad line, so
    this gives what it would, line for line. Per file of 3.2 KB, against the general path's generator
    stack (open_unit, a peek, seek_line_start, iter_line_groups, without_bom): 82 -> 56 us."""
    lines = _whole_file_lines(data)
    texts = fast(lines) if lines else None
    return None if texts is None else (_line_offsets(lines), texts)


# a group's small files are parsed together (whole_small_files) up to this many lines or bytes a call
# (4 MiB of raw lines and their texts held at once, where the line reader holds 1 MiB blocks)
GROUP_PARSE_LINES = 4096
GROUP_PARSE_BYTES = 4 << 20


def whole_small_files(members: tuple[WorkUnit, ...], source: SourceConfig
                      ) -> Iterator[tuple[WorkUnit, tuple[list[int], list[str]] | None]]:
    """Each member of a group of small whole files (readers.group_small_files), in order, with its
    (line offsets, texts) when it is plain JSON Lines whose every line is a good record: what
    iter_batches gives for it. Else None: the caller reads that member with iter_batches, whose
    rejects and errors name what is wrong (so a bad file costs one more read).

    Why: 100,000 files of one record each took ~65 us per file through iter_batches, 5.3 s in all
    against 1.8 s for the same documents as text files. Here a file costs its open and read; the
    members' lines are parsed together, up to GROUP_PARSE_LINES or GROUP_PARSE_BYTES at a time (a
    chunk holding a bad line is parsed again file by file)."""
    fast = _good_texts(TextExtractor(source.text_field, source.text_template, source.encoding_errors), source.max_record_bytes)
    chunk: list[tuple[WorkUnit, list[bytes]]] = []
    lines_in_chunk = bytes_in_chunk = 0
    for member in members:
        lines = None
        if source.records_field is None and not compression_of(member.path) and member.size <= READ_BLOCK:
            try:
                with open_raw(member.path, source.storage_options) as f:
                    lines = _whole_file_lines(f.read())
            except Exception:  # gone, unreadable, a network error: iter_batches reads it again and says so,
                pass           # as the member's own failure (this generator must not fail the group)
        if lines is None:
            yield from _parsed_together(chunk, fast)
            chunk, lines_in_chunk, bytes_in_chunk = [], 0, 0
            yield member, None
            continue
        chunk.append((member, lines))
        lines_in_chunk += len(lines)
        bytes_in_chunk += member.size
        if lines_in_chunk >= GROUP_PARSE_LINES or bytes_in_chunk >= GROUP_PARSE_BYTES:
            yield from _parsed_together(chunk, fast)
            chunk, lines_in_chunk, bytes_in_chunk = [], 0, 0
    yield from _parsed_together(chunk, fast)


def _parsed_together(chunk: list[tuple[WorkUnit, list[bytes]]], fast
                     ) -> Iterator[tuple[WorkUnit, tuple[list[int], list[str]] | None]]:
    texts = fast([line for _, lines in chunk for line in lines]) if chunk else None
    at = 0
    for member, lines in chunk:
        if texts is not None:
            got = texts[at:at + len(lines)]
            at += len(lines)
        else:  # some line of the chunk is bad: find its file
            got = fast(lines)
        yield member, None if got is None else (_line_offsets(lines), got)


_BLANK = "blank"


def _loads(line, replace: bool) -> tuple[object, str, str]:
    """One line's record and "", "", or None and why not (a reject reason and its detail; _BLANK for
    a blank line, which is no record). `replace`: source.encoding_errors is replace."""
    try:
        return orjson.loads(line), "", ""
    except orjson.JSONDecodeError as e:
        error = str(e)
    # blankness is checked only here (a memoryview has no strip(), and no blank line is JSON)
    if not bytes(line).strip():
        return None, _BLANK, ""
    if bytes(line[:3]) == BOM:  # a Windows tool's file after another (`cat a.jsonl b.jsonl > all.jsonl`):
        return _loads(line[3:], replace)  # its BOM opens a line in the middle; the record after it is whole
    if "utf-8" in error.lower() or surrogates.ESCAPE_ERROR in error:
        return _mended(bytes(line), error, replace)
    if b"\r" in bytes(line).rstrip():  # records ended by a lone CR (classic Mac, some exports) are one
        # line to JSON Lines, so a whole file was one reject "unexpected content after document"
        return None, "malformed_json", (error[:80] + "; the line holds a lone carriage return (\\r) between "
                                        "values: convert the file's line endings (tr '\\r' '\\n')")
    return None, "malformed_json", error[:120]


def _mended(line: bytes, error: str, replace: bool) -> tuple[object, str, str]:
    """_loads of a line orjson refused (`error`) for what its text holds: invalid UTF-8, or a lone
    surrogate escape (surrogates.py), each U+FFFD when `replace`, else an invalid_utf8 or lone_surrogate
    reject; the one may hide the other, and any other fault is malformed_json. A lone surrogate was a
    malformed_json reject under replace too."""
    lone, decoded = 0, False
    while True:
        if surrogates.ESCAPE_ERROR in error and not lone:
            line, lone = surrogates.mend_escapes(line)
            if not lone:
                return None, "malformed_json", error[:120]
        elif "utf-8" in error.lower() and not decoded:
            if not replace:
                return None, "invalid_utf8", error[:120]
            line, decoded = str(line, "utf-8", "replace").encode("utf-8"), True
        else:
            return None, "malformed_json", error[:120]
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            error = str(e)
            continue
        if lone and not replace:
            return None, surrogates.REASON, surrogates.detail(lone)
        return record, "", ""


def _one_by_one(offsets: list[int], lines: list, lineno: int | None, source: SourceConfig,
                extract: TextExtractor, batcher: Batcher, bad: BadRecords) -> None:
    """Each line of a group on its own: texts to `batcher`, bad lines to `bad` (with line numbers
    when `lineno`, the lines before this group, is known)."""
    max_bytes = source.max_record_bytes
    limit = max_bytes if max_bytes is not None else float("inf")
    replace = source.encoding_errors == "replace"
    for k, (offset, line) in enumerate(zip(offsets, lines), 1):
        at = lineno + k if lineno is not None else None
        if len(line) > limit:
            bad.reject("record_too_large", offset, line, f"line longer than max_record_bytes {max_bytes}",
                       line=at)
            continue
        record, reason, detail = _loads(line, replace)
        if reason and line[:1] == b"\0":  # a crash's lost writes, read back as NUL bytes up to the next record's end
            body = bytes(line).lstrip(b"\0")
            nul = len(line) - len(body)
            again = (None, _BLANK, "") if not body.strip() else _loads(body, replace)
            if again[1] in ("", _BLANK):  # NULs alone, or a record the writer appended after the crash: whole
                bad.reject("nul_bytes", offset, line[:min(nul, 16)], f"{nul:,} NUL bytes, where a crash lost a "
                           "file's last writes (the filesystem had extended it)", line=at)
                (record, reason, detail), offset = again, offset + nul
        if reason:
            if reason != _BLANK:
                bad.reject(reason, offset, line, detail, line=at)
            continue
        try:
            text = extract(record)
        except RecordError as e:
            bad.reject(e.reason, offset, line, e.detail, line=at)
            continue
        batcher.add(text, offset)
