"""Cut points inside one big JSON value, so that its records are shared by every worker.

A file that is one JSON array of records (`[{...}, {...}]`), or pretty-printed objects one after
another (what `jq . file.jsonl` writes), has no line boundaries to cut at: read whole, it is one
worker's unit, parsed at ~5x its size in memory. The parent scans such a plain file once and cuts
it between top-level records, about every `unit_bytes`; each unit then parses only its own records,
a piece of about PIECE_BYTES at a time. A 484 MB array on 2 workers: 7.4 s and 1.8 GiB (the process
tree's peak) read whole, 3.6-3.8 s and 360-400 MiB cut (the scan 0.31 s of it; the same records as JSON
Lines: 3.2 s, 322 MiB).

The scan follows JSON's lexical structure with numpy, a block at a time: `"` not escaped (an odd run
of backslashes before a quote escapes it) opens or closes a string; outside strings `{`/`[` and
`}`/`]` change the depth. A record separator is an array's comma at depth 1, or (objects one after
another) the end of an object back at depth 0. Each cut carries the number of records before it, so
a record keeps its index in the whole file (its position: the train/val split, `row` in rejects).

Segments on threads. Valid JSON holds no raw newline inside a string, so right after a newline the
scan is outside any string at an unknown depth. The file is cut into segments of about
SEGMENT_BYTES, each starting after a newline (a file without newlines is one segment), scanned on
threads (numpy releases the GIL: 2 threads, 0.25 -> 0.13 s per 256 MB) with depths relative to the
segment's start. Separators have the lowest depth a segment's candidates reach, since the array (or
the top level) is the outermost; a segment keeps its candidates at the lowest depth seen, and the
merge, knowing each segment's entry depth from those before it, keeps those at the separators'
depth. Segments are fixed by the bytes, not by the thread count, and the cuts are chosen from the
merged separators, so the plan is the same on any machine.

A compressed file cannot be entered in the middle: its decompressed stream is scanned once, from
the start, as one segment (decompressed on a thread ahead of the scan: 484 MB of .zst in 0.51 s,
the decompression alone 0.49 s). Its units are ranges of the decompressed bytes, which the parent
spools into windows of exactly those bytes (pipeline.spool) for the workers; a 484 MB array on 2
workers: 8.8-13.2 s and 1.8 GiB read whole, 4.7-4.9 s and 350-363 MiB cut.

One object holding the records in a list under `source.records_field` (`{"version": 1, "data":
[...]}`): the list's `[` is found by walking the keys in the file's first HEAD_BYTES, and the scan,
one segment from there (on one thread), ends where the list closes. The bytes around the list (at
most TAIL_BYTES after it) must, with `[]` in its place, parse to an object whose key leads to that
`[]` and that repeats no key (orjson keeps the last of two). A 484 MB `{"data": [...]}` on 2
workers: 7.8-8.0 s and 1.8 GiB read whole, 3.9-4.1 s and 350 MiB cut.

A file the scan cannot follow (its first value is not an array or an object, a closing bracket
without its opening one, a value after the array, a string across a line break) gets no cuts: it is
read whole, as before. For a valid file the cuts are exact. A damaged one whose scan still cuts it
fails in the unit whose records do not parse, naming the file and the byte range (read whole, it
would have been read as JSON Lines, one reject per line).

A damaged compressed file (cut short, corrupt) is scanned up to its last byte that decodes (the plan
reads it through readers.salvage, as the spool does): CutShort holds the cuts found there, exactly the
sound file's that lie in those bytes. Its units before the damage keep their records under
`on_bad_record: skip`, and its last unit, read to the end of the stream, fails with the damage, as
compressed JSON Lines' do (readers.jsonl). It was one unit, which failed whole: every record before
the damage was lost.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import orjson

from pipeline.readers import json_array
from pipeline.readers.base import BOM, ScanMeter, read_ahead, scan_blocks

__all__ = ["scan_cuts", "scan_stream_cuts", "CutShort", "field_start", "unit_bounds", "Segment", "SCAN_BLOCK", "PIECE_BYTES", "SEGMENT_BYTES"]

# bytes per read() and numpy pass: 485 MB scanned in 0.46 s at 1 MiB, 0.52 s at 4 MiB, ~0.9 s at 16 MiB
SCAN_BLOCK = 1 << 20

# a unit's records are parsed a piece of about this many bytes at a time (json_array.iter_range_groups),
# as JSON Lines are a read block at a time
PIECE_BYTES = 1 << 20

# the scan's segments: one thread each, at most one per core at a time
SEGMENT_BYTES = 16 << 20
NEWLINE_SEARCH = 1 << 20  # bytes past a segment's nominal start searched for a newline (else no segment there)

_QUOTE, _BACKSLASH, _COMMA = 0x22, 0x5C, 0x2C
_OPEN, _CLOSE = 0x7B, 0x7D  # `{` and `}`; `[` and `]` are the same bytes without 0x20
_WHITESPACE = b" \t\r\n"


class Segment:
    """The scan of bytes [start, end) of a file whose first value is of `kind` ("array" or
    "objects"), `start` being the file's start or right after a newline; depths are relative to
    the depth at `start`."""

    def __init__(self, kind: str, start: int, piece: int, ends_at_close: bool = False):
        self.kind = kind
        # a list inside an object (records_field), `start` its `[`: the scan ends where the list
        # closes (closed_at, the offset of its `]`); what follows is the object's, not the list's
        self.ends_at_close = ends_at_close
        self.closed_at = -1
        self.piece = piece       # cuts are wanted at the first separator at or after each multiple of it
        self.offset = start      # file offset of the next block
        self.in_string = False   # inside a string at the next block's start
        self.depth = 0           # relative depth at the next block's start
        self.backslashes = 0     # backslashes ending the bytes fed so far (an escape may span blocks)
        self.lowest: int | None = None  # the lowest relative depth after any bracket (None: no bracket)
        self.lowest_at = -1      # where it was first reached (file offset)
        self.events = 0          # brackets seen
        self.after_lowest = 0    # brackets after lowest_at
        # objects one after another: the lowest relative depth after a `]` and where (an array among the
        # objects, at the top level, gives records that no cut counts: the file is read whole)
        self.array_low: int | None = None
        self.array_low_at = -1
        # separator candidates (an array's commas; where an object ends, after its brace) at the lowest
        # depth seen, where the separators are: not all of them (10 GB of 100-byte records would be
        # 800 MB of offsets), but their count, the first, the last, and the first at or after each
        # multiple of `piece` past the first, with its index among them
        self.sep_depth: int | None = None
        self.count = 0
        self.first = self.last = -1
        self.firsts: list[np.ndarray] = []  # [offsets, indexes] pairs, per block
        # scratch for the per-byte passes: a fresh temporary per pass costs its page faults again
        # each time (a fold and a compare of 1 MiB blocks: 0.55 s per 485 MB, into these: 0.05 s)
        self._mask = self._hit = np.empty(0, bool)
        self._folded = np.empty(0, np.uint8)

    def feed(self, block: bytes) -> None:
        if not block:
            return
        base = self.offset
        self.offset += len(block)
        a = np.frombuffer(block, dtype=np.uint8)
        found, kinds = self._structural(a)
        quoted = kinds == _QUOTE
        quotes = self._unescaped_quotes(a, found[quoted])
        trailing = len(block) - len(block.rstrip(b"\\"))
        self.backslashes = trailing + self.backslashes if trailing == len(block) else trailing
        found, kinds = found[~quoted], kinds[~quoted]
        parity = int(self.in_string)
        outside = ((np.searchsorted(quotes, found) + parity) & 1) == 0  # not inside a string
        found, kinds = found[outside], kinds[outside]
        self.in_string = bool((quotes.size + parity) & 1)
        folded = kinds | 0x20  # `[` -> `{`, `]` -> `}`
        steps = (folded == _OPEN).astype(np.int64) - (folded == _CLOSE)
        depth = self.depth + np.cumsum(steps)  # after each bracket (at each comma)
        if not depth.size:
            return
        if self.ends_at_close and int(depth.min()) <= 0:  # the list closes in this block: stop there
            end = int(np.argmax(depth <= 0))
            found, kinds, steps, depth = found[:end + 1], kinds[:end + 1], steps[:end + 1], depth[:end + 1]
            self.closed_at = base + int(found[end])
            self.offset, self.in_string = self.closed_at + 1, False
        brackets = np.flatnonzero(steps)
        if brackets.size:
            low = int(depth[brackets].min())
            if self.lowest is None or low < self.lowest:
                self.lowest = low
                first = int(brackets[np.argmax(depth[brackets] == low)])
                self.lowest_at = base + int(found[first])
                self.after_lowest = int(brackets.size - np.searchsorted(brackets, first) - 1)
            else:
                self.after_lowest += int(brackets.size)
            self.events += int(brackets.size)
        self.depth = int(depth[-1])
        if self.kind == "array":
            commas = kinds == _COMMA
            self._keep(found[commas], depth[commas], base)
        else:  # a record ends where an object closes: right after its brace
            closes = steps < 0
            arrays = np.flatnonzero(kinds == _CLOSE - 0x20)  # `]`
            if arrays.size and (self.array_low is None or int(depth[arrays].min()) < self.array_low):
                self.array_low = int(depth[arrays].min())
                self.array_low_at = base + int(found[arrays[np.argmin(depth[arrays])]])
            self._keep(found[closes] + 1, depth[closes], base)

    def _keep(self, candidates: np.ndarray, depths: np.ndarray, base: int) -> None:
        """Keeps the candidates at the lowest depth seen so far (where the separators are)."""
        if not candidates.size:
            return
        low = int(depths.min())
        if self.sep_depth is None or low < self.sep_depth:
            self.sep_depth, self.count, self.first, self.firsts = low, 0, -1, []
        if low != self.sep_depth:
            return
        at = base + candidates[depths == low]
        if self.first < 0:
            self.first = self.last = int(at[0])
        # the multiples in (the last candidate before, this block's last] are served here (those up
        # to the segment's first candidate, by the merge)
        multiples = np.arange(self.last // self.piece + 1, int(at[-1]) // self.piece + 1) * self.piece
        if multiples.size:
            i = np.unique(np.searchsorted(at, multiples))
            self.firsts.append(np.stack([at[i], self.count + i]))
        self.count += int(at.size)
        self.last = int(at[-1])

    def _structural(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Offsets in `a` of its quotes, brackets and (in an array) commas, and their bytes: one
        combined mask and one flatnonzero (a flatnonzero per kind: 0.42 against 0.33 s per 485 MB)."""
        if self._mask.size < a.size:
            self._mask, self._hit, self._folded = (np.empty(a.size, bool), np.empty(a.size, bool),
                                                   np.empty(a.size, np.uint8))
        mask, hit, folded = self._mask[:a.size], self._hit[:a.size], self._folded[:a.size]
        np.equal(a, _QUOTE, out=mask)
        np.bitwise_or(a, 0x20, out=folded)
        for byte, of in ((_OPEN, folded), (_CLOSE, folded), (_COMMA, a)) if self.kind == "array" else \
                ((_OPEN, folded), (_CLOSE, folded)):
            mask |= np.equal(of, byte, out=hit)
        found = np.flatnonzero(mask)
        return found, a[found]

    def _unescaped_quotes(self, a: np.ndarray, quotes: np.ndarray) -> np.ndarray:
        """Offsets in `a` of the quotes that open or close a string: not preceded by an odd run of
        backslashes (the run may begin in an earlier block: self.backslashes)."""
        if not quotes.size:
            return quotes
        before = np.where(quotes > 0, a[np.maximum(quotes - 1, 0)] == _BACKSLASH, self.backslashes > 0)
        if not before.any():
            return quotes
        which = np.flatnonzero(before)
        at = quotes[which]
        run = (at > 0).astype(np.int64)  # backslashes right before each such quote, in this block
        probe = np.where(at > 0, at - 2, -1)  # the next byte to look at
        live = np.ones(which.size, bool)
        while live.any():  # one pass per backslash of the longest run (runs are 1-2 long in text)
            gone = live & (probe < 0)  # the run reaches the block's start: add what ended the last block
            run[gone & (probe == -1)] += self.backslashes
            live &= ~gone
            more = np.zeros(which.size, bool)
            more[live] = a[probe[live]] == _BACKSLASH
            run += more
            live, probe = more, probe - 1
        escaped = np.zeros(quotes.size, bool)
        escaped[which] = (run & 1).astype(bool)
        return quotes[~escaped]


