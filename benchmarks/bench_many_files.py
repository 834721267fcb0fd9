"""Many small files and whole-file JSON layouts against the same documents in one JSONL file.

    python benchmarks/bench_many_files.py                    # writes benchmarks/results/many_files_cpu<N>_<yyyymm>.md
    python benchmarks/bench_many_files.py --jsonl-files 18000 --text-files 100000 --workers 2 --repeat 3

Corpus: the first documents of `--corpus` (default benchmarks/data/docs.paragraphs.jsonl, the
paragraphs of bench_tokenize's corpus; the demo corpus when that is missing). Layouts, each paired
with the same documents as one JSONL file:

  jsonl-files   --jsonl-files files of ~3.2 KB of JSON Lines each, as a glob (grouped into units by
                readers.group_small_files)
  text-dir      --text-files files of one document each, as a directory (`format: text`)
  json-dir      --text-files .json files of one record each, as a directory (scraped corpora often
                store a document so)
  array         one file that is a JSON array of the records, indented (`json.dump(records, f, indent=2)`)
  jq            one file of pretty-printed objects one after another (`jq . data.jsonl`)
  records-field one file that is one object, the records under "data" (`source.records_field`)

An array, jq's layout and the records-field object are cut between their records
(pipeline/readers/json_cuts.py), so both workers share each.

Correctness first: val_fraction 0, so every layout's shards must be byte-identical to its one-file
pair's (the documents in the same order); the benchmark stops otherwise. Then each pair runs
interleaved as fresh `prep tokenize` processes, best of --repeat; the ratio is the one-file time
over the layout's (1.0: no cost for the layout). Peak RSS: the largest sum over the run's process tree
(parent, forkserver, workers), sampled every 50 ms, of the timed runs.
"""

from __future__ import annotations

import argparse
import hashlib
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
PARAGRAPHS = ROOT / "benchmarks" / "data" / "docs.paragraphs.jsonl"
DEMO = ROOT / "recipes" / "demo" / "corpus.jsonl"
GPT2 = Path("/work/shared/assets/gpt2/tokenizer.json")
DEMO_TOKENIZER = ROOT / "recipes" / "demo" / "tokenizer.json"
FILE_BYTES = 3200  # a small JSONL file: ~16 paragraphs


def load_texts(corpus: Path, n: int) -> list[str]:
    texts = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            if text.strip():
                texts.append(text)
                if len(texts) == n:
                    break
    return texts


def jsonl_lines(texts: list[str]) -> list[bytes]:
    return [json.dumps({"text": t}, ensure_ascii=False).encode() + b"\n" for t in texts]


