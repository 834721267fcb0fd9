"""Tokenization throughput: prep vs the raw engine ceiling vs the peers' pipelines, same corpus, same cores.

    python benchmarks/bench_tokenize.py                       # builds the corpus if missing, writes the report
    python benchmarks/bench_tokenize.py --repeat 2 --workers 2 --scale 8 --tokenizer PATH/tokenizer.json

Corpus: real English technical text (Python, Linux kernel, Perl, git and PostgreSQL documentation
installed by Debian packages), one JSON line per file or per ~32 KB section; built on first use into
benchmarks/data/ (apt-get install -y python3.11-doc linux-doc-6.1 perl-doc git-doc postgresql-doc-15).

Order: correctness first (every fast engine must give the reference `tokenizers` ids on every
document; each pipeline's output must hold exactly the reference token stream), then timings. Each
timed run is a fresh subprocess; its peak RSS is the sum over its whole process tree (psutil, every
50 ms). `--repeat N` keeps the best time of N runs, taken round-robin over the rows (the VM drifts). Rows:
  ceiling/*  the engine alone on in-memory texts, all cores (one forked process per core, each
             encoding its contiguous 1/W of the bytes; start barrier; no I/O, no parsing, no writing)
  prep/*     `prep tokenize` end to end (CLI start -> manifest written), backend auto / tiktoken / hf
  nanogpt    data/openwebtext/prepare.py: datasets.load_dataset + train_test_split + map(num_proc)
             with tiktoken encode_ordinary, then a np.memmap write in 1024 slices
  llmc       dev/data/fineweb.py: mp.Pool(W).imap(tokenize, docs, chunksize=16), tiktoken, one
             writer filling a uint16 buffer, 256-int32 header shards
  megatron   tools/preprocess_data.py: Pool(W).imap(encode, file lines, 32) with json.loads and a
             Hugging Face tokenizer per worker, one writer (np.array(ids).tobytes() per doc) + .idx
  megatron-fast  tools/preprocess_data_fast.py (Megatron's gigatoken path): gigatoken reads, parses
             and encodes the whole file on its own thread pool (W threads), the documents held in
             memory as one awkward array; EOD appended, one .bin write per 1 M documents, then the .idx
The peers use tiktoken's "gpt2" encoding, which is downloaded on first use; here they use the
tiktoken encoding prep builds from the same GPT-2 tokenizer.json (the same BPE, ids proven equal).
"""

from __future__ import annotations

import argparse
import functools
import glob
import gzip
import hashlib
import html.parser
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_CORPUS = ROOT / "benchmarks" / "data" / "docs.jsonl"
DEFAULT_TOKENIZER = "/work/shared/assets/gpt2/tokenizer.json"
MAX_DOC_CHARS = 32_000  # longer files are cut at blank lines into sections of about this size

# (label, glob) of English technical prose installed by Debian packages; see --help for the apt line
DOC_SOURCES = (
    ("python", "/usr/share/doc/python3*/html/_sources/**/*.rst.txt"),
    ("linux", "/usr/share/doc/linux-doc-*/Documentation/**/*.rst.gz"),
    ("linux", "/usr/share/doc/linux-doc-*/Documentation/**/*.txt.gz"),
    ("perl", "/usr/share/perl/5*/pod/*.pod"),
    ("git", "/usr/share/doc/git-doc/*.txt"),
    ("postgresql", "/usr/share/doc/postgresql-doc-*/html/*.html"),
)
APT_PACKAGES = "python3.11-doc linux-doc-6.1 perl-doc git-doc postgresql-doc-15"