def _segment_starts(f, size: int) -> list[int]:
    """Where each segment starts: 0, then right after the first newline at or past each multiple of
    SEGMENT_BYTES (searched for NEWLINE_SEARCH bytes; none there: no segment starts there)."""
    starts = [0]
    for nominal in range(SEGMENT_BYTES, size, SEGMENT_BYTES):
        if nominal <= starts[-1]:
            continue
        f.seek(nominal)
        at = f.read(NEWLINE_SEARCH).find(b"\n")
        if at >= 0 and nominal + at + 1 < size:
            starts.append(nominal + at + 1)
    return starts


def _kind(head: bytes) -> tuple[str, str]:
    """(kind, why none) from a file's first bytes: its first value past a BOM and whitespace."""
    first = (head[len(BOM):] if head.startswith(BOM) else head).lstrip(_WHITESPACE)[:1]
    if first == b"[":
        return "array", ""
    if first == b"{":
        return "objects", ""
    return "", f"the file's first value opens with {first!r}, not an array or an object"


def scan_cuts(opener, size: int, unit_bytes: int, path: str = "",
              threads: int | None = None) -> tuple[list[tuple[int, int]], str, str]:
    """(cuts, kind, why none): a file's cuts as (byte offset, records before it), about `unit_bytes`
    apart; none when it cannot be cut. `opener()` opens the file for reading (once per thread);
    `path` and `size` name it to the plan's progress display (base.scan_progress)."""
    with opener() as f:
        kind, why = _kind(f.read(64 << 10))
        if why:
            return [], "", why
        starts = _segment_starts(f, size)
    bounds = list(zip(starts, [*starts[1:], size]))
    meter = ScanMeter(path, size)

    def scan(bound: tuple[int, int]) -> Segment:
        start, end = bound
        segment = Segment(kind, start, unit_bytes)
        with opener() as g:
            g.seek(start)
            for block in scan_blocks(g, SCAN_BLOCK, meter, end - start):
                segment.feed(block)
        return segment

    threads = threads or min(len(bounds), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                             else os.cpu_count() or 1)
    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            segments = list(pool.map(scan, bounds))
    else:
        segments = [scan(b) for b in bounds]
    if kind == "array":
        with opener() as f:  # the array's closing bracket is the file's last byte but whitespace
            f.seek(max(0, size - 4096))
            closing = f.read().rstrip(_WHITESPACE)[-1:]
    return _finish(kind, segments, unit_bytes, closing if kind == "array" else b"")


