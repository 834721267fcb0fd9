"""The one definition of the on-disk format (version 1).

    DIR/manifest.json        written last, atomically; its presence means "complete"
    DIR/<split>/NAME.bin     raw little-endian token ids, no header
    DIR/<split>/NAME.idx     Megatron MMIDIDX v1 index of NAME.bin (one sequence per document)

`.idx` layout (little-endian, no padding; Megatron-LM `indexed_dataset.py`):
    magic b"MMIDIDX\\x00\\x00" (9 B) | version <Q = 1 | dtype code <B | S <Q | D <Q (= S + 1)
    | int32[S] sequence lengths (tokens) | int64[S] byte offsets into .bin | int64[D] doc indices 0..S
The header is 34 bytes, so the arrays after it are not 8-byte aligned; numpy reads them unaligned.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline import faults
from pipeline.crc import crc32
from pipeline.errors import PrepError

__all__ = [
    "FORMAT_VERSION", "IDX_MAGIC", "IDX_HEADER_BYTES", "DTYPE_CODES", "MANIFEST_NAME",
    "dtype_for_vocab", "idx_bytes", "write_idx", "write_idx_blocks", "IdxHeader", "read_idx_header",
    "read_idx", "read_idx_blocks", "IDX_BLOCK_DOCS", "MAX_DOC_TOKENS",
    "ShardInfo", "SplitInfo", "Manifest", "read_manifest", "write_manifest", "write_json_atomic",
    "shard_paths", "is_plain_name", "DAMAGED_FIX",
]

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
IDX_MAGIC = b"MMIDIDX\x00\x00"
IDX_VERSION = 1
IDX_HEADER_BYTES = 9 + 8 + 1 + 8 + 8  # 34
# Megatron's DType enum codes; we only ever write these two.
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
CODE_DTYPES = {code: dt for dt, code in DTYPE_CODES.items()}


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id (0..vocab_size-1) fits, else int32 (Megatron's wide dtype).

    Unlike Megatron's `< 65500` rule, a 65,536-token vocabulary still gets uint16.
    """
    if vocab_size <= 0:
        raise PrepError(f"vocabulary size must be positive, got {vocab_size}")
    if vocab_size <= 1 << 16:
        return np.dtype(np.uint16)
    if vocab_size <= 1 << 31:
        return np.dtype(np.int32)
    raise PrepError(f"vocabulary of {vocab_size} ids does not fit int32 token ids")


def idx_bytes(num_seqs: int) -> int:
    """Size in bytes of a `.idx` file holding `num_seqs` sequences."""
    return IDX_HEADER_BYTES + num_seqs * (4 + 8) + (num_seqs + 1) * 8


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def is_plain_name(name: str) -> bool:
    """A split or shard name the manifest may hold: one visible file name, no path (`../val/x`)."""
    return bool(_PLAIN_NAME.fullmatch(name)) and not name.startswith(".")


def shard_paths(root: str | os.PathLike, split: str, name: str) -> tuple[Path, Path]:
    if not (is_plain_name(split) and is_plain_name(name)):  # pathlib's "Invalid name" ValueError reached the loader
        raise PrepError(f"{Path(root) / MANIFEST_NAME}: shard {split!r}/{name!r} is not a plain file name; "
                        + DAMAGED_FIX)
    base = Path(root) / split / name
    return base.with_name(name + ".bin"), base.with_name(name + ".idx")


# Documents per block when an index is written or read in pieces: a block's lengths (4 B each), their
# int64 pointers and its temporaries take ~1.8 MiB at 64 Ki documents, whatever the shard holds. A
# final shard's index written whole held ~44 bytes per document at once in the parent (lengths,
# pointers, doc indices and their byte copies): one shard of 4 M tiny documents, +150 MiB of peak RSS.
IDX_BLOCK_DOCS = 1 << 16


def write_idx(path: str | os.PathLike, lengths: np.ndarray, dtype: np.dtype, sync: bool = True) -> int:
    """Write the index of a `.bin` whose documents have `lengths` tokens each, in order; returns the
    file's crc32. `sync=False` for a worker's part (checked by that crc32 on resume, never fsynced):
    the fsync cost ~7 ms of a ~0.13 s unit, and on ext4 it also waits for the part's `.bin` blocks."""
    lengths = np.asarray(lengths, dtype=np.int64)
    _check_lengths(path, lengths)  # before the file is opened
    return write_idx_blocks(path, int(lengths.size), lambda: [lengths], dtype, sync)


