"""Peak RSS of `prep tokenize` on real text 8x larger, not the same text repeated.

    python benchmarks/bench_rss_real.py                  # builds the corpus if missing, writes the report
    python benchmarks/bench_rss_real.py --repeat 3 --workers 2

bench_tokenize.py checks the issue's memory target (peak RSS at 1x and 8x the corpus within 10%) on
its corpus repeated 8 times, where gigatoken's pre-token cache stops growing after the first copy,
and on ROT-k copies, whose words are all new (the pessimistic end). This script measures the case
between them: a real corpus of ~480 MB whose documents are all distinct, from 25 Debian
documentation packages (prose, API references, code samples), against a 1-in-8 sample of the same
documents (~60 MB). Sample and whole have the same mix, so the difference is what 8x more distinct
real text adds.

Corpus: bench_tokenize's docs.jsonl plus every English HTML page (or reST source) of the packages in
WIDE_SOURCES, one JSON line per file or ~32 KB section, shuffled with a fixed seed; x8 is all of it,
x1 every 8th line. Built once into benchmarks/data/ (needs the apt line printed when it is missing).

Each run is bench_tokenize's `timed` (a fresh `prep tokenize` subprocess, warm proof cache, peak RSS
summed over its process tree every 50 ms), x1 and x8 alternating. Writes
benchmarks/results/rss_real_text_<machine>_<yyyymm>.md (and .json beside it).
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_tokenize as bt  # noqa: E402

DATA = bt.ROOT / "benchmarks" / "data"
# (label, glob) of English documentation installed by Debian 12 packages: ~280 MB of extracted text
# with bench_tokenize's docs.jsonl (pandas' API pages 82 MB, openjdk's javadoc 73, rust's 57)
WIDE_SOURCES = (
    ("django", "/usr/share/doc/python-django-doc/html/**/*.html"),
    ("scipy", "/usr/share/doc/python-scipy-doc/html/**/*.html"),
    ("sympy", "/usr/share/doc/python-sympy-doc/html/_sources/**/*.txt"),
    ("debian-handbook", "/usr/share/doc/debian-handbook/html/en-US/*.html"),
    ("gimp", "/usr/share/gimp/2.0/help/en/**/*.html"),
    ("gnucash", "/usr/share/doc/gnucash-docs/gnucash-*-en/*.html"),
    ("octave", "/usr/share/doc/octave/**/*.html"),
    ("ghc", "/usr/share/doc/ghc-doc/html/**/*.html"),
    ("openjdk", "/usr/share/doc/openjdk-17-jre-headless/api/**/*.html"),
    ("rust", "/usr/share/doc/rust-doc/html/**/*.html"),
    ("erlang", "/usr/share/doc/erlang-doc/**/*.html"),
    ("cppreference", "/usr/share/cppreference/doc/html/en/**/*.html"),
    ("astropy", "/usr/share/doc/python-astropy-doc/html/**/*.html"),
    ("lilypond", "/usr/share/doc/lilypond/html/Documentation/**/*.html"),
    ("sklearn", "/usr/share/doc/python-sklearn-doc/html/**/*.html"),
    ("statsmodels", "/usr/share/doc/python-statsmodels-doc/html/**/*.html"),
    ("pandas", "/usr/share/doc/python-pandas-doc/html/**/*.html"),
    ("sqlalchemy", "/usr/share/doc/python-sqlalchemy-doc/html/**/*.html"),
    ("nodejs", "/usr/share/doc/nodejs/api/*.html"),
    ("skimage", "/usr/share/doc/python-skimage-doc/html/**/*.html"),
)
WIDE_APT = ("python-django-doc python-scipy-doc python-sympy-doc debian-handbook gimp-help-en gnucash-docs "
            "openjdk-17-doc rust-doc ghc-doc octave-doc erlang-doc cppreference-doc-en-html python-astropy-doc "
            "lilypond-doc-html python-sklearn-doc python-statsmodels-doc python-pandas-doc python-sqlalchemy-doc "
            "nodejs-doc python-skimage-doc")
SCALE = 8


def _file_lines(job: tuple[str, str]) -> bytes:
    label, path = job
    try:
        text = bt._read_text(path)
    except (OSError, UnicodeError, EOFError):  # a dangling link or a damaged .gz: skip the file
        return b""
    return b"".join(orjson.dumps({"text": s, "source": label}) + b"\n" for s in bt._sections(text) if s.strip())


def build_wide(base: str, out_x8: Path, out_x1: Path) -> dict[str, int]:
    """docs.jsonl + WIDE_SOURCES, shuffled (seed 0): all of it to out_x8, every 8th line to out_x1.
    Writes nothing when the packages give less than SCALE - 2 times docs.jsonl (not installed)."""
    jobs, seen = [], set()
    for label, pattern in WIDE_SOURCES:
        for path in sorted(glob.glob(pattern, recursive=True)):
            real = os.path.realpath(path)
            # sphinx's _modules and haddock's src are syntax-highlighted copies of source files
            if real in seen or "/_modules/" in path or "/src/" in path:
                continue
            seen.add(real)
            jobs.append((label, path))
    lines = Path(base).read_bytes().splitlines(keepends=True)
    sizes = {"docs.jsonl": sum(map(len, lines))}
    with mp.Pool(os.cpu_count()) as pool:  # html.parser: ~8.5 min of CPU for the 73 K files (~5 min on 2 cores)
        for (label, _), got in zip(jobs, pool.imap(_file_lines, jobs, 32), strict=True):
            lines += got.splitlines(keepends=True)
            sizes[label] = sizes.get(label, 0) + len(got)
    if sum(sizes.values()) < (SCALE - 2) * sizes["docs.jsonl"]:
        return sizes
    random.Random(0).shuffle(lines)
    for path, part in ((out_x8, lines), (out_x1, lines[::SCALE])):
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(part))
        os.replace(tmp, path)
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=bt.DEFAULT_TOKENIZER, help="GPT-2 tokenizer.json")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each size, alternating")
    ap.add_argument("--report", default="", help="report path (default benchmarks/results/rss_real_text_<machine>_<yyyymm>.md)")
    ap.add_argument("--tmp", default=None, help="scratch directory (default: system temp)")
    args = ap.parse_args()
    x8, x1 = DATA / "wide_x8.jsonl", DATA / "wide_x1.jsonl"
    if not (x8.exists() and x1.exists()):
        if not os.path.exists(bt.DEFAULT_CORPUS):
            bt.build_corpus(str(bt.DEFAULT_CORPUS))
        sizes = build_wide(str(bt.DEFAULT_CORPUS), x8, x1)
        if not x8.exists():
            raise SystemExit(f"too little text found ({sum(sizes.values()) / 1e6:.0f} MB); "
                             f"apt-get install -y {bt.APT_PACKAGES} {WIDE_APT}")
        print("built", x8, {k: f"{v / 1e6:.0f} MB" for k, v in sizes.items()})
    if not os.path.exists(args.tokenizer):
        raise SystemExit(f"{args.tokenizer}: no such tokenizer.json")
    args.tmp = tempfile.mkdtemp(prefix="bench_rss_real_", dir=args.tmp)
    args.corpus = str(x1)
    shutil.rmtree(bt.timed("prep/auto", args)["out"], ignore_errors=True)  # untimed: fills the proof cache
    runs: dict[str, list[tuple[float, int]]] = {"x1": [], f"x{SCALE}": []}
    for _ in range(args.repeat):
        for label, corpus in (("x1", x1), (f"x{SCALE}", x8)):
            r = bt.timed("prep/auto", args, corpus=str(corpus))
            shutil.rmtree(r["out"], ignore_errors=True)
            runs[label].append((r["wall"], r["peak_rss"]))
            print(f"  {label}: {r['wall']:.2f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB", flush=True)
    shutil.rmtree(args.tmp, ignore_errors=True)
    path = Path(args.report or bt.ROOT / "benchmarks" / "results" /
                f"rss_real_text_{bt.machine_label(args.workers)}_{time.strftime('%Y%m')}.md")
    sizes = {label: os.path.getsize(c) for label, c in (("x1", x1), (f"x{SCALE}", x8))}
    path.with_suffix(".json").write_text(json.dumps({"bytes": sizes, "runs": runs}, indent=1))
    path.write_text(report(args, runs, sizes))
    print(f"report: {path}")


def report(args, runs: dict, sizes: dict) -> str:
    big = f"x{SCALE}"
    peak = {k: max(r for _, r in v) for k, v in runs.items()}
    best = {k: min(t for t, _ in v) for k, v in runs.items()}
    growth = peak[big] / peak["x1"] - 1
    rows = [f"| {k} | {sizes[k] / 1e6:.1f} | {best[k]:.2f} | {sizes[k] / 1e6 / best[k]:.1f} | "
            f"{', '.join(f'{r / 2**20:.0f}' for _, r in v)} | {peak[k] / 2**20:.0f} |" for k, v in runs.items()]
    return "\n".join([
        f"# Peak RSS on real text {SCALE}x larger, {bt.machine_label(args.workers)}, {time.strftime('%Y-%m-%d')}", "",
        f"`prep tokenize`, backend auto (gigatoken), GPT-2 tokenizer, {args.workers} workers, warm proof cache. "
        f"{big}: bench_tokenize's docs.jsonl and 20 more Debian documentation packages, all documents distinct, "
        f"shuffled; x1: every {SCALE}th document of it (same mix). See benchmarks/bench_rss_real.py.", "",
        "| corpus | MB (JSONL) | best s | MB/s | peak RSS per run (MiB, all processes) | highest |",
        "|---|---:|---:|---:|---|---:|", *rows, "",
        f"Peak RSS {big} vs x1: {growth:+.1%} (target < 10%: {'met' if growth < 0.10 else 'MISSED'}).", "",
        f"Re-run: `python benchmarks/bench_rss_real.py --workers {args.workers} --repeat {args.repeat}`", ""])


if __name__ == "__main__":
    main()
