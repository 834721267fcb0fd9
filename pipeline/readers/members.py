"""Decompressing .gz and .zst streams member by member (gzip members, zstd frames one after another),
so that bytes after the last complete member that are not another one are told apart from damage.

A file with bytes appended after its compressed data (`garbage!`, a log line, a second download
written past the first) decodes whole: `gzip -d` keeps every byte and warns "trailing garbage
ignored". The readers here failed the unit that met those bytes, whose error said the whole text
decoded ("it decodes to byte 942,800 of its decompressed text, then fails": all of it), and its
documents were lost (a JSONL file's last unit: 128 of them in a test). Now the stream ends at the last
complete member and keeps what followed (`trailing`); the unit that read to the end says so in a
note (base.trailing_notice). What follows must not look like a member: bytes that open with gzip's
magic, or with it one byte off before deflate's method byte, or a file cut inside it, are a member
cut short or damaged, the errors they always were (ignored, a flipped bit in a second member's magic
dropped its documents with a note and exit 0). NUL bytes after a gzip member are padding (tape
blocks), skipped silently as gzip's own reader does. A .zst is stricter, as `zstd -d` is: anything
after its last frame that is not a frame is damage.

.bz2 and .xz streams go the same way (Bz2Members, XzMembers), each as its own tool reads it. Before,
the standard library's BZ2File and LZMAFile read them, which end a file silently at any bytes after a
stream that do not decode as another: `garbage!` appended was dropped without a word, and so was a
second stream whose header lost a bit (`cat a.bz2 b.bz2`, pbzip2's and lbzip2's many streams: every
document after it, exit 0). `bzip2 -d` ignores "trailing garbage after EOF" with a warning: so do we,
with the note gzip's get; `xz -d` refuses it ("Unexpected end of input") but for NUL stream padding: so
do we, as zstd's.

Each compressed read is decoded at once (isal's inflate: 56 MB of JSONL from gzip -6 in 0.026 s, its
igzip.GzipFile 0.022 s; the standard library's zlib where isal is missing), a member's output bounded
per step (OUT_BYTES), and a member cut short gives every byte before the cut, then EOFError.
"""

from __future__ import annotations

import io
from typing import BinaryIO, NamedTuple

__all__ = ["InputCorrupt", "GzipMembers", "ZstdMembers", "Bz2Members", "XzMembers", "Trailing", "GZIP_MAGIC"]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BZ2_MAGIC = b"BZh"  # then the block size, "1"-"9"
BZ2_BLOCK, BZ2_END = bytes.fromhex("314159265359"), bytes.fromhex("177245385090")  # what follows it: a block, the end
XZ_MAGIC = b"\xfd7zXZ\x00"
_SKIPPABLE = b"\x2a\x4d\x18"  # a zstd skippable frame: 0x184D2A50-5F, little-endian (its first byte 0x5?)


class InputCorrupt(OSError):
    """A compressed stream that ends early or does not decode."""


class Trailing(NamedTuple):
    """Bytes after a stream's last complete member that are not another member."""

    at: int     # compressed offset of their first byte
    size: int   # how many
    head: bytes  # their first bytes (shown in the note)


