"""What one worker process does with one work unit: read -> encode in batches -> split -> shard parts.

Workers write their own part files (under DIR/.prep/parts/<split>/) and send back only a small
dict; no token lists cross process boundaries. Memory per worker is bounded by one read block,
one document batch and one 8 MiB write buffer per split, whatever the corpus size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import SchemaError
from pipeline.filters import DEDUP_DIR, DedupLog
from pipeline.manifest import dtype_for_vocab
from pipeline.readers import BadRecords, WorkUnit, get_reader
from pipeline.recipe import Recipe
from pipeline.shards import RollingShardWriter, check_id_range
from pipeline.tokenizers import Encoder, TokenizerSpec

__all__ = ["WorkerContext", "process_unit", "val_mask", "rejects_name", "SPLITS"]

SPLITS = ("train", "val")
FILTERED = {"too_short", "too_long"}  # records that had a text, dropped by min_chars/max_chars
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic): a well-spread stable hash."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def val_mask(seed: int, source: int, file_index: int, positions: np.ndarray, val_fraction: float) -> np.ndarray:
    """True where a document goes to `val`: hash(seed, source, file, position) < fraction * 2^64.

    Depends only on the record's identity, never on unit cuts, worker count or timing.
    """
    if val_fraction <= 0 or positions.size == 0:
        return np.zeros(positions.size, dtype=bool)
    with np.errstate(over="ignore"):
        key = _mix64(np.array([(seed * 1_000_003 + source) * 1_000_003 + file_index], dtype=np.uint64)
                     & _M64)
        h = _mix64(positions.astype(np.uint64) ^ key)
    # compare on the top 53 bits, where a float64 threshold is exact
    return (h >> np.uint64(11)) < np.uint64(int(val_fraction * (1 << 53)))


def rejects_name(unit_index: int) -> str:
    """A unit's rejected records, under DIR/.prep/rejects/."""
    return f"u{unit_index:07d}.jsonl"


@dataclass
class WorkerContext:
    recipe: Recipe
    spec: TokenizerSpec
    parts_dir: Path
    rejects_dir: Path
    encoder: Encoder | None = None

    def get_encoder(self) -> Encoder:
        if self.encoder is None:
            self.encoder = self.spec.build_encoder()
        return self.encoder


def process_unit(unit: WorkUnit, ctx: WorkerContext, report=lambda nbytes, docs, tokens: None) -> dict:
    """Tokenize one unit into part shards; returns its journal entry."""
    recipe, encoder = ctx.recipe, ctx.get_encoder()
    if unit.index == 0:
        encoder.verify_next_documents()  # a fast engine's ids on the run's first documents == tokenizers'
    dtype = dtype_for_vocab(ctx.spec.vocab_size)
    checked = not encoder.fits(dtype)  # ids that might not fit `dtype` come as uint32, range-checked here
    source = recipe.sources[unit.source]
    out = recipe.output
    bad = BadRecords(unit, recipe.on_bad_record)
    prefix = f"u{unit.index:07d}"
    # no sha256 here: pipeline.assemble hashes each final shard while placing it (once per byte);
    # no fsync either: the crc32s in the journal entry let a resumed run check the parts instead
    writers = {s: RollingShardWriter(ctx.parts_dir / s, prefix, dtype, out.shard_tokens, checksum=False,
                                     sync=False, crc=True) for s in SPLITS}
    empty = 0
    counts = {s: [0, 0] for s in SPLITS}  # docs, tokens
    dedup = DedupLog() if recipe.dedup == "exact" else None  # hashes of written docs, for finalize
    texts = 0  # records that gave a text (kept or not)
    try:
        for batch in get_reader(unit.format).iter_batches(unit, source, bad, encoder.batch_docs(recipe.batch_docs)):
            docs = tokens = 0
            texts += len(batch.texts)
            if batch.texts:
                ids, lengths = encoder.encode_batch(batch.texts, np.uint32 if checked else dtype, batch.chars)
                keep = lengths > 0
                empty += int(keep.size - keep.sum())
                if checked:
                    check_id_range(ids, dtype, f"{unit.path}")
                    ids = ids.astype(dtype)
                is_val = val_mask(out.seed, unit.source, unit.file_index, batch.positions, out.val_fraction)
                if dedup is not None:
                    dedup.add(batch.texts, keep, is_val)
                for split, sel in (("train", keep & ~is_val), ("val", keep & is_val)):
                    n = int(sel.sum())
                    if n == 0:
                        continue
                    if n == sel.size:
                        w_ids, w_len = ids, lengths
                    else:
                        w_ids, w_len = ids[np.repeat(sel, lengths)], lengths[sel]
                    writers[split].add_documents(w_ids, w_len)
                    counts[split][0] += n
                    counts[split][1] += int(w_ids.size)
                    docs += n
                    tokens += int(w_ids.size)
            report(batch.nbytes, docs, tokens)
        if unit.start == 0:
            _check_fields_found(unit, source, bad, texts)
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
    skipped = dict(bad.counts)
    if empty:
        skipped["empty"] = empty
    rejects = {}
    if bad.rows:
        ctx.rejects_dir.mkdir(parents=True, exist_ok=True)
        rejects["rejects_crc32"] = bad.write(ctx.rejects_dir / rejects_name(unit.index))
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
        **({"dedup": dedup.write(ctx.parts_dir / DEDUP_DIR, prefix)} if dedup is not None else {}),
    }


def _check_fields_found(unit: WorkUnit, source, bad: BadRecords, texts: int) -> None:
    """SchemaError when no record of a file's first unit had the text field and most rejects say so:
    a recipe naming the wrong field (say `content` for records holding `text`) would otherwise reject
    every record of every file and end in an empty dataset, exit 0."""
    missing = bad.counts.get("missing_field", 0)
    if texts or not missing or 2 * missing < len(bad.rows) or bad.counts.keys() & FILTERED:
        return
    first = next(r for r in bad.rows if r["reason"] == "missing_field")
    at = (f"line {first['line']}" if "line" in first else f"row {first['row']}" if "row" in first
          else f"byte {first['position']}")
    key = "text_template" if source.text_template else "text_field"
    raise SchemaError(f"{first['source']}: {key} names a field that none of the {missing:,} records of this "
                      f"file's first unit has ({at}: {first.get('detail', '')}); set source.{key} to the "
                      "field holding the text")
