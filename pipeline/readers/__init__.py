"""Readers: one module per input format; `plan_units(recipe)` cuts every source into work units.

Each module provides `plan(source, source_index, files, unit_bytes) -> list[WorkUnit]` (parent)
and `iter_batches(unit, source, bad, batch_docs) -> Iterator[DocBatch]` (worker); see base.py.

    format    module    work unit                                        position of a record
    jsonl     jsonl     file x byte range (compressed: whole file)       byte offset of its line
    csv, tsv  csv       file x byte range, cut only at newlines proven   byte offset of its record
                        outside quotes by one parent scan (compressed: whole file)
    parquet   parquet   file x row groups                                row number in the file
    text      text      per line / separator: file x byte range;        byte offset of the piece;
                        one doc per file: groups of whole files          file number in the source
    hf        hf        saved/downloaded dataset: row ranges;            row number;
                        streaming: one of the dataset's own shards       row number in the shard
"""

from __future__ import annotations

import importlib
from dataclasses import replace

from pipeline.errors import PrepError
from pipeline.readers.base import BadRecords, DocBatch, WorkUnit
from pipeline.recipe import Recipe

__all__ = ["get_reader", "plan_units", "WorkUnit", "DocBatch", "BadRecords", "READER_MODULES"]

READER_MODULES = {
    "jsonl": "pipeline.readers.jsonl",
    "csv": "pipeline.readers.csv",
    "tsv": "pipeline.readers.csv",
    "parquet": "pipeline.readers.parquet",
    "text": "pipeline.readers.text",
    "hf": "pipeline.readers.hf",
}


def get_reader(fmt: str):
    if fmt not in READER_MODULES:
        raise PrepError(f"source.format: {fmt} input is not supported yet by this prep "
                        f"(supported: {', '.join(sorted(READER_MODULES))})")
    return importlib.import_module(READER_MODULES[fmt])


def plan_units(recipe: Recipe, num_workers: int | None = None) -> list[WorkUnit]:
    """All work units of the recipe, in dataset order (sources, then files, then ranges)."""
    units: list[WorkUnit] = []
    workers = num_workers or recipe.resolved_num_workers()
    for si, source in enumerate(recipe.sources):
        fmt = source.resolved_format()
        reader = get_reader(fmt)
        files = source.paths() if fmt == "hf" else source.expand_files()
        planned = reader.plan(source, si, files, recipe.unit_bytes)
        if fmt == "hf":
            reader.warn_unbalanced(source, planned, workers)
        units.extend(replace(u, format=fmt) for u in planned)
    return [replace(u, index=i) for i, u in enumerate(units)]
