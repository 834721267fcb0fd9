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

from pipeline.readers.base import WorkUnit, compression_of, local_path
from pipeline.source_formats import is_url

__all__ = ["repeats_one_byte", "piece_cuts", "plan_file"]


def repeats_one_byte(sep: bytes) -> bool:
    """Whether `sep` is one byte repeated ("\\n\\n", "----"): the self-overlapping separators cut here."""
    return len(sep) > 1 and sep == sep[:1] * len(sep)


def piece_cuts(data, unit_bytes: int, sep: bytes) -> list[int]:
    """Piece starts of `data` (bytes-like; `sep` one byte repeated) about `unit_bytes` apart: after
    each target, the first run of at least len(sep) of the byte that starts after another byte, at
    its end less its bytes past the last whole separator (none that would fall at the end of `data`).

    Runs are found with data.find(sep) and measured by `_run_end`, both in C: the regex
    `[^\\n]\\n{2,}` scanned ~150 MB/s (108 MB of lines with no blank line, mmapped: 0.69-0.71 s in
    the parent, on every run and resume), find() ~1.3 GB/s (0.08 s)."""
    n, size, byte = len(sep), len(data), sep[0]
    cuts: list[int] = []
    target = unit_bytes
    while target < size:
        run = _first_run(data, target, sep, byte)
        if run is None:
            break
        start, end = run
        cut = end - (end - start) % n
        if cut >= size:
            break
        cuts.append(cut)
        target = cut + unit_bytes
    return cuts


def _first_run(data, target: int, sep: bytes, byte: int) -> tuple[int, int] | None:
    """[start, end) of the first run of at least len(sep) of `byte` that starts at or after `target`
    (>= 1) after another byte; None when there is none."""
    pos = target
    while (i := data.find(sep, pos)) >= 0:
        end = _run_end(data, i + len(sep), sep[:1])
        # the first `sep` at or after pos: a run reaching back before it began before `target` (on
        # the first search; later ones start where a run ended, before a different byte)
        if i > pos or data[i - 1] != byte:
            return i, end
        pos = end
    return None


def _run_end(data, at: int, one: bytes) -> int:
    """Where the run of byte `one` going on at `at` ends: lstrip over slices doubling from 64 bytes
    (a file of only newlines is read in C, not a byte at a time; at most 16 MiB copied at once)."""
    step = 64
    while at < len(data):
        chunk = data[at:at + step]
        rest = chunk.lstrip(one)
        if rest:
            return at + len(chunk) - len(rest)
        at += len(chunk)
        step = min(step * 2, 16 << 20)
    return at


def plan_file(source_index: int, fi: int, path: str, size: int, unit_bytes: int, sep: bytes) -> list[WorkUnit]:
    """A file's units: ranges between piece_cuts, or the whole file as one unit."""
    whole = [WorkUnit(0, source_index, fi, path, "text", 0, -1, size)]
    if size <= unit_bytes or not repeats_one_byte(sep) or compression_of(path) or is_url(path):
        return whole
    try:
        with open(local_path(path), "rb") as f:
            if os.fstat(f.fileno()).st_size != size:  # changed since it was listed: read whole, as before
                return whole
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                cuts = piece_cuts(data, unit_bytes, sep)
    except (OSError, ValueError):  # gone, unreadable, not mappable (a FIFO): read whole, as before, so
        return whole               # the unit's reader names the problem in one line (not a traceback)
    if not cuts:
        return whole
    bounds = [0, *cuts, size]
    return [WorkUnit(0, source_index, fi, path, "text", a, b, b - a) for a, b in zip(bounds, bounds[1:])]
