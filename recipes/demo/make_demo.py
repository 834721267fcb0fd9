"""Regenerate the offline demo corpus and its tokenizer (both are committed; this documents how).

    python recipes/demo/make_demo.py

corpus.jsonl: 2,000 English-like documents from a fixed seed (plus unicode, code, whitespace runs,
an empty document and one mentioning <|endoftext|>), ~1 MB. tokenizer.json: a byte-level BPE with
a small vocabulary (at most 4,096 tokens) trained on it with `tokenizers` (GPT-2 style, EOS <|endoftext|>).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

__all__ = ["make_documents", "train_tokenizer"]

HERE = Path(__file__).parent
SUBJECTS = ["the model", "a tokenizer", "the loader", "our pipeline", "each worker", "the shard", "the GPU",
            "a researcher", "the optimizer", "the dataset", "every process", "the index"]
VERBS = ["reads", "writes", "encodes", "splits", "packs", "shuffles", "verifies", "streams", "maps", "merges"]
OBJECTS = ["the corpus", "a batch of documents", "sixteen thousand tokens", "the manifest", "memory-mapped files",
           "the offsets", "a checksum", "the validation split", "long documents", "compressed JSON lines"]
TAILS = ["quickly", "in order", "without copying", "twice", "on every rank", "at 3.5 GB/s", "before training",
         "after a crash", "deterministically", "in 42 ms"]
EXTRAS = ["Café déjà vu — naïve façade.", "数据 处理 流水线", "Emoji: 🚀🔥✨", "x = [i ** 2 for i in range(10)]",
          "Tabs\tand  double  spaces", "Numbers 1234567890 and 3.14159", "URL https://example.com/a?b=c",
          "ALL CAPS SENTENCE HERE.", "Привет, мир!", "    indented line"]


def make_documents(n: int = 2000, seed: int = 2357) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        paras = []
        for _ in range(rng.randint(1, 4)):
            sents = []
            for _ in range(rng.randint(1, 8)):
                s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."
                sents.append(s[0].upper() + s[1:])
                if rng.random() < 0.1:
                    sents.append(rng.choice(EXTRAS))
            paras.append(" ".join(sents))
        docs.append("\n\n".join(paras))
    docs[7] = ""  # an empty document: counted in the manifest, not written
    docs[11] = "A document that mentions <|endoftext|> as plain text."
    return docs


def train_tokenizer(texts: list[str], vocab_size: int = 4096):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


if __name__ == "__main__":
    docs = make_documents()
    with open(HERE / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "text": d}, ensure_ascii=False) + "\n")
    train_tokenizer(docs).save(str(HERE / "tokenizer.json"))
    print(f"wrote {len(docs)} documents and a tokenizer to {HERE}")
