"""Every file a reader opens is closed by the reader, compressed inputs too: a GzipFile, a zstd, bz2
or xz reader does not close the raw file object it was given, so each reader closes both."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest
import zstandard

from pipeline.readers import base, get_reader
from pipeline.readers.base import BadRecords
from pipeline.recipe import SourceConfig

CONTENT = {
    "jsonl": b'{"text": "first"}\n{"text": "second"}\n',
    "text": b"first\nsecond\n",
    "csv": b"text,n\nfirst,1\nsecond,2\n",
}
COMPRESS = {"gz": gzip.compress, "zst": lambda b: zstandard.ZstdCompressor().compress(b), "bz2": bz2.compress,
            "xz": lzma.compress}


@pytest.mark.parametrize("comp", sorted(COMPRESS))
@pytest.mark.parametrize("fmt", sorted(CONTENT))
def test_reader_closes_the_raw_file_of_a_compressed_input(tmp_path, monkeypatch, fmt, comp):
    path = tmp_path / f"d.{fmt}.{comp}"
    path.write_bytes(COMPRESS[comp](CONTENT[fmt]))
    opened = []
    real_open_raw = base.open_raw

    def spy(p, storage_options=None, ahead_to=None):
        f = real_open_raw(p, storage_options, ahead_to)
        opened.append(f)
        return f
    monkeypatch.setattr(base, "open_raw", spy)
    source = SourceConfig(path=str(path), format=fmt, **({"doc_separator": "\n"} if fmt == "text" else {}))
    reader = get_reader(fmt)
    texts = []
    for unit in reader.plan(source, 0, [str(path)], 1 << 20):
        for batch in reader.iter_batches(unit, source, BadRecords(unit, "skip"), 16):
            texts += batch.texts
    assert texts == ["first", "second"]
    assert opened, "the reader did not open the file through open_raw"
    assert all(f.closed for f in opened), f"{sum(not f.closed for f in opened)} of {len(opened)} left open"