def write_idx_blocks(path: str | os.PathLike, num_seqs: int, blocks, dtype: np.dtype, sync: bool = True) -> int:
    """`write_idx` from lengths that come in blocks: `blocks()` yields the `num_seqs` documents'
    lengths in order as arrays of any sizes, and is called twice (the lengths section, then the
    pointers computed from them), so a final shard's index is written from its parts' indexes
    (read_idx_blocks) holding one block at a time instead of every document's. Same bytes, same crc32."""
    dtype = np.dtype(dtype)
    crc = 0
    with open(path, "wb") as f:
        def put(piece) -> None:  # written one by one: no joined copy of a large index (20 bytes per document)
            nonlocal crc
            f.write(piece)
            crc = crc32(piece, crc)

        for piece in (IDX_MAGIC, struct.pack("<Q", IDX_VERSION), struct.pack("<B", DTYPE_CODES[dtype]),
                      struct.pack("<Q", num_seqs), struct.pack("<Q", num_seqs + 1)):
            put(piece)
        seen = 0
        for block in _rechunked(blocks()):
            _check_lengths(path, block)
            put(memoryview(np.ascontiguousarray(block, dtype="<i4")).cast("B"))
            seen += block.size
        if seen != num_seqs:
            raise PrepError(f"{path}: {seen} documents' lengths for an index of {num_seqs}; its parts changed "
                            "while it was written: re-run the same command to redo them")
        offset = 0  # byte offsets, int64 from the start (Megatron-LM#1672 overflowed an int32 here)
        for block in _rechunked(blocks()):
            sizes = block.astype("<i8") * dtype.itemsize  # int64 first: 2^31 tokens of int32 overflow
            starts = np.cumsum(sizes)
            starts += offset
            offset = int(starts[-1])
            starts -= sizes  # each document's first byte, where its end was
            put(memoryview(starts).cast("B"))
        for at in range(0, num_seqs + 1, IDX_BLOCK_DOCS):  # document indices 0..S, one sequence each
            put(memoryview(np.arange(at, min(at + IDX_BLOCK_DOCS, num_seqs + 1), dtype="<i8")).cast("B"))
        f.flush()
        if sync:
            os.fsync(f.fileno())
    return crc


def _rechunked(blocks):
    """Non-empty blocks of at most IDX_BLOCK_DOCS documents (a part's lengths may be one large array)."""
    for block in blocks:
        for at in range(0, len(block), IDX_BLOCK_DOCS):
            yield np.asarray(block[at:at + IDX_BLOCK_DOCS])


# The most tokens one document may hold: a .idx stores each length as int32 (Megatron's format). The
# worker refuses a longer document by name (worker._Sink) before its tokens are written; this is the
# writers' own guard.
MAX_DOC_TOKENS = int(np.iinfo(np.int32).max)


def _check_lengths(path, lengths: np.ndarray) -> None:
    if lengths.size and (lengths.min() < 0 or lengths.max() > MAX_DOC_TOKENS):
        raise PrepError(f"{path}: a document length does not fit int32")


@dataclass(frozen=True)
class IdxHeader:
    dtype: np.dtype
    num_seqs: int
    num_docs: int  # Megatron's document count: num_seqs + 1

    @property
    def file_bytes(self) -> int:
        return idx_bytes(self.num_seqs)


def read_idx_header(path: str | os.PathLike) -> IdxHeader:
    """Parse and check the 34-byte header; reads nothing else."""
    with open(path, "rb") as f:
        head = f.read(IDX_HEADER_BYTES)
    if len(head) < IDX_HEADER_BYTES:
        raise PrepError(f"{path}: index is truncated ({len(head)} bytes, header needs {IDX_HEADER_BYTES})")
    if head[:9] != IDX_MAGIC:
        raise PrepError(f"{path}: not a Megatron MMIDIDX index (magic {head[:9]!r})")
    (version,) = struct.unpack_from("<Q", head, 9)
    if version != IDX_VERSION:
        raise PrepError(f"{path}: index version {version}, this prep reads version {IDX_VERSION}")
    code = head[17]
    if code not in CODE_DTYPES:
        raise PrepError(f"{path}: unsupported dtype code {code} (prep writes 8=uint16 and 4=int32)")
    num_seqs, num_docs = struct.unpack_from("<QQ", head, 18)
    if num_docs != num_seqs + 1:
        raise PrepError(f"{path}: document count {num_docs} != sequence count {num_seqs} + 1")
    return IdxHeader(CODE_DTYPES[code], int(num_seqs), int(num_docs))


def read_idx(path: str | os.PathLike, mmap: bool = True) -> tuple[IdxHeader, np.ndarray, np.ndarray]:
    """(header, lengths int32[S], byte pointers int64[S]); memory-mapped unless mmap=False."""
    header = _sized_header(path)
    s = header.num_seqs
    if mmap and s:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        lengths = raw[IDX_HEADER_BYTES:IDX_HEADER_BYTES + 4 * s].view("<i4")
        pointers = raw[IDX_HEADER_BYTES + 4 * s:IDX_HEADER_BYTES + 12 * s].view("<i8")
    else:
        with open(path, "rb") as f:
            f.seek(IDX_HEADER_BYTES)
            lengths = np.frombuffer(f.read(4 * s), dtype="<i4")
            pointers = np.frombuffer(f.read(8 * s), dtype="<i8")
    return header, lengths, pointers


