"""Loader benchmark: correctness first, then startup, memory and throughput; writes a markdown report.

    python benchmarks/bench_loader.py                      # synthetic datasets under benchmarks/data/
    python benchmarks/bench_loader.py --dataset out/owt    # throughput on a real dataset too

Reports (to benchmarks/results/loader_cpu_<yyyymm>.md unless --out):
1. Startup and memory on a synthetic dataset of --docs documents (default 10^7): construction time,
   private memory (USS) added by construction, time to first batch with a cold and a warm cache, and
   private memory after the first batch - each in a fresh process, per mode.
2. Packed fill and grouped padding fraction on a web-text-like length distribution (or --dataset).
3. batches/s and tokens/s per mode with 0 and 2 workers, then the data-wait share with a simulated
   device step of --step-ms.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loaders import MemmapLoader  # noqa: E402
from loaders.bench import format_table, run_loader_bench  # noqa: E402
from pipeline.manifest import Manifest, SplitInfo, write_manifest  # noqa: E402
from pipeline.shards import RollingShardWriter  # noqa: E402

MODES = ("windows", "packed", "grouped")


def build_synthetic(root: Path, num_docs: int, mean: float, sigma: float, seed: int = 0) -> Path:
    """uint16 dataset of `num_docs` lognormal-length documents with random GPT-2-range ids (reused if present)."""
    if (root / "manifest.json").exists():
        return root
    rng = np.random.default_rng(seed)
    lens = np.maximum(1, rng.lognormal(mean, sigma, num_docs).astype(np.int64))
    with RollingShardWriter(root / "train", "part", np.dtype(np.uint16), 100_000_000) as w:
        step = 1 << 20
        for a in range(0, num_docs, step):
            chunk = lens[a:a + step]
            w.add_documents(rng.integers(0, 50257, int(chunk.sum()), dtype=np.uint16), chunk)
    split = SplitInfo(num_docs, int(lens.sum()), tuple(w.shards))
    tok = {"name": "synthetic", "backend": "none", "sha256": "0" * 64, "boundary": "none"}
    write_manifest(root, Manifest(dtype="uint16", vocab_size=50257, tokenizer=tok, splits={"train": split}))
    return root


def check_correctness(path: Path, seq_len: int) -> None:
    """Before timing anything: batch invariants that hold on any dataset."""
    for mode in MODES:
        b = next(iter(MemmapLoader(path, batch_size=4, seq_len=seq_len, mode=mode, cache_dir=False)))
        x, y = b["input_ids"], b["labels"]
        assert x.dtype == y.dtype == torch.int64
        if mode == "windows":
            assert x.shape == (4, seq_len) and (y[:, :-1] == x[:, 1:]).all()
        elif mode == "packed":
            pos = b["position_ids"]
            assert x.shape == (4, seq_len)
            cont = pos[:, 1:] == pos[:, :-1] + 1
            has = y[:, :-1] != -100
            assert (has <= cont).all() and (y[:, :-1][has] == x[:, 1:][has]).all()  # no cross-document label
        else:
            assert x.shape[1] <= seq_len and (b["attention_mask"].sum(1)[1:] <= b["attention_mask"].sum(1)[:-1]).all()


PROBE = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import torch, torch.utils.data  # imported before the baseline
from loaders import MemmapLoader
from loaders.bench import memory_breakdown
path, mode, cache, seq_len = {path!r}, {mode!r}, {cache!r}, {seq_len}
def delta(base):
    now = memory_breakdown()
    return {{k: now[k] - base[k] for k in now}}
base = memory_breakdown()
t0 = time.perf_counter()
loader = MemmapLoader(path, batch_size=8, seq_len=seq_len, mode=mode, cache_dir=cache)
construct_s = time.perf_counter() - t0
construct = delta(base)
batch = next(iter(loader))
first_s = time.perf_counter() - t0
print(json.dumps({{"num_docs": loader.num_docs, "construct_s": construct_s, "construct": construct,
                  "first_batch_s": first_s, "batch": delta(base)}}))
"""


def startup_and_memory(path: Path, seq_len: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="prep-bench-cache-") as cache:
        for mode in MODES:
            row = {"mode": mode}
            for phase in ("cold", "warm"):  # the cold run builds the cache, the warm one reuses it
                code = PROBE.format(root=str(ROOT), path=str(path), mode=mode, cache=cache, seq_len=seq_len)
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                row[phase] = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
    return rows


