"""What every reader shares: work units, document batches, input opening, the bad-record policy.

A reader module provides two functions:
    plan(source, source_index, files, unit_bytes) -> list[WorkUnit]     (parent, cheap: sizes only)
    iter_batches(unit, source, bad, batch_docs) -> Iterator[DocBatch]     (worker)
Positions are stable identities of a record inside its file (the byte offset of a JSONL line in
the decompressed stream, a row number for Parquet), so the train/val split and the rejects list do
not depend on how the file was cut into units.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from dataclasses import asdict, dataclass
from typing import BinaryIO

import numpy as np

from pipeline.errors import PrepError
from pipeline.recipe import is_url

__all__ = ["WorkUnit", "DocBatch", "BadRecords", "open_input", "compression_of", "file_size", "get_field",
           "REJECT_PREVIEW_CHARS"]

REJECT_PREVIEW_CHARS = 200


@dataclass(frozen=True)
class WorkUnit:
    """One independent piece of work; `index` is its place in the dataset order."""

    index: int
    source: int        # index of the recipe source
    file_index: int    # index of the file within that source's expanded file list
    path: str
    format: str
    start: int         # first byte (or row group), inclusive
    end: int           # last byte (or row group), exclusive; -1 = to the end of the file
    size: int          # input bytes covered, for progress and ETA

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DocBatch:
    texts: list[str]
    positions: np.ndarray  # int64[len(texts)]: stable position of each document in its file
    nbytes: int            # input bytes consumed since the previous batch (progress)


class BadRecords:
    """Per-unit collector of rejected records: counts by reason, and rows for DIR/rejects.jsonl."""

    def __init__(self, unit: WorkUnit, policy: str):
        self.unit = unit
        self.policy = policy
        self.counts: dict[str, int] = {}
        self.rows: list[dict] = []

    def reject(self, reason: str, position: int, raw, detail: str = "", line: int | None = None) -> None:
        preview = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
        preview = preview[:REJECT_PREVIEW_CHARS]
        where = f"{self.unit.path} at {'line ' + str(line) if line is not None else 'byte ' + str(position)}"
        if self.policy == "error":
            raise PrepError(f"{where}: {reason}{': ' + detail if detail else ''} (record starts {preview[:60]!r}); "
                            "fix the record, or set on_bad_record: skip to count and list such records")
        self.counts[reason] = self.counts.get(reason, 0) + 1
        row = {"source": self.unit.path, "position": int(position), "reason": reason, "text": preview}
        if line is not None:
            row["line"] = line
        if detail:
            row["detail"] = detail
        self.rows.append(row)

    def write(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for row in self.rows:
                f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")


def compression_of(path: str) -> str | None:
    p = path.lower()
    if p.endswith(".gz"):
        return "gzip"
    if p.endswith((".zst", ".zstd")):
        return "zstd"
    return None


def file_size(path: str) -> int:
    if is_url(path):
        import fsspec
        fs, p = fsspec.core.url_to_fs(path)
        return int(fs.size(p))
    return os.path.getsize(path[len("file://"):] if path.startswith("file://") else path)


def _open_raw(path: str) -> BinaryIO:
    if is_url(path):
        import fsspec
        return fsspec.open(path, "rb").open()
    return open(path[len("file://"):] if path.startswith("file://") else path, "rb")


def open_input(path: str) -> tuple[BinaryIO, BinaryIO]:
    """(decompressed stream, raw file): the raw file's tell() gives compressed bytes read (progress)."""
    raw = _open_raw(path)
    comp = compression_of(path)
    if comp == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    if comp == "zstd":
        import zstandard
        reader = zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(raw, read_across_frames=True)
        return io.BufferedReader(reader, buffer_size=1 << 20), raw
    return raw, raw


def get_field(record, dotted: str):
    """record['a']['b'] for 'a.b'; raises KeyError naming the missing part."""
    node = record
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(part)
        node = node[part]
    return node