class _HTMLText(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in ("p", "div", "br", "li", "h1", "h2", "h3", "h4", "pre", "tr", "dt", "dd"):
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag in ("p", "div", "h1", "h2", "h3", "h4", "pre", "table", "dl", "ul", "ol"):
            self.parts.append("\n\n")

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def _read_text(path: str) -> str:
    raw = gzip.open(path).read() if path.endswith(".gz") else Path(path).read_bytes()
    text = raw.decode("utf-8", "replace")
    if path.endswith(".html"):
        p = _HTMLText()
        p.feed(text)
        text = "".join(p.parts)
        text = "\n\n".join(" ".join(para.split()) if not para.startswith(" ") else para
                           for para in text.split("\n\n") if para.strip())
    return text


def _sections(text: str) -> list[str]:
    """Whole text, or blank-line-aligned sections of about MAX_DOC_CHARS."""
    if len(text) <= MAX_DOC_CHARS:
        return [text]
    out, cur, n = [], [], 0
    for para in text.split("\n\n"):
        if n + len(para) > MAX_DOC_CHARS and cur:
            out.append("\n\n".join(cur))
            cur, n = [], 0
        cur.append(para)
        n += len(para) + 2
    if cur:
        out.append("\n\n".join(cur))
    return out


def build_corpus(path: str) -> dict:
    """Write a JSONL corpus of real English technical text, one document per file or section."""
    counts: dict[str, int] = {}
    tmp = f"{path}.tmp"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    seen: set[str] = set()  # real paths: python3.11-doc is reachable through 4 symlinked folders
    with open(tmp, "wb") as f:
        for label, pattern in DOC_SOURCES:
            for file in sorted(glob.glob(pattern, recursive=True)):
                real = os.path.realpath(file)
                if real in seen or "/translations/" in file:  # English only
                    continue
                seen.add(real)
                text = _read_text(file)
                for sec in _sections(text):
                    if sec.strip():
                        f.write(orjson.dumps({"text": sec, "source": label}) + b"\n")
                        counts[label] = counts.get(label, 0) + 1
    os.replace(tmp, path)
    return counts



# -- helpers ---------------------------------------------------------------------------------------
def iter_texts(corpus: str):
    with open(corpus, "rb") as f:
        for line in f:
            yield orjson.loads(line)["text"]


def load_texts(corpus: str) -> list[str]:
    return list(iter_texts(corpus))


def paragraph_corpus(corpus: str) -> str:
    """A short-document corpus from `corpus`: each paragraph (blank-line separated, stripped, at least
    20 characters) as its own document, beside it as <name>.paragraphs.jsonl. From docs.jsonl: 324 K
    documents of ~165 characters, where per-document costs show (docs.jsonl's average is ~7.7 KB)."""
    path = str(Path(corpus).with_suffix("")) + ".paragraphs.jsonl"
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(corpus):
        tmp = path + ".tmp"
        with open(tmp, "wb") as out:
            with open(corpus, "rb") as src:
                for line in src:
                    doc = orjson.loads(line)
                    for para in doc["text"].split("\n\n"):
                        para = para.strip()
                        if len(para) >= 20:
                            out.write(orjson.dumps({"text": para, "source": doc.get("source", "")}) + b"\n")
        os.replace(tmp, path)
    return path


def gpt2_tiktoken(tokenizer: str):
    """The tiktoken Encoding prep builds from a byte-level tokenizer.json (same BPE as tiktoken's gpt2)."""
    import tiktoken

    from pipeline import fast_bpe
    bpe, why = fast_bpe.analyze(Path(tokenizer).read_text())
    if bpe is None:
        raise SystemExit(f"{tokenizer}: not convertible to tiktoken ({why})")
    return tiktoken.Encoding("gpt2-from-json", pat_str=bpe.pat_str, mergeable_ranks=bpe.mergeable_ranks,
                             special_tokens=bpe.special_tokens)


def hf_tokenizer(tokenizer: str):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    tok.no_truncation()
    tok.no_padding()
    tok.encode_special_tokens = True  # prep's policy: special-token strings in documents are text
    return tok


def eot_id(tokenizer: str) -> int:
    return hf_tokenizer(tokenizer).token_to_id("<|endoftext|>")


def stream_digest(arrays) -> tuple[int, int, str]:
    """(tokens, sum of ids, sha256 of the uint16 stream) over arrays in order."""
    h, n, total = hashlib.sha256(), 0, 0
    for a in arrays:
        a = np.asarray(a, dtype=np.uint16)
        h.update(a.tobytes())
        n += a.size
        total += int(a.sum(dtype=np.uint64))
    return n, total, h.hexdigest()


# -- timed runs (each in its own subprocess: `--run NAME`) ----------------------------------------
def _engine(engine: str, tokenizer: str):
    """texts -> number of tokens, for one process (no threads)."""
    if engine == "tiktoken":  # encode_ordinary -> Python lists, as the peers call it
        enc = gpt2_tiktoken(tokenizer)
        return lambda texts: sum(len(enc.encode_ordinary(t)) for t in texts)
    if engine == "tiktoken-numpy":  # the call prep makes: uint32 buffers, no Python int per token
        from pipeline.fast_bpe import tiktoken_array_encoder
        encode = tiktoken_array_encoder(gpt2_tiktoken(tokenizer))
        return lambda texts: sum(len(encode(t)) for t in texts)
    if engine == "gigatoken":  # the call prep makes (per document, uint32 arrays)
        from pipeline.fast_bpe import build_gigatoken
        encode = build_gigatoken(Path(tokenizer).read_text())
        return lambda texts: sum(len(encode(t)) for t in texts)
    if engine == "hf":  # batch API, one thread per process
        tok = hf_tokenizer(tokenizer)
        return lambda texts: sum(len(e.ids) for e in tok.encode_batch_fast(texts, add_special_tokens=False))
    raise SystemExit(f"unknown engine {engine}")


def _jsonl_engine(engine: str, tokenizer: str):
    """lines -> number of tokens: orjson.loads per JSONL line, then the engine (a JSONL pipeline's
    irreducible work: no file reads, no writes)."""
    import orjson
    encode = _engine(engine, tokenizer)
    return lambda lines: encode([orjson.loads(line)["text"] for line in lines])


def _ceiling_child(engine, tokenizer, texts, barrier, queue) -> None:
    encode = _jsonl_engine(engine[:-len("+json")], tokenizer) if engine.endswith("+json") else _engine(engine, tokenizer)
    encode(texts[:2])  # warm up lazily built state (regex, thread locals), not the caches
    barrier.wait()
    t0 = time.perf_counter()
    n = encode(texts)
    queue.put((t0, time.perf_counter(), n))


def run_ceiling(engine: str, corpus: str, tokenizer: str, workers: int) -> dict:
    """The engine alone on in-memory texts, one process per core, each with a contiguous 1/W of the
    bytes already in its memory (forked); time from the common start to the last one done."""
    import multiprocessing as mp
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    texts = load_texts(corpus)
    sizes = np.cumsum([len(t.encode()) for t in texts])
    if engine.endswith("+json"):  # the same documents as raw JSONL lines, parsed inside the timing
        texts = [line for line in Path(corpus).read_bytes().split(b"\n") if line.strip()]
    cuts = [0, *np.searchsorted(sizes, sizes[-1] * np.arange(1, workers) / workers).tolist(), len(texts)]
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_ceiling_child, args=(engine, tokenizer, texts[a:b], barrier, queue))
             for a, b in zip(cuts, cuts[1:])]
    for p in procs:
        p.start()
    res = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return {"seconds": max(r[1] for r in res) - min(r[0] for r in res), "bytes": int(sizes[-1]),
            "tokens": sum(r[2] for r in res), "per_worker_s": [round(r[1] - r[0], 3) for r in res]}