class CutShort(Exception):
    """scan_stream_cuts met damage (one of its `cut_short` errors, `error`) after `end` bytes: `cuts`
    (offset, records before it) are those found before it, the records starting at `start`; none, and
    `why`, when those bytes do not begin a value that can be cut."""

    def __init__(self, cuts: list[tuple[int, int]], kind: str, why: str, start: int, end: int,
                 error: BaseException):
        super().__init__(f"cut short after {end:,} bytes by {type(error).__name__}: {error}")
        self.cuts, self.kind, self.why, self.start, self.end, self.error = cuts, kind, why, start, end, error


def scan_stream_cuts(stream, unit_bytes: int, path: str = "", planned: int = 0, field: str | None = None,
                     cut_short: tuple[type[BaseException], ...] = ()
                     ) -> tuple[list[tuple[int, int]], str, str, tuple[int, int]]:
    """(cuts, kind, why none, (start, end) of the records' bytes): scan_cuts over a stream read once
    from its start, as one segment on one thread: a compressed file's decompressed bytes (which
    cannot be entered in the middle), or any file holding its records in a list under the dotted
    key `field` of its object (source.records_field). Such a list must begin in the first HEAD_BYTES
    (found by walking the keys before it) and be followed by at most TAIL_BYTES; its (start, end) are
    its `[` and one past its `]`; else the file's. `planned`: the size the plan expects (progress).
    `cut_short`: the errors of `stream` that end it early, a damaged compressed file's after every byte
    that decodes before the damage (readers.salvage): one raises CutShort, holding the cuts found
    before it."""
    want, head = HEAD_BYTES if field is not None else 64 << 10, b""
    try:
        while len(head) < want and (block := stream.read(want - len(head))):  # a salvaged read may give less
            head += block
    except cut_short as e:
        damage: BaseException | None = e
    else:
        damage = None
    if field is None:
        start, (kind, why) = 0, _kind(head)
    else:
        (start, why), kind = field_start(head, field), "array"
    if why:
        if damage is not None:
            raise CutShort([], kind, why, 0, len(head), damage)
        return [], kind, why, (0, 0)
    segment, closing, meter = Segment(kind, start, unit_bytes, field is not None), b"", ScanMeter(path, planned)
    after = bytearray()  # the bytes after a records_field list
    # decompressing on a thread ahead of the scan: 484 MB of .zst in 1.06 s one after the other
    # (0.49 s of it decompression), in 0.51 s so: the scan hides behind the decompression
    try:
        more = read_ahead(lambda: stream.read(SCAN_BLOCK)) if damage is None else (b for b in ())  # () past damage
        with contextlib.closing(more) as rest:
            blocks = (head[i:i + SCAN_BLOCK] for i in range(start, len(head), SCAN_BLOCK))
            for block in itertools.chain(blocks, rest):
                meter.add(len(block))
                if segment.closed_at >= 0:
                    after += block
                    if len(after) > TAIL_BYTES:
                        return [], kind, f"more than {_amount(TAIL_BYTES)} follow the list {field!r}", (0, 0)
                    continue
                base = segment.offset
                segment.feed(block)
                if segment.closed_at >= 0:
                    closing = block[segment.closed_at - base:][:1]
                    after += block[segment.closed_at + 1 - base:]
                else:
                    closing = block.rstrip(_WHITESPACE)[-1:] or closing  # the last byte but whitespace
    except cut_short as e:
        damage = e
    if damage is not None:  # the records before the damage: the cuts so far, unless the bytes scanned are
        cuts, _, why = _merge(kind, [segment], unit_bytes, cut_short=True)  # not the value's start
        raise CutShort(cuts, kind, why, start, segment.offset + len(after), damage)
    if field is None:
        return *_finish(kind, [segment], unit_bytes, closing), (0, segment.offset)
    if segment.closed_at < 0:
        return [], kind, f"the list {field!r} is not closed", (0, 0)
    cuts, kind, why = _finish(kind, [segment], unit_bytes, closing)
    why = why or _around_the_list(head[:start], bytes(after), field)
    return ([], kind, why, (0, 0)) if why else (cuts, kind, "", (start, segment.offset))


