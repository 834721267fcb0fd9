"""Readers: one module per input format; `plan_units(recipe)` cuts every source into work units.

Each module provides `plan(source, source_index, files, unit_bytes) -> list[WorkUnit]` (parent)
and `iter_batches(unit, source, bad, batch_docs) -> Iterator[DocBatch]` (worker); see base.py.

    format    module    work unit                                        position of a record
    jsonl     jsonl     file x byte range (compressed: ranges of the     byte offset of its line
                        decompressed bytes, spooled by the parent)
    csv, tsv  csv       file x byte range, cut only at newlines proven   byte offset of its record
                        outside quotes by one parent scan (compressed:
                        the spooler's pass cuts them the same way)
    parquet   parquet   file x row groups                                row number in the file
    text      text      per line / separator: file x byte range, as     byte offset of the piece;
                        JSONL (compressed too);
                        one doc per file: groups of whole files          file number in the source
    hf        hf        saved/downloaded dataset: row ranges;            row number;
                        streaming: one of the dataset's own shards       row number in the shard
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import replace

from pipeline.errors import PrepError
from pipeline.readers import base
from pipeline.readers.base import BadRecords, DocBatch, WorkUnit
from pipeline.recipe import Recipe
from pipeline.source_formats import is_url, local_path

log = logging.getLogger("prep")

__all__ = ["get_reader", "plan_units", "auto_unit_bytes", "group_small_files", "WorkUnit", "DocBatch", "BadRecords",
           "READER_MODULES"]

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


# unit_bytes: auto. Small inputs get smaller units, so that every worker of a 16-core machine has work
# and no 16 MiB unit is the run's tail. 55 MB of JSONL on 16 workers (the GPU machine's CPUs) made 4
# units of 16 MiB, 12 workers idle: 2 MiB units (28) took the tiktoken backend from 3.35 to 1.55 s and
# peak RSS x8 vs x1 from +234% to +17%; the gigatoken backend is start-up bound there (1.17 vs 1.16 s
# in the peer bench, 1.15-1.28 vs 0.87-1.12 s in traced runs). On 2 workers 2-16 MiB units are within
# noise (interleaved medians 1.02-1.04 s); 1 MiB units cost 7% (per-unit overhead: parts, journal
# entries, reads). The size depends on the input's total bytes only, never on the worker
# count, so a run resumes with any -j (the plan is part of the journal's fingerprint); it is a power
# of two, so a replaced file changes it only when the total crosses one.
AUTO_UNIT_MAX = 16 << 20
AUTO_UNIT_MIN = 2 << 20
AUTO_UNITS = 32  # units wanted below AUTO_UNITS * AUTO_UNIT_MAX (512 MiB) of input


def auto_unit_bytes(total_bytes: int) -> int:
    """Unit size for `unit_bytes: auto`: AUTO_UNIT_MAX from 512 MiB of input up, else the largest
    power of two <= total / AUTO_UNITS, at least AUTO_UNIT_MIN."""
    per_unit = max(1, total_bytes // AUTO_UNITS)
    return max(AUTO_UNIT_MIN, min(AUTO_UNIT_MAX, 1 << (per_unit.bit_length() - 1)))


def plan_units(recipe: Recipe, num_workers: int | None = None, inputs: dict | None = None) -> list[WorkUnit]:
    """All work units of the recipe, in dataset order (sources, then files, then ranges). With `inputs`,
    also each file they read, as {path: [size, stamp]} there (base.file_identity: what the journal
    compares when the run resumes, pipeline.input_changes)."""
    with base.planning():  # sizes looked up once though the plan may run twice, never reused later
        units = _plan_units(recipe, num_workers)
        if recipe.on_bad_record == "error" and (damaged := base.planning_damage()):
            # stopped before any unit runs: the plan of a damaged file is not its replacement's, so a run
            # begun on it could not resume once the file is replaced (its re-run plans afresh)
            why = next(iter(damaged.values()))
            more = f" ({len(damaged) - 1} more compressed file(s) are damaged too)" if len(damaged) > 1 else ""
            raise PrepError(f"{why}{more}; found while planning, before any unit ran (on_bad_record: error): "
                            "replace the file and re-run")
        if inputs is not None:
            inputs.update(_input_files(recipe, units))
        return units


def _input_files(recipe: Recipe, units: list[WorkUnit]) -> dict[str, list]:
    """Every file the units read (WorkUnit.files), looked up in the plan's caches: a directory of
    100,000 files is not statted again."""
    found: dict[str, list] = {}
    for u in units:
        options = recipe.sources[u.source].storage_options
        for path in u.files():
            if path not in found:
                found[path] = list(base.file_identity(path, options))
    return found


def _plan_units(recipe: Recipe, num_workers: int | None) -> list[WorkUnit]:
    workers = num_workers or recipe.resolved_num_workers()
    sources = [(si, source, get_reader(source.resolved_format()), _files(source, recipe.output.dir))
               for si, source in enumerate(recipe.sources)]
    unit_bytes, planned = recipe.unit_bytes, {}
    if unit_bytes == "auto":
        # the input's size: what the units at AUTO_UNIT_MAX cover. A reader whose planning reads the
        # input (CSV: a quote-parity scan, 0.1 s per 55 MB) says it directly rather than planning twice
        total = 0
        for si, source, reader, files in sources:
            if hasattr(reader, "input_bytes"):
                total += reader.input_bytes(source, files, AUTO_UNIT_MAX)
            else:
                planned[si] = reader.plan(source, si, files, AUTO_UNIT_MAX)
                total += sum(u.size for u in planned[si])
        unit_bytes = auto_unit_bytes(total)
    units: list[WorkUnit] = []
    for si, source, reader, files in sources:
        fmt = source.resolved_format()
        got = planned[si] if si in planned and unit_bytes == AUTO_UNIT_MAX else reader.plan(source, si, files, unit_bytes)
        if fmt == "hf":
            reader.warn_unbalanced(source, got, workers)
        # dataclasses.replace costs ~5 us a unit: 0.09 s of planning 18,515 small files, where the
        # reader already named the format
        units.extend(group_small_files([u if u.format == fmt else replace(u, format=fmt) for u in got], unit_bytes))
    return [replace(u, index=i) for i, u in enumerate(units)]


# Files under this size are grouped: a unit costs ~1.2 ms beyond its documents, a 1 MiB file ~15 ms
# of encoding on one core, so a file of its own costs at most ~8% more from here up. A group's member
# is held in memory until read to its end (worker.process_unit), so members stay this small.
GROUP_FILE_BYTES = 1 << 20


def group_small_files(units: list[WorkUnit], unit_bytes: int) -> list[WorkUnit]:
    """One source's units, with runs of small whole files (a file the plan made one unit of, smaller
    than `unit_bytes` and GROUP_FILE_BYTES) merged into units of up to `unit_bytes`; each keeps its own
    unit in `group`.

    Why: a unit costs ~1.2 ms beyond its documents (its part files, journal entry, result and
    placement). 20,000 JSONL files of 3.2 KB (64 MB) took 24.9 s as 20,000 units, against ~1.2 s for
    the same lines in one file. The dataset is the same either way: a member is read as it would be
    alone (its file index for the val split, its line numbers), in the same order.
    """
    per_file: dict[int, int] = {}
    for u in units:
        per_file[u.file_index] = per_file.get(u.file_index, 0) + 1
    out: list[WorkUnit] = []
    run: list[WorkUnit] = []
    run_bytes = 0

    def close_run() -> None:
        nonlocal run_bytes
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append(replace(run[0], start=0, end=-1, size=run_bytes, group=tuple(run)))
        run.clear()
        run_bytes = 0

    for u in units:
        small = (u.format != "hf" and not u.paths and not u.is_spooled and per_file[u.file_index] == 1
                 and u.size < min(unit_bytes, GROUP_FILE_BYTES))
        if not small or run_bytes + u.size > unit_bytes:
            close_run()
        if small:
            run.append(u)
            run_bytes += u.size
        else:
            out.append(u)
    close_run()
    return out


def _files(source, output_dir: str) -> list[str]:
    """The source's files, less any inside the output directory: a dataset written into the directory
    it reads (`source.path: data`, `output.dir: data/out`) was read back by the next run, its
    manifest.json and rejects.jsonl as JSON input, and `--overwrite` then died deleting them."""
    if source.resolved_format() == "hf":
        return source.paths()
    files = _without_datasets(source.expand_files(base.planning_sizes()), source.storage_options)
    if is_url(output_dir):
        return files
    out = os.path.join(os.path.abspath(local_path(output_dir)), "")
    # only a source whose fixed part (before any glob character) holds the output can list a file in it:
    # no abspath per file otherwise (100,000 files)
    if not any(out.startswith(os.path.join(os.path.abspath(_fixed_part(p)), "")) for p in source.paths() if not is_url(p)):
        return files
    return [f for f in files if not os.path.abspath(local_path(f)).startswith(out)]


def _without_datasets(files: list[str], storage_options: dict | None) -> list[str]:
    """`files` less another prep dataset's own files that a directory or glob source also lists (another
    run's output under the corpus directory): its manifest.json was read as a JSON object, a SchemaError
    advising records_field, and its rejects.jsonl as documents, also when the glob (`data/**/*.jsonl`)
    lists rejects.jsonl but not the manifest.json beside it. A dataset is known by a manifest.json that
    prep wrote; its own files are DIR/manifest.json, DIR/rejects.jsonl and those in its split
    directories (anything else under DIR is input: a corpus kept there is read). Local: one stat per
    directory the files are in and its parent; a URL's directory is looked at only when a listed file
    is named as a dataset's top-level files are (each look is a request)."""
    homes = _dataset_homes(files, storage_options)
    if not homes:
        return files
    own = set()
    for d, splits in homes.items():
        log.warning("%s: a prep dataset inside the source; its files are not read as input", d or ".")
        own |= {_join(d, name) for name in _DATASET_FILES} | {_join(d, split) for split in splits}
    return [f for f in files if f not in own and os.path.dirname(f) not in own]