def run_nanogpt(corpus: str, tokenizer: str, workers: int, out: str) -> dict:
    """nanoGPT data/openwebtext/prepare.py, with a local JSONL instead of the hub dataset."""
    from datasets import disable_progress_bars, load_dataset
    disable_progress_bars()
    enc = gpt2_tiktoken(tokenizer)
    eot = enc._special_tokens["<|endoftext|>"]
    dataset = load_dataset("json", data_files=corpus, cache_dir=os.path.join(out, "hf_cache"), num_proc=workers)
    split_dataset = dataset["train"].train_test_split(test_size=0.0005, seed=2357, shuffle=True)
    split_dataset["val"] = split_dataset.pop("test")

    def process(example):
        ids = enc.encode_ordinary(example["text"])
        ids.append(eot)
        return {"ids": ids, "len": len(ids)}
    tokenized = split_dataset.map(process, remove_columns=["text", "source"], desc="tokenizing", num_proc=workers)
    for split, dset in tokenized.items():
        arr_len = np.sum(dset["len"], dtype=np.uint64)
        arr = np.memmap(os.path.join(out, f"{split}.bin"), dtype=np.uint16, mode="w+", shape=(arr_len,))
        total_batches = min(1024, len(dset))  # prepare.py: 1024 (fewer rows than that here for val)
        idx = 0
        for batch_idx in range(total_batches):
            batch = dset.shard(num_shards=total_batches, index=batch_idx, contiguous=True).with_format("numpy")
            arr_batch = np.concatenate(batch["ids"])
            arr[idx: idx + len(arr_batch)] = arr_batch
            idx += len(arr_batch)
        arr.flush()
    return {}


_LLMC_ENC = None
_LLMC_EOT = None


def _llmc_tokenize(doc):
    tokens = [_LLMC_EOT]  # the special <|endoftext|> token delimits all documents
    tokens.extend(_LLMC_ENC.encode_ordinary(doc["text"]))
    tokens_np = np.array(tokens)
    assert (0 <= tokens_np).all() and (tokens_np < 2**16).all(), "token dictionary too large for uint16"
    return tokens_np.astype(np.uint16)


def _llmc_write(filename: str, toks: np.ndarray) -> None:
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(toks)
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())


def run_llmc(corpus: str, tokenizer: str, workers: int, out: str, shard_size: int = 10**8) -> dict:
    """llm.c dev/data/fineweb.py (the parent iterates the docs; here: json.loads of JSONL lines)."""
    import multiprocessing as mp
    global _LLMC_ENC, _LLMC_EOT
    _LLMC_ENC = gpt2_tiktoken(tokenizer)
    _LLMC_EOT = _LLMC_ENC._special_tokens["<|endoftext|>"]

    def docs():
        with open(corpus, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)
    with mp.get_context("fork").Pool(workers) as pool:
        shard_index = 0
        all_tokens_np = np.empty((shard_size,), dtype=np.uint16)
        token_count = 0
        for tokens in pool.imap(_llmc_tokenize, docs(), chunksize=16):
            if token_count + len(tokens) < shard_size:
                all_tokens_np[token_count:token_count + len(tokens)] = tokens
                token_count += len(tokens)
            else:
                split = "val" if shard_index == 0 else "train"
                remainder = shard_size - token_count
                all_tokens_np[token_count:token_count + remainder] = tokens[:remainder]
                _llmc_write(os.path.join(out, f"fineweb_{split}_{shard_index:06d}.bin"), all_tokens_np)
                shard_index += 1
                all_tokens_np[0:len(tokens) - remainder] = tokens[remainder:]
                token_count = len(tokens) - remainder
        if token_count != 0:
            split = "val" if shard_index == 0 else "train"
            _llmc_write(os.path.join(out, f"fineweb_{split}_{shard_index:06d}.bin"), all_tokens_np[:token_count])
    return {}


class _MegatronEncoder:
    def __init__(self, tokenizer: str):
        self.path = tokenizer

    def initializer(self):
        _MegatronEncoder.tokenizer = hf_tokenizer(self.path)
        _MegatronEncoder.eod = _MegatronEncoder.tokenizer.token_to_id("<|endoftext|>")

    def encode(self, json_line):
        data = json.loads(json_line)
        text = data["text"]
        doc_ids, sentence_lens = [], []
        sentence_ids = _MegatronEncoder.tokenizer.encode(text, add_special_tokens=False).ids
        if len(sentence_ids) > 0:
            doc_ids.extend(sentence_ids)
            sentence_lens.append(len(sentence_ids))
        if len(doc_ids) > 0:  # --append-eod
            doc_ids.append(_MegatronEncoder.eod)
            sentence_lens[-1] += 1
        return {"text": doc_ids}, {"text": sentence_lens}, len(json_line)


def run_megatron(corpus: str, tokenizer: str, workers: int, out: str) -> dict:
    """Megatron-LM tools/preprocess_data.py (one file, one json key, --append-eod, HF tokenizer)."""
    import multiprocessing as mp

    from pipeline.manifest import write_idx
    encoder = _MegatronEncoder(tokenizer)
    with open(corpus, encoding="utf-8") as fin, mp.get_context("fork").Pool(workers, initializer=encoder.initializer) as pool:
        encoded_docs = pool.imap(encoder.encode, fin, 32)
        lengths: list[int] = []
        with open(os.path.join(out, "megatron_text_document.bin"), "wb") as data_file:
            total_bytes = 0
            for doc, sentence_lens, bytes_processed in encoded_docs:
                total_bytes += bytes_processed
                np_array = np.array(doc["text"], dtype=np.uint16)  # DType.optimal_dtype(50257)
                data_file.write(np_array.tobytes(order="C"))
                lengths.extend(sentence_lens["text"])
        write_idx(os.path.join(out, "megatron_text_document.idx"), np.array(lengths, dtype=np.int64), np.uint16)
    return {}


