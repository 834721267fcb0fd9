"""A reader module's plan and batches over some files, gathered: what the reader tests compare."""

from __future__ import annotations

from pipeline.readers import BadRecords


def read_all(reader, source, files: list[str], unit_bytes: int = 1 << 16, batch_docs: int = 16,
             policy: str = "skip"):
    """(units, texts, positions, rejected rows) of `reader` (a pipeline.readers module) over `files`."""
    units = reader.plan(source, 0, files, unit_bytes)
    texts, positions, bad = [], [], []
    for u in units:
        b = BadRecords(u, policy)
        for batch in reader.iter_batches(u, source, b, batch_docs):
            texts += batch.texts
            positions += batch.positions.tolist()
        bad += b.rows
    return units, texts, positions, bad
