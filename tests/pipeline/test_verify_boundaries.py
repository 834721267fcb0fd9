"""`prep verify`'s boundary check (pipeline/verify_boundaries.py): an `.idx` edited to stay
self-consistent (offsets the running sum of lengths, the same document count, ending at the `.bin`'s
token count) passed every check while documents merged and split; each document's boundary id
(eos | bos | both) finds it. And no false alarm on what prep legitimately writes: empty texts,
documents longer than a shard, filtered and deduplicated ones, the val split."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import pipeline.verify as verify_mod
from pipeline.cli import app
from pipeline.manifest import Manifest, SplitInfo, read_idx, read_manifest, write_idx, write_manifest
from pipeline.shards import ShardWriter
from pipeline.verify import verify_dataset
from tests.conftest import DEMO_TOKENIZER, demo_texts, write_jsonl, write_recipe

runner = CliRunner()


def problems(root, level="full"):
    return verify_dataset(root, level).problems


def only(found, path, *fragments):
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}: "), found
    for frag in fragments:
        assert frag in found[0], (frag, found[0])


def merge_and_split(idx, dtype, merge: int, split: int, at: int = 1):
    """Documents `merge` and `merge + 1` become one and document `split` (> merge + 1) becomes two
    (its first `at` tokens, then the rest): the count, the total and the offsets all stay consistent."""
    _, lengths, _ = read_idx(idx, mmap=False)
    lens = lengths.astype(np.int64).tolist()
    assert lens[split] > at
    new = lens[:merge] + [lens[merge] + lens[merge + 1]] + lens[merge + 2:split] + [at, lens[split] - at] \
        + lens[split + 1:]
    assert len(new) == len(lens) and sum(new) == sum(lens)
    write_idx(idx, np.array(new), dtype)


def tokenize_with(tmp_path, boundary: str):
    """A real run with everything that could leave a document without its boundary id: an empty text,
    a whitespace-only one, a document longer than shard_tokens, a min_chars filter, exact dedup and
    a val split."""
    from pipeline.executor import tokenize
    from pipeline.recipe import Recipe

    texts = demo_texts(300)
    texts[5] = ""
    texts[6] = "   "
    texts[7] = " ".join(texts[:200])  # ~ tens of thousands of tokens: over shard_tokens, a shard of its own
    texts[8] = "x"                    # under min_chars: dropped
    texts[20] = texts[10]             # a duplicate: dropped
    corpus = write_jsonl(tmp_path / "c.jsonl", texts)
    recipe = write_recipe(tmp_path / "r.yaml", corpus=corpus, tokenizer=DEMO_TOKENIZER, out=tmp_path / "out",
                          tokenizer__boundary=boundary, tokenizer__bos_token="<|endoftext|>",
                          source__min_chars=2, dedup="exact", output__shard_tokens=5000)
    tokenize(Recipe.from_yaml(recipe), show_progress=False)
    m = read_manifest(tmp_path / "out")
    assert m.tokenizer["boundary"] == boundary and m.skipped.get("duplicate") == 1, m.skipped
    assert max(s.num_tokens for s in m.splits["train"].shards) > 5000  # the long document
    return tmp_path / "out", m


@pytest.mark.parametrize("boundary", ["eos", "bos", "both", "none"])
def test_real_dataset_passes_and_an_edited_index_does_not(tmp_path, boundary):
    out, m = tokenize_with(tmp_path, boundary)
    assert problems(out) == []
    shard = next(s for s in m.splits["train"].shards if s.num_docs >= 8)
    idx = out / "train" / f"{shard.name}.idx"
    if boundary == "none":  # no boundary token: an empty document is what a merge and split leaves
        _, lengths, _ = read_idx(idx, mmap=False)
        lens = lengths.astype(np.int64)
        lens[3] += lens[4]
        lens[4] = 0
        write_idx(idx, lens, m.np_dtype)
        assert problems(out, "sizes") == []
        only(problems(out, "index"), idx, "document 4 has length 0", "documents merged or split")
        return
    merge_and_split(idx, m.np_dtype, merge=2, split=5, at=2)
    assert problems(out, "index") == []  # the index is self-consistent: only the tokens tell
    eos = m.tokenizer["eos_id"]
    # new document 4 is old 5's first two tokens: it starts right (bos) but ends wrong (eos, both);
    # new 5, the rest of old 5, starts wrong (bos)
    doc, what = (5, "starts") if boundary == "bos" else (4, "ends")
    only(problems(out), idx, f"document {doc} {what} with token id", f"boundary: {boundary} puts at every",
         "documents merged or split")
    if boundary == "eos":
        assert f"not the EOS id {eos}" in problems(out)[0]


def test_cli_line_names_shard_document_and_expected_id(tmp_path):
    out, m = tokenize_with(tmp_path, "eos")
    shard = m.splits["train"].shards[0]
    idx = out / "train" / f"{shard.name}.idx"
    _, lengths, _ = read_idx(idx, mmap=False)
    lens = lengths.astype(np.int64)
    lens[0] += 1  # a boundary moved by one token
    lens[1] -= 1
    write_idx(idx, lens, m.np_dtype)
    r = runner.invoke(app, ["verify", str(out), "--no-progress"])
    assert r.exit_code == 1, r.output
    line = r.output.splitlines()[0]
    assert line.startswith(f"{idx}: document 0 ends with token id ") and f"not the EOS id {m.tokenizer['eos_id']}" \
        in line, r.output
    r = runner.invoke(app, ["inspect", str(out), "--docs", "1"])  # the shard inspect decodes: checked the same
    assert r.exit_code == 1 and "document 0 ends with token id" in r.output and "--- train/" not in r.output


def test_changed_bin_is_blamed_on_the_bin(tmp_path):
    """Where the .bin's sha256 differs, the .bin changed: the boundary line names it, not the index."""
    out, m = tokenize_with(tmp_path, "eos")
    b = out / "train" / f"{m.splits['train'].shards[0].name}.bin"
    _, lengths, _ = read_idx(b.with_suffix(".idx"), mmap=False)
    data = np.fromfile(b, dtype=m.np_dtype)
    data[int(lengths[0]) - 1] = m.tokenizer["eos_id"] + 1  # document 0's EOS overwritten
    data.tofile(b)
    found = problems(out)
    assert len(found) == 2 and all(p.startswith(f"{b}: ") for p in found), found
    assert "sha256" in found[0] and "document 0 ends with token id" in found[1]


