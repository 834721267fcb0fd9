"""A file whose first bytes say that its name is wrong about it stops the run, naming what it is
and the fix.

The readers take a file's compression from its suffix and read what that gives as UTF-8. Before
this, a `.jsonl` that was really gzip, bzip2 or UTF-16 (PowerShell's `Out-File` writes UTF-16)
gave one reject per line and an empty dataset, exit 0. A `.tar.gz` read with `format: text` gave
one garbage document per archive (tar headers and all), exit 0. A signature is only a first
filter (bzip2's, zip's and 7z's begin with letters, zstd's with "("): each claim is then checked
past it, by the codec decoding the head or by fields a writer always sets, so neither real text nor
a damaged line that begins like one is taken for it (hypothesis property tests in
tests/pipeline/readers/test_sniff.py). The check reads nothing more: the head is peeked from the
stream the reader opened, or cut from the bytes a small file's read already holds.
"""

from __future__ import annotations

import bz2
import lzma
import os
import zlib

from pipeline.errors import SchemaError

# (signature, what it is, the suffix that makes prep decompress it; None: prep does not read it)
_COMPRESSED = (
    (b"\x1f\x8b\x08", "gzip-compressed", ".gz"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", ".zst"),
    (b"BZh", "bzip2-compressed", ".bz2"),
    (b"\xfd7zXZ\x00", "xz-compressed", ".xz"),
    (b"PK\x03\x04", "a zip archive", None),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive", None),
    (b"\x04\x22\x4d\x18", "lz4-compressed", None),
)
PARQUET = "a Parquet file"
# bytes a signature's claim needs beyond it: a head this short (a 3-byte file that happens to begin
# 1f 8b 08) is not called compressed
_MIN_BYTES = {".gz": 18, ".zst": 9, ".bz2": 14, ".xz": 24, None: 30}
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32LE"), (b"\x00\x00\xfe\xff", "UTF-32BE"), (b"\xff\xfe", "UTF-16LE"),
         (b"\xfe\xff", "UTF-16BE"))
# every signature's and BOM's first byte, and NUL (tar headers and UTF-16 hold some): a head that
# starts with none of these and holds no NUL is text, told in ~0.2 us. 100,000 one-document text files
# are checked once each; the whole check took ~5.8 us a file (0.58 s of the workers' CPU), and still
# costs ~1 us for a head starting with B, P, 7 or "("
_FIRST_BYTES = frozenset(b"\x1f(B\xfdP7\x04\xff\xfe\x00"[i:i + 1] for i in range(10))
HEAD_BYTES = 512  # a tar header's magic is at bytes 257-262
UTF16_SAMPLE = 64  # bytes whose every other one must be NUL (and the rest not) for BOM-less UTF-16


def peek_head(stream, n: int = HEAD_BYTES) -> bytes:
    """Up to `n` of the stream's next bytes without consuming them: peek where the stream has it
    (it may give fewer), else read and seek back; b"" when it can do neither."""
    if hasattr(stream, "peek"):
        return stream.peek(n)[:n]
    if not getattr(stream, "seekable", lambda: True)():  # read once: a look would lose what it read
        return b""
    try:
        pos = stream.tell()
    except (AttributeError, OSError, ValueError):
        return b""
    head = stream.read(n)
    stream.seek(pos)  # a stream that read but cannot seek back fails here, not silently short
    return head