# a records_field list must begin in a file's first HEAD_BYTES, and at most TAIL_BYTES may follow it,
# for its file to be cut (else it is read whole): the bytes around it are parsed, to check that they
# hold it where the key says (and no later key of the same name replaces it)
HEAD_BYTES = 1 << 20
TAIL_BYTES = 1 << 20

# a JSON token: a string, a structural byte, or a scalar's bytes (field_start)
_TOKEN = re.compile(rb'[ \t\r\n]*(?:("(?:[^"\\]|\\.)*")|([][{}:,])|([^][{}:," \t\r\n]+))', re.DOTALL)


def field_start(head: bytes, field: str) -> tuple[int, str]:
    """(offset of the `[` opening the list under the dotted `field` of the object a file's first
    bytes `head` begin, "") found by walking the keys before it; (-1, why) when it is not there."""
    parts, at = field.split("."), len(BOM) if head.startswith(BOM) else 0
    tokens = _tokens(head, at)
    try:
        token, _ = next(tokens)
        if token != b"{":
            return -1, "the file does not open with an object"
        depth = 0  # into `parts`
        while True:
            key, _ = next(tokens)
            if key == b"}" or key[:1] != b'"' or next(tokens)[0] != b":":
                return -1, f"no key {parts[depth]!r} where the file's first bytes have their keys"
            value, offset = next(tokens)
            if json.loads(key) == parts[depth]:
                if depth == len(parts) - 1:
                    return (offset, "") if value == b"[" else (-1, f"{field!r} is not a list")
                if value != b"{":
                    return -1, f"{'.'.join(parts[:depth + 1])!r} is not an object"
                depth += 1
                continue
            nested = value in (b"{", b"[")  # a value before the one wanted: past its closing bracket
            while nested:
                token, _ = next(tokens)
                nested += 1 if token in (b"{", b"[") else -1 if token in (b"}", b"]") else 0
            if next(tokens)[0] != b",":
                return -1, f"no key {parts[depth]!r} in its object"
    except StopIteration:
        return -1, f"{field!r} does not begin in the file's first {_amount(HEAD_BYTES)}"
    except ValueError as e:  # a key that is not a JSON string
        return -1, f"a key does not parse ({e})"


