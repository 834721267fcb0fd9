"""Worker scaling: `prep tokenize` and the engine ceilings at 1, 2, 4, ... workers, same corpus, same run.

    python benchmarks/bench_scaling.py                          # 1, 2, 4, ... up to the core count
    python benchmarks/bench_scaling.py --workers 1,2,4,8,16 --scale 8 --repeat 2

For each worker count W (one timed subprocess per row, best of --repeat; see bench_tokenize.py for
how each row is run and timed):
  ceiling   gigatoken alone on in-memory texts, W forked processes (no I/O, no parsing, no writing)
  jsonl     orjson.loads + gigatoken on in-memory JSONL lines, W processes (the bound for any JSONL
            pipeline)
  prep      `prep tokenize` end to end (CLI start -> manifest written), backend auto, W workers
All three run on the corpus repeated --scale times (default 8: start-up spread over more work; the
repeated text makes gigatoken's pre-token cache hit more, for the ceilings as for prep). Scaling
efficiency = MB/s at W / (W x MB/s at 1). prep's output must be byte-identical for every W (the
manifest's shard sha256s are compared), and the W=1 output must hold the reference token stream of
Hugging Face tokenizers.

Writes benchmarks/results/tokenize_scaling_<machine>_<yyyymm>.md (and .json beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_tokenize as bt  # noqa: E402

ROWS = (("ceiling", "ceiling/gigatoken"), ("jsonl", "ceiling/gigatoken+json"), ("prep", "prep/auto"))


def default_workers() -> str:
    n, out = os.cpu_count() or 1, []
    w = 1
    while w < n:
        out.append(w)
        w *= 2
    return ",".join(map(str, [*out, n]))


def shard_hashes(out: str) -> list[str]:
    manifest = json.loads((Path(out) / "prep" / "manifest.json").read_text())
    return [s["sha256"] for split in sorted(manifest["splits"]) for s in manifest["splits"][split]["shards"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(bt.DEFAULT_CORPUS), help="JSONL corpus ({'text': ...} per line); built if missing")
    ap.add_argument("--tokenizer", default=bt.DEFAULT_TOKENIZER, help="GPT-2 tokenizer.json")
    ap.add_argument("--workers", default=default_workers(), help="comma-separated worker counts")
    ap.add_argument("--scale", type=int, default=8, help="repeat the corpus this many times")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per row; the best is reported")
    ap.add_argument("--report", default="", help="report path (default benchmarks/results/tokenize_scaling_<machine>_<yyyymm>.md)")
    ap.add_argument("--tmp", default=None, help="scratch directory (default: system temp)")
    args = ap.parse_args()
    counts = sorted({int(w) for w in args.workers.split(",") if w.strip()})
    if not counts or counts[0] < 1:
        raise SystemExit(f"--workers: positive integers, got {args.workers!r}")
    if not os.path.exists(args.corpus):
        bt.build_corpus(args.corpus)
    if not os.path.exists(args.tokenizer):
        raise SystemExit(f"{args.tokenizer}: no such tokenizer.json")
    from pipeline import fast_bpe
    if not fast_bpe.gigatoken_available():
        raise SystemExit("gigatoken is not installed: the ceiling rows need it (pip install gigatoken)")
    args.tmp = tempfile.mkdtemp(prefix="bench_scaling_", dir=args.tmp)
    try:
        run(args, counts)
    finally:
        shutil.rmtree(args.tmp, ignore_errors=True)


def run(args, counts: list[int]) -> None:
    corpus = bt.scaled_corpus(args.corpus, args.scale, args.tmp) if args.scale > 1 else args.corpus
    texts = bt.load_texts(corpus)
    nbytes = sum(len(t.encode()) for t in texts)
    print(f"corpus: {args.corpus} x{args.scale}: {len(texts)} docs, {nbytes / 1e6:.1f} MB of text, "
          f"{os.path.getsize(corpus) / 1e6:.1f} MB JSONL; {os.cpu_count()} cores", flush=True)
    ref_args = argparse.Namespace(tokenizer=args.tokenizer)
    ref = bt.reference(ref_args, texts[:len(texts) // args.scale]) if args.scale > 1 else bt.reference(ref_args, texts)
    del texts
    results: dict[int, dict[str, dict]] = {}
    hashes: dict[int, list[str]] = {}
    for w in counts:
        targs = argparse.Namespace(corpus=corpus, tokenizer=args.tokenizer, workers=w, tmp=args.tmp)
        shutil.rmtree(bt.timed("prep/auto", targs)["out"], ignore_errors=True)  # fills the proof cache, untimed
        results[w] = {}
        for key, name in ROWS:
            best = None
            for _ in range(args.repeat):
                r = bt.timed(name, targs)
                if key == "prep":
                    hashes.setdefault(w, shard_hashes(r["out"]))
                    if w == counts[0] and best is None:
                        check_stream(r["out"], ref, args.scale)
                shutil.rmtree(r["out"], ignore_errors=True)
                best = bt._merge(best, r)
            results[w][key] = best
            secs = best.get("seconds", best["wall"])
            print(f"  W={w} {key}: {secs:.2f} s, {nbytes / secs / 1e6:.0f} MB/s", flush=True)
    same = len({tuple(h) for h in hashes.values()}) == 1
    if not same:
        raise SystemExit(f"prep output differs between worker counts: {hashes}")
    path = args.report or str(bt.ROOT / "benchmarks" / "results" /
                              f"tokenize_scaling_cpu{os.cpu_count()}_{time.strftime('%Y%m')}.md")
    Path(path).with_suffix(".json").write_text(json.dumps(
        {"corpus_bytes": nbytes, "scale": args.scale, "results": {str(w): r for w, r in results.items()}}, indent=1))
    write_report(path, args, results, nbytes, counts, len(hashes[counts[0]]))
    print(f"report: {path}")


def check_stream(out: str, ref: dict, scale: int) -> None:
    """The W=1 output holds the reference stream (each document's ids then EOS), `scale` times over."""
    import glob

    import numpy as np
    bins = sorted(glob.glob(os.path.join(out, "prep", "train", "*.bin")))
    ids = np.concatenate([np.fromfile(b, dtype=np.uint16) for b in bins])
    one = ids.size // scale
    got = bt.stream_digest([ids[:one]])
    if ids.size != one * scale or tuple(got) != tuple(ref["eos_after"]) or any(
            not np.array_equal(ids[:one], ids[k * one:(k + 1) * one]) for k in range(1, scale)):
        raise SystemExit(f"prep output differs from the reference token stream: {got} vs {ref['eos_after']}")


def write_report(path: str, args, results: dict, nbytes: int, counts: list[int], num_shards: int) -> None:
    def mbs(w, key):
        r = results[w][key]
        return nbytes / r.get("seconds", r["wall"]) / 1e6

    one = counts[0]
    lines = [f"# Tokenization scaling with workers, cpu{os.cpu_count()}, {time.strftime('%Y-%m-%d')}", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores. Corpus: {args.corpus} "
             f"repeated {args.scale} times ({nbytes / 1e6:.0f} MB of text). Tokenizer: {args.tokenizer} (backend "
             f"auto: gigatoken {bt._ver('gigatoken')}). Best of {args.repeat} runs per cell; each is a fresh "
             "subprocess (bench_tokenize.py `timed`).",
             f"prep's output was byte-identical for every worker count ({num_shards} shards, sha256s compared), "
             f"and the W={one} output holds the Hugging Face tokenizers reference ids.", "",
             "Command: `python benchmarks/bench_scaling.py " + " ".join(sys.argv[1:]) + "`", "",
             "| workers | ceiling MB/s | JSONL ceiling MB/s | prep MB/s | prep s | prep / ceiling | prep / JSONL ceiling "
             f"| prep scaling efficiency (vs W={one}) | ceiling scaling efficiency | prep peak RSS MiB |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w in counts:
        p, c, j = mbs(w, "prep"), mbs(w, "ceiling"), mbs(w, "jsonl")
        eff = p / (mbs(one, "prep") * w / one)
        ceff = c / (mbs(one, "ceiling") * w / one)
        lines.append(f"| {w} | {c:.0f} | {j:.0f} | {p:.0f} | {results[w]['prep']['wall']:.2f} | {p / c:.2f} | "
                     f"{p / j:.2f} | {eff:.2f} | {ceff:.2f} | {results[w]['prep']['peak_rss'] / 2**20:.0f} |")
    if max(counts) > (os.cpu_count() or 1):
        lines += ["", f"Rows above {os.cpu_count()} workers oversubscribe the cores."]
    Path(path).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
