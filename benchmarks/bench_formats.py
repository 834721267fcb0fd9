"""Input formats side by side: the same documents as JSONL, .gz, .zst, CSV, TSV, Parquet, text files and
Hugging Face datasets; correctness first, then reader and end-to-end throughput.

    python benchmarks/bench_formats.py                       # prints the report (markdown) only
    python benchmarks/bench_formats.py --docs 20000 --workers 2 --repeat 2 --tokenizer PATH/tokenizer.json
    python benchmarks/bench_formats.py --docs 400000 --workers 2 --repeat 2 \
        --report benchmarks/results/formats_cpu2_202611.md   # how the committed report was made

Corpus: `--docs` documents built from the demo corpus (recipes/demo/corpus.jsonl, prose with newlines,
tabs, commas and non-Latin scripts) plus a few with quotes, CRLF and surrounding spaces; document i is
demo document i mod 2000 with its number appended, so no two are equal. Every format holds exactly
these texts, in this order, with an extra `id` column/key that must not be read.

Order, per format:
  1. correctness: `prep tokenize` at val_fraction 0 into one shard; its .bin and .idx must be
     byte-identical to the JSONL run's (stops the benchmark otherwise)
  2. reader: plan + iter_batches over every unit in this process, no tokenizer (what the format
     costs on its own): documents/s and input MB/s (bytes on disk)
  3. end to end: `prep tokenize` as a fresh subprocess with --workers processes (CLI start to manifest
     written, best of --repeat), documents/s; the tokenizer dominates this column
Units: how many work units the format's plan cuts (unit_bytes 4 MiB): what lets big files use every worker.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEMO = ROOT / "recipes" / "demo" / "corpus.jsonl"
GPT2 = Path("/work/shared/assets/gpt2/tokenizer.json")
UNIT_BYTES = 4 << 20
SPECIAL = ['He said "hi", then left.', '"quoted start', "tab\there\r\nand crlf", "  spaces  ", 'x "y""z"']


def make_texts(n: int) -> list[str]:
    with open(DEMO, encoding="utf-8") as f:
        base = [t for t in (json.loads(line)["text"] for line in f) if t]
    texts = [f"{base[i % len(base)]} [{i}]" for i in range(n)]
    for k, s in enumerate(SPECIAL):
        texts[(k * 7919) % n] = s + f" [{k}]"
    return texts


def write_formats(d: Path, texts: list[str]) -> dict[str, tuple[dict, list[Path]]]:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    d.mkdir(parents=True, exist_ok=True)
    datasets.disable_progress_bars()
    jsonl = "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts)).encode()
    (d / "c.jsonl").write_bytes(jsonl)
    (d / "c.jsonl.gz").write_bytes(gzip.compress(jsonl, 6))
    (d / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(jsonl))
    records = [{"id": i, "text": t} for i, t in enumerate(texts)]
    (d / "array.json").write_text(json.dumps(records, indent=2, ensure_ascii=False), encoding="utf-8")
    (d / "jq.json").write_text("".join(json.dumps(r, indent=2, ensure_ascii=False) + "\n" for r in records),
                               encoding="utf-8")
    (d / "array.json.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress((d / "array.json").read_bytes()))
    (d / "object.json").write_text(json.dumps({"version": "1.0", "data": records}, indent=2, ensure_ascii=False),
                                   encoding="utf-8")
    for name, delim in (("c.csv", ","), ("c.tsv", "\t")):
        with open(d / name, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, delimiter=delim)
            w.writerow(["id", "text"])
            w.writerows(enumerate(texts))
    (d / "c.csv.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress((d / "c.csv").read_bytes()))
    pieces = "\x1e".join(texts).encode()  # no text holds the record separator
    (d / "c.txt").write_bytes(pieces)
    (d / "c.txt.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(pieces))
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), d / "c.parquet", row_group_size=2048,
                   compression="zstd")
    (d / "txt").mkdir(exist_ok=True)
    for i, t in enumerate(texts):
        (d / "txt" / f"doc{i:06d}.txt").write_bytes(t.encode())
    ds = datasets.Dataset.from_dict({"id": list(range(len(texts))), "text": texts})
    ds.save_to_disk(str(d / "saved"), num_shards=4)
    shards = []
    for k in range(4):  # the HF json builder streams these, one shard per file
        part = d / f"part{k}.jsonl"
        lines = jsonl.splitlines(keepends=True)
        step = -(-len(lines) // 4)
        part.write_bytes(b"".join(lines[k * step:(k + 1) * step]))
        shards.append(part)
    return {
        "jsonl": ({"path": str(d / "c.jsonl")}, [d / "c.jsonl"]),
        "jsonl.gz": ({"path": str(d / "c.jsonl.gz")}, [d / "c.jsonl.gz"]),
        "jsonl.zst": ({"path": str(d / "c.jsonl.zst")}, [d / "c.jsonl.zst"]),
        "json array (indent 2)": ({"path": str(d / "array.json")}, [d / "array.json"]),
        "json objects, jq layout": ({"path": str(d / "jq.json")}, [d / "jq.json"]),
        "json array, .zst": ({"path": str(d / "array.json.zst")}, [d / "array.json.zst"]),
        "json object, records_field": ({"path": str(d / "object.json"), "records_field": "data"}, [d / "object.json"]),
        "csv": ({"path": str(d / "c.csv")}, [d / "c.csv"]),
        "csv.zst": ({"path": str(d / "c.csv.zst")}, [d / "c.csv.zst"]),
        "tsv": ({"path": str(d / "c.tsv")}, [d / "c.tsv"]),
        "parquet": ({"path": str(d / "c.parquet")}, [d / "c.parquet"]),
        "text, \\x1e-separated": ({"path": str(d / "c.txt"), "format": "text", "doc_separator": "\x1e"}, [d / "c.txt"]),
        "text, \\x1e-separated, .zst": ({"path": str(d / "c.txt.zst"), "format": "text", "doc_separator": "\x1e"},
                                       [d / "c.txt.zst"]),
        "text (file per doc)": ({"path": str(d / "txt" / "*.txt"), "format": "text"}, sorted((d / "txt").iterdir())),
        "hf save_to_disk": ({"path": str(d / "saved"), "format": "hf"}, sorted((d / "saved").glob("*.arrow"))),
        "hf json, streaming": ({"path": "json", "format": "hf", "data_files": [str(p) for p in shards],
                                "streaming": True}, shards),
    }


def recipe_dict(source: dict, out: Path, tokenizer: str, workers: int) -> dict:
    return {"name": "bench", "source": source, "tokenizer": {"path": tokenizer},
            "output": {"dir": str(out), "shard_tokens": 10**12, "val_fraction": 0.0},
            "num_workers": workers, "unit_bytes": UNIT_BYTES}


def reader_pass(recipe) -> tuple[float, int, int]:
    """(seconds, documents, units): every unit read in this process, nothing encoded."""
    from dataclasses import replace

    from pipeline.readers import BadRecords, get_reader, plan_units
    from pipeline.spool import Spooler
    t0 = time.perf_counter()
    units = plan_units(recipe)
    spooler = None
    if any(u.is_spooled for u in units):  # ranges of a compressed file: windows from a spooling thread
        spooler = Spooler.for_recipe(recipe, units, {u.index for u in units},
                                     Path(tempfile.mkdtemp(prefix="bench_spool_")), workers=1)
        units = [replace(u, spool=spooler.window(u)) if u.is_spooled else u for u in units]
    docs = 0
    try:
        for u in units:
            bad = BadRecords(u, "error")
            for batch in get_reader(u.format).iter_batches(u, recipe.sources[u.source], bad, 512):
                docs += len(batch.texts)
            if spooler is not None:
                spooler.done(u.index)
    finally:
        if spooler is not None:
            spooler.close()
    return time.perf_counter() - t0, docs, len(units)


def run_cli(recipe_path: Path, workers: int) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeline.cli", "tokenize", "--recipe", str(recipe_path), "--overwrite",
                    "--no-progress", "--num-workers", str(workers)], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - t0


def shard_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "train").iterdir())}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=40_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tokenizer", default=str(GPT2 if GPT2.exists() else ROOT / "recipes/demo/tokenizer.json"))
    ap.add_argument("--keep", action="store_true", help="keep the generated data in benchmarks/data/formats")
    ap.add_argument("--report", default="", help="also write the report there (without it, nothing is written: "
                    "a run no longer replaces the committed benchmarks/results/formats_*.md)")
    args = ap.parse_args(argv)

    import yaml

    from pipeline.recipe import Recipe

    work = Path(tempfile.mkdtemp(prefix="bench_formats_"))
    data = ROOT / "benchmarks" / "data" / "formats" if args.keep else work / "data"
    texts = make_texts(args.docs)
    formats = write_formats(data, texts)
    rows, ref = [], None
    for name, (source, files) in formats.items():
        out = work / "out" / name.replace(" ", "_").replace(",", "")
        raw = recipe_dict(source, out, args.tokenizer, args.workers)
        rpath = work / f"{out.name}.yaml"
        rpath.write_text(yaml.safe_dump(raw))
        recipe = Recipe.from_dict(raw)
        # 1. correctness
        seconds = min(run_cli(rpath, args.workers) for _ in range(args.repeat))
        got = shard_files(out)
        if ref is None:
            ref = got
        if got != ref:
            sys.exit(f"{name}: shards differ from the JSONL run; not timing a wrong reader")
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["splits"]["train"]["num_docs"] == len(texts), name
        # 2. reader alone
        r_sec, r_docs, n_units = min(reader_pass(recipe) for _ in range(args.repeat))
        assert r_docs == len(texts), (name, r_docs)
        size = sum(p.stat().st_size for p in files)
        rows.append((name, size, n_units, r_docs / r_sec, size / r_sec / 1e6, len(texts) / seconds, seconds))
        print(f"{name:22s} {size / 1e6:7.1f} MB {n_units:4d} units  reader {r_docs / r_sec:10,.0f} docs/s "
              f"{size / r_sec / 1e6:7.1f} MB/s  end-to-end {len(texts) / seconds:8,.0f} docs/s ({seconds:.1f} s)")
    write_report(rows, args, texts)
    shutil.rmtree(work, ignore_errors=True)


def write_report(rows, args, texts) -> None:
    """Print the report; write it to --report where one is given."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    chars = sum(map(len, texts))
    lines = [
        f"# Input formats: the same {len(texts):,} documents ({chars / 1e6:.1f} M characters) in every format",
        "",
        f"`python benchmarks/bench_formats.py --docs {args.docs} --workers {args.workers} --repeat {args.repeat}`, "
        f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, {cpus} CPU cores, "
        f"Python {platform.python_version()}, tokenizer `{args.tokenizer}`; load average at the end {load} "
        "(other jobs shared the machine: the end-to-end column is the noisier one).",
        "",
        "Correctness first: every format's `prep tokenize` output (val_fraction 0, one shard) is byte-identical",
        "to the JSONL run's `.bin` and `.idx`. *reader*: plan + read every unit in one process, no tokenizer "
        "(docs/s and MB/s of bytes on disk). *end to end*: `prep tokenize` as a fresh process with "
        f"{args.workers} workers, CLI start to manifest written (best of {args.repeat}); the tokenizer dominates it.",
        "",
        "| format | bytes on disk | work units | reader docs/s | reader MB/s | end-to-end docs/s | end-to-end s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, size, units, rdps, rmbs, edps, secs in rows:
        lines.append(f"| {name} | {size / 1e6:.1f} MB | {units} | {rdps:,.0f} | {rmbs:.1f} | {edps:,.0f} | {secs:.2f} |")
    lines += [
        "",
        "Notes:",
        f"- work units at unit_bytes {UNIT_BYTES >> 20} MiB: plain JSONL/CSV/TSV/separated text are cut into byte "
        "ranges (CSV only at newlines proven outside quotes by one parent scan; a JSON array, jq's objects or "
        "a records_field list between records, found by one parent scan of strings and brackets, of the "
        "decompressed stream for a .zst); .gz/.zst into ranges of their "
        "decompressed bytes, which a parent thread decompresses once into per-unit windows (pipeline/spool.py; "
        "for CSV it moves each range to a proven record start); Parquet by row groups; text files grouped; a "
        "saved HF dataset by row ranges; a streamed HF dataset by its own shards (one per data file).",
        "- the reader column reads a compressed file's windows while one spooling thread writes them (as a "
        "run does), so it counts decompression once.",
        "- the end-to-end column includes process start and a pool start (forkserver, tokenizer load per "
        "worker); a saved HF dataset is planned and read with pyarrow alone (no `import datasets`), a "
        "streamed one needs `datasets` in the parent (resolving it, seconds) and in the forkserver.",
        "- text (file per doc) opens one file per document; its reader column is open()/read() bound.",
        "",
    ]
    print("\n".join(lines))
    if args.report:
        Path(args.report).write_text("\n".join(lines))
        print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