def _amount(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes} bytes"


def _tokens(data: bytes, at: int):
    """(token, offset) of the JSON tokens of `data` from `at`, until one that does not lex."""
    while m := _TOKEN.match(data, at):
        if not m.lastindex:
            return
        yield m.group(m.lastindex), m.start(m.lastindex)
        at = m.end()


def _around_the_list(before: bytes, after: bytes, field: str) -> str:
    """Why the bytes before a records_field list and after it do not make the object holding it
    there ("" when they do): with `[]` in its place they must parse, lead by `field` to that empty
    list, and repeat no key (orjson keeps the last of two, which could be another list)."""
    doc = (before[len(BOM):] if before.startswith(BOM) else before) + b"[]" + after
    try:
        node = orjson.loads(doc)
        json.loads(doc, object_pairs_hook=_unique_keys)
    except (orjson.JSONDecodeError, ValueError) as e:
        # a member beside the list nested deeper than orjson reads (1,024 levels): read member by member,
        # as a whole read does (before, such a file was read whole: one worker, ~5x its size in memory)
        node = json_array.holder_past_deep_members(doc, field) if json_array.too_deep(e) else None
        if node is None:
            return f"the bytes around the list {field!r} do not make one JSON object ({e})"
    for part in field.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node == [] else f"the list found is not the one under {field!r}"


