"""The README's interop claims, checked with readers written here from the formats' public
descriptions, not with prep's own reader (pipeline.manifest.read_idx) nor the peers' code.

Assumptions (from Megatron-LM's `megatron/core/datasets/indexed_dataset.py` `_IndexReader` /
`IndexedDataset`, and NeMo's copy of the older `MMapIndexedDataset`, which read the same bytes):
  - `.idx`: 9-byte magic b"MMIDIDX\\x00\\x00", version `<Q` (1), dtype code `<B` from Megatron's
    DType enum (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16),
    sequence count `<Q`, document count `<Q`, then with no padding int32[sequence count] lengths,
    int64[sequence count] pointers (byte offsets into `.bin`), int64[document count] document
    indices (sequence index where each document starts, and the end; document count = docs + 1).
  - A sequence is `np.frombuffer(bin, dtype, count=length, offset=pointer)` of the `.bin`.
  - nanoGPT's train.py reads `np.memmap(path, dtype=np.uint16, mode="r")`: the file is one flat
    stream of uint16 ids, no header; prepare.py appends the EOT id after each document.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from loaders.cache import ArrayCache
from loaders.shards import TokenShards
from pipeline.manifest import read_manifest
from tests.conftest import DEMO_TOKENIZER, demo_texts, write_jsonl, write_recipe

MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
                   7: np.float32, 8: np.uint16}


def megatron_read(prefix: Path) -> tuple[np.dtype, list[np.ndarray]]:
    """An independent MMIDIDX v1 reader: (dtype, every sequence of `prefix.bin`, via `prefix.idx`)."""
    raw = Path(f"{prefix}.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack_from("<Q", raw, 9)
    assert version == 1
    dtype = np.dtype(MEGATRON_DTYPES[raw[17]])
    seq_count, doc_count = struct.unpack_from("<QQ", raw, 18)
    offset = 9 + 8 + 1 + 8 + 8
    lengths = np.frombuffer(raw, dtype=np.int32, count=seq_count, offset=offset)
    pointers = np.frombuffer(raw, dtype=np.int64, count=seq_count, offset=offset + lengths.nbytes)
    doc_idx = np.frombuffer(raw, dtype=np.int64, count=doc_count, offset=offset + lengths.nbytes + pointers.nbytes)
    assert offset + lengths.nbytes + pointers.nbytes + doc_idx.nbytes == len(raw)  # nothing else in the file
    # every sequence is one document: document_indices runs 0..S, so Megatron's GPTDataset, which
    # samples documents through it, sees each prep document as one
    assert doc_idx.tolist() == list(range(seq_count + 1))
    bin_buf = np.memmap(f"{prefix}.bin", dtype=np.uint8, mode="r")
    seqs = [np.frombuffer(bin_buf, dtype=dtype, count=int(n), offset=int(p)) for n, p in zip(lengths, pointers)]
    return dtype, seqs


def big_vocab_tokenizer(path: Path) -> Path:
    """70,001 ids: a dataset of it is int32 (Megatron's code 4)."""
    vocab = {f"w{i}": i for i in range(70_000)}
    vocab["<|endoftext|>"] = 70_000
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(path))
    return path


def build(tmp: Path, kind: str) -> Path:
    from pipeline.executor import tokenize
    from pipeline.recipe import Recipe

    if kind == "uint16":
        corpus, tokenizer = write_jsonl(tmp / "c.jsonl", demo_texts(600)), DEMO_TOKENIZER
    else:
        rng = np.random.default_rng(1)
        texts = [" ".join(f"w{i}" for i in rng.integers(0, 70_000, size=int(n))) for n in rng.integers(1, 60, 400)]
        texts.append("w69999 w65536 w65535 w0")  # ids either side of uint16's limit
        corpus, tokenizer = write_jsonl(tmp / "c.jsonl", texts), big_vocab_tokenizer(tmp / "big.json")
    recipe = write_recipe(tmp / "r.yaml", corpus=corpus, tokenizer=tokenizer, out=tmp / "out",
                          output__shard_tokens=3000, output__val_fraction=0.05)
    tokenize(Recipe.from_yaml(recipe), show_progress=False)
    return tmp / "out"


@pytest.fixture(scope="module", params=["uint16", "int32"])
def dataset(request, tmp_path_factory):
    out = build(tmp_path_factory.mktemp(f"interop_{request.param}"), request.param)
    m = read_manifest(out)
    assert m.dtype == request.param and len(m.splits["train"].shards) >= 3 and m.splits["val"].num_docs
    return out


def loader_docs(out: Path, split: str) -> list[np.ndarray]:
    """Every document of `split` as prep's loader reads it (TokenShards: manifest + doc index + preadv)."""
    shards = TokenShards(out, split)
    index = shards.doc_index(ArrayCache(None))
    starts, lengths = index["starts"], index["lengths"]
    buf = np.zeros(int(lengths.sum()), dtype=shards.dtype)
    shards.read_into(starts[:-1], lengths, buf, starts[:-1])
    return [buf[int(s):int(s) + int(n)] for s, n in zip(starts[:-1], lengths)]


def test_megatron_reader_reads_every_document_exactly(dataset):
    m = read_manifest(dataset)
    code = {"uint16": 8, "int32": 4}[m.dtype]
    for split, info in m.splits.items():
        mine: list[np.ndarray] = []
        for shard in info.shards:
            prefix = dataset / split / shard.name
            assert Path(f"{prefix}.idx").read_bytes()[17] == code
            dtype, seqs = megatron_read(prefix)
            assert dtype == np.dtype(m.dtype) and len(seqs) == shard.num_docs
            mine += seqs
        theirs = loader_docs(dataset, split)
        assert len(mine) == len(theirs) == info.num_docs
        for a, b in zip(mine, theirs):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        eos = m.tokenizer["eos_id"]
        assert all(d.size and d[-1] == eos for d in mine)  # boundary eos: every document ends with it


def test_bin_is_the_flat_token_stream_and_cat_is_a_nanogpt_file(dataset, tmp_path):
    m = read_manifest(dataset)
    for split in m.splits:
        cat = tmp_path / f"{split}.bin"
        with open(cat, "wb") as f:  # `cat DIR/split/*.bin > split.bin`, in name order as the shell globs
            for p in sorted((dataset / split).glob("*.bin")):
                f.write(p.read_bytes())
        stream = np.concatenate(loader_docs(dataset, split))
        # no header, no padding between documents: the file is exactly the ids, little-endian
        assert cat.stat().st_size == stream.size * np.dtype(m.dtype).itemsize
        assert cat.read_bytes() == stream.astype(np.dtype(m.dtype).newbyteorder("<")).tobytes()
        if m.dtype == "uint16":  # what nanoGPT's train.py does with train.bin
            data = np.memmap(cat, dtype=np.uint16, mode="r")
            assert np.array_equal(data, stream)
        else:  # nanoGPT's hard-coded uint16 would read each int32 id as two: the README says to pass int32
            assert np.array_equal(np.memmap(cat, dtype=np.int32, mode="r"), stream)
            assert int(stream.max()) >= 1 << 16


def test_int32_ids_above_uint16_survive(dataset):
    m = read_manifest(dataset)
    if m.dtype != "int32":
        pytest.skip("int32 only")
    docs = [d for split, info in m.splits.items() for shard in info.shards
            for d in megatron_read(dataset / split / shard.name)[1]]
    assert any(d.tolist() == [69999, 65536, 65535, 0, 70000] for d in docs)
