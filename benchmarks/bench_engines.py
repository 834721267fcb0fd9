"""Exact BPE engines on PyPI against the one prep runs (gigatoken): are their ids Hugging Face
`tokenizers`' ids on a real corpus, and how fast is each on one thread?

    pip install fastokens kitoken tokie splintr-rs bpe-openai rs-bpe rustbpe   # the candidates; missing ones are reported
    python benchmarks/bench_engines.py --tokenizer PATH/tokenizer.json [--corpus benchmarks/data/docs.jsonl]

For each engine that loads a tokenizer.json: its ids on every document of the corpus (special-token
strings as plain text, as prep encodes them) against `tokenizers`', stopping at the first difference;
an exact engine is then timed encoding every document one call at a time on one thread (best of
`--repeat`), on the corpus and on its paragraphs (bench_tokenize.paragraph_corpus: short documents,
where per-call costs show). Engines that only ship their own encodings (bpe-openai, rs-bpe) or only
train their own (rustbpe) cannot run a tokenizer.json; where one ships cl100k_base, it is timed against gigatoken on that encoding.
Writes benchmarks/results/engines_<machine>_<yyyymm>.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# one thread everywhere: the question is each engine's per-core speed (prep runs one per worker)
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import orjson  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def loaders(plain: str, original: str) -> dict:
    """name -> (package, function building `encode(text) -> ids`) for a tokenizer.json."""
    def gigatoken():
        from pipeline.fast_bpe import build_gigatoken
        return build_gigatoken(Path(original).read_text())

    def tiktoken():
        from pipeline import fast_bpe
        bpe, why = fast_bpe.analyze(Path(original).read_text())
        if bpe is None:
            raise ValueError(why)
        return fast_bpe.build_tiktoken(bpe)

    def fastokens():
        import fastokens
        tok = fastokens.Tokenizer.from_file(plain)
        return lambda text: tok.encode_ordinary(text).ids

    def kitoken():
        import kitoken
        tok = kitoken.Kitoken.from_tokenizers_file(plain)
        return lambda text: tok.encode(text, False)

    def tokie():
        import tokie
        tok = tokie.Tokenizer.from_json(plain)
        return lambda text: tok.encode(text, add_special_tokens=False).ids

    def splintr():
        import splintr
        tok = splintr.from_json(plain)
        return tok.encode_ordinary  # special-token strings as plain text, no post_processor template

    def bpe_openai():
        raise ValueError("runs only its own encodings (cl100k, o200k, voyage3; gpt2 is downloaded), not a tokenizer.json")

    def rs_bpe():
        raise ValueError("runs only cl100k_base and o200k_base; no tokenizer.json is read")

    def rustbpe():
        raise ValueError("trains its own vocabulary (nanochat's trainer); no tokenizer.json or ranks are read")

    return {"gigatoken": ("gigatoken", gigatoken), "tiktoken (prep-built)": ("tiktoken", tiktoken),
            "fastokens": ("fastokens", fastokens), "kitoken": ("kitoken", kitoken), "tokie": ("tokie", tokie),
            "splintr-rs": ("splintr-rs", splintr), "bpe-openai": ("bpe-openai", bpe_openai), "rs-bpe": ("rs-bpe", rs_bpe),
            "rustbpe": ("rustbpe", rustbpe)}


def first_difference(want: list[int], got: list[int]) -> int:
    return next((k for k in range(min(len(want), len(got))) if want[k] != got[k]), min(len(want), len(got)))


def throughput(encode, texts: list[str], mb: float, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for text in texts:
            encode(text)
        best = min(best, time.perf_counter() - t)
    return mb / best


def cl100k_rows(repeat: int, docs: list[str], mb: float) -> list[str]:
    """bpe-openai ships cl100k_base: its speed against gigatoken's on the same encoding and ids."""
    try:
        import bpe_openai
        import gigatoken
        from bpe_openai import _bindings
    except ImportError:
        return []
    data = Path(bpe_openai.__file__).parent / "data" / "cl100k_base.tiktoken.gz"
    if not data.is_file():
        return []
    with tempfile.NamedTemporaryFile(suffix=".tiktoken", delete=False) as f:
        f.write(gzip.decompress(data.read_bytes()))
    ours = gigatoken.Tokenizer.from_tiktoken(f.name, pretokenizer="cl100k")._backend.encode
    theirs = _bindings.tokenizer_for_encoding("cl100k_base").encode
    os.unlink(f.name)
    same = all(list(ours(t)) == list(theirs(t)) for t in docs)
    return [f"| bpe-openai {_version('bpe-openai')} | {throughput(theirs, docs, mb, repeat):.1f} |",
            f"| gigatoken {_version('gigatoken')} | {throughput(ours, docs, mb, repeat):.1f} |",
            "", f"Same ids from both on every document: {same}."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default="/work/shared/assets/gpt2/tokenizer.json")
    ap.add_argument("--corpus", default=str(ROOT / "benchmarks" / "data" / "docs.jsonl"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--report", default="")
    args = ap.parse_args()
    import bench_tokenize
    from tokenizers import Tokenizer

    definition = json.loads(Path(args.tokenizer).read_text())
    definition.update(added_tokens=[], truncation=None, padding=None, post_processor=None)  # prep's plain text
    plain = os.path.join(tempfile.mkdtemp(), "tokenizer.json")
    Path(plain).write_text(json.dumps(definition))
    docs = [orjson.loads(line)["text"] for line in open(args.corpus, "rb")]
    paragraphs = [orjson.loads(line)["text"] for line in open(bench_tokenize.paragraph_corpus(args.corpus), "rb")]
    mb_docs, mb_par = (sum(len(t.encode()) for t in x) / 1e6 for x in (docs, paragraphs))
    reference = [e.ids for e in Tokenizer.from_file(plain).encode_batch_fast(docs, add_special_tokens=False)]
    rows, rates = [], {}
    for name, (package, build) in loaders(plain, args.tokenizer).items():
        version = _version(package)
        label = f"{name} {version}" if version != "not installed" else name
        if version == "not installed":
            rows.append(f"| {label} | not installed | - | - |")
            continue
        try:
            encode = build()
        except Exception as e:
            rows.append(f"| {label} | cannot run it: {str(e).splitlines()[0][:140]} | - | - |")
            continue
        wrong = next((i for i, (t, want) in enumerate(zip(docs, reference)) if list(encode(t)) != want), None)
        if wrong is not None:
            got = list(encode(docs[wrong]))
            k = first_difference(reference[wrong], got)
            context = docs[wrong][max(0, len(Tokenizer.from_file(plain).decode(reference[wrong][:k])) - 12):][:24]
            rows.append(f"| {label} | NOT exact: document {wrong}, token {k}: {reference[wrong][k:k + 3]} wanted, "
                        f"{got[k:k + 3]} given, near {context!r} | - | - |")
            print(rows[-1], flush=True)
            continue
        rates[name] = throughput(encode, docs, mb_docs, args.repeat)
        rows.append(f"| {label} | exact on all {len(docs):,} documents | {rates[name]:.1f} | "
                    f"{throughput(encode, paragraphs, mb_par, args.repeat):.1f} |")
        print(rows[-1], flush=True)
    machine = f"cpu{os.cpu_count()}"
    report = Path(args.report or ROOT / "benchmarks" / "results" / f"engines_{machine}_{time.strftime('%Y%m')}.md")
    lines = [f"# Exact BPE engines on PyPI vs gigatoken ({machine}, {time.strftime('%Y-%m-%d')})", "",
             f"`python benchmarks/bench_engines.py` on {Path(args.corpus).name} ({len(docs):,} documents, "
             f"{mb_docs:.1f} MB) with the tokenizer.json at {args.tokenizer}. Ids are compared with Hugging Face "
             f"tokenizers {_version('tokenizers')} on every document (special-token strings as plain text); "
             f"an exact engine is then timed on one thread, one call per document, best of {args.repeat}, "
             f"on the documents and on their {len(paragraphs):,} paragraphs ({mb_par:.1f} MB).", "",
             "| engine | ids vs tokenizers | MB/s, documents | MB/s, paragraphs |", "|---|---|---:|---:|", *rows]
    extra = cl100k_rows(args.repeat, docs, mb_docs)
    if extra:
        lines += ["", "## On cl100k_base, the encoding bpe-openai ships (one thread, MB/s on the documents)", "",
                  "| engine | MB/s |", "|---|---:|", *extra]
    faster = [n for n, r in rates.items() if n != "gigatoken" and r > rates.get("gigatoken", float("inf"))]
    lines += ["", "An engine is adopted only if exact, maintained and measurably faster than gigatoken: "
              + (f"exact and faster here: {', '.join(faster)}." if faster else "none of the others is.")]
    report.write_text("\n".join(lines) + "\n")
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