def run_megatron_fast(corpus: str, tokenizer: str, workers: int, out: str) -> dict:
    """Megatron-LM tools/preprocess_data_fast.py (one file, one json key, --append-eod): gigatoken's
    `encode_files(JsonlFileSource(...), parallel=True)` over the whole file, then the documents in
    chunks of 1 M: flattened, EOD inserted after each, one write each; then the .idx. Its tokenizer
    is gigatoken's own from the tokenizer.json (Megatron builds it through its HF wrapper, a cost left
    out here, as are the torch and transformers imports). W threads: gigatoken's rayon pool, sized
    by RAYON_NUM_THREADS before its first use. Returns its phases' seconds (`--run megatron-fast`
    prints them: where the peer's time goes)."""
    os.environ["RAYON_NUM_THREADS"] = str(workers)
    t0 = time.perf_counter()
    import awkward as ak
    import gigatoken as gt

    from pipeline.manifest import write_idx
    t1 = time.perf_counter()
    text = Path(tokenizer).read_text()
    eod = next(t["id"] for t in json.loads(text)["added_tokens"] if t["content"] == "<|endoftext|>")
    tok = gt.Tokenizer.from_json(text)
    t2 = time.perf_counter()
    docs = tok.encode_files(gt.JsonlFileSource([corpus], field="text"), parallel=True)
    t3 = time.perf_counter()
    lengths = np.asarray(ak.num(docs, axis=1), dtype=np.int64)
    keep = lengths > 0  # keep_empty is False
    chunk = 1_000_000
    with open(os.path.join(out, "megatron_text_document.bin"), "wb") as data_file:
        for a in range(0, len(docs), chunk):
            part = docs[a:a + chunk][keep[a:a + chunk]]
            flat = np.asarray(ak.flatten(part)).astype(np.uint16)  # DType.optimal_dtype(50257)
            ends = np.cumsum(np.asarray(ak.num(part, axis=1)))
            data_file.write(np.insert(flat, ends, np.uint16(eod)).tobytes())
    write_idx(os.path.join(out, "megatron_text_document.idx"), lengths[keep] + 1, np.uint16)
    t4 = time.perf_counter()
    # numpy is imported before t0 (this script's own import), so "imports" is awkward + gigatoken
    return {"phases_s": {"imports": round(t1 - t0, 3), "from_json": round(t2 - t1, 3),
                         "encode_files": round(t3 - t2, 3), "write": round(t4 - t3, 3)}}


@functools.cache
def byte_compile_prep() -> None:
    """Write the .pyc files of the `pipeline` package that `prep` runs, as `pip install` does. From
    an editable or source checkout with PYTHONDONTWRITEBYTECODE=1 set (this VM sets it globally),
    every `prep` process would compile prep's ~20 modules from source instead: 57 ms of CPU in each
    of the parent and the forkserver (cProfile, 2-core VM), a start-up cost no installed copy pays.
    Python still reads .pyc files under that variable; only writing them is off."""
    import compileall

    import pipeline
    for where in pipeline.__path__:
        compileall.compile_dir(where, quiet=1)


def prep_command(corpus: str, tokenizer: str, workers: int, out: str, variant: str) -> list[str]:
    """The `prep tokenize` command line (console script) for a variant: "auto", "tiktoken", "hf", or
    "auto-u4" (auto with 4 MiB work units instead of the default 16 MiB). Writes the recipe."""
    backend, _, units = variant.partition("-")
    units = "" if units == "cold" else units
    conf = {"name": "bench", "source": {"path": corpus, "format": "jsonl"},
            "tokenizer": {"path": tokenizer, "backend": backend, "boundary": "eos"},
            "output": {"dir": str(Path(out) / "prep"), "val_fraction": 0.0},
            "num_workers": workers}
    if units:
        conf["unit_bytes"] = int(units.lstrip("u")) << 20
    recipe = Path(out) / "recipe.yaml"
    recipe.write_text(json.dumps(conf))
    byte_compile_prep()
    exe = shutil.which("prep")
    head = [exe] if exe else [sys.executable, "-m", "pipeline.cli"]
    return [*head, "tokenize", "--recipe", str(recipe), "--no-progress", "--overwrite"]


# -- orchestration ---------------------------------------------------------------------------------
def timed(name: str, args, extra: list[str] = (), corpus: str | None = None) -> dict:
    """Run `--run name` in a subprocess; wall time and peak RSS summed over its process tree."""
    import psutil
    out = tempfile.mkdtemp(prefix=f"bench_{name.replace('/', '_')}_", dir=args.tmp)
    if name.startswith("prep/"):  # the console script itself: nothing else in the process tree
        cmd = prep_command(corpus or args.corpus, args.tokenizer, args.workers, out, name.split("/", 1)[1])
    else:
        cmd = [sys.executable, __file__, "--run", name, "--corpus", corpus or args.corpus, "--tokenizer",
               args.tokenizer, "--workers", str(args.workers), "--out-dir", out, *extra]
    # prep keeps its tokenizer proof in a cache (pipeline/tokenizer_cache.py): a private one here, filled
    # by an untimed run of each variant; "prep/auto-cold" runs without it (a tokenizer's first run)
    cache = "off" if name.endswith("-cold") else os.path.join(args.tmp, "prep-cache")
    # prepend, not replace: a caller's PYTHONPATH may hold the packages (wheels unpacked with --target)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PREP_CACHE_DIR": cache}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]

    def sample():
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
                rss = 0
                for p in procs:
                    try:
                        rss += p.memory_info().rss
                    except psutil.Error:
                        pass
                peak[0] = max(peak[0], rss)
            except psutil.Error:
                pass
            time.sleep(0.05)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")
    info = {} if name.startswith("prep/") else json.loads(stdout.strip().splitlines()[-1])
    info.update(name=name, wall=wall, peak_rss=peak[0], out=out)
    return info


