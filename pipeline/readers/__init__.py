"""Readers: one module per input format; `plan_units(recipe)` cuts every source into work units."""

from __future__ import annotations

import importlib
from dataclasses import replace

from pipeline.errors import PrepError
from pipeline.readers.base import BadRecords, DocBatch, WorkUnit
from pipeline.recipe import Recipe

__all__ = ["get_reader", "plan_units", "WorkUnit", "DocBatch", "BadRecords", "READER_MODULES"]

READER_MODULES = {"jsonl": "pipeline.readers.jsonl"}


def get_reader(fmt: str):
    if fmt not in READER_MODULES:
        raise PrepError(f"source.format: {fmt} input is not supported yet by this prep "
                        f"(supported: {', '.join(sorted(READER_MODULES))})")
    return importlib.import_module(READER_MODULES[fmt])


def plan_units(recipe: Recipe) -> list[WorkUnit]:
    """All work units of the recipe, in dataset order (sources, then files, then ranges)."""
    units: list[WorkUnit] = []
    for si, source in enumerate(recipe.sources):
        fmt = source.resolved_format()
        reader = get_reader(fmt)
        files = source.expand_files()
        units.extend(reader.plan(source, si, files, recipe.unit_bytes))
    return [replace(u, index=i) for i, u in enumerate(units)]
