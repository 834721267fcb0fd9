"""One big compressed JSONL file vs the same file uncompressed: `prep tokenize` end to end, same run.

    python benchmarks/bench_compressed.py --tokenizer PATH/tokenizer.json --workers 2 --scale 8 --repeat 3
    python benchmarks/bench_compressed.py --tokenizer PATH/tokenizer.json --array   # + the records as a JSON array
    python benchmarks/bench_compressed.py --tokenizer PATH/tokenizer.json --codecs zst,gz,bz2,xz

Builds, in a scratch directory, the corpus (benchmarks/data/docs.jsonl by default) repeated `--scale`
times as one plain .jsonl, one .jsonl.zst (level 3, content size in the frame header) and one
.jsonl.gz (level 6) (`--codecs`: also .bz2, level 9, and .xz, preset 3), then times `prep tokenize` on each, interleaved, `--repeat` rounds after one
untimed round (the tokenizer proof cache), each into a fresh output directory, and checks that the
outputs hold the same shard bytes (the compressed files are cut into the same ranges as the
plain one: pipeline/spool.py). Prints a markdown table of best and median wall times.

With `--array`, the same records as one JSON array (`[` + records joined by ",\n" + `]`), plain,
.zst and .gz, are timed too: cut between its records at plan time (readers/json_cuts.py; a compressed
one's decompressed stream is scanned there), its outputs hold the same shard bytes (not the
JSONL ones': its units, so its shards' boundaries, differ; the tokens are the same).
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zstandard

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_tokenize import ROOT, prep_command  # noqa: E402


def _open_compressed(path: Path, codec: str):
    if codec == "gz":
        return gzip.open(path, "wb", compresslevel=6)
    if codec == "bz2":
        return bz2.open(path, "wb", compresslevel=9)
    return lzma.open(path, "wb", preset=3)


def build(corpus: Path, scale: int, scratch: Path, array: bool = False,
          codecs: tuple[str, ...] = ("zst", "gz")) -> dict[str, Path]:
    plain = scratch / "corpus.jsonl"
    data = corpus.read_bytes()
    with open(plain, "wb") as f:
        for _ in range(scale):
            f.write(data)
    files = {"jsonl": plain}
    if array:
        records = [line for line in data.split(b"\n") if line.strip()]
        with open(scratch / "corpus.json", "wb") as f:
            f.write(b"[\n")
            for k in range(scale):
                f.write((b",\n" if k else b"") + b",\n".join(records))
            f.write(b"\n]\n")
        files["json"] = scratch / "corpus.json"
    for kind, path in list(files.items()):
        size = path.stat().st_size
        for codec in codecs:
            packed = path.with_name(f"{path.name}.{codec}")
            if codec == "zst":  # content size in the frame header, as the zstd tool writes it for files
                with open(path, "rb") as src, open(packed, "wb") as dst:
                    zstandard.ZstdCompressor(level=3, threads=-1).copy_stream(src, dst, size=size)
            else:
                with open(path, "rb") as src, _open_compressed(packed, codec) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            files[f"{kind}.{codec}"] = packed
    return dict(sorted(files.items(), key=lambda kv: (kv[0].split(".")[0] != "jsonl", kv[0])))


def shard_digest(out: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((out / "prep").glob("*/shard-*")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(ROOT / "benchmarks" / "data" / "docs.jsonl"))
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--scale", type=int, default=8, help="corpus copies in the file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tmp", default=None, help="scratch directory (default: system temp)")
    ap.add_argument("--array", action="store_true", help="also the same records as one JSON array")
    ap.add_argument("--codecs", default="zst,gz", help="compressions to time: zst, gz, bz2, xz (comma-separated)")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench_compressed_", dir=args.tmp))
    try:
        files = build(Path(args.corpus), args.scale, scratch, args.array, tuple(args.codecs.split(",")))
        sizes = {k: p.stat().st_size for k, p in files.items()}
        env = {**os.environ, "PREP_CACHE_DIR": str(scratch / "cache"),
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        walls: dict[str, list[float]] = {k: [] for k in files}
        digests = {}
        for rnd in range(args.repeat + 1):
            for kind, path in files.items():
                out = scratch / f"out_{kind}"
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                cmd = prep_command(str(path), args.tokenizer, args.workers, str(out), "auto")
                t0 = time.perf_counter()
                run = subprocess.run(cmd, capture_output=True, text=True, env=env)
                wall = time.perf_counter() - t0
                if run.returncode:
                    raise SystemExit(f"{kind}: prep failed\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}")
                if rnd:
                    walls[kind].append(wall)
                    print(f"{kind} round {rnd}: {wall:.2f} s", flush=True)
                digests[kind] = shard_digest(out)
        layouts = sorted({kind.split(".")[0] for kind in files})
        for layout in layouts:  # plain and every compression of a layout: the same shards
            if len({d for kind, d in digests.items() if kind.split(".")[0] == layout}) != 1:
                raise SystemExit(f"outputs differ: {digests}")
        same = ", ".join(f"{layout} sha256 {digests[layout][:12]}" for layout in layouts)
        print(f"\n{args.scale}x {Path(args.corpus).name}, {args.workers} workers, {os.cpu_count()} cores; "
              f"same shard bytes for plain and {args.codecs} ({same})\n")
        print("| input | file MB | best s | median s | vs plain JSONL (median) |")
        print("|---|---:|---:|---:|---:|")
        base = statistics.median(walls["jsonl"])
        for kind, ws in walls.items():
            med = statistics.median(ws)
            print(f"| {kind} | {sizes[kind] / 1e6:.1f} | {min(ws):.2f} | {med:.2f} | {med / base:.2f}x |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