def _unique_keys(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"a key appears twice in one object: {sorted(k for k in keys if keys.count(k) > 1)[0]!r}")
    return dict(pairs)


def _finish(kind: str, segments: list[Segment], unit_bytes: int, closing: bytes
            ) -> tuple[list[tuple[int, int]], str, str]:
    """scan_cuts' answer from its segments and (an array) the file's last byte but whitespace."""
    cuts, last, why = _merge(kind, segments, unit_bytes)
    if why:
        return [], kind, why
    if kind == "array" and closing != b"]":
        return [], kind, "more follows the array's closing bracket"
    if kind == "objects" and cuts and cuts[-1][0] == last:
        cuts.pop()  # the last object's end: a cut there would leave whitespace alone
    return cuts, kind, ""


def _merge(kind: str, segments: list[Segment], piece: int, cut_short: bool = False
           ) -> tuple[list[tuple[int, int]], int, str]:
    """(the cuts: the first separator at or after each multiple of `piece`, with the records before
    it; the last separator; why none), from the segments in file order. `cut_short`: the bytes end
    early (damage), so the value need not end in them."""
    top = 1 if kind == "array" else 0  # the separators' depth
    depth, closed, cuts, before, last = 0, False, [], 0, 0
    for segment in segments:
        if closed and segment.events:
            return [], 0, "more follows the array's closing bracket"
        low = depth + segment.lowest if segment.lowest is not None else top
        if low < 0:
            return [], 0, f"a closing bracket at byte {segment.lowest_at} closes nothing"
        if kind == "objects" and segment.array_low is not None and depth + segment.array_low <= 0:
            return [], 0, f"a JSON array among the objects (closing at byte {segment.array_low_at:,})"
        if kind == "array" and low == 0:  # the array closes in this segment
            if segment.after_lowest:
                return [], 0, f"more follows the array's closing bracket (byte {segment.lowest_at})"
            closed = True
        if segment.sep_depth is not None and depth + segment.sep_depth == top:  # its candidates separate
            if segment.first // piece > last // piece:  # multiples since the last separator: its first
                cuts.append((segment.first, before + 1))
            for offsets, indexes in segment.firsts:
                cuts += zip(offsets.tolist(), (indexes + before + 1).tolist())
            before += segment.count
            last = segment.last
        depth += segment.depth
        if segment.in_string and segment is not segments[-1]:
            return [], 0, f"a string runs across a line break (before byte {segment.offset})"
    if cut_short:
        return cuts, last, ""
    if depth or segments[-1].in_string:
        return [], 0, "the file ends inside a string or an open bracket"
    if kind == "array" and not closed:
        return [], 0, "the array is not closed"
    return cuts, last, ""


def unit_bounds(cuts: list[tuple[int, int]], end: int, unit_bytes: int, start: int = 0
                ) -> list[tuple[int, int, int, list[int]]]:
    """Units of about `unit_bytes` made of the pieces of the records' bytes [start, end) (`cuts` from
    a scan at PIECE_BYTES): (start, end, records before it, the cuts inside it)."""
    units: list[tuple[int, int, int, list[int]]] = []
    first, inner = 0, []
    for offset, records in cuts:
        if offset >= (start // unit_bytes + 1) * unit_bytes:  # a unit ends at the first cut past a multiple
            units.append((start, offset, first, inner))
            start, first, inner = offset, records, []
        else:
            inner.append(offset)
    units.append((start, end, first, inner))
    return units
