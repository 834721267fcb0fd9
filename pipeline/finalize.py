"""After every unit is journaled: the last shards, rejects, manifest last.

Shards are placed by `pipeline.assemble` (greedy groups of parts in unit order, hard link or
concatenation): during the run by the executor's PartStream (each journaled, then its parts
deleted), or here all at once when exact dedup must first see every unit (parts then stay until the
manifest is written, and a re-run rebuilds the split directories from them). Either way a crash
here is redone exactly (a stale manifest temporary is dropped). A failure while placing (ENOSPC)
removes that shard's temporary files before re-raising.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from pipeline import __version__, faults
from pipeline.assemble import COPY_BLOCK, PartStream
from pipeline.errors import FINISHED_FIX, RESUME_FIX
from pipeline.filters import drop_duplicates
from pipeline.journal import RunState
from pipeline.manifest import MANIFEST_NAME, Manifest, ShardInfo, SplitInfo, write_manifest
from pipeline.worker import SPLITS, rejects_name

__all__ = ["finalize", "needs_all_units", "skipped_by_reason"]


def needs_all_units(results: dict[int, dict]) -> bool:
    """Exact dedup rewrites parts once every unit is known: its shards cannot be placed while running."""
    return any(r.get("dedup") for r in results.values() if r.get("status") == "ok")


def finalize(out: Path, state: RunState, results: dict[int, dict], num_units: int, *, recipe_dict: dict,
             tokenizer: dict, dtype: np.dtype, vocab_size: int, shard_tokens: int, splits=SPLITS,
             placed: dict[str, list[ShardInfo]] | None = None) -> Manifest:
    """`placed`: the shards a PartStream already placed from every ok unit; None places them here."""
    ordered = [results[i] for i in range(num_units)]
    ok = [r for r in ordered if r["status"] == "ok"]
    duplicates = 0
    if placed is None:
        if needs_all_units(results):  # dedup: exact; the first copy in dataset order is kept
            ok, duplicates = drop_duplicates(state.parts, ok, splits, dtype)
        stream = PartStream(state.parts, out, splits, dtype, shard_tokens, background=False)
        try:
            for r in ok:
                stream.feed(r)
            placed = stream.finish()
        except BaseException:
            stream.abort()
            raise
    for stale in out.glob(MANIFEST_NAME + ".tmp*"):  # a manifest write cut short by a crash
        stale.unlink()
    split_infos = {}
    for split in splits:
        shards = tuple(placed[split])
        split_infos[split] = SplitInfo(sum(s.num_docs for s in shards), sum(s.num_tokens for s in shards), shards)
    skipped = skipped_by_reason(ok)
    if duplicates:
        skipped["duplicate"] = duplicates
    _write_rejects(out, state, ok)
    # a unit of small files lists each file that failed (the others were kept), else the unit itself.
    # Its error's "re-run to resume" held while the run could resume; once this manifest is written the
    # run state is gone and a re-run says "already complete", so the manifest says what works
    failed = tuple({"unit": r["unit"], "path": f.get("path", ""),
                    "error": f.get("error", "").replace(RESUME_FIX, FINISHED_FIX)}
                   for r in ordered if r["status"] != "ok" or r.get("failed_files")
                   for f in r.get("failed_files") or [r])
    manifest = Manifest(dtype=np.dtype(dtype).name, vocab_size=vocab_size, tokenizer=tokenizer, splits=split_infos,
                        skipped=dict(sorted(skipped.items())), recipe=recipe_dict,
                        created_by=f"prep {__version__}", failed_units=failed)
    faults.point("manifest-before")
    write_manifest(out, manifest)
    return manifest


def _write_rejects(out: Path, state: RunState, ok: list[dict]) -> None:
    target = out / "rejects.jsonl"
    files = [state.rejects / rejects_name(r["unit"]) for r in ok if r.get("num_rejects")]
    if not files:
        target.unlink(missing_ok=True)
        return
    tmp = target.with_suffix(".jsonl.tmp")
    try:
        with open(tmp, "wb") as dst:
            for f in files:
                with open(f, "rb") as src:
                    shutil.copyfileobj(src, dst, COPY_BLOCK)
            dst.flush()
            os.fsync(dst.fileno())  # on disk before the manifest (whose directory fsync covers the rename)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)


def skipped_by_reason(ok_results) -> dict[str, int]:
    """Skipped records by reason summed over finished units' results (the manifest's `skipped`, less
    duplicates; the executor's empty-run check counts them the same way)."""
    skipped: dict[str, int] = {}
    for r in ok_results:
        for reason, n in r["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + n
    return skipped
