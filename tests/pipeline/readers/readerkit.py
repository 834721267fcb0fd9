"""A reader module's plan and batches over some files, gathered: what the reader tests compare."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipeline.readers import BadRecords


def read_all(reader, source, files: list[str], unit_bytes: int = 1 << 16, batch_docs: int = 16,
             policy: str = "skip"):
    """(units, texts, positions, rejected rows) of `reader` (a pipeline.readers module) over `files`;
    ranges of a compressed file are read from the windows a Spooler writes, as a run reads them."""
    units = reader.plan(source, 0, files, unit_bytes)
    if any(u.is_spooled for u in units):
        from tests.conftest import read_spooled
        with tempfile.TemporaryDirectory() as spool:
            _, per_unit = read_spooled(reader, source, units, Path(spool), batch_docs, policy=policy, rows=True)
        return (units, [t for _, ts, _, _ in per_unit for t in ts], [p for _, _, ps, _ in per_unit for p in ps],
                [r for *_, rs in per_unit for r in rs])
    texts, positions, bad = [], [], []
    for u in units:
        b = BadRecords(u, policy)
        for batch in reader.iter_batches(u, source, b, batch_docs):
            texts += batch.texts
            positions += batch.positions.tolist()
        bad += b.rows
    return units, texts, positions, bad
