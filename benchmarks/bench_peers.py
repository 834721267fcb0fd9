"""The real peers against `prep tokenize`, side by side: datatrove, dolma and litdata as published on PyPI,
each in its own virtual environment, on the same JSONL files, tokenizer and cores.

    python benchmarks/bench_peers.py --setup      # once: the peers' environments (pinned; 1.7 GB, 11 min here)
    python benchmarks/bench_peers.py --repeat 2   # writes benchmarks/results/peers_<machine>_<yyyymm>.md

bench_tokenize.py re-implements the single-script peers (nanoGPT, llm.c, Megatron); these three are
frameworks a user installs, so they run as installed, through their own entry points.

Work: bench_tokenize's corpus (Debian docs, 7,477 documents, 55 MB of text) with an "id" on each line
(dolma reads no document without one), as one file and as 8 files: none of the peers splits a file, so one
file is one task or process in each of them. Tokenizer: the GPT-2 tokenizer.json with its `truncation`
switched off (the hub file's `max_length: 50` would cut every document to 50 tokens in datatrove and
litdata; see "As users find them" in the report). EOS after every document; W workers everywhere.

Rows (each a fresh process tree; wall time from start to finished output; peak RSS summed over the tree):
  prep/auto   `prep tokenize`, backend auto (the fastest engine proven identical: gigatoken)
  prep/hf     `prep tokenize`, backend hf: the peers' engine, Hugging Face tokenizers
  datatrove   LocalPipelineExecutor(tasks=W, workers=W): JsonlReader -> DocumentTokenizer(eos_token,
              shuffle_documents=False); tokenizers' encode_batch over 10,000 documents per call
  dolma       `dolma tokens --processes W --dtype uint16`: one tokenizers encode per document, each text
              stripped; documents shuffled within windows of 10,000
  litdata     optimize(fn, inputs=files, item_loader=TokensLoader(), num_workers=W) with its README's
              tokenize_fn (json.loads and one tokenizers encode per line, an int32 tensor per document)
Correctness first: every output is read back in its own format (prep's shards and .idx, datatrove's .ds and
.ds.index, dolma's .npy and .csv.gz, litdata's chunk headers) and the multiset of its documents' ids must
equal the reference's: tokenizers with truncation off, EOS appended (dolma: each text stripped first).
Order is not compared: dolma shuffles, and with 8 files each tool orders its tasks its own way.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ENVS = ROOT / "benchmarks" / "data" / "peer-envs"  # benchmarks/data/ is git-ignored
# what `--setup` installs; the report names the versions it ran
PEERS = {
    "datatrove": ["datatrove==0.10.1", "orjson", "tokenizers"],  # its tokenizer step needs tokenizers, not a dependency
    "dolma": ["dolma==1.2.1"],
    # litdata wants torchvision, whose newest release pulls a newer CUDA torch (5.6 GB): pin the CPU pair
    "litdata": ["torch==2.13.0", "torchvision==0.28.0", "litdata==0.2.76", "tokenizers"],
}
LAYOUTS = {"1 file": 1, "8 files": 8}
ROWS = ("prep/auto", "prep/hf", "datatrove", "dolma", "litdata")
PITFALL_DOCS = 300  # documents in the small file the "as users find them" runs read


# -- drivers: run by a peer's own python (`--driver NAME SRC OUT TOKENIZER WORKERS`) -----------------
def drive_datatrove(src: str, out: str, tokenizer: str, workers: int) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    LocalPipelineExecutor(
        pipeline=[JsonlReader(src, text_key="text"),
                  DocumentTokenizer(output_folder=out, tokenizer_name_or_path=tokenizer,
                                    eos_token="<|endoftext|>", shuffle_documents=False)],
        tasks=workers, workers=workers, logging_dir=out + "_logs").run()


def _litdata_tokenize(filepath, tokenizer=None, eos=None):
    """litdata README's tokenize_fn (LLM pre-training example), with a tokenizers Tokenizer."""
    import torch
    with open(filepath, encoding="utf-8") as f:
        for row in f:
            ids = tokenizer.encode(json.loads(row)["text"], add_special_tokens=False).ids
            yield torch.tensor(ids + [eos], dtype=torch.int)