def mislabeled(path: str, head: bytes, compression: str | None) -> str | None:
    """Why a file whose decompressed bytes (`compression`: the codec its suffix names, or None)
    begin with `head` is not text to read as its name says, with the fix; None when it may be."""
    if head[:1] not in _FIRST_BYTES and b"\x00" not in head:
        return None
    found = _identify(head)
    if found is None:
        return None
    what, suffix = found
    name = os.path.basename(path.rstrip("/"))
    after = f"after its {compression} decompression, " if compression else ""
    if what.startswith("UTF-"):
        # the exact name: glibc's iconv takes BOM-less "UTF-16" as big-endian. A BOM becomes UTF-8's,
        # which the readers cut
        how = (f"decompress it, then iconv -f {what} -t UTF-8" if compression
               else f"iconv -f {what} -t UTF-8 < {name} > utf8-{name}")
        return f"{after}its text is {what}, and prep reads UTF-8; convert it ({how}) and re-run"
    if what == PARQUET:
        return (f"{after}its bytes are {what} (they begin {head[:4].hex(' ')}: 'PAR1'); read it with "
                "source.format: parquet" + (" once decompressed" if compression else ""))
    if what == "a tar archive":
        return f"{after}its bytes are {what}; extract it (tar -xf {name}) and point source.path at the files, then re-run"
    if compression:
        return f"{after}its bytes are {what} again; decompress it once (keeping its suffix) and re-run"
    if suffix:
        return (f"its bytes are {what} (they begin {head[:4].hex(' ')}), but its name does not end in {suffix}, so "
                f"they would be read as plain text; rename it to {name}{suffix} or decompress it, then re-run")
    fix = ("extract it and point source.path at the files" if what.startswith("a ") else
           "decompress it (or recompress it as .zst)")
    return f"its bytes are {what} (they begin {head[:4].hex(' ')}), which prep does not read; {fix}, then re-run"


def _identify(head: bytes) -> tuple[str, str | None] | None:
    """(what a compressed or archived head is, the suffix prep decompresses it by), ("a tar archive",
    None), (its encoding, None) for UTF-16/32 text, or None. Each claim is checked beyond the
    signature (the head decodes with that codec; a tar header's checksum; text in that encoding), so
    a damaged or random line that begins like one stays a bad record, as before."""
    for signature, what, suffix in _COMPRESSED:
        if head.startswith(signature):
            return (what, suffix) if len(head) >= _MIN_BYTES[suffix] and _decodes(head, suffix) else None
    # Parquet: "PAR1", then its first page's Thrift header: field 1 (i32, 0x15), a page type 0-3 as
    # zigzag (00 02 04 06). A recipe's `format: jsonl` with `--set source.path=x.parquet` read one as lines
    if head.startswith(b"PAR1") and len(head) >= 6 and head[4] == 0x15 and head[5] in (0, 2, 4, 6):
        return PARQUET, None
    if b"\x00" not in head and head[:1] not in (b"\xff", b"\xfe"):
        return None  # text starting with B, P, 7 or "("
    if _tar_header(head):
        return "a tar archive", None
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return (encoding, None) if _text_in(head[len(bom):UTF16_SAMPLE], encoding) else None
    sample = head[:UTF16_SAMPLE - UTF16_SAMPLE % 2]
    if len(sample) >= 8:  # no BOM: ASCII text in UTF-16 has a NUL in every other byte, and only there
        pairs = len(sample) // 2
        if sample[1::2].count(0) == pairs and 0 not in sample[0::2]:
            return "UTF-16LE", None
        if sample[0::2].count(0) == pairs and 0 not in sample[1::2]:
            return "UTF-16BE", None
    return None


def _decodes(head: bytes, suffix: str | None) -> bool:
    """Whether the codec of `suffix` takes the head without an error (it may want more); for a format
    prep has no decoder for, whether its header's fields hold what a writer puts there."""
    if suffix is None:
        return _archive_header(head)
    try:
        if suffix == ".gz":
            zlib.decompressobj(31).decompress(head)
        elif suffix == ".zst":
            import zstandard
            zstandard.ZstdDecompressor().decompressobj().decompress(head)
        elif suffix == ".bz2":
            bz2.BZ2Decompressor().decompress(head)
        elif suffix == ".xz":
            lzma.LZMADecompressor().decompress(head)
    except Exception:  # zlib.error, ZstdError, OSError, LZMAError: not that codec's stream
        return False
    return True