class _Members(io.RawIOBase):
    """The decompressed bytes of members one after another (a subclass decodes one member)."""

    FEED = 1 << 17        # compressed bytes per step
    OUT_BYTES = 1 << 20  # decompressed bytes at most per step: a 1000x member's 128 KiB feed is 128 MB
    MAGIC_BYTES = 4       # what tells whether the next bytes begin a member
    PADDING = False       # NUL bytes after a member are padding, skipped (gzip)
    TRAILING = False      # bytes after the last member that are not one may be ignored (gzip), else damage

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self._member = None   # the member being decoded, None between members
        self._members = 0     # members decoded whole so far
        self._in = b""        # compressed bytes not decoded yet (past a member's end, or a step's limit)
        self._out = memoryview(b"")
        self._eof = False
        self._read = 0        # compressed bytes read so far
        self._pos = 0         # decompressed bytes handed out (tell)
        self.trailing: Trailing | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not len(self._out):
            if self._eof:
                return 0
            self._fill()
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        self._pos += n
        return n

    # seek and tell at decompressed offsets, as gzip.GzipFile's (a seek back decodes again from the
    # start): a JSONL range of a .gz read from the file itself, not a window, is found so
    def seekable(self) -> bool:
        return bool(getattr(self._raw, "seekable", lambda: False)())

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a compressed stream seeks from its start or where it is only")
        if offset < self._pos:
            self._raw.seek(0)
            self.__init__(self._raw, *self._options())
        scratch = memoryview(bytearray(min(offset - self._pos, 1 << 20)))
        while self._pos < offset and self.readinto(scratch[:offset - self._pos]):
            pass
        return self._pos

    def _options(self) -> tuple:
        """The arguments after `raw` that made this stream (a seek back makes it anew)."""
        return ()

    def _read_raw(self) -> bytes:
        data = self._raw.read(self.FEED)
        self._read += len(data)
        return data

    def _fill(self) -> None:
        data, self._in = self._in or (b"" if self._holds_output() else self._read_raw()), b""
        if not data and not self._holds_output():
            if self._member is not None:
                raise self._cut_short()
            self._eof = True
            return
        if self._member is None:
            data = self._first_bytes(data) if not self._members else self._next_member(data)
            if data is None:  # no member follows: the end
                self._eof = True
                return
            self._member = self._new_member()
        out, self._in, ended = self._decode(data)
        if ended:
            self._member = None
            self._members += 1
        self._out = memoryview(out)

    def _first_bytes(self, data: bytes) -> bytes:
        return data

    def _holds_output(self) -> bool:
        """Whether the member's decoder holds output that a step bounded by OUT_BYTES left (it kept the
        input: bz2's and lzma's decoders), to be had by decoding b"" before reading more."""
        return False

    def _next_member(self, data: bytes) -> bytes | None:
        """`data` (after a member) from where the next member begins, or None when none does: the end
        of the file, padding up to it (gzip), or other bytes (self.trailing)."""
        while self.PADDING and not data.lstrip(b"\0"):  # NULs to the end of the read: more may follow
            data = self._read_raw()
            if not data:
                return None
        if self.PADDING:
            data = data.lstrip(b"\0")
        while len(data) < self.MAGIC_BYTES and (more := self._read_raw()):
            data += more
        if self._is_member(data):
            return data
        if not self.TRAILING or self._damaged_member(data):
            raise self._not_a_member(data)
        at, size = self._read - len(data), len(data)
        while more := self._read_raw():  # counted, not kept
            size += len(more)
        self.trailing = Trailing(at, size, data[:8])
        return None

    def _new_member(self):
        raise NotImplementedError

    def _decode(self, data: bytes) -> tuple[bytes, bytes, bool]:
        """(output, the compressed bytes left for the next step, whether the member ended)."""
        raise NotImplementedError

    def _is_member(self, data: bytes) -> bool:
        raise NotImplementedError

    def _damaged_member(self, data: bytes) -> bool:
        """Whether `data`, which does not begin a member, looks like one damaged or cut short (then an
        error, never ignored): a member whose magic lost a bit, or a file cut inside the magic, left half
        the documents out of a run that exited 0 with a note."""
        return False

    def _not_a_member(self, data: bytes) -> BaseException:
        raise NotImplementedError

    def _cut_short(self) -> BaseException:
        raise NotImplementedError


class GzipMembers(_Members):
    """A .gz stream: members (`cat a.gz b.gz`, bgzip's blocks) decoded with isal's or zlib's inflate
    (`inflate`: the module), each checked against its CRC-32 and length (the errors gzip's reader
    raises: EOFError for a stream cut short, isal's IsalError or zlib.error for damage)."""

    MAGIC_BYTES = 3
    PADDING = True
    TRAILING = True  # as `gzip -d`: "decompression OK, trailing garbage ignored"

    def __init__(self, raw: BinaryIO, inflate):
        super().__init__(raw)
        self._inflate = inflate

    def _options(self) -> tuple:
        return (self._inflate,)

    def _first_bytes(self, data: bytes) -> bytes:
        while len(data) < 2 and (more := self._read_raw()):
            data += more
        if data[:2] != GZIP_MAGIC:  # as gzip.GzipFile says it (sniff.py then names what the file is)
            import gzip
            raise gzip.BadGzipFile(f"Not a gzipped file ({data[:2]!r})")
        return data

    def _new_member(self):
        return self._inflate.decompressobj(31)  # wbits 31: one gzip member, its header and trailer checked

    def _decode(self, data: bytes) -> tuple[bytes, bytes, bool]:
        member = self._member
        out = member.decompress(data, self.OUT_BYTES)
        if member.eof:
            return out, member.unused_data, True
        return out, member.unconsumed_tail, False

    def _is_member(self, data: bytes) -> bool:
        return data[:2] == GZIP_MAGIC

    def _damaged_member(self, data: bytes) -> bool:
        # cut inside the magic (b"\x1f" at the end), or one of its two bytes off before deflate's method
        # byte 8 (b"\x1e\x8b\x08": one bit flipped)
        return (len(data) < 2 and GZIP_MAGIC.startswith(data)) or data[1:3] == GZIP_MAGIC[1:] + b"\x08" or \
            (data[:1] == GZIP_MAGIC[:1] and data[2:3] == b"\x08")

    def _not_a_member(self, data: bytes) -> BaseException:
        import gzip
        return gzip.BadGzipFile(f"Not a gzipped file ({data[:2]!r})")  # what gzip's own reader says

    def _cut_short(self) -> BaseException:
        return EOFError("Compressed file ended before the end-of-stream marker was reached")