def drive_litdata(src: str, out: str, tokenizer: str, workers: int) -> None:
    from functools import partial

    from litdata import TokensLoader, optimize
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    optimize(fn=partial(_litdata_tokenize, tokenizer=tok, eos=tok.token_to_id("<|endoftext|>")),
             inputs=sorted(glob.glob(os.path.join(src, "*.jsonl"))), output_dir=out,
             chunk_size=2049 * 8012, item_loader=TokensLoader(), num_workers=workers)


def peer_python(name: str) -> Path:
    return ENVS / name / "bin" / "python"


def peer_command(name: str, src: str, out: str, tokenizer: str, workers: int) -> list[str]:
    if name == "dolma":
        return [str(peer_python(name).with_name("dolma")), "tokens", "--documents", os.path.join(src, "*.jsonl"),
                "--destination", out, "--tokenizer.name_or_path", tokenizer,
                "--tokenizer.eos_token_id", str(_token_id(tokenizer, "<|endoftext|>")),
                "--tokenizer.pad_token_id", str(_token_id(tokenizer, "<|endoftext|>")),
                "--processes", str(workers), "--dtype", "uint16"]
    return [str(peer_python(name)), __file__, "--driver", name, src, out, tokenizer, str(workers)]


def _token_id(tokenizer: str, content: str) -> int:
    return next(t["id"] for t in json.loads(Path(tokenizer).read_text())["added_tokens"] if t["content"] == content)


# -- outputs read back: lists of per-document id arrays ---------------------------------------------
def docs_prep(out: str) -> list[np.ndarray]:
    from pipeline.manifest import read_idx
    docs = []
    for idx in sorted(glob.glob(os.path.join(out, "*", "*.idx"))):
        _, lengths, pointers = read_idx(idx, mmap=False)
        data = np.fromfile(idx[:-4] + ".bin", dtype=np.uint16)
        starts = pointers // 2
        docs += [data[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())]
    return docs


def docs_datatrove(out: str) -> list[np.ndarray]:
    docs = []
    for ds in sorted(glob.glob(os.path.join(out, "*.ds"))):
        data = np.fromfile(ds, dtype="<u2")
        ends = np.fromfile(ds + ".index", dtype="<u8").astype(np.int64)
        docs += np.split(data, ends[:-1]) if ends.size else []
    return docs


def docs_dolma(out: str) -> list[np.ndarray]:
    docs = []
    for npy in sorted(glob.glob(os.path.join(out, "*.npy"))):
        data = np.memmap(npy, dtype=np.uint16, mode="r")
        with gzip.open(npy[:-4] + ".csv.gz", "rt") as f:
            for row in f:
                start, end = row.split(",", 2)[:2]
                docs.append(np.array(data[int(start):int(end)]))
    return docs


def docs_litdata(out: str) -> list[np.ndarray]:
    """Chunk files: uint32 item count N, uint32 offsets[N + 1] (bytes from the chunk's start), the items
    (here int32 token tensors without a header: litdata's "no_header_tensor")."""
    docs = []
    for chunk in sorted(glob.glob(os.path.join(out, "chunk-*.bin"))):
        raw = np.fromfile(chunk, dtype=np.uint8)
        n = int(raw[:4].view("<u4")[0])
        offsets = raw[4:4 + 4 * (n + 1)].view("<u4").astype(np.int64)
        docs += [raw[a:b].view("<i4") for a, b in zip(offsets[:-1], offsets[1:])]
    return docs


READERS = {"prep": docs_prep, "datatrove": docs_datatrove, "dolma": docs_dolma, "litdata": docs_litdata}


def _digest(ids) -> bytes:
    return hashlib.blake2b(np.asarray(ids, dtype=np.uint32).tobytes(), digest_size=16).digest()


def reference(texts: list[str], tokenizer: str) -> dict[str, collections.Counter]:
    """Per-document digests of the ids each row must hold: tokenizers (truncation off, special-token
    strings as text, as prep encodes them) plus EOS; empty texts hold no document. dolma: texts stripped."""
    import bench_tokenize as bt
    tok = bt.hf_tokenizer(tokenizer)
    eos = tok.token_to_id("<|endoftext|>")
    t0 = time.perf_counter()
    ids = [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]
    plain = collections.Counter(_digest(i + [eos]) for t, i in zip(texts, ids) if t)
    changed = [(k, t.strip()) for k, t in enumerate(texts) if t.strip() != t]
    stripped_ids = dict(zip((k for k, _ in changed),
                            (e.ids for e in tok.encode_batch_fast([s for _, s in changed], add_special_tokens=False))))
    stripped = collections.Counter(_digest(stripped_ids.get(k, i) + [eos])
                                   for k, (t, i) in enumerate(zip(texts, ids)) if t.strip())
    print(f"reference: tokenizers {time.perf_counter() - t0:.1f} s, {len(texts):,} docs "
          f"({len(changed)} change when stripped)", flush=True)
    return {"plain": plain, "stripped": stripped, "tokens": sum(map(len, ids))}


