"""What one worker process does with one work unit: read -> encode in batches -> split -> shard parts.

Workers write their own part files (under DIR/.prep/parts/<split>/) and send back only a small
dict; no token lists cross process boundaries. Memory per worker is bounded by one read block,
one document batch and one 8 MiB write buffer per split, whatever the corpus size.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline import manifest
from pipeline.errors import STOPS_THE_RUN, EngineFailed, PrepError, SchemaError
from pipeline.filters import (
    BATCH_CHARS,
    DEDUP_DIR,
    PANDAS_FIX,
    Batcher,
    DedupLog,
    batch_cut,
    pandas_layout_of_reject,
)
from pipeline.manifest import dtype_for_vocab
from pipeline.readers import BadRecords, WorkUnit, get_reader
from pipeline.readers.base import compression_of
from pipeline.readers.json_array import range_first
from pipeline.recipe import Recipe
from pipeline.shards import RollingShardWriter, check_id_range
from pipeline.tokenizers import Encoder, FastPathMismatch, TokenizerSpec

__all__ = ["WorkerContext", "process_unit", "val_mask", "rejects_name", "SPLITS"]

SPLITS = ("train", "val")
FILTERED = {"too_short", "too_long"}  # records that had a text, dropped by min_chars/max_chars
REPORT_BYTES = 1 << 20  # a group of small files reports its read bytes to the progress bar in steps of this


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic): a well-spread stable hash."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def val_mask(seed: int, source: int, file_index: int | np.ndarray, positions: np.ndarray,
             val_fraction: float) -> np.ndarray:
    """True where a document goes to `val`: hash(seed, source, file, position) < fraction * 2^64.

    Depends only on the record's identity, never on unit cuts, worker count or timing. `file_index`:
    one for all `positions`, or one each (int64, a unit of several files).
    """
    if val_fraction <= 0 or positions.size == 0:
        return np.zeros(positions.size, dtype=bool)
    with np.errstate(over="ignore"):
        # masked as Python ints, before numpy sees them: a seed from ~1.8e7 up (20240101) or below 0 made
        # a key over 2^64 or negative, an OverflowError in np.array. Below that the mask changes nothing,
        # so every seed that worked keeps its split.
        base = (seed * 1_000_003 + source) * 1_000_003
        if np.ndim(file_index):  # the scalar form's key for each file, then one per document
            files, which = np.unique(file_index, return_inverse=True)
            key = _mix64(np.array([(base + int(f)) % 2**64 for f in files], dtype=np.uint64))[which]
        else:
            key = _mix64(np.array([(base + int(file_index)) % 2**64], dtype=np.uint64))
        h = _mix64(positions.astype(np.uint64) ^ key)
    # compare on the top 53 bits, where a float64 threshold is exact
    return (h >> np.uint64(11)) < np.uint64(int(val_fraction * (1 << 53)))


def part_prefix(unit_index: int) -> str:
    """What a unit's part shards are named from (u0000003-0000, ...), and its rejects file."""
    return f"u{unit_index:07d}"


def unit_of_part(name: str) -> int:
    """The unit a part shard's name comes from (part_prefix): the digits up to the '-', which are more
    than 7 from unit 10^7 on (10 TiB of input at unit_bytes 1 MiB; name[1:8] read u10000005-0000 as
    unit 1000000, so a resume that dropped unit 10000005 kept the placed shard holding its part)."""
    return int(name[1:name.index("-")])


def rejects_name(unit_index: int) -> str:
    """A unit's rejected records, under DIR/.prep/rejects/."""
    return f"{part_prefix(unit_index)}.jsonl"


@dataclass
class WorkerContext:
    recipe: Recipe
    spec: TokenizerSpec
    parts_dir: Path
    rejects_dir: Path
    encoder: Encoder | None = None
    # the plan's {URL: [size, stamp]}: a worker's opens check each object is still the one planned
    # (readers.url_reads.expecting)
    remote_inputs: dict = field(default_factory=dict)

    def get_encoder(self) -> Encoder:
        if self.encoder is None:
            self.encoder = self.spec.build_encoder()
        return self.encoder