class ZstdMembers(_Members):
    """A .zst stream: frames (zstd -T, pzstd and skippable frames write several); a frame cut short
    raises InputCorrupt (zstandard's own stream reader gives EOF there, a silently short read). Bytes
    after the last frame that are not one are damage, as `zstd -d` says ("unsupported format"): a frame
    whose magic lost a bit is not told from appended bytes by anything a reader could check."""

    def __init__(self, raw: BinaryIO):
        super().__init__(raw)
        import zstandard
        self._dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)

    def _new_member(self):
        return self._dctx.decompressobj()

    def _decode(self, data: bytes) -> tuple[bytes, bytes, bool]:
        member = self._member
        try:
            out = member.decompress(data)
        except Exception as e:  # zstd.ZstdError
            raise InputCorrupt(f"zstd: {e}") from None
        if member.eof:
            return out, member.unused_data, True
        return out, b"", False

    def _is_member(self, data: bytes) -> bool:
        return data[:4] == ZSTD_MAGIC or (len(data) >= 4 and data[0] & 0xF0 == 0x50 and data[1:4] == _SKIPPABLE)

    def _not_a_member(self, data: bytes) -> BaseException:
        return InputCorrupt(f"zstd: the bytes after a complete frame are not a frame ({data[:4]!r})")

    def _cut_short(self) -> BaseException:
        return InputCorrupt("the last zstd frame is truncated (end of file inside a frame)")


class _StdlibMembers(_Members):
    """Streams decoded by the standard library's bz2 or lzma decoders, which keep the input they have
    not decoded when a step's output reaches OUT_BYTES (needs_input False)."""

    def _decode(self, data: bytes) -> tuple[bytes, bytes, bool]:
        member = self._member
        out = member.decompress(data, self.OUT_BYTES)  # bz2: OSError, lzma: LZMAError on damage
        if member.eof:
            return out, member.unused_data, True
        return out, b"", False

    def _holds_output(self) -> bool:
        return self._member is not None and not self._member.needs_input

    def _cut_short(self) -> BaseException:
        return EOFError("Compressed file ended before the end-of-stream marker was reached")  # as BZ2File says


class Bz2Members(_StdlibMembers):
    """A .bz2 stream: streams one after another (`cat a.bz2 b.bz2`; pbzip2 and lbzip2 write many).
    Bytes after the last that are not a stream are ignored with a note, as `bzip2 -d` ignores them
    ("trailing garbage after EOF ignored"), unless they look like a stream whose header is damaged or
    cut short: damage then (OSError, as the bz2 decoder raises)."""

    MAGIC_BYTES = 10  # "BZh", the block size and the first block's (or the end's) 48-bit magic
    TRAILING = True

    def _new_member(self):
        import bz2
        return bz2.BZ2Decompressor()

    def _is_member(self, data: bytes) -> bool:
        return data[:3] == BZ2_MAGIC and data[3:4] in b"123456789"

    def _damaged_member(self, data: bytes) -> bool:
        # cut inside the header, or its first 4 bytes off before a block's or the end's magic
        return (len(data) < 4 and BZ2_MAGIC.startswith(data[:3])) or data[:3] == BZ2_MAGIC or \
            data[4:10] in (BZ2_BLOCK, BZ2_END)

    def _not_a_member(self, data: bytes) -> BaseException:
        return OSError(f"bz2: the bytes after a complete stream begin like a damaged stream ({data[:4]!r})")


class XzMembers(_StdlibMembers):
    """A .xz stream: streams one after another (`cat a.xz b.xz`), NUL stream padding between and after
    them skipped; anything else after the last is damage (lzma.LZMAError), as `xz -d` refuses it."""

    MAGIC_BYTES = len(XZ_MAGIC)
    PADDING = True

    def _new_member(self):
        import lzma
        return lzma.LZMADecompressor()  # FORMAT_AUTO, as LZMAFile: a legacy .lzma named .xz still reads

    def _is_member(self, data: bytes) -> bool:
        return data[:6] == XZ_MAGIC

    def _not_a_member(self, data: bytes) -> BaseException:
        import lzma
        return lzma.LZMAError(f"xz: the bytes after a complete stream are not a stream ({data[:6]!r})")
