"""Two checkouts of prep side by side on the same inputs: did a range of commits slow a hot path?

    python benchmarks/bench_regression.py --base /tmp/base --head . --rounds 4
    python benchmarks/bench_regression.py --base /tmp/base --head /tmp/head --fixed . --only parquet,hf --rounds 6
    python benchmarks/bench_regression.py --base /tmp/base --head . --cpu --only bz2,xz,loader-ws2,inspect

Each case runs as a fresh process with one checkout on PYTHONPATH (`--child`), times its work --inner
times in that process and prints the best; the driver alternates the checkouts (A B, then B A, ...) for
--rounds rounds (with --fixed, a third: A B C, then C B A, ...) and reports each side's median of those bests and their spread (max - min of the
rounds, the noise: other jobs share the machine). --cpu times CPU seconds instead of wall (the
process's and its subprocesses'): at a load average of 3 on 2 cores, wall medians of unchanged code
moved by 5-10% between runs, CPU medians by less (benchmarks/results/regression_check_cpu2_202611.md). Inputs are built once, with --head's code, into
--data (reused when present); the EXTRA cases' inputs when one of them is asked for (--only). Cases:

  parquet / parquet-template   plan + read every unit of a ~50 MB Parquet file (text column; the
                               second through text_template, rows as dicts), no tokenizer
  hf                           the same documents as a save_to_disk dataset (4 Arrow files)
  text-lines                   a text file read one document per line (format text, per line)
  csv / json-array / jsonl     the same documents as CSV, an indented JSON array, JSON Lines
  plan-flat / plan-nested      plan of a directory source of 100,000 small files, in one directory /
                               in 1,000 directories of 100 (readers._without_datasets stats directories)
  help                         `prep --help` (pipeline.launch.console) as a subprocess (start-up, imports)
  tokenize                     `prep tokenize -j 2` of the JSON Lines file, end to end (GPT-2, ~50 MB)
  tokenize-cpu                 the same run's CPU seconds (user + system, every process of the run)
  tokenize-tiny                `prep tokenize -j 1` of 10 documents (start-up, plan, finalize)
  encode                       Encoder.encode_batch of the documents in 512-document batches (GPT-2)
  loader                       MemmapLoader construction + 300 packed batches, 0 workers
EXTRA (only with --only):
  bz2 / xz                     plan ~30 MB of JSON Lines compressed (.jsonl.bz2, .jsonl.xz) and decompress it as
                               the spooler does (open_input, read1 of 1 MiB: the parent's work; the workers'
                               reads of the windows are those of a plain file)
  bz2-real / xz-real           the same of 30 MB of benchmarks/data/docs.jsonl (real text: 4-5x, not 20-85x)
  json-objects                 pretty-printed objects one after another in a .json (jq's output: the fast path)
  parquet-dotted               Parquet with the text in a struct column, text_field meta.text
  loader-ws1 / loader-ws2      MemmapLoader construction alone (warm cache): world_size 1; 2 with rank=0
  inspect / verify             `prep inspect` / `prep verify` of the demo corpus's dataset (subprocess)
  help-tokenize                `prep tokenize --help` (subprocess)
  m-help / m-tokenize-tiny     `python -m pipeline.cli tokenize --help`; the 10-document run that way
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "recipes" / "demo" / "corpus.jsonl"
GPT2 = Path("/work/shared/assets/gpt2/tokenizer.json")
REAL_TEXT = (ROOT / "benchmarks/data/docs.jsonl", Path("/work/main/benchmarks/data/docs.jsonl"))  # 55 MB, untracked
CASES = ("parquet", "parquet-template", "hf", "text-lines", "csv", "json-array", "jsonl", "plan-flat", "plan-nested",
         "help", "tokenize", "tokenize-cpu", "tokenize-tiny", "encode", "loader")
EXTRA = ("bz2", "xz", "bz2-real", "xz-real", "json-objects", "parquet-dotted", "loader-ws1", "loader-ws2", "inspect", "verify",
         "help-tokenize", "m-help", "m-tokenize-tiny")


def texts(n: int) -> list[str]:
    with open(DEMO, encoding="utf-8") as f:
        base = [t for t in (json.loads(line)["text"] for line in f) if t]
    return [f"{base[i % len(base)]} [{i}]" for i in range(n)]


def build(data: Path, n: int) -> None:
    """The inputs, once (a marker file says they are complete)."""
    if (data / "done").exists():
        return
    import csv

    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    data.mkdir(parents=True, exist_ok=True)
    docs = texts(n)
    pq.write_table(pa.table({"id": list(range(n)), "text": docs}), data / "c.parquet", row_group_size=2048,
                   compression="zstd")
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict({"id": list(range(n)), "text": docs}).save_to_disk(str(data / "saved"), num_shards=4)
    (data / "lines.txt").write_text("".join(t.replace("\n", " ").replace("\r", " ") + "\n" for t in docs),
                                    encoding="utf-8")
    with open(data / "c.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "text"])
        w.writerows(enumerate(docs))
    records = [{"id": i, "text": t} for i, t in enumerate(docs)]
    (data / "array.json").write_text(json.dumps(records, indent=2, ensure_ascii=False), encoding="utf-8")
    (data / "c.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    for name, dirs in (("flat", 1), ("nested", 1000)):
        for i in range(100_000):
            d = data / name / f"d{i % dirs:04d}"
            if i < dirs:
                d.mkdir(parents=True)
            (d / f"f{i:06d}.txt").write_bytes(b"a document\n")
    tok = str(GPT2 if GPT2.exists() else ROOT / "recipes/demo/tokenizer.json")
    out = data / "ds"
    recipe = {"name": "r", "source": {"path": str(data / "c.jsonl")}, "tokenizer": {"path": tok},
              "output": {"dir": str(out), "val_fraction": 0.0}, "num_workers": 1}
    (data / "recipe.json").write_text(json.dumps(recipe))
    (data / "tiny.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[:10]), encoding="utf-8")
    (data / "tiny.json").write_text(json.dumps({**recipe, "source": {"path": str(data / "tiny.jsonl")}}))
    subprocess.run([sys.executable, "-m", "pipeline.cli", "tokenize", "-r", str(data / "recipe.json"),
                    "--no-progress"], check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   stdout=subprocess.DEVNULL)
    (data / "done").write_text("")


def build_extra(data: Path) -> None:
    """The inputs of the EXTRA cases, once, from the base inputs (their own marker file)."""
    if (data / "done_extra").exists():
        return
    import bz2
    import lzma

    import pyarrow as pa
    import pyarrow.parquet as pq
    lines = (data / "c.jsonl").read_bytes().splitlines(keepends=True)
    part = b"".join(lines[:len(lines) * 3 // 5])  # ~30 MB
    (data / "c.jsonl.bz2").write_bytes(bz2.compress(part, 9))  # the demo corpus repeats: 20x (bz2), 85x (xz)
    (data / "c.jsonl.xz").write_bytes(lzma.compress(part, preset=6))
    real = next((p for p in REAL_TEXT if p.exists()), None)  # real text compresses as real corpora: 4-5x
    if real is not None:
        part = real.read_bytes()[:30 << 20]
        part = part[:part.rfind(b"\n") + 1]
        (data / "real.jsonl.bz2").write_bytes(bz2.compress(part, 9))
        (data / "real.jsonl.xz").write_bytes(lzma.compress(part, preset=6))
    records = [json.loads(line) for line in lines]
    (data / "objects.json").write_text("".join(json.dumps(r, indent=2, ensure_ascii=False) + "\n" for r in records),
                                       encoding="utf-8")
    pq.write_table(pa.table({"id": [r["id"] for r in records],
                             "meta": [{"lang": "en", "text": r["text"]} for r in records]}),
                   data / "dotted.parquet", row_group_size=2048, compression="zstd")
    demo = data / "demo"
    recipe = {"name": "demo", "source": {"path": str(DEMO)}, "tokenizer": {"path": str(ROOT / "recipes/demo/tokenizer.json")},
              "output": {"dir": str(demo)}, "num_workers": 1}
    (data / "demo.json").write_text(json.dumps(recipe))
    subprocess.run([sys.executable, "-m", "pipeline.cli", "tokenize", "-r", str(data / "demo.json"), "--no-progress"],
                   check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    (data / "done_extra").write_text("")


def source_of(case: str, data: Path) -> dict:
    return {
        "parquet": {"path": str(data / "c.parquet")},
        "parquet-template": {"path": str(data / "c.parquet"), "text_template": "{text} {id}"},
        "hf": {"path": str(data / "saved"), "format": "hf"},
        "text-lines": {"path": str(data / "lines.txt"), "format": "text", "doc_separator": "\n"},
        "csv": {"path": str(data / "c.csv")},
        "json-array": {"path": str(data / "array.json")},
        "jsonl": {"path": str(data / "c.jsonl")},
        "plan-flat": {"path": str(data / "flat"), "format": "text"},
        "plan-nested": {"path": str(data / "nested"), "format": "text"},
        "bz2": {"path": str(data / "c.jsonl.bz2")},
        "xz": {"path": str(data / "c.jsonl.xz")},
        "bz2-real": {"path": str(data / "real.jsonl.bz2")},
        "xz-real": {"path": str(data / "real.jsonl.xz")},
        "json-objects": {"path": str(data / "objects.json")},
        "parquet-dotted": {"path": str(data / "dotted.parquet"), "text_field": "meta.text"},
    }[case]


def subprocess_best(argv: list[str], inner: int) -> float:
    """Best wall seconds of `inner` runs of a command (its output discarded)."""
    best = float("inf")
    for _ in range(inner):
        t0 = clock()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        best = min(best, clock() - t0)
    return best


def wall_clock() -> float:
    return time.perf_counter()


def cpu_clock() -> float:
    """CPU seconds (user + system) of this process and of its children waited for (a subprocess case's
    command): with --cpu, steadier than wall time while other jobs share the cores."""
    import resource
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


clock = wall_clock


def child(case: str, data: Path, inner: int) -> float:
    """Best seconds of `inner` runs of `case`, in this process (the checkout on sys.path)."""
    best = float("inf")
    console = "import sys; sys.argv = ['prep'] + sys.argv[1:]; from pipeline.launch import console; console()"
    if case in ("inspect", "verify"):
        return subprocess_best([sys.executable, "-c", console, case, str(data / "demo")], inner)
    if case == "help-tokenize":
        return subprocess_best([sys.executable, "-c", console, "tokenize", "--help"], inner)
    if case == "m-help":
        return subprocess_best([sys.executable, "-m", "pipeline.cli", "tokenize", "--help"], inner)
    if case == "m-tokenize-tiny":
        return subprocess_best([sys.executable, "-m", "pipeline.cli", "tokenize", "-r", str(data / "tiny.json"), "-o",
                                str(data / "tok_out"), "-j", "1", "--overwrite", "--no-progress"], inner)
    if case.startswith("loader-"):
        from loaders import MemmapLoader
        ranks = {"rank": 0, "world_size": 2} if case == "loader-ws2" else {"world_size": 1}
        with tempfile.TemporaryDirectory(prefix="bench_regression_cache_") as cache:
            def build():
                return MemmapLoader(str(data / "ds"), mode="packed", batch_size=8, seq_len=1024, cache_dir=cache,
                                    **ranks)
            build().close()  # the derived arrays into the cache: construction reads them from here on
            for _ in range(inner):
                t0 = clock()
                for _ in range(20):  # ~ms each: 20 per timing
                    build().close()
                best = min(best, (clock() - t0) / 20)
        return best
    if case == "help":
        for _ in range(inner):
            t0 = clock()
            subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['prep', '--help']; "
                            "from pipeline.launch import console; console()"], check=True, stdout=subprocess.DEVNULL)
            best = min(best, clock() - t0)
        return best
    if case.startswith("tokenize"):
        import resource
        recipe, workers = ("tiny.json", "1") if case == "tokenize-tiny" else ("recipe.json", "2")
        for _ in range(inner):
            t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['prep'] + sys.argv[1:]; "
                            "from pipeline.launch import console; console()", "tokenize", "-r", str(data / recipe),
                            "-o", str(data / "tok_out"), "-j", workers, "--overwrite", "--no-progress"],
                           check=True, stdout=subprocess.DEVNULL)
            cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            # -cpu: user + system seconds of the whole process tree (forkserver and workers are reaped
            # into it), steadier than wall time while other jobs share the cores
            best = min(best, cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime if case == "tokenize-cpu"
                       else time.perf_counter() - t0)
        return best
    if case == "encode":
        from pipeline.recipe import TokenizerConfig
        from pipeline.tokenizers import load_tokenizer
        docs = [json.loads(line)["text"] for line in open(data / "c.jsonl", encoding="utf-8")][:40_000]
        enc = load_tokenizer(TokenizerConfig(path=str(GPT2))).build_encoder()
        enc.encode_batch(docs[:512])
        for _ in range(inner):
            t0 = clock()
            for a in range(0, len(docs), 512):
                enc.encode_batch(docs[a:a + 512])
            best = min(best, clock() - t0)
        return best
    if case == "loader":
        from loaders import MemmapLoader
        with tempfile.TemporaryDirectory(prefix="bench_regression_cache_") as cache:  # one per process: removed
            for _ in range(inner):
                t0 = clock()
                loader = MemmapLoader(str(data / "ds"), mode="packed", batch_size=8, seq_len=1024, cache_dir=cache)
                it = iter(loader)
                for _ in range(300):
                    next(it)
                loader.close()
                best = min(best, clock() - t0)
        return best
    if case.startswith(("bz2", "xz")):
        from pipeline.readers import plan_units
        from pipeline.readers.base import open_input
        from pipeline.recipe import Recipe
        recipe = Recipe.from_dict({"name": "r", "source": source_of(case, data), "tokenizer": {"path": str(GPT2)},
                                   "output": {"dir": str(data / "unused")}, "num_workers": 2, "unit_bytes": 4 << 20})
        for _ in range(inner):
            t0 = clock()
            plan_units(recipe)
            stream, raw = open_input(recipe.sources[0].paths()[0])
            with raw, stream:
                while stream.read1(1 << 20):  # spool.SPOOL_BLOCK
                    pass
            best = min(best, clock() - t0)
        return best
    from pipeline.readers import BadRecords, get_reader, plan_units
    from pipeline.recipe import Recipe
    recipe = Recipe.from_dict({"name": "r", "source": source_of(case, data), "tokenizer": {"path": str(GPT2)},
                               "output": {"dir": str(data / "unused")}, "num_workers": 2, "unit_bytes": 4 << 20})
    for _ in range(inner):
        t0 = clock()
        units = plan_units(recipe)
        if not case.startswith("plan"):
            for u in units:
                bad = BadRecords(u, "error")
                for _batch in get_reader(u.format).iter_batches(u, recipe.sources[u.source], bad, 512):
                    pass
        best = min(best, clock() - t0)
    return best


def run_side(code: Path, case: str, data: Path, inner: int, cpu: bool = False) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", case, "--data", str(data), "--inner", str(inner)]
                         + ["--cpu"] * cpu,
                         check=True, capture_output=True, text=True, cwd=code,
                         env={**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1"})
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path)
    ap.add_argument("--head", type=Path, default=ROOT)
    ap.add_argument("--fixed", type=Path, default=None, help="a third checkout (optional)")
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "bench_regression_data")
    ap.add_argument("--docs", type=int, default=80_000, help="documents (~620 bytes each: ~50 MB)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--inner", type=int, default=3, help="runs per process; its best counts")
    ap.add_argument("--only", default="", help="comma-separated cases (default: all but the EXTRA ones)")
    ap.add_argument("--cpu", action="store_true", help="time CPU seconds (the process's and its subprocesses'), "
                    "not wall: on a shared, busy machine (the tokenize case stays wall, tokenize-cpu is CPU)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        global clock
        clock = cpu_clock if args.cpu else wall_clock
        sys.path.insert(0, os.getcwd())
        print(child(args.child, args.data, args.inner))
        return
    build(args.data, args.docs)
    cases = args.only.split(",") if args.only else CASES
    if set(cases) & set(EXTRA):
        build_extra(args.data)
    sides = {"base": args.base.resolve(), "head": args.head.resolve()}
    if args.fixed is not None:
        sides["fixed"] = args.fixed.resolve()
    names = list(sides)
    print(f"| case | {' | '.join(f'{n} median s' for n in names)} | "
          f"{' | '.join(f'{n}/base' for n in names[1:])} | spread s | runs ({' / '.join(names)}) |", flush=True)
    for case in cases:
        got = {n: [] for n in names}
        for r in range(args.rounds):
            for side in (names if r % 2 == 0 else names[::-1]):
                got[side].append(run_side(sides[side], case, args.data, args.inner, args.cpu))
        med = {n: statistics.median(v) for n, v in got.items()}
        spread, base = max(max(v) - min(v) for v in got.values()), med["base"]
        print(f"| {case} | {' | '.join(_s(med[n]) for n in names)} | "
              f"{' | '.join(f'{med[n] / base:.2f}' for n in names[1:])} | {_s(spread)} | "
              f"{' / '.join(' '.join(_s(x) for x in got[n]) for n in names)} |", flush=True)


def _s(seconds: float) -> str:
    """Seconds to 3 decimals; under 0.01 s (a loader's construction, ~0.3 ms) as milliseconds."""
    return f"{seconds:.3f}" if seconds >= 0.01 or seconds == 0 else f"{seconds * 1e3:.3f}ms"


if __name__ == "__main__":
    main()
