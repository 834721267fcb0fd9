"""Tokenizer layouts beyond GPT-2's through prep: the fast engine prep proves (backend auto) against
Hugging Face `tokenizers` (backend hf, what prep ran before the layout was supported), same corpus
and cores.

    python benchmarks/bench_layouts.py [--layout llama2|gemma|gemma-ws|qwen25|smollm|deepseek-v3] [--tokenizer PATH] [--vocab N]

Without --tokenizer (model hubs are often unreachable), a tokenizer.json of the layout is trained on
the corpus with `tokenizers`:
- llama2: SentencePiece-style BPE with byte_fallback, <unk> <s> </s> then the 256 <0xNN> byte tokens,
  Llama 2's Prepend("▁") + Replace(" ", "▁") normalizer and no pre-tokenizer (Mistral 7B v0.1 alike).
  (Trained with a Metaspace pre-tokenizer that splits words, minutes faster than on whole documents;
  the merges then run on whole documents as Llama 2's do.)
- gemma: the same BPE, Gemma's Replace(" ", "▁") normalizer (no "▁" prefix) with its Split(" ")
  pre-tokenizer behind it (a no-op), <pad> <eos> <bos> <unk>, <start_of_turn>/<end_of_turn> special.
- gemma-ws: gemma, plus "\n", "\n\n" and "\t" as non-special added tokens: every newline and tab of a
  document is then cut out in front of the engine (the cutter's worst case here: docs.jsonl is code
  and prose, ~1 newline per 40 characters). Whether real Gemma files mark them so is not checked.
- llama3: Llama 3's byte-level BPE (its Split regex + ByteLevel without its own regex), the vocabulary
  dense from 0, then its 256 special tokens past it (<|begin_of_text|>, <|eot_id|>, the reserved ones).
- qwen25: Qwen 2's byte-level BPE (its Split regex + ByteLevel, NFC normalizer), the vocabulary dense
  from 0, then Qwen 2.5's and Qwen 3's 26 added tokens past it: 14 special, 12 not (<tool_call>,
  <|fim_prefix|>, <think>, ...), which `tokenizers` cuts out of documents.
- smollm: SmolLM's and StarCoder 2's byte-level BPE: Digits(individual_digits) + ByteLevel, <|endoftext|>
  first (id 0), as `tokenizers` trains them. One regex does both steps (fast_bpe._digits_then_gpt2),
  so tiktoken runs it; gigatoken has no pre-tokenizer for it.
- deepseek-v3: DeepSeek V3's and R1's three Splits in sequence + ByteLevel, its BOS/EOS/pad first (ids
  0-2), <｜User｜>, <｜Assistant｜>, <think>, </think> as non-special added tokens past the vocabulary.
  gigatoken's "deepseek_v3" pre-tokenizer runs it from ranks (ids shifted back by an id map).

1. Ids: every document, prep's engine against `tokenizers`, stopping at the first difference.
2. One core: each engine encoding every document, one call each (best of --repeat).
3. End to end: `prep tokenize` with backend auto and hf, interleaved, best of --repeat, warm proof
   cache; the shards' sha256 must match.
Writes benchmarks/results/layouts_<layout>_<machine>_<yyyymm>.md.
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

from pipeline.fast_bpe import DEEPSEEK_V3_SPLITS, LLAMA3_PATTERN  # noqa: E402

LLAMA2_SPECIALS = ("<unk>", "<s>", "</s>")
GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")
QWEN25_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                  "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
QWEN25_PLAIN = ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")  # Qwen 2's Split regex
DEEPSEEK_V3_SPECIAL = ("<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
                       "<\uff5c\u2581pad\u2581\uff5c>")
DEEPSEEK_V3_PLAIN = ("<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>", "<think>", "</think>")
# Llama 3's 256 special tokens past its 128,000-token vocabulary (the names of the released file)
LLAMA3_SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
                  *(f"<|reserved_special_token_{i}|>" for i in range(3, 248)))
LAYOUTS = ("llama2", "gemma", "gemma-ws", "llama3", "qwen25", "smollm", "deepseek-v3")


def _added(tid: int, content: str, special: bool) -> dict:
    return {"id": tid, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def train_sentencepiece_layout(texts: list[str], vocab_size: int, layout: str) -> str:
    """A Llama-2- or Gemma-layout tokenizer.json trained on `texts` (see the module docstring)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    specials = LLAMA2_SPECIALS if layout == "llama2" else GEMMA_SPECIALS
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 256, show_progress=False, special_tokens=list(specials),
                                  limit_alphabet=1000)
    tok.train_from_iterator(texts, trainer)
    d = json.loads(tok.to_str())
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    learned = [t for t, _ in sorted(d["model"]["vocab"].items(), key=lambda kv: kv[1])
               if t not in specials and t not in byte_tokens]  # a corpus may hold "<0x41>" as text
    d["model"]["vocab"] = vocab = {t: i for i, t in enumerate([*specials, *byte_tokens, *learned])}
    for t in d["added_tokens"]:
        t["id"] = vocab[t["content"]]
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    if layout == "llama2":
        d["pre_tokenizer"] = None
        d["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, replace]}
    else:
        d["normalizer"] = replace
        d["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                              "invert": False}
        extra = [("<start_of_turn>", True), ("<end_of_turn>", True)]
        extra += [("\n", False), ("\n\n", False), ("\t", False)] if layout == "gemma-ws" else []
        for content, special in extra:
            if content not in vocab:
                vocab[content] = len(vocab)
            d["added_tokens"].append(_added(vocab[content], content, special))
    return json.dumps(d, ensure_ascii=False)


def train_byte_level_layout(texts: list[str], vocab_size: int, layout: str) -> str:
    """A Llama-3-, Qwen-2.5-, SmolLM- or DeepSeek-V3-layout tokenizer.json trained on `texts` (see the module
    docstring): special tokens the trainer puts first, then added tokens (content, special) past the
    vocabulary, as the released files have them."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=layout == "smollm")
    if layout == "llama3":
        splits, first, past = [LLAMA3_PATTERN], [], [(t, True) for t in LLAMA3_SPECIAL]
    elif layout == "qwen25":
        tok.normalizer = normalizers.NFC()
        splits, first, past = [QWEN2_PATTERN], [], [(t, t in QWEN25_SPECIAL) for t in QWEN25_SPECIAL + QWEN25_PLAIN]
    elif layout == "smollm":
        splits, first, past = [], ["<|endoftext|>"], []
    else:
        splits, first, past = list(DEEPSEEK_V3_SPLITS), list(DEEPSEEK_V3_SPECIAL), [(t, False) for t in DEEPSEEK_V3_PLAIN]
    steps = [pre_tokenizers.Split(Regex(r), "isolated") for r in splits]
    if layout == "smollm":
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([*steps, byte_level])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=first,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    d = json.loads(tok.to_str())
    n = len(d["model"]["vocab"])
    d["added_tokens"] += [_added(n + i, content, special) for i, (content, special) in enumerate(past)]
    return json.dumps(d, ensure_ascii=False)


def engines(tokenizer: str):
    """(tokenizers, prep's engine for backend auto) encoders of one text -> list of ids, special-token
    strings as text; and the engine's name."""
    from pipeline import tokenizers as ptok
    from pipeline.recipe import TokenizerConfig
    spec = ptok.load_tokenizer(TokenizerConfig(path=tokenizer, boundary="none"))
    if spec.backend == "hf":
        raise SystemExit(f"prep runs this tokenizer on tokenizers itself: {spec.backend_reason}")
    hf = ptok._hf_tokenizer(spec.definition)
    fast = spec.build_encoder()._encode_one
    label = f"{spec.backend}{' from ranks' if type(spec.engine_data).__name__ == 'GigatokenRanks' else ''}"
    return (lambda t: hf.encode(t, add_special_tokens=False).ids), (lambda t: fast(t).tolist()), label


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
    ap.add_argument("--layout", choices=LAYOUTS, default="llama2", help="the layout to train (see above)")
    ap.add_argument("--tokenizer", default="", help="a tokenizer.json to run instead of a trained one")
    ap.add_argument("--vocab", type=int, default=32000, help="vocabulary of the trained tokenizer (Llama 2: 32000)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--report", default="")
    args = ap.parse_args()
    texts = load_texts(args.corpus)
    nbytes = sum(len(t.encode()) for t in texts)
    tmp = tempfile.mkdtemp(prefix="bench_layouts_")
    try:
        if args.tokenizer:
            tokenizer, origin = args.tokenizer, f"`{args.tokenizer}`"
        else:
            t0 = time.perf_counter()
            tokenizer = os.path.join(tmp, "tokenizer.json")
            made = (train_byte_level_layout(texts, args.vocab, args.layout)
                    if args.layout in ("llama3", "qwen25", "smollm", "deepseek-v3")
                    else train_sentencepiece_layout(texts, args.vocab, args.layout))
            Path(tokenizer).write_text(made, encoding="utf-8")
            origin = (f"trained here on the corpus, {args.layout} layout, {args.vocab} tokens "
                      f"({time.perf_counter() - t0:.0f} s)")
        print(f"tokenizer: {origin}", flush=True)
        os.environ["PREP_CACHE_DIR"] = os.path.join(tmp, "prep-cache")
        hf, fast, engine = engines(tokenizer)
        for i, t in enumerate(texts):
            if hf(t) != fast(t):
                raise SystemExit(f"document {i}: {engine}'s ids differ from tokenizers'; nothing timed")
        print(f"ids: identical on all {len(texts)} documents ({engine})", flush=True)
        rates = {name: throughput(fn, texts, nbytes / 1e6, args.repeat) for name, fn in (("tokenizers", hf),
                                                                                        (engine, fast))}
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
        # a given tokenizer is named by its directory (assets/gpt2/tokenizer.json: gpt2), not --layout's default
        label = Path(args.tokenizer).resolve().parent.name if args.tokenizer else args.layout
        lines = [f"# The {label} tokenizer layout through prep, {machine_label(args.workers)}, "
                 f"{time.strftime('%Y-%m-%d')}", "",
                 f"`python benchmarks/bench_layouts.py{' --layout ' + args.layout if not args.tokenizer else ''} "
                 f"--workers {args.workers} --repeat {args.repeat}"
                 f"{' --vocab ' + str(args.vocab) if not args.tokenizer else ' --tokenizer ' + args.tokenizer}"
                 f"{' --corpus ' + args.corpus if args.corpus != str(DEFAULT_CORPUS) else ''}`", "",
                 f"Corpus: `{Path(args.corpus).name}`, {len(texts)} documents, {nbytes / 1e6:.1f} MB of text. "
                 f"Tokenizer: {origin}. The ids of prep's engine ({engine}) equal `tokenizers`' on every document.", "",
                 "| engine, one core, one call per document | MB/s |", "|---|---:|",
                 *(f"| {k} | {v:.2f} |" for k, v in rates.items()), "",
                 f"| `prep tokenize`, {args.workers} workers, best of {args.repeat} (interleaved) | s | MB/s | backend |",
                 "|---|---:|---:|---|",
                 *(f"| backend {k} | {best[k]:.2f} | {nbytes / best[k] / 1e6:.1f} | {shas[k][1]} |" for k in best), "",
                 f"auto vs hf: {best['hf'] / best['auto']:.2f}x; shards byte-identical: {'yes' if same else 'NO'}.", ""]
        report = args.report or str(ROOT / "benchmarks" / "results" /
                                    f"layouts_{label}_{machine_label(args.workers)}_{time.strftime('%Y%m')}.md")
        Path(report).write_text("\n".join(lines))
        print("\n".join(lines))
        if not same:
            raise SystemExit("the shards differ between backends")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