def read_idx_blocks(path: str | os.PathLike, pointers: bool = False):
    """The index's (lengths, pointers or None) in blocks of up to IDX_BLOCK_DOCS documents, read (not
    mapped: a mapping's pages count in the reader's RSS until it is dropped), in order."""
    s = _sized_header(path).num_seqs
    with open(path, "rb") as f:
        for at in range(0, s, IDX_BLOCK_DOCS):
            n = min(IDX_BLOCK_DOCS, s - at)
            f.seek(IDX_HEADER_BYTES + 4 * at)
            lengths = np.frombuffer(f.read(4 * n), dtype="<i4")
            if pointers:
                f.seek(IDX_HEADER_BYTES + 4 * s + 8 * at)
            yield lengths, np.frombuffer(f.read(8 * n), dtype="<i8") if pointers else None


def _sized_header(path: str | os.PathLike) -> IdxHeader:
    header = read_idx_header(path)
    size = os.path.getsize(path)
    if size != header.file_bytes:
        raise PrepError(f"{path}: index is {size} bytes, its header implies {header.file_bytes}; "
                        "the file is truncated or corrupt (re-run `prep tokenize` or `prep verify`)")
    return header


@dataclass(frozen=True)
class ShardInfo:
    name: str
    num_docs: int
    num_tokens: int
    sha256: str

    def to_dict(self) -> dict:
        return {"name": self.name, "num_docs": self.num_docs, "num_tokens": self.num_tokens,
                "sha256": self.sha256}


@dataclass(frozen=True)
class SplitInfo:
    num_docs: int
    num_tokens: int
    shards: tuple[ShardInfo, ...]

    def to_dict(self) -> dict:
        return {"num_docs": self.num_docs, "num_tokens": self.num_tokens,
                "shards": [s.to_dict() for s in self.shards]}


@dataclass(frozen=True)
class Manifest:
    """`manifest.json`; `to_dict()` is exactly what is written (sorted keys)."""

    dtype: str
    vocab_size: int
    tokenizer: dict
    splits: dict[str, SplitInfo]
    skipped: dict[str, int] = field(default_factory=dict)
    recipe: dict = field(default_factory=dict)
    created_by: str = ""
    failed_units: tuple = ()
    format_version: int = FORMAT_VERSION

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def to_dict(self) -> dict:
        return {
            "format_version": self.format_version, "dtype": self.dtype, "vocab_size": self.vocab_size,
            "tokenizer": self.tokenizer, "splits": {k: v.to_dict() for k, v in self.splits.items()},
            "skipped": dict(self.skipped), "recipe": self.recipe, "created_by": self.created_by,
            "failed_units": list(self.failed_units),
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "manifest.json") -> Manifest:
        """The manifest in `d` (parsed JSON), every field it reads checked for its JSON type: a PrepError
        naming the field (`splits.train.shards[0].num_docs`) and the fix, for every reader alike."""
        if not isinstance(d, dict):
            raise PrepError(f"{where}: not a JSON object (a manifest is one); {DAMAGED_FIX}")
        f = _Fields(where)
        version = f.count(d, "format_version")  # first: a later version may hold other fields
        if version > FORMAT_VERSION:
            raise PrepError(f"{where}: format_version {version}; this prep reads version {FORMAT_VERSION} "
                            "(upgrade prep, or re-tokenize with this version)")
        if version < FORMAT_VERSION:  # no prep wrote one: "upgrade prep" was wrong advice
            raise f.damaged("format_version", version, f"a version prep writes ({FORMAT_VERSION})")
        splits = {}
        for name, s in f.get(d, "splits", dict).items():
            at = f"splits.{name}"
            s = f.check(s, at, dict)
            shards = tuple(f.shard(x, f"{at}.shards[{i}]") for i, x in enumerate(f.get(s, "shards", list, at)))
            splits[name] = SplitInfo(f.count(s, "num_docs", at), f.count(s, "num_tokens", at), shards)
        dtype = f.get(d, "dtype", str)
        try:
            known = np.dtype(dtype) in DTYPE_CODES
        except (TypeError, ValueError):  # np.dtype("x"): TypeError "data type 'x' not understood"
            known = False
        if not known:
            raise f.damaged("dtype", dtype, "uint16 or int32")
        counts = f.get(d, "skipped", dict, default={})
        skipped = {reason: f.count(counts, reason, "skipped") for reason in counts}
        failed = tuple(f.check(u, f"failed_units[{i}]", dict)
                       for i, u in enumerate(f.get(d, "failed_units", list, default=[])))
        return cls(dtype=dtype, vocab_size=f.count(d, "vocab_size"), tokenizer=f.get(d, "tokenizer", dict),
                   splits=splits, skipped=skipped, recipe=f.get(d, "recipe", dict, default={}),
                   created_by=f.get(d, "created_by", str, default=""), failed_units=failed,
                   format_version=version)