def _archive_header(head: bytes) -> bool:
    """A zip local file header (a known compression method, a file name of printable ASCII/UTF-8), a
    7z signature header (its CRC-32 over the next 20 bytes), or an lz4 frame descriptor (version 01,
    reserved bits clear, a block size code of 4-7)."""
    if head.startswith(b"PK\x03\x04"):
        method = int.from_bytes(head[8:10], "little")
        n = int.from_bytes(head[26:28], "little")
        name = head[30:30 + n]
        return method in (0, 8, 9, 12, 14, 93, 95, 98, 99) and 0 < n <= 1024 and _looks_like_text(name[:64])
    if head.startswith(b"7z\xbc\xaf\x27\x1c"):
        return len(head) >= 32 and zlib.crc32(head[12:32]) == int.from_bytes(head[8:12], "little")
    flg, bd = head[4], head[5]  # lz4
    return flg >> 6 == 1 and not flg & 0x02 and not bd & 0x8F and (bd >> 4) & 7 >= 4


def _tar_header(head: bytes) -> bool:
    """A POSIX or GNU tar header: "ustar" at 257 and its checksum (the sum of its 512 bytes, with the
    checksum field's 8 counted as spaces) written in octal at 148."""
    if len(head) < 512 or head[257:262] != b"ustar":
        return False
    try:
        written = int(head[148:156].split(b"\x00")[0].strip() or b"-1", 8)
    except ValueError:
        return False
    return written == sum(head[:148]) + 8 * 32 + sum(head[156:512])


def _text_in(sample: bytes, encoding: str) -> bool:
    """Whether bytes after a BOM read as text in `encoding`: they decode (a whole number of code
    units) and hold an ASCII character, which JSON, CSV and most text have in their first few dozen."""
    width = 4 if encoding.startswith("UTF-32") else 2
    try:
        decoded = sample[:len(sample) - len(sample) % width].decode(encoding)
    except UnicodeDecodeError:
        return False
    return any(c < "\x80" for c in decoded)


def refuse_mislabeled(path: str, head: bytes, compression: str | None) -> None:
    """SchemaError (it stops the run under `on_bad_record: skip` too) when `mislabeled` says why."""
    why = mislabeled(path, head, compression)
    if why is not None:
        raise SchemaError(f"{path}: {why}")


def refuse_mislabeled_stream(path: str, stream) -> None:
    """refuse_mislabeled on the head of a reader's stream at its file's start (decompressed as the
    path's suffix says), without consuming it."""
    from pipeline.readers.base import compression_of
    refuse_mislabeled(path, peek_head(stream), compression_of(path))


_MAGIC = {"gzip": b"\x1f\x8b", "zstd": b"\x28\xb5\x2f\xfd", "bz2": b"BZh", "xz": b"\xfd7zXZ\x00"}


def misnamed_compression(path: str, open_raw) -> str | None:
    """Why a file that failed to decompress is misnamed rather than damaged, with the rename; None when
    its first bytes are of the compression its suffix names (damage, then), or cannot be read.
    `open_raw()` opens its raw bytes. Called only once decompression failed: costs nothing otherwise.
    Before, plain JSON Lines named .gz failed as "corrupt or truncated ... replace the file"."""
    from pipeline.readers.base import compression_of
    named = compression_of(path)
    try:
        with open_raw() as f:
            head = f.read(HEAD_BYTES)
    except Exception:
        return None
    if named is None or not head or head.startswith(_MAGIC[named]):
        return None
    name = os.path.basename(path.rstrip("/"))
    bare = name[:name.rfind(".")]
    actual = next(((what, suffix) for signature, what, suffix in _COMPRESSED if suffix and head.startswith(signature)),
                  None)
    if actual is not None:
        return (f"its name ends in {name[len(bare):]}, but its bytes are {actual[0]} (they begin {head[:4].hex(' ')}); "
                f"rename it to {bare}{actual[1]} and re-run")
    if not _looks_like_text(head[:256]):
        return None  # a damaged header, say: the unit fails as damage (under skip, the run goes on)
    return (f"its name ends in {name[len(bare):]}, but its bytes are not {named}-compressed (they begin "
            f"{head[:4].hex(' ')}: {head[:8].decode('utf-8', 'replace')!r}); if it is plain text, rename it to "
            f"{bare} and re-run")


def _looks_like_text(head: bytes) -> bool:
    """UTF-8 (a character cut at the end allowed) with no control character but tab, CR and LF."""
    for cut in range(4):
        try:
            text = head[:len(head) - cut].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    else:
        return False
    return all(c.isprintable() or c in "\t\r\n" for c in text)
