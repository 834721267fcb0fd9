"""The decompressed bytes a damaged compressed file gives before its damage, to the last one.

A split compressed file's units before the damage keep their documents (pipeline.spool), so the
spool must receive every byte that decodes before it. The fast readers do not give them all when
they fail: isal's igzip fills the whole buffer of one read1()/read() call and raises EOFError or
its error without returning what it decoded there (a .gz cut after 611,343 good bytes: read1 of
1 MiB gave 0 of them, read of 64 KiB 589,824), a GzipFile/LZMAFile of the standard library loses
what one 8 KiB feed decoded, and the zstd reader (members.ZstdMembers) what one 128 KiB feed did (a .zst
damaged in its first feed: 0 of 786,432 good bytes). So after such an error the rest is decoded again
here, from the file's start, with the codec's incremental decoder: a truncated stream gives every
byte (the decoders return what they decode and raise nothing at the end of the input), and a feed
that raises is fed again byte by byte from a decoder rebuilt up to it. Only the error path pays it:
one more pass over the file's good bytes with the standard library's decoder, two when the damage is
corruption rather than a cut (a 21.8 MB .gz of 100 MB JSONL cut at 90%: its spooling reached the error
in 0.30 s instead of 0.10 s on the 2-core VM; a sound file's spooling is unchanged, 580-800 MB/s both).

Corruption, unlike a cut, may be noticed only after some wrong bytes came out (gzip checks its CRC at
a member's end): those reach the windows as they always did from the fast readers' earlier steps.

Why the unit that meets the damage still fails whole (under `on_bad_record: skip` too), where `gzip -d`
keeps what decoded before it: its documents before the damage would be the same for any worker count
(unit bounds are the plan's), but (1) the fix the error names is to replace the file, and a resumed run
then redoes the failed unit whole: had its first documents been kept and the unit journaled, the
repaired file's later documents of that unit would never be read, and not journaled they would be
written twice, so a resume would differ from a fresh run on the repaired file; (2) corruption is
proven only by a member's CRC at its end, so the damaged member's bytes before the error are not known
good, and a line running across into it is cut short (a shorter document, silently, in text per line).
Keeping the earlier members' documents needs the journal to record a partly done unit: not a reader's
change.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable, Iterator

from pipeline.readers.base import compression_of, decode_failures, open_raw

__all__ = ["iter_salvaged", "salvaging_reader"]

FEED = 1 << 16  # compressed bytes per decompress() call; a feed that raises is redone byte by byte


def _new_decoder(path: str) -> Callable | None:
    comp = compression_of(path)
    if comp == "gzip":
        return lambda: zlib.decompressobj(31)  # one member; the next starts on its unused_data
    if comp == "zstd":
        import zstandard
        dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)  # as members.ZstdMembers
        return dctx.decompressobj
    if comp == "bz2":
        return bz2.BZ2Decompressor
    if comp == "xz":
        return lzma.LZMADecompressor
    return None


class _Pass:
    """One decoding pass from the file's start: yields output until the end of the input or the first
    error; `failed_at` is then the compressed offset of the feed that raised. From `careful_at` on,
    that feed's bytes go in one at a time, so the output stops exactly where the decoder does."""

    def __init__(self, raw, new, careful_at: int | None = None):
        self.raw, self.new, self.careful_at = raw, new, careful_at
        self.failed_at: int | None = None

    def __iter__(self) -> Iterator[bytes]:
        d, at = self.new(), 0
        while chunk := self.raw.read(FEED):
            careful = self.careful_at is not None and at + len(chunk) > self.careful_at
            pieces = [chunk[i:i + 1] for i in range(len(chunk))] if careful else [chunk]
            for piece in pieces:
                try:
                    while piece:  # concatenated members/streams/frames: a decoder each
                        if d.eof:
                            d = self.new()
                        out = d.decompress(piece)
                        piece = d.unused_data if d.eof else b""
                        if out:
                            yield out
                except Exception:
                    self.failed_at = at
                    return
            at += len(chunk)


def iter_salvaged(path: str, skip: int, storage_options: dict | None = None) -> Iterator[bytes]:
    """The decompressed bytes of compressed `path` from offset `skip` up to where it stops decoding
    (see the module doc). Nothing when the file cannot be opened again or is not compressed."""
    new = _new_decoder(path)
    if new is None:
        return
    given = 0  # decompressed bytes passed (those before `skip` dropped)

    def past(pass_: _Pass, upto: int) -> Iterator[bytes]:
        """The pass's output from decompressed offset `upto` on."""
        nonlocal given
        for out in pass_:
            if given + len(out) > upto:
                yield out[max(0, upto - given):]
            given += len(out)

    try:
        with open_raw(path, storage_options) as raw:
            first = _Pass(raw, new)
            yield from past(first, skip)
        if first.failed_at is None:  # cut short (or whole): every byte came
            return
        done, given = max(skip, given), 0  # decoded again up to the feed that raised, then it byte by byte
        with open_raw(path, storage_options) as raw:
            yield from past(_Pass(raw, new, first.failed_at), done)
    except OSError:  # gone or unreadable now: the error that led here is reported
        return


def salvaging_reader(read: Callable[[int], bytes], path: str, storage_options: dict | None,
                     stop: Callable[[], None] = lambda: None) -> Callable[[int], bytes]:
    """`read(n)` of a decompressing stream, which after a decode failure gives the bytes it lost
    (iter_salvaged from the offset reached), then raises that failure. `stop()` may raise to end it."""
    state = {"given": 0, "error": None, "rest": None}
    failures = decode_failures()

    def read_salvaging(n: int) -> bytes:
        stop()
        if state["rest"] is None:
            try:
                block = read(n)
            except failures as e:
                state["error"], state["rest"] = e, iter_salvaged(path, state["given"], storage_options)
            else:
                state["given"] += len(block)
                return block
        block = next(state["rest"], b"")
        if not block:
            raise state["error"]
        return block
    return read_salvaging
