"""SentencePiece-style tokenizer.json files (Llama 2, Mistral 7B v0.1: byte fallback, "▁" for spaces)
through prep: gigatoken's SentencePiece engine (backend auto) against Hugging Face `tokenizers`
(backend hf), on the same corpus and cores.

    python benchmarks/bench_sentencepiece.py [--tokenizer PATH/tokenizer.json] [--vocab 32000] [--workers 2]

Without --tokenizer (model hubs are often unreachable), a Llama-2-layout tokenizer.json is trained on
the corpus with `tokenizers`: BPE with byte_fallback, <unk> <s> </s> then the 256 <0xNN> byte tokens,
Llama 2's Prepend("▁") + Replace(" ", "▁") normalizer and no pre-tokenizer. (It is trained with a
Metaspace pre-tokenizer that splits words, minutes faster than on whole documents; the merges then
run on whole documents as Llama 2's do.)

1. Ids: every document, gigatoken against `tokenizers`, stopping at the first difference.
2. One core: each engine encoding every document, one call each (best of --repeat).
3. End to end: `prep tokenize` with backend auto and hf, interleaved, best of --repeat, warm proof
   cache; the shards' sha256 must match.
Writes benchmarks/results/sentencepiece_<machine>_<yyyymm>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_engines import throughput  # noqa: E402
from bench_tokenize import DEFAULT_CORPUS, load_texts, machine_label, prep_command  # noqa: E402

SPECIALS = ("<unk>", "<s>", "</s>")


def train_llama2_layout(texts: list[str], vocab_size: int) -> str:
    """A Llama-2-layout tokenizer.json trained on `texts` (see the module docstring)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 256, show_progress=False, special_tokens=list(SPECIALS),
                                  limit_alphabet=1000)
    tok.train_from_iterator(texts, trainer)
    d = json.loads(tok.to_str())
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    learned = [t for t, _ in sorted(d["model"]["vocab"].items(), key=lambda kv: kv[1])
               if t not in SPECIALS and t not in byte_tokens]  # a corpus may hold "<0x41>" as text
    d["model"]["vocab"] = {t: i for i, t in enumerate([*SPECIALS, *byte_tokens, *learned])}
    for t in d["added_tokens"]:
        t["id"] = d["model"]["vocab"][t["content"]]
    d["pre_tokenizer"] = None
    d["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    return json.dumps(d, ensure_ascii=False)


def engines(definition: str):
    """(tokenizers, gigatoken) encoders of one text -> list of ids, special-token strings as text."""
    from tokenizers import Tokenizer

    from pipeline import fast_bpe
    hf = Tokenizer.from_str(definition)
    hf.encode_special_tokens = True
    giga = fast_bpe.build_gigatoken(fast_bpe.gigatoken_definition(json.loads(definition)), prepared=True)
    return (lambda t: hf.encode(t, add_special_tokens=False).ids), (lambda t: giga(t).tolist())


def prep_run(corpus: str, tokenizer: str, workers: int, backend: str, tmp: str) -> tuple[float, dict]:
    import subprocess
    out = tempfile.mkdtemp(prefix=f"sp_{backend}_", dir=tmp)
    cmd = prep_command(corpus, tokenizer, workers, out, backend)
    # bench_engines pins RAYON_NUM_THREADS=1 for its one-core rows; prep sets its workers' own
    env = {k: v for k, v in os.environ.items() if k not in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM")}
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "PREP_CACHE_DIR": os.path.join(tmp, "prep-cache")}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"prep ({backend}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    manifest = json.loads((Path(out) / "prep" / "manifest.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    return wall, manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="JSONL corpus ({'text': ...} per line)")
    ap.add_argument("--tokenizer", default="", help="a SentencePiece-style tokenizer.json (default: train one)")
    ap.add_argument("--vocab", type=int, default=32000, help="vocabulary of the trained tokenizer (Llama 2: 32000)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--report", default="")
    args = ap.parse_args()
    texts = load_texts(args.corpus)
    nbytes = sum(len(t.encode()) for t in texts)
    tmp = tempfile.mkdtemp(prefix="bench_sp_")
    try:
        if args.tokenizer:
            tokenizer, origin = args.tokenizer, f"`{args.tokenizer}`"
        else:
            t0 = time.perf_counter()
            tokenizer = os.path.join(tmp, "tokenizer.json")
            Path(tokenizer).write_text(train_llama2_layout(texts, args.vocab), encoding="utf-8")
            origin = (f"trained here on the corpus, Llama 2's layout, {args.vocab} tokens "
                      f"({time.perf_counter() - t0:.0f} s)")
        print(f"tokenizer: {origin}", flush=True)
        hf, giga = engines(Path(tokenizer).read_text(encoding="utf-8"))
        for i, t in enumerate(texts):
            if hf(t) != giga(t):
                raise SystemExit(f"document {i}: gigatoken's ids differ from tokenizers'; nothing timed")
        print(f"ids: identical on all {len(texts)} documents", flush=True)
        rates = {name: throughput(fn, texts, nbytes / 1e6, args.repeat) for name, fn in (("tokenizers", hf),
                                                                                        ("gigatoken", giga))}
        print("one core, MB/s:", {k: round(v, 2) for k, v in rates.items()}, flush=True)
        for backend in ("auto", "hf"):  # untimed: fills the private proof cache
            prep_run(args.corpus, tokenizer, args.workers, backend, tmp)
        walls, shas = {"auto": [], "hf": []}, {}
        for _ in range(args.repeat):
            for backend in ("auto", "hf"):
                wall, manifest = prep_run(args.corpus, tokenizer, args.workers, backend, tmp)
                walls[backend].append(wall)
                shas[backend] = ([s["sha256"] for s in manifest["splits"]["train"]["shards"]],
                                 manifest["tokenizer"]["backend"])
                print(f"  prep {backend}: {wall:.2f} s ({manifest['tokenizer']['backend']})", flush=True)
        same = shas["auto"][0] == shas["hf"][0]
        best = {k: min(v) for k, v in walls.items()}
        lines = [f"# SentencePiece-style tokenizer.json through prep, {machine_label(args.workers)}, "
                 f"{time.strftime('%Y-%m-%d')}", "",
                 f"`python benchmarks/bench_sentencepiece.py --workers {args.workers} --repeat {args.repeat}"
                 f"{' --vocab ' + str(args.vocab) if not args.tokenizer else ' --tokenizer ' + args.tokenizer}`", "",
                 f"Corpus: `{Path(args.corpus).name}`, {len(texts)} documents, {nbytes / 1e6:.1f} MB of text. "
                 f"Tokenizer: {origin}. gigatoken's ids equal `tokenizers`' on every document.", "",
                 "| engine, one core, one call per document | MB/s |", "|---|---:|",
                 *(f"| {k} | {v:.2f} |" for k, v in rates.items()), "",
                 f"| `prep tokenize`, {args.workers} workers, best of {args.repeat} (interleaved) | s | MB/s | backend |",
                 "|---|---:|---:|---|",
                 *(f"| backend {k} | {best[k]:.2f} | {nbytes / best[k] / 1e6:.1f} | {shas[k][1]} |" for k in best), "",
                 f"auto vs hf: {best['hf'] / best['auto']:.2f}x; shards byte-identical: {'yes' if same else 'NO'}.", ""]
        report = args.report or str(ROOT / "benchmarks" / "results" /
                                    f"sentencepiece_{machine_label(args.workers)}_{time.strftime('%Y%m')}.md")
        Path(report).write_text("\n".join(lines))
        print("\n".join(lines))
        if not same:
            raise SystemExit("the shards differ between backends")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