DAMAGED_FIX = "the manifest is damaged: restore manifest.json from a copy, or rebuild with `prep tokenize --overwrite`"
_REQUIRED = object()
_JSON_TYPES = {int: "a whole number", str: "a string", dict: "an object", list: "a list"}


class _Fields:
    """Reads a parsed manifest's fields, each checked for its JSON type. Unchecked, a wrong one was a
    traceback in whichever reader used it (inspect's `{v:,}` of a skipped count "1": ValueError), wrong
    advice (format_version "1": "upgrade prep") or silently coerced (failed_units "abc": 3 failed units,
    shard name 5: the file 5.bin)."""

    def __init__(self, where: str):
        self.where = where

    def damaged(self, what: str, value, expected: str) -> PrepError:
        shown = repr(value)
        if len(shown) > 70:  # a whole recipe pasted where a string belongs: the line stays one line
            shown = shown[:67] + "..."
        return PrepError(f"{self.where}: {what} is {shown}, not {expected}; {DAMAGED_FIX}")

    def check(self, value, what: str, tp: type):
        if not isinstance(value, tp) or isinstance(value, bool):  # JSON true is an int to Python
            raise self.damaged(what, value, _JSON_TYPES[tp])
        return value

    def get(self, obj: dict, key: str, tp: type, parent: str = "", default=_REQUIRED):
        what = f"{parent}.{key}" if parent else key
        if key not in obj:
            if default is not _REQUIRED:
                return default
            raise PrepError(f"{self.where}: malformed manifest, no {what} field; {DAMAGED_FIX}")
        return self.check(obj[key], what, tp)

    def count(self, obj: dict, key: str, parent: str = "") -> int:
        v = self.get(obj, key, int, parent)  # int(123.5) and int("7") would pass a hand-edited manifest
        if v >= 1 << 63:  # readers hold counts in int64: numpy raised OverflowError in the loader
            raise PrepError(f"{self.where}: {f'{parent}.{key}' if parent else key} is {v}, more than any dataset "
                            f"holds (int64); {DAMAGED_FIX}")
        return v

    def shard(self, x, at: str) -> ShardInfo:
        x = self.check(x, at, dict)
        return ShardInfo(self.get(x, "name", str, at), self.count(x, "num_docs", at), self.count(x, "num_tokens", at),
                         self.get(x, "sha256", str, at))


def write_json_atomic(path: str | os.PathLike, obj, compact: bool = False) -> None:
    """tmp file + fsync + rename + directory fsync: a reader sees the old file or the whole new one.
    `compact`: one line through orjson, for run state that no one reads by eye (plan.json with 100,000
    input files: 0.27 s indented and sorted, ~0.02 s so)."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    if compact:
        import orjson
        data = orjson.dumps(obj) + b"\n"
    else:
        data = json.dumps(obj, sort_keys=True, indent=1).encode() + b"\n"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        faults.point(f"rename-{path.name}")
        os.replace(tmp, path)
    except BaseException as e:  # ENOSPC, Ctrl-C: the old file (or none) stays, no partial tmp is left
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:  # a failed write() names no file
            raise OSError(e.errno, e.strerror, str(tmp)) from None
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(root: str | os.PathLike, manifest: Manifest) -> None:
    write_json_atomic(Path(root) / MANIFEST_NAME, manifest.to_dict())


def read_manifest(root: str | os.PathLike) -> Manifest:
    """The manifest at `root`; PrepError (one line naming the file) for anything but a sound one."""
    path = Path(root) / MANIFEST_NAME
    if not path.exists():
        raise PrepError(f"{root}: no {MANIFEST_NAME}; the dataset is missing or incomplete "
                        f"(finish it with `prep tokenize`)")
    # each says what to do: inspect, bench-loader and the loader print this line alone (verify adds a
    # summary), and "not valid JSON (Expecting value: line 90 column 16)" left the user there
    try:
        data = json.loads(path.read_bytes())
    except PermissionError as e:
        raise PrepError(f"{path}: cannot be read ({e.strerror or e}); give this user read access to it") from None
    except OSError as e:  # a directory in its place, EIO from a failing disk
        raise PrepError(f"{path}: cannot be read ({e.strerror or e}); {DAMAGED_FIX}") from None
    except ValueError as e:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        raise PrepError(f"{path}: not valid JSON ({e}); {DAMAGED_FIX}") from None
    if not isinstance(data, dict):
        raise PrepError(f"{path}: not a JSON object (a manifest is one); {DAMAGED_FIX}")
    return Manifest.from_dict(data, where=str(path))