def process_unit(unit: WorkUnit, ctx: WorkerContext, report=lambda nbytes, docs, tokens: None) -> dict:
    """Tokenize one unit into part shards; returns its journal entry.

    A unit of several small whole files (`unit.group`, readers.group_small_files) reads each as the
    unit it would have been alone (its file index for the val split, its own line numbers) but encodes
    their documents together, in batches across files. A file's documents join the batch only once the
    file was read to its end: under `on_bad_record: skip` a damaged one is left out whole (listed in
    the manifest's failed_units), not its neighbours."""
    recipe, encoder = ctx.recipe, ctx.get_encoder()
    if unit.index == 0:
        encoder.verify_next_documents()  # a fast engine's ids on the run's first documents == tokenizers'
    dtype = dtype_for_vocab(ctx.spec.vocab_size)
    out = recipe.output
    source = recipe.sources[unit.source]
    bad = BadRecords(unit, recipe.on_bad_record)
    prefix = part_prefix(unit.index)
    # no sha256 here: pipeline.assemble hashes each final shard while placing it (once per byte);
    # no fsync either: the crc32s in the journal entry let a resumed run check the parts instead
    writers = {s: RollingShardWriter(ctx.parts_dir / s, prefix, dtype, out.shard_tokens, checksum=False,
                                     sync=False, crc=True) for s in SPLITS}
    sink = _Sink(ctx, encoder, dtype, writers, report, unit)
    batch_docs = encoder.batch_docs(recipe.batch_docs)
    failed_files: list[dict] = []
    try:
        if not unit.group:  # streamed: each batch encoded as it comes
            given = 0  # documents the reader gave (kept or not)
            for batch in get_reader(unit.format).iter_batches(unit, source, bad, batch_docs):
                given += len(batch.texts)
                sink.kinds[unit.file_index] = batch.position_kind
                sink.write(batch.texts, batch.positions, unit.file_index, batch.chars, batch.nbytes)
            if _opens_its_file(unit):
                _check_fields_found(unit, source, bad, given)
        else:
            pending = _Pending(batch_docs)
            filtering = source.min_chars > 0 or source.max_chars is not None
            # read bytes go to the parent's progress bar in steps of REPORT_BYTES, not once per member:
            # each report is a message through a queue (18,515 files of 3.2 KB: one per file cost the
            # parent and the workers ~20 us each)
            unreported = 0
            reader = get_reader(unit.format)
            # a reader may read a group's plain members together (jsonl.whole_small_files); None: one by one
            members = (reader.whole_small_files(unit.group, source) if hasattr(reader, "whole_small_files")
                       else ((m, None) for m in unit.group))
            for member, read in members:
                member_bad = BadRecords(member, recipe.on_bad_record)
                texts: list[str] = []
                positions: list[int] = []
                try:
                    if read is not None:  # (line offsets, texts): min_chars/max_chars as its Batcher would
                        positions, texts = read
                        if filtering:
                            kept = Batcher(source, member_bad, sys.maxsize, sys.maxsize)
                            kept.extend(texts, positions)
                            texts, positions = kept.texts, kept.positions
                        unreported += member.size
                    else:
                        arrays = []
                        for batch in reader.iter_batches(member, source, member_bad, batch_docs):
                            texts += batch.texts
                            sink.kinds[member.file_index] = batch.position_kind
                            arrays.append(batch.positions)
                            unreported += batch.nbytes
                        positions = np.concatenate(arrays).tolist() if arrays else []
                    if unreported >= REPORT_BYTES:
                        report(unreported, 0, 0)
                        unreported = 0
                    _check_fields_found(member, source, member_bad, len(texts))
                except PrepError as e:
                    if recipe.on_bad_record == "error" or isinstance(e, STOPS_THE_RUN):
                        raise
                    failed_files.append({"path": member.path, "error": str(e)})
                    continue
                bad.absorb(member_bad)
                pending.add(texts, positions, member.file_index)
                while pending.full():
                    sink.write(*pending.take())
            while pending.texts:
                sink.write(*pending.take())
            if unreported:
                report(unreported, 0, 0)
    except BaseException as e:
        for w in writers.values():
            w.__exit__(type(e), e, None)
        raise
    try:
        for w in writers.values():
            w.__exit__(None, None, None)
    except BaseException as e:  # ENOSPC closing one split's shard: still drop the other's temporaries
        for w in writers.values():
            w.__exit__(type(e), e, None)
        raise
    if unit.group and len(failed_files) == len(unit.group):
        return {"unit": unit.index, "status": "failed", "path": failed_files[0]["path"],
                "error": failed_files[0]["error"], "failed_files": failed_files}
    skipped = dict(bad.counts)
    if sink.empty:
        skipped["empty"] = sink.empty
    rejects = {}
    if bad.rows:
        ctx.rejects_dir.mkdir(parents=True, exist_ok=True)
        rejects["rejects_crc32"] = bad.write(ctx.rejects_dir / rejects_name(unit.index))
    counts = sink.counts
    return {
        "unit": unit.index,
        "status": "ok",
        "shards": {s: [{**i.to_dict(), "crc32": c, "idx_crc32": ic}
                       for i, (c, ic) in zip(writers[s].shards, writers[s].crcs, strict=True)] for s in SPLITS},
        "num_docs": {s: counts[s][0] for s in SPLITS},
        "num_tokens": {s: counts[s][1] for s in SPLITS},
        "skipped": skipped,
        "num_rejects": len(bad.rows),
        **rejects,
        **({"failed_files": failed_files} if failed_files else {}),
        **({"notices": bad.notices} if bad.notices else {}),
        **({"dedup": sink.dedup.write(ctx.parts_dir / DEDUP_DIR, prefix)} if sink.dedup is not None else {}),
    }


