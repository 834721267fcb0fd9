"""A unit that starts inside a long line (or separator-less text) looks for its first record no
further than its own end: every unit of a 150 MB line scanned on to the line's end, ~10 GB of reads
for 144 units of 1 MiB, growing with the square of the line's length."""

from __future__ import annotations

import io
import json

import pytest

from pipeline.readers import BadRecords, base
from pipeline.readers import jsonl as jsonl_reader
from pipeline.readers import text as text_reader
from pipeline.recipe import SourceConfig

UNIT = 1 << 16
LONG = 48 * UNIT  # 3 MiB: 48 units start inside the long record


class CountingFile(io.FileIO):
    """A local file that adds the bytes each read returns to `total[0]`."""

    def __init__(self, path, total: list[int]):
        super().__init__(path, "r")
        self.total = total

    def read(self, n=-1):
        data = super().read(n)
        self.total[0] += len(data)
        return data

    def readinto(self, b):
        n = super().readinto(b)
        self.total[0] += n or 0
        return n


def read_counting(reader, source: SourceConfig, path: str, monkeypatch) -> tuple[list[str], list[int], int, int]:
    """(texts, positions, units, bytes read by the units' iter_batches)."""
    units = reader.plan(source, 0, [path], UNIT)
    total = [0]
    monkeypatch.setattr(base, "open_raw", lambda p, *a, **k: io.BufferedReader(CountingFile(p, total)))
    texts, positions = [], []
    for u in units:
        for batch in reader.iter_batches(u, source, BadRecords(u, "skip"), 64):
            texts += batch.texts
            positions += batch.positions.tolist()
    return texts, positions, len(units), total[0]


@pytest.mark.parametrize("fmt, sep", [("jsonl", None), ("text", "\n"), ("text", "<|endoftext|>")])
def test_units_inside_a_long_record_read_no_further_than_their_end(tmp_path, monkeypatch, fmt, sep):
    docs = ["before", "w" * LONG, "after", "the end"]
    path = tmp_path / ("a.jsonl" if fmt == "jsonl" else "a.txt")
    if fmt == "jsonl":
        data = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
        source = SourceConfig(path=str(path), format="jsonl")
    else:
        data = sep.join(docs).encode()
        source = SourceConfig(path=str(path), format="text", doc_separator=sep)
    path.write_bytes(data)
    reader = jsonl_reader if fmt == "jsonl" else text_reader
    texts, positions, units, read = read_counting(reader, source, str(path), monkeypatch)
    assert units > 40 and texts == docs
    assert positions == [data.index(b'{"text": "' + d.encode() if fmt == "jsonl" else d.encode()) for d in docs]
    # the unit where the long record starts reads it (once); every other unit reads at most its own
    # range and a read block past it (a text unit's read block is 4 MiB: its last unit's own reads).
    # Before: each of the ~48 units inside the record read on to its end, ~24x the file
    assert read < 2 * len(data) + text_reader.READ_BLOCK