def memory_table(rows: list[dict]) -> str:
    n = rows[0]["cold"]["num_docs"]
    lines = [f"Dataset: {n:,} documents. Bytes per document added in a fresh process: USS = Private_Clean + "
             "Private_Dirty; anon = anonymous pages (heap, arrays); USS - anon is mostly file pages of the "
             "memory-mapped cache that only this process has touched (reclaimable page cache).", "",
             "| mode | construct (ms) | construct USS | first batch cold (s) | first batch warm (s) "
             "| after first batch, cold: USS / anon | warm: USS / anon |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        c, w = r["cold"], r["warm"]
        lines.append(f"| {r['mode']} | {c['construct_s'] * 1e3:.1f} | {c['construct']['uss'] / n:.3f} | "
                     f"{c['first_batch_s']:.2f} | {w['first_batch_s']:.3f} | {c['batch']['uss'] / n:.2f} / "
                     f"{c['batch']['anon'] / n:.2f} | {w['batch']['uss'] / n:.2f} / {w['batch']['anon'] / n:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, help="a prep dataset dir for fill/padding/throughput")
    ap.add_argument("--docs", type=int, default=10_000_000, help="documents in the startup/memory dataset")
    ap.add_argument("--workdir", type=Path, default=ROOT / "benchmarks" / "data")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--num-batches", type=int, default=300)
    ap.add_argument("--step-ms", type=float, default=20.0, help="simulated device step for the data-wait table")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    t0 = time.time()
    load_before = os.getloadavg()
    big = build_synthetic(args.workdir / f"synthetic_{args.docs}", args.docs, mean=3.0, sigma=1.0)
    text = args.dataset or build_synthetic(args.workdir / "synthetic_webtext", 200_000, mean=5.0, sigma=1.1, seed=1)
    print(f"datasets ready in {time.time() - t0:.1f}s", flush=True)
    check_correctness(text, args.seq_len)
    mem = startup_and_memory(big, min(args.seq_len, 256))
    print(memory_table(mem), flush=True)
    kw = dict(batch_size=args.batch_size, seq_len=args.seq_len, num_batches=args.num_batches, device=args.device)
    speed = run_loader_bench(text, modes=MODES, num_workers=(0, 2), **kw)
    print(format_table(speed), flush=True)
    waits = run_loader_bench(text, modes=MODES, num_workers=(0, 2), step_ms=args.step_ms,
                             **{**kw, "num_batches": min(args.num_batches, 100)})
    print(format_table(waits), flush=True)

    load_after = os.getloadavg()
    text_m = MemmapLoader(text, batch_size=1, seq_len=args.seq_len, cache_dir=False)
    today = datetime.date.today()
    out = args.out or ROOT / "benchmarks" / "results" / f"loader_{args.device.split(':')[0]}_{today:%Y%m}.md"
    report = f"""# MemmapLoader benchmark ({today.isoformat()})

Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()},
torch {torch.__version__}, numpy {np.__version__}; device `{args.device}`. Page cache warm
(datasets were just written). Command: `{' '.join(['python benchmarks/bench_loader.py', *sys.argv[1:]])}`.
Load average (1/5/15 min) at start {load_before[0]:.1f}/{load_before[1]:.1f}/{load_before[2]:.1f}, at end
{load_after[0]:.1f}/{load_after[1]:.1f}/{load_after[2]:.1f} (other jobs on the machine inflate every time here).

## 1. Startup and private memory (synthetic, seq_len {min(args.seq_len, 256)}, batch 8)

{memory_table(mem)}

"Construct" reads the manifest and the .idx headers only. "Cold" first batch includes building the
cached arrays (document index; pack plan for packed; epoch order for grouped) for all documents;
"warm" reuses them from disk (memory-mapped). Modes: windows tiled (no per-document array at all),
packed best-fit-decreasing, grouped fixed batches.

## 2. Throughput, fill and padding ({args.dataset or 'synthetic web-text-like lengths: 200k docs, lognormal(5.0, 1.1), median ~150 tokens'}; {text_m.num_tokens:,} tokens)

batch {args.batch_size} x seq_len {args.seq_len}, {args.num_batches} batches per row; tokens/s counts
input positions (padding included). "first batch" = construct + first batch with a warm cache.

{format_table(speed)}

## 3. Data-wait share with a simulated {args.step_ms:g} ms device step

{format_table(waits)}

Indicative only: a 2-core VM, page cache warm; workers compete with the main process for the 2 cores.
"""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(f"wrote {out} ({time.time() - t0:.0f}s)")


if __name__ == "__main__":
    main()