class _Sink:
    """Documents -> ids -> a unit's part shards, split into train/val, with counts per split."""

    def __init__(self, ctx: WorkerContext, encoder: Encoder, dtype, writers: dict, report, unit: WorkUnit):
        self.encoder, self.dtype, self.writers, self.report = encoder, dtype, writers, report
        self.source, self.where = unit.source, unit.path
        self.unit = unit
        self.kinds: dict[int, str] = {}  # file index -> what its documents' positions count (DocBatch)
        self.out = ctx.recipe.output
        self.checked = not encoder.fits(dtype)  # ids that might not fit `dtype` come as uint32, range-checked
        self.dedup = DedupLog() if ctx.recipe.dedup == "exact" else None  # hashes of written docs, for finalize
        self.counts = {s: [0, 0] for s in SPLITS}  # docs, tokens
        self.empty = 0

    def write(self, texts: list[str], positions: np.ndarray, file_index, chars: int | None, nbytes: int) -> None:
        """`file_index`: the documents' file in their source, one for all or one each (int64[len(texts)])."""
        docs = tokens = 0
        if texts:
            try:
                ids, lengths = self.encoder.encode_batch(texts, np.uint32 if self.checked else self.dtype, chars)
            except (PrepError, FastPathMismatch, KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # pyo3's PanicException (a Rust engine's panic) is a BaseException
                raise self._engine_failed(texts, positions, file_index, e) from e
            self._check_doc_tokens(lengths, positions, file_index)
            keep = lengths > 0
            self.empty += int(keep.size - keep.sum())
            if self.checked:
                check_id_range(ids, self.dtype, self.where)
                ids = ids.astype(self.dtype)
            out = self.out
            is_val = val_mask(out.seed, self.source, file_index, positions, out.val_fraction)
            if self.dedup is not None:
                self.dedup.add(texts, keep, is_val)
            for split, sel in (("train", keep & ~is_val), ("val", keep & is_val)):
                n = int(sel.sum())
                if n == 0:
                    continue
                if n == sel.size:
                    w_ids, w_len = ids, lengths
                else:
                    w_ids, w_len = ids[np.repeat(sel, lengths)], lengths[sel]
                self.writers[split].add_documents(w_ids, w_len)
                self.counts[split][0] += n
                self.counts[split][1] += int(w_ids.size)
                docs += n
                tokens += int(w_ids.size)
        self.report(nbytes, docs, tokens)

    def _check_doc_tokens(self, lengths: np.ndarray, positions: np.ndarray, file_index) -> None:
        """Refuse a document longer than a .idx length holds (int32), naming it, before its tokens are
        written: it reached write_idx at the part's close, after its ~4 GB of tokens, as "<part>.idx.tmp<pid>:
        a document length does not fit int32" (a text file read whole with max_record_bytes: null, ~8 GB)."""
        limit = manifest.MAX_DOC_TOKENS
        if not lengths.size or int(lengths.max()) <= limit:
            return
        i = int(np.argmax(lengths))
        index = int(file_index[i]) if np.ndim(file_index) else int(file_index)
        where, place = self._locate(index, int(positions[i]))
        raise PrepError(f"{where}: {place} has {int(lengths[i]):,} tokens, more than the {limit:,} one document of "
                        "a Megatron .idx can hold (int32 lengths); split it into documents (source.doc_separator, "
                        "e.g. \"\\n\\n\" for paragraphs), or reject such records with source.max_record_bytes")

    def _engine_failed(self, texts: list[str], positions: np.ndarray, file_index, error: BaseException) -> EngineFailed:
        """EngineFailed naming the first document the engine fails on alone (re-encoded one by one:
        this runs once, as the run stops), or the batch where none fails alone."""
        spec = self.encoder.spec
        engine = f"tokenizer backend {spec.backend_version or spec.backend}"
        where, shown = self.where, f"a batch of {len(texts):,} documents"
        for i, text in enumerate(texts):
            try:
                self.encoder.encode_batch([text])
            except BaseException as e:
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                error = e
                index = int(file_index[i]) if np.ndim(file_index) else int(file_index)
                where, place = self._locate(index, int(positions[i]))
                shown = f"{place} ({len(text):,} characters, starting {text[:40]!r})"
                break
        # a tiktoken:<name> encoding has no other engine (backend hf refuses it)
        fix = ("; to go on, re-run with `--set tokenizer.backend=hf`: the reference engine gives the same ids, so "
               "the run resumes" if spec.backend != "hf" and not spec.is_tiktoken_name else "")
        said = " ".join(str(error).split())  # one line, as the CLI prints errors
        return EngineFailed(f"{where}: {engine} failed on {shown}: {type(error).__name__}: {said}. This is a bug "
                            f"in the engine or in prep: please report it with that document{fix}")

    def _locate(self, file_index: int, at: int) -> tuple[str, str]:
        """(the file, where in it) of the document at position `at` of file `file_index` of this unit."""
        unit = next((m for m in self.unit.group if m.file_index == file_index), self.unit)  # a group's member
        kind = self.kinds.get(file_index, "byte")
        if kind == "file":  # text, one document per file: `at` is the file's number in its source
            return (unit.paths[at - unit.start] if unit.paths else unit.path), "the document that is the whole file"
        place = f"the document at {kind} {at}"
        if kind == "byte" and compression_of(unit.path):  # the reader's offsets are decompressed ones
            place += " of its decompressed text"
        return unit.path, place


class _Pending:
    """A group's documents across its files, in order, taken in batches as the Batcher cuts them
    (batch_docs documents, or fewer once they hold filters.BATCH_CHARS characters)."""

    # Python lists until a batch is taken: a group of 100,000 one-record files made three numpy
    # arrays per file here (~4 us of the ~33 us a file cost in a worker)
    def __init__(self, batch_docs: int):
        self.batch_docs = batch_docs
        self.texts: list[str] = []
        self.positions: list[int] = []
        self.files: list[int] = []
        self.chars = 0

    def add(self, texts: list[str], positions: list[int], file_index: int) -> None:
        if texts:
            self.texts += texts
            self.positions += positions
            self.files += [file_index] * len(texts)
            self.chars += sum(map(len, texts))

    def full(self) -> bool:
        return len(self.texts) >= self.batch_docs or self.chars >= BATCH_CHARS

    def take(self) -> tuple[list[str], np.ndarray, np.ndarray, int, int]:
        """(texts, positions, file indexes, characters, 0 bytes: read bytes were reported per file)."""
        n = batch_cut(self.texts, self.chars, self.batch_docs)
        texts = self.texts[:n]
        positions = np.asarray(self.positions[:n], dtype=np.int64)
        files = np.asarray(self.files[:n], dtype=np.int64)
        del self.texts[:n], self.positions[:n], self.files[:n]
        chars = sum(map(len, texts))
        self.chars -= chars
        return texts, positions, files, chars, 0


def _opens_its_file(unit: WorkUnit) -> bool:
    """Whether the unit holds its file's first records: it starts at byte (or row) 0, or it is the
    first range of a records_field list (json_cuts.py), which starts at the list's `[`."""
    return unit.start == 0 or (unit.format == "jsonl" and bool(unit.payload) and range_first(unit.payload) == 0)


def _check_fields_found(unit: WorkUnit, source, bad: BadRecords, texts: int) -> None:
    """SchemaError when no record of a file's first unit had the text field and most rejects say so:
    a recipe naming the wrong field (say `content` for records holding `text`) would otherwise reject
    every record of every file and end in an empty dataset, exit 0. So too for a file that pandas'
    DataFrame.to_json wrote in a layout other than records (its default among them), and for a
    text_template whose format spec fits none of the records' values ({text:d} over strings)."""
    missing = bad.counts.get("missing_field", 0)
    if texts or bad.counts.keys() & FILTERED:
        return
    layout = pandas_layout_of_reject(bad.rows[0].get("detail", "")) if len(bad.rows) == 1 and unit.format == "jsonl" else ""
    if layout:
        raise SchemaError(f"{unit.path}: its one record, a table in pandas' DataFrame.to_json layout ({layout}): "
                          f"{bad.rows[0]['detail']}; {PANDAS_FIX}")
    unfit = bad.counts.get("unformattable_field", 0)
    if not missing and unfit and 2 * unfit >= len(bad.rows):  # {text:d}: a spec for integers over a string field
        first = next(r for r in bad.rows if r["reason"] == "unformattable_field")
        raise SchemaError(f"{first['source']}: text_template's format spec fits the value in none of the {unfit:,} "
                          f"records of this file's first unit ({_where(first)}: {first.get('detail', '')}); fix the "
                          "spec after the colon in source.text_template, or remove it")
    not_text = bad.counts.get("non_string_text", 0)
    if not missing and not_text and 2 * not_text >= len(bad.rows):  # text_field: id, or a list of paragraphs
        first = next(r for r in bad.rows if r["reason"] == "non_string_text")
        key = "text_template" if source.text_template else "text_field"
        raise SchemaError(f"{first['source']}: {key} names a field that holds no string in any of the {not_text:,} "
                          f"records of this file's first unit ({_where(first)}: {first.get('detail', '')}); set "
                          f"source.{key} to the field holding the text"
                          + ("; a list of strings must be joined into one first" if "strings, not one" in first.get("detail", "")
                             else ""))
    if not missing or 2 * missing < len(bad.rows):
        return
    first = next(r for r in bad.rows if r["reason"] == "missing_field")
    key = "text_template" if source.text_template else "text_field"
    detail = first.get("detail", "")
    # `{"version": 1, "data": [...]}` on one line reads as one record without the field; many records
    # each holding a list (chat turns under "messages") are not that
    one_object = (" (or, for a file that is one JSON object holding its records in a list, set "
                  "source.records_field to its key)" if unit.format == "jsonl" and missing == 1
                  and "a list of" in detail else "")
    # lines that are JSON strings or arrays have no fields to name: jq gives them one
    bare = {"str": "JSON strings", "list": "JSON arrays"}.get(detail.partition("the record is ")[2].split(",")[0])
    name = os.path.basename(unit.path)
    fix = (f"the records are {bare}, not objects: give each a text field first, e.g. jq -c "
           f"'{{text: {'.' if bare == 'JSON strings' else '.[1]'}}}' {name} > objects-{name}" if bare and
           unit.format == "jsonl" else f"set source.{key} to the field holding the text{one_object}")
    raise SchemaError(f"{first['source']}: {key} names a field that none of the {missing:,} records of this "
                      f"file's first unit has ({_where(first)}: {detail}); {fix}")


def _where(row: dict) -> str:
    """A reject row's place: "line N", "row N" or "byte N"."""
    return (f"line {row['line']}" if "line" in row else f"row {row['row']}" if "row" in row
            else f"byte {row['position']}")