_DATASET_FILES = ("manifest.json", "rejects.jsonl")


def _join(d: str, name: str) -> str:
    return f"{d}/{name}" if is_url(d) else os.path.join(d, name)


def _dataset_homes(files: list[str], storage_options: dict | None) -> dict[str, list[str]]:
    """{directory (as the files name it): its split names} for each prep dataset holding any of `files`."""
    # each file's path up to its last "/" (a C-level find), then dirname once per directory, not per file:
    # dirname and is_url per file made planning 100,000 files 6% slower (0.39 vs 0.37 s); dirname(p) is
    # dirname of that prefix ("/a.txt" -> "/" -> "/", "a//b" -> "a//" -> "a")
    heads = {f[:f.rfind("/") + 1] for f in files}
    dirs = {os.path.dirname(h) for h in heads if not is_url(h)}
    if any(map(is_url, heads)):  # a URL's directory only where a file is named as a dataset's are
        dirs |= {os.path.dirname(f) for f in files if is_url(f) and os.path.basename(f) in _DATASET_FILES}
    candidates = dirs | {os.path.dirname(d) for d in dirs if not is_url(d) and os.path.dirname(d) != d}
    homes = {}
    for d in sorted(candidates):
        manifest = _join(d, "manifest.json")
        if is_url(d) or os.path.isfile(manifest):
            splits = _prep_manifest_splits(manifest, storage_options)
            if splits is not None:
                homes[d] = splits
    return homes


def _prep_manifest_splits(path: str, storage_options: dict | None) -> list[str] | None:
    """The split names of a manifest.json that prep wrote, or None (not one: input, as before)."""
    import json
    try:
        with base.open_raw(path, storage_options) as f:
            head = json.loads(f.read(MANIFEST_MAX_BYTES))
    except Exception:  # not JSON, not readable, bigger than a manifest: input, as before
        return None
    if not (isinstance(head, dict) and isinstance(head.get("splits"), dict)
            and str(head.get("created_by", "")).startswith("prep")):
        return None
    return [str(k) for k in head["splits"]]


# 100,000 shards make a ~15 MB manifest.json; a JSON file bigger than this is input, not one
MANIFEST_MAX_BYTES = 64 << 20


def _fixed_part(path: str) -> str:
    """The directory a local path or glob lists from: up to its first glob character."""
    path = os.path.expanduser(local_path(path))
    cut = min((i for i in map(path.find, "*?[") if i >= 0), default=-1)
    return os.path.dirname(path[:cut]) if cut >= 0 else path
