"""Peak disk use of `prep tokenize`: the output directory's allocated bytes, sampled while it runs.

    python benchmarks/bench_disk.py --corpus benchmarks/data/docs.jsonl --scale 8 --shard-tokens 20000000

Runs `prep tokenize` (the console script) on the corpus repeated --scale times with the GPT-2
tokenizer, samples the allocated size (st_blocks) of every file under the output directory (run
state in .prep/ included) every --every seconds, and prints the peak against the finished dataset's
size. A peak of 2.0x means every token sat on disk twice at some moment (its part and its shard).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_TOKENIZER = str(HERE.parents[1] / "shared" / "assets" / "gpt2" / "tokenizer.json")


def allocated(root: Path) -> int:
    """Bytes allocated to the files under `root` (files vanishing while walked are skipped)."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                else:
                    total += e.stat(follow_symlinks=False).st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def scaled(corpus: Path, factor: int, tmp: Path) -> Path:
    if factor == 1:
        return corpus
    path = tmp / f"corpus_x{factor}.jsonl"
    data = corpus.read_bytes()
    with open(path, "wb") as f:
        for _ in range(factor):
            f.write(data)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(HERE / "data" / "docs.jsonl"))
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    ap.add_argument("--scale", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shard-tokens", type=int, default=100_000_000)
    ap.add_argument("--every", type=float, default=0.01, help="sampling period, seconds")
    ap.add_argument("--tmp", default=None, help="where the corpus copy and output go (default: a temp dir)")
    args = ap.parse_args()

    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="prep-disk-"))
    tmp.mkdir(parents=True, exist_ok=True)
    corpus = scaled(Path(args.corpus), args.scale, tmp)
    out = tmp / "out"
    recipe = tmp / "recipe.yaml"
    recipe.write_text(json.dumps({
        "name": "disk", "source": {"path": str(corpus), "format": "jsonl"},
        "tokenizer": {"path": args.tokenizer, "boundary": "eos"},
        "output": {"dir": str(out), "val_fraction": 0.0, "shard_tokens": args.shard_tokens},
        "num_workers": args.workers}))
    exe = shutil.which("prep")
    cmd = [exe] if exe else [sys.executable, "-m", "pipeline.cli"]
    cmd += ["tokenize", "--recipe", str(recipe), "--no-progress", "--overwrite"]

    peak, samples, stop = [0], [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], allocated(out))
            samples[0] += 1
            time.sleep(args.every)

    t0 = time.perf_counter()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"prep tokenize failed:\n{proc.stderr}")
    final = allocated(out)
    print(f"corpus {corpus.stat().st_size / 1e6:.0f} MB, shard_tokens {args.shard_tokens:,}, "
          f"{args.workers} workers: {wall:.2f} s")
    print(f"output {final / 1e6:.0f} MB; peak while running {peak[0] / 1e6:.0f} MB = {peak[0] / final:.2f}x "
          f"({samples[0]} samples)")
    if not args.tmp:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
