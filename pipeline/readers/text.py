"""Plain text (plain, .gz, .zst, .bz2, .xz): one document per file, per line, or per `doc_separator` piece.

* `doc_separator: null` (default): every file is one document. Small files are grouped into units of
  about `unit_bytes` (a directory of a million files is not a million units); a document's position
  is the file's number in the source's sorted file list (the unit's `file_index` is 0: the source is
  one logical file whose records are its files), so the train/val split does not depend on grouping.
* `doc_separator: "\\n"`: one document per line (a trailing "\\r" of CRLF files is dropped).
* any other string: files are split on it, literally (not a regex).
Empty pieces (blank lines, a separator at the end of a file) are not documents; whitespace is kept.

Per-line and separator units are byte ranges of plain files, as for JSONL: a unit owns the pieces
whose first byte lies in its range (of a .gz/.zst file: ranges of its decompressed bytes, which the
parent decompresses once into windows, pipeline.spool). That needs a separator that cannot overlap itself (no proper
prefix equal to a suffix: "\\n", "<|endoftext|>", "\\x1e" are fine). For one that can, where a piece
starts depends on where scanning started: a plain local file split on one byte repeated ("\\n\\n",
"----") is cut at the ends of runs of that byte, which every scan reads alike (text_cuts.py); any
other file is one unit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import repeat

from pipeline.filters import Batcher
from pipeline.readers import text_cuts
from pipeline.readers.base import (
    BOM,
    REJECT_PREVIEW_CHARS,
    BadRecords,
    ByteProgress,
    DocBatch,
    WorkUnit,
    batches_by_group,
    compression_of,
    decode_errors,
    decode_utf8,
    file_size,
    local_path,
    open_input,
    open_unit,
    ranged_input_bytes,
    unreadable,
    without_bom,
)
from pipeline.readers.jsonl import iter_line_groups, plan_byte_ranges, seek_line_start
from pipeline.readers.sniff import HEAD_BYTES, refuse_mislabeled, refuse_mislabeled_stream
from pipeline.recipe import SourceConfig
from pipeline.source_formats import is_url

__all__ = ["plan", "input_bytes", "iter_batches", "iter_pieces", "seek_piece_start", "self_overlapping",
           "whole_file_fix"]

READ_BLOCK = 4 << 20
HEAD_READ = 1 << 16  # a whole file's first read: most files of a directory of documents are smaller


def whole_file_fix(where: str = "source") -> str:
    """What a text file over max_record_bytes most likely needs (nanoGPT's one big input.txt): it was
    read as one document because doc_separator is null. The reject's detail and the empty dataset's note."""
    return (f"a text file read whole ({where}.doc_separator: null) is one document: set {where}.doc_separator: "
            f'"\\n\\n" (paragraphs) or "\\n" (lines) to make documents of it, or raise {where}.max_record_bytes '
            "(null: no limit) to keep it one document")


def self_overlapping(sep: bytes) -> bool:
    """True when two occurrences of `sep` can overlap ("aa", "abab"): byte-range cutting is unsafe."""
    return any(sep[:k] == sep[-k:] for k in range(1, len(sep)))


def input_bytes(source: SourceConfig, files: list[str], unit_bytes: int) -> int:
    """What `plan` at `unit_bytes` covers: whole files (one document per file, or a self-overlapping
    separator) by their size on disk; else as byte ranges. 100,000 one-document files: one plan, not
    two, saves the parent ~0.05 s."""
    sep = source.doc_separator
    if sep is None or self_overlapping(sep.encode("utf-8")):
        return sum(file_size(p, source.storage_options) for p in files)
    return ranged_input_bytes(files, unit_bytes, "text", source.storage_options)


def plan(source: SourceConfig, source_index: int, files: list[str], unit_bytes: int) -> list[WorkUnit]:
    so = source.storage_options
    if source.doc_separator is not None:
        if not self_overlapping(source.doc_separator.encode("utf-8")):
            return plan_byte_ranges(source_index, files, unit_bytes, "text", so, split_compressed=True)
        sep = source.doc_separator.encode("utf-8")  # "\n\n": cut at runs of it (text_cuts), else whole files
        return [u for fi, p in enumerate(files) for u in text_cuts.plan_file(source_index, fi, p, file_size(p, so),
                                                                             unit_bytes, sep)]
    units: list[WorkUnit] = []
    group: list[str] = []
    first, acc = 0, 0
    for fi, path in enumerate(files):
        size = file_size(path, so)
        if group and acc + size > unit_bytes:
            units.append(WorkUnit(0, source_index, 0, group[0], "text", first, fi, acc, tuple(group)))
            group, first, acc = [], fi, 0
        group.append(path)
        acc += size
    if group:
        units.append(WorkUnit(0, source_index, 0, group[0], "text", first, len(files), acc, tuple(group)))
    return units


def iter_pieces(f, start: int, end: int, sep: bytes, max_bytes: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(offset, piece) for pieces (split on `sep`) whose first byte is in [start, end); end=-1: to EOF.

    `f` is positioned at `start`, a piece start. A piece longer than `max_bytes` is yielded cut short
    (still longer than `max_bytes`) and never held whole in memory.
    """
    n_sep = len(sep)
    cap = max_bytes + 1 if max_bytes is not None else None
    buf = bytearray()
    k = 0          # buf[k:] is the current piece (so far)
    scan = 0       # where to look for the next separator
    head = None    # the kept start of an over-long piece
    dropped = 0    # bytes of that piece not kept
    pos = start
    eof = False
    while True:
        i = buf.find(sep, max(k, scan))
        if i >= 0:
            if 0 <= end <= pos:
                return
            if head is None:
                piece, n = bytes(buf[k:i]), i - k
            else:
                piece, n = head, len(head) + dropped + i - k
                head, dropped = None, 0
            yield pos, piece
            pos += n + n_sep
            k = scan = i + n_sep
            continue
        if eof:
            if (len(buf) > k or head is not None) and not 0 <= end <= pos:
                yield pos, bytes(buf[k:]) if head is None else head
            return
        del buf[:k]
        k = 0
        keep = n_sep - 1  # a separator may straddle the next read
        if cap is not None and head is None and len(buf) > cap + keep:
            head = bytes(buf[:cap])
            dropped = len(buf) - cap - keep
            del buf[:len(buf) - keep]
        elif head is not None and len(buf) > keep:
            dropped += len(buf) - keep
            del buf[:len(buf) - keep]
        scan = max(0, len(buf) - keep)
        chunk = f.read(READ_BLOCK)
        if chunk:
            buf += chunk
        else:
            eof = True


def seek_piece_start(f, start: int, sep: bytes, end: int = -1) -> int | None:
    """Position `f` at the first piece starting at or after `start` (sep must not overlap itself);
    None when no piece starts there, or (with `end` >= 0) none before `end`: the scan stops at `end`,
    as jsonl.seek_line_start's does (each unit of a file holding no separator read on to its end).
    `f` is at 0 when `start` is 0 (a .zst stream cannot seek)."""
    if start == 0:
        return 0
    at = max(0, start - len(sep))
    f.seek(at)
    reached = at  # the next byte to read
    buf = b""
    while True:
        # a separator whose last byte is at end - 2 at the latest starts a piece before `end`
        want = READ_BLOCK if end < 0 else min(READ_BLOCK, end - 1 - reached)
        chunk = f.read(want) if want > 0 else b""
        if not chunk:
            return None
        reached += len(chunk)
        data = buf + chunk
        i = data.find(sep)
        if i >= 0:
            piece = at + i + len(sep)
            f.seek(piece)
            return piece
        keep = min(len(sep) - 1, len(data))  # a separator may straddle the next read
        at += len(data) - keep
        buf = data[len(data) - keep:] if keep else b""


def iter_batches(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    if source.doc_separator is None:
        yield from _iter_files(unit, source, bad, batch_docs)
        return
    sep = source.doc_separator.encode("utf-8")
    per_line = sep == b"\n"
    batcher = Batcher(source, bad, batch_docs)
    limit = source.max_record_bytes if source.max_record_bytes is not None else float("inf")
    stream, raw = open_unit(unit, source.storage_options)  # a compressed file's range: its spooled window
    meter = ByteProgress(unit, stream, raw)
    # line/piece numbers are known from the file start only: a later unit's rejects (a cut "\n\n" file's
    # too) give byte positions; numbering them would count a file's pieces before each cut in the parent
    count = unit.start == 0

    with raw, stream, decode_errors(unit.path, raw, storage_options=source.storage_options, stream=stream, bad=bad):
        if unit.start == 0:  # gzip, UTF-16, an archive under a plain name: stop with the fix (sniff.py)
            refuse_mislabeled_stream(unit.path, stream)
        if per_line:
            pos = seek_line_start(stream, unit.start, unit.end)
            # a read block's lines at a time (see jsonl.iter_line_groups)
            groups = iter_line_groups(stream, pos, unit.end, source.max_record_bytes)
        else:
            if self_overlapping(sep):  # planned at a piece start (text_cuts), or the whole file
                pos = unit.start
                if pos:
                    stream.seek(pos)
            else:
                pos = seek_piece_start(stream, unit.start, sep, unit.end)
            pieces = iter(()) if pos is None else iter_pieces(stream, pos, unit.end, sep, source.max_record_bytes)
            groups = (([offset], [piece]) for offset, piece in pieces)
        if pos is None or 0 <= unit.end <= pos:
            groups = iter(())
        groups = without_bom(groups, pos == 0, source.max_record_bytes)
        if per_line:
            groups = _noting_lone_crs(groups, unit.path, bad)

        def fast(pieces: list) -> list[str] | None:
            return _plain_lines(pieces, limit) if per_line else None

        def slow(offsets: list[int], pieces: list, before: int) -> None:
            _one_by_one(offsets, pieces, before if count else None, per_line, source, batcher, bad)

        yield from batches_by_group(groups, batcher, meter, fast, slow)


def _noting_lone_crs(groups, path: str, bad: BadRecords):
    """`groups` as they are; a notice when the unit's first read block has a line holding two carriage
    returns or more (after its CRLF's): a file whose lines end in a lone CR (classic Mac, some exports)
    was one document per file, 3,000 lines one document of 199,144 tokens, with no word. One look per
    unit (C-level count()s over its first block's lines, ~1 ms for 16 MiB units)."""
    first = True
    for offsets, lines in groups:
        if first:
            first = False
            crs = max((bytes(line).rstrip(b"\r").count(b"\r") for line in lines), default=0)
            if crs >= 2:
                bad.notice("lone_cr", f"{path}: a line holds {crs:,} carriage returns (\\r) not followed by a newline, so "
                           "the lines of a file that ends them so (classic Mac, some exports) are one document; "
                           "if so, convert its line endings (tr '\\r' '\\n' < in > out)")
        yield offsets, lines


def _plain_lines(lines: list, limit: float) -> list[str] | None:
    """The lines as texts when every one is a document as it stands (not blank, no CR before the
    newline, not too long, UTF-8), with C-level loops; else None (`_one_by_one` then)."""
    if b"" in lines or max(map(len, lines)) > limit:
        return None
    try:
        texts = list(map(str, lines, repeat("utf-8")))
    except UnicodeDecodeError:
        return None
    return None if any(map(str.endswith, texts, repeat("\r"))) else texts


def _one_by_one(offsets: list[int], pieces: list, number: int | None, per_line: bool, source: SourceConfig,
                batcher: Batcher, bad: BadRecords) -> None:
    """Each piece on its own: texts to `batcher`, bad ones to `bad` (numbered when `number`, the
    pieces before these, is known)."""
    limit = source.max_record_bytes if source.max_record_bytes is not None else float("inf")
    # a "\n\n" file's 5th paragraph was reported "at line 5", though on line 9: it is piece 5 (BadRecords.reject)
    counted = "line" if per_line else "piece"
    for k, (offset, piece) in enumerate(zip(offsets, pieces), 1):
        at = number + k if number is not None else None
        if per_line and piece[-1:] == b"\r":  # piece: bytes or a memoryview (iter_line_groups)
            piece = piece[:-1]
        if not piece:
            continue
        if len(piece) > limit:
            bad.reject("record_too_large", offset, piece, f"longer than max_record_bytes {source.max_record_bytes}",
                       **{counted: at})
            continue
        text = decode_utf8(piece, source.encoding_errors)
        if text is None:
            bad.reject("invalid_utf8", offset, piece, "not UTF-8", **{counted: at})
            continue
        batcher.add(text, offset)


def _read_local(path: str, limit: int | None) -> tuple[bytes, int]:
    """(all of a local file, or when it is over `limit` only its start; its size). os.open/os.read,
    no stat() or buffered file object: 30,000 files of 600 bytes in 0.15 s instead of 0.32 s (a
    directory of small files is open()-bound: 100,000 took 2.1 s of a worker's time to read). A file
    that fills the first read gets an fstat: one over `limit` is rejected unread past that read (its
    preview), where reading limit + 1 bytes (64 MiB) took a 70 MB file's reject to a peak RSS of
    221 MB against 118 MB for a small file's."""
    try:
        fd = os.open(local_path(path), os.O_RDONLY)
    except OSError as e:
        raise unreadable(path, e) from None
    try:
        want = HEAD_READ if limit is None else min(HEAD_READ, limit + 1)
        head = os.read(fd, want)
        size = 0
        if limit is not None and len(head) == want:
            size = os.fstat(fd).st_size  # 0 for a /proc file or a pipe: read to learn it, as before
            if size > limit:
                return head, size
        data = _read_capped(lambda n: os.read(fd, n), limit, head=head) if head else head
        return data, max(size, len(data))  # a file grown since its fstat is still over the limit when read
    finally:
        os.close(fd)


def _read_capped(read, limit: int | None, first: int = READ_BLOCK, head: bytes = b"") -> bytes:
    """`head` then all that `read(n)` gives, or their first limit + 1 bytes when longer (the caller
    rejects it); the first read asks for `first` bytes (a small file: one read, then the one that says EOF)."""
    blocks, n = ([head], len(head)) if head else ([], 0)
    while limit is None or n <= limit:
        want = (READ_BLOCK if n else first) if limit is None else min(READ_BLOCK if n else first, limit + 1 - n)
        block = read(want)
        if not block:
            break
        blocks.append(block)
        n += len(block)
    return blocks[0] if len(blocks) == 1 else b"".join(blocks)


def _iter_files(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    batcher = Batcher(source, bad, batch_docs, position_kind="file")
    limit = source.max_record_bytes
    so = source.storage_options
    reported = done = 0
    for j, path in enumerate(unit.paths or (unit.path,)):
        number = unit.start + j  # the document's position: the file's number in the source
        if not compression_of(path) and not is_url(path):
            data, size = _read_local(path, limit)
            done += size
            if limit is not None and size > limit:
                bad.reject("record_too_large", number, data[:4 * REJECT_PREVIEW_CHARS],
                           f"{size} bytes > max_record_bytes {limit}; {whole_file_fix()}", path=path)
                continue
        else:
            stream, raw = open_input(path, so)
            with raw, stream, decode_errors(path, raw, storage_options=so, stream=stream, bad=bad):
                data = _read_capped(stream.read, limit)
                done += raw.tell()
            if limit is not None and len(data) > limit:
                bad.reject("record_too_large", number, data, f"more than max_record_bytes {limit} decompressed; "
                           f"{whole_file_fix()}", path=path)
                continue
        refuse_mislabeled(path, data[:HEAD_BYTES], compression_of(path))  # a .tar.gz, say (sniff.py)
        if data[:3] == BOM:
            data = data[3:]
        text = decode_utf8(data, source.encoding_errors)
        if text is None:
            bad.reject("invalid_utf8", number, data, "not UTF-8", path=path)
            continue
        if batcher.add(text, number):
            yield batcher.take(min(done, unit.size) - reported)
            reported = min(done, unit.size)
    yield batcher.take(unit.size - reported)
