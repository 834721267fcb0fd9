"""Hugging Face datasets: a hub id (with `name`, `split`), a `save_to_disk` directory, or one of
`datasets`' own builders over files (`path: json|parquet|csv|text` with `data_files`).

A local `save_to_disk` directory is read with pyarrow alone (its state.json names its Arrow files,
which pyarrow memory-maps), in the parent and in the workers: `import datasets` plus load_from_disk
took 0.67 s of the parent's time before the first unit (55 MB, 2 workers: 1.79 s end to end, where
the same documents as JSONL take 1.04 s). Workers read the Arrow files of a hub or builder dataset
the same way; only streamed shards and views (split slices) go through `datasets` in the workers.

* Not streaming (a saved directory, or a dataset `load_dataset` downloads and prepares into the HF
  cache, as nanoGPT's prepare.py does): the dataset is memory-mapped Arrow with random access, so
  work units are row ranges of about `unit_bytes` (finer and better balanced than its cache files);
  a record's position is its row number. Units carry the Arrow files the parent resolved, and workers
  memory-map those (no hub request, no second download); a split slice (`train[:10%]`) or a remote
  saved dataset (copied to a temporary directory) is instead loaded again by each worker.
* `streaming: true` (corpora larger than the disk): nothing is downloaded up front; work units are
  the dataset's own shards (`IterableDataset.shard`, one per data file), a record's position is its
  row number within its shard. A shard cannot be split, so when the shards cannot be spread evenly
  over the workers (fewer shards than workers, or a last round that leaves workers idle) a warning
  says so. Progress counts shards (their sizes are not known up front).
Only the columns the text needs are read (`select_columns`).
Text columns are read as Parquet's are (pipeline.readers.arrow_values): binary decoded as UTF-8, a
value that is not UTF-8 its row's invalid_utf8 reject.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
from collections.abc import Iterator
from pathlib import Path

from pipeline import hub
from pipeline.errors import RESUME_FIX, PrepError, SchemaError, shown_columns
from pipeline.filters import Batcher, RecordError, TextExtractor
from pipeline.readers.arrow_values import BadUtf8, bad_utf8_columns, decoded, texts_of
from pipeline.readers.base import READ_ROWS, BadRecords, DocBatch, WorkUnit, local_path, value_preview
from pipeline.recipe import SourceConfig
from pipeline.source_formats import HF_SAVED_MARKERS, is_local_saved_dataset, is_url

__all__ = ["plan", "iter_batches", "warn_unbalanced", "load"]

log = logging.getLogger("prep")
STREAM_SHARD_NOMINAL_BYTES = 1 << 20  # progress weight of one streamed shard when its size is unknown
_CACHE: dict = {}  # per process: (path, name, split, data_files, streaming) -> dataset


def _is_saved_dir(path: str, storage_options: dict | None = None) -> bool:
    """A directory written by save_to_disk (local, or at an fsspec URL)."""
    if is_url(path):
        import fsspec
        try:
            fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
            return any(fs.exists(f"{root.rstrip('/')}/{f}") for f in HF_SAVED_MARKERS)
        except Exception:
            return False
    return is_local_saved_dataset(path)


def _open_arrow(files: tuple[str, ...]):
    """The rows of `datasets` Arrow files (IPC streams), memory-mapped, as one pyarrow Table."""
    import pyarrow as pa
    tables = [pa.ipc.open_stream(pa.memory_map(f)).read_all() for f in files]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _saved_arrow(source: SourceConfig):
    """(Arrow files, their table) of a local save_to_disk directory (the split's, for a DatasetDict),
    read as load_from_disk reads them; None when `datasets` must load it (not local, a split slice or
    a union such as train+test: hf._split_of, a state.json this does not know)."""
    split = source.split or "train"
    if not is_local_saved_dataset(source.path) or "[" in split or "+" in split:  # a slice or a union of splits
        return None
    root = Path(local_path(source.path)).expanduser()
    try:
        if in_dict := (root / "dataset_dict.json").is_file():
            splits = json.loads((root / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
            if split not in splits:
                raise PrepError(f"source.split: {split!r} is not a split of {source.path} (it has {', '.join(splits)})")
            root = root / split
        if not (root / "state.json").is_file():  # load_dataset's cache directory, not save_to_disk's
            files = _cache_arrow_files(root, split, source.path)
            return (files, _open_arrow(files)) if files else None
        state = json.loads((root / "state.json").read_text(encoding="utf-8"))
        if not in_dict:
            _refuse_split_of_a_dataset(source, state.get("_split"))
        files = tuple(os.path.abspath(root / f["filename"]) for f in state["_data_files"])
        if state.get("_indices_data_files") or not files and any(root.glob("*.arrow")):
            return None  # Arrow files that state.json does not list: load_from_disk says what it makes of them
        if not files:  # a Dataset of no rows is saved with no Arrow file, and load_from_disk fails on it
            return (), _no_rows(root)  # (IndexError in concat_tables, datasets 2.x-3.x): its columns alone
        return files, _open_arrow(files)
    except PrepError:
        raise
    except Exception:  # unreadable or unexpected: load_from_disk reports what is wrong
        return None


def _no_rows(root: Path):
    """A table of no rows with the columns dataset_info.json names (their types do not matter: no row is
    read), for a saved Dataset of no rows; KeyError without features (load_from_disk then says why)."""
    import pyarrow as pa
    features = json.loads((root / "dataset_info.json").read_text(encoding="utf-8"))["features"]
    return pa.table({name: pa.array([], pa.null()) for name in features})


def _refuse_split_of_a_dataset(source: SourceConfig, recorded: str | None) -> None:
    """A saved single Dataset (Dataset.save_to_disk, not a DatasetDict's) has no splits to choose from:
    its one split is the one it records being saved from (`load_dataset(..., split="test")`), or
    `train` (the default) when it records none. A source.split naming another (a slice of another too)
    is refused, naming the one it has and the fix, as a split a DatasetDict lacks is. Before, it was
    ignored and the whole Dataset read."""
    have = recorded or "train"
    if source.split is None or source.split == have or _slice_names(source.split) == {have}:
        return
    was = f"saved from split {have!r}" if recorded else f"read as split {have!r}, the default"
    raise PrepError(f"source.split: {source.split!r} is not a split of {source.path}: the directory holds a single "
                    f"Dataset (Dataset.save_to_disk, not a DatasetDict; {was}), which has no other split; remove "
                    f"source.split to read all of it, or slice it as {have + '[:10%]'!r}")


def _slice_names(split: str) -> set[str]:
    """The split names of a slice spec (`train[:10%]+test`: {train, test}); empty when it is not one."""
    import datasets
    try:
        return {i.splitname for i in datasets.ReadInstruction.from_spec(split)._relative_instructions}
    except (ValueError, AssertionError, AttributeError):
        return set()


def _split_of_a_dataset(ds, source: SourceConfig):
    """A saved single Dataset, or its slice (`train[:10%]` of a Dataset saved from `train`, or saved
    from none: load_from_disk gives it with no split, read as `train` as load_dataset's default is).
    Before, every slice was refused, as a split other than the saved one is (_refuse_split_of_a_dataset)."""
    recorded = None if ds.split is None else str(ds.split)
    _refuse_split_of_a_dataset(source, recorded)
    if source.split is None or source.split == (recorded or "train"):
        return ds
    return _split_of({recorded or "train": ds}, source.split, source.path)


def _cache_arrow_files(root: Path, split: str, path: str) -> tuple[str, ...]:
    """A `datasets` cache directory's Arrow files of `split`, in shard order: what load_dataset wrote
    under ~/.cache/huggingface/datasets/<name>/<config>/<version>/<hash>/ (dataset_info.json and
    <builder>-<split>.arrow or <builder>-<split>-NNNNN-of-NNNNN.arrow). load_from_disk refuses that
    directory ("neither a Dataset directory nor a DatasetDict directory"); its files are the same
    Arrow streams as a saved dataset's. Empty when it holds none."""
    arrows = sorted(root.glob("*.arrow"))
    files = [f for f in arrows if re.fullmatch(rf".+-{re.escape(split)}(-\d+-of-\d+)?\.arrow", f.name)]
    if not files and arrows:
        have = sorted({m.group(1) for f in arrows if not f.name.startswith("cache-")
                       and (m := re.fullmatch(r".+?-([^-]+)(-\d+-of-\d+)?\.arrow", f.name))})
        raise PrepError(f"source.split: {split!r} is not a split of {path} (its Arrow files have "
                        f"{', '.join(have) or 'no split names'})")
    return tuple(os.path.abspath(f) for f in files)


_PACKAGED = {"json", "parquet", "csv", "text", "arrow", "pandas", "webdataset", "imagefolder", "audiofolder"}


def _names_a_hub_repo(source: SourceConfig) -> bool:
    """Whether load_dataset would ask the hub for `source.path`: a repo id, not a local directory, a
    builder over local data_files (`path: json`), or an fsspec URL."""
    path = source.path
    return not (path in _PACKAGED or is_url(path) or os.path.exists(os.path.expanduser(path)))


def load(source: SourceConfig):
    """The dataset of a source (cached per process)."""
    key = (source.path, source.name, source.split, repr(source.data_files), source.streaming)
    if key in _CACHE:
        return _CACHE[key]
    try:
        import datasets
    except ImportError:  # pragma: no cover - a declared dependency
        raise PrepError("format hf needs the `datasets` package: pip install datasets") from None
    split = source.split or "train"
    try:
        if _is_saved_dir(source.path, source.storage_options):
            ds = datasets.load_from_disk(local_path(source.path), storage_options=source.storage_options or None)
            if isinstance(ds, datasets.DatasetDict):
                ds = _split_of(ds, split, source.path)
            else:
                ds = _split_of_a_dataset(ds, source)
            if source.streaming:
                log.warning("%s: a saved dataset is memory-mapped, not streamed; streaming: true is ignored",
                            source.path)
        else:
            data_files = list(source.data_files) if isinstance(source.data_files, (list, tuple)) else source.data_files
            if _names_a_hub_repo(source) and (reason := hub.unreachable()) is not None:
                log.warning("%s: the Hugging Face hub is not reachable (%s); looking in the local cache only",
                            source.path, reason)
                hub.go_offline()
            if source.streaming and "[" in split:  # load_dataset: "Bad split: train[:10%]" (read as a hub problem)
                raise PrepError(f"source.split: {split!r}: a streamed dataset cannot be sliced (datasets streams whole "
                                "splits); remove source.streaming to read the slice, or stream the whole split "
                                f"({split.split('[')[0]!r})")
            ds = datasets.load_dataset(source.path, source.name, split=split, data_files=data_files,
                                       streaming=source.streaming, storage_options=source.storage_options or None)
    except PrepError:
        raise
    except ValueError as e:
        if not re.match(r"(Bad|Unknown) split", str(e)):
            raise PrepError(_load_failed(source, split, e)) from None
        # the split, not the hub: "for a hub id the hub must be reachable" misled
        raise PrepError(f"source.split: {split!r} is not a split of {source.path!r} ({str(e).splitlines()[0]}); "
                        "set source.split to one of them") from None
    except Exception as e:  # no network, unknown id, bad config
        raise PrepError(_load_failed(source, split, e)) from None
    _CACHE[key] = ds
    return ds


def _load_failed(source: SourceConfig, split: str, e: Exception) -> str:
    from pipeline.signed_urls import redact  # datasets quotes the data_files URL it fetched: a signature
    return redact(f"source.path: cannot load the Hugging Face dataset {source.path!r}"
            f"{' (name ' + repr(source.name) + ')' if source.name else ''}, split {split!r}: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; for a hub id the hub "
            "must be reachable (or the dataset cached); a local copy can be given as a save_to_disk directory")


def _split_of(dd, split: str, path: str):
    """A saved DatasetDict's split, or its slice (`train[:10%]`, `train[10:20]+test`, read as load_dataset
    reads one): a slice was refused as "'train[:10%]' is not a split of ... (it has train)"."""
    import datasets
    if split in dd:
        return dd[split]
    try:
        parts = datasets.ReadInstruction.from_spec(split).to_absolute({k: len(v) for k, v in dd.items()})
    except (ValueError, KeyError, AssertionError):  # not a slice, or a slice of a split it lacks
        raise PrepError(f"source.split: {split!r} is not a split of {path} (it has {', '.join(dd)})") from None
    views = [dd[p.splitname].select(range(p.from_, p.to)) for p in parts]
    return views[0] if len(views) == 1 else datasets.concatenate_datasets(views)


def _streamed(ds) -> bool:
    import datasets
    return isinstance(ds, datasets.IterableDataset)


def plan(source: SourceConfig, source_index: int, files: list[str], unit_bytes: int) -> list[WorkUnit]:
    path = source.path
    saved = _saved_arrow(source)
    if saved is not None:
        if source.streaming:
            log.warning("%s: a saved dataset is memory-mapped, not streamed; streaming: true is ignored", path)
        files, table = saved
        _check_columns(table.column_names, source)
        return _row_ranges(source_index, path, table.num_rows, table.nbytes, unit_bytes, files)
    ds = load(source)
    _check_columns(ds.column_names, source)
    if _streamed(ds):
        n = ds.num_shards
        size = int(getattr(ds.info, "dataset_size", None) or 0) // max(n, 1) or STREAM_SHARD_NOMINAL_BYTES
        # each unit carries its shard, pickled (a few KB): a worker unpickles it in milliseconds instead of
        # resolving the dataset again with load_dataset (seconds)
        return [WorkUnit(0, source_index, i, path, "hf", i, i + 1, size,
                         payload=pickle.dumps(ds.shard(num_shards=n, index=i))) for i in range(n)]
    return _row_ranges(source_index, path, len(ds), int(ds.data.nbytes), unit_bytes, _arrow_files(ds, source))


def _row_ranges(source_index: int, path: str, rows: int, nbytes: int, unit_bytes: int,
                files: tuple[str, ...]) -> list[WorkUnit]:
    """Row ranges of about `unit_bytes` of Arrow data each; a dataset of no rows is one unit of none, as
    an empty JSONL file is (planned as no unit, it stopped the run with "source.path: matched no input")."""
    if rows == 0:
        return [WorkUnit(0, source_index, 0, path, "hf", 0, 0, 0, files)]
    total = nbytes or rows
    per_unit = max(1, unit_bytes * rows // total)
    return [WorkUnit(0, source_index, 0, path, "hf", a, min(a + per_unit, rows),
                     max(1, total * (min(a + per_unit, rows) - a) // rows), files)
            for a in range(0, rows, per_unit)]


def _arrow_files(ds, source: SourceConfig) -> tuple[str, ...]:
    """The Arrow files that hold exactly the dataset's rows in order, when they do: workers then open
    them directly (memory-mapped), with no hub request and no second download of a remote saved
    dataset. Empty when the dataset is a view (a split slice like train[:10%], an indices mapping)."""
    if "[" in (source.split or "") or getattr(ds, "_indices", None) is not None or not ds.cache_files:
        return ()
    if is_url(source.path):  # a remote saved dataset is copied to a temporary directory: not stable
        return ()              # across a resume, so each worker loads (downloads) it itself
    files = tuple(f["filename"] for f in ds.cache_files)
    try:
        if _open_arrow(files).num_rows != len(ds):
            return ()
    except Exception:
        return ()
    return files


def _load_unit(unit: WorkUnit, source: SourceConfig):
    """The dataset a unit reads: its own pickled shard (streaming), its Arrow files, or a fresh load."""
    if unit.payload:
        return pickle.loads(unit.payload)
    if not unit.paths:
        return load(source)
    if unit.paths not in _CACHE:  # a pyarrow Table: no `datasets` import in the worker
        try:
            _CACHE[unit.paths] = _open_arrow(unit.paths)
        except Exception as e:  # a data file deleted or damaged since planning
            raise PrepError(f"{unit.path}: cannot read its Arrow files ({type(e).__name__}: {e}); fix the data "
                            f"and {RESUME_FIX}") from None
    return _CACHE[unit.paths]


def warn_unbalanced(source: SourceConfig, units: list[WorkUnit], workers: int) -> None:
    if not source.streaming or not units or _is_saved_dir(source.path, source.storage_options):
        return
    n = len(units)
    if n < workers:
        log.warning("%s: the streamed dataset has %d shard(s) for %d workers; only %d worker(s) will be busy "
                    "(a shard cannot be split: stream fewer workers, or use a dataset with more data files)",
                    source.path, n, workers, n)
    elif n % workers and n < 8 * workers:
        rounds = -(-n // workers)
        log.warning("%s: %d shards over %d workers cannot be balanced: the last round keeps %d of %d workers "
                    "busy (about %.0f%% of the pool used)", source.path, n, workers, n % workers, workers,
                    100.0 * n / (rounds * workers))


def _check_columns(names: list[str] | None, source: SourceConfig) -> None:
    if names is None:  # a streamed dataset without known features: checked row by row
        return
    missing = TextExtractor(source.text_field, source.text_template, source.encoding_errors).columns_in(names)[1]
    if missing:
        key = "text_template" if source.text_template else "text_field"
        what = "text_template field" if source.text_template else "text_field"
        raise SchemaError(f"source.{key}: {what} {missing[0]!r} is not a column of {source.path}; it has "
                          f"{shown_columns(names)}; "
                          f"set source.{key} to one of them")


def iter_batches(unit: WorkUnit, source: SourceConfig, bad: BadRecords, batch_docs: int) -> Iterator[DocBatch]:
    if not unit.payload and unit.start == unit.end:  # a dataset of no rows (_row_ranges): nothing to load
        yield Batcher(source, bad, batch_docs, position_kind="row").take(0)
        return
    ds = _load_unit(unit, source)
    streamed = not unit.paths and _streamed(ds)  # unit.paths: a pyarrow Table of the dataset's Arrow files
    extract = TextExtractor(source.text_field, source.text_template, source.encoding_errors)
    batcher = Batcher(source, bad, batch_docs, position_kind="row")
    limit = source.max_record_bytes
    names = ds.column_names  # None: a streamed dataset without known features (rows as they come)
    # plain: the text is one column's values; a dotted name is one when a column has it whole (a
    # flattened `meta.body`, which wins as in get_value), else a path into a struct column
    plain = source.text_template is None and ("." not in extract.field
                                              or names is not None and extract.field in names)
    where = f"{unit.path} shard {unit.start}" if streamed else f"{unit.path} rows {unit.start}..{unit.end}"
    if names is not None:
        ds = (ds.select if unit.paths else ds.select_columns)(extract.columns_in(names)[0])
    row = unit.start if not streamed else 0
    for columns in _iter_column_batches(ds, unit, min(batch_docs, READ_ROWS), where, streamed,
                                        source.encoding_errors):
        values = columns.get(extract.field) if plain else None
        n = len(next(iter(columns.values()))) if columns else 0
        # the columns holding a value that is not UTF-8, looked for once per batch: a look per row
        # (any() over its values) cost 2 us a row, +25% on reading a Parquet file through text_template
        suspect = [] if plain else bad_utf8_columns(columns)
        for i in range(n):
            pos = row + i
            try:
                if plain:
                    if values is None:
                        raise RecordError("missing_field", f"no {extract.field!r}")
                    text = values[i]
                    if type(text) is not str:  # checked only so: a str is a text (the common case)
                        if isinstance(text, BadUtf8):
                            raise RecordError("invalid_utf8", f"{extract.field!r} is not UTF-8")
                        text = extract.check(extract.field, text)
                else:
                    if suspect and any(isinstance(columns[k][i], BadUtf8) for k in suspect):
                        raise RecordError("invalid_utf8", "a field is not UTF-8")
                    text = extract({k: v[i] for k, v in columns.items()})
            except RecordError as e:
                shown = values[i] if plain and values is not None else {k: v[i] for k, v in columns.items()}
                bad.reject(e.reason, pos, value_preview(shown), e.detail, row=pos, path=where)
                continue
            if limit is not None and len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
                bad.reject("record_too_large", pos, text, f"text longer than max_record_bytes {limit}", row=pos,
                           path=where)
                continue
            if batcher.add(text, pos):
                yield batcher.take(0)
        row += n
    yield batcher.take(unit.size)


def _iter_column_batches(ds, unit: WorkUnit, batch_docs: int, where: str, streamed: bool,
                         errors: str) -> Iterator[dict]:
    """Dicts of column -> list of values, `batch_docs` rows each, for the unit's rows or shard."""
    if streamed:
        shard = ds if unit.payload else ds.shard(num_shards=ds.num_shards, index=unit.start)
        # a binary column's values come as bytes: decoded as a saved dataset's are (texts_of)
        it = ({name: decoded(values, errors) for name, values in batch.items()}
              for batch in shard.iter(batch_size=batch_docs))
    else:
        # a pyarrow Table (unit.paths), or a Dataset's rows as one; texts_of, not to_pydict: a value that
        # is not UTF-8 (an Arrow file written by pyarrow, which does not check) raised UnicodeDecodeError
        # and failed the unit, and a binary column (datasets' Value("binary")) was non_string_text
        table = ds if unit.paths else ds.with_format("arrow")
        it = ({name: texts_of(rows.column(name), errors) for name in rows.column_names}
              for a in range(unit.start, unit.end, batch_docs)
              for rows in [table.slice(a, min(batch_docs, unit.end - a)) if unit.paths
                           else table[a:min(a + batch_docs, unit.end)]])
    while True:
        try:
            batch = next(it, None)
        except Exception as e:  # a damaged data file, a network error mid-stream
            raise PrepError(f"{where}: reading the dataset failed ({type(e).__name__}: {e}); fix the data and "
                            f"{RESUME_FIX}") from None
        if batch is None:
            return
        yield batch