# -- synthetic shards: small read blocks and index chunks, so edges fall across both ---------------
def synthetic_dataset(root, boundary: str, bos=1, eos=2, vocab=50, n=60, dtype=np.uint16):
    rng = np.random.default_rng(1)
    docs = []
    for length in rng.integers(1, 12, size=n):
        body = rng.integers(3, vocab, size=int(length))
        docs.append(np.concatenate([[bos] if boundary in ("bos", "both") else [], body,
                                    [eos] if boundary in ("eos", "both") else []]).astype(dtype))
    with ShardWriter(root / "train", "shard-000000", np.dtype(dtype)) as w:
        w.add_documents(np.concatenate(docs), np.array([len(d) for d in docs]))
    tok = {"name": "synthetic", "sha256": "ab" * 32, "boundary": boundary, "bos_id": bos, "eos_id": eos}
    write_manifest(root, Manifest(dtype=np.dtype(dtype).name, vocab_size=vocab, tokenizer=tok,
                                  splits={"train": SplitInfo(w.info.num_docs, w.info.num_tokens, (w.info,))}))
    return root / "train" / "shard-000000.idx"


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(verify_mod, "INDEX_CHUNK", 7)  # 60 documents: 9 index chunks
    monkeypatch.setattr(verify_mod, "READ_BLOCK", 16)  # 8 uint16 tokens per read: edges in every block


@pytest.mark.parametrize("boundary", ["eos", "bos", "both"])
def test_edges_across_blocks_and_chunks(tmp_path, small_blocks, boundary):
    idx = synthetic_dataset(tmp_path, boundary)
    assert problems(tmp_path) == []
    merge_and_split(idx, np.uint16, merge=40, split=50, at=2)
    found = problems(tmp_path)
    doc = 50 if boundary == "bos" else 49  # old document 50 is now 49 (its first 2 tokens) and 50
    only(found, idx, f"document {doc} {'starts' if boundary == 'bos' else 'ends'} with token id")


def test_count_of_wrong_edges(tmp_path, small_blocks):
    idx = synthetic_dataset(tmp_path, "eos")
    _, lengths, _ = read_idx(idx, mmap=False)
    lens = lengths.astype(np.int64)
    lens[10] += 1   # documents 10 and 20 each take one token of the next: 2 wrong ends
    lens[11] -= 1
    lens[20] += 1
    lens[21] -= 1
    assert lens.min() > 0
    write_idx(idx, lens, np.uint16)
    only(problems(tmp_path), idx, "document 10 ends with token id", "(1 more document edges are wrong too)")


@pytest.mark.parametrize("field, value, fragment", [
    ("boundary", "eso", "tokenizer.boundary is 'eso', not one of eos, bos, both, none"),
    ("eos_id", None, "tokenizer.eos_id is None, not a token id below the vocabulary size 50"),
    ("eos_id", 50, "tokenizer.eos_id is 50"),
    ("eos_id", "2", "tokenizer.eos_id is '2'"),
    ("boundary", ["eos"], "tokenizer.boundary is ['eos'], not one of"),  # unhashable: was a TypeError
])
def test_broken_boundary_fields_are_a_manifest_problem(tmp_path, field, value, fragment):
    synthetic_dataset(tmp_path, "eos")
    path = tmp_path / "manifest.json"
    data = json.loads(path.read_text())
    data["tokenizer"][field] = value
    path.write_text(json.dumps(data))
    only(problems(tmp_path, "sizes"), path, fragment)


def test_unused_boundary_id_may_be_missing(tmp_path):
    """boundary: eos needs no BOS id (a tokenizer without one records null)."""
    synthetic_dataset(tmp_path, "eos")
    path = tmp_path / "manifest.json"
    data = json.loads(path.read_text())
    data["tokenizer"]["bos_id"] = None
    path.write_text(json.dumps(data))
    assert problems(tmp_path) == []


def test_no_boundary_recorded_is_a_note(tmp_path):
    synthetic_dataset(tmp_path, "eos")
    path = tmp_path / "manifest.json"
    data = json.loads(path.read_text())
    del data["tokenizer"]["boundary"]
    path.write_text(json.dumps(data))
    report = verify_dataset(tmp_path)
    assert report.ok and report.notes == ["the manifest records no tokenizer.boundary: document boundaries were "
                                          "not checked"], report.notes
