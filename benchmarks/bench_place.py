"""Placing final shards alone (pipeline.assemble.ShardAssembler), the parent's share of a run.

    python benchmarks/bench_place.py --parts 28 --repeat 3

Writes --parts part files of 5 M uint16 tokens (10 MB) each under --tmp, reads them once so the
page cache holds them (as it does when a worker has just written them), then times placing them into
shards of 100 M tokens (hash, copy, periodic and final syncs), printing wall and CPU seconds and
MB/s of tokens. On many cores this thread must keep up with every worker together.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline.assemble import ShardAssembler
from pipeline.shards import ShardWriter

TOKENS = 5_000_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", type=int, default=28)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tmp", default=None, help="directory for the parts and shards (default: a temp dir)")
    args = ap.parse_args()
    root = Path(args.tmp or tempfile.mkdtemp(prefix="prep-place-"))
    src = root / "parts" / "train"
    rng = np.random.default_rng(0)
    parts = []
    for k in range(args.parts):
        name = f"u{k:07d}-0000"
        if not (src / f"{name}.bin").exists():
            with ShardWriter(src, name, np.uint16, checksum=False) as w:
                w.add_documents(rng.integers(0, 50_000, TOKENS, dtype=np.uint16), np.full(1000, TOKENS // 1000))
        (src / f"{name}.bin").read_bytes()  # page cache warm
        parts.append({"name": name, "num_tokens": TOKENS, "num_docs": 1000, "sha256": ""})
    mb = args.parts * TOKENS * 2 / 1e6
    for _ in range(args.repeat):
        dst = root / "out"
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        asm = ShardAssembler(src, dst, np.uint16, 100_000_000)
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for p in parts:
            asm.add(p)
        asm.close()
        wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        print(f"{mb:.0f} MB of parts -> {len(asm.shards)} shards: {wall:.3f} s wall, {cpu:.3f} s CPU, "
              f"{mb / wall:.0f} MB/s", flush=True)
    if not args.tmp:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