def read_back(name: str, out: str, ref: dict) -> tuple[list[np.ndarray], collections.Counter, collections.Counter]:
    """A row's documents as written, their digests, and the digests the reference wants of that tool."""
    tool = name.split("/")[0]
    docs = READERS[tool](out)
    return docs, collections.Counter(map(_digest, docs)), ref["stripped" if tool == "dolma" else "plain"]


def check(name: str, out: str, ref: dict) -> str:
    docs, got, want = read_back(name, out, ref)
    if got != want:
        missing, extra = sum((want - got).values()), sum((got - want).values())
        raise SystemExit(f"{name}: {len(docs):,} documents read back from {out}; {missing} of the reference's "
                         f"are missing and {extra} are not the reference's")
    return f"same ids, {len(docs):,} docs" + (" (texts stripped)" if name == "dolma" else "")


# -- corpus and runs ------------------------------------------------------------------------------------
def write_layouts(corpus: str, tmp: str) -> tuple[dict[str, str], list[str]]:
    """{layout: directory of .jsonl files}; the texts. Lines gain an "id" (dolma's document format)."""
    texts = [json.loads(line)["text"] for line in Path(corpus).read_bytes().splitlines() if line.strip()]
    lines = [json.dumps({"id": f"doc-{i}", "text": t}, ensure_ascii=False).encode() + b"\n" for i, t in enumerate(texts)]
    dirs = {}
    for layout, k in LAYOUTS.items():
        d = os.path.join(tmp, f"in_{k}")
        os.makedirs(d)
        for j in range(k):
            with open(os.path.join(d, f"part{j}.jsonl"), "wb") as f:
                f.writelines(lines[j * len(lines) // k:(j + 1) * len(lines) // k])
        dirs[layout] = d
    return dirs, texts


def run(name: str, src: str, tokenizer: str, workers: int, tmp: str) -> dict:
    """One timed run in a fresh process tree: wall seconds, peak RSS over the tree, its output dir."""
    from bench_many_files import tree_peak_rss
    out = tempfile.mkdtemp(prefix=name.replace("/", "_") + "_", dir=tmp)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    if name.startswith("prep/"):
        import bench_tokenize as bt
        cmd = bt.prep_command(os.path.join(src, "*.jsonl"), tokenizer, workers, out, name.split("/")[1])
        env.update(PYTHONPATH=str(ROOT), PREP_CACHE_DIR=os.path.join(tmp, "prep-cache"))
    else:
        cmd = peer_command(name, src, os.path.join(out, "out"), tokenizer, workers)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=out)
    peak = tree_peak_rss(proc)
    log, _ = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}): {' '.join(cmd)}\n{log[-3000:]}")
    return {"wall": wall, "peak_rss": peak[0], "out": os.path.join(out, "prep" if name.startswith("prep/") else "out"),
            "dir": out}


QUOTE = "\n\nGPT-2 ends each document with <|endoftext|>.\n"  # appended to every 3rd pitfall text