def build(d: Path, texts_for_jsonl: list[str], texts_for_text: list[str], texts_for_json: list[str]) -> dict:
    """{layout: (source dict, one-file source dict, documents, bytes on disk)}."""
    layouts = {}
    # jsonl-files: consecutive lines, cut into files of ~FILE_BYTES
    many, lines = d / "jsonl_files", jsonl_lines(texts_for_jsonl)
    many.mkdir()
    part, size, k = [], 0, 0
    for line in lines:
        part.append(line)
        size += len(line)
        if size >= FILE_BYTES:
            (many / f"f{k:06d}.jsonl").write_bytes(b"".join(part))
            part, size, k = [], 0, k + 1
    if part:
        (many / f"f{k:06d}.jsonl").write_bytes(b"".join(part))
    (d / "jsonl_files.one.jsonl").write_bytes(b"".join(lines))
    layouts["jsonl-files"] = ({"path": str(many / "*.jsonl")}, {"path": str(d / "jsonl_files.one.jsonl")},
                              len(texts_for_jsonl), sum(map(len, lines)), k + (1 if part else 0))
    # text-dir: one document per file, names in document order
    tdir = d / "text_dir"
    tdir.mkdir()
    for i, t in enumerate(texts_for_text):
        (tdir / f"{i // 1000:04d}_{i:07d}.txt").write_text(t, encoding="utf-8")
    (d / "text_dir.one.jsonl").write_bytes(b"".join(jsonl_lines(texts_for_text)))
    layouts["text-dir"] = ({"path": str(tdir), "format": "text"}, {"path": str(d / "text_dir.one.jsonl")},
                           len(texts_for_text), sum(len(t.encode()) for t in texts_for_text), len(texts_for_text))
    # json-dir: one record per .json file, the same documents as text-dir
    jdir = d / "json_dir"
    jdir.mkdir()
    for i, line in enumerate(jsonl_lines(texts_for_text)):
        (jdir / f"{i // 1000:04d}_{i:07d}.json").write_bytes(line)
    layouts["json-dir"] = ({"path": str(jdir)}, {"path": str(d / "text_dir.one.jsonl")}, len(texts_for_text),
                           sum(f.stat().st_size for f in jdir.iterdir()), len(texts_for_text))
    # jq and records-field: one whole-file JSON each
    records = [{"text": t} for t in texts_for_json]
    one = d / "json.one.jsonl"
    one.write_bytes(b"".join(jsonl_lines(texts_for_json)))
    array = d / "array.json"
    array.write_text(json.dumps(records, indent=2, ensure_ascii=False), encoding="utf-8")
    layouts["array"] = ({"path": str(array)}, {"path": str(one)}, len(records), array.stat().st_size, 1)
    jq = d / "jq.json"
    jq.write_text("".join(json.dumps(r, indent=2, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    layouts["jq"] = ({"path": str(jq)}, {"path": str(one)}, len(records), jq.stat().st_size, 1)
    obj = d / "object.json"
    obj.write_text(json.dumps({"version": 1, "data": records}, indent=1, ensure_ascii=False), encoding="utf-8")
    layouts["records-field"] = ({"path": str(obj), "records_field": "data"}, {"path": str(one)}, len(records),
                                obj.stat().st_size, 1)
    return layouts


def run_prep(source: dict, tokenizer: str, workers: int, out: Path, env: dict) -> tuple[float, str, int]:
    """(wall seconds, sha256 of the shards, peak RSS of the process tree in bytes)."""
    recipe = out.with_suffix(".yaml")
    recipe.write_text(json.dumps({"name": "bench", "source": source, "tokenizer": {"path": tokenizer},
                                  "output": {"dir": str(out), "val_fraction": 0.0}, "num_workers": workers}))
    exe = shutil.which("prep")
    cmd = [exe] if exe else [sys.executable, "-m", "pipeline.cli"]
    t0 = time.perf_counter()
    proc = subprocess.Popen([*cmd, "tokenize", "--recipe", str(recipe), "--no-progress", "--overwrite"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = tree_peak_rss(proc)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"prep failed on {source}:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    digest = hashlib.sha256()
    for f in sorted(out.rglob("*")):
        if f.suffix in (".bin", ".idx"):
            digest.update(f.relative_to(out).as_posix().encode() + f.read_bytes())
    return wall, digest.hexdigest(), peak[0]


def tree_peak_rss(proc: subprocess.Popen) -> list[int]:
    """[peak bytes], filled by a thread sampling the RSS of `proc` and its descendants every 50 ms."""
    import threading

    import psutil
    peak = [0]

    def sample() -> None:
        try:
            root = psutil.Process(proc.pid)
        except psutil.Error:
            return
        while proc.poll() is None:
            total = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            peak[0] = max(peak[0], total)
            time.sleep(0.05)
    threading.Thread(target=sample, daemon=True).start()
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(PARAGRAPHS if PARAGRAPHS.exists() else DEMO))
    ap.add_argument("--tokenizer", default=str(GPT2 if GPT2.exists() else DEMO_TOKENIZER))
    ap.add_argument("--jsonl-files", type=int, default=18000, help="small JSONL files (~3.2 KB each)")
    ap.add_argument("--text-files", type=int, default=100000, help="one-document text files")
    ap.add_argument("--json-docs", type=int, default=100000, help="documents in the jq and records-field files")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--report", default="")
    args = ap.parse_args()
    need = max(args.jsonl_files * 40, args.text_files, args.json_docs)
    texts = load_texts(Path(args.corpus), need)
    jsonl_texts, n = [], 0
    for t in texts:  # enough paragraphs for --jsonl-files files of ~FILE_BYTES
        jsonl_texts.append(t)
        n += len(t.encode()) + 12
        if n >= args.jsonl_files * FILE_BYTES:
            break
    tmp = Path(tempfile.mkdtemp(prefix="bench_many_"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "PREP_CACHE_DIR": str(tmp / "prep-cache")}
    try:
        t0 = time.perf_counter()
        layouts = build(tmp, jsonl_texts, texts[:args.text_files], texts[:args.json_docs])
        print(f"built in {time.perf_counter() - t0:.0f} s under {tmp}", flush=True)
        rows = []
        for name, (source, one_file, docs, nbytes, files) in layouts.items():
            walls = {"layout": [], "one": []}
            rss = {"layout": 0, "one": 0}
            digests = {}
            for r in range(args.repeat + 1):  # round 0 untimed: fills the proof and page caches
                for which in (("layout", "one") if r % 2 else ("one", "layout")):
                    wall, digest, peak = run_prep(source if which == "layout" else one_file, args.tokenizer,
                                                  args.workers, tmp / f"out_{name}_{which}", env)
                    digests[which] = digest
                    if r:
                        walls[which].append(wall)
                        rss[which] = max(rss[which], peak)
            if digests["layout"] != digests["one"]:
                raise SystemExit(f"{name}: the shards differ from the one-file run's")
            best = {k: min(v) for k, v in walls.items()}
            rows.append((name, files, docs, nbytes, best["layout"], best["one"], rss["layout"], rss["one"]))
            print(f"{name}: {best['layout']:.2f} s vs one file {best['one']:.2f} s (same shards); peak RSS "
                  f"{rss['layout'] >> 20} vs {rss['one'] >> 20} MiB", flush=True)
        machine = f"cpu{os.cpu_count()}"
        lines = [f"# Many small files and whole-file JSON, {machine}, {time.strftime('%Y-%m-%d')}", "",
                 f"`python benchmarks/bench_many_files.py --jsonl-files {args.jsonl_files} --text-files "
                 f"{args.text_files} --json-docs {args.json_docs} --workers {args.workers} --repeat {args.repeat}`", "",
                 f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; corpus "
                 f"`{Path(args.corpus).name}`, tokenizer `{args.tokenizer}`, {args.workers} workers. Each layout's "
                 "shards are byte-identical to those of the same documents in one JSONL file (val_fraction 0); "
                 f"times are the best of {args.repeat} fresh `prep tokenize` runs, interleaved with the one-file runs.",
                 "", "| layout | files | documents | MB on disk | s | one JSONL file, s | one file / layout "
                 "| peak RSS, MiB | one JSONL file, MiB |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {n} | {f:,} | {d:,} | {b / 1e6:.1f} | {s:.2f} | {o:.2f} | {o / s:.2f} | {ra >> 20} | {ro >> 20} |"
                  for n, f, d, b, s, o, ra, ro in rows]
        report = args.report or str(ROOT / "benchmarks" / "results" / f"many_files_{machine}_{time.strftime('%Y%m')}.md")
        old = Path(report).read_text() if Path(report).exists() else ""
        notes = old[old.index("\n## Notes"):] if "\n## Notes" in old else ""  # kept across re-runs
        Path(report).write_text("\n".join(lines) + "\n" + notes)
        print("\n".join(lines))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
