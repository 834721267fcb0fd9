"""After every unit is journaled: coalesce part shards into final shards, write rejects, manifest last.

Consecutive parts of a split (in unit order) are grouped greedily into shards of at most
`shard_tokens` tokens. A group of one part is hard-linked into place (no copy); a larger group is
concatenated with 8 MiB reads (sequential I/O at ~1 GB/s against ~10-20 MB/s of tokenization, so
under 2% of a run). Parts stay until the manifest is written, so a crash here is redone exactly:
a re-run deletes the split directories (and any stale manifest temporary) and places every shard
again. A failure while placing (ENOSPC) removes that shard's temporary files before re-raising.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np

from pipeline import __version__, faults
from pipeline.filters import drop_duplicates
from pipeline.journal import RunState
from pipeline.manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardInfo,
    SplitInfo,
    read_idx,
    write_idx,
    write_manifest,
)
from pipeline.shards import named
from pipeline.worker import SPLITS

__all__ = ["finalize", "group_parts"]

COPY_BLOCK = 8 << 20


def group_parts(parts: list[dict], shard_tokens: int) -> list[list[dict]]:
    groups: list[list[dict]] = []
    total = 0
    for p in parts:
        if groups and total + p["num_tokens"] <= shard_tokens:
            groups[-1].append(p)
            total += p["num_tokens"]
        else:
            groups.append([p])
            total = p["num_tokens"]
    return groups


def _place(src_dir: Path, dst_dir: Path, name: str, group: list[dict], dtype: np.dtype) -> ShardInfo:
    bin_path, idx_path = dst_dir / f"{name}.bin", dst_dir / f"{name}.idx"
    for p in (bin_path, idx_path):
        p.unlink(missing_ok=True)
    if len(group) == 1:
        part = group[0]
        for ext, dst in (("bin", bin_path), ("idx", idx_path)):
            src = src_dir / f"{part['name']}.{ext}"
            try:
                os.link(src, dst)
            except OSError:  # another filesystem, or links unsupported
                shutil.copyfile(src, dst)
        return ShardInfo(name, part["num_docs"], part["num_tokens"], part["sha256"])
    sha = hashlib.sha256()
    lengths = []
    tmp_bin = bin_path.with_suffix(".bin.tmp")
    tmp_idx = idx_path.with_suffix(".idx.tmp")
    try:
        with open(tmp_bin, "wb") as out:
            for part in group:
                lengths.append(np.array(read_idx(src_dir / f"{part['name']}.idx", mmap=False)[1], dtype=np.int64))
                with open(src_dir / f"{part['name']}.bin", "rb") as f:
                    while block := f.read(COPY_BLOCK):
                        sha.update(block)
                        faults.charge_write(len(block), tmp_bin)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        write_idx(tmp_idx, np.concatenate(lengths), dtype)
        os.replace(tmp_bin, bin_path)
        os.replace(tmp_idx, idx_path)
    except BaseException as e:  # a full disk: free what this shard took; the re-run places it again
        tmp_bin.unlink(missing_ok=True)
        tmp_idx.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise named(e, tmp_bin) from None
        raise
    return ShardInfo(name, sum(p["num_docs"] for p in group), sum(p["num_tokens"] for p in group), sha.hexdigest())


def finalize(out: Path, state: RunState, results: dict[int, dict], num_units: int, *, recipe_dict: dict,
             tokenizer: dict, dtype: np.dtype, vocab_size: int, shard_tokens: int, splits=SPLITS) -> Manifest:
    ordered = [results[i] for i in range(num_units)]
    ok = [r for r in ordered if r["status"] == "ok"]
    duplicates = 0
    if any(r.get("dedup") for r in ok):  # dedup: exact; the first copy in dataset order is kept
        ok, duplicates = drop_duplicates(state.parts, ok, splits, dtype)
    for stale in out.glob(MANIFEST_NAME + ".tmp*"):  # a manifest write cut short by a crash
        stale.unlink()
    split_infos = {}
    for split in splits:
        dst = out / split
        if dst.exists():
            shutil.rmtree(dst)  # a crash mid-finalize may have left some; redo them all
        dst.mkdir(parents=True)
        parts = [p for r in ok for p in r["shards"][split]]
        shards = []
        for k, group in enumerate(group_parts(parts, shard_tokens)):
            shards.append(_place(state.parts / split, dst, f"shard-{k:06d}", group, dtype))
            faults.point("finalize-shard")
        shards = tuple(shards)
        split_infos[split] = SplitInfo(sum(s.num_docs for s in shards), sum(s.num_tokens for s in shards), shards)
    skipped: dict[str, int] = {}
    for r in ok:
        for reason, n in r["skipped"].items():
            skipped[reason] = skipped.get(reason, 0) + n
    if duplicates:
        skipped["duplicate"] = duplicates
    _write_rejects(out, state, ok)
    failed = tuple({"unit": r["unit"], "path": r.get("path", ""), "error": r.get("error", "")}
                   for r in ordered if r["status"] != "ok")
    manifest = Manifest(dtype=np.dtype(dtype).name, vocab_size=vocab_size, tokenizer=tokenizer, splits=split_infos,
                        skipped=dict(sorted(skipped.items())), recipe=recipe_dict,
                        created_by=f"prep {__version__}", failed_units=failed)
    faults.point("manifest-before")
    write_manifest(out, manifest)
    return manifest


def _write_rejects(out: Path, state: RunState, ok: list[dict]) -> None:
    target = out / "rejects.jsonl"
    files = [state.rejects / f"u{r['unit']:07d}.jsonl" for r in ok if r.get("num_rejects")]
    if not files:
        target.unlink(missing_ok=True)
        return
    tmp = target.with_suffix(".jsonl.tmp")
    with open(tmp, "wb") as dst:
        for f in files:
            with open(f, "rb") as src:
                shutil.copyfileobj(src, dst, COPY_BLOCK)
    os.replace(tmp, target)