def pitfalls(corpus_texts: list[str], hub_tokenizer: str, tokenizer: str, workers: int, tmp: str) -> list[str]:
    """Each tool as a user first meets it, on the first PITFALL_DOCS documents: the hub's tokenizer.json
    as is (truncation on), lines without an "id", and texts that quote the EOS token's string. Untimed;
    what came out, and how many documents hold exactly the reference's ids."""
    texts = [t for t in corpus_texts[:PITFALL_DOCS] if t]
    quoting = [t + QUOTE if k % 3 == 0 else t for k, t in enumerate(texts)]
    cases = []
    for what, docs, ids, tok in (("the hub's tokenizer.json as is", texts, True, hub_tokenizer),
                                 ('lines without an "id"', texts, False, tokenizer),
                                 ("every 3rd text quotes the EOS string", quoting, True, tokenizer)):
        d = tempfile.mkdtemp(prefix="pitfall_", dir=tmp)
        with open(os.path.join(d, "docs.jsonl"), "w") as f:
            for i, t in enumerate(docs):
                f.write(json.dumps({"id": f"doc-{i}", "text": t} if ids else {"text": t}) + "\n")
        cases.append((what, d, tok, reference(docs, tokenizer)))
    lines = []
    for tool in ("prep/auto", "datatrove", "dolma", "litdata"):
        for what, src, tok_path, ref in cases:
            try:
                r = run(tool, src, tok_path, workers, tmp)
                docs, got, want = read_back(tool, r["out"], ref)
                shutil.rmtree(r["dir"], ignore_errors=True)
                same = sum((got & want).values())
                cell = f"{len(docs):,} documents, {sum(map(len, docs)):,} tokens | {same:,} of {sum(want.values()):,}"
            except SystemExit as e:
                cell = "failed: " + str(e).splitlines()[-1][:200] + " | -"
            lines.append(f"| {tool} | {what} | {cell} |")
    return lines


def setup(envs: Path) -> None:
    for name, reqs in PEERS.items():
        venv = envs / name
        if not peer_python(name).exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(peer_python(name)), "-m", "pip", "install", "-q"]
        if name == "litdata":  # the CPU torch first, or a bare requirement pulls a CUDA build of GBs
            subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, *reqs], check=True)
        print(f"{name}: {venv}", flush=True)