def check_outputs(name: str, out: str, ref: dict) -> str:
    """Every pipeline's output must hold exactly the reference token stream."""
    if name.startswith("prep/"):
        bins = sorted(glob.glob(os.path.join(out, "prep", "train", "*.bin")))
        got = stream_digest(np.fromfile(b, dtype=np.uint16) for b in bins)
        want = ref["eos_after"]
    elif name == "llmc":
        bins = sorted(glob.glob(os.path.join(out, "fineweb_*.bin")), key=lambda p: ("train" in p, p))
        got = stream_digest(np.fromfile(b, dtype=np.uint16, offset=1024) for b in bins)
        want = ref["eos_before"]
    elif name in ("megatron", "megatron-fast"):
        got = stream_digest([np.fromfile(os.path.join(out, "megatron_text_document.bin"), dtype=np.uint16)])
        want = ref["eos_after"]
    elif name == "nanogpt":  # shuffled by train_test_split: compare the count and the sum of ids
        got = stream_digest(np.fromfile(os.path.join(out, f"{s}.bin"), dtype=np.uint16) for s in ("train", "val"))
        got, want = got[:2], ref["eos_after"][:2]
    else:
        return "-"
    if tuple(got) != tuple(want):
        raise SystemExit(f"{name}: output differs from the reference token stream: {got} vs {want}")
    return "same ids" if name != "nanogpt" else "same count+sum"


def reference(args, texts: list[str]) -> dict:
    """Reference ids from Hugging Face tokenizers (all cores), and every fast engine checked against them."""
    from pipeline import fast_bpe
    tok = hf_tokenizer(args.tokenizer)
    eot = tok.token_to_id("<|endoftext|>")
    t0 = time.perf_counter()
    want = [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]
    print(f"reference: tokenizers {time.perf_counter() - t0:.1f} s for {len(texts)} docs", flush=True)
    engines = {"tiktoken": fast_bpe.build_tiktoken(fast_bpe.analyze(Path(args.tokenizer).read_text())[0])}
    if fast_bpe.gigatoken_available():
        engines["gigatoken"] = fast_bpe.build_gigatoken(Path(args.tokenizer).read_text())
    exact = {}
    for name, encode in engines.items():
        found = fast_bpe.first_mismatch(want, [encode(t) for t in texts])
        exact[name] = found is None
        print(f"correctness: {name} {'identical ids on every document' if found is None else 'DIFFERS: ' + fast_bpe.describe_mismatch(texts, found)}", flush=True)
    eos = np.array([eot], np.uint16)
    nonempty = [np.array(w, np.uint16) for w in want if w]
    return {"tokens": sum(map(len, want)), "exact": exact, "docs": len(texts),
            "eos_after": stream_digest(p for w in nonempty for p in (w, eos)),
            "eos_before": stream_digest(p for w in want for p in (eos, np.array(w, np.uint16)))}


def scaled_corpus(corpus: str, factor: int, tmp: str, new_words: bool = False) -> str:
    """The corpus `factor` times. `new_words`: copy k has its ASCII letters rotated by k places (ROT-k),
    so every copy is text the engine has not seen (its words are new pre-tokens) with the same bytes,
    documents and line lengths; repeated copies would hit gigatoken's pre-token cache instead. ROT-k
    words are rarer than any real text's, so this is the pessimistic end for memory (and its token
    counts differ, so only its time per byte and its peak RSS are reported)."""
    path = os.path.join(tmp, f"corpus_x{factor}{'_new' if new_words else ''}.jsonl")
    data = Path(corpus).read_bytes()
    lo, up = "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    with open(path, "wb") as f:
        for k in range(factor):
            if not new_words or k == 0:
                f.write(data)
                continue
            rot = str.maketrans(lo + up, lo[k:] + lo[:k] + up[k:] + up[:k])
            for line in data.splitlines():
                if line.strip():
                    doc = json.loads(line)
                    doc["text"] = doc["text"].translate(rot)
                    f.write(json.dumps(doc, ensure_ascii=False).encode() + b"\n")
    return path


def _merge(best: dict | None, r: dict) -> dict:
    """Keep the best time, the highest peak RSS and the number of timed runs."""
    if best is None:
        return {**r, "runs": r.get("runs", 1)}
    t_best, t_new = best.get("seconds", best["wall"]), r.get("seconds", r["wall"])
    out = dict(r if t_new < t_best else best)
    out["peak_rss"] = max(best["peak_rss"], r["peak_rss"])
    out["runs"] = best.get("runs", 1) + r.get("runs", 1)
    return out


