"""Byte ranges of a plain text file split on a separator of one repeated byte ("\\n\\n", "----").

Such a separator can overlap itself, so where a piece starts depends on where a scan started
("a\\n\\n\\nb" is "a" and "\\nb" read from the start, but "a\\n" and "b" read from its second newline):
each file was one unit, one worker's (a 1 GB file of paragraphs split on "\\n\\n": one core of 16).
A run of the repeated byte that follows another byte is read the same way by any scan that started
before it, though: `n` bytes at a time, the next piece starting after the last whole separator
(L % n of its bytes begin that piece). So a cut at the end of such a run, minus L % n, is a piece
start of the sequential read, and a unit that starts there reads its pieces from there as the
sequential read does (readers.text seeks straight to it). Local plain files only: compressed and
remote ones stay one unit per file.
"""

from __future__ import annotations

import mmap
import os
import re

from pipeline.readers.base import WorkUnit, compression_of, local_path
from pipeline.source_formats import is_url

__all__ = ["repeats_one_byte", "piece_cuts", "plan_file"]


def repeats_one_byte(sep: bytes) -> bool:
    """Whether `sep` is one byte repeated ("\\n\\n", "----"): the self-overlapping separators cut here."""
    return len(sep) > 1 and sep == sep[:1] * len(sep)


def piece_cuts(data, unit_bytes: int, sep: bytes) -> list[int]:
    """Piece starts of `data` (bytes-like; `sep` one byte repeated) about `unit_bytes` apart: after
    each target, the first run of at least len(sep) of the byte that starts after another byte, at
    its end less its bytes past the last whole separator. A run that reaches the end gives no cut."""
    n, size = len(sep), len(data)
    run = re.compile(b"[^" + re.escape(sep[:1]) + b"]" + re.escape(sep[:1]) + b"{%d,}" % n)
    cuts: list[int] = []
    target = unit_bytes
    while target < size:
        m = run.search(data, target - 1)  # the run's first byte at or after the target
        if m is None:
            break
        length = m.end() - m.start() - 1
        cut = m.end() - length % n
        if cut >= size:
            break
        cuts.append(cut)
        target = cut + unit_bytes
    return cuts


def plan_file(source_index: int, fi: int, path: str, size: int, unit_bytes: int, sep: bytes) -> list[WorkUnit]:
    """A file's units: ranges between piece_cuts, or the whole file as one unit."""
    whole = [WorkUnit(0, source_index, fi, path, "text", 0, -1, size)]
    if size <= unit_bytes or not repeats_one_byte(sep) or compression_of(path) or is_url(path):
        return whole
    with open(local_path(path), "rb") as f:
        if os.fstat(f.fileno()).st_size != size:  # changed since it was listed: read whole, as before
            return whole
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            cuts = piece_cuts(data, unit_bytes, sep)
    if not cuts:
        return whole
    bounds = [0, *cuts, size]
    return [WorkUnit(0, source_index, fi, path, "text", a, b, b - a) for a, b in zip(bounds, bounds[1:])]