def _version(name: str) -> str:
    out = subprocess.run([str(peer_python(name)), "-c", f"from importlib.metadata import version; print(version('{name}'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(ROOT))
    import bench_tokenize as bt
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", action="store_true", help="build the peers' virtual environments and stop")
    ap.add_argument("--corpus", default=str(bt.DEFAULT_CORPUS))
    ap.add_argument("--tokenizer", default=bt.DEFAULT_TOKENIZER, help="GPT-2 tokenizer.json (the hub's file)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per row, round-robin; the best is reported")
    ap.add_argument("--only", default="", help="comma-separated rows (default: all)")
    ap.add_argument("--no-pitfalls", action="store_true", help="skip the untimed 'as users find them' runs")
    ap.add_argument("--report", default="")
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()
    if args.setup:
        return setup(ENVS)
    missing = [p for p in PEERS if not peer_python(p).exists()]
    if missing:
        raise SystemExit(f"no environment for {', '.join(missing)}: run `python {__file__} --setup` first")
    if not os.path.exists(args.corpus):
        bt.build_corpus(args.corpus)
    tmp = tempfile.mkdtemp(prefix="bench_peers_", dir=args.tmp)
    tokenizer = os.path.join(tmp, "tokenizer.json")  # the hub file, truncation off
    spec = json.loads(Path(args.tokenizer).read_text())
    Path(tokenizer).write_text(json.dumps({**spec, "truncation": None, "padding": None}))
    dirs, texts = write_layouts(args.corpus, tmp)
    nbytes = sum(len(t.encode()) for t in texts)
    ref = reference(texts, tokenizer)
    rows = [r for r in ROWS if not args.only or r in args.only.split(",")]
    for name in (r for r in rows if r.startswith("prep/")):  # untimed: fills prep's proof cache, as in bench_tokenize
        shutil.rmtree(run(name, dirs["1 file"], tokenizer, args.workers, tmp)["dir"], ignore_errors=True)
    results: dict[tuple[str, str], dict] = {}
    for _ in range(args.repeat):  # round-robin: this VM's speed drifts within minutes
        for layout, src in dirs.items():
            for name in rows:
                r = run(name, src, tokenizer, args.workers, tmp)
                r["check"] = check(name, r["out"], ref)
                shutil.rmtree(r["dir"], ignore_errors=True)
                print(f"  {layout} {name}: {r['wall']:.2f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB", flush=True)
                results[(layout, name)] = bt._merge(results.get((layout, name)), r)  # best time, highest RSS
    traps = [] if args.no_pitfalls else pitfalls(texts, args.tokenizer, tokenizer, args.workers, tmp)
    path = args.report or str(ROOT / "benchmarks" / "results" / f"peers_{bt.machine_label(args.workers)}_{time.strftime('%Y%m')}.md")
    write_report(args, results, ref, nbytes, len(texts), traps, path)
    print(f"report: {path}")
    shutil.rmtree(tmp, ignore_errors=True)


ENGINES = {"prep/auto": "gigatoken (proven identical)", "prep/hf": "tokenizers", "datatrove": "tokenizers",
           "dolma": "tokenizers", "litdata": "tokenizers"}


def write_report(args, results: dict, ref: dict, nbytes: int, ndocs: int, traps: list[str], path: str) -> None:
    import tokenizers
    versions = {p: _version(p) for p in PEERS}
    lines = [f"# prep against the installed peers, cpu{os.cpu_count()}, {time.strftime('%Y-%m-%d')}", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores; {args.workers} workers everywhere. "
             f"datatrove {versions['datatrove']}, dolma {versions['dolma']}, litdata {versions['litdata']} "
             f"(each in its own environment, `python benchmarks/bench_peers.py --setup`); prep with tokenizers "
             f"{tokenizers.__version__}.",
             f"Corpus: {ndocs:,} documents, {nbytes / 1e6:.1f} MB of text (bench_tokenize's Debian docs, an \"id\" "
             f"added to each line), {ref['tokens'] / 1e6:.2f} M GPT-2 tokens; as one JSONL file and as 8. Tokenizer: "
             "the GPT-2 tokenizer.json with truncation off; EOS after each document.",
             "Correctness first: each output, read back in its own format, holds exactly the reference's documents "
             "(tokenizers ids + EOS; order not compared). Best wall time of the runs (round-robin), peak RSS the "
             "highest seen, summed over the process tree. See the module docstring for how each peer is called.", "",
             "| input | pipeline | engine | seconds | MB/s | peak RSS (MiB) | prep/auto faster by | prep/hf (same engine) "
             "faster by | runs | output |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for layout in LAYOUTS:
        auto, hf = results.get((layout, "prep/auto")), results.get((layout, "prep/hf"))
        for name in ROWS:
            r = results.get((layout, name))
            if r is None:
                continue
            ratios = [f"{r['wall'] / base['wall']:.1f}x" if base and not name.startswith("prep/") else "-"
                      for base in (auto, hf)]
            if name == "prep/hf" and auto:
                ratios[0] = f"{r['wall'] / auto['wall']:.1f}x"
            lines.append(f"| {layout} | {name} | {ENGINES[name]} | {r['wall']:.2f} | {nbytes / r['wall'] / 1e6:.1f} | "
                         f"{r['peak_rss'] / 2**20:.0f} | {' | '.join(ratios)} | {r['runs']} | {r['check']} |")
    lines += ["", "Where the peers' time and memory go (their code, as installed): none of them cuts a file, so a file "
              "is one task; datatrove hands 10,000 documents at a time to tokenizers' encode_batch, which runs on "
              "every core by itself but keeps every document's Encoding (ids, offsets, masks, token strings) until "
              "the batch is written: here the whole corpus at once, hence its peak; dolma sets "
              "TOKENIZERS_PARALLELISM=false and encodes one document per call, and litdata's tokenize_fn encodes "
              "one per call too, so on one file each runs on one core. prep cuts the file into units for all "
              "workers and, with `backend: hf`, batches documents on the same engine."]
    if traps:
        lines += ["", f"## As users find them ({PITFALL_DOCS} documents, untimed)", "",
                  "The same tools on the first documents: with the hub's GPT-2 tokenizer.json as it is "
                  "(`truncation: {max_length: 50}`), on lines that have no \"id\", and with every third text quoting "
                  "the EOS token's string (a text about GPT-2). What came out, and how many documents hold exactly "
                  "the reference's ids (tokenizers, truncation off, EOS after each document; a quoted "
                  "\"<|endoftext|>\" read as text, as prep, tiktoken's encode_ordinary, nanoGPT and llm.c read it, "
                  "where the others put the EOS id, a document boundary, inside the document). Every run exited 0.", "",
                  "| pipeline | input | output | documents as the reference |", "|---|---|---|---:|", *traps]
    lines += ["", f"Re-run: `python benchmarks/bench_peers.py --setup` once, then `python benchmarks/bench_peers.py "
              f"--workers {args.workers} --repeat {args.repeat}`", ""]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--driver":
        {"datatrove": drive_datatrove, "litdata": drive_litdata}[sys.argv[2]](*sys.argv[3:6], int(sys.argv[6]))
    else:
        main()