def machine_label(workers: int) -> str:
    return f"cpu{os.cpu_count()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="JSONL corpus ({'text': ...} per line); built if missing")
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, help="GPT-2 tokenizer.json")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per row; the best is reported")
    ap.add_argument("--scale", type=int, default=8, help="also run prep on the corpus repeated this many times (RSS)")
    ap.add_argument("--paragraphs", action="store_true",
                    help="run on a short-document corpus derived from --corpus: one document per paragraph")
    ap.add_argument("--only", default="", help="comma-separated row names to run (default: all)")
    ap.add_argument("--report", default="", help="report path (default benchmarks/results/tokenize_<machine>_<yyyymm>.md)")
    ap.add_argument("--accumulate", action="store_true",
                    help="merge with the raw results of an earlier run of the same setup (<report>.json): "
                         "best time and highest peak RSS per row; with --only none it only re-renders the report")
    ap.add_argument("--tmp", default=None, help="scratch directory (default: system temp)")
    ap.add_argument("--run", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return _subprocess_main(args)

    if not os.path.exists(args.corpus):
        counts = build_corpus(args.corpus)
        if sum(counts.values()) < 1000:
            raise SystemExit(f"too few documents found ({counts}); apt-get install -y {APT_PACKAGES}")
    if args.paragraphs:
        args.corpus = paragraph_corpus(args.corpus)
    if not os.path.exists(args.tokenizer):
        raise SystemExit(f"{args.tokenizer}: no such tokenizer.json")
    args.tmp = tempfile.mkdtemp(prefix="bench_tokenize_", dir=args.tmp)
    texts = load_texts(args.corpus)
    nbytes = sum(len(t.encode()) for t in texts)
    file_bytes = os.path.getsize(args.corpus)
    print(f"corpus: {args.corpus}: {len(texts)} docs, {nbytes / 1e6:.1f} MB of text ({file_bytes / 1e6:.1f} MB JSONL)", flush=True)
    ref = reference(args, texts)
    del texts

    rows = ["ceiling/gigatoken", "ceiling/gigatoken+json", "ceiling/tiktoken", "ceiling/tiktoken-numpy", "ceiling/hf",
            "prep/auto", "prep/auto-cold", "prep/auto-u4", "prep/tiktoken", "prep/tiktoken-u4", "prep/hf", "llmc", "nanogpt",
            "megatron", "megatron-fast"]
    if "gigatoken" not in ref["exact"]:
        rows.remove("ceiling/gigatoken")
        rows.remove("ceiling/gigatoken+json")
        rows.remove("megatron-fast")
    if args.only:
        rows = [r for r in rows if r in args.only.split(",")]
    results = {}
    for name in rows:
        if name.startswith("prep/") and not name.endswith("-cold"):
            # untimed: fills this script's private proof cache, so every timed run (and its peak RSS)
            # is a warm one, like the x-scaled runs that follow; the cold path is its own row
            shutil.rmtree(timed(name, args)["out"], ignore_errors=True)
    # round-robin, not row by row: this VM's speed drifts by 30-60% within minutes, and rows run in
    # blocks compared stretches, not pipelines (prep/auto vs megatron-fast, best of 6 in blocks:
    # 1.20 vs 0.93 s; 8 interleaved pairs right after: prep faster in all 8, 0.88-1.18 vs 1.03-1.41 s)
    for _ in range(args.repeat):
        for name in rows:
            r = timed(name, args)
            r["check"] = check_outputs(name, r["out"], ref)
            shutil.rmtree(r["out"], ignore_errors=True)
            print(f"  {name}: {r.get('seconds', r['wall']):.2f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB", flush=True)
            results[name] = _merge(results.get(name), r)
    scaled = [r for r in ("prep/auto", "prep/tiktoken", "megatron-fast") if r in rows]
    if args.scale > 1 and scaled:  # peak RSS must not grow with the corpus; steady-state throughput
        # repeated copies, then (auto only: gigatoken's cache is what grows with new text) new words
        for new_words, names in ((False, scaled), (True, [n for n in scaled if n == "prep/auto"])):
            if not names:
                continue
            big = scaled_corpus(args.corpus, args.scale, args.tmp, new_words)
            for _ in range(args.repeat):  # best of --repeat, round-robin, as the 1x rows
                for name in names:
                    row = f"{name} x{args.scale}{NEW_WORDS if new_words else ''}"
                    r = timed(name, args, corpus=big)
                    shutil.rmtree(r["out"], ignore_errors=True)
                    results[row] = _merge(results.get(row), {**r, "scale": args.scale})
                    print(f"  {row}: {r['wall']:.2f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB", flush=True)
            os.unlink(big)
    kind = "tokenize_paragraphs" if args.paragraphs else "tokenize"  # never over the long-document report
    path = args.report or str(ROOT / "benchmarks" / "results" /
                              f"{kind}_{machine_label(args.workers)}_{time.strftime('%Y%m')}.md")
    raw = Path(path).with_suffix(".json")
    raw.parent.mkdir(parents=True, exist_ok=True)
    key = {"corpus_bytes": nbytes, "tokens": ref["tokens"], "workers": args.workers, "scale": args.scale}
    if args.accumulate and raw.exists():  # best time / highest peak RSS over this and earlier runs
        old = json.loads(raw.read_text())
        if {k: v for k, v in old.get("key", {}).items() if k != "runs"} == key:
            for name, r in old["results"].items():
                results[name] = _merge(r, results[name]) if name in results else r
            key["runs"] = old["key"].get("runs", 1) + (1 if rows else 0)  # `--only none`: re-render only
            print(f"accumulated with {raw} ({key['runs']} runs)")
    key.setdefault("runs", 1)
    raw.write_text(json.dumps({"key": key, "results": results}, indent=1))
    args.runs = key["runs"]
    report = write_report(args, results, ref, nbytes, file_bytes, path)
    print(f"report: {report} (raw: {raw})")
    shutil.rmtree(args.tmp, ignore_errors=True)


def _subprocess_main(args) -> None:
    name = args.run
    if name.startswith("ceiling/"):
        info = run_ceiling(name.split("/", 1)[1], args.corpus, args.tokenizer, args.workers)
    elif name == "nanogpt":
        info = run_nanogpt(args.corpus, args.tokenizer, args.workers, args.out_dir)
    elif name == "llmc":
        info = run_llmc(args.corpus, args.tokenizer, args.workers, args.out_dir)
    elif name == "megatron":
        info = run_megatron(args.corpus, args.tokenizer, args.workers, args.out_dir)
    elif name == "megatron-fast":
        info = run_megatron_fast(args.corpus, args.tokenizer, args.workers, args.out_dir)
    else:
        raise SystemExit(f"unknown run {name}")
    print(json.dumps(info))


NEW_WORDS = " new words"  # suffix of the x-scaled row on `scaled_corpus(..., new_words=True)`

ROW_LABELS = {
    "ceiling/gigatoken": "ceiling: gigatoken encode, in-memory texts",
    "ceiling/gigatoken+json": "ceiling: orjson.loads + gigatoken encode, in-memory JSONL lines",
    "ceiling/tiktoken": "ceiling: tiktoken encode_ordinary, in-memory texts",
    "ceiling/tiktoken-numpy": "ceiling: tiktoken encode_to_numpy, in-memory texts",
    "ceiling/hf": "ceiling: HF tokenizers encode_batch_fast, in-memory texts",
    "prep/auto": "`prep tokenize` backend auto",
    "prep/auto-cold": "`prep tokenize` backend auto, first run of a tokenizer (no proof cache)",
    "prep/auto-u4": "`prep tokenize` backend auto, unit_bytes 4 MiB",
    "prep/tiktoken": "`prep tokenize` backend tiktoken",
    "prep/tiktoken-u4": "`prep tokenize` backend tiktoken, unit_bytes 4 MiB",
    "prep/hf": "`prep tokenize` backend hf",
    "llmc": "llm.c fineweb.py style (Pool.imap/16, tiktoken)",
    "nanogpt": "nanoGPT prepare.py style (datasets.map, tiktoken)",
    "megatron": "Megatron preprocess_data.py style (Pool.imap/32, HF)",
    "megatron-fast": "Megatron preprocess_data_fast.py style (gigatoken encode_files, W threads)",
}


def write_report(args, results: dict, ref: dict, nbytes: int, file_bytes: int, path: str) -> str:
    import tiktoken
    import tokenizers
    label = machine_label(args.workers)
    ceilings = {k: nbytes / v["seconds"] for k, v in results.items() if k.startswith("ceiling/") and k != "ceiling/hf"}
    top = max(ceilings.items(), key=lambda kv: kv[1]) if ceilings else (None, None)
    tik = ceilings.get("ceiling/tiktoken-numpy") or ceilings.get("ceiling/tiktoken")
    tik = max(v for k, v in ceilings.items() if k.startswith("ceiling/tiktoken")) if tik else None
    lines = [f"# Tokenization throughput, {label}, {time.strftime('%Y-%m-%d')}", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
             f"{args.workers} workers/threads everywhere. Python {platform.python_version()}, tokenizers "
             f"{tokenizers.__version__}, tiktoken {tiktoken.__version__}"
             + (f", gigatoken {_ver('gigatoken')}" if "gigatoken" in ref["exact"] else "") + ".",
             f"Corpus: {ref['docs']:,} documents, {nbytes / 1e6:.1f} MB of text ({file_bytes / 1e6:.1f} MB JSONL; "
             f"Python/Linux/Perl/git/PostgreSQL docs{', one document per paragraph' if getattr(args, 'paragraphs', False) else ''}), {ref['tokens'] / 1e6:.2f} M GPT-2 tokens "
             f"({nbytes / ref['tokens']:.2f} bytes/token). Tokenizer: {args.tokenizer}.",
             "Correctness first: " + ", ".join(f"{k} {'identical to tokenizers on every document' if v else 'DIFFERENT'}"
                                               for k, v in ref["exact"].items())
             + "; every pipeline's output below holds exactly the reference token stream (nanoGPT: shuffled, "
             "so count and sum of ids).",
             f"Best time of the runs per row (runs column: timed runs behind the row, from {args.runs} invocation(s) "
             "of this script, some limited to rows with --only); peak RSS "
             "is the highest seen, summed over the process tree (sampled every 50 ms). MB/s = MB of document "
             "text per second; end-to-end rows are wall time from process start to finished output. "
             + (f"The x{args.scale} rows repeat the corpus {args.scale} times: gigatoken's pre-token cache then hits "
                f"on {args.scale - 1}/{args.scale} of the text, so their auto speed is an upper bound; they are "
                "there for memory and for start-up costs spread over more work. The 'new words' row rotates "
                "copy k's letters by k (ROT-k): every copy is new to the engine, so its pre-token cache grows "
                "as on new text (more than on real text, whose common words recur), up to prep's bound on it "
                "(tokenizers.GIGATOKEN_CACHE_BYTES per worker). " if args.scale > 1 else "")
             + "prep rows keep the tokenizer proof in "
             "a cache private to this script, filled by an untimed run of each row, so timed runs and their peak "
             "RSS are warm; the "
             "'first run of a tokenizer' row runs with it off (PREP_CACHE_DIR=off): load, prove and probe "
             "Unicode gaps in the parent first.", "",
             f"| pipeline | seconds | MB/s | Mtok/s | vs fastest ceiling ({top[0].split('/')[1] if top[0] else '-'}) "
             f"| vs tiktoken ceiling | peak RSS (MiB) | runs | output |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    order = list(ROW_LABELS)  # table order, whatever order the (accumulated) runs came in
    for name, r in sorted(results.items(), key=lambda kv: (" x" in kv[0], order.index(kv[0].split(" x")[0])
                                                          if kv[0].split(" x")[0] in order else len(order))):
        secs = r.get("seconds", r["wall"])
        scale = r.get("scale", 1)
        mbs = nbytes * scale / secs / 1e6
        base = name.split(" x")[0]
        lab = ROW_LABELS.get(base, base) + (f" (corpus x{scale})" if scale > 1 else "")
        if name.endswith(NEW_WORDS):  # other tokens than the reference's: no Mtok/s, no ratios
            lines.append(f"| {lab[:-1]}, copy k's letters rotated by k) | {secs:.2f} | {mbs:.1f} | - | - | - | "
                         f"{r['peak_rss'] / 2**20:.0f} | {r.get('runs', 1)} | - |")
            continue
        # a ratio column is "-" when its ceiling was not run (--only), the rest of the row stays
        vs_top = f"{mbs * 1e6 / top[1]:.2f}" if top[1] else "-"
        vs_tik = f"{mbs * 1e6 / tik:.2f}" if tik else "-"
        lines.append(f"| {lab} | {secs:.2f} | {mbs:.1f} | {ref['tokens'] * scale / secs / 1e6:.2f} | {vs_top} | "
                     f"{vs_tik} | {r['peak_rss'] / 2**20:.0f} | {r.get('runs', 1)} | {r.get('check', '-')} |")
    def secs(name):
        return results[name].get("seconds", results[name]["wall"]) / results[name].get("scale", 1)

    def check(label, value, target, unit="x"):
        ok = value >= target
        lines.append(f"| {label} | {value:.2f}{unit} | >= {target}{unit} | {'met' if ok else 'MISSED'} |")

    lines += ["", "Targets (ratios of the times in the table; per-1x-corpus seconds for the x-scaled rows):", "",
              "| target | measured | wanted | |", "|---|---:|---:|---|"]
    fast = top[0]
    for row in ("prep/auto", f"prep/auto x{args.scale}"):
        if row in results and fast:
            check(f"{row} vs ceiling ({fast.split('/')[1]})", results[fast]["seconds"] / secs(row), 0.9)
    if "ceiling/gigatoken+json" in results:  # the bound for any JSONL pipeline: parsing is work too
        for row in ("prep/auto", f"prep/auto x{args.scale}"):
            if row in results:
                check(f"{row} vs JSONL ceiling (orjson + gigatoken; informative)",
                      results["ceiling/gigatoken+json"]["seconds"] / secs(row), 0.9)
    tik_row = max((k for k in results if k.startswith("ceiling/tiktoken")), key=lambda k: -results[k]["seconds"],
                  default=None)
    for row in ("prep/tiktoken", f"prep/tiktoken x{args.scale}", "prep/auto"):
        if row in results and tik_row:
            check(f"{row} vs ceiling ({tik_row.split('/')[1]})", results[tik_row]["seconds"] / secs(row), 0.9)
    for peer, want in (("llmc", 1.0), ("nanogpt", 3.0), ("megatron", 5.0), ("megatron-fast", 1.0)):
        for row in ("prep/auto", "prep/tiktoken"):
            if peer in results and row in results:
                check(f"{row} vs {peer}", secs(peer) / secs(row), want)
    budget = (200 + 150 * args.workers) * 1e6
    for row in ("prep/auto", "prep/tiktoken"):
        big = f"{row} x{args.scale}"
        if row in results and big in results:
            a_rss, b_rss = results[row]["peak_rss"], results[big]["peak_rss"]
            growth = 100 * (b_rss - a_rss) / a_rss
            lines.append(f"| {row} peak RSS x{args.scale} vs x1 ({b_rss / 1e6:.0f} vs {a_rss / 1e6:.0f} MB) | "
                         f"{growth:+.1f}% | < 10% | {'met' if abs(growth) < 10 else 'MISSED'} |")
            new = results.get(big + NEW_WORDS)
            if new is not None:
                c_rss = new["peak_rss"]
                growth = 100 * (c_rss - a_rss) / a_rss
                lines.append(f"| {row} peak RSS x{args.scale} of new words vs x1 ({c_rss / 1e6:.0f} vs "
                             f"{a_rss / 1e6:.0f} MB) | {growth:+.1f}% | < 10% | {'met' if abs(growth) < 10 else 'MISSED'} |")
            worst = max(a_rss, b_rss, new["peak_rss"] if new is not None else 0)
            lines.append(f"| {row} peak RSS, all processes | {worst / 1e6:.0f} MB | < {budget / 1e6:.0f} MB "
                         f"(200 + 150 x {args.workers}) | {'met' if worst < budget else 'MISSED'} |")
    lines += ["", "Re-run (twice, keeping the best): `python benchmarks/bench_tokenize.py "
              + ("--paragraphs " if getattr(args, "paragraphs", False) else "")
              + f"--workers {args.workers} --repeat {args.repeat} --scale {args.scale}` then the same with "
              "`--accumulate`", ""]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(lines))
    return path


def _ver(pkg: str) -> str:
    from importlib.metadata import version
    return version(pkg)


if __name__ == "__main__":
    main()
